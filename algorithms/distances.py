"""Pairwise distances between client updates, computed from Gram matrices.

An update i goes from the model the client was sent, its start Aᵢ, to where its
training ended, Bᵢ = Aᵢ + δᵢ. DCFL's divergence (Eq. 1) and distance (Eq. 2) of

    Augello, Falzone, Lo Re, "DCFL: Dynamic Clustered Federated Learning under
    Differential Privacy Settings", PerCom Workshops 2023,

in vector form (the paper's |AB| cos α + |CD| cos β is (δ₁ − δ₂)·(B₁ − B₂) / ‖B₁ − B₂‖):

    ω = (δ₁ − δ₂)·(B₁ − B₂) / (‖B₁ − B₂‖ · (‖δ₁‖ + ‖δ₂‖))  ∈ [−1, 1]
    d = ‖B₁ − B₂‖ · exp(2ω),  and d = 0 when B₁ = B₂.

The metrics of the paper's ablation (Table II) are options:

- ``"complete"``: d above (the default);
- ``"divergence"``: exp(2ω) alone (0 when B₁ = B₂, as for the complete metric);
- ``"cosine"``: the cosine distance of the updates, 1 − cos(δ₁, δ₂) (the paper's
  D_C = 1 − cos γ);
- ``"euclidean"``: ‖B₁ − B₂‖, the distance of the end points.

Every n × n matrix comes from at most two n×d by d×n products (``E Eᵀ`` and
``Δ Eᵀ`` with E the end points, or ``Δ Δᵀ`` for the cosine), never from a loop
over pairs. Products run in float64 over blocks of columns, so float32 inputs
cost no more than one block of extra memory, and the mean end point is taken
off each block first: every metric is shift-invariant, and a large common
offset would otherwise drown the differences in ``‖Bᵢ‖² + ‖Bⱼ‖² − 2 Bᵢ·Bⱼ``.

`update_distance`, `divergence` and `naive_pairwise_distances` compute the same
quantities pair by pair, straight from the definitions; they are the reference
for tests and benchmarks, not for production use.
"""

from __future__ import annotations

from typing import Literal, cast, get_args

import numpy as np

Metric = Literal["complete", "divergence", "cosine", "euclidean"]
METRICS: tuple[str, ...] = get_args(Metric)

# Squared end-point distances below this fraction of ‖Bᵢ‖² + ‖Bⱼ‖² (around the
# mean end point) are rounding noise of the Gram route: such end points count
# as equal, so d = 0 exactly as the paper asks, instead of noise · exp(2·noise).
_SAME_END = 1e-12

# Columns per block: about 4 M float64 values (32 MB) per n × block array.
_BLOCK_VALUES = 1 << 22


def check_metric(metric: str) -> Metric:
    """`metric` if it is one of `METRICS`, else ValueError naming it."""
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)}; got {metric!r}")
    return cast(Metric, metric)


def pairwise_distances(
    starts: np.ndarray, deltas: np.ndarray, metric: str = "complete"
) -> np.ndarray:
    """The n × n matrix of distances between n updates (float64, zero diagonal).

    Args:
        starts: the models the clients started from, shape (n, d), or (d,)
            when they all started from one model.
        deltas: the updates δᵢ = Bᵢ − Aᵢ, shape (n, d).
        metric: one of `METRICS`.
    """
    metric = check_metric(metric)
    if metric == "cosine":
        return 1.0 - cosine_similarities(deltas)
    omega, ends = _divergence_and_ends(starts, deltas)
    if metric == "euclidean":
        return ends
    if metric == "divergence":
        dist = np.where(ends > 0, np.exp(2.0 * omega), 0.0)
    else:
        dist = ends * np.exp(2.0 * omega)
    np.fill_diagonal(dist, 0.0)
    return dist


def pairwise_divergence(starts: np.ndarray, deltas: np.ndarray) -> np.ndarray:
    """The n × n matrix of ω (Eq. 1); 0 where it is undefined (B₁ = B₂, or
    both updates are zero)."""
    return _divergence_and_ends(starts, deltas)[0]


def cosine_similarities(deltas: np.ndarray) -> np.ndarray:
    """cos(δᵢ, δⱼ) for every pair, from one Gram matrix.

    A zero update has no direction: its cosine with any other update is 0 (and
    1 with itself, so the cosine distance keeps a zero diagonal).
    """
    deltas = _as_rows(deltas, "deltas")
    n, d = deltas.shape
    gram = np.zeros((n, n))
    for cols in _blocks(n, d):
        block = deltas[:, cols].astype(np.float64)
        gram += block @ block.T
    norms = np.sqrt(np.maximum(np.diag(gram), 0.0))
    scale = np.outer(norms, norms)
    cos: np.ndarray = np.divide(gram, scale, out=np.zeros_like(gram), where=scale > 0)
    cos = np.clip((cos + cos.T) / 2, -1.0, 1.0)
    np.fill_diagonal(cos, 1.0)
    return cos


# -- the Gram route -----------------------------------------------------------


def _divergence_and_ends(
    starts: np.ndarray, deltas: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(ω, ‖Bᵢ − Bⱼ‖) for every pair, from E Eᵀ and Δ Eᵀ.

    With E the end points less their mean: ‖Bᵢ − Bⱼ‖² = Gᵢᵢ + Gⱼⱼ − 2Gᵢⱼ
    (G = E Eᵀ) and (δᵢ − δⱼ)·(Bᵢ − Bⱼ) = Hᵢᵢ + Hⱼⱼ − Hᵢⱼ − Hⱼᵢ (H = Δ Eᵀ).
    """
    deltas = _as_rows(deltas, "deltas")
    starts = np.asarray(starts)
    n, d = deltas.shape
    if starts.shape not in ((d,), (n, d)):
        raise ValueError(
            f"starts must have shape ({d},) or ({n}, {d}), got {starts.shape}"
        )
    gram = np.zeros((n, n))  # G = E Eᵀ
    cross = np.zeros((n, n))  # H = Δ Eᵀ
    delta_sq = np.zeros(n)  # ‖δᵢ‖², a row sum: no product needed
    for cols in _blocks(n, d):
        step = deltas[:, cols].astype(np.float64)
        ends = starts[..., cols].astype(np.float64) + step
        ends -= ends.mean(axis=0)
        gram += ends @ ends.T
        cross += step @ ends.T
        delta_sq += np.einsum("ij,ij->i", step, step)
    gram = (gram + gram.T) / 2  # BLAS may round the two triangles apart
    diag = np.diag(gram)
    end_sq = diag[:, None] + diag[None, :] - 2.0 * gram
    end_sq[end_sq <= _SAME_END * (diag[:, None] + diag[None, :])] = 0.0
    ends_dist = np.sqrt(end_sq)
    np.fill_diagonal(ends_dist, 0.0)
    h = np.diag(cross)
    numerator = h[:, None] + h[None, :] - cross - cross.T
    norms = np.sqrt(delta_sq)
    denominator = ends_dist * (norms[:, None] + norms[None, :])
    omega = np.divide(
        numerator, denominator, out=np.zeros_like(numerator), where=denominator > 0
    )
    # |ω| ≤ 1 by Cauchy–Schwarz; clipping only removes rounding overshoot.
    return np.clip(omega, -1.0, 1.0), ends_dist


def _as_rows(array: np.ndarray, name: str) -> np.ndarray:
    array = np.asarray(array)
    if array.ndim != 2:
        raise ValueError(f"{name} must be a 2-d array (n, d), got shape {array.shape}")
    return array


def _blocks(n: int, d: int) -> list[slice]:
    width = max(1024, _BLOCK_VALUES // max(n, 1))
    return [slice(lo, lo + width) for lo in range(0, max(d, 1), width)]


# -- the per-pair reference ---------------------------------------------------


def divergence(
    start_1: np.ndarray, delta_1: np.ndarray, start_2: np.ndarray, delta_2: np.ndarray
) -> float:
    """ω of two updates (Eq. 1), straight from the definition, in float64."""
    a, da = np.asarray(start_1, np.float64), np.asarray(delta_1, np.float64)
    c, dc = np.asarray(start_2, np.float64), np.asarray(delta_2, np.float64)
    apart = (a + da) - (c + dc)
    gap = float(np.linalg.norm(apart))
    length = float(np.linalg.norm(da) + np.linalg.norm(dc))
    if gap == 0.0 or length == 0.0:
        return 0.0
    return float(np.clip(np.dot(da - dc, apart) / (gap * length), -1.0, 1.0))


def update_distance(
    start_1: np.ndarray,
    delta_1: np.ndarray,
    start_2: np.ndarray,
    delta_2: np.ndarray,
    metric: str = "complete",
) -> float:
    """The distance of two updates under `metric`, computed for this pair alone."""
    metric = check_metric(metric)
    da, dc = np.asarray(delta_1, np.float64), np.asarray(delta_2, np.float64)
    if metric == "cosine":
        scale = float(np.linalg.norm(da) * np.linalg.norm(dc))
        return 1.0 - (float(np.dot(da, dc)) / scale if scale > 0 else 0.0)
    gap = float(
        np.linalg.norm(
            (np.asarray(start_1, np.float64) + da)
            - (np.asarray(start_2, np.float64) + dc)
        )
    )
    if metric == "euclidean" or gap == 0.0:
        return gap
    omega = divergence(start_1, delta_1, start_2, delta_2)
    return float(np.exp(2 * omega)) * (1.0 if metric == "divergence" else gap)


def naive_pairwise_distances(
    starts: np.ndarray, deltas: np.ndarray, metric: str = "complete"
) -> np.ndarray:
    """`pairwise_distances` by a double loop over pairs: the slow reference."""
    deltas = _as_rows(deltas, "deltas")
    starts = np.broadcast_to(np.asarray(starts), deltas.shape)
    n = deltas.shape[0]
    dist = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1, n):
            dist[i, j] = dist[j, i] = update_distance(
                starts[i], deltas[i], starts[j], deltas[j], metric
            )
    return dist


__all__ = [
    "METRICS",
    "Metric",
    "check_metric",
    "cosine_similarities",
    "divergence",
    "naive_pairwise_distances",
    "pairwise_distances",
    "pairwise_divergence",
    "update_distance",
]
