"""Several runs side by side: `clusterfed plot DIR [DIR…]` (matplotlib, no
screen; see `clusterfed.plots` for the figures of one run, whose style,
palette and writer these share)."""

from __future__ import annotations

import json
import warnings
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from clusterfed import plots
from clusterfed.seeds import interval

Row = dict[str, Any]


def plot_runs(folders: Sequence[Path], out: Path) -> list[Path]:
    """Mean client accuracy (with a band), number of clusters and ARI per
    round of several runs side by side; a compare folder stands for its runs
    (over seeds too: `seed<s>/<algorithm>/`, or one seed's with `seed<s>/`).

    Runs with the same scenario and algorithm (seeds of one setting) are
    aggregated: the line is the mean over runs, the band its 95 % Student t
    interval, as the comparison tables give it (the legend says so and gives
    the number of runs); a single run's band is ± the std over its clients.
    Each setting has its own colour and line style, so that equal lines stay
    visible; the rounds where the scenario's events fired are marked; the
    title names the scenarios.

    Raises:
        ValueError: a folder holds no run.
    """
    series: dict[str, list[list[Row]]] = defaultdict(list)
    for folder in folders:
        for label, rows in _runs_in(folder):
            series[label].append(rows)
    fig, grid = plots.new_figure(2, 2, figsize=(11, 7.4))
    acc, timed, clusters, ari = grid.flat
    for n, (name, runs) in enumerate(series.items()):
        style = {
            "color": plots._PALETTE[n % len(plots._PALETTE)],
            "linestyle": STYLES[n % len(STYLES)],
        }
        label = (
            f"{name} ({len(runs)} runs; band: 95 % interval)"
            if len(runs) > 1
            else f"{name} (band: ± std over clients)"
        )
        _series(acc, runs, _mean_acc, style, label, band=_client_band)
        _over_time(timed, runs, style, label)
        _series(clusters, runs, lambda r: r["n_clusters"], style, label)
        _series(ari, runs, lambda r: r["ari"], style, label)
    first = next(iter(series.values()))[0]
    marks = plots._mark_events(acc, first)
    for ax in (clusters, ari):
        plots._mark_events(ax, first)
    plots._mark_events_over_time(timed, first)
    for ax, ylabel in zip(
        (acc, clusters, ari), ("mean client accuracy", "clusters", "ARI"), strict=True
    ):
        ax.set(xlabel="round", ylabel=ylabel)
        plots._integer_rounds(ax)
    timed.set(xlabel="simulated time (s)", ylabel="mean client accuracy")
    acc.set_ylim(0, 1.02)
    timed.set_ylim(0, 1.02)
    plots.integer_counts(clusters)
    handles, _ = acc.get_legend_handles_labels()
    acc.legend(handles=[*handles, *marks], loc="lower right", fontsize="small")
    fig.suptitle(", ".join(sorted({name.split(" · ")[0] for name in series})))
    return plots._save(fig, out.with_suffix(".png"))


# One per setting, in turn with the palette: equal lines stay visible.
STYLES = ("-", "--", "-.", ":")


def _runs_in(folder: Path) -> list[tuple[str, list[Row]]]:
    """(label, rows) of the run in `folder`, or of the runs of a compare
    folder: comparison.json's keys are its runs' folders (`<algorithm>`, or
    `seed<s>/<algorithm>` over seeds)."""
    if (folder / "comparison.json").exists():
        names = json.loads((folder / "comparison.json").read_text())
        return [run for name in names for run in _runs_in(folder / name)]
    rounds = folder / "rounds.jsonl"
    if not rounds.is_file():
        raise ValueError(f"{folder}: no rounds.jsonl (not a results folder)")
    rows = [json.loads(line) for line in rounds.read_text().splitlines() if line]
    config = json.loads((folder / "config.json").read_text())
    scenario = config.get("scenario", {})
    return [(f"{scenario.get('name', '?')} · {scenario.get('algorithm', '?')}", rows)]


def _honest_accs(row: Row) -> list[float]:
    """The client accuracies the run's means count: a client the scenario
    made faulty reports its own (`summary.mean_std` leaves it out too)."""
    return [
        c["acc"]
        for c in row["clients"]
        if c["acc"] is not None and not c.get("faulty", False)
    ]


def _mean_acc(row: Row) -> float | None:
    accs = _honest_accs(row)
    return float(np.mean(accs)) if accs else None


def _client_band(row: Row) -> tuple[float, float] | None:
    accs = _honest_accs(row)
    if not accs:
        return None
    mean, std = float(np.mean(accs)), float(np.std(accs))
    return mean - std, mean + std


def _over_time(
    ax: Any, runs: list[list[Row]], style: dict[str, str], label: str
) -> None:
    """Mean client accuracy against simulated time; over several runs, both
    are the mean of the runs' rows of the same index (runs of one setting
    differ in time by their seeds only)."""
    length = min(len(rows) for rows in runs)
    times = np.array([[float(r["sim_time"]) for r in rows[:length]] for rows in runs])
    values = np.array(
        [
            [np.nan if (v := _mean_acc(r)) is None else v for r in rows[:length]]
            for rows in runs
        ]
    )
    with warnings.catch_warnings():  # a row where no run has a value
        warnings.simplefilter("ignore", RuntimeWarning)
        ax.plot(times.mean(axis=0), np.nanmean(values, axis=0), label=label, **style)


def _series(
    ax: Any,
    runs: list[list[Row]],
    value: Any,
    style: dict[str, str],
    label: str,
    band: Any = None,
) -> None:
    length = min(len(rows) for rows in runs)
    rounds = np.array([r["round"] for r in runs[0][:length]])
    values = np.array(
        [
            [np.nan if (v := value(r)) is None else v for r in rows[:length]]
            for rows in runs
        ]
    )
    with warnings.catch_warnings():  # a round where no run has a value
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(values, axis=0)
    ax.plot(rounds, mean, label=label, **style)
    colour = style["color"]
    if len(runs) > 1:
        low, high = interval_band(values)
        ax.fill_between(rounds, low, high, color=colour, alpha=0.2)
    elif band is not None:
        spans = [band(r) or (np.nan, np.nan) for r in runs[0][:length]]
        lows, highs = zip(*spans, strict=True)
        ax.fill_between(rounds, lows, highs, color=colour, alpha=0.2)


def interval_band(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per column of `values` (runs × rounds), the 95 % Student t interval of
    the mean over its runs (`seeds.interval`, as the tables print it); NaN
    where fewer than two runs have a value."""
    low, high = [], []
    for column in values.T:
        found = interval([float(v) for v in column if np.isfinite(v)])
        lo = found.low if found.low is not None else np.nan
        hi = found.high if found.high is not None else np.nan
        low.append(lo)
        high.append(hi)
    return np.array(low, dtype=float), np.array(high, dtype=float)
