"""Shared aggregation maths on flat vectors."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np

from clusterfed.types import ClusterId

from .base import ClientUpdate
from .robust import MEAN, Krum, Mean, Median, NormClip, TrimmedMean, robust_mean

AggregatorRule = Mean | Median | TrimmedMean | Krum | NormClip

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
        acc += float(weight) * vector
    return acc / total


def average_per_cluster(
    models: Mapping[ClusterId, np.ndarray],
    updates: Sequence[ClientUpdate],
    *,
    server_lr: float = 1.0,
    aggregator: AggregatorRule = MEAN,
    mean: ClusterMean = "weighted",
) -> dict[ClusterId, np.ndarray]:
    """Each cluster's model plus the mean of its members' deltas, sample-weighted
    or plain (`mean`), or what `aggregator` makes of them (see `robust.py`).

    Only accepted ("ok") updates count; a cluster nobody updated keeps its model.
    Updates are taken in client order so the sum is the same in every run.
    """
    by_cluster: dict[ClusterId, list[tuple[np.ndarray, int]]] = defaultdict(list)
    for update in sorted(updates, key=lambda u: u.client):
        if update.ok and update.delta is not None and update.n_samples > 0:
            by_cluster[update.cluster].append((update.delta, update.n_samples))
    new = dict(models)
    for cluster, members in by_cluster.items():
        weights = member_weights([n for _, n in members], mean)
        step = robust_mean([d for d, _ in members], weights, aggregator)
        new[cluster] = (models[cluster] + server_lr * step).astype(np.float32)
    return new
