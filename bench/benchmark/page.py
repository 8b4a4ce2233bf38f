"""docs/BENCHMARK.md: every setting's table with 95 % intervals, its figure,
the summary figure and what the benchmark cost, from the recorded outcomes."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from reproduce.records import compact_rows
from reproduce.runner import TEST_SETS, Outcome, plants_groups
from reproduce.sitting import shown

from clusterfed.scenarios import load_scenario
from clusterfed.scenarios.benchmark import SETTINGS
from clusterfed.seeds import Interval, interval, paired_differences

from . import figures

Summary = dict[str, Any]


@dataclass(frozen=True)
class Column:
    """A column of a setting's table: a summary metric, shown scaled."""

    title: str
    metric: str
    higher_is_better: bool
    digits: int
    scale: float = 1.0
    needs_truth: bool = False  # shown only where a ground truth exists


COLUMNS = (
    Column("final acc", "final_mean_acc", True, 3),
    Column("avg acc", "avg_mean_acc", True, 3),
    Column("ARI", "ari_final", True, 2, needs_truth=True),
    Column("purity", "purity_final", True, 2, needs_truth=True),
    Column("rounds to purity 0.9", "rounds_to_purity90", False, 1, needs_truth=True),
    Column("MB up", "bytes_up", False, 1, scale=1e-6),
    Column("MB down", "bytes_down", False, 1, scale=1e-6),
    Column("wall s", "wall_s", False, 0),
)


# The drift setting's clients all share one concept until the drift, so any
# clustering is pure from round 0 and "rounds to purity 0.9" would read 1 for
# FedAvg too; there the column counts from the drift instead.
AFTER_DRIFT = Column(
    "rounds after the drift to purity 0.9",
    "rounds_to_purity90_after_drift",
    False,
    1,
    needs_truth=True,
)


def drift_start(outcome: Outcome) -> int | None:
    """The round of the setting's last drift event; None without one."""
    events = load_scenario(outcome.experiment.scenario).events
    starts = [e.start for e in events if e.kind == "drift"]
    return max(starts) if starts else None


def rounds_to_purity_from(rows: Sequence[Summary], start: int) -> int | None:
    """Rounds from `start` until purity first reaches 0.9 (1: in round
    `start` itself); None if it never does."""
    for row in rows:
        if row["round"] >= start and (row.get("purity") or 0.0) >= 0.9:
            return int(row["round"]) - start + 1
    return None


def with_recovery(outcome: Outcome, start: int) -> Outcome:
    """`outcome` whose seed summaries also hold AFTER_DRIFT's metric, from
    each seed's rows."""
    summaries = {
        name: {
            seed: {
                **summary,
                AFTER_DRIFT.metric: rounds_to_purity_from(
                    outcome.seed_rows.get(name, {}).get(seed, []), start
                ),
            }
            for seed, summary in by_seed.items()
        }
        for name, by_seed in outcome.seed_summaries.items()
    }
    return replace(outcome, seed_summaries=summaries)


def column_interval(outcome: Outcome, algorithm: str, column: Column) -> Interval:
    """`column`'s interval over the seeds of `algorithm` (a seed without a
    value, e.g. purity 0.9 never reached, is left out of its n)."""
    values = [
        float(s[column.metric]) * column.scale
        for s in outcome.seed_summaries[algorithm].values()
        if s.get(column.metric) is not None
    ]
    return interval(values)


def best(outcome: Outcome, column: Column) -> str | None:
    """The algorithm best on `column`, when the seeds separate it from every
    other: it has a value in every seed, and its seed-by-seed difference to
    each other algorithm with a value has a 95 % interval that excludes 0 on
    the better side. None: no separated best.

    Separation from the runner-up alone is not enough: with several close
    rows a noisier third may overlap the first where the runner-up does not.
    Asking every difference to exclude 0, each at 95 %, is an
    intersection-union test: "better than all" holds at 95 % with no
    correction for the number of rows (Berger 1982)."""
    sign = 1.0 if column.higher_is_better else -1.0
    means = {
        name: i.mean
        for name in outcome.seed_summaries
        if (i := column_interval(outcome, name, column)).mean is not None
    }
    if len(means) < 2:
        return None
    first, *others = sorted(means, key=lambda n: -sign * means[n])
    # A seed without a value (purity 0.9 never reached) is worse than any
    # value, but the mean leaves it out: such an algorithm is never marked.
    if column_interval(outcome, first, column).n < len(outcome.seeds):
        return None
    a = outcome.seed_summaries[first]
    for other in others:
        gap = interval(
            paired_differences(a, outcome.seed_summaries[other], column.metric)
        )
        if gap.low is None or gap.high is None:
            return None
        if not (gap.low > 0 if sign > 0 else gap.high < 0):
            return None
    return first


def cell(found: Interval, column: Column, n_seeds: int, bold: bool) -> str:
    if found.mean is None:
        return "n/a"
    text = f"{found.mean:.{column.digits}f}"
    if found.half_width is not None:
        text += f" ± {found.half_width:.{column.digits}f}"
    if found.n < n_seeds:
        text += f" [{found.n}/{n_seeds}]"
    return f"**{text}**" if bold else text


def table(outcome: Outcome) -> list[str]:
    """A setting's table: one row per algorithm, mean ± half-width of the
    95 % Student t interval over the seeds; the best in a column in bold
    only where the seeds separate it from every other row (see `best`);
    with a drift event, rounds to purity 0.9 count from the drift
    (AFTER_DRIFT)."""
    columns = [
        c
        for c in COLUMNS
        if plants_groups(outcome.experiment.scenario) or not c.needs_truth
    ]
    start = drift_start(outcome)
    if start is not None:
        outcome = with_recovery(outcome, start)
        columns = [
            AFTER_DRIFT if c.metric == "rounds_to_purity90" else c for c in columns
        ]
    marked = {c.metric: best(outcome, c) for c in columns}
    n_seeds = len(outcome.seeds)
    lines = [
        "| algorithm | " + " | ".join(c.title for c in columns) + " |",
        "|---|" + "---:|" * len(columns),
    ]
    for name in outcome.seed_summaries:
        cells = [
            cell(
                column_interval(outcome, name, c), c, n_seeds, marked[c.metric] == name
            )
            for c in columns
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


# Pairs that run the same rounds by design on every setting here, and why;
# the page says so only where the records show it (`equal_runs`).
SAME_BY_DESIGN = {
    frozenset({"fedac", "fedacp"}): "FedACP departs from FedAC only in a round"
    " that leaves some of a cluster's clients out, by sampling or failure, and"
    " here every client trains every round",
}


def equal_runs(outcome: Outcome) -> list[list[str]]:
    """Groups of algorithms that ran the same rounds in every seed: the
    clustering, the mean accuracy and the clients' accuracies as recorded,
    round by round (wall time aside), in the table's order."""
    runs = {
        name: {seed: compact_rows(rows) for seed, rows in by_seed.items()}
        for name, by_seed in outcome.seed_rows.items()
        if by_seed and all(by_seed.values())
    }
    groups: list[list[str]] = []
    for name, found in runs.items():
        same = next((g for g in groups if runs[g[0]] == found), None)
        if same is None:
            groups.append([name])
        else:
            same.append(name)
    return [g for g in groups if len(g) > 1]


def one_cluster(outcome: Outcome, name: str) -> bool:
    """Whether `name` kept a single cluster in every round of every seed."""
    return all(
        row.get("n_clusters") == 1
        for rows in outcome.seed_rows[name].values()
        for row in rows
    )


def why_equal(outcome: Outcome, group: Sequence[str]) -> str:
    """Why a group of `equal_runs` is equal, where the records or
    SAME_BY_DESIGN tell; else empty."""
    if "fedavg" in group:
        rest = [n for n in group if n != "fedavg"]
        if all(one_cluster(outcome, n) for n in rest):
            kept = " and ".join(rest)
            return f"{kept} kept one cluster in every round: FedAvg"
    return SAME_BY_DESIGN.get(frozenset(group), "")


def equal_runs_note(outcome: Outcome) -> list[str]:
    """The sentence under a table that names its equal rows, or nothing."""
    groups = equal_runs(outcome)
    if not groups:
        return []
    said = []
    for group in groups:
        why = why_equal(outcome, group)
        said.append(" = ".join(group) + (f" ({why})" if why else ""))
    return [
        "**Equal rows.** These ran the same rounds in every seed, to the last"
        " recorded digit (cluster count, ARI, purity, the mean and every"
        " recorded client accuracy, round by round): " + "; ".join(said) + ".",
        "",
    ]


def cost(outcomes: Sequence[Outcome]) -> list[str]:
    """What the recorded runs took: per setting, the runs' own wall time."""
    lines = [
        "| setting | seeds | runs | hours | median run (s) |",
        "|---|---:|---:|---:|---:|",
    ]
    total = 0.0
    for o in outcomes:
        walls = [s["wall_s"] for by in o.seed_summaries.values() for s in by.values()]
        total += math.fsum(walls)
        median = sorted(walls)[len(walls) // 2] if walls else 0.0
        lines.append(
            f"| {o.experiment.key} | {len(o.seeds)} | {len(walls)}"
            f" | {math.fsum(walls) / 3600:.2f} | {median:.0f} |"
        )
    lines.append(f"| all | | | {total / 3600:.2f} | |")
    return lines


def write_page(
    outcomes: Sequence[Outcome],
    command: str,
    path: Path,
    missing: Sequence[str],
    figure_folder: Path,
    quick: bool,
    records: Path,
) -> None:
    """Write the page to `path`, its figures into `figure_folder`, from the
    outcomes recorded in `records`."""
    figure_folder.mkdir(parents=True, exist_ok=True)

    def link(figure: Path) -> str:
        return Path(os.path.relpath(figure, path.parent)).as_posix()

    lines = [
        "# The clustered-FL benchmark",
        "",
        "Every clustered algorithm in clusterfed, FedAvg and FedProx on the same four"
        " Fashion-MNIST settings (`clusterfed.scenarios.benchmark`): the same clients,"
        " rounds and training budget for every algorithm. Each cell is the mean over"
        " the seeds ± the half-width of its 95 % Student t interval; `[k/n]`: k of"
        " the n seeds have a value. A column's best is in bold only where its"
        " seed-by-seed difference to every other row has a 95 % interval that"
        " excludes 0 (an intersection-union test: no correction for the number of"
        " rows is due). Accuracies are each client's on its own test set, drawn from"
        " Fashion-MNIST's 10,000-image test split to match the client's classes"
        " and transform (`acc` in rounds.jsonl; its 20 % hold-out of the training"
        " images, `val_acc`, serves the algorithms' own decisions), averaged over"
        " the clients; `avg acc` averages that over the rounds.",
        "",
        f"Written by `{command}` from the records in `{shown(records)}`"
        + (" (--quick: a smoke test, not a result)." if quick else "."),
        "",
    ]
    held_out = [o.experiment.key for o in outcomes if o.accuracy != TEST_SETS]
    if held_out:
        lines += [
            f"**Not on test sets:** {', '.join(held_out)} scored each client on"
            " its hold-out (runs from before clients had test sets); rerun them.",
            "",
        ]
    recorded = {o.experiment.key: len(o.seeds) for o in outcomes}
    if set(recorded) != set(SETTINGS) or min(recorded.values(), default=0) < 3:
        have = ", ".join(f"{k} ({n} seed{'s' * (n != 1)})" for k, n in recorded.items())
        lines += [
            f"**Incomplete:** {len(recorded)} of the {len(SETTINGS)} settings are"
            f" recorded so far ({have or 'none'}); the benchmark grows over sittings"
            " (`python bench/benchmark.py --resume`) to 3 seeds of each. With one"
            " seed a cell has no interval and no best is marked.",
            "",
        ]
    if missing:
        lines += [
            "Not in clusterfed yet, so not on this page: "
            + ", ".join(f"`{m}`" for m in missing)
            + ".",
            "",
        ]
    for outcome in outcomes:
        scenario = load_scenario(outcome.experiment.scenario)
        key = outcome.experiment.key
        figure = figures.accuracy_per_round(
            outcome, figure_folder / f"benchmark-{key}.png"
        )
        command = outcome.experiment.command(quick, outcome.dataset, outcome.seeds)
        lines += [
            f"## {key}",
            "",
            scenario.description,
            "",
            f"Seeds {', '.join(map(str, outcome.seeds))}; `{command}`.",
            "",
            *table(outcome),
            "",
            *equal_runs_note(outcome),
            f"![mean client accuracy per round, {key}]({link(figure)})",
            "",
        ]
    if outcomes:
        summary = figures.accuracy_against_ari(
            [o for o in outcomes if plants_groups(o.experiment.scenario)],
            figure_folder / "benchmark-summary.png",
        )
        lines += [
            "## Accuracy against clustering quality",
            "",
            "Final mean client accuracy against the final ARI, one panel per"
            " setting with a ground truth (not dirichlet), one point per algorithm"
            " (mean over the seeds); the markers are hollow and grow where"
            " algorithms land on one place, so each stays visible as a ring.",
            "",
            f"![final accuracy against ARI]({link(summary)})",
            "",
            "## What it cost",
            "",
            "The recorded runs' own wall time on the machine that ran them. A"
            " sitting may share its machine with other work (here, a 2-core"
            " machine with one or two other sittings), so a run's wall time (and"
            " the *wall s* column's interval) measures that load as well as the"
            " algorithm; bytes up and down do not depend on it.",
            "",
            *cost(outcomes),
            "",
        ]
    path.write_text("\n".join(lines))
