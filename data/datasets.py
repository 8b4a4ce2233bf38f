"""Datasets as in-memory tensors, loaded once per process.

Only what ships with an installed package or sits in a folder the user names is
read: nothing is downloaded at run time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from clusterfed.errors import ConfigError


@dataclass(frozen=True)
class Dataset:
    """Images `x` (N×C×H×W, float32 in [0, 1]) and integer labels `y`."""

    name: str
    x: torch.Tensor
    y: torch.Tensor
    n_classes: int

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x.shape[1:])

    @property
    def labels(self) -> np.ndarray:
        return self.y.numpy()

    def __len__(self) -> int:
        return int(self.y.shape[0])


def _digits(root: str | None) -> Dataset:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = torch.tensor(bunch.images / 16.0, dtype=torch.float32).unsqueeze(1)
    y = torch.tensor(bunch.target, dtype=torch.int64)
    return Dataset("digits", x, y, n_classes=10)


DATASETS: dict[str, Callable[[str | None], Dataset]] = {"digits": _digits}


@lru_cache(maxsize=4)
def load_dataset(name: str, root: str | None = None) -> Dataset:
    """The dataset called `name`; `root` is the folder for file-based ones."""
    loader = DATASETS.get(name)
    if loader is None:
        raise ConfigError(
            f"unknown dataset {name!r}; known: {', '.join(sorted(DATASETS))}"
        )
    return loader(root)
