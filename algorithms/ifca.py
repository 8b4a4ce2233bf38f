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
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from clusterfed.types import ClientId, ClusterId

from ._aggregate import ClusterMean, average_per_cluster, check_cluster_mean
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
    ) -> ClusterId:
        losses = [probe.loss(c.weights) for c in candidates]
        return candidates[int(np.argmin(losses))].cluster


class IFCALoop(Strategy[S]):
    """IFCA's round for any state type: the clients choose, the server averages.

    `IFCA` runs it on the plain `ServerState`; variants that remember more
    (`GradLoss`) run it on their own state. No `name`: not registered.

    Args:
        clusters: K, the number of cluster models (≥ 1).
        fraction: share of clients sampled each round; at least one.
        mean: how a cluster averages its members' deltas: "weighted" by
            sample count, or "plain".
    """

    identity: ClassVar[str] = MinLoss.name

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
                dict(state.models),
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
        ok = [u for u in updates if u.ok and u.client in state.assignment]
        assignment: dict[ClientId, ClusterId] = dict(state.assignment)
        assignment.update({u.client: u.cluster for u in ok})
        models = average_per_cluster(
            state.models, ok, aggregator=self.aggregator, mean=self.mean
        )
        return state.replace(models=models, assignment=assignment)


class IFCA(IFCALoop[ServerState]):
    """Iterative federated clustering: the clients choose, the server averages.

    Args:
        clusters: K, the number of cluster models (≥ 1).
        fraction: share of clients sampled each round; at least one.
        mean: how a cluster averages its members' deltas: "plain" (the
            reference code's mean, the default) or "weighted" by sample count.
    """

    name = "ifca"
    state_type = ServerState

    def __init__(
        self, *, clusters: int = 4, fraction: float = 1.0, mean: ClusterMean = "plain"
    ) -> None:
        super().__init__(clusters=clusters, fraction=fraction, mean=mean)
