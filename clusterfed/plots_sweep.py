"""A sweep's figure: every cell's final mean accuracy with its 95 % interval
over the seeds (`clusterfed sweep`, `sweep.png` and `sweep.pdf`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from .plots import _save, new_figure
from .seeds import Interval


def sweep_figure(
    statistics: Mapping[str, Mapping[str, Interval]], path: Path, scenario: str
) -> list[Path]:
    """One row per cell, top to bottom in grid order: the mean final client
    accuracy over the seeds, with its 95 % Student t interval as a bar (none
    for a cell of one seed). Returns the files written."""
    names = list(statistics)
    found = [statistics[n].get("final_mean_acc") for n in names]
    means = [
        f.mean if f is not None and f.mean is not None else float("nan") for f in found
    ]
    halves = [
        f.half_width if f is not None and f.half_width is not None else 0.0
        for f in found
    ]
    seeds = max((f.n for f in found if f is not None), default=0)
    fig, ax = new_figure(figsize=(6.4, 0.9 + 0.42 * len(names)))
    rows = list(range(len(names)))[::-1]
    ax.errorbar(
        means, rows, xerr=halves, fmt="o", color="black", ecolor="0.4", capsize=4
    )
    ax.set_yticks(rows, names)
    ax.set(
        xlabel="final mean client accuracy",
        title=f"{scenario}: mean over {seeds} seed(s), bar: 95 % interval",
        xlim=(0, 1),
        ylim=(-0.6, len(names) - 0.4),
    )
    ax.grid(axis="x", color="0.9")
    return _save(fig, path)
