"""DCFL: affinity propagation on update distances, re-run when the Dunn index drops.

Augello, Falzone, Lo Re, "DCFL: Dynamic Clustered Federated Learning under
Differential Privacy Settings", IEEE PerCom Workshops 2023
(doi:10.1109/PerComWorkshops56833.2023.10150285).

Each round (Algorithm 1): every client trains from its cluster's model; each
cluster model becomes the mean of its members' new models; the distances of
this round's updates (`clusterfed.algorithms.distances`, Eq. 1–2) feed the
Dunn index of the current clustering (Eq. 3), and when there is one cluster or
the index is below 1, affinity propagation on −d gives a new clustering whose
models are the means of their members' models (Eq. 5). A client that joins
after the start trains once from W_G, the mean of the cluster models, and
joins the cluster whose vector W_G → W_C is nearest to its own W_G → B (Eq. 6).

Where the paper is loose, clusterfed decides:

- Cluster models are the unweighted mean of the members' new models, as Eq. 5
  writes it, both for the per-round update (Algorithm 1, line 17) and after
  re-clustering; `sample_weighted=True` weights both by sample counts instead.
  A robust `aggregator` folds the members' steps from their (weighted) mean
  start, the cluster's model when they all trained from it, and the model is
  that start plus the fold: rules that clip by norm (`norm_clip`,
  `centered_clip`) clip updates, never whole models.
- Only "ok" updates count. The distances, the Dunn index and re-clustering
  cover the clients that trained from their cluster model this round; a client
  that did not report keeps its cluster id, and a cluster nobody updated keeps
  its model. Clusters left without members are dropped.
- The Dunn index is undefined with fewer than two clusters or with no pair of
  clients sharing a cluster (all singletons); both cases re-cluster. An index
  of min/0 with min > 0 is +∞ (no re-clustering).
- Affinity propagation runs on the similarity −d with, by default, the median
  off-diagonal similarity as every client's preference (Frey & Dueck's
  default; "min" takes the smallest, which gives fewer clusters); 1 or 2
  clients form one cluster (two points show no structure).
  Convergence needs the exemplars unchanged for 7.5 / (1 − damping)
  iterations (scikit-learn's 15 at 0.5 stops heavily damped runs too early).
  If it does not converge it is retried once with damping 0.9 and four times
  the iterations; failing that, the clustering is kept for this round.
- New cluster ids are matched to old ones by largest overlap of members, so a
  cluster that survives re-clustering keeps its id; other clusters get fresh
  ids, never reused.
- A newcomer's first update (from W_G) is used only to place it: it is not
  folded into any cluster model nor into that round's clustering. It is placed
  against the cluster models after this round's aggregation, so the id it gets
  exists; until it is placed, it is evaluated on W_G and has no cluster.
  W_G travels under its own name, `GLOBAL` ("global" on the wire), never
  under an id of the cluster id space.

In asynchronous mode (`mode = "async"`) updates arrive one at a time:

- Each cluster keeps its own buffer and version (`_buffers.py`: FedBuff per
  cluster, τ in versions of the client's cluster). The update of a client
  re-clustered while it trained goes into no buffer: its delta starts from a
  model its new cluster never had.
- The clustering decision is taken every `window` accepted arrivals of
  placed clients (default: as many as there are placed clients, a round's
  worth; the window grows until it holds three clients, as fewer show no
  structure), on the latest update of each client in it, labelled by the
  clusters now: the Dunn index, and below 1 affinity propagation, Eq. 5's
  models from the window's end points, and every buffer emptied (its deltas
  start from models that may be gone). Then the window starts over. The DCFL
  distance needs no common origin, so updates from different versions
  compare as they are.
- A newcomer's first update (from W_G when sent) places it at once (Eq. 6).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from clusterfed.types import GLOBAL, ClientId, ClusterId, ModelKey

from ._aggregate import weighted_mean
from ._buffers import Buffered, ClusterBuffer, latest_per_client
from ._recluster import affinity_clusters, dunn_index, match_ids
from .base import ClientInfo, ClientUpdate, ServerState, Strategy
from .diagnostics import Diagnostics
from .distances import check_metric, pairwise_distances
from .robust import remember, robust_mean


@dataclass(frozen=True)
class DCFLState(ServerState):
    """Cluster models and assignment, plus what DCFL's steps remember.

    Attributes:
        pending: clients that joined late and wait for their first update
            (trained from W_G) to be placed; they have no cluster yet.
        next_cluster: the lowest id re-clustering may give a new cluster (ids
            are never reused).
        dunn_index: the last round's Dunn index (NaN when undefined, +∞ when
            unbounded); None before any round.
        reclustered: whether the last round re-clustered.
        buffers: asynchronous mode: each cluster's updates waiting for its
            next step.
        window: asynchronous mode: the accepted updates of placed clients
            since the last clustering decision.
    """

    pending: frozenset[ClientId] = frozenset()
    next_cluster: int = 1
    dunn_index: float | None = None
    reclustered: bool = False
    buffers: Mapping[ClusterId, ClusterBuffer] = field(default_factory=dict)
    window: tuple[ClientUpdate, ...] = ()


class DCFLDiagnostics(Diagnostics):
    """The last round's Dunn index (None when infinite or undefined) and
    whether that round re-clustered."""

    dunn_index: float | None
    reclustered: bool


class DCFL(Buffered, Strategy[DCFLState]):
    """Dynamic clustering of clients by the distances of their updates.

    Args:
        distance: the update distance: "complete" (the paper's, Eq. 2),
            "divergence" (exp(2ω) alone), "cosine" (1 − cos of the updates) or
            "euclidean" (distance of the end points) — Table II's ablation.
        damping: affinity propagation's damping factor, in [0.5, 1).
        preference: every client's self-similarity in affinity propagation:
            "median" or "min" of the off-diagonal similarities, or a number in
            units of −d (higher: more clusters).
        max_iter: affinity propagation's iteration limit (≥ 1).
        sample_weighted: weight cluster means by sample counts instead of
            the paper's plain mean (Eq. 5).
        window: asynchronous mode: arrivals per clustering decision; None:
            as many as there are placed clients.
        buffer_size, staleness, a, b, server_lr: asynchronous mode: each
            cluster's buffer (see `IFCA`).
    """

    name = "dcfl"
    state_type = DCFLState
    honours_aggregator = True
    supports_async = True
    honours_aggregator_async = True

    def __init__(
        self,
        *,
        distance: str = "complete",
        damping: float = 0.5,
        preference: float | str = "median",
        max_iter: int = 200,
        sample_weighted: bool = False,
        window: int | None = None,
        buffer_size: int = 3,
        staleness: str = "polynomial",
        a: float = 0.5,
        b: int = 4,
        server_lr: float = 1.0,
    ) -> None:
        self.distance = check_metric(distance)
        if window is not None and (type(window) is not int or window < 3):
            raise ValueError(f"window must be an integer >= 3 or None, got {window!r}")
        self.window = window
        self.init_buffering(
            buffer_size=buffer_size, staleness=staleness, a=a, b=b, server_lr=server_lr
        )
        if not 0.5 <= damping < 1:
            raise ValueError(f"damping must be in [0.5, 1), got {damping}")
        if isinstance(preference, str):
            if preference not in ("median", "min"):
                raise ValueError(
                    f"preference must be 'median', 'min' or a number: {preference!r}"
                )
        elif not math.isfinite(preference):
            raise ValueError(f"preference must be a finite number, got {preference}")
        if isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 1:
            raise ValueError(f"max_iter must be an integer ≥ 1, got {max_iter!r}")
        self.damping = damping
        self.preference = preference
        self.max_iter = max_iter
        self.sample_weighted = bool(sample_weighted)

    # -- membership -----------------------------------------------------------

    def on_join(self, state: DCFLState, client: ClientInfo) -> DCFLState:
        """Clients present from the start join cluster 0; later ones wait for
        their first update, trained from W_G, to be placed (Eq. 6)."""
        pending = state.pending - {client.id}
        if client.joined_round > 0:
            assignment = {k: v for k, v in state.assignment.items() if k != client.id}
            return state.replace(assignment=assignment, pending=pending | {client.id})
        state = super().on_join(state, client)
        return state.replace(pending=pending)

    def on_leave(self, state: DCFLState, client: ClientId) -> DCFLState:
        state = super().on_leave(state, client)
        return state.replace(
            models=_drop_empty(state.models, state.assignment),
            pending=state.pending - {client},
        )

    def model_for(
        self, state: DCFLState, client: ClientId
    ) -> tuple[ModelKey, np.ndarray]:
        """A placed client's cluster model; W_G for a newcomer not yet placed."""
        if client not in state.assignment and client in state.pending:
            return GLOBAL, global_model(state.models)
        return super().model_for(state, client)

    def diagnostics(self, state: DCFLState) -> DCFLDiagnostics | None:
        """The last Dunn index and whether the last round re-clustered; None
        before the first round."""
        if state.dunn_index is None:
            return None
        index = float(state.dunn_index)
        return DCFLDiagnostics(
            dunn_index=index if math.isfinite(index) else None,
            reclustered=bool(state.reclustered),
        )

    # -- the round ------------------------------------------------------------

    def aggregate(
        self,
        state: DCFLState,
        round: int,
        updates: Sequence[ClientUpdate],
        rng: np.random.Generator,
    ) -> DCFLState:
        usable = [
            u
            for u in sorted(updates, key=lambda u: u.client)
            if u.ok and u.base is not None and u.delta is not None
        ]
        members = [u for u in usable if u.client in state.assignment]
        newcomers = [u for u in usable if u.client in state.pending]
        if members:
            state = self.recluster_if_needed(state, members, rng)
        if newcomers:
            state = self.place_newcomers(state, newcomers)
        return state

    def recluster_if_needed(
        self,
        state: DCFLState,
        members: Sequence[ClientUpdate],
        rng: np.random.Generator,
    ) -> DCFLState:
        """Update the cluster models, then re-cluster when the Dunn index says so
        (Algorithm 1, lines 12–26). `members` are ok updates of placed clients.

        Draws one seed for affinity propagation from `rng` when it re-clusters.
        """
        old = [state.assignment[u.client] for u in members]
        return self._recluster(self._move(state, members, old), members, rng)

    def _recluster(
        self,
        state: DCFLState,
        members: Sequence[ClientUpdate],
        rng: np.random.Generator,
    ) -> DCFLState:
        """The Dunn index of `members`' updates under their clusters now;
        below 1, affinity propagation's clustering with Eq. 5's models."""
        old = [state.assignment[u.client] for u in members]
        arrays = [_arrays(u) for u in members]
        dist = pairwise_distances(
            np.stack([base for base, _ in arrays]),
            np.stack([delta for _, delta in arrays]),
            self.distance,
        )
        index = dunn_index(dist, np.asarray(old))
        state = state.replace(dunn_index=index, reclustered=False)
        if index >= 1:
            return state
        labels = affinity_clusters(
            dist,
            damping=self.damping,
            preference=self.preference,
            max_iter=self.max_iter,
            random_state=int(rng.integers(2**31 - 1)),
        )
        if labels is None:  # no convergence: keep the clustering this round
            return state
        ids, next_cluster = match_ids(old, labels, _next_cluster(state))
        assignment = dict(state.assignment)
        assignment.update({u.client: c for u, c in zip(members, ids, strict=True)})
        state = self._move(state, members, ids)
        return state.replace(
            models=_drop_empty(state.models, assignment),
            assignment=assignment,
            reclustered=True,
            next_cluster=next_cluster,
        )

    def absorb(
        self,
        state: DCFLState,
        update: ClientUpdate,
        staleness: int,
        rng: np.random.Generator,
    ) -> tuple[DCFLState, bool]:
        """Asynchronous mode (see the module docstring); `rng` to re-cluster."""
        if not update.ok or update.base is None or update.delta is None:
            return state, False
        if update.client in state.pending:
            return self.place_newcomers(state, [update]), False
        cluster = state.assignment.get(update.client)
        if cluster is None:  # it left while training
            return state, False
        state = state.replace(reclustered=False)  # each row says its own
        moved = False
        if update.cluster == cluster:
            weight = float(max(update.n_samples, 0)) if self.sample_weighted else 1.0
            folded = self.buffering.fold(
                state.models,
                state.buffers,
                update,
                staleness,
                weight,
                aggregator=self.aggregator,
                centres=state.centres,
            )
            moved = folded.moved
            state = state.replace(
                models=folded.models, buffers=folded.buffers, centres=folded.centres
            )
        window = (*state.window, update)
        size = self.window if self.window is not None else len(state.assignment)
        state = state.replace(window=window)
        members = [u for u in latest_per_client(window) if u.client in state.assignment]
        # Fewer than three clients show no structure (see affinity_clusters).
        if len(window) < size or len(members) < 3:
            return state, moved
        decided = self._recluster(state.replace(window=()), members, rng)
        if decided.reclustered:
            return decided.replace(buffers={}), True
        return decided, moved

    def place_newcomers(
        self, state: DCFLState, newcomers: Sequence[ClientUpdate]
    ) -> DCFLState:
        """Put each newcomer in the cluster nearest to its first update (Eq. 6)."""
        ids = sorted(state.models)
        targets = [state.models[c] for c in ids]
        placed = {
            u.client: ids[nearest_cluster(*_arrays(u), targets, self.distance)]
            for u in newcomers
        }
        return state.replace(
            assignment={**state.assignment, **placed},
            pending=state.pending - set(placed),
        )

    def _move(
        self,
        state: DCFLState,
        members: Sequence[ClientUpdate],
        labels: Sequence[ClusterId],
    ) -> DCFLState:
        """`state` with each cluster of `labels` at Eq. 5's model of its
        members, and its fold kept where the rule remembers it."""
        means, folds = self._cluster_means(members, labels, state.centres)
        models = {**state.models, **means}
        centres = remember(state.centres, folds, models, self.aggregator)
        return state.replace(models=models, centres=centres)

    def _cluster_means(
        self,
        members: Sequence[ClientUpdate],
        labels: Sequence[ClusterId],
        centres: Mapping[ClusterId, np.ndarray],
    ) -> tuple[dict[ClusterId, np.ndarray], dict[ClusterId, np.ndarray]]:
        """Eq. 5: each cluster's model is the mean of its members' new models;
        under a robust rule, their mean start plus the rule's fold of the
        steps from it (from the cluster's centre, where the rule keeps one).
        Returns the models and the robust folds."""
        groups: dict[ClusterId, list[ClientUpdate]] = {}
        for update, cluster in zip(members, labels, strict=True):
            groups.setdefault(cluster, []).append(update)
        means, folds = {}, {}
        for cluster, group in groups.items():
            weights = [max(u.n_samples, 0) for u in group]
            if not self.sample_weighted or sum(weights) <= 0:
                weights = [1] * len(group)
            arrays = [_arrays(u) for u in group]
            if self.aggregator.is_mean:
                ends = [base.astype(np.float64) + delta for base, delta in arrays]
                means[cluster] = weighted_mean(ends, weights).astype(np.float32)
                continue
            # A rule measured from the origin (norm_clip, centered_clip) must
            # see updates, not whole models: the members' steps from their
            # mean start (their common base when they share one, exactly:
            # float64 sums of float32 vectors times small counts are exact).
            origin = weighted_mean([b.astype(np.float64) for b, _ in arrays], weights)
            steps = [(base - origin) + delta for base, delta in arrays]
            fold = robust_mean(steps, weights, self.aggregator, centres.get(cluster))
            means[cluster] = (origin + fold).astype(np.float32)
            folds[cluster] = fold
        return means, folds


# -- placement, each step testable alone (re-clustering's: `_recluster.py`) -----


def nearest_cluster(
    base: np.ndarray, delta: np.ndarray, models: Sequence[np.ndarray], metric: str
) -> int:
    """Eq. 6: the index of the model W_C whose vector base → W_C is nearest,
    by `metric`, to the update base → base + delta (ties: the first)."""
    origin = np.asarray(base, dtype=np.float64)
    steps = np.stack([np.asarray(m, np.float64) - origin for m in models] + [delta])
    dist = pairwise_distances(origin, steps, metric)
    return int(np.argmin(dist[-1, :-1]))


def global_model(models: Mapping[ClusterId, np.ndarray]) -> np.ndarray:
    """W_G: the plain mean of the cluster models, in cluster-id order."""
    ids = sorted(models)
    return weighted_mean([models[c] for c in ids], [1] * len(ids)).astype(np.float32)


def _arrays(update: ClientUpdate) -> tuple[np.ndarray, np.ndarray]:
    """(base, delta) of an update that carries them."""
    if update.base is None or update.delta is None:
        raise ValueError(f"the update of client {update.client} carries no model")
    return update.base, update.delta


def _next_cluster(state: DCFLState) -> int:
    return max(state.next_cluster, max(state.models) + 1)


def _drop_empty(
    models: Mapping[ClusterId, np.ndarray], assignment: Mapping[ClientId, ClusterId]
) -> dict[ClusterId, np.ndarray]:
    """The models of clusters that hold a client; all of them if none does, so
    there is always a W_G for newcomers."""
    used = set(assignment.values())
    kept = {c: m for c, m in models.items() if c in used}
    return kept if kept else dict(models)
