"""CAFA: cluster-based client classification and accuracy-based aggregation.

Zhang, Wang, Li, Cardiff, Ranaweera, "Optimizing Federated Learning on
Non-IID Data with Clustering and Model Sharing" (code:
github.com/Gengsheng-Li/Non-IID-Robust-Federated-Learning-Algorithms).

One global model. CBCC (Sec. III-A): every client describes its data once by
its class histogram — the one piece of data description a client ever sends,
and only because this strategy asks (`wants`); K-means clusters the normalised
histograms (Eq. 1–2) with k chosen by the silhouette score (Eq. 3–6), the
largest cluster is labelled IID (Eq. 7) and every client weighs |C_i| / n, the
share of clients in its cluster (Eq. 8). ABFA (Sec. III-B): each round a random
subset of `selected` clients trains; their models are shared inside the subset
and every member scores its peers' models on its own held-out split; a model's
weighted accuracy (Eq. 9), normalised (Eq. 10), is its ABFA weight. The new
global model is the average of the subset's models weighted by the normalised
product of both weights (Eq. 11).

Where the paper is loose, clusterfed decides:

- Features are the normalised histograms of each client's training split
  (Eq. 1), sent once, in the clear (outside any DP accounting), by the clients
  present at the start of the first round. CBCC clusters that first batch; a
  client described later (a late joiner, or one unreachable in the first
  round) joins the cluster with the nearest centre (Euclidean) and the
  clusters are not recomputed.
- k runs over 2..min(n − 1, `k_max`) (the paper: 2..n − 1). For each k,
  scikit-learn's K-means (n_init = 10, one seed from the strategy's random
  stream for every k) is scored by the mean silhouette (Euclidean); a k for
  which K-means finds fewer than k distinct clusters is skipped; ties go to
  the smaller k. With fewer than 3 clients, or no k to score, all clients form
  one cluster.
- The IID cluster is the largest of the clients present (ties: lowest id), and
  |C_i| / n counts the clients present that CBCC has placed.
- ABFA's subset is drawn uniformly without replacement among the clients CBCC
  has placed (all clients while none is); its size defaults to 6, the authors'
  code's `num_selected` (the paper gives no number). The models travel through
  the server, which already holds them: a member receives the other members'
  trained models W_i = base + δ_i ("models received from other clients") and
  scores them on its held-out split — the split clusterfed evaluates clients
  on, which plays the paper's validation split. Each member also receives its
  own model, as Algorithm 1's line 13 reads and the authors' code does
  (`include_own=False` sends only the others' models).
- A_i (Eq. 9) averages the accuracies model i got, weighted by each scoring
  member's held-out size S_j. A model nobody scored (one member alone, probes
  that failed) gets the mean A of the others, or 1 if none was scored; weights
  that sum to zero become equal weights.
- Eq. 11 averages the models of the members whose update is "ok"; they all
  trained from the global model, so the new model is the global model plus
  the weighted mean of their deltas. No sample-count weighting (Eq. 11 has
  none). Late, failed and rejected updates take no part.
- CBCC's clusters are no model clusters: every client is assigned to the one
  global model, and CBCC's own decisions (k, each client's cluster, the IID
  clients) and ABFA's weights are reported by `diagnostics`.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
from sklearn.cluster import KMeans
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import silhouette_score

from clusterfed.types import ClientId

from ._abfa import (
    ABFARecord,
    ABFAWeight,
    abfa_record,
    abfa_weights,
    combined_weights,
    fill_missing,
    weighted_accuracy,
)
from .base import (
    ClientInfo,
    ClientUpdate,
    ProbePlan,
    ServerState,
    Strategy,
    TaskPlan,
    Want,
)
from .diagnostics import Diagnostics
from .robust import remember, robust_mean

N_INIT = 10  # K-means restarts per k


@dataclass(frozen=True)
class Clustering:
    """CBCC's result: the chosen k, each client's cluster, the centres, and the
    mean silhouette of every k that was scored."""

    k: int
    labels: np.ndarray
    centres: np.ndarray
    scores: Mapping[int, float]


@dataclass(frozen=True)
class CAFAState(ServerState):
    """The one global model, plus CBCC's clustering and the last ABFA round.

    Attributes:
        membership: each described client's CBCC cluster.
        clustering: CBCC's clustering of the first batch of histograms (k,
            centres, silhouettes); None until there is one.
        abfa: the last round's members and weights, in client order; None
            before the first aggregation.
    """

    membership: Mapping[ClientId, int] = field(default_factory=dict)
    clustering: Clustering | None = None
    abfa: tuple[ABFAWeight, ...] | None = None


class CBCCRecord(Diagnostics):
    """CBCC's decisions: k, the IID cluster and its clients, each described
    client's cluster (by client id, in id order) and the mean silhouette of
    every k scored (none for a membership without a clustering)."""

    k: int
    iid_cluster: int
    iid_clients: tuple[ClientId, ...]
    clusters: dict[ClientId, int]
    silhouette: dict[int, float]


class CAFADiagnostics(Diagnostics):
    """CBCC's clustering, once a client described its data, and the last
    round's ABFA weights, once a round aggregated; the record leaves out
    what is still None."""

    omit_when_none = frozenset({"cbcc", "abfa"})
    cbcc: CBCCRecord | None = None
    abfa: ABFARecord | None = None


class CAFA(Strategy[CAFAState]):
    """CBCC weights times ABFA weights over a random subset of clients.

    Args:
        selected: K, the clients that train each round and share their models
            (≥ 1; 2 or more for any sharing).
        k_max: the largest number of CBCC clusters to score (≥ 2); None scores
            up to n − 1, as the paper does.
        include_own: members also score their own model (Algorithm 1, line
            13, and the authors' code; the default); False: only the models
            received from the others.
    """

    name = "cafa"
    state_type = CAFAState
    honours_aggregator = True
    wants: ClassVar[tuple[Want, ...]] = ("class_histogram",)

    def __init__(
        self,
        *,
        selected: int = 6,
        k_max: int | None = None,
        include_own: bool = True,
    ) -> None:
        if isinstance(selected, bool) or not isinstance(selected, int) or selected < 1:
            raise ValueError(f"selected must be an integer ≥ 1, got {selected!r}")
        if k_max is not None and (
            isinstance(k_max, bool) or not isinstance(k_max, int) or k_max < 2
        ):
            raise ValueError(f"k_max must be an integer ≥ 2 or None, got {k_max!r}")
        self.selected = selected
        self.k_max = k_max
        self.include_own = bool(include_own)

    # -- CBCC -------------------------------------------------------------------

    def on_describe(
        self,
        state: CAFAState,
        round: int,
        histograms: Mapping[ClientId, np.ndarray],
        rng: np.random.Generator,
    ) -> CAFAState:
        """Cluster the first batch of histograms (one seed drawn from `rng`);
        place later ones by centre."""
        clients = sorted(histograms)
        features = class_features(np.stack([histograms[c] for c in clients]))
        membership = dict(state.membership)
        if state.clustering is None:
            found = cbcc_clustering(
                features,
                k_max=self.k_max,
                seed=int(rng.integers(2**31 - 1)),
            )
            labels = found.labels
            state = state.replace(clustering=found)
        else:
            labels = nearest_centre(features, state.clustering.centres)
        membership.update(
            {c: int(label) for c, label in zip(clients, labels, strict=True)}
        )
        return state.replace(membership=membership)

    def on_leave(self, state: CAFAState, client: ClientId) -> CAFAState:
        state = super().on_leave(state, client)
        membership = {c: k for c, k in state.membership.items() if c != client}
        return state.replace(membership=membership)

    def cbcc_weight(self, state: CAFAState, client: ClientId) -> float | None:
        """|C_i| / n for the client's cluster (Eq. 8); None if not placed."""
        membership = state.membership
        if client not in membership:
            return None
        sizes = Counter(membership.values())
        return sizes[membership[client]] / len(membership)

    # -- ABFA -------------------------------------------------------------------

    def plan_round(
        self,
        state: CAFAState,
        round: int,
        clients: Sequence[ClientInfo],
        rng: np.random.Generator,
    ) -> list[TaskPlan]:
        """K clients at random among those CBCC placed (everyone if none is)."""
        eligible = [c for c in clients if c.id in state.membership] or list(clients)
        if not eligible:
            return []
        k = min(self.selected, len(eligible))
        picked = rng.choice(len(eligible), size=k, replace=False)
        return [self.plan_for(state, eligible[i].id) for i in sorted(picked)]

    def plan_probes(
        self,
        state: CAFAState,
        round: int,
        updates: Sequence[ClientUpdate],
        rng: np.random.Generator,
    ) -> list[ProbePlan]:
        """Every member scores the other members' trained models."""
        models = {
            u.client: (u.base + u.delta).astype(np.float32)
            for u in _usable(updates)
            if u.base is not None and u.delta is not None
        }
        plans = []
        for client in models:
            shared = {
                owner: weights
                for owner, weights in models.items()
                if self.include_own or owner != client
            }
            if shared:
                plans.append(ProbePlan(client, shared))
        return plans

    def aggregate(
        self,
        state: CAFAState,
        round: int,
        updates: Sequence[ClientUpdate],
        rng: np.random.Generator,
    ) -> CAFAState:
        """Eq. 11 over the members whose update is ok."""
        members = _usable(updates)
        if not members:
            return state.replace(abfa=())
        accuracy = fill_missing(
            [
                weighted_accuracy(
                    [s.accuracy for s in u.peer_scores.values()],
                    [s.n_samples for s in u.peer_scores.values()],
                )
                if u.peer_scores
                else None
                for u in members
            ]
        )
        cbcc = fill_missing([self.cbcc_weight(state, u.client) for u in members])
        weights = combined_weights(cbcc, abfa_weights(accuracy))
        cluster = members[0].cluster_id
        deltas = [u.delta for u in members if u.delta is not None]
        centre = state.centres.get(cluster)
        step = robust_mean(deltas, weights.tolist(), self.aggregator, centre)
        models = dict(state.models)
        models[cluster] = (state.models[cluster] + step).astype(np.float32)
        centres = remember(state.centres, {cluster: step}, models, self.aggregator)
        record = tuple(
            ABFAWeight(u.client, float(a), float(c), float(w))
            for u, a, c, w in zip(members, accuracy, cbcc, weights, strict=True)
        )
        return state.replace(models=models, abfa=record, centres=centres)

    # -- results ----------------------------------------------------------------

    def diagnostics(self, state: CAFAState) -> CAFADiagnostics | None:
        """CBCC's clustering and IID clients (once a client described its
        data); the last round's ABFA weights (once a round aggregated)."""
        cbcc: CBCCRecord | None = None
        membership = state.membership
        if membership:
            iid = iid_cluster(list(membership.values()))
            n_clusters = len(set(membership.values()))
            scores: Mapping[int, float] = {}
            if state.clustering is not None:
                n_clusters, scores = state.clustering.k, state.clustering.scores
            cbcc = CBCCRecord(
                k=int(n_clusters),
                iid_cluster=iid,
                iid_clients=tuple(sorted(c for c, k in membership.items() if k == iid)),
                clusters=dict(sorted(membership.items())),
                silhouette={k: float(s) for k, s in sorted(scores.items())},
            )
        abfa = None if state.abfa is None else abfa_record(state.abfa)
        if cbcc is None and abfa is None:
            return None
        return CAFADiagnostics(cbcc=cbcc, abfa=abfa)


# -- CBCC's maths, each step alone (ABFA's: `_abfa.py`) --------------------------------


def class_features(counts: np.ndarray) -> np.ndarray:
    """Eq. 1–2: each row of class counts divided by its total."""
    counts = np.asarray(counts, dtype=np.float64)
    totals = counts.sum(axis=1, keepdims=True)
    if (totals <= 0).any():
        raise ValueError("every class histogram needs at least one sample")
    features: np.ndarray = counts / totals
    return features


def cbcc_clustering(
    features: np.ndarray, *, k_max: int | None = None, seed: int = 0
) -> Clustering:
    """K-means with k = argmax of the mean silhouette over 2..min(n − 1, k_max)
    (Eq. 3–6); one cluster when no k can be scored."""
    n = len(features)
    top = n - 1 if k_max is None else min(n - 1, k_max)
    scores: dict[int, float] = {}
    best: tuple[float, int, np.ndarray, np.ndarray] | None = None
    for k in range(2, top + 1):
        with warnings.catch_warnings():
            # Fewer distinct points than k: K-means says so; the k is skipped.
            warnings.simplefilter("ignore", ConvergenceWarning)
            fit = KMeans(n_clusters=k, n_init=N_INIT, random_state=seed).fit(features)
        labels = fit.labels_
        if len(np.unique(labels)) != k:
            continue
        score = float(silhouette_score(features, labels))
        scores[k] = score
        if best is None or score > best[0]:
            best = (score, k, labels, fit.cluster_centers_)
    if best is None:
        return Clustering(
            1, np.zeros(n, dtype=int), features.mean(axis=0, keepdims=True), scores
        )
    _, k, labels, centres = best
    return Clustering(k, np.asarray(labels, dtype=int), np.asarray(centres), scores)


def iid_cluster(labels: Sequence[int] | np.ndarray) -> int:
    """Eq. 7: the cluster with the most clients (ties: the lowest id)."""
    sizes = Counter(int(label) for label in labels)
    return min(sizes, key=lambda k: (-sizes[k], k))


def cbcc_weights(labels: Sequence[int] | np.ndarray) -> np.ndarray:
    """Eq. 8: each client's weight, the share of all clients in its cluster."""
    sizes = Counter(int(label) for label in labels)
    return np.array([sizes[int(label)] / len(labels) for label in labels])


def nearest_centre(features: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """The index of the nearest centre (Euclidean) for each row of `features`."""
    gaps = features[:, None, :] - np.asarray(centres)[None, :, :]
    nearest: np.ndarray = np.argmin(np.einsum("ikd,ikd->ik", gaps, gaps), axis=1)
    return nearest


# -- helpers ---------------------------------------------------------------------


def _usable(updates: Sequence[ClientUpdate]) -> list[ClientUpdate]:
    return [
        u
        for u in sorted(updates, key=lambda u: u.client)
        if u.ok and u.base is not None and u.delta is not None
    ]
