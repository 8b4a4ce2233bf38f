"""DCFL's re-clustering step: the Dunn index, affinity propagation, new ids.

Augello, Falzone, Lo Re, "DCFL: Dynamic Clustered Federated Learning under
Differential Privacy Settings", IEEE PerCom Workshops 2023 (Eq. 3 and the
re-clustering of Algorithm 1). Each step is a plain function on a distance
matrix and labels, tested alone; `clusterfed.algorithms.dcfl` decides when
they run and re-exports them.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from collections.abc import Sequence

import numpy as np
from sklearn.cluster import AffinityPropagation
from sklearn.exceptions import ConvergenceWarning

from clusterfed.types import ClusterId


def dunn_index(dist: np.ndarray, labels: np.ndarray) -> float:
    """Eq. 3: the smallest distance between clients of different clusters
    (single linkage) over the largest distance within a cluster.

    NaN when undefined (one cluster, or no two clients share a cluster), +∞
    when every within-cluster distance is 0 and some between-cluster one is not.
    """
    labels = np.asarray(labels)
    same = labels[:, None] == labels[None, :]
    between = dist[~same]
    within = dist[same & ~np.eye(len(labels), dtype=bool)]
    if between.size == 0 or within.size == 0:
        return math.nan
    low, high = float(between.min()), float(within.max())
    if high == 0:
        return math.inf if low > 0 else math.nan
    return low / high


def affinity_clusters(
    dist: np.ndarray,
    *,
    damping: float = 0.5,
    preference: float | str = "median",
    max_iter: int = 200,
    random_state: int = 0,
) -> np.ndarray | None:
    """Cluster labels 0..k−1 by affinity propagation on −dist; None if it does
    not converge even with damping 0.9 and four times the iterations.

    The exemplars must stay unchanged for 7.5 / (1 − damping) iterations
    (scikit-learn's 15 at damping 0.5) before the answer counts as converged.
    """
    n = dist.shape[0]
    similarity = -np.asarray(dist, dtype=np.float64)
    off = similarity[~np.eye(n, dtype=bool)]
    # 1–2 clients, or all equally far apart: there is no structure to find
    # (scikit-learn would warn and pick an arbitrary answer).
    if n <= 2 or float(off.max()) == float(off.min()):
        return np.zeros(n, dtype=int)
    if preference == "median":
        level = float(np.median(off))
    elif preference == "min":
        level = float(np.min(off))
    else:
        level = float(preference)
    tries = [(damping, max_iter), (max(damping, 0.9), 4 * max_iter)]
    for try_damping, try_iter in tries:
        model = AffinityPropagation(
            affinity="precomputed",
            damping=try_damping,
            max_iter=try_iter,
            # Heavier damping moves the messages more slowly, so the exemplars
            # look stable long before they are: scikit-learn's 15 quiet
            # iterations suit damping 0.5; wait ∝ 1 / (1 − damping).
            convergence_iter=round(7.5 / (1 - try_damping)),
            preference=level,
            random_state=random_state,
        )
        with warnings.catch_warnings():
            # Non-converged labels may be degenerate: treat them as no answer.
            warnings.simplefilter("error", ConvergenceWarning)
            try:
                labels = model.fit(similarity).labels_
            except ConvergenceWarning:
                continue
        if (labels >= 0).all():
            return np.asarray(labels, dtype=int)
    return None


def match_ids(
    old: Sequence[ClusterId], new: np.ndarray, next_cluster: int
) -> tuple[list[ClusterId], int]:
    """Cluster ids for new labels: each new cluster takes the old id it shares
    most members with (ties: lower label, then lower id), each old id at most
    once; the rest take fresh ids from `next_cluster` on.

    Returns the id of each client and the next fresh id.
    """
    labels = [int(x) for x in new]
    overlap = Counter(zip(labels, old, strict=True))
    chosen: dict[int, ClusterId] = {}
    taken: set[ClusterId] = set()
    for (label, cluster), _ in sorted(
        overlap.items(), key=lambda kv: (-kv[1], kv[0][0], kv[0][1])
    ):
        if label not in chosen and cluster not in taken:
            chosen[label] = cluster
            taken.add(cluster)
    for label in sorted(set(labels) - set(chosen)):
        chosen[label] = ClusterId(next_cluster)
        next_cluster += 1
    return [chosen[label] for label in labels], next_cluster
