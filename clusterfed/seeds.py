"""Several seeds of one comparison: which seeds, and intervals over them.

`compare(..., seeds=...)` runs every algorithm on each seed; this module
reads the seeds the user asked for and condenses the per-seed summaries into
a mean and a Student t confidence interval per metric.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from scipy import stats

from clusterfed.errors import ConfigError

# The summary fields (summary.summarize) that get an interval over seeds.
METRICS = (
    "final_mean_acc",
    "avg_mean_acc",
    "final_std_acc",
    "avg_std_acc",
    "ari_final",
    "purity_final",
    "n_clusters_final",
    "time_to_accuracy",
)
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Interval:
    """Mean of `n` values and its two-sided Student t confidence interval.

    `std` is the sample standard deviation (ddof=1); `half_width` is
    t(1 − (1 − confidence)/2, n − 1) · std / √n, and `low`/`high` are the mean
    ∓ it. With one value there is no interval (`std`, `half_width`, `low`,
    `high` are None); with none, `mean` is None too.
    """

    n: int
    mean: float | None
    std: float | None
    half_width: float | None
    low: float | None
    high: float | None

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """The mean of `values` with its Student t interval (see `Interval`)."""
    n = len(values)
    if n == 0:
        return Interval(0, None, None, None, None, None)
    # statistics computes in exact fractions: equal values have std 0.0 and
    # their own value as mean, where numpy's float sums leave 1e-16s.
    mean = float(statistics.mean(values))
    if n == 1:
        return Interval(1, mean, None, None, None, None)
    std = float(statistics.stdev(values))
    # t.ppf · sem rather than t.interval: equal values (sem 0) give a
    # zero-width interval, where t.interval's scale=0 gives NaN.
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * std / math.sqrt(n)
    return Interval(n, mean, std, half, mean - half, mean + half)


def seed_statistics(
    summaries: Mapping[int, Mapping[str, Any]], confidence: float = CONFIDENCE
) -> dict[str, Interval]:
    """metric → interval over the seeds' summaries (seed → summary); a seed
    whose run has no value for a metric (no ARI without planted groups) is
    left out of that metric's `n`."""
    return {
        metric: interval(
            [float(s[metric]) for s in summaries.values() if s.get(metric) is not None],
            confidence,
        )
        for metric in METRICS
    }


def paired_differences(
    a: Mapping[int, Mapping[str, Any]],
    b: Mapping[int, Mapping[str, Any]],
    metric: str,
) -> list[float]:
    """`a` minus `b` on `metric`, seed by seed, over the seeds both ran with
    a value in both (seed → summary on each side)."""
    return [
        float(a[seed][metric]) - float(b[seed][metric])
        for seed in a
        if seed in b
        and a[seed].get(metric) is not None
        and b[seed].get(metric) is not None
    ]


def seeds_json(
    seed_summaries: Mapping[str, Mapping[int, Mapping[str, Any]]],
    confidence: float = CONFIDENCE,
) -> dict[str, Any]:
    """What a comparison over seeds writes to seeds.json, from algorithm →
    seed → summary: `seeds` (those every algorithm ran, in run order),
    `confidence`, `statistics` (algorithm → metric → `Interval.as_json`),
    `reference` (the first algorithm) and `paired_differences` (every other
    algorithm → metric → the interval of its value minus the reference's,
    seed by seed)."""
    names = list(seed_summaries)
    reference = names[0] if names else None
    seeds = [
        seed
        for seed in (seed_summaries[reference] if reference is not None else ())
        if all(seed in seed_summaries[name] for name in names)
    ]
    return {
        "seeds": seeds,
        "confidence": confidence,
        "statistics": {
            name: {
                metric: found.as_json()
                for metric, found in seed_statistics(summaries, confidence).items()
            }
            for name, summaries in seed_summaries.items()
        },
        "reference": reference,
        "paired_differences": {
            name: {
                metric: interval(
                    paired_differences(
                        seed_summaries[name], seed_summaries[reference], metric
                    ),
                    confidence,
                ).as_json()
                for metric in METRICS
            }
            for name in names[1:]
            if reference is not None
        },
    }


def resolve_seeds(seeds: int | Sequence[int]) -> list[int]:
    """The seeds to run: an int is a count (3 → 0, 1, 2), a sequence is the
    seeds themselves.

    Raises:
        ConfigError: a count below 1; an empty list; a negative, repeated or
            non-integer seed.
    """
    try:
        return _checked(seeds)
    except ConfigError as exc:
        raise ConfigError(f"seeds={seeds!r}: {exc}") from None


def parse_seeds(text: str) -> list[int]:
    """`--seeds`: a single integer is a count (`3`: seeds 0, 1, 2); a list
    with commas names the seeds (`0,1,2`, `5,7`).

    Raises:
        ConfigError: empty text or item, a non-integer, or what
            `resolve_seeds` refuses; the message names `--seeds`.
    """
    text = text.strip()
    try:
        if not text:
            raise ConfigError("empty; give a count (3) or the seeds (0,1,2)")
        if "," not in text:
            return _checked(_integer(text))
        items = [item.strip() for item in text.split(",")]
        if "" in items:
            raise ConfigError("an empty item; write the seeds like 0,1,2")
        return _checked([_integer(item) for item in items])
    except ConfigError as exc:
        raise ConfigError(f"--seeds {text!r}: {exc}") from None


def _checked(seeds: int | Sequence[int]) -> list[int]:
    # A str is a Sequence too; "0,1" belongs to parse_seeds.
    if isinstance(seeds, bool | str) or not isinstance(seeds, int | Sequence):
        raise ConfigError("expected a count or a list of seeds")
    if isinstance(seeds, int):
        if seeds < 1:
            raise ConfigError(
                "a single number is a count of seeds (N runs seeds 0..N-1) and"
                " must be at least 1; for one particular seed use --seed (seed=)"
            )
        return list(range(seeds))
    chosen = list(seeds)
    if not chosen:
        raise ConfigError("no seeds; give a count (3) or the seeds (0,1,2)")
    for seed in chosen:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ConfigError(f"{seed!r} is not an integer")
        if seed < 0:
            raise ConfigError(f"{seed} is negative; seeds are 0 or more")
    repeated = sorted({s for s in chosen if chosen.count(s) > 1})
    if repeated:
        shown = ", ".join(map(str, repeated))
        raise ConfigError(f"{shown} listed twice; each seed runs once")
    return chosen


def _integer(item: str) -> int:
    try:
        return int(item)
    except ValueError:
        raise ConfigError(f"{item!r} is not an integer") from None


def seeds_label(seeds: Sequence[int]) -> str:
    """The seeds in a folder name: `0to2` for 0, 1, 2; `3_5` otherwise."""
    if len(seeds) > 2 and list(seeds) == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"{seeds[0]}to{seeds[-1]}"
    return "_".join(map(str, seeds))
