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
  malicious vector's largest distance to the honest ones stays within the
  largest between two honest ones (minmax), or its sum of squared distances
  to them within the least such sum of an honest one (minsum). Both as the
  authors' code (github.com/vrt1shjwlkr/NDSS21-Model-Poisoning,
  `our_attack_dist`, `our_attack_score`), which produced the paper's
  figures: the unbiased std (torch.std), and MinSum's bound the least of the
  honest sums where the paper's text writes the largest;
- `mimic`: Karimireddy, He, Jaggi, "Byzantine-Robust Learning on
  Heterogeneous Datasets via Bucketing", ICLR 2022: an honest client's update
  sent again by every attacker. ByzFL's simplification: always the honest
  client with the lowest id, where the paper's attacker picks, after a
  warm-up, the client along the direction of the honest updates' largest
  variance;
- `gaussian`: a vector of N(0, σ²) coordinates, each attacker its own;
- `fang_*`: Fang, Cao, Jia, Gong, "Local Model Poisoning Attacks to
  Byzantine-Robust Federated Learning", USENIX Security 2020: against the
  trimmed mean and median, values beyond the benign extremes (full
  knowledge: every benign update) or 3 to 4 estimated standard deviations
  from the mean (partial knowledge: the coalition's own updates); against
  Krum, −λ·s with λ halved from the paper's upper bound until Krum picks it.
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
FANG_B = 2.0  # Fang et al.'s b, as in their experiments
FANG_THRESHOLD = 1e-5  # Fang's λ halving stops below this, as the authors' code


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
    if kind == "std":  # unbiased, as the authors' torch.std
        return np.asarray(stack.std(axis=0, ddof=1))
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
    updates no larger than the least such sum of an honest one (the authors'
    code; the paper's text bounds it by the largest)."""
    stack = _rows(honest, 2, "minsum")
    direction = deviation(stack, kind)
    bound = float(squared_distances(stack).sum(axis=1).min())

    def spread(vector: np.ndarray) -> float:
        return float(np.square(stack - vector).sum())

    gamma = _largest_gamma(stack, direction, spread, bound)
    return np.asarray(stack.mean(axis=0) - gamma * direction)


def mimic(honest: np.ndarray) -> np.ndarray:
    """The first honest update (the honest client of the lowest id): ByzFL's
    `Mimic`, not Karimireddy et al.'s choice of the client along the honest
    updates' direction of largest variance after a warm-up."""
    return np.array(_rows(honest, 1, "mimic")[0])


def gaussian(size: int, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """`size` coordinates drawn from N(0, σ²)."""
    return rng.normal(0.0, sigma, size)


def fang_direction(benign: np.ndarray) -> np.ndarray:
    """Fang et al.'s s: +1 where the benign mean moves a coordinate up (or
    leaves it), −1 where it moves it down."""
    return np.where(np.asarray(benign).mean(axis=0) >= 0, 1.0, -1.0)


def fang_trimmed_full(
    benign: np.ndarray, attackers: int, rng: np.random.Generator, b: float = FANG_B
) -> np.ndarray:
    """Fang et al.'s full-knowledge attack on trimmed mean and median
    ("Local Model Poisoning Attacks to Byzantine-Robust Federated Learning",
    Fang, Cao, Jia, Gong, USENIX Security 2020, §4), in update space, from
    every benign update of the round: where the benign mean moves coordinate
    j up (s_j = 1), each attacker sends a value below the benign minimum
    w_min,j, uniform in [w_min,j / b, w_min,j] if w_min,j > 0, else in
    [b·w_min,j, w_min,j]; where it moves down (s_j = −1), above the maximum
    w_max,j: in [w_max,j, b·w_max,j] if w_max,j > 0, else [w_max,j,
    w_max,j / b]. One row per attacker; b > 1 (2 in the paper's
    experiments)."""
    if not b > 1:
        raise ValueError(f"fang's b must be > 1, got {b}")
    stack = _rows(benign, 1, "fang")
    up = fang_direction(stack) > 0
    low, high = stack.min(axis=0), stack.max(axis=0)
    below = np.where(low > 0, (low / b, low), (b * low, low))
    above = np.where(high > 0, (high, b * high), (high, high / b))
    lo = np.where(up, below[0], above[0])
    hi = np.where(up, below[1], above[1])
    return np.asarray(lo + rng.random((attackers, stack.shape[1])) * (hi - lo))


def fang_trimmed_partial(
    own: np.ndarray, attackers: int, rng: np.random.Generator
) -> np.ndarray:
    """Fang et al.'s partial-knowledge attack on trimmed mean and median
    (ibid.): the coalition knows only its own honest updates, estimates each
    coordinate's benign mean μ_j and standard deviation σ_j from them
    (population σ, dividing by the attackers' count as the public MXNet
    implementations of the attack do), and
    each attacker sends a value uniform in [μ_j − 4σ_j, μ_j − 3σ_j] where
    μ_j >= 0 (s_j = 1), in [μ_j + 3σ_j, μ_j + 4σ_j] where μ_j < 0. One row
    per attacker."""
    stack = _rows(own, 2, "fang")
    mu, sigma = stack.mean(axis=0), stack.std(axis=0)
    s = fang_direction(stack)
    lo = mu - s * np.where(s > 0, 4.0, 3.0) * sigma
    hi = mu - s * np.where(s > 0, 3.0, 4.0) * sigma
    return np.asarray(lo + rng.random((attackers, stack.shape[1])) * (hi - lo))


def fang_lambda_bound(benign: np.ndarray, n: int, attackers: int) -> float:
    """Fang et al.'s upper bound on λ for Krum (ibid., §4), where the global
    model w_Re is the update space's origin: with m = `n` updates, c =
    `attackers` and d coordinates,

        λ <= 1/((m − 2c − 1)·√d) · min_i Σ_{l ∈ Γ̃_i} ‖w_l − w_i‖
             + 1/√d · max_i ‖w_i − w_Re‖,

    i over the benign updates and Γ̃_i the m − c − 2 benign ones nearest w_i
    (plain distances, as in the paper and in Shejwalkar & Houmansadr's
    implementation of it); as many as there are when the attackers know
    fewer benign updates than that (their own, partial knowledge).

    Raises:
        ValueError: m <= 2c + 1, where the bound (and Krum) is undefined.
    """
    stack = _rows(benign, 1, "fang")
    k, d = stack.shape
    if n - 2 * attackers - 1 <= 0:
        raise ValueError(
            f"fang's λ bound needs m > 2c + 1, got m = {n}, c = {attackers}"
        )
    dist = np.sqrt(squared_distances(stack)) + np.diag(np.full(k, np.inf))
    nearest = np.sort(dist, axis=1)[:, : max(0, min(n - attackers - 2, k - 1))]
    spread = float(nearest.sum(axis=1).min()) / ((n - 2 * attackers - 1) * math.sqrt(d))
    return spread + float(np.linalg.norm(stack, axis=1).max()) / math.sqrt(d)


def fang_krum_lambda(benign: np.ndarray, attackers: int, f: int, n: int) -> float:
    """Fang et al.'s λ for Krum (ibid.): from the upper bound
    (`fang_lambda_bound`), halved until Krum with `f` over the benign updates
    the attackers know and their `attackers` copies of −λ·s picks a copy, or
    until λ < 1e-5 (that λ, then). Under knowledge = "all" those are the
    round's honest updates, so the search runs over the whole round; under
    the coalition's own, over 2c rows, with f capped where Krum is defined
    over them: there c − 1 identical copies are each other's nearest, so the
    bound's λ often stands (the partial-knowledge search is a weak one). The
    copies come last: Krum breaks a tie for the lower row, so a tie counts as
    not picked."""
    from clusterfed.algorithms.robust import krum

    stack = _rows(benign, 1, "fang")
    k = stack.shape[0]
    total = k + attackers
    if total < 3:
        raise ValueError(f"fang's Krum search needs 3 updates, got {total}")
    f = min(f, (total - 3) // 2)
    direction = fang_direction(stack)
    lam = fang_lambda_bound(stack, n, attackers)
    while lam >= FANG_THRESHOLD:
        copies = np.repeat((-lam * direction)[None, :], attackers, axis=0)
        if krum(np.vstack([stack, copies]), f)[0] >= k:
            return lam
        lam /= 2
    return lam


def fang_krum(benign: np.ndarray, attackers: int, f: int, n: int) -> np.ndarray:
    """Fang et al.'s attack on Krum (ibid.), in update space: −λ·s
    (`fang_krum_lambda`), the one vector every attacker sends."""
    lam = fang_krum_lambda(benign, attackers, f, n)
    return np.asarray(-lam * fang_direction(np.asarray(benign, dtype=np.float64)))
