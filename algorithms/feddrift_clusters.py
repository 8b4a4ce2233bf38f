"""FedDrift's state and cluster maths (`feddrift.py` decides when): which
clusters are open and offered, the room for a new one, the loss distance
between clusters, the complete-linkage grouping cut at δ', and the new and
merged models.

Jothimurugesan, Hsieh, Wang, Joshi, Gibbons, "Federated Learning under
Distributed Concept Drift", AISTATS 2023 (arXiv:2206.00799).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.spatial.distance import squareform

from clusterfed.types import ClientId, ClusterId, ModelKey

from ._aggregate import weighted_mean
from .diagnostics import Diagnostics
from .records import ClientUpdate, ServerState


@dataclass(frozen=True)
class FedDriftState(ServerState):
    """Cluster models, the assignment, and what FedDrift remembers.

    Attributes:
        baseline: each client's best loss at its last time step (absent
            before its first: no drift test yet).
        sizes: each member's declared training samples (its weight in its
            cluster's loss L_i).
        trained: the samples each cluster's model has trained on, summed
            over time steps (the merge weights).
        isolated: clusters of drifted clients → the time step from which
            they may merge (and their members score every model again).
        last_used: each cluster → the last time step it had members.
        next_cluster: the id the next new cluster gets.
        drifted: the clients flagged in the last decision.
        merged: the groups of clusters merged in the last decision, each
            sorted, the first keeping its id.
    """

    baseline: Mapping[ClientId, float] = field(default_factory=dict)
    sizes: Mapping[ClientId, int] = field(default_factory=dict)
    trained: Mapping[ClusterId, float] = field(default_factory=dict)
    isolated: Mapping[ClusterId, int] = field(default_factory=dict)
    last_used: Mapping[ClusterId, int] = field(default_factory=dict)
    next_cluster: int = 1
    drifted: tuple[ClientId, ...] = ()
    merged: tuple[tuple[ClusterId, ...], ...] = ()


class FedDriftDiagnostics(Diagnostics):
    """What FedDrift decided in the last time step.

    Attributes:
        sizes: members per cluster (every model kept, empty ones too).
        drifted: the clients flagged as drifted.
        merged: the groups of clusters merged (the first keeps its id).
        isolated: the clusters still out of merging.
    """

    sizes: dict[ClusterId, int]
    drifted: list[ClientId]
    merged: list[list[ClusterId]]
    isolated: list[ClusterId]


def loss_distances(losses: np.ndarray) -> np.ndarray:
    """D[i, j] = max(L_i(θ_j) − L_i(θ_i), L_j(θ_i) − L_j(θ_j), 0) from
    `losses[i, j]` = L_i(θ_j), model j's loss on cluster i's data: how much
    worse either cluster does under the other's model. Symmetric, zero on
    the diagonal.

    Raises:
        ValueError: `losses` is not a square matrix of finite values.
    """
    table = np.asarray(losses, dtype=np.float64)
    if table.ndim != 2 or table.shape[0] != table.shape[1]:
        raise ValueError(f"losses must be a square matrix, got shape {table.shape}")
    if not np.isfinite(table).all():
        raise ValueError("losses hold non-finite values")
    own = np.diag(table)
    worse = table - own[:, None]  # worse[i, j] = L_i(θ_j) − L_i(θ_i)
    distances = np.maximum(np.maximum(worse, worse.T), 0.0)
    np.fill_diagonal(distances, 0.0)
    return distances


def merge_groups(distances: np.ndarray, threshold: float) -> list[list[int]]:
    """The clusters (indices of `distances`) that complete linkage joins while
    the linkage distance is at most `threshold` (scipy's `fcluster` by
    distance, as the authors' code cuts it): every group, singletons too,
    each sorted, ordered by its first index."""
    n = distances.shape[0]
    if n < 2:
        return [[i] for i in range(n)]
    tree = linkage(squareform(distances, checks=False), method="complete")
    labels = fcluster(tree, t=threshold, criterion="distance")
    groups: dict[int, list[int]] = {}
    for index, label in enumerate(labels):
        groups.setdefault(int(label), []).append(index)
    return sorted(groups.values(), key=lambda g: g[0])


def merged_model(models: Sequence[np.ndarray], weights: Sequence[float]) -> np.ndarray:
    """Σ wₖ θₖ / Σ wₖ as float32, the weights being the samples each model
    trained on (equal weights when none has trained on any)."""
    if sum(weights) <= 0:
        weights = [1.0] * len(models)
    return weighted_mean(list(models), list(weights)).astype(np.float32)


def cluster_losses(
    ids: Sequence[ClusterId],
    assignment: Mapping[ClientId, ClusterId],
    scores: Mapping[ClientId, Mapping[ClusterId, float]],
    sizes: Mapping[ClientId, int],
) -> np.ndarray:
    """L[i, j] = L_i(θ_j): model `ids[j]`'s loss on cluster `ids[i]`'s data,
    the sample-weighted mean of the scores of i's members that scored."""
    table = np.zeros((len(ids), len(ids)))
    for i, k in enumerate(ids):
        members = sorted(c for c in scores if assignment.get(c) == k)
        weights = [float(sizes.get(c, 1)) for c in members]
        rows = [[scores[c][j] for j in ids] for c in members]
        table[i] = weighted_mean([np.asarray(r) for r in rows], weights)
    return table


def open_clusters(state: FedDriftState, step: int) -> list[ClusterId]:
    """The clusters out of isolation at time step `step`, in id order."""
    return [k for k in sorted(state.models) if state.isolated.get(k, -1) <= step]


def offered(state: FedDriftState, client: ClientId, step: int) -> list[ClusterId]:
    """The models a client scores at time step `step`: its own alone while
    its cluster is isolated, else every cluster out of isolation."""
    own = state.assignment.get(client)
    if own is not None and state.isolated.get(own, -1) > step:
        return [own]
    return open_clusters(state, step)


def room_for(
    models: Mapping[ClusterId, np.ndarray],
    assignment: Mapping[ClientId, ClusterId],
    last_used: Mapping[ClusterId, int],
    cap: int,
    keep: set[ModelKey],
) -> list[ClusterId] | None:
    """The clusters to drop so one more fits under `cap`: none below it, the
    least recently used empty one at it (ties: the lowest id; never one in
    `keep`), None when there is none."""
    if len(models) < cap:
        return []
    used = set(assignment.values()) | keep
    empty = [k for k in sorted(models) if k not in used]
    if not empty:
        return None
    return [min(empty, key=lambda k: (last_used.get(k, -1), k))]


def new_model(founders: Sequence[ClientUpdate]) -> np.ndarray:
    """A new cluster's model: its founder's local model (base + delta), or
    the sample-weighted mean of its founders' (FedDrift-Eager's shared one)."""
    local = []
    for u in founders:
        if u.base is None or u.delta is None:
            raise ValueError(f"the update of client {u.client} carries no model")
        local.append(u.base + u.delta)
    if len(local) == 1:
        alone: np.ndarray = local[0].astype(np.float32)
        return alone
    weights = [float(u.n_samples) for u in founders]
    return merged_model([m.astype(np.float64) for m in local], weights)
