"""CFL: split a cluster in two when its clients pull apart at a stationary point.

Sattler, Müller, Samek, "Clustered Federated Learning: Model-Agnostic
Distributed Multitask Optimization Under Privacy Constraints", IEEE
Transactions on Neural Networks and Learning Systems 32(8), 2021 (online 2020).

Each cluster model moves by the plain mean of its members' deltas, as the
reference code averages them (`mean="weighted"`: by sample count, as in
FedAvg). A cluster is near a stationary point of its clients' joint objective
when that mean update is small (‖mean δᵢ‖ < ε1); if some client's update is
still large (max ‖δᵢ‖ > ε2), the clients disagree, and the cluster is
bipartitioned by complete-linkage agglomerative clustering on the cosine
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

Thresholds. ε1 and ε2 are thresholds on update norms, so they depend on the
model size, the learning rate, the local epochs and, with DP, the noise. With
`thresholds="absolute"` (the default) they are norms; 0.4 and 1.6 are the
reference values (the paper's CNN on rotated EMNIST). With
`thresholds="relative"` they are multiples of a reference norm r measured in
the warm-up rounds: r is the mean, over the warm-up rounds that had updates,
of the clients' mean update norm mean ‖δᵢ‖ (pooled over every client of the
round). A typical client step is the natural unit of both tests: ‖mean δᵢ‖ ≤
mean ‖δᵢ‖ always, so ε1 reads as "the cluster's update has shrunk to this
fraction of a typical warm-up step", and ε2 as "some client still moves this
many typical warm-up steps". r is fixed when the warm-up ends, so the tests
see training converge rather than chase it.

The relative defaults, ε1 = 0.25 and ε2 = 1.0, keep the reference pair's
ratio of 4 and set ε2 to one typical warm-up step: a client that still moves
as far as clients did at the start is not at its own stationary point. With
DP the updates are mostly noise, whose mean over n clients has a norm of
about r/√n, so ε1 = 0.25 lets a noise-dominated cluster split only while it
holds more than about 16 clients. On `dcfl-dynamic` (digits, 20 clients,
`--rounds 30`) the measured ratios in round 20 were ‖mean δᵢ‖/r = 0.24 and
max ‖δᵢ‖/r = 4.6 without DP, 0.21 and 1.2 with DP (r = 2.2 and 116; the
absolute 0.4/1.6 never split with DP there). `CFLState.update_norms` and the
round's diagnostics record each cluster's norms, the thresholds as norms and
every split (round, cluster, new cluster, sizes) to help choose them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import JsonValue
from sklearn.cluster import AgglomerativeClustering

from clusterfed.types import ClusterId

from ._aggregate import (
    ClusterMean,
    check_cluster_mean,
    member_weights,
    move_clusters,
    weighted_mean,
)
from .base import ClientUpdate, ServerState, Strategy
from .diagnostics import Diagnostics
from .distances import cosine_similarities

Thresholds = Literal["absolute", "relative"]

# ε1, ε2 when none are given: the reference's norms, or multiples of the
# warm-up reference norm (see the module docstring for how they were chosen).
ABSOLUTE_EPS = (0.4, 1.6)
RELATIVE_EPS = (0.25, 1.0)


@dataclass(frozen=True)
class UpdateNorms:
    """One cluster's update norms in one round.

    Attributes:
        mean: the norm of the cluster's mean update (‖mean δᵢ‖).
        max: the largest client update norm (max ‖δᵢ‖).
        clients: the clients' mean update norm (mean ‖δᵢ‖, plain).
    """

    mean: float
    max: float
    clients: float


@dataclass(frozen=True)
class Split:
    """A cluster CFL bipartitioned: in `round`, `moved` of its clients went to
    `new_cluster`, `stayed` kept `cluster`."""

    round: int
    cluster: ClusterId
    new_cluster: ClusterId
    stayed: int
    moved: int


@dataclass(frozen=True)
class CFLState(ServerState):
    """Cluster models and assignment, plus what the splits need.

    Attributes:
        next_cluster: the lowest id a split may give a new cluster (ids are
            never reused).
        update_norms: each cluster's update norms of the last round; None
            before the first round.
        warmup_norms: the clients' mean update norm of each warm-up round
            that had updates (relative thresholds are multiples of their mean).
        splits: every split so far, in order.
    """

    next_cluster: int = 0
    update_norms: Mapping[ClusterId, UpdateNorms] | None = None
    warmup_norms: tuple[float, ...] = ()
    splits: tuple[Split, ...] = ()


class CFLNorms(Diagnostics):
    """One cluster's `UpdateNorms` as the diagnostics report them."""

    mean: float
    max: float
    clients: float


class CFLThresholds(Diagnostics):
    """ε1 and ε2 as norms."""

    eps1: float
    eps2: float


class CFLSplit(Diagnostics):
    """A `Split` as the diagnostics report it."""

    round: int
    cluster: ClusterId
    new_cluster: ClusterId
    stayed: int
    moved: int


class CFLDiagnostics(Diagnostics):
    """CFL's round: each cluster's update norms (by cluster id, in id
    order), the thresholds as norms (None until a relative reference exists)
    and every split so far, in order. summary.json takes the `splits`."""

    update_norms: dict[ClusterId, CFLNorms]
    thresholds: CFLThresholds | None
    splits: tuple[CFLSplit, ...]

    def summary(self) -> dict[str, JsonValue]:
        return {"splits": [split.record() for split in self.splits]}


class CFL(Strategy[CFLState]):
    """Clustered FL by recursive bipartitioning (Sattler et al.).

    Args:
        eps1: split only when the norm of a cluster's mean update is below
            this (≥ 0); with relative thresholds, a multiple of the reference
            norm. None: 0.4 (absolute) or 0.25 (relative).
        eps2: ... and the largest client update norm in it is above this
            (≥ 0). None: 1.6 (absolute) or 1.0 (relative).
        warmup: no split before this round (rounds count from 0); relative
            thresholds measure their reference norm in these rounds (≥ 1).
        thresholds: "absolute" (ε1, ε2 are norms, the reference's rule) or
            "relative" (ε1, ε2 are multiples of the warm-up reference norm).
        mean: how a cluster averages its members' deltas, for its model and
            for the ε1 test: "plain" (the reference code's mean) or
            "weighted" by sample count.
    """

    name = "cfl"
    state_type = CFLState
    honours_aggregator = True

    def __init__(
        self,
        *,
        eps1: float | None = None,
        eps2: float | None = None,
        warmup: int = 20,
        thresholds: Thresholds = "absolute",
        mean: ClusterMean = "plain",
    ) -> None:
        if thresholds not in ("absolute", "relative"):
            raise ValueError(
                f"thresholds must be 'absolute' or 'relative', got {thresholds!r}"
            )
        default1, default2 = ABSOLUTE_EPS if thresholds == "absolute" else RELATIVE_EPS
        eps1 = default1 if eps1 is None else eps1
        eps2 = default2 if eps2 is None else eps2
        if not eps1 >= 0:
            raise ValueError(f"eps1 must be ≥ 0, got {eps1}")
        if not eps2 >= 0:
            raise ValueError(f"eps2 must be ≥ 0, got {eps2}")
        if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
            raise ValueError(f"warmup must be an integer ≥ 0, got {warmup!r}")
        if thresholds == "relative" and warmup < 1:
            raise ValueError(
                "relative thresholds measure their reference in the warm-up"
                f" rounds: warmup must be ≥ 1, got {warmup}"
            )
        self.eps1 = float(eps1)
        self.eps2 = float(eps2)
        self.warmup = warmup
        self.thresholds: Thresholds = thresholds
        self.mean = check_cluster_mean(mean)

    def aggregate(
        self,
        state: CFLState,
        round: int,
        updates: Sequence[ClientUpdate],
        rng: np.random.Generator,
    ) -> CFLState:
        state = move_clusters(
            state, updates, aggregator=self.aggregator, mean=self.mean
        )
        return self.split(state, round, updates)

    def norm_thresholds(self, state: CFLState) -> tuple[float, float] | None:
        """(ε1, ε2) as norms: the given ones, or the multiples of the warm-up
        reference norm; None while relative thresholds have no reference."""
        if self.thresholds == "absolute":
            return self.eps1, self.eps2
        if not state.warmup_norms:
            return None
        reference = float(np.mean(state.warmup_norms))
        return self.eps1 * reference, self.eps2 * reference

    def diagnostics(self, state: CFLState) -> CFLDiagnostics | None:
        """Each cluster's update norms of the last round, the thresholds as
        norms and every split so far; None before the first round."""
        norms = state.update_norms
        if norms is None:
            return None
        eps = self.norm_thresholds(state)
        return CFLDiagnostics(
            update_norms={
                cluster: CFLNorms(mean=n.mean, max=n.max, clients=n.clients)
                for cluster, n in sorted(norms.items())
            },
            thresholds=None if eps is None else CFLThresholds(eps1=eps[0], eps2=eps[1]),
            splits=tuple(
                CFLSplit(
                    round=s.round,
                    cluster=s.cluster,
                    new_cluster=s.new_cluster,
                    stayed=s.stayed,
                    moved=s.moved,
                )
                for s in state.splits
            ),
        )

    def split(
        self, state: CFLState, round: int, updates: Sequence[ClientUpdate]
    ) -> CFLState:
        """Bipartition every cluster that meets the criteria this round."""
        groups: dict[ClusterId, list[ClientUpdate]] = {}
        for update in sorted(updates, key=lambda u: u.client):
            # The same updates `average_per_cluster` counts.
            if update.ok and update.delta is not None and update.n_samples > 0:
                groups.setdefault(update.cluster_id, []).append(update)
        norms = {
            cluster: update_norms(members, self.mean)
            for cluster, members in groups.items()
        }
        warmup_norms = state.warmup_norms
        if round < self.warmup and groups:
            # Pooled over every client of the round (one cluster in warm-up).
            everyone = [u for members in groups.values() for u in members]
            warmup_norms = (*warmup_norms, update_norms(everyone, self.mean).clients)
        state = state.replace(update_norms=norms, warmup_norms=warmup_norms)
        eps = self.norm_thresholds(state)
        if round < self.warmup or eps is None:
            return state
        eps1, eps2 = eps
        models = dict(state.models)
        assignment = dict(state.assignment)
        splits = list(state.splits)
        next_cluster = max(state.next_cluster, max(state.models) + 1)
        for cluster in sorted(groups):
            members = groups[cluster]
            n = norms[cluster]
            if not (len(members) > 2 and n.mean < eps1 and n.max > eps2):
                continue
            # Members come in client order, so the half that moves is the one
            # without the lowest client id.
            stay, moving = bipartition(
                np.stack([u.delta for u in members if u.delta is not None])
            )
            fresh = ClusterId(next_cluster)
            next_cluster += 1
            models[fresh] = models[cluster].copy()
            for i in moving:
                if members[i].client in assignment:
                    assignment[members[i].client] = fresh
            splits.append(Split(round, cluster, fresh, len(stay), len(moving)))
        return state.replace(
            models=models,
            assignment=assignment,
            next_cluster=next_cluster,
            splits=tuple(splits),
        )


def update_norms(members: Sequence[ClientUpdate], mean: ClusterMean) -> UpdateNorms:
    """The update norms of `members` (updates with a delta), their mean update
    taken as `mean` says."""
    deltas = [u.delta for u in members if u.delta is not None]
    step = weighted_mean(deltas, member_weights([u.n_samples for u in members], mean))
    sizes = [float(np.linalg.norm(d.astype(np.float64))) for d in deltas]
    return UpdateNorms(
        mean=float(np.linalg.norm(step)), max=max(sizes), clients=float(np.mean(sizes))
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
