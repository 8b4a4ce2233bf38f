"""The maths of the robust rules beyond median, trimmed mean and Krum: plain
numpy (and scikit-learn's MeanShift) on a stack of update vectors, one row
each, float64 in and out. The rule models and their assumptions are in
`robust.py`; ByzFL (`byzfl.aggregators`) is the oracle where it has the rule
(tests/test_defences.py).

Randomised steps (bucketing's shuffle, DnC's coordinate sample, SignGuard's)
draw from a generator seeded by the vectors' own bytes (`vector_seed`), so a
rule gives the same answer for the same updates in every runtime and run,
and a different draw each round.

A stack is large (100 Fashion-MNIST MLP updates: 100 × 468,874 floats, 375
MB), so the rules read it in few passes and never build another of its
size: weighted sums of rows are one matrix–vector product (`weights @
stack`), distances to a point are summed over blocks of columns
(`distances_to`) rather than from a difference as large as the stack.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np
from sklearn.cluster import MeanShift


def vector_seed(stack: np.ndarray) -> int:
    """A seed from the stack's bytes (its float64, little-endian)."""
    return zlib.crc32(np.ascontiguousarray(stack, dtype="<f8").data)  # no copy


def squared_distances(stack: np.ndarray) -> np.ndarray:
    """Pairwise squared L2 distances, from one Gram matrix."""
    gram = stack @ stack.T
    sq = np.diag(gram)
    return np.asarray(np.maximum(sq[:, None] + sq[None, :] - 2 * gram, 0.0))


def distances_to(
    stack: np.ndarray, point: np.ndarray, block: int = 1 << 14
) -> np.ndarray:
    """‖xᵢ − point‖ for every row, summed over blocks of `block` columns: the
    differences themselves, never the Gram identity ‖x‖² − 2x·p + ‖p‖², whose
    cancellation would blur a row that sits on the point (mimic's copies)."""
    squares = np.zeros(stack.shape[0])
    for start in range(0, stack.shape[1], block):
        diff = stack[:, start : start + block] - point[start : start + block]
        squares += np.einsum("ij,ij->i", diff, diff)
    return np.asarray(np.sqrt(squares))


def mean_of_rows(
    stack: np.ndarray, rows: Sequence[int], scale: np.ndarray | None = None
) -> np.ndarray:
    """The mean of `rows` of the stack, each times its `scale`, as one
    matrix–vector product rather than a copy of the rows."""
    weights = np.zeros(stack.shape[0])
    weights[list(rows)] = 1.0 if scale is None else scale
    return np.asarray(weights @ stack / len(rows))


def geometric_median(stack: np.ndarray, nu: float, iterations: int) -> np.ndarray:
    """Smoothed Weiszfeld from the origin (Pillutla, Kakade, Harchaoui, RFA,
    IEEE TSP 2022; ByzFL's `GeometricMedian`): z ← Σ βᵢ xᵢ / Σ βᵢ with
    βᵢ = 1 / max(ν, ‖xᵢ − z‖)."""
    z = np.zeros(stack.shape[1])
    for _ in range(iterations):
        betas = 1.0 / np.maximum(distances_to(stack, z), nu)
        z = betas @ stack / betas.sum()
    return z


def centered_clip(
    stack: np.ndarray, tau: float, iterations: int, center: np.ndarray | None = None
) -> np.ndarray:
    """Centered clipping (Karimireddy, He, Jaggi, "Learning from History for
    Byzantine Robust Optimization", ICML 2021; ByzFL's `CenteredClipping`):
    v ← v + mean of (xᵢ − v) clipped to norm τ, `iterations` times."""
    n = stack.shape[0]
    v = np.zeros(stack.shape[1]) if center is None else center.astype(np.float64)
    for _ in range(iterations):
        norms = distances_to(stack, v)
        with np.errstate(divide="ignore"):
            scale = np.minimum(1.0, tau / norms)
        # mean of scaleᵢ·(xᵢ − v) = (scale·X − Σscale·v) / n
        v = v + (scale @ stack - scale.sum() * v) / n
    return v


def bulyan(stack: np.ndarray, f: int) -> np.ndarray:
    """Bulyan (El Mhamdi, Guerraoui, Rouault, ICML 2018) over Krum: θ = n − 2f
    rows chosen by Krum one at a time (each time among the rows left), then
    per coordinate the mean of the β = θ − 2f values closest to their
    median. Needs n ≥ 4f + 3."""
    left = list(range(stack.shape[0]))
    chosen = []
    every = squared_distances(stack)  # once: each selection reads a part
    for _ in range(stack.shape[0] - 2 * f):
        # Krum among the rows left; with too few left for n − f − 2
        # neighbours, the closest-pair score of what remains (at least one).
        k = max(len(left) - f - 2, 1)
        dist = every[np.ix_(left, left)] + np.diag(np.full(len(left), np.inf))
        scores = np.sort(dist, axis=1)[:, :k].sum(axis=1)
        best = int(np.argmin(scores))  # ties: the lower row
        chosen.append(left.pop(best))
    selected = stack[chosen]
    beta = selected.shape[0] - 2 * f
    median = np.median(selected, axis=0)
    order = np.argsort(np.abs(selected - median), axis=0, kind="stable")[:beta]
    return np.asarray(np.take_along_axis(selected, order, axis=0).mean(axis=0))


def dnc(
    stack: np.ndarray, f: int, c: float, iterations: int, dims: int, seed: int
) -> np.ndarray | None:
    """Divide-and-Conquer (Shejwalkar & Houmansadr, NDSS 2021, Algorithm 2):
    each iteration samples `dims` coordinates, projects the centred updates
    on their top right singular vector and keeps the n − c·f of smallest
    squared projection; the mean of the rows every iteration kept. None
    where no row was kept by every iteration, a case the paper leaves
    undefined (in a small cluster each sample can drop another row: with
    n = 5, f = 1 about 1 random stack in 100)."""
    n, d = stack.shape
    rng = np.random.default_rng(seed)
    good = set(range(n))
    keep = n - int(c * f)
    for _ in range(iterations):
        cols = np.sort(rng.choice(d, size=min(dims, d), replace=False))
        sub = stack[:, cols]
        centred = sub - sub.mean(axis=0)
        _, _, vt = np.linalg.svd(centred, full_matrices=False)
        scores = (centred @ vt[0]) ** 2
        good &= {int(i) for i in np.argsort(scores, kind="stable")[:keep]}
    return mean_of_rows(stack, sorted(good)) if good else None


def signguard(
    stack: np.ndarray, lower: float, upper: float, share: float, seed: int
) -> np.ndarray:
    """SignGuard (Xu, Huang, Lai, Yang, "SignGuard: Byzantine-robust Federated
    Learning through Collaborative Malicious Gradient Filtering", ICDCS
    2022): the rows whose norm is within [lower, upper] × the median norm,
    and, of those, the largest MeanShift cluster of the sign statistics
    (shares of positive, zero and negative coordinates on a random `share`
    of the coordinates); their mean after clipping each to the median norm."""
    n, d = stack.shape
    norms = np.sqrt(np.einsum("ij,ij->i", stack, stack))
    median = float(np.median(norms))
    by_norm = {i for i in range(n) if lower * median <= norms[i] <= upper * median}
    rng = np.random.default_rng(seed)
    cols = np.sort(rng.choice(d, size=max(1, int(share * d)), replace=False))
    signs = np.sign(stack[:, cols])
    features = np.stack(
        [(signs > 0).mean(axis=1), (signs == 0).mean(axis=1), (signs < 0).mean(axis=1)],
        axis=1,
    )
    labels = MeanShift(bin_seeding=False).fit(features).labels_
    counts = np.bincount(labels)
    largest = int(np.argmax(counts))  # ties: the lower label
    by_sign = {i for i in range(n) if labels[i] == largest}
    rows = sorted(by_norm & by_sign) or sorted(by_sign)
    scale = np.minimum(1.0, median / np.maximum(norms[rows], 1e-300))
    return mean_of_rows(stack, rows, scale)


def nnm(stack: np.ndarray, f: int) -> np.ndarray:
    """Nearest-neighbour mixing (Allouah et al., "Fixing by Mixing", AISTATS
    2023; ByzFL's `NNM`): each row replaced by the mean of its n − f nearest
    rows (itself included)."""
    n = stack.shape[0]
    dist = squared_distances(stack)
    nearest = np.argsort(dist, axis=1, kind="stable")[:, : n - f]
    # One mixing matrix: gathering each row's neighbours would hold n·(n − f)
    # rows at once (28 GB for 100 Fashion-MNIST updates).
    mixing = np.zeros((n, n))
    np.put_along_axis(mixing, nearest, 1.0, axis=1)
    return np.asarray(mixing @ stack / (n - f))


def bucketing(stack: np.ndarray, s: int, seed: int) -> np.ndarray:
    """Bucketing (Karimireddy, He, Jaggi, ICLR 2022; ByzFL's `Bucketing`):
    the rows shuffled, then the mean of each run of `s` (the last bucket may
    hold fewer)."""
    n = stack.shape[0]
    order = np.random.default_rng(seed).permutation(n)
    mixing = np.zeros((-(-n // s), n))  # one row a bucket
    for bucket, start in enumerate(range(0, n, s)):
        members = order[start : start + s]
        mixing[bucket, members] = 1.0 / len(members)
    return np.asarray(mixing @ stack)
