"""The text tables of a comparison (`clusterfed compare` prints them): one
seed's summaries side by side, or every algorithm's means with their
intervals over the seeds."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .seeds import CONFIDENCE, Interval, interval, paired_differences, seed_statistics

Summary = dict[str, Any]


def table(summaries: dict[str, dict[str, Any]]) -> str:
    """The comparison in the layout of DCFL's Table I, plus clustering columns.

    Accuracies have four decimals, and `Δ final` is each final mean accuracy
    minus the first algorithm's, so that near-equal runs can be told apart
    (`=` where they are exactly equal). `t→acc` is time_to_accuracy: the
    simulated seconds until the mean client accuracy first reached the
    scenario's target_accuracy (`-`: never).
    """
    width = max([9, *(len(name) for name in summaries)])
    header = (
        f"{'algorithm':<{width}} {'final acc':>10} {'± std':>7} {'Δ final':>8}"
        f" {'avg acc':>9} {'± std':>7} {'clusters':>8} {'ARI':>6} {'purity':>6}"
        f" {'→p90':>5} {'t→acc s':>9}"
    )
    lines = [header, "-" * len(header)]
    first = next(iter(summaries.values()), {}).get("final_mean_acc")
    for name, s in summaries.items():
        lines.append(
            f"{name:<{width}} {_num(s['final_mean_acc']):>10}"
            f" {_num(s['final_std_acc']):>7}"
            f" {_delta(s['final_mean_acc'], first):>8}"
            f" {_num(s['avg_mean_acc']):>9} {_num(s['avg_std_acc']):>7}"
            f" {s['n_clusters_final']!s:>8} {_num(s['ari_final'], 2):>6}"
            f" {_num(s['purity_final'], 2):>6} {s['rounds_to_purity90']!s:>5}"
            f" {_num(s.get('time_to_accuracy'), 2):>9}"
        )
    lines.append(_target_note(summaries.values()))
    return "\n".join(lines)


def _target_note(summaries: Iterable[Summary]) -> str:
    targets = sorted(
        {s["target_accuracy"] for s in summaries if "target_accuracy" in s}
    )
    shown = ", ".join(f"{t:g}" for t in targets) or "the target_accuracy"
    return (
        f"t→acc: simulated seconds until the mean client accuracy first reached"
        f" {shown} (-: never)"
    )


def _num(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _delta(value: float | None, first: float | None) -> str:
    if value is None or first is None:
        return "-"
    if value == first:
        return "="
    return f"{value - first:+.4f}"


def seeds_table(
    seed_summaries: dict[str, dict[int, Summary]], confidence: float = CONFIDENCE
) -> str:
    """A comparison over seeds: per algorithm the mean ± the half-width of the
    Student t interval over its seeds (four decimals for accuracies).

    `Δ final` is paired by seed: the interval of (final accuracy − the first
    algorithm's final accuracy on the same seed), which is narrower than the
    two intervals side by side when seeds move both algorithms alike. With
    one seed there is no interval (n=1).
    """
    width = max([9, *(len(name) for name in seed_summaries)])
    header = (
        f"{'algorithm':<{width}} {'n':>2} {'final acc':>15} {'Δ final':>16}"
        f" {'avg acc':>15} {'client std':>15} {'clusters':>8}"
        f" {'ARI':>11} {'purity':>11} {'t→acc s':>19}"
    )
    lines = [header, "-" * len(header)]
    first = next(iter(seed_summaries.values()), {})
    for name, summaries in seed_summaries.items():
        i = seed_statistics(summaries, confidence)
        clusters = i["n_clusters_final"].mean
        lines.append(
            f"{name:<{width}} {len(summaries):>2}"
            f" {_pm(i['final_mean_acc']):>15}"
            f" {_paired_delta(summaries, first, confidence):>16}"
            f" {_pm(i['avg_mean_acc']):>15} {_pm(i['final_std_acc']):>15}"
            f" {_num(clusters, 1):>8}"
            f" {_pm(i['ari_final'], 2):>11} {_pm(i['purity_final'], 2):>11}"
            f" {_reached(i['time_to_accuracy'], len(summaries)):>19}"
        )
    n = max((len(s) for s in seed_summaries.values()), default=0)
    if n == 1:
        lines.append("n=1: one seed, so no interval; run more seeds for one")
    else:
        lines.append(
            f"mean ± half-width of the {confidence:.0%} Student t interval over"
            f" the seeds; Δ final paired by seed with {next(iter(seed_summaries))}"
        )
    every = [s for runs in seed_summaries.values() for s in runs.values()]
    lines.append(
        _target_note(every) + "; over the seeds that reached it, [k/n] when not all"
    )
    return "\n".join(lines)


def _reached(value: Interval, runs: int) -> str:
    """time_to_accuracy over the seeds that reached the target, and how many
    did when not all."""
    text = _pm(value, 1)
    return text if value.n == runs else f"{text} [{value.n}/{runs}]"


def _pm(value: Interval, digits: int = 4, *, sign: bool = False) -> str:
    """`mean ± half-width`; the mean alone, padded, where there is no interval."""
    if value.mean is None:
        return "-"
    mean = f"{value.mean:{'+' if sign else ''}.{digits}f}"
    if value.half_width is None:
        return mean + " " * (digits + 5)  # the width of " ± 0.xxxx"
    return f"{mean} ± {value.half_width:.{digits}f}"


def _paired_delta(
    summaries: dict[int, Summary], first: dict[int, Summary], confidence: float
) -> str:
    diffs = paired_differences(summaries, first, "final_mean_acc")
    if not diffs:
        return "-"
    if not any(diffs):
        return "="
    return _pm(interval(diffs, confidence), sign=True)
