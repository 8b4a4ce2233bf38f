"""Models by name, built with a fixed seed, and their flat-vector layout."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from clusterfed.errors import ConfigError

from .families import cnn, mlp

MODELS: dict[str, Callable[..., nn.Module]] = {"cnn": cnn, "mlp": mlp}


def build_model(
    name: str,
    input_shape: Sequence[int],
    n_classes: int,
    *,
    seed: int | None = None,
    **params: Any,
) -> nn.Module:
    """Build model `name`; with `seed`, its initial weights are reproducible.

    Raises:
        ConfigError: an unknown name or a parameter the family does not take.
    """
    family = MODELS.get(name)
    if family is None:
        raise ConfigError(f"unknown model {name!r}; known: {', '.join(sorted(MODELS))}")
    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(seed)
        try:
            return family(input_shape, n_classes, **params)
        except TypeError as exc:
            raise ConfigError(f"model {name!r}: {exc}") from exc
        except ValueError as exc:
            raise ConfigError(f"model {name!r}: {exc}") from exc


def get_flat(model: nn.Module) -> np.ndarray:
    """The model's parameters as one float32 vector (a copy)."""
    vector = nn.utils.parameters_to_vector(model.parameters())
    # On a GPU the vector comes to the CPU here: messages are device-free.
    return vector.detach().cpu().numpy().astype(np.float32, copy=True)


def set_flat(model: nn.Module, weights: np.ndarray) -> None:
    """Load a flat vector produced by `get_flat` into `model`'s parameters."""
    expected = n_parameters(model)
    if weights.shape != (expected,):
        raise ValueError(f"expected {expected} weights, got shape {weights.shape}")
    # Decoded tensors are read-only views of the message bytes; torch wants
    # writable memory even to read from.
    source = torch.from_numpy(weights if weights.flags.writeable else weights.copy())
    with torch.no_grad():
        offset = 0
        for param in model.parameters():
            size = param.numel()
            param.copy_(source[offset : offset + size].view_as(param))
            offset += size


def n_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
