"""The omniscient and colluding attacks of the Byzantine-robustness literature,
as maths on flat update vectors (float64 in, float64 out).

Each takes the honest updates its attackers know (`honest`, one row each, in
client order) and returns the one vector every attacker of the coalition
sends. The conventions are ByzFL's (`byzfl.attacks`, the test oracle) where
ByzFL has the attack:

- `alie`: "A Little Is Enough" (Baruch, Baruch, Goldberg, NeurIPS 2019):
  the mean plus `z` standard deviations (unbiased, per coordinate); `z`
  defaults to the paper's z_max for `n` clients of which `f` collude (the
  largest shift the median-like rules cannot tell from an honest one),
  defined for a minority that needs s = ⌊n/2 + 1⌋ − f > 0 supporters;
- `ipm`: inner product manipulation (Xie, Koyejo, Gupta, "Fall of Empires",
  UAI 2020): −ε times the mean;
- `minmax`, `minsum`: Shejwalkar & Houmansadr, "Manipulating the Byzantine:
  Optimizing Model Poisoning Attacks and Defenses for Federated Learning",
  NDSS 2021 (their AGR-agnostic attacks): the mean minus γ times a
  deviation (the coordinate-wise std by default, the mean's unit vector or
  its sign), γ the largest found by their halving search such that the
  malicious vector's largest distance (minmax) or sum of squared distances
  (minsum) to the honest ones stays within the honest ones' own largest;
- `mimic`: Karimireddy, He, Jaggi, "Byzantine-Robust Learning on
  Heterogeneous Datasets via Bucketing", ICLR 2022: an honest client's update
  sent again by every attacker (the honest client with the lowest id);
- `gaussian`: a vector of N(0, σ²) coordinates, each attacker its own.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import norm

from clusterfed.algorithms.defences import squared_distances

Deviation = str  # "std" | "unit_vec" | "sign"
DEVIATIONS = ("std", "unit_vec", "sign")
GAMMA_INIT = 10.0  # the halving search's start and tolerance, as the paper's code
GAMMA_TOLERANCE = 1e-5


def _rows(honest: np.ndarray, least: int, attack: str) -> np.ndarray:
    stack = np.asarray(honest, dtype=np.float64)
    if stack.ndim != 2 or stack.shape[0] < least:
        raise ValueError(
            f"{attack} needs at least {least} honest update(s), got"
            f" {0 if stack.ndim != 2 else stack.shape[0]}"
        )
    return stack


def z_max(n: int, f: int) -> float:
    """Baruch et al.'s z for `n` updates of which `f` collude: s = ⌊n/2 + 1⌋
    − f honest clients must be won over; z is the standard normal's
    (n − s)/n quantile.

    Raises:
        ValueError: unless 0 < f and s > 0. The attack is defined for a
            minority that needs supporters: with s <= 0 the quantile is
            Φ⁻¹(1) = inf or Φ⁻¹(> 1) = NaN, no shift at all.
    """
    if not 0 < f < n:
        raise ValueError(f"z_max needs 0 < f < n, got n = {n}, f = {f}")
    s = math.floor(n / 2 + 1) - f
    if s <= 0:
        raise ValueError(
            f"ALIE (Baruch et al. 2019) is defined for attackers who need"
            f" s = ⌊n/2 + 1⌋ − f > 0 honest supporters; n = {n}, f = {f}"
            f" gives s = {s} (its z_max would be {'inf' if s == 0 else 'NaN'})"
        )
    return float(norm.ppf((n - s) / n))


def alie(honest: np.ndarray, z: float) -> np.ndarray:
    """The mean plus `z` unbiased standard deviations, per coordinate."""
    stack = _rows(honest, 2, "alie")
    return np.asarray(stack.mean(axis=0) + z * stack.std(axis=0, ddof=1))


def ipm(honest: np.ndarray, epsilon: float) -> np.ndarray:
    """−ε times the mean."""
    stack = _rows(honest, 1, "ipm")
    return np.asarray(-epsilon * stack.mean(axis=0))


def deviation(honest: np.ndarray, kind: Deviation) -> np.ndarray:
    """The direction MinMax and MinSum move against."""
    stack = np.asarray(honest, dtype=np.float64)
    mean = stack.mean(axis=0)
    if kind == "std":
        return np.asarray(stack.std(axis=0))
    if kind == "unit_vec":
        length = float(np.linalg.norm(mean))
        return np.asarray(mean / length if length > 0 else mean)
    if kind == "sign":
        return np.asarray(np.sign(mean))
    raise ValueError(f"deviation must be one of {DEVIATIONS}, got {kind!r}")


def _largest_gamma(
    stack: np.ndarray, direction: np.ndarray, fits: object, bound: float
) -> float:
    """The paper's halving search for the largest γ with fits(mean − γ·dir)."""
    mean = stack.mean(axis=0)
    gamma, step, success = GAMMA_INIT, GAMMA_INIT, 0.0
    assert callable(fits)
    while abs(success - gamma) > GAMMA_TOLERANCE:
        if fits(mean - gamma * direction) <= bound:
            success = gamma
            gamma += step / 2
        else:
            gamma -= step / 2
        step /= 2
    return success


def minmax(honest: np.ndarray, kind: Deviation = "std") -> np.ndarray:
    """The mean minus γ·deviation, its largest distance to an honest update
    no larger than the largest distance between two honest ones."""
    stack = _rows(honest, 2, "minmax")
    direction = deviation(stack, kind)
    bound = float(np.sqrt(squared_distances(stack).max()))

    def farthest(vector: np.ndarray) -> float:
        return float(np.sqrt(np.square(stack - vector).sum(axis=1)).max())

    gamma = _largest_gamma(stack, direction, farthest, bound)
    return np.asarray(stack.mean(axis=0) - gamma * direction)


def minsum(honest: np.ndarray, kind: Deviation = "std") -> np.ndarray:
    """The mean minus γ·deviation, its sum of squared distances to the honest
    updates no larger than the largest such sum of an honest one."""
    stack = _rows(honest, 2, "minsum")
    direction = deviation(stack, kind)
    bound = float(squared_distances(stack).sum(axis=1).max())

    def spread(vector: np.ndarray) -> float:
        return float(np.square(stack - vector).sum())

    gamma = _largest_gamma(stack, direction, spread, bound)
    return np.asarray(stack.mean(axis=0) - gamma * direction)


def mimic(honest: np.ndarray) -> np.ndarray:
    """The first honest update (the honest client of the lowest id)."""
    return np.array(_rows(honest, 1, "mimic")[0])


def gaussian(size: int, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """`size` coordinates drawn from N(0, σ²)."""
    return rng.normal(0.0, sigma, size)


def fang_trimmed(
    honest: np.ndarray, attackers: int, rng: np.random.Generator, b: float = 2.0
) -> np.ndarray:
    """Fang et al.'s attack on trimmed mean and median ("Local Model
    Poisoning Attacks to Byzantine-Robust Federated Learning", USENIX
    Security 2020, full-knowledge form with the coalition's updates as the
    benign ones), in update space: where the honest mean moves coordinate j
    up (s_j ≥ 0), each attacker sends a value below the honest minimum
    (uniform in [w_min/b, w_min] if w_min > 0, else [b·w_min, w_min]); where
    it moves down, above the maximum (the mirror image). One row per
    attacker."""
    stack = _rows(honest, 1, "fang")
    up = stack.mean(axis=0) >= 0
    low, high = stack.min(axis=0), stack.max(axis=0)
    below = np.where(low > 0, (low / b, low), (b * low, low))
    above = np.where(high > 0, (high, b * high), (high, high / b))
    lo = np.where(up, below[0], above[0])
    hi = np.where(up, below[1], above[1])
    return np.asarray(lo + rng.random((attackers, stack.shape[1])) * (hi - lo))


def fang_krum(honest: np.ndarray, attackers: int, f: int) -> np.ndarray:
    """Fang et al.'s attack on Krum (ibid.), in update space: −λ·s with s the
    sign of the honest mean, every attacker the same vector, λ halved from
    2·max‖h‖/√d until Krum over the benign updates and the attackers' copies
    picks a copy (f capped where Krum is defined over that many: the
    coalition knows its own updates only); below 1e-5, λ = 1e-5."""
    from clusterfed.algorithms.robust import krum

    stack = _rows(honest, 1, "fang")
    n, d = stack.shape
    direction = np.sign(stack.mean(axis=0))
    total = n + attackers
    f = max(0, min(f, (total - 3) // 2))
    lam = 2.0 * float(np.linalg.norm(stack, axis=1).max()) / math.sqrt(d)
    while lam > 1e-5:
        vector = -lam * direction
        trial = np.vstack([stack, np.repeat(vector[None, :], attackers, axis=0)])
        if krum(trial, f)[0] >= n:
            return np.asarray(vector)
        lam /= 2
    return np.asarray(-1e-5 * direction)
