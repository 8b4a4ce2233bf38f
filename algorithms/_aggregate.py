"""Shared aggregation maths on flat vectors."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np

from clusterfed.types import ClusterId

from .base import ClientUpdate, S
from .robust import MEAN, AggregatorRule, remember, robust_mean

ClusterMean = Literal["plain", "weighted"]
"""How a cluster averages its members: every member alike ("plain", the mean
the reference codes of CFL and IFCA take) or by sample count ("weighted",
FedAvg's)."""
CLUSTER_MEANS: tuple[ClusterMean, ...] = ("plain", "weighted")


def check_cluster_mean(mean: str) -> ClusterMean:
    """`mean` if it names a `ClusterMean`.

    Raises:
        ValueError: it does not.
    """
    for known in CLUSTER_MEANS:
        if mean == known:
            return known
    raise ValueError(f"mean must be 'plain' or 'weighted', got {mean!r}")


def member_weights(counts: Sequence[int], mean: ClusterMean) -> list[int]:
    """Each member's weight in its cluster's mean: its sample count, or 1."""
    return list(counts) if mean == "weighted" else [1] * len(counts)


def weighted_mean(
    vectors: Sequence[np.ndarray], weights: Sequence[float]
) -> np.ndarray:
    """Σ wᵢ vᵢ / Σ wᵢ, accumulated in float64 in the given order.

    The weights are summed in float64 (never int64, which a huge count would
    wrap), exactly as numpy sums integers for every count a client may send.
    """
    total = float(np.sum(np.asarray(weights, dtype=np.float64)))
    if not vectors or total <= 0:
        raise ValueError("weighted_mean needs vectors with a positive total weight")
    acc = np.zeros(vectors[0].shape, dtype=np.float64)
    for vector, weight in zip(vectors, weights, strict=True):
        acc += scaled(vector, weight)
    return acc / total


def scaled(vector: np.ndarray, weight: float) -> np.ndarray:
    """`weight` × `vector`, to be added to a float64 sum.

    In the vector's own dtype, as the sums were always formed (so every
    result stays bit for bit), unless that overflows: then in float64. A
    float32 delta near its dtype's limit times a large sample count was Inf,
    and every aggregation of the run was refused.
    """
    with np.errstate(over="ignore"):  # an overflow is caught just below
        product: np.ndarray = float(weight) * vector
    if product.dtype != np.float64 and not np.isfinite(product).all():
        product = np.multiply(vector, weight, dtype=np.float64)
    return product


class ClusterSums:
    """Each cluster's running Σ wᵢ δᵢ (float64) and Σ wᵢ, in the order added.

    What a mean-aggregating round needs of its updates: the server adds each
    accepted delta as its reply is decided and drops it (streaming
    aggregation), so memory holds one sum per cluster, not one delta per
    client. Added in client order, the mean equals `weighted_mean` over the
    same updates bit for bit: the same float64 accumulation, one update at a
    time, and weights (sample counts or 1) whose float64 sum is exact in any
    order.
    """

    def __init__(self) -> None:
        self._sums: dict[ClusterId, np.ndarray] = {}
        self._weights: dict[ClusterId, float] = {}
        # Client-level DP's public count (`release`): each mean's divisor in
        # place of its cluster's true weight, which DP does not cover.
        self._denominator: float | None = None

    def add(self, cluster: ClusterId, delta: np.ndarray, weight: float) -> None:
        """Fold `weight` × `delta` into `cluster`'s sum (a weight ≤ 0 is not
        a member: nothing is added)."""
        if weight <= 0:
            return
        acc = self._sums.get(cluster)
        if acc is None:
            acc = self._sums[cluster] = np.zeros(delta.shape, dtype=np.float64)
        acc += scaled(delta, weight)
        self._weights[cluster] = self._weights.get(cluster, 0.0) + float(weight)

    @property
    def clusters(self) -> list[ClusterId]:
        """The clusters some update (or, released, noise) was added to, in
        id order."""
        return sorted(self._sums)

    def release(
        self, noise: Mapping[ClusterId, np.ndarray], denominator: float
    ) -> None:
        """Client-level DP's release: add `noise` to each named cluster's
        sum, a cluster no update reached included (its sum is 0), and divide
        every mean by the public `denominator` (> 0) from now on, not by a
        cluster's true weight, which the noise does not privatise."""
        if not denominator > 0:
            raise ValueError(f"denominator must be > 0, got {denominator}")
        for cluster, drawn in noise.items():
            acc = self._sums.get(cluster)
            if acc is None:
                acc = self._sums[cluster] = np.zeros(drawn.shape, dtype=np.float64)
            acc += drawn
        self._denominator = float(denominator)

    def mean(self, cluster: ClusterId) -> np.ndarray:
        """Σ wᵢ δᵢ / Σ wᵢ of `cluster` (float64); once released, the noisy
        sum over the public denominator."""
        if self._denominator is not None:
            return self._sums[cluster] / self._denominator
        return self._sums[cluster] / self._weights[cluster]

    def step(
        self, models: Mapping[ClusterId, np.ndarray], *, server_lr: float = 1.0
    ) -> dict[ClusterId, np.ndarray]:
        """`models` with each summed cluster moved by `server_lr` × its mean."""
        new = dict(models)
        for cluster in self.clusters:
            new[cluster] = (models[cluster] + server_lr * self.mean(cluster)).astype(
                np.float32
            )
        return new


def counts_in_mean(update: ClientUpdate) -> bool:
    """Whether an update joins its cluster's mean: accepted, with a delta of
    at least one sample."""
    return update.ok and update.delta is not None and update.n_samples > 0


def sum_per_cluster(
    updates: Sequence[ClientUpdate], mean: ClusterMean = "weighted"
) -> ClusterSums:
    """The `ClusterSums` of the updates that count, in client order."""
    sums = ClusterSums()
    for update in sorted(updates, key=lambda u: u.client):
        if counts_in_mean(update):
            assert update.delta is not None
            sums.add(update.cluster_id, update.delta, member_weight(update, mean))
    return sums


def member_weight(update: ClientUpdate, mean: ClusterMean) -> float:
    """An update's weight in its cluster's mean: its sample count, or 1."""
    return float(update.n_samples) if mean == "weighted" else 1.0


def average_per_cluster(
    models: Mapping[ClusterId, np.ndarray],
    updates: Sequence[ClientUpdate],
    *,
    server_lr: float = 1.0,
    aggregator: AggregatorRule = MEAN,
    mean: ClusterMean = "weighted",
) -> dict[ClusterId, np.ndarray]:
    """Each cluster's model plus the mean of its members' deltas, sample-weighted
    or plain (`mean`), or what `aggregator` makes of them (see `robust.py`;
    a rule that remembers its last fold starts from the origin here: use
    `move_clusters`, which keeps it in the state).

    Only accepted ("ok") updates count; a cluster nobody updated keeps its model.
    Updates are taken in client order so the sum is the same in every run.
    """
    if aggregator.is_mean:
        return sum_per_cluster(updates, mean).step(models, server_lr=server_lr)
    folds = fold_per_cluster(updates, aggregator, mean, {})
    return _moved(models, folds, server_lr)


def move_clusters(
    state: S,
    updates: Sequence[ClientUpdate],
    *,
    server_lr: float = 1.0,
    aggregator: AggregatorRule = MEAN,
    mean: ClusterMean = "weighted",
) -> S:
    """`state` with its models moved as `average_per_cluster` moves them,
    each fold started from the cluster's centre and kept as its next one
    where the rule `remembers` it (centred clipping)."""
    if aggregator.is_mean:
        models = average_per_cluster(
            state.models, updates, server_lr=server_lr, mean=mean
        )
        return state.replace(models=models)
    folds = fold_per_cluster(updates, aggregator, mean, state.centres)
    models = _moved(state.models, folds, server_lr)
    return state.replace(
        models=models, centres=remember(state.centres, folds, models, aggregator)
    )


def fold_per_cluster(
    updates: Sequence[ClientUpdate],
    aggregator: AggregatorRule,
    mean: ClusterMean,
    centres: Mapping[ClusterId, np.ndarray],
) -> dict[ClusterId, np.ndarray]:
    """Each updated cluster's step by `aggregator` (float64), from its
    centre where it has one; the updates that count, in client order."""
    by_cluster: dict[ClusterId, list[tuple[np.ndarray, int]]] = defaultdict(list)
    for update in sorted(updates, key=lambda u: u.client):
        if counts_in_mean(update) and update.delta is not None:
            by_cluster[update.cluster_id].append((update.delta, update.n_samples))
    folds = {}
    for cluster, members in by_cluster.items():
        weights = member_weights([n for _, n in members], mean)
        folds[cluster] = robust_mean(
            [d for d, _ in members], weights, aggregator, centres.get(cluster)
        )
    return folds


def _moved(
    models: Mapping[ClusterId, np.ndarray],
    folds: Mapping[ClusterId, np.ndarray],
    server_lr: float,
) -> dict[ClusterId, np.ndarray]:
    """`models` with each folded cluster moved by `server_lr` × its fold."""
    new = dict(models)
    for cluster, fold in folds.items():
        new[cluster] = (models[cluster] + server_lr * fold).astype(np.float32)
    return new
