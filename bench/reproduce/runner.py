"""What an experiment is, what its run gives back, and the loop that runs them."""

from __future__ import annotations

import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusterfed.comparison import compare

# The repository root: the page names run folders relative to it.
ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Experiment:
    """One `clusterfed compare`: a scenario, its algorithms, its overrides."""

    key: str
    scenario: str
    algorithms: tuple[str, ...]
    sets: tuple[str, ...] = ()
    quick_rounds: int | None = None  # rounds in --quick mode (None: skip there)
    quick_algorithms: tuple[str, ...] | None = None  # --quick runs only these

    def algorithms_for(self, quick: bool) -> tuple[str, ...]:
        return (self.quick_algorithms or self.algorithms) if quick else self.algorithms

    def command(self, quick: bool, dataset: str) -> str:
        parts = [
            "clusterfed",
            "compare",
            self.scenario,
            "--algorithms",
            ",".join(self.algorithms_for(quick)),
        ]
        if quick and self.quick_rounds is not None:
            parts += ["--rounds", str(self.quick_rounds)]
        for assignment in self.overrides(dataset):
            parts += ["--set", assignment]
        return shlex.join(parts)

    def overrides(self, dataset: str) -> list[str]:
        on = [] if dataset == "digits" else [f"dataset.name={dataset}"]
        return [*self.sets, *on]


@dataclass
class Outcome:
    experiment: Experiment
    dataset: str
    seconds: float
    summaries: dict[str, dict[str, Any]]
    rows: dict[str, list[dict[str, Any]]]
    out: Path
    quick: bool


# What the paper sections look their runs up in: (dataset, experiment key).
ByKey = dict[tuple[str, str], Outcome]


def run_all(
    experiments: Sequence[Experiment],
    quick: bool,
    out: Path,
    only: Sequence[str],
    datasets: Sequence[str],
) -> list[Outcome]:
    outcomes = []
    for dataset in datasets:
        for exp in experiments:
            if only and not any(exp.key.startswith(o) for o in only):
                continue
            if quick and exp.quick_rounds is None:
                continue
            folder = out / dataset / exp.key
            start = time.perf_counter()
            result = compare(
                exp.scenario,
                list(exp.algorithms_for(quick)),
                out=folder,
                overwrite=True,  # a rerun replaces its own results
                rounds=exp.quick_rounds if quick else None,
                overrides=exp.overrides(dataset),
            )
            seconds = time.perf_counter() - start
            rows = {name: r.rows for name, r in result.runs.items()}
            outcomes.append(
                Outcome(exp, dataset, seconds, result.summaries, rows, folder, quick)
            )
            print(f"{dataset:<14} {exp.key:<22} {seconds:7.1f} s", flush=True)
    return outcomes
