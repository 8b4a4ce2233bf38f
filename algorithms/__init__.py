"""Federated algorithms behind one `Strategy` interface, registered by name."""

from __future__ import annotations

from ._aggregate import average_per_cluster, weighted_mean
from .base import (
    ClientInfo,
    ClientUpdate,
    ServerState,
    Strategy,
    TaskPlan,
    UpdateStatus,
)
from .registry import algorithms, make, parameters

__all__ = [
    "ClientInfo",
    "ClientUpdate",
    "ServerState",
    "Strategy",
    "TaskPlan",
    "UpdateStatus",
    "algorithms",
    "average_per_cluster",
    "make",
    "parameters",
    "weighted_mean",
]
