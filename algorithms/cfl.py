"""CFL: split a cluster in two when its clients pull apart at a stationary point.

Sattler, Müller, Samek, "Clustered Federated Learning: Model-Agnostic
Distributed Multitask Optimization Under Privacy Constraints", IEEE
Transactions on Neural Networks and Learning Systems 32(8), 2021 (online 2020).

Each cluster model moves by the sample-weighted mean of its members' deltas,
as in FedAvg. A cluster is near a stationary point of its clients' joint
objective when that mean update is small (‖Σ wᵢδᵢ‖ < ε1); if some client's
update is still large (max ‖δᵢ‖ > ε2), the clients disagree, and the cluster
is bipartitioned by complete-linkage agglomerative clustering on the cosine
distance 1 − cos(δᵢ, δⱼ) of its clients' updates (the paper's optimal
bipartition by cosine similarity, Algorithm 1). Both halves start from the
cluster's current model.

Where the paper is loose, clusterfed decides:

- Splits are decided after the round's aggregation, on the round's "ok"
  updates, for clusters with more than 2 such clients (the reference
  implementation's `len(idc) > 2`), from round `warmup` on (rounds count from
  0, so the default 20 leaves the first 20 rounds unsplit like the reference's
  `c_round > 20` with rounds from 1).
- The half holding the lowest client id keeps the cluster's id, the other half
  gets a fresh id; members that did not report this round stay in the old id.
- A client joining later joins the lowest cluster id (the `Strategy` default);
  the paper's placement of newcomers by the parameter tree is not modelled.

ε1 and ε2 are thresholds on update norms, so they depend on the model size,
the learning rate and the local epochs. The defaults 0.4 and 1.6 are the
reference values (the paper's CNN on rotated EMNIST); scale them to the model
and training settings at hand — `CFLState.update_norms` (and the round's
diagnostics) record each cluster's (mean, max) update norms of the last round
to help choose them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.cluster import AgglomerativeClustering

from clusterfed.types import ClusterId

from ._aggregate import average_per_cluster, weighted_mean
from .base import ClientUpdate, ServerState, Strategy
from .distances import cosine_similarities


@dataclass(frozen=True)
class CFLState(ServerState):
    """Cluster models and assignment, plus what the splits need.

    Attributes:
        next_cluster: the lowest id a split may give a new cluster (ids are
            never reused).
        update_norms: each cluster's (mean, max) update norms of the last
            round; None before the first round.
    """

    next_cluster: int = 0
    update_norms: Mapping[ClusterId, tuple[float, float]] | None = None


class CFL(Strategy[CFLState]):
    """Clustered FL by recursive bipartitioning (Sattler et al.).

    Args:
        eps1: split only when the norm of a cluster's sample-weighted mean
            update is below this (≥ 0).
        eps2: ... and the largest client update norm in it is above this (≥ 0).
        warmup: no split before this round (rounds count from 0).
    """

    name = "cfl"
    state_type = CFLState

    def __init__(
        self, *, eps1: float = 0.4, eps2: float = 1.6, warmup: int = 20
    ) -> None:
        if not eps1 >= 0:
            raise ValueError(f"eps1 must be ≥ 0, got {eps1}")
        if not eps2 >= 0:
            raise ValueError(f"eps2 must be ≥ 0, got {eps2}")
        if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
            raise ValueError(f"warmup must be an integer ≥ 0, got {warmup!r}")
        self.eps1 = float(eps1)
        self.eps2 = float(eps2)
        self.warmup = warmup

    def aggregate(
        self,
        state: CFLState,
        round: int,
        updates: Sequence[ClientUpdate],
        rng: np.random.Generator,
    ) -> CFLState:
        models = average_per_cluster(state.models, updates, aggregator=self.aggregator)
        state = state.replace(models=models)
        return self.split(state, round, updates)

    def diagnostics(self, state: CFLState) -> dict[str, Any]:
        """Each cluster's (mean, max) update norms of the last round."""
        norms = state.update_norms
        if norms is None:
            return {}
        return {
            "update_norms": {
                str(cluster): {"mean": float(mean), "max": float(top)}
                for cluster, (mean, top) in sorted(norms.items())
            }
        }

    def split(
        self, state: CFLState, round: int, updates: Sequence[ClientUpdate]
    ) -> CFLState:
        """Bipartition every cluster that meets the criteria this round."""
        groups: dict[ClusterId, list[ClientUpdate]] = {}
        for update in sorted(updates, key=lambda u: u.client):
            # The same updates `average_per_cluster` counts.
            if update.ok and update.delta is not None and update.n_samples > 0:
                groups.setdefault(update.cluster, []).append(update)
        models = dict(state.models)
        assignment = dict(state.assignment)
        norms: dict[ClusterId, tuple[float, float]] = {}
        next_cluster = max(state.next_cluster, max(state.models) + 1)
        for cluster in sorted(groups):
            members = groups[cluster]
            deltas = [u.delta for u in members if u.delta is not None]
            mean = weighted_mean(deltas, [u.n_samples for u in members])
            mean_norm = float(np.linalg.norm(mean))
            max_norm = max(float(np.linalg.norm(d.astype(np.float64))) for d in deltas)
            norms[cluster] = (mean_norm, max_norm)
            if not (
                round >= self.warmup
                and len(members) > 2
                and mean_norm < self.eps1
                and max_norm > self.eps2
            ):
                continue
            # Members come in client order, so the half that moves is the one
            # without the lowest client id.
            moving = bipartition(np.stack(deltas))[1]
            fresh = ClusterId(next_cluster)
            next_cluster += 1
            models[fresh] = models[cluster].copy()
            for i in moving:
                if members[i].client in assignment:
                    assignment[members[i].client] = fresh
        return state.replace(
            models=models,
            assignment=assignment,
            next_cluster=next_cluster,
            update_norms=norms,
        )


def bipartition(deltas: np.ndarray) -> tuple[list[int], list[int]]:
    """Two groups of row indices by complete-linkage agglomerative clustering
    on the cosine distance of the updates; the first holds row 0."""
    distance = np.clip(1.0 - cosine_similarities(deltas), 0.0, 2.0)
    labels = (
        AgglomerativeClustering(n_clusters=2, metric="precomputed", linkage="complete")
        .fit(distance)
        .labels_
    )
    first = [i for i, label in enumerate(labels) if label == labels[0]]
    second = [i for i, label in enumerate(labels) if label != labels[0]]
    return first, second
