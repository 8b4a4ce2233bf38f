"""Federated algorithms behind one `Strategy` interface, registered by name."""

from __future__ import annotations

from clusterfed.types import Status

from ._aggregate import (
    ClusterSums,
    average_per_cluster,
    counts_in_mean,
    sum_per_cluster,
    weighted_mean,
)
from .base import (
    Candidate,
    ClientInfo,
    ClientProbe,
    ClientUpdate,
    IdentityPolicy,
    PeerScore,
    ProbePlan,
    ServerState,
    Strategy,
    TaskPlan,
    Want,
)
from .diagnostics import Diagnostics
from .registry import algorithms, identity_policies, make, make_policy, parameters

__all__ = [
    "Candidate",
    "ClientInfo",
    "ClientProbe",
    "ClientUpdate",
    "ClusterSums",
    "Diagnostics",
    "IdentityPolicy",
    "PeerScore",
    "ProbePlan",
    "ServerState",
    "Status",
    "Strategy",
    "TaskPlan",
    "Want",
    "algorithms",
    "average_per_cluster",
    "counts_in_mean",
    "identity_policies",
    "make",
    "make_policy",
    "parameters",
    "sum_per_cluster",
    "weighted_mean",
]
