"""The `Strategy` interface: what a federated algorithm decides, and nothing else.

The server runs the loop (sending tasks, collecting replies, timing, faults);
a strategy only decides, through a handful of hooks, and never awaits, sleeps,
reads a clock or imports a runtime. Every clustered strategy keeps the same
state shape: cluster models plus an assignment client → cluster.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol

import numpy as np

from clusterfed.protocol import TrainConfig
from clusterfed.types import ClientId, ClusterId

UpdateStatus = Literal["ok", "late", "failed", "rejected"]
Want = Literal["class_histogram"]
"""A data description a strategy may ask clients for (see `Strategy.wants`)."""


@dataclass(frozen=True)
class ClientInfo:
    """What the server knows of a client: never its data, only its size."""

    id: ClientId
    n_train: int
    joined_round: int = 0


@dataclass(frozen=True)
class TaskPlan:
    """One client's task this round: the model(s) it receives, its settings.

    `models` maps cluster ids to flat weight vectors; a client trains the only
    one, or chooses among several when its policy does (IFCA-like).
    `overrides` replaces fields of the run's `TrainConfig` for this task only,
    e.g. `{"epochs": 5}` for a longer first round. With several models,
    `identity` names the `IdentityPolicy` the client runs to pick one (with
    `identity_params`), and `last_updates` gives it each cluster's last change.
    """

    client: ClientId
    models: Mapping[ClusterId, np.ndarray]
    overrides: Mapping[str, Any] = field(default_factory=dict)
    identity: str | None = None
    identity_params: Mapping[str, float | int | str | bool] = field(
        default_factory=dict
    )
    last_updates: Mapping[ClusterId, np.ndarray] = field(default_factory=dict)


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
    cluster: ClusterId
    status: UpdateStatus
    base: np.ndarray | None = None
    delta: np.ndarray | None = None
    n_samples: int = 0
    loss: float | None = None
    reason: str | None = None
    peer_scores: Mapping[ClientId, PeerScore] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True)
class ServerState:
    """Cluster models (flat float32 vectors) and the client → cluster map.

    `rng` is the strategy's own random stream (sampling, random inits), seeded
    from the scenario; `extra` holds whatever else a strategy must remember.
    """

    models: Mapping[ClusterId, np.ndarray]
    assignment: Mapping[ClientId, ClusterId]
    rng: np.random.Generator
    extra: Mapping[str, Any] = field(default_factory=dict)

    def replace(self, **changes: Any) -> ServerState:
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


class Strategy(ABC):
    """Base of every algorithm. Subclasses set `name` and implement `aggregate`.

    Hyperparameters are keyword-only `__init__` arguments with defaults; bad
    values raise `ValueError` naming the value.

    Optional hooks, all no-ops by default: `wants` + `on_describe` (clients
    describe their data once, only for a strategy that asks), `plan_probes`
    (model sharing between training and aggregation), `diagnostics` (what the
    strategy decided, for the results).
    """

    name: ClassVar[str]
    wants: ClassVar[tuple[Want, ...]] = ()
    """Data descriptions the server asks every client for, once, before the
    client's first round; the answers reach `on_describe`. Empty: clients
    send nothing about their data."""

    @property
    def initial_models(self) -> int:
        """How many independently initialised models the strategy starts from."""
        return 1

    def init_state(self, initial: np.ndarray, rng: np.random.Generator) -> ServerState:
        """The state before any client joins: one cluster holding `initial`."""
        return ServerState(models={ClusterId(0): initial}, assignment={}, rng=rng)

    def with_initial_models(
        self, state: ServerState, models: Sequence[np.ndarray]
    ) -> ServerState:
        """Called after `init_state` with `initial_models` fresh models (the
        first is `initial`) when a strategy asks for more than one."""
        return state

    def on_join(self, state: ServerState, client: ClientInfo) -> ServerState:
        """A client joined: by default it belongs to the lowest cluster id."""
        first = min(state.models)
        return state.replace(assignment={**state.assignment, client.id: first})

    def on_leave(self, state: ServerState, client: ClientId) -> ServerState:
        assignment = {k: v for k, v in state.assignment.items() if k != client}
        return state.replace(assignment=assignment)

    def train_config(self, base: TrainConfig) -> TrainConfig:
        """The training settings clients receive; variants add their extras."""
        return base

    def plan_round(
        self, state: ServerState, round: int, clients: Sequence[ClientInfo]
    ) -> list[TaskPlan]:
        """By default every available client trains its own cluster's model."""
        return [self.plan_for(state, c.id) for c in clients]

    @abstractmethod
    def aggregate(
        self, state: ServerState, round: int, updates: Sequence[ClientUpdate]
    ) -> ServerState:
        """Fold this round's updates into new cluster models (and assignment)."""

    def on_describe(
        self,
        state: ServerState,
        round: int,
        histograms: Mapping[ClientId, np.ndarray],
    ) -> ServerState:
        """Clients described their data (only if `wants` asks): the class
        histograms (training samples per class, int64) of the clients that
        answered at the start of `round`, in client order."""
        return state

    def plan_probes(
        self, state: ServerState, round: int, updates: Sequence[ClientUpdate]
    ) -> list[ProbePlan]:
        """After training, before `aggregate`: which client scores which models
        on its held-out split. The scores reach `aggregate` on the updates'
        `peer_scores`. By default nobody probes."""
        return []

    def diagnostics(self, state: ServerState) -> dict[str, Any]:
        """What the strategy decided, as plain JSON values, recorded with each
        round (`strategy` in rounds.jsonl). Never ground truth: a strategy
        does not know it."""
        return {}

    def model_for(
        self, state: ServerState, client: ClientId
    ) -> tuple[ClusterId, np.ndarray]:
        """The model a client is evaluated with: its cluster's."""
        cluster = state.assignment[client]
        return cluster, state.models[cluster]

    def plan_for(self, state: ServerState, client: ClientId) -> TaskPlan:
        cluster, weights = self.model_for(state, client)
        return TaskPlan(client=client, models={cluster: weights})


@dataclass(frozen=True)
class Candidate:
    """One model a client may pick: its cluster, weights and last change."""

    cluster: ClusterId
    weights: np.ndarray
    last_update: np.ndarray | None = None


class ClientProbe(Protocol):
    """What an identity policy may ask of the client's own data."""

    def loss(self, weights: np.ndarray) -> float:
        """Mean loss of `weights` over the client's training samples."""
        ...

    def batch_loss_and_gradient(
        self, weights: np.ndarray, round: int
    ) -> tuple[float, np.ndarray]:
        """Mean loss and its gradient (flat) on one mini-batch of the round."""
        ...


class IdentityPolicy(ABC):
    """A cluster-identity choice that runs inside the client actor.

    The server sends several candidate models and the policy's name; the
    client picks one with its own data and trains it. Subclasses set `name`;
    their keyword-only `__init__` arguments are the policy's parameters.
    """

    name: ClassVar[str]

    @abstractmethod
    def choose(
        self, probe: ClientProbe, candidates: Sequence[Candidate], round: int
    ) -> ClusterId:
        """The cluster whose model the client trains this round."""
