"""OCFL: cluster the clients once by OPTICS on their trained models, then FedAvg
inside each cluster.

Lu, Deng, Wu, Zhou, Ma, "Federated Learning Based on OPTICS Clustering
Optimization", Discrete Dynamics in Nature and Society, vol. 2022, 7151373
(doi:10.1155/2022/7151373).

Decisions where the paper is loose (DESIGN §5):

- "Full local training" in the clustering round means whole passes (epochs)
  over each client's local data rather than the round's usual setting; how
  many is `cluster_epochs`. The paper's own experiments (Fig. 4, §4.3) find
  the clustering best after one local epoch (ARI 1.0 on MNIST) and select 1,
  so 1 is the default; the clustering round sends it as a TrainConfig
  override so the run's `epochs` does not change it.
- OPTICS (scikit-learn) runs on the flattened end models B_i = base + delta
  with the paper's `min_samples=2`, `xi=0.2` (Algorithm 1) and scikit-learn's
  default Euclidean metric, which is what Algorithm 1's `OPTICS(min_samples,
  xi)` call uses.
- Noise points (label −1) become singleton clusters; with
  `assign_noise="nearest"` each joins the cluster whose centre (the
  sample-weighted mean of its members' end models) is nearest by `metric`.
  With no cluster to join, noise stays singleton.
- `target_clusters` merges clusters whose mean models are most alike by
  cosine (the paper's §4.3 merge of 10 clusters into 3), done by scikit-learn's
  average-linkage agglomerative clustering on the cluster means.
- A cluster's first model is the sample-weighted mean of its members' end
  models, i.e. one FedAvg step inside the cluster from the common start.
- A client without an accepted update in the clustering round, or one that
  joins after it, is *pending*: it is evaluated with the largest cluster's
  model, and each round it trains from the common initial model with
  `cluster_epochs` (so its end model is a point of the same space OPTICS
  clustered) until an accepted update arrives; it then joins the cluster
  whose clustering-time centre is nearest by `metric`. Its update is not
  folded into any cluster model (it did not start from one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from sklearn.cluster import OPTICS, AgglomerativeClustering
from sklearn.metrics import pairwise_distances

from clusterfed.types import ClientId, ClusterId

from ._aggregate import move_clusters, weighted_mean
from .base import ClientInfo, ClientUpdate, ServerState, Strategy, TaskPlan
from .fedavg import sample_clients

NoiseRule = Literal["singleton", "nearest"]
METRICS = ("euclidean", "cosine", "manhattan")
NOISE = -1  # scikit-learn's label for points in no cluster


@dataclass(frozen=True)
class OCFLState(ServerState):
    """Cluster models and assignment, plus what the clustering round leaves.

    Attributes:
        initial: the common initial model; the clustering round and pending
            clients train from it.
        clustered: whether the clustering round has happened.
        pending: clients without a place yet (no accepted update in the
            clustering round, or joined after it).
        anchors: the clustering-time centre of every cluster, where pending
            clients are placed.
    """

    initial: np.ndarray
    clustered: bool = False
    pending: frozenset[ClientId] = frozenset()
    anchors: Mapping[ClusterId, np.ndarray] = field(default_factory=dict)


class OCFL(Strategy[OCFLState]):
    """One OPTICS clustering of the clients' models, then FedAvg per cluster.

    Args:
        cluster_epochs: local epochs of the clustering round ("full local
            training"); 1 as selected by the paper's experiments.
        min_samples: OPTICS neighbourhood size for a core point (paper: 2).
        xi: OPTICS steepness threshold for cluster boundaries, in (0, 1)
            (paper: 0.1 on MNIST, 0.2 in Algorithm 1 and on CIFAR-10).
        metric: distance between models for OPTICS and for nearest-centre
            assignment: "euclidean" (scikit-learn's default), "cosine" or
            "manhattan".
        assign_noise: "singleton" (each noise point is its own cluster) or
            "nearest" (it joins the cluster with the nearest centre).
        target_clusters: merge clusters by cosine similarity of their mean
            models down to this many; None keeps what OPTICS found.
        fraction: share of each cluster's clients sampled per round after the
            clustering round; at least one per cluster.
    """

    name = "ocfl"
    state_type = OCFLState
    honours_aggregator = True

    def __init__(
        self,
        *,
        cluster_epochs: int = 1,
        min_samples: int = 2,
        xi: float = 0.2,
        metric: str = "euclidean",
        assign_noise: NoiseRule = "singleton",
        target_clusters: int | None = None,
        fraction: float = 1.0,
    ) -> None:
        if cluster_epochs < 1:
            raise ValueError(f"cluster_epochs must be >= 1, got {cluster_epochs}")
        if min_samples < 2:
            raise ValueError(f"min_samples must be >= 2, got {min_samples}")
        if not 0 < xi < 1:
            raise ValueError(f"xi must be in (0, 1), got {xi}")
        if metric not in METRICS:
            raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")
        if assign_noise not in ("singleton", "nearest"):
            raise ValueError(
                f"assign_noise must be 'singleton' or 'nearest', got {assign_noise!r}"
            )
        if target_clusters is not None and target_clusters < 1:
            raise ValueError(f"target_clusters must be >= 1, got {target_clusters}")
        if not 0 < fraction <= 1:
            raise ValueError(f"fraction must be in (0, 1], got {fraction}")
        self.cluster_epochs = cluster_epochs
        self.min_samples = min_samples
        self.xi = xi
        self.metric = metric
        self.assign_noise: NoiseRule = assign_noise
        self.target_clusters = target_clusters
        self.fraction = fraction

    # -- hooks ----------------------------------------------------------------

    def init_state(self, models: Sequence[np.ndarray]) -> OCFLState:
        # The common start is kept: pending clients train from it later.
        self._check_initial_models(models)
        return self.state_type(
            models={ClusterId(0): models[0]}, assignment={}, initial=models[0]
        )

    def on_join(self, state: OCFLState, client: ClientInfo) -> OCFLState:
        assignment = {**state.assignment, client.id: state.largest_cluster()}
        if not state.clustered:
            return state.replace(assignment=assignment)
        return state.replace(assignment=assignment, pending=state.pending | {client.id})

    def on_leave(self, state: OCFLState, client: ClientId) -> OCFLState:
        state = super().on_leave(state, client)
        return state.replace(pending=state.pending - {client})

    def plan_round(
        self,
        state: OCFLState,
        round: int,
        clients: Sequence[ClientInfo],
        rng: np.random.Generator,
    ) -> list[TaskPlan]:
        """The clustering round until it has happened, then FedAvg per cluster."""
        overrides = {"epochs": self.cluster_epochs}
        initial = state.initial
        if not state.clustered:
            # Every client trains the same common model: the clustering round.
            return [
                TaskPlan(c.id, {state.assignment[c.id]: initial}, overrides)
                for c in clients
            ]
        pending = state.pending
        plans = [
            TaskPlan(c.id, {state.assignment[c.id]: initial}, overrides)
            for c in clients
            if c.id in pending
        ]
        by_cluster: dict[ClusterId, list[ClientInfo]] = {}
        for c in clients:
            if c.id not in pending:
                by_cluster.setdefault(state.assignment[c.id], []).append(c)
        for cluster in sorted(by_cluster):
            chosen = sample_clients(by_cluster[cluster], self.fraction, rng)
            plans.extend(self.plan_for(state, c.id) for c in chosen)
        return sorted(plans, key=lambda p: p.client)

    def aggregate(
        self,
        state: OCFLState,
        round: int,
        updates: Sequence[ClientUpdate],
        rng: np.random.Generator,
    ) -> OCFLState:
        # Only accepted updates of clients still here count.
        ok = [
            u
            for u in updates
            if u.ok
            and u.delta is not None
            and u.base is not None
            and u.client in state.assignment
        ]
        if not state.clustered:
            # A client with no samples says nothing about its distribution.
            usable = [u for u in ok if u.n_samples > 0]
            return self.clustering_round(state, usable) if usable else state
        pending = state.pending
        placed = [u for u in ok if u.client not in pending]
        state = move_clusters(state, placed, aggregator=self.aggregator)
        return self.place_pending(state, [u for u in ok if u.client in pending])

    # -- the steps of a round -------------------------------------------------

    def clustering_round(
        self, state: OCFLState, updates: Sequence[ClientUpdate]
    ) -> OCFLState:
        """Cluster the end models of the clustering round; build the clusters."""
        updates = sorted(updates, key=lambda u: u.client)
        points = np.stack([end_model(u) for u in updates])
        weights = np.array([u.n_samples for u in updates], dtype=np.float64)
        labels = cluster_models(
            points, min_samples=self.min_samples, xi=self.xi, metric=self.metric
        )
        labels = assign_noise(points, labels, weights, self.assign_noise, self.metric)
        if self.target_clusters is not None:
            labels = merge_clusters(points, labels, weights, self.target_clusters)
        centres = cluster_centres(points, labels, weights)
        models = {ClusterId(int(k)): v for k, v in centres.items()}
        assignment = {
            u.client: ClusterId(int(k)) for u, k in zip(updates, labels, strict=True)
        }
        # Clients without an accepted update wait in the largest cluster.
        waiting = frozenset(state.assignment) - set(assignment)
        state = state.replace(models=models, assignment=assignment)
        fallback = state.largest_cluster()
        assignment.update({client: fallback for client in waiting})
        return state.replace(
            assignment=assignment,
            clustered=True,
            pending=waiting,
            anchors=dict(models),  # centres in the clustered space
        )

    def place_pending(
        self, state: OCFLState, updates: Sequence[ClientUpdate]
    ) -> OCFLState:
        """Pending clients with an end model join the nearest clustering centre."""
        if not updates:
            return state
        anchors = state.anchors
        assignment = dict(state.assignment)
        for update in sorted(updates, key=lambda u: u.client):
            assignment[update.client] = nearest_cluster(
                end_model(update), anchors, self.metric
            )
        pending = state.pending - {u.client for u in updates}
        return state.replace(assignment=assignment, pending=pending)


# -- named steps, testable alone ----------------------------------------------


def cluster_models(
    points: np.ndarray, *, min_samples: int, xi: float, metric: str
) -> np.ndarray:
    """OPTICS labels of the rows of `points` (−1 for noise).

    Fewer points than `min_samples` cannot form a dense region: all are noise.
    """
    if len(points) < min_samples:
        return np.full(len(points), NOISE, dtype=np.int64)
    optics = OPTICS(min_samples=min_samples, xi=xi, metric=metric)
    return np.asarray(optics.fit_predict(points.astype(np.float64)), dtype=np.int64)


def assign_noise(
    points: np.ndarray,
    labels: np.ndarray,
    weights: np.ndarray,
    rule: NoiseRule,
    metric: str,
) -> np.ndarray:
    """Labels with no noise left: singleton clusters, or the nearest centre's.

    The result is renumbered 0..k−1 in order of first appearance.
    """
    labels = labels.copy()
    noise = np.flatnonzero(labels == NOISE)
    clustered = labels != NOISE
    if rule == "nearest" and clustered.any() and noise.size:
        centres = cluster_centres(
            points[clustered], labels[clustered], weights[clustered]
        )
        ids = sorted(centres)
        distances = pairwise_distances(
            points[noise], np.stack([centres[k] for k in ids]), metric=metric
        )
        labels[noise] = np.asarray(ids)[np.argmin(distances, axis=1)]
    else:
        next_label = labels.max(initial=NOISE) + 1
        for offset, index in enumerate(noise):
            labels[index] = next_label + offset
    return renumber(labels)


def merge_clusters(
    points: np.ndarray, labels: np.ndarray, weights: np.ndarray, target: int
) -> np.ndarray:
    """Merge clusters whose mean models are most alike by cosine, to `target`.

    Average-linkage agglomerative clustering (scikit-learn) on the cluster
    means; the labels of `points` follow their cluster's merged label.
    """
    centres = cluster_centres(points, labels, weights)
    if len(centres) <= target:
        return renumber(labels)
    ids = sorted(centres)
    merged = AgglomerativeClustering(
        n_clusters=target, metric="cosine", linkage="average"
    ).fit_predict(np.stack([centres[k] for k in ids]))
    relabel = dict(zip(ids, merged, strict=True))
    return renumber(np.array([relabel[k] for k in labels], dtype=np.int64))


def cluster_centres(
    points: np.ndarray, labels: np.ndarray, weights: np.ndarray
) -> dict[int, np.ndarray]:
    """Label → sample-weighted mean of its points, as float32 (noise excluded)."""
    return {
        int(k): weighted_mean(
            list(points[labels == k]), list(weights[labels == k])
        ).astype(np.float32)
        for k in np.unique(labels)
        if k != NOISE
    }


def nearest_cluster(
    point: np.ndarray, centres: Mapping[ClusterId, np.ndarray], metric: str
) -> ClusterId:
    """The cluster whose centre is nearest to `point` (ties: lowest id)."""
    ids = sorted(centres)
    distances = pairwise_distances(
        point[None, :], np.stack([centres[k] for k in ids]), metric=metric
    )[0]
    return ids[int(np.argmin(distances))]


def renumber(labels: np.ndarray) -> np.ndarray:
    """Labels 0..k−1 in order of first appearance, so ids do not depend on
    how OPTICS or the merge happened to number them."""
    order: dict[int, int] = {}
    for label in labels:
        order.setdefault(int(label), len(order))
    return np.array([order[int(label)] for label in labels], dtype=np.int64)


def end_model(update: ClientUpdate) -> np.ndarray:
    """Where a client's training ended: B = base + delta."""
    if update.base is None or update.delta is None:
        raise ValueError(f"the update of client {update.client} carries no model")
    end: np.ndarray = update.base + update.delta
    return end
