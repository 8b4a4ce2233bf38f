"""Clustering quality against the ground-truth groups (scikit-learn does the maths)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sklearn.metrics import adjusted_rand_score
from sklearn.metrics.cluster import contingency_matrix


def ari(groups: Sequence[int], clusters: Sequence[int]) -> float | None:
    """Adjusted Rand index of the clustering; None without clients."""
    if not groups:
        return None
    return float(adjusted_rand_score(groups, clusters))


def purity(groups: Sequence[int], clusters: Sequence[int]) -> float | None:
    """Share of clients in their cluster's majority group (Lin et al., Sec. III).

    Each found cluster counts its largest ground-truth group; purity is their
    sum over the number of clients.
    """
    if not groups:
        return None
    table = contingency_matrix(groups, clusters)
    return float(np.max(table, axis=0).sum() / len(groups))
