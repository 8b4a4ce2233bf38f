"""IFCA: K models broadcast, each client picks the one with the lowest loss.

Ghosh, Chung, Yin, Ramchandran, "An Efficient Framework for Clustered
Federated Learning", NeurIPS 2020 (IEEE Trans. Inf. Theory 68(12), 2022), in
its model-averaging form: every sampled client receives all K cluster models,
evaluates each on its own training data, trains the one with the lowest loss
and uploads it with that identity; the server averages per identity.

The K models start from K independent random initialisations (the paper's
setting; identical models would leave every client on the first one). A
cluster's model moves by the plain mean of its members' deltas, as the
reference code averages them; `mean="weighted"` weighs them by sample count.

In asynchronous mode (`mode = "async"`) a client's task carries all K models
as in a round; its update arrives on the simulated clock with the identity it
chose, which becomes its cluster at once. Each cluster keeps its own buffer
and version (`_buffers.py`, FedBuff per cluster): the delta, discounted by
s(τ) with τ the versions of the chosen cluster since the models were sent,
waits in that cluster's buffer until `buffer_size` have come, then the
cluster's model moves by `server_lr` times their mean (plain, or by sample
count with `mean="weighted"`). With `buffer_size` updates from one round's
clients, constant staleness and `server_lr` = 1 this is a synchronous
round's model averaging. IFCA's clustering is the clients' own choice, so
there is no server-side clustering decision to time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from clusterfed.types import ClientId, ClusterId, ModelKey

from ._aggregate import (
    ClusterMean,
    ClusterSums,
    check_cluster_mean,
    member_weight,
    move_clusters,
)
from ._buffers import Buffered, ClusterBuffer
from .base import (
    Candidate,
    ClientInfo,
    ClientProbe,
    ClientUpdate,
    IdentityPolicy,
    S,
    ServerState,
    Strategy,
    TaskPlan,
)
from .fedavg import sample_clients


class MinLoss(IdentityPolicy):
    """IFCA's identity: the candidate with the lowest loss on the client's
    training samples (ties: the first)."""

    name = "min_loss"

    def choose(
        self, probe: ClientProbe, candidates: Sequence[Candidate], round: int
    ) -> ModelKey:
        losses = [probe.loss(c.weights) for c in candidates]
        return candidates[int(np.argmin(losses))].cluster


class IFCALoop(Strategy[S]):
    """IFCA's round for any state type: the clients choose, the server averages.

    `IFCA` runs it on `IFCAState`; variants that remember more
    (`GradLoss`) run it on their own state. No `name`: not registered.

    Args:
        clusters: K, the number of cluster models (≥ 1).
        fraction: share of clients sampled each round; at least one.
        mean: how a cluster averages its members' deltas: "weighted" by
            sample count, or "plain".
    """

    identity: ClassVar[str] = MinLoss.name
    folds = True
    honours_aggregator = True

    def __init__(
        self,
        *,
        clusters: int = 4,
        fraction: float = 1.0,
        mean: ClusterMean = "weighted",
    ) -> None:
        if isinstance(clusters, bool) or not isinstance(clusters, int) or clusters < 1:
            raise ValueError(f"clusters must be an integer >= 1, got {clusters!r}")
        if not 0 < fraction <= 1:
            raise ValueError(f"fraction must be in (0, 1], got {fraction}")
        self.clusters = clusters
        self.fraction = fraction
        self.mean = check_cluster_mean(mean)

    @property
    def initial_models(self) -> int:
        return self.clusters

    def init_state(self, models: Sequence[np.ndarray]) -> S:
        """K clusters, cluster k starting from `models[k]`."""
        self._check_initial_models(models)
        return self.state_type(
            models={ClusterId(k): m for k, m in enumerate(models)}, assignment={}
        )

    def identity_params(self) -> dict[str, Any]:
        return {}

    def plan_round(
        self,
        state: S,
        round: int,
        clients: Sequence[ClientInfo],
        rng: np.random.Generator,
    ) -> list[TaskPlan]:
        """Every sampled client gets every cluster model and picks one itself."""
        return [
            TaskPlan(
                c.id,
                dict[ModelKey, np.ndarray](state.models.items()),
                identity=self.identity,
                identity_params=self.identity_params(),
            )
            for c in sample_clients(clients, self.fraction, rng)
        ]

    def aggregate(
        self,
        state: S,
        round: int,
        updates: Sequence[ClientUpdate],
        rng: np.random.Generator,
    ) -> S:
        """Average per reported identity; each reporting client is now there."""
        ok = _reporting(state, updates)
        state = move_clusters(state, ok, aggregator=self.aggregator, mean=self.mean)
        return state.replace(assignment=_moved(state, ok))

    def fold_weight(self, state: S, update: ClientUpdate) -> float:
        """A client that left during the round counts for nothing."""
        if update.client not in state.assignment:
            return 0.0
        return member_weight(update, self.mean)

    def aggregate_sums(
        self,
        state: S,
        round: int,
        updates: Sequence[ClientUpdate],
        sums: ClusterSums,
        rng: np.random.Generator,
    ) -> S:
        moved = _moved(state, _reporting(state, updates))
        return state.replace(models=sums.step(state.models), assignment=moved)


def _reporting(
    state: ServerState, updates: Sequence[ClientUpdate]
) -> list[ClientUpdate]:
    """The accepted updates of clients still in the federation."""
    return [u for u in updates if u.ok and u.client in state.assignment]


def _moved(
    state: ServerState, reporting: Sequence[ClientUpdate]
) -> dict[ClientId, ClusterId]:
    """The assignment with each reporting client in the cluster it chose."""
    assignment: dict[ClientId, ClusterId] = dict(state.assignment)
    assignment.update({u.client: u.cluster_id for u in reporting})
    return assignment


@dataclass(frozen=True)
class IFCAState(ServerState):
    """Cluster models and assignment; in asynchronous mode, each cluster's
    buffer of updates waiting for its next step (empty in synchronous mode)."""

    buffers: Mapping[ClusterId, ClusterBuffer] = field(default_factory=dict)


class IFCA(Buffered, IFCALoop[IFCAState]):
    """Iterative federated clustering: the clients choose, the server averages.

    Args:
        clusters: K, the number of cluster models (≥ 1).
        fraction: share of clients sampled each round; at least one.
        mean: how a cluster averages its members' deltas: "plain" (the
            reference code's mean, the default) or "weighted" by sample count.
        buffer_size: asynchronous mode: the updates a cluster gathers before
            its model moves.
        staleness: asynchronous mode: how a τ-versions-old update is
            discounted: "constant", "polynomial" ((τ+1)^−a) or "hinge".
        a, b: the staleness function's parameters.
        server_lr: asynchronous mode: the step on a buffer's mean.
    """

    name = "ifca"
    state_type = IFCAState
    supports_async = True
    honours_aggregator_async = True

    def __init__(
        self,
        *,
        clusters: int = 4,
        fraction: float = 1.0,
        mean: ClusterMean = "plain",
        buffer_size: int = 3,
        staleness: str = "polynomial",
        a: float = 0.5,
        b: int = 4,
        server_lr: float = 1.0,
    ) -> None:
        super().__init__(clusters=clusters, fraction=fraction, mean=mean)
        self.init_buffering(
            buffer_size=buffer_size, staleness=staleness, a=a, b=b, server_lr=server_lr
        )

    def plan_for(self, state: IFCAState, client: ClientId) -> TaskPlan:
        """Asynchronous mode: every cluster model, the client picks one."""
        return TaskPlan(
            client,
            dict[ModelKey, np.ndarray](state.models.items()),
            identity=self.identity,
            identity_params=self.identity_params(),
        )

    def absorb(
        self,
        state: IFCAState,
        update: ClientUpdate,
        staleness: int,
        rng: np.random.Generator,
    ) -> tuple[IFCAState, bool]:
        """The client joins the cluster it chose; its delta waits in that
        cluster's buffer, and the cluster steps when the buffer is full."""
        if (
            not update.ok
            or update.delta is None
            or update.client not in state.assignment
            or update.cluster not in state.models
        ):
            return state, False
        weight = float(max(update.n_samples, 0)) if self.mean == "weighted" else 1.0
        folded = self.buffering.fold(
            state.models,
            state.buffers,
            update,
            staleness,
            weight,
            aggregator=self.aggregator,
            centres=state.centres,
        )
        new = state.replace(
            models=folded.models,
            buffers=folded.buffers,
            centres=folded.centres,
            assignment={**state.assignment, update.client: update.cluster_id},
        )
        return new, folded.moved
