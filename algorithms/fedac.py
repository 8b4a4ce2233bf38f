"""FedAC and FedACP: FedAvg per cluster, bipartitioning a cluster once its loss
settles while its clients' updates disagree.

Hsu, Keoy, Chen, Chao, Lai, "Personalized Federated Learning Algorithm with
Adaptive Clustering for Non-IID IoT Data Incorporating Multi-Task Learning and
Neural Network Model Characteristics", Sensors 23(22), 9016, 2023
(doi:10.3390/s23229016), Algorithm 2.

Decisions where the paper is loose (DESIGN §5):

- Δloss is the absolute change of a cluster's mean client training loss (the
  unweighted mean of the losses its clients report) between the cluster's two
  latest rounds with updates; a cluster with no previous round does not split.
- θ is the lowest cosine between a client's delta and the cluster's update
  (the sample-weighted mean delta, i.e. the FedAvg step); the split fires when
  |Δloss| < α and θ < cos β, β in degrees (β = 90° means some θ < 0).
- Default α = 0.02 on the mean training loss. The paper's α = 5 is on the
  loss of its Flower evaluation, whose scale it does not state; Flower's
  PyTorch examples of the time return the per-batch mean loss summed over the
  test set, ≈ 313 batches of 32 for CIFAR-10, i.e. ≈ 0.016 per sample (our
  assumption), rounded up because a training loss of sampled clients is
  noisier than a test loss. Default β = 90° (the paper's).
- Bipartition: the two clients whose deltas have the lowest cosine are the
  seeds (Algorithm 2 writes `find_max` of the cosine similarity, but the text
  picks "clients with the farthest angular distance from each other"); every
  other client joins the seed its delta is more similar to (ties go to the
  second seed, Algorithm 2's `else`). The child with more clients keeps the
  cluster id (ties: the child holding the lowest client id), the other gets a
  new id; both start from the cluster's model after this round's aggregation.
  Clusters smaller than `min_split_size` never split.
- FedAC decides and bipartitions over all members of the cluster: when the
  trigger fires on a round where some members did not train (client sampling,
  failures), the next round is a *scan* of that cluster in which every member
  trains (the paper's "scanning all clients within a cluster during each
  clustering round"); it bipartitions if the cosine condition still holds over
  the members that replied. FedACP (the paper's cheaper variant) decides and
  bipartitions over the round's sampled clients only.
- A member without an update in the deciding round (unsampled in FedACP, or
  failed during a scan) stays with the child that keeps the cluster id, the
  larger one: with nothing known of it, the larger group is the likelier home,
  and if that is wrong the trigger splits it off once its update disagrees.
- A client that joins is placed in the largest cluster, for the same reason.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from sklearn.metrics.pairwise import cosine_similarity

from clusterfed.types import ClientId, ClusterId

from ._aggregate import move_clusters, weighted_mean
from .base import ClientInfo, ClientUpdate, S, ServerState, Strategy, TaskPlan
from .fedavg import sample_clients


@dataclass(frozen=True)
class FedACState(ServerState):
    """Cluster models and assignment, plus what the split trigger needs.

    Attributes:
        losses: each cluster's mean client loss of its latest round with
            updates (the previous loss of the next Δloss).
        scans: clusters whose trigger fired on a partial round: every member
            trains next round (FedAC's scan).
    """

    losses: Mapping[ClusterId, float] = field(default_factory=dict)
    scans: frozenset[ClusterId] = frozenset()


class FedAC(Strategy[FedACState]):
    """Federated Adaptive Cluster: recursive bipartition of converged clusters.

    Args:
        alpha: split only when the cluster's mean client loss changed by less
            than this since its previous round (α, > 0).
        beta: angle in degrees in [0, 180]; split only when some client's delta
            makes an angle wider than β with the cluster's update (β).
        fraction: share of each cluster's clients sampled per round; at least
            one per cluster (the paper's experiments use 0.1).
        min_split_size: clusters with fewer clients never split (>= 2: a
            bipartition needs two seeds).
    """

    name = "fedac"
    state_type = FedACState
    honours_aggregator = True

    def __init__(
        self,
        *,
        alpha: float = 0.02,
        beta: float = 90.0,
        fraction: float = 1.0,
        min_split_size: int = 2,
    ) -> None:
        if not alpha > 0:
            raise ValueError(f"alpha must be > 0, got {alpha}")
        if not 0 <= beta <= 180:
            raise ValueError(f"beta must be an angle in [0, 180] degrees, got {beta}")
        if not 0 < fraction <= 1:
            raise ValueError(f"fraction must be in (0, 1], got {fraction}")
        if min_split_size < 2:
            raise ValueError(f"min_split_size must be >= 2, got {min_split_size}")
        self.alpha = alpha
        self.beta = beta
        self.fraction = fraction
        self.min_split_size = min_split_size

    # -- hooks ----------------------------------------------------------------

    def on_join(self, state: FedACState, client: ClientInfo) -> FedACState:
        assignment = {**state.assignment, client.id: state.largest_cluster()}
        return state.replace(assignment=assignment)

    def plan_round(
        self,
        state: FedACState,
        round: int,
        clients: Sequence[ClientInfo],
        rng: np.random.Generator,
    ) -> list[TaskPlan]:
        """Each cluster samples its clients; a cluster being scanned sends all."""
        scans = state.scans
        by_cluster: dict[ClusterId, list[ClientInfo]] = {}
        for c in clients:
            by_cluster.setdefault(state.assignment[c.id], []).append(c)
        plans: list[TaskPlan] = []
        for cluster in sorted(by_cluster):
            members = by_cluster[cluster]
            chosen = (
                members
                if cluster in scans
                else sample_clients(members, self.fraction, rng)
            )
            plans.extend(self.plan_for(state, c.id) for c in chosen)
        return sorted(plans, key=lambda p: p.client)

    def aggregate(
        self,
        state: FedACState,
        round: int,
        updates: Sequence[ClientUpdate],
        rng: np.random.Generator,
    ) -> FedACState:
        """FedAvg per cluster, then split the clusters whose trigger fires."""
        ok = sorted(
            (
                u
                for u in updates
                if u.ok
                and u.delta is not None
                and u.n_samples > 0
                and state.assignment.get(u.client) == u.cluster
            ),
            key=lambda u: u.client,
        )
        state = move_clusters(state, ok, aggregator=self.aggregator)
        scans = state.scans
        losses: dict[ClusterId, float] = dict(state.losses)
        rescan: set[ClusterId] = set()
        for cluster in sorted({u.cluster_id for u in ok}):
            group = [u for u in ok if u.cluster == cluster]
            members = [c for c, k in state.assignment.items() if k == cluster]
            loss = mean_loss(group)
            if len(members) < self.min_split_size:
                split = False
            elif cluster in scans:
                # The trigger fired last round; the scan re-checks the
                # cosine condition over every member that replied.
                split = updates_diverge(group, beta=self.beta)
            else:
                change = None
                if loss is not None and cluster in losses:
                    change = abs(loss - losses[cluster])
                split = should_split(group, change, alpha=self.alpha, beta=self.beta)
                if split and self.wants_scan(members, [u.client for u in group]):
                    rescan.add(cluster)
                    split = False
            if loss is not None:
                losses[cluster] = loss
            if split:
                state, losses = split_cluster(state, cluster, group, losses)
        return state.replace(losses=losses, scans=frozenset(rescan))

    def wants_scan(
        self, members: Sequence[ClientId], trained: Sequence[ClientId]
    ) -> bool:
        """Whether a firing trigger waits for a round where every member trains.

        FedAC decides over the whole cluster, so it scans when some member did
        not train this round.
        """
        return not set(members) <= set(trained)


class FedACP(FedAC):
    """FedAC deciding and bipartitioning over the round's sampled clients only.

    Cheaper than FedAC (no scan round) and, as the paper reports, less
    consistently accurate; unsampled members stay with the larger child.
    """

    name = "fedacp"

    def wants_scan(
        self, members: Sequence[ClientId], trained: Sequence[ClientId]
    ) -> bool:
        return False


# -- named steps, testable alone ----------------------------------------------


def cosines_to_update(updates: Sequence[ClientUpdate]) -> np.ndarray:
    """Cosine of each client's delta with the sample-weighted mean delta."""
    deltas = np.stack([_delta(u) for u in updates]).astype(np.float64)
    mean = weighted_mean(list(deltas), [u.n_samples for u in updates])
    return np.asarray(cosine_similarity(deltas, mean[None, :])[:, 0])


def updates_diverge(updates: Sequence[ClientUpdate], *, beta: float) -> bool:
    """θ < cos β: some client's delta is more than β degrees off the update."""
    if len(updates) < 2:
        return False
    # Rounded so that β = 90° is exactly "cos < 0" and a zero delta (cos 0,
    # by scikit-learn's convention) never counts as diverging there.
    cos_beta = round(math.cos(math.radians(beta)), 12)
    return bool(cosines_to_update(updates).min() < cos_beta)


def should_split(
    updates: Sequence[ClientUpdate],
    loss_change: float | None,
    *,
    alpha: float,
    beta: float,
) -> bool:
    """Algorithm 2's trigger: |Δloss| < α and θ < cos β.

    `loss_change` is None for a cluster without a previous round: no split.
    """
    if loss_change is None or abs(loss_change) >= alpha:
        return False
    return updates_diverge(updates, beta=beta)


def bipartition(deltas: Sequence[np.ndarray]) -> tuple[list[int], list[int]]:
    """Indices of the two groups around the two most dissimilar deltas.

    The pair with the lowest cosine are the seeds (the first such pair in
    index order); every other delta joins the first seed if strictly more
    similar to it, else the second.
    """
    if len(deltas) < 2:
        raise ValueError(f"bipartition needs at least 2 deltas, got {len(deltas)}")
    cos = cosine_similarity(np.stack(deltas).astype(np.float64))
    upper = np.triu_indices(len(deltas), k=1)
    pair = int(np.argmin(cos[upper]))
    first, second = int(upper[0][pair]), int(upper[1][pair])
    groups: tuple[list[int], list[int]] = ([], [])
    for i in range(len(deltas)):
        if i == first or (i != second and cos[i, first] > cos[i, second]):
            groups[0].append(i)
        else:
            groups[1].append(i)
    return groups


def split_cluster(
    state: S,
    cluster: ClusterId,
    updates: Sequence[ClientUpdate],
    losses: dict[ClusterId, float],
) -> tuple[S, dict[ClusterId, float]]:
    """Bipartition `cluster` by its clients' deltas into itself and a new id.

    The larger child keeps the id and every member without an update; both
    children start from the cluster's current model and remember their own
    group's mean loss as their previous one.
    """
    left, right = bipartition([_delta(u) for u in updates])
    groups = [[updates[i] for i in left], [updates[i] for i in right]]
    groups.sort(key=lambda g: (-len(g), min(u.client for u in g)))
    kept, moved = groups
    new = ClusterId(max(state.models) + 1)
    models = {**state.models, new: state.models[cluster].copy()}
    assignment = {**state.assignment, **{u.client: new for u in moved}}
    losses = dict(losses)
    for child, group in ((cluster, kept), (new, moved)):
        loss = mean_loss(group)
        if loss is not None:
            losses[child] = loss
        else:
            losses.pop(child, None)
    return state.replace(models=models, assignment=assignment), losses


def mean_loss(updates: Sequence[ClientUpdate]) -> float | None:
    """The unweighted mean of the clients' reported training losses."""
    reported = [u.loss for u in updates if u.loss is not None]
    return float(np.mean(reported)) if reported else None


def _delta(update: ClientUpdate) -> np.ndarray:
    """The delta of an update that carries one."""
    if update.delta is None:
        raise ValueError(f"the update of client {update.client} carries no delta")
    return update.delta
