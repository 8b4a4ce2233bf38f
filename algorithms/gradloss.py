"""Joint gradient–loss clustering: each client picks its cluster identity itself.

Lin, Chen, Yang, Wu, Liu, "A Joint Gradient and Loss Based Clustered
Federated Learning Design" (arXiv 2023), Algorithm 1. The server broadcasts K
cluster models with each one's last update Δw_k = w_k^t − w_k^{t−1}; inside
the client actor, for each k, the loss L̄_k and its gradient on one mini-batch
give the score λ·cos(−∇L_k, Δw_k) + (1 − λ)·(−L̄_k) (Eq. 1–4); the client
trains the best-scoring model and uploads it with its identity; the server
only averages per identity (Eq. 7) — it never computes an identity.

Where the paper is loose, clusterfed decides:

- Eq. 3 writes cos(∇L, Δw_k). Δw_k is a step the cluster took (a descent
  direction), so a client that agrees with its cluster has a gradient pointing
  the other way; clusterfed compares Δw_k with the descent direction −∇L, so
  agreement scores +1. (With +∇L the gradient term would push clients away
  from the clusters that suit them.)
- L̄_k is the mean loss over one mini-batch (Eq. 1 sums it; the mean keeps λ's
  meaning independent of the batch size); every candidate is scored on the
  same mini-batch.
- Before a cluster has a last update (the first round, or a cluster nobody
  chose), its gradient term is 0.
- Empty-cluster repair (Sec. II-C): a cluster no client chose this round is
  given one randomly drawn client next round, which receives only that
  cluster's model, so no cluster is lost for good.
- Cluster models are averaged weighted by sample counts (Eq. 7's plain mean
  when clients hold equal shares, as in the paper's splits).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from clusterfed.types import ClientId, ClusterId, ModelKey

from ._aggregate import ClusterSums
from .base import (
    Candidate,
    ClientInfo,
    ClientProbe,
    ClientUpdate,
    IdentityPolicy,
    ServerState,
    TaskPlan,
)
from .ifca import IFCALoop


class GradLossIdentity(IdentityPolicy):
    """argmax_k λ·cos(−∇L_k, Δw_k) + (1 − λ)·(−L̄_k), computed on the client."""

    name = "gradloss"

    def __init__(self, *, lam: float = 0.2) -> None:
        if not 0 <= lam <= 1:
            raise ValueError(f"lam must be in [0, 1], got {lam}")
        self.lam = lam

    def choose(
        self, probe: ClientProbe, candidates: Sequence[Candidate], round: int
    ) -> ModelKey:
        scores = [self.score(probe, c, round) for c in candidates]
        return candidates[int(np.argmax(scores))].cluster

    def score(self, probe: ClientProbe, candidate: Candidate, round: int) -> float:
        loss, gradient = probe.batch_loss_and_gradient(candidate.weights, round)
        similarity = descent_similarity(gradient, candidate.last_update)
        return self.lam * similarity + (1 - self.lam) * (-loss)


def descent_similarity(gradient: np.ndarray, last_update: np.ndarray | None) -> float:
    """cos(−gradient, last_update); 0 when either is missing or zero."""
    if last_update is None:
        return 0.0
    g = -gradient.astype(np.float64)
    u = last_update.astype(np.float64)
    norms = float(np.linalg.norm(g) * np.linalg.norm(u))
    return float(g @ u / norms) if norms > 0 else 0.0


@dataclass(frozen=True)
class GradLossState(ServerState):
    """IFCA's state plus what the next round's plan needs.

    Attributes:
        last_updates: each cluster's last change Δw_k, for the clusters some
            client chose in the last round.
        seeds: the repair draw: client → the empty cluster it alone trains
            next round.
    """

    last_updates: Mapping[ClusterId, np.ndarray] = field(default_factory=dict)
    seeds: Mapping[ClientId, ClusterId] = field(default_factory=dict)


class GradLoss(IFCALoop[GradLossState]):
    """IFCA's loop with the joint gradient–loss identity and cluster repair.

    Args:
        clusters: K, the number of cluster models (≥ 1).
        lam: λ, the weight of the gradient term (paper: 0.1–0.5).
        fraction: share of clients sampled each round; at least one.
    """

    name = "gradloss"
    state_type = GradLossState
    honours_aggregator = True
    identity = GradLossIdentity.name

    def __init__(
        self, *, clusters: int = 4, lam: float = 0.2, fraction: float = 1.0
    ) -> None:
        super().__init__(clusters=clusters, fraction=fraction)
        GradLossIdentity(lam=lam)  # the same check the clients will make
        self.lam = lam

    def identity_params(self) -> dict[str, Any]:
        return {"lam": self.lam}

    def plan_round(
        self,
        state: GradLossState,
        round: int,
        clients: Sequence[ClientInfo],
        rng: np.random.Generator,
    ) -> list[TaskPlan]:
        """IFCA's plan plus the last updates; repair seeds get one model only."""
        plans = []
        for plan in super().plan_round(state, round, clients, rng):
            cluster = state.seeds.get(plan.client)
            if cluster is not None and cluster in state.models:
                plans.append(TaskPlan(plan.client, {cluster: state.models[cluster]}))
            else:
                plans.append(
                    TaskPlan(
                        plan.client,
                        plan.models,
                        identity=plan.identity,
                        identity_params=plan.identity_params,
                        last_updates=dict[ModelKey, np.ndarray](
                            state.last_updates.items()
                        ),
                    )
                )
        return plans

    def aggregate(
        self,
        state: GradLossState,
        round: int,
        updates: Sequence[ClientUpdate],
        rng: np.random.Generator,
    ) -> GradLossState:
        return self._remember(
            state, super().aggregate(state, round, updates, rng), updates, rng
        )

    def aggregate_sums(
        self,
        state: GradLossState,
        round: int,
        updates: Sequence[ClientUpdate],
        sums: ClusterSums,
        rng: np.random.Generator,
    ) -> GradLossState:
        new = super().aggregate_sums(state, round, updates, sums, rng)
        return self._remember(state, new, updates, rng)

    def _remember(
        self,
        state: GradLossState,
        new: GradLossState,
        updates: Sequence[ClientUpdate],
        rng: np.random.Generator,
    ) -> GradLossState:
        """Each chosen cluster's last change, and seeds for the empty ones."""
        chosen = {u.cluster_id for u in updates if u.ok}
        last = {
            k: (new.models[k].astype(np.float64) - state.models[k]).astype(np.float32)
            for k in chosen
            if k in state.models
        }
        return new.replace(last_updates=last, seeds=repair_seeds(new, chosen, rng))


def repair_seeds(
    state: ServerState, chosen: set[ClusterId], rng: np.random.Generator
) -> dict[ClientId, ClusterId]:
    """One random client for every cluster that no client chose (Sec. II-C).

    Draws from `rng` only when some cluster is empty, some was chosen and
    some client is there.
    """
    empty = [k for k in sorted(state.models) if k not in chosen]
    clients = sorted(state.assignment)
    if not empty or not clients or not chosen:
        return {}
    picked = rng.choice(len(clients), size=min(len(empty), len(clients)), replace=False)
    return {clients[int(i)]: k for i, k in zip(picked, empty, strict=False)}
