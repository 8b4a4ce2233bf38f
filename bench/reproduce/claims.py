"""Claims as data: every verdict a section of the page writes.

A section registers each sentence it decides as a `Claim` in the page's
`Claims`, so that the page can count them, say how many "holds" chance alone
would give, and adjust them for their number (Holm) in a table at the top.

A claim is one of two kinds:

- a comparison: seed-by-seed `values` that are above 0 where the paper is
  right (a difference between two runs of the same seed, or a value minus a
  threshold). Decided from their 95 % Student t interval (holds: the whole
  interval above 0; does not hold: the whole interval below 0), which is
  two one-sided t tests at 2.5 % each; its p-value is the one-sided t test's.
- an event each seed shows or not (`passed`), where there is no number to
  difference (FedAC never splitting): decided by the one-sided sign test at
  the same 2.5 % a side, so 3 of 3 seeds decide nothing (p = 0.125).

Only the papers' own claims (`own`) get verdicts; a measurement of ours
beyond them is shown with its interval and no verdict. A comparison with a
run that collapsed (final mean accuracy under twice chance, or none, in
any seed) never holds: its verdict reads "baseline collapsed".
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from scipy import stats

from clusterfed.seeds import Interval, interval

from .runner import Outcome

# Both datasets of the page have 10 classes.
CHANCE = 0.1
# Two-sided: a verdict either way needs its one-sided p under ALPHA / 2.
ALPHA = 0.05

# The fewest seeds, all showing an event, that the sign test decides from:
# 0.5^6 = 0.016 is under ALPHA / 2, 0.5^5 = 0.031 is not.
SIGN_TEST_SEEDS = 6

HOLDS = "holds"
FAILS = "does not hold"
COLLAPSED = "baseline collapsed"
METHOD_COLLAPSED = "method collapsed"
MEASURED = "our measurement"


def cannot_tell(n: int) -> str:
    return f"cannot tell at {n} seed{'s' * (n != 1)}"


@dataclass(frozen=True)
class Claim:
    """One sentence the page decides (or, not `own`, only measures).

    Attributes:
        key: what makes two claims the same claim: a sentence shown twice
            (Table I's rows of DCFL's Fig. 5 table) is counted once.
        paper: the paper's short name (DCFL, OCFL, ...).
        source: where in the paper ("Table I, with DP").
        text: the claim, in words, without its verdict.
        values: seed by seed, above 0 where the paper is right.
        passed: for an event each seed shows or not, seed by seed (then
            `values` is empty).
        measure: what `values` are, on the page ("Δ", "ARI − 0.9:").
        own: the paper's own claim; else our measurement, without verdict.
        collapsed: the runs on the side the paper puts lower (its baselines)
            that collapsed ("ocfl-noniid2 fedavg").
        method_collapsed: the runs on the paper's higher side that did.
        note: words after the numbers ("the paper's margin 0.030").
        seed_costs: the runs behind it ("<key> <algorithm>") with the wall
            seconds one seed of each took: what deciding it would cost
            (undecided.py).
    """

    key: str
    paper: str
    source: str
    text: str
    values: tuple[float, ...] = ()
    passed: tuple[bool, ...] | None = None
    measure: str = "Δ"
    own: bool = True
    collapsed: tuple[str, ...] = ()
    method_collapsed: tuple[str, ...] = ()
    note: str = ""
    seed_costs: tuple[tuple[str, float], ...] = ()

    def __post_init__(self) -> None:
        if self.passed is not None and self.values:
            raise ValueError(f"claim {self.key!r}: both values and passed given")

    @property
    def n(self) -> int:
        return len(self.passed) if self.passed is not None else len(self.values)

    @property
    def interval(self) -> Interval:
        return interval(list(self.values))

    def p_values(self) -> tuple[float, float] | None:
        """One-sided p-values (toward the paper, against it); None with fewer
        than 2 seeds, where nothing is tested."""
        if self.n < 2:
            return None
        if self.passed is not None:
            k = sum(self.passed)
            return (
                float(stats.binomtest(k, self.n, 0.5, alternative="greater").pvalue),
                float(stats.binomtest(k, self.n, 0.5, alternative="less").pvalue),
            )
        found = self.interval
        assert found.mean is not None and found.std is not None  # n >= 2
        if found.std == 0:  # equal values: the t statistic is ±inf (or 0/0)
            toward = 0.0 if found.mean > 0 else 1.0 if found.mean < 0 else 0.5
        else:
            toward = float(
                stats.ttest_1samp(self.values, 0.0, alternative="greater").pvalue
            )
        return toward, 1.0 - toward

    def p_two_sided(self) -> float | None:
        """Twice the smaller one-sided p (capped at 1): under ALPHA exactly
        when the plain verdict is holds or does not hold."""
        found = self.p_values()
        return None if found is None else min(1.0, 2 * min(found))

    @property
    def verdict(self) -> str:
        """The plain verdict at 95 %, before any adjustment."""
        if not self.own:
            return MEASURED
        if self.n < 2:
            return cannot_tell(self.n)
        if self.collapsed:
            return COLLAPSED
        if self.method_collapsed:
            return METHOD_COLLAPSED
        if self.passed is not None:
            toward, against = self.p_values() or (1.0, 1.0)
            if toward < ALPHA / 2:
                return HOLDS
            return FAILS if against < ALPHA / 2 else cannot_tell(self.n)
        found = self.interval
        assert found.low is not None and found.high is not None
        if found.low > 0:
            return HOLDS
        return FAILS if found.high < 0 else cannot_tell(self.n)

    def shown(self, digits: int = 3) -> str:
        """The numbers behind the verdict: `Δ 0.032 ± 0.027`, or for an event
        `in 3 of 3 seeds`."""
        if self.passed is not None:
            return f"in {sum(self.passed)} of {self.n} seed{'s' * (self.n != 1)}"
        found = self.interval
        if found.mean is None:
            return f"{self.measure} —"
        if found.half_width is None:
            return f"{self.measure} {found.mean:.{digits}f}"
        return f"{self.measure} {found.mean:.{digits}f} ± {found.half_width:.{digits}f}"

    def sentence(self) -> str:
        """The claim as a line of its section."""
        note = f"; {self.note}" if self.note else ""
        if self.passed is not None and self.own and self.n >= 2:
            note += (
                f"; the sign test decides from {SIGN_TEST_SEEDS} of {SIGN_TEST_SEEDS}"
            )
        why = ""
        runs = (*self.collapsed, *self.method_collapsed)
        if self.own and runs and self.n >= 2:
            why = f"; collapsed: {', '.join(runs)}"
        return f"- {self.text}: {self.verdict} ({self.shown()}{note}{why})."


class Claims:
    """The claims of one dataset's part of the page, in the order written."""

    def __init__(self) -> None:
        self._by_key: dict[str, Claim] = {}

    def add(self, claim: Claim) -> Claim:
        """Register `claim`; one with the same key registered earlier stays
        (and is returned): a sentence shown twice is one claim."""
        return self._by_key.setdefault(claim.key, claim)

    def say(self, claim: Claim) -> str:
        """Register `claim` and give its sentence."""
        return self.add(claim).sentence()

    def __iter__(self) -> Iterator[Claim]:
        return iter(self._by_key.values())

    def __len__(self) -> int:
        return len(self._by_key)

    def papers(self) -> list[Claim]:
        return [c for c in self if c.own]

    def tested(self) -> list[Claim]:
        """The papers' claims with a test (2 seeds or more): the family that
        Holm adjusts, collapsed baselines included (more claims, a stricter
        adjustment)."""
        return [c for c in self.papers() if c.p_two_sided() is not None]

    def holm(self) -> dict[str, str]:
        """key → the Holm verdict of each of the papers' claims at
        family-wise ALPHA over `tested()`."""
        family = self.tested()
        p_values = [c.p_two_sided() for c in family]
        rejected = holm([1.0 if p is None else p for p in p_values], ALPHA)
        verdicts = {c.key: c.verdict for c in self.papers()}
        for claim, decided in zip(family, rejected, strict=True):
            if claim.verdict in (HOLDS, FAILS) and not decided:
                verdicts[claim.key] = cannot_tell(claim.n)
        return verdicts


def holm(p_values: Sequence[float], alpha: float) -> list[bool]:
    """Holm's step-down procedure: which hypotheses are rejected at
    family-wise error `alpha` (in the order given).

    The i-th smallest p (from 0) is compared with alpha / (m − i), stopping
    at the first that is not under it.
    """
    for p in p_values:
        if not 0 <= p <= 1:
            raise ValueError(f"a p-value must be in [0, 1], got {p}")
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    rejected = [False] * len(p_values)
    m = len(p_values)
    for rank, i in enumerate(order):
        if p_values[i] >= alpha / (m - rank):
            break
        rejected[i] = True
    return rejected


def seed_collapsed(summary: dict[str, Any]) -> bool:
    """Whether a seed ended under twice chance (final mean accuracy) or
    without any (every client's last evaluation failed: a diverged model,
    which the seed-by-seed values leave out)."""
    final = summary.get("final_mean_acc")
    return final is None or final < 2 * CHANCE


def collapsed(outcome: Outcome, algorithm: str) -> list[str]:
    """`["<key> <algorithm>"]` when a seed of the run collapsed
    (`seed_collapsed`), else []."""
    if any(map(seed_collapsed, outcome.seed_summaries[algorithm].values())):
        return [f"{outcome.experiment.key} {algorithm}"]
    return []


Run = tuple[Outcome, str]  # an experiment's runs of one algorithm


def seed_costs(*runs: Run) -> tuple[tuple[str, float], ...]:
    """Each run's label ("<key> <algorithm>") with the mean wall seconds of
    its seeds (once per run, in the order given)."""
    costs: dict[str, float] = {}
    for outcome, algorithm in runs:
        walls = [
            s["wall_s"]
            for s in outcome.seed_summaries[algorithm].values()
            if s.get("wall_s") is not None
        ]
        if walls:
            costs.setdefault(
                f"{outcome.experiment.key} {algorithm}", sum(walls) / len(walls)
            )
    return tuple(costs.items())


def comparison(
    key: str,
    paper: str,
    source: str,
    text: str,
    higher: dict[int, float],
    lower: dict[int, float],
    *,
    runs: tuple[Sequence[Run], Sequence[Run]] = ((), ()),
    own: bool = True,
    measure: str = "Δ",
    note: str = "",
) -> Claim:
    """The claim that `higher` is above `lower`, seed by seed (the seeds both
    have; across experiments the runs of the same seed number are paired).
    `runs`: the runs behind each side, (the paper's method, its baselines),
    whose collapse the verdict reads."""
    methods, baselines = runs
    return Claim(
        key,
        paper,
        source,
        text,
        tuple(higher[seed] - lower[seed] for seed in sorted(higher) if seed in lower),
        measure=measure,
        own=own,
        collapsed=tuple(label for o, a in baselines for label in collapsed(o, a)),
        method_collapsed=tuple(label for o, a in methods for label in collapsed(o, a)),
        note=note,
        seed_costs=seed_costs(*methods, *baselines),
    )
