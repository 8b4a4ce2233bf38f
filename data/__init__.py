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
from .test_sets import class_shares, draw_test_set

__all__ = [
    "DATASETS",
    "ClientSplit",
    "Dataset",
    "Partition",
    "class_shares",
    "class_table",
    "dirichlet",
    "draw_test_set",
    "holdout",
    "iid",
    "iid_mix",
    "load_dataset",
    "shards",
]
