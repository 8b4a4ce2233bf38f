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

Every n × n matrix comes from a few Gram products over blocks of columns,
never from a loop over pairs: ``E Eᵀ`` and ``Δ Eᵀ`` (E the end points) when
the clients started from different models; when they share a few, as the
members of a cluster do, ``D Dᵀ`` (D each update less the mean update of the
clients with its start) and products of D with the k distinct starts; ``Δ Δᵀ``
for the cosine. The products run in the precision of the inputs: float32
updates (the wire's) get float32 products (BLAS sgemm, twice the speed of
float64 and half the memory traffic) over at most 4,096 columns, summed in
float64 across blocks; anything else runs in float64. Every metric is
shift-invariant, so means are taken off before the products: a common offset
would otherwise drown the differences in ``‖Bᵢ‖² + ‖Bⱼ‖² − 2 Bᵢ·Bⱼ``, and
float32 would lose several percent.

In float32 a distance is then off by about 1e-7 of itself (bench/distances.py;
at most 1.1e-6 on dcfl-dynamic's own updates) unless it is tiny against the
vectors it is the difference of: ‖Bᵢ − Bⱼ‖² carries a rounding error of at
most about 3e-7 · (‖Xᵢ‖² + ‖Xⱼ‖²), with X the centred end points, or, for two
clients with one start, their updates less their cluster's mean update. So
two updates of a cluster whose difference is 1e-2 of their spread around the
cluster's mean keep d to ~5e-4, and below `_SAME_END_32` (about 3e-3 of it)
they count as one point (d = 0). Products that overflow float32, or rows so
small their products would underflow, are computed again in float64. The
cosine stays in float64 (CFL's split relies on it and it is cheap).

`update_distance`, `divergence` and `naive_pairwise_distances` (`_metrics.py`,
re-exported here with the metric names) compute the same quantities pair by
pair, straight from the definitions; they are the reference for tests and
benchmarks, not for production use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ._metrics import (
    METRICS,
    Metric,
    _as_rows,
    check_metric,
    divergence,
    naive_pairwise_distances,
    update_distance,
)

# Squared end-point distances below this fraction of ‖Bᵢ‖² + ‖Bⱼ‖² (around the
# mean end point) are rounding noise of the Gram route: such end points count
# as equal, so d = 0 exactly as the paper asks, instead of noise · exp(2·noise).
# In float32 products the noise is below 4e-7 of that sum (measured on 1e4–1e6
# parameters, bench/distances.py), so its threshold leaves a factor of 25.
_SAME_END = 1e-12
_SAME_END_32 = 1e-5

# Float32 products are refused (and run again in float64) when every row's
# mean square per parameter is below this: their products would underflow.
_TINY = 1e-30

# Columns sampled to tell the distinct start models apart cheaply.
_KEY_COLUMNS = 64

# Columns per block: about 4 M values per n × block array, and at most
# _MAX_COLUMNS: BLAS sums a block's columns in the inputs' precision before
# the float64 sum over blocks, and in float32 its error grows with their
# number (dcfl-dynamic's 20 clients × 100,234 parameters in one block: d off by
# up to 2.2e-5; in blocks of 4,096: 1.1e-6).
_BLOCK_VALUES = 1 << 22
_MAX_COLUMNS = 4096


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
    """(ω, ‖Bᵢ − Bⱼ‖) for every pair, from Gram matrices (see `_pair_sums`)."""
    deltas = _as_rows(deltas, "deltas")
    starts = np.asarray(starts)
    n, d = deltas.shape
    if starts.shape not in ((d,), (n, d)):
        raise ValueError(
            f"starts must have shape ({d},) or ({n}, {d}), got {starts.shape}"
        )
    sums = None
    if np.result_type(starts, deltas) == np.float32:
        # Overflow and underflow are judged on the sums (`fits_float32`).
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            sums = _pair_sums(starts, deltas, np.float32)
        if not sums.fits_float32(d):
            sums = None
    if sums is None:
        sums = _pair_sums(starts, deltas, np.float64)
    end_sq = sums.end_sq
    same_end = _SAME_END_32 if sums.dtype is np.float32 else _SAME_END
    end_sq[end_sq <= same_end * sums.scale] = 0.0
    ends_dist = np.sqrt(end_sq)
    np.fill_diagonal(ends_dist, 0.0)
    norms = np.sqrt(sums.delta_sq)
    denominator = ends_dist * (norms[:, None] + norms[None, :])
    omega = np.divide(
        sums.numerator,
        denominator,
        out=np.zeros_like(sums.numerator),
        where=denominator > 0,
    )
    # |ω| ≤ 1 by Cauchy–Schwarz; clipping only removes rounding overshoot.
    return np.clip(omega, -1.0, 1.0), ends_dist


@dataclass(frozen=True)
class _PairSums:
    """The pairwise sums behind every metric but the cosine, in float64.

    end_sq: ‖Bᵢ − Bⱼ‖²; numerator: (δᵢ − δⱼ)·(Bᵢ − Bⱼ); scale: the size of
    the Gram entries that `end_sq` is the difference of (its rounding is
    relative to this); delta_sq: ‖δᵢ‖²; dtype: the precision of the products;
    largest: the largest squared norm of a row the products saw.
    """

    end_sq: np.ndarray
    numerator: np.ndarray
    scale: np.ndarray
    delta_sq: np.ndarray
    dtype: type[np.floating[Any]]
    largest: float

    def fits_float32(self, d: int) -> bool:
        """False when float32 products overflowed, or when every row is so
        small (mean square per parameter under `_TINY`) that their products
        would lose digits to underflow."""
        finite = all(
            np.isfinite(a).all() for a in (self.end_sq, self.numerator, self.delta_sq)
        )
        return finite and not 0.0 < self.largest < _TINY * max(d, 1)


def _pair_sums(
    starts: np.ndarray, deltas: np.ndarray, dtype: type[np.floating[Any]]
) -> _PairSums:
    """`_PairSums` by whichever route costs fewer column products.

    Clients of one cluster start from one model, so `starts` has k ≤ n
    distinct rows. The shared-start route needs D Dᵀ, D Cᵀ, C Cᵀ, D Mᵀ and
    M Cᵀ (n² + 4kn + 3k² products per column, C and M k rows); the end-point
    route E Eᵀ and Δ Eᵀ (3n², a symmetric product costing half). The
    shared-start route is the more accurate: two clients with one start get
    ‖δᵢ − δⱼ‖² from D Dᵀ alone, whose rounding is relative to how far their
    updates are from their cluster's mean update, not to the spread of all
    end points. It runs while k ≤ n/2, where it costs at most 1.25 times the
    other (for DCFL's few clusters, a third).
    """
    n = deltas.shape[0]
    rows, which = _distinct_rows(starts, n)
    if 2 * len(rows) <= n:
        return _shared_start_sums(starts, rows, which, deltas, dtype)
    return _end_point_sums(starts, deltas, dtype)


def _shared_start_sums(
    starts: np.ndarray,
    rows: np.ndarray,
    which: np.ndarray,
    deltas: np.ndarray,
    dtype: type[np.floating[Any]],
) -> _PairSums:
    """Client i starts from A_a (a its start) and ends at Bᵢ = C_a + Dᵢ: C_a =
    A_a + μ_a the mean end point of the clients that share A_a, μ_a their mean
    update, Dᵢ = δᵢ − μ_a. With b the start of j:

        ‖Bᵢ − Bⱼ‖² = cc + 2 cd + dd
        (δᵢ − δⱼ)·(Bᵢ − Bⱼ) = mc + md + cd + dd

    where cc = ‖C_a − C_b‖², cd = (C_a − C_b)·(Dᵢ − Dⱼ), dd = ‖Dᵢ − Dⱼ‖²,
    mc = (μ_a − μ_b)·(C_a − C_b) and md = (μ_a − μ_b)·(Dᵢ − Dⱼ): all but dd
    are exactly 0 when a = b. C and μ may move by any common vector, so
    each is taken less its mean."""
    n, d = deltas.shape
    k = len(rows)
    order = np.argsort(which, kind="stable")  # clients grouped by start
    counts = np.bincount(which, minlength=k)
    firsts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    dd_gram = np.zeros((n, n))  # D Dᵀ
    dc_gram = np.zeros((n, k))  # D Cᵀ
    cc_gram = np.zeros((k, k))  # C Cᵀ
    dm_gram = np.zeros((n, k))  # D Mᵀ, M the mean updates
    mc_gram = np.zeros((k, k))  # M Cᵀ
    delta_sq = np.zeros(n)
    for cols in _blocks(n, d):
        step = np.asarray(deltas[:, cols], dtype)
        start = np.asarray(starts[..., cols], dtype)
        start = start[None, :] if start.ndim == 1 else start[rows]
        mean = np.add.reduceat(step[order], firsts, axis=0) / counts[:, None]
        mean = mean.astype(dtype, copy=False)
        centred = step - mean[which]
        # (A − its mean) + μ rounds relative to the centred end point; A + μ
        # would round relative to the model and lose float32's digits.
        ends = start - np.mean(start, axis=0)
        ends += mean
        ends -= np.mean(ends, axis=0)
        mean -= np.mean(mean, axis=0)
        dd_gram += centred @ centred.T
        dc_gram += centred @ ends.T
        cc_gram += ends @ ends.T
        dm_gram += centred @ mean.T
        mc_gram += mean @ ends.T
        delta_sq += _row_squares(step)
    dd_gram = (dd_gram + dd_gram.T) / 2  # BLAS may round the two triangles apart
    cc_gram = (cc_gram + cc_gram.T) / 2
    p, r = np.diag(dd_gram), np.diag(cc_gram)
    dd = p[:, None] + p[None, :] - 2.0 * dd_gram
    cc = r[which][:, None] + r[which][None, :] - 2.0 * cc_gram[np.ix_(which, which)]
    q = np.diag(mc_gram)
    mc = q[which][:, None] + q[which][None, :] - mc_gram[np.ix_(which, which)]
    mc = mc - mc_gram[np.ix_(which, which)].T
    cd, md = _cross_terms(dc_gram, which), _cross_terms(dm_gram, which)
    other = which[:, None] != which[None, :]
    r_of = r[which]
    return _PairSums(
        end_sq=cc + 2.0 * cd + dd,
        numerator=mc + md + cd + dd,
        scale=p[:, None]
        + p[None, :]
        + np.where(other, r_of[:, None] + r_of[None, :], 0.0),
        delta_sq=delta_sq,
        dtype=dtype,
        largest=float(max(p.max(initial=0.0), r.max(initial=0.0), delta_sq.max())),
    )


def _cross_terms(gram: np.ndarray, which: np.ndarray) -> np.ndarray:
    """(X_a − X_b)·(Dᵢ − Dⱼ) for every pair from gram[i, a] = Dᵢ·X_a: T + Tᵀ
    with T[i, j] = (X_a − X_b)·Dᵢ, exactly 0 when a = b."""
    by_start = gram[:, which]  # [i, j] = Dᵢ · X_{start of j}
    t = np.diag(by_start)[:, None] - by_start
    sums: np.ndarray = t + t.T
    return sums


def _end_point_sums(
    starts: np.ndarray, deltas: np.ndarray, dtype: type[np.floating[Any]]
) -> _PairSums:
    """With E the end points less their mean: ‖Bᵢ − Bⱼ‖² = Gᵢᵢ + Gⱼⱼ − 2Gᵢⱼ
    (G = E Eᵀ) and (δᵢ − δⱼ)·(Bᵢ − Bⱼ) = Hᵢᵢ + Hⱼⱼ − Hᵢⱼ − Hⱼᵢ (H = Δ Eᵀ)."""
    n, d = deltas.shape
    gram = np.zeros((n, n))  # G = E Eᵀ
    cross = np.zeros((n, n))  # H = Δ Eᵀ
    delta_sq = np.zeros(n)  # ‖δᵢ‖², a row sum: no product needed
    for cols in _blocks(n, d):
        step = np.asarray(deltas[:, cols], dtype)
        start = np.asarray(starts[:, cols], dtype)
        # (A − m) + δ rounds relative to the centred end point, A + δ − m
        # relative to the model: the first keeps the float32 digits.
        mean = np.mean(start, axis=0) + np.mean(step, axis=0)
        ends = start - mean
        ends += step
        gram += ends @ ends.T
        cross += step @ ends.T
        delta_sq += _row_squares(step)
    gram = (gram + gram.T) / 2
    g, h = np.diag(gram), np.diag(cross)
    return _PairSums(
        end_sq=g[:, None] + g[None, :] - 2.0 * gram,
        numerator=h[:, None] + h[None, :] - cross - cross.T,
        scale=g[:, None] + g[None, :],
        delta_sq=delta_sq,
        dtype=dtype,
        largest=float(max(g.max(initial=0.0), delta_sq.max(initial=0.0))),
    )


def _distinct_rows(starts: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, which): the indices of the distinct rows of `starts` (first
    occurrences, in order) and, for each of the n clients, the position of
    its start among them. A 1-d `starts` is one row shared by all."""
    if starts.ndim == 1:
        return np.zeros(1, dtype=np.intp), np.zeros(n, dtype=np.intp)
    # A few columns make a cheap key; rows with one key are compared in full,
    # so two rows count as one start only when they are equal.
    keys = starts[:, :: max(1, starts.shape[1] // _KEY_COLUMNS)]
    rows: list[int] = []
    by_key: dict[bytes, list[int]] = {}
    which = np.empty(n, dtype=np.intp)
    for i in range(n):
        group = by_key.setdefault(keys[i].tobytes(), [])
        for position in group:
            if np.array_equal(starts[rows[position]], starts[i]):
                which[i] = position
                break
        else:
            which[i] = len(rows)
            group.append(len(rows))
            rows.append(i)
    return np.asarray(rows, dtype=np.intp), which


def _row_squares(block: np.ndarray) -> np.ndarray:
    """‖row‖² of each row: numpy sums a contiguous row pairwise, so float32
    keeps ~3e-8 of it (a running sum, as einsum's, keeps ~3e-7)."""
    squares: np.ndarray = np.square(block).sum(axis=1)
    return squares


def _blocks(n: int, d: int) -> list[slice]:
    width = min(_MAX_COLUMNS, max(1024, _BLOCK_VALUES // max(n, 1)))
    return [slice(lo, lo + width) for lo in range(0, max(d, 1), width)]


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
