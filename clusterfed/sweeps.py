"""A sweep: one scenario over a grid of settings × algorithms × seeds, in one
folder, resumable, with a table and a figure of every cell.

    clusterfed sweep quickstart --grid train.lr=0.01,0.05 \\
        --grid algorithm=fedavg,fedprox --seeds 3 --out runs/lr-sweep

Each cell of the grid (one value of every `--grid` key) is a `compare` of
its algorithm over the seeds in `<out>/<cell>/` (a cell's folder name is its
settings, `algorithm=fedavg,train.lr=0.01`), so `--resume` reads back every
run that finished with the same settings and runs only what is missing.
`<out>/sweep.json` holds each cell's settings and, per metric, the mean and
95 % Student t interval over the seeds; `<out>/sweep.png` draws each cell's
final mean accuracy with that interval.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusterfed.comparison import CompareResult, compare
from clusterfed.errors import ClusterfedError, ConfigError
from clusterfed.folders import claim
from clusterfed.scenarios import Scenario, load_scenario
from clusterfed.seeds import Interval, seed_statistics

SWEEP = "sweep.json"
FIGURE = "sweep.png"
# What the table and sweep.json give per cell.
METRICS = ("final_mean_acc", "avg_mean_acc", "n_clusters_final", "ari_final")


@dataclass(frozen=True)
class Cell:
    """One point of the grid: its settings, and its folder's name."""

    settings: tuple[tuple[str, str], ...]

    @property
    def name(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.settings)

    @property
    def algorithm(self) -> str | None:
        return dict(self.settings).get("algorithm")

    @property
    def overrides(self) -> list[str]:
        return [f"{k}={v}" for k, v in self.settings if k != "algorithm"]


@dataclass(frozen=True)
class SweepResult:
    """Every cell's comparison over the seeds, in grid order."""

    out: Path
    cells: dict[Cell, CompareResult]

    def statistics(self) -> dict[str, dict[str, Interval]]:
        """Cell name → metric → mean and 95 % interval over its seeds."""
        found = {}
        for cell, result in self.cells.items():
            (by_seed,) = result.seed_summaries.values()
            found[cell.name] = seed_statistics(by_seed)
        return found


def parse_grid(entries: Sequence[str]) -> dict[str, list[str]]:
    """`["train.lr=0.01,0.05", "algorithm=fedavg,fedprox"]` → the grid.

    Raises:
        ConfigError: an entry without `=` or values, or a key twice.
    """
    grid: dict[str, list[str]] = {}
    for entry in entries:
        key, sep, values = entry.partition("=")
        key = key.strip()
        chosen = [v.strip() for v in values.split(",") if v.strip()]
        if not sep or not key or not chosen:
            raise ConfigError(
                f"--grid {entry!r}: give KEY=V1,V2,... (e.g. train.lr=0.01,0.05)"
            )
        if key in grid:
            raise ConfigError(f"--grid {key} is given twice: list its values once")
        if len(set(chosen)) != len(chosen):
            raise ConfigError(f"--grid {key}: a value is listed twice")
        grid[key] = chosen
    if not grid:
        raise ConfigError("a sweep needs at least one --grid KEY=V1,V2,...")
    return grid


def cells(grid: Mapping[str, Sequence[str]]) -> list[Cell]:
    """Every combination of the grid's values, keys in the order given."""
    keys = list(grid)
    return [
        Cell(tuple(zip(keys, values, strict=True)))
        for values in itertools.product(*(grid[k] for k in keys))
    ]


def sweep(
    scenario: Scenario | str | Path,
    grid: Mapping[str, Sequence[str]],
    *,
    out: str | Path,
    seeds: int | Sequence[int] = 1,
    overrides: Sequence[str] = (),
    resume: bool = False,
    **run_options: Any,
) -> SweepResult:
    """Run `scenario` at every cell of `grid` over `seeds`, into `out`.

    A grid key is a scenario field or algorithm parameter as `--set` takes it
    (`train.lr`, `partition.alpha`, `distance`), or `algorithm`. Other
    keyword arguments go to `compare` (and from there to `run`).

    Raises:
        ConfigError: an empty grid; `out` not empty without `resume`; a cell
            whose settings do not validate (before anything runs).
    """
    if not grid:
        raise ConfigError("a sweep needs at least one grid key")
    base = load_scenario(scenario)
    folder = Path(out)
    if not resume:
        claim(folder)
    chosen = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    every = cells(grid)
    # Every cell validated before the first run starts.
    for cell in every:
        _check(base, cell, overrides)
    found: dict[Cell, CompareResult] = {}
    for cell in every:
        found[cell] = compare(
            base,
            [cell.algorithm or base.algorithm],
            out=folder / cell.name,
            seeds=chosen,
            overrides=[*overrides, *cell.overrides],
            resume=resume and (folder / cell.name).exists(),
            **run_options,
        )
        result = SweepResult(folder, dict(found))
        _write(result, grid)  # a sweep stopped midway is whole so far
    from clusterfed.plots_sweep import sweep_figure  # matplotlib: only once drawn

    sweep_figure(result.statistics(), folder / FIGURE, base.name)
    return result


def _check(base: Scenario, cell: Cell, overrides: Sequence[str]) -> None:
    from clusterfed.scenarios import with_overrides

    try:
        with_overrides(
            base,
            [*overrides, *cell.overrides],
            algorithm=cell.algorithm or base.algorithm,
        )
    except ClusterfedError as exc:  # a scenario's problems, an unknown name
        raise ConfigError(f"sweep cell {cell.name}: {exc}") from exc


def _write(result: SweepResult, grid: Mapping[str, Sequence[str]]) -> None:
    statistics = result.statistics()
    data = {
        "grid": {k: list(v) for k, v in grid.items()},
        "cells": {
            cell.name: {
                "settings": dict(cell.settings),
                "seeds": list(compared.seeds or ()),
                "statistics": {
                    m: statistics[cell.name][m].as_json()
                    for m in METRICS
                    if m in statistics[cell.name]
                },
            }
            for cell, compared in result.cells.items()
        },
    }
    (result.out / SWEEP).write_text(json.dumps(data, indent=2) + "\n")


def sweep_table(result: SweepResult) -> str:
    """One line per cell: its settings and each metric's mean ± half-width."""
    statistics = result.statistics()
    width = max(len(c.name) for c in result.cells)
    header = f"{'cell':<{width}}  " + "  ".join(f"{m:>20}" for m in METRICS)
    lines = [header, "-" * len(header)]
    for cell in result.cells:
        shown = []
        for metric in METRICS:
            found = statistics[cell.name].get(metric)
            shown.append(f"{_pm(found):>20}")
        lines.append(f"{cell.name:<{width}}  " + "  ".join(shown))
    seeds = next(iter(result.cells.values())).seeds or ()
    lines.append(f"mean ± 95 % interval over {len(seeds)} seed(s) per cell")
    return "\n".join(lines)


def _pm(found: Interval | None) -> str:
    if found is None or found.mean is None:
        return "—"
    if found.half_width is None:
        return f"{found.mean:.3f}"
    return f"{found.mean:.3f} ± {found.half_width:.3f}"
