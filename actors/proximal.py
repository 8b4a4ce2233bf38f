"""Proximal pulls, added as gradients: FedProx's μ/2·‖w − w₀‖² and, per
anchor, FedSoft's c/2·‖w − a‖² enter a training step as their gradients
c·(w − a), added to what the backward pass left, outside autograd's graph
(one fused update per parameter instead of a squared distance over every
weight and its backward pass each step). `LocalTrainer` pulls both its
plain and its DP-SGD steps with them, and reads its probe gradient with
`grad_of`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

Pull = tuple[list[torch.Tensor], float]
"""An anchor as the parameters' shapes, and its coefficient."""


def shaped_like(params: Sequence[torch.Tensor], flat: np.ndarray) -> list[torch.Tensor]:
    """`flat` (in `get_flat`'s layout) cut into tensors shaped as `params`."""
    expected = sum(p.numel() for p in params)
    if flat.shape != (expected,):
        raise ValueError(f"an anchor of shape {flat.shape}, the model has {expected}")
    # Decoded tensors are read-only views of the message bytes.
    source = torch.from_numpy(np.array(flat, dtype=np.float32)).to(params[0].device)
    pieces, offset = [], 0
    for p in params:
        pieces.append(source[offset : offset + p.numel()].view_as(p))
        offset += p.numel()
    return pieces


def add_proximal_gradient(
    params: Sequence[torch.Tensor], start: Sequence[torch.Tensor], mu: float
) -> None:
    with torch.no_grad():
        for p, s in zip(params, start, strict=True):
            grad_of(p).add_(p - s, alpha=mu)


def grad_of(param: torch.Tensor) -> torch.Tensor:
    """The gradient a backward pass left on `param`."""
    if param.grad is None:
        # Every parameter takes part in the forward pass, so only a model
        # with a dead branch gets here.
        raise RuntimeError(f"no gradient on a parameter of shape {tuple(param.shape)}")
    return param.grad
