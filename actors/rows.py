"""A client's samples as the trainer reads them: rows of a shared tensor
(`Rows`), and (sample, label) pairs for Opacus' data loader (`Pairs`)."""

from __future__ import annotations

import torch
from torch.utils.data import Dataset


class Rows:
    """A client's samples: rows `index` of `source`, gathered when read.

    `source` may be the whole dataset, shared by every client of a process:
    a local worker's clients then read the images the process forked with
    instead of each holding a private copy of its own (with 1,000
    Fashion-MNIST clients, the dataset once more in every worker's memory).
    Without `index`, the rows are all of `source` (a rotated client's own
    images).
    """

    def __init__(self, source: torch.Tensor, index: torch.Tensor | None = None):
        self.source = source
        self.index = index

    def __len__(self) -> int:
        return len(self.source if self.index is None else self.index)

    def __getitem__(self, rows: torch.Tensor | int) -> torch.Tensor:
        return self.source[rows if self.index is None else self.index[rows]]

    def gather(self) -> torch.Tensor:
        return self.source if self.index is None else self.source[self.index]


class Pairs(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """(sample, label) pairs for Opacus' Poisson data loader."""

    def __init__(self, x: Rows, y: torch.Tensor) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i], self.y[i]
