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
    ImportancePolicy,
    LossReportingPolicy,
    MixturePolicy,
    PeerScore,
    ProbePlan,
    SampleLossProbe,
    ServerState,
    Strategy,
    TaskPlan,
    Want,
    heaviest,
    is_mixture,
    lowest,
    reports_importance,
    reports_losses,
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
    "ImportancePolicy",
    "LossReportingPolicy",
    "MixturePolicy",
    "PeerScore",
    "ProbePlan",
    "SampleLossProbe",
    "ServerState",
    "Status",
    "Strategy",
    "TaskPlan",
    "Want",
    "algorithms",
    "average_per_cluster",
    "counts_in_mean",
    "heaviest",
    "identity_policies",
    "is_mixture",
    "lowest",
    "make",
    "make_policy",
    "parameters",
    "reports_importance",
    "reports_losses",
    "sum_per_cluster",
    "weighted_mean",
]
