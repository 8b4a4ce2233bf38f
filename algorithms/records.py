"""What a strategy is handed and hands back: the clients it knows, the plans
it makes, the updates it gets, the state it keeps (`ServerState`), and the
data descriptions it may ask for. Plain frozen dataclasses; the hooks that
use them are in `base.py`."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Self

import numpy as np

from clusterfed.types import ClientId, ClusterId, ModelKey, Status

Want = Literal["class_histogram", "data_subspace"]
"""A data description a strategy may ask clients for (see `Strategy.wants`):
CAFA's class histogram, or PACFL's data subspace (the first left singular
vectors of the client's flattened training data)."""


@dataclass(frozen=True)
class SubspaceRequest:
    """What a client computes for a "data_subspace" description.

    Attributes:
        n_basis: p, the left singular vectors sent (per class with
            `per_class`).
        per_class: one SVD per class the client holds, the blocks stacked;
            False: one SVD of all its training data.
    """

    n_basis: int = 3
    per_class: bool = True


@dataclass(frozen=True)
class ClientInfo:
    """What the server knows of a client: never its data, only its size.

    `n_test` (its held-out samples) is what the server times a probe of the
    client by."""

    id: ClientId
    n_train: int
    joined_round: int = 0
    n_test: int = 0


@dataclass(frozen=True)
class TaskPlan:
    """One client's task this round: the model(s) it receives, its settings.

    `models` maps cluster ids (or `GLOBAL`, for a model of no cluster) to
    flat weight vectors; a client trains the only one, or chooses among
    several when its policy does (IFCA-like).
    `overrides` replaces fields of the run's `TrainConfig` for this task only,
    e.g. `{"epochs": 5}` for a longer first round. With several models,
    `identity` names the `IdentityPolicy` the client runs to pick one (with
    `identity_params`), and `last_updates` gives it each cluster's last change.
    `mixture`: for a mixture policy (FedEM's), the client's weight of each
    model, in `models`' order.
    """

    client: ClientId
    models: Mapping[ModelKey, np.ndarray]
    overrides: Mapping[str, Any] = field(default_factory=dict)
    identity: str | None = None
    identity_params: Mapping[str, float | int | str | bool] = field(
        default_factory=dict
    )
    last_updates: Mapping[ModelKey, np.ndarray] = field(default_factory=dict)
    mixture: tuple[float, ...] | None = None


@dataclass(frozen=True)
class ProbePlan:
    """One client scores several models on its held-out split (model sharing).

    `models` maps the client whose model it is (its owner) to the weights. The
    server sends them in one probe task; the scores come back to the strategy
    on the owners' `ClientUpdate.peer_scores`.
    """

    client: ClientId
    models: Mapping[ClientId, np.ndarray]


@dataclass(frozen=True)
class PeerScore:
    """How a model did on one peer's held-out split of `n_samples` samples."""

    accuracy: float
    loss: float
    n_samples: int


@dataclass(frozen=True)
class ClientUpdate:
    """A client's outcome as the strategy sees it: data, never an exception.

    `base` is the model the client trained from and `delta` the change it
    uploaded; both are None unless `status` is "ok" (or "late", where the
    strategy may use a stale update). `peer_scores` holds, by evaluating
    client, the scores this update's model got in the round's probes (empty
    unless the strategy plans probes).
    """

    client: ClientId
    cluster: ModelKey  # the model it trained: a cluster's, or GLOBAL
    status: Status
    base: np.ndarray | None = None
    delta: np.ndarray | None = None
    n_samples: int = 0
    loss: float | None = None
    reason: str | None = None
    peer_scores: Mapping[ClientId, PeerScore] = field(default_factory=dict)
    importance: tuple[float, ...] | None = None
    """An importance policy's weights (FedSoft's), or a mixture policy's new
    mixture weights (FedEM's), one per model sent in the task's order,
    summing to 1; None for any other task."""
    losses: tuple[float, ...] | None = None
    """A loss-reporting policy's scores (FedDrift's): the mean training loss
    of each model sent, in the task's order, measured before training; None
    for any other task."""
    deltas: Mapping[ModelKey, np.ndarray] | None = None
    """A mixture policy's (FedEM's) change of every model sent, `delta`'s
    included; None for any other task."""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def cluster_id(self) -> ClusterId:
        """The cluster whose model it trained.

        Raises:
            ValueError: it trained the global model, which is no cluster's
                (only a strategy that sends it, DCFL, gets such an update:
                the server refuses an update of a model it did not send).
        """
        cluster = self.cluster
        if isinstance(cluster, str):  # GLOBAL, the one key that is no id
            raise ValueError(
                f"client {self.client}'s update is of the global model,"
                " which belongs to no cluster"
            )
        return cluster


@dataclass(frozen=True)
class ServerState:
    """Cluster models (flat float32 vectors) and the client → cluster map.

    The state every strategy keeps. A strategy that must remember more (a
    Dunn index, clients waiting to be placed, per-cluster losses) subclasses
    it as another frozen dataclass with typed fields.

    Attributes:
        models: each cluster's model.
        assignment: each client's cluster.
        centres: each cluster's last fold by a robust rule that starts the
            next fold from it (centred clipping's centre, `robust.py`;
            float64, before any server learning rate); empty under every
            other rule. Keyword-only, so subclasses' fields keep their order.
    """

    models: Mapping[ClusterId, np.ndarray]
    assignment: Mapping[ClientId, ClusterId]
    centres: Mapping[ClusterId, np.ndarray] = field(default_factory=dict, kw_only=True)

    def replace(self, **changes: Any) -> Self:
        """A copy of this state, of the same type, with `changes` applied."""
        return dataclasses.replace(self, **changes)

    @property
    def n_clusters(self) -> int:
        """Clusters that hold at least one client."""
        return len(set(self.assignment.values()))

    def largest_cluster(self) -> ClusterId:
        """The cluster with most clients (ties: lowest id); the lowest id if none."""
        sizes = dict.fromkeys(self.models, 0)
        for cluster in self.assignment.values():
            sizes[cluster] += 1
        return min(sizes, key=lambda k: (-sizes[k], k))
