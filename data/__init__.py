"""Datasets and partitioners; every partition keeps each client's true group."""

from __future__ import annotations

from .datasets import DATASETS, Dataset, load_dataset
from .partition import (
    ClientSplit,
    Partition,
    class_table,
    dirichlet,
    holdout,
    iid,
    iid_mix,
    shards,
)

__all__ = [
    "DATASETS",
    "ClientSplit",
    "Dataset",
    "Partition",
    "class_table",
    "dirichlet",
    "holdout",
    "iid",
    "iid_mix",
    "load_dataset",
    "shards",
]
