"""The model families of the papers, in a registry by name."""

from __future__ import annotations

from .families import cnn, mlp
from .registry import MODELS, build_model, get_flat, n_parameters, set_flat

__all__ = [
    "MODELS",
    "build_model",
    "cnn",
    "get_flat",
    "mlp",
    "n_parameters",
    "set_flat",
]
