"""PACFL's maths: principal angles between client data subspaces, the
proximity matrix, and the hierarchical clustering of it (see pacfl.py).

Kept apart from the strategy so each step is tested alone, and checked against
libraries that compute the same thing another way (tests/test_pacfl.py):
`scipy.linalg.subspace_angles` for the angles, scikit-learn's
`AgglomerativeClustering` and the authors' own merge loop for the clustering.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.spatial.distance import squareform

Measure = Literal["smallest", "basis"]
Linkage = Literal["weighted", "average", "complete", "single"]
MEASURES: tuple[Measure, ...] = ("smallest", "basis")
LINKAGES: tuple[Linkage, ...] = ("weighted", "average", "complete", "single")


def orthonormal(basis: np.ndarray) -> np.ndarray:
    """An orthonormal basis (float64, d × r) of the span of `basis`'s columns.

    A client's per-class blocks are each orthonormal but not orthogonal to one
    another (and may be more than d columns), so the span is taken by SVD,
    dropping directions below the rank tolerance numpy's `matrix_rank` uses.
    """
    matrix = np.asarray(basis, dtype=np.float64)
    u, s, _ = np.linalg.svd(matrix, full_matrices=False)
    if s.size == 0 or s[0] == 0:
        return u[:, :0]
    tolerance = s[0] * max(matrix.shape) * np.finfo(np.float64).eps
    return u[:, : int(np.sum(s > tolerance))]


def smallest_angle(qa: np.ndarray, qb: np.ndarray) -> float:
    """θ₁, the smallest principal angle between span(qa) and span(qb), in degrees.

    `qa`, `qb` are orthonormal (`orthonormal`). cos θ₁ is the largest singular
    value of qaᵀqb; where it is near 1 (θ₁ < 45°) arccos loses precision, so
    θ₁ comes from sin θ₁, the smallest singular value of the smaller basis's
    residual off the larger span (Björck & Golub 1973; what scipy does).
    """
    if qa.shape[1] == 0 or qb.shape[1] == 0:
        return 90.0
    if qa.shape[1] < qb.shape[1]:
        qa, qb = qb, qa
    cosines = np.linalg.svd(qa.T @ qb, compute_uv=False)
    largest = min(float(cosines[0]), 1.0)
    if largest**2 < 0.5:
        return float(np.degrees(np.arccos(largest)))
    residual = qb - qa @ (qa.T @ qb)
    sines = np.linalg.svd(residual, compute_uv=False)
    return float(np.degrees(np.arcsin(min(float(sines[-1]), 1.0))))


def basis_angle(ua: np.ndarray, ub: np.ndarray) -> float:
    """The authors' code's proximity: the smallest angle between a column of
    `ua` and a column of `ub`, min arccos(uᵢ·wⱼ) in degrees, signs as sent
    (`calculating_adjacency` in MMorafah/PACFL). It bounds θ₁ from above and
    depends on the sign SVD gave each vector."""
    products = np.asarray(ua, np.float64).T @ np.asarray(ub, np.float64)
    return float(np.degrees(np.arccos(np.clip(products, -1.0, 1.0)).min()))


def proximity(bases: Sequence[np.ndarray], measure: Measure) -> np.ndarray:
    """The symmetric n × n matrix of angles (degrees) between the clients'
    subspaces, 0 on the diagonal."""
    n = len(bases)
    matrix = np.zeros((n, n))
    if measure == "smallest":
        spans = [orthonormal(b) for b in bases]
        for i in range(n):
            for j in range(i + 1, n):
                matrix[i, j] = matrix[j, i] = smallest_angle(spans[i], spans[j])
    else:
        for i in range(n):
            for j in range(i + 1, n):
                # The code's matrix need not be symmetric in float; take the
                # (i, j) product for both halves.
                matrix[i, j] = matrix[j, i] = basis_angle(bases[i], bases[j])
    return matrix


def angles_to(
    basis: np.ndarray, others: Sequence[np.ndarray], measure: Measure
) -> np.ndarray:
    """The angles (degrees) from one subspace to each of `others`."""
    if measure == "basis":
        return np.array([basis_angle(basis, b) for b in others])
    span = orthonormal(basis)
    return np.array([smallest_angle(span, orthonormal(b)) for b in others])


def cluster(matrix: np.ndarray, threshold: float, method: Linkage) -> np.ndarray:
    """Agglomerative clustering of a proximity matrix: the two nearest clusters
    merge (distance between clusters by `method`) while they are at most
    `threshold` apart. Labels 0..k−1 in order of each cluster's first row.

    `weighted` is WPGMA, the merge rule of the authors' `hierarchical_clustering`
    with `linkage='average'` (the merged row is the mean of the two rows);
    `average` is UPGMA (mean over all member pairs), `complete` the maximum,
    `single` the minimum. Cut with scipy's `fcluster(criterion="distance")`:
    all four are monotone, so the cut is the greedy merge stopped at the
    threshold.
    """
    n = len(matrix)
    if n == 1:
        return np.zeros(1, dtype=np.int64)
    condensed = squareform(np.asarray(matrix, dtype=np.float64), checks=False)
    tree = linkage(condensed, method=method)
    labels = fcluster(tree, t=threshold, criterion="distance")
    return renumber(np.asarray(labels, dtype=np.int64))


def cluster_distance(angles: np.ndarray, method: Linkage) -> float:
    """A newcomer's distance to a cluster, from its angles to the members:
    the mean (`weighted`, `average`), the maximum (`complete`) or the minimum
    (`single`)."""
    if method == "complete":
        return float(angles.max())
    if method == "single":
        return float(angles.min())
    return float(angles.mean())


def renumber(labels: np.ndarray) -> np.ndarray:
    """Labels 0..k−1 in order of first appearance."""
    order: dict[int, int] = {}
    for label in labels:
        order.setdefault(int(label), len(order))
    return np.array([order[int(label)] for label in labels], dtype=np.int64)
