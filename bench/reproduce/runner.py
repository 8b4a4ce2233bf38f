"""What an experiment is, what its run gives back, and the loop that runs them."""

from __future__ import annotations

import contextlib
import math
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clusterfed.api import RunResult
from clusterfed.comparison import CompareResult, compare
from clusterfed.data.datasets import WITH_TEST_SPLIT
from clusterfed.errors import ScenarioError
from clusterfed.folders import safe_name
from clusterfed.scenarios import Scenario, load_scenario, with_overrides
from clusterfed.seeds import (
    Interval,
    interval,
    paired_differences,
    seed_statistics,
)

# The repository root: the page names run folders relative to it.
ROOT = Path(__file__).resolve().parents[2]

Row = dict[str, Any]

# `(dataset, experiment)` → a context that holds the experiment for one
# sitting while it runs: True when it is this sitting's (records.claims).
Claim = Callable[[str, "Experiment"], contextlib.AbstractContextManager[bool]]

# What a run's `acc` is measured on. Clients of a dataset with a test split
# get test sets drawn from it (data/test_sets.py); runs made before that,
# and every run on a dataset without one, score the 20 % hold-out.
TEST_SETS = "test sets"
HOLD_OUT = "hold-out"


def accuracy_of(dataset: str) -> str:
    """What a run on `dataset` made now measures its accuracy on."""
    return TEST_SETS if dataset in WITH_TEST_SPLIT else HOLD_OUT


# A number read from one seed's run: (its summary, its rows) → value or None.
SeedValue = Callable[[dict[str, Any], list[Row]], float | None]


@dataclass(frozen=True)
class Experiment:
    """One `clusterfed compare`: a scenario, its algorithms, its overrides."""

    key: str
    scenario: str
    algorithms: tuple[str, ...]
    sets: tuple[str, ...] = ()
    quick_rounds: int | None = None  # rounds in --quick mode (None: skip there)
    quick_algorithms: tuple[str, ...] | None = None  # --quick runs only these
    # The scenario with the paper's own settings on Fashion-MNIST
    # (scenarios/papers_fmnist.py); None: the digits one with dataset.name.
    paper_scale: str | None = None
    paper_scale_only: bool = False  # nothing to run on the digits
    # Rounds in --quick mode at paper scale (None: skip there). A round there
    # costs 1-9 s where the digits' costs 0.1-0.5 s, so these are sized to
    # keep the whole quick page under 10 minutes, not to show each effect.
    paper_quick_rounds: int | None = None

    def algorithms_for(self, quick: bool) -> tuple[str, ...]:
        return (self.quick_algorithms or self.algorithms) if quick else self.algorithms

    def scenario_for(self, dataset: str) -> str:
        if dataset == "fashion_mnist" and self.paper_scale is not None:
            return self.paper_scale
        return self.scenario

    def quick_rounds_for(self, dataset: str) -> int | None:
        if self.scenario_for(dataset) != self.scenario:
            return self.paper_quick_rounds
        return self.quick_rounds

    def command(self, quick: bool, dataset: str, seeds: Sequence[int] = (0,)) -> str:
        parts = [
            "clusterfed",
            "compare",
            self.scenario_for(dataset),
            "--algorithms",
            ",".join(self.algorithms_for(quick)),
        ]
        parts += seeds_option(seeds)
        rounds = self.quick_rounds_for(dataset)
        if quick and rounds is not None:
            parts += ["--rounds", str(rounds)]
        for assignment in self.overrides(dataset):
            parts += ["--set", assignment]
        return shlex.join(parts)

    def resolved(self, dataset: str) -> Scenario:
        """The scenario its runs on `dataset` are made of: the built-in one
        after the experiment's overrides, with its own algorithm, or with
        the experiment's first where the overrides refuse that one (the DP
        study's client-level cells on DCFL's scenario; every record made
        before that case kept the scenario's own)."""
        scenario = load_scenario(self.scenario_for(dataset))
        try:
            return with_overrides(scenario, self.overrides(dataset))
        except ScenarioError:
            return with_overrides(
                scenario, self.overrides(dataset), algorithm=self.algorithms[0]
            )

    def overrides(self, dataset: str) -> list[str]:
        if dataset == "digits" or self.scenario_for(dataset) != self.scenario:
            return list(self.sets)
        return [*self.sets, f"dataset.name={dataset}"]


@dataclass
class Outcome:
    """An experiment's runs: `summaries` hold each metric's mean over the
    seeds (the first seed's value of anything else), `statistics` the
    intervals, `seed_summaries` every seed's own, `seed_rows` every seed's
    per-round rows (`rows`: the first seed's)."""

    experiment: Experiment
    dataset: str
    seconds: float
    summaries: dict[str, dict[str, Any]]
    seed_rows: dict[str, dict[int, list[dict[str, Any]]]]
    out: Path
    quick: bool
    seeds: tuple[int, ...] = (0,)
    statistics: dict[str, dict[str, Interval]] = field(default_factory=dict)
    seed_summaries: dict[str, dict[int, dict[str, Any]]] = field(default_factory=dict)
    # What its accuracies are measured on (TEST_SETS or HOLD_OUT); by
    # default what a run on its dataset measures now.
    accuracy: str = ""

    def __post_init__(self) -> None:
        self.accuracy = self.accuracy or accuracy_of(self.dataset)

    @property
    def rows(self) -> dict[str, list[dict[str, Any]]]:
        return {name: runs[min(runs)] for name, runs in self.seed_rows.items()}

    def paired(self, a: str, b: str, metric: str = "final_mean_acc") -> Interval:
        """`a` minus `b` on `metric`, seed by seed, with its interval."""
        by_seed = self.seed_summaries
        return interval(paired_differences(by_seed[a], by_seed[b], metric))

    def per_seed(self, algorithm: str, value: SeedValue) -> dict[int, float]:
        """`value` of each seed's run of `algorithm` (seed → value; a seed
        where it is None is left out)."""
        found = {}
        for seed, summary in sorted(self.seed_summaries[algorithm].items()):
            v = value(summary, self.seed_rows.get(algorithm, {}).get(seed, []))
            if v is not None:
                found[seed] = float(v)
        return found


def plants_groups(scenario: str) -> bool:
    """Whether the built-in `scenario` deals its clients into more than one
    ground-truth group, so that ARI and purity mean something: a transform,
    a class table of several rows, an IID mix, or a drift event. Dirichlet,
    shards and IID partitions put every client in one group, against which
    a clustering scores 1 or 0 by its number of clusters alone."""
    spec = load_scenario(scenario)
    partition = spec.partition
    return (
        spec.transform is not None
        or any(e.kind == "drift" for e in spec.events)
        or partition.kind == "iid_mix"
        or (partition.kind == "class_table" and len(partition.table) > 1)
    )


def seeds_option(seeds: Sequence[int]) -> list[str]:
    """The `clusterfed compare` option that runs `seeds`: none for seed 0
    alone, `--seeds 3` for 0, 1, 2, `--seeds 1,2` for a list, `--seed 2`
    for one other seed (a single number after --seeds is a count)."""
    seeds = sorted(seeds)
    if seeds == [0]:
        return []
    if seeds == list(range(len(seeds))):
        return ["--seeds", str(len(seeds))]
    if len(seeds) == 1:
        return ["--seed", str(seeds[0])]
    return ["--seeds", ",".join(map(str, seeds))]


def summary_value(metric: str) -> SeedValue:
    """A seed's value of `metric` in its summary."""
    return lambda summary, _: summary.get(metric)


def mean_acc(row: Row) -> float | None:
    """A row's mean client accuracy (recorded rows carry it as `mean_acc`)."""
    if "mean_acc" in row:
        return row["mean_acc"]  # type: ignore[no-any-return]
    accs = [c["acc"] for c in row.get("clients", []) if c["acc"] is not None]
    return sum(accs) / len(accs) if accs else None


def best_mean_acc(_: dict[str, Any], rows: list[Row]) -> float | None:
    """The best round's mean client accuracy (CAFA's Table V measure)."""
    means = [m for m in map(mean_acc, rows) if m is not None]
    return max(means) if means else None


def first_round(field: str) -> SeedValue:
    """A seed's value of `field` in its first row (OCFL's clustering round)."""
    return lambda _, rows: rows[0].get(field) if rows else None


def differences(a: Mapping[int, float], b: Mapping[int, float]) -> Interval:
    """`a` minus `b` seed by seed (the seeds both have), with its interval;
    across experiments the runs of the same seed number are paired."""
    return interval([a[seed] - b[seed] for seed in sorted(a) if seed in b])


def shifted(values: Mapping[int, float], threshold: float) -> Interval:
    """The interval of `values` minus `threshold`: above 0 when the values
    are above the threshold."""
    return interval([v - threshold for v in values.values()])


# What the paper sections look their runs up in: (dataset, experiment key).
ByKey = dict[tuple[str, str], Outcome]


CHECKPOINT_EVERY = 5
"""Rounds between a run's checkpoints: a sitting stopped mid-run (the end of a
working session) loses at most this many rounds of it; `--resume` goes on from
the checkpoint to the rows of a run never stopped."""


def _checkpoint_every(exp: Experiment, dataset: str) -> int | None:
    """`CHECKPOINT_EVERY`, unless the scenario keeps no per-client rows to
    resume from (`rows = "summary"`: a run refuses checkpoints then)."""
    return CHECKPOINT_EVERY if exp.resolved(dataset).rows == "full" else None


def runs_on(exp: Experiment, dataset: str, quick: bool) -> bool:
    """Whether `exp` has runs on `dataset` in this mode: --quick skips what
    has no quick rounds there, and a paper-scale-only experiment has none
    on the digits."""
    if quick and exp.quick_rounds_for(dataset) is None:
        return False
    return not (exp.paper_scale_only and exp.scenario_for(dataset) == exp.scenario)


def run_all(
    experiments: Sequence[Experiment],
    quick: bool,
    out: Path,
    only: Sequence[str],
    datasets: Sequence[str],
    seeds: Sequence[int] = (0,),
    resume: bool = False,
    recorded: Callable[[str, Experiment], Mapping[str, set[int]]] | None = None,
    on_outcome: Callable[[Outcome], object] | None = None,
    claim: Claim | None = None,
) -> list[Outcome]:
    """Every experiment's comparison into `out/<dataset>/<key>/`; with
    `resume`, runs that finished there with the same settings are kept, runs
    stopped after a checkpoint go on from it (see `compare`), and an
    experiment's seconds are its runs' own wall time.
    `recorded(dataset, experiment)`: algorithm → the seeds of its runs kept
    elsewhere (see records.py), not run again; an experiment with all of
    them is skipped. `on_outcome` gets each experiment's outcome so far as
    soon as each of its runs has ended (a sitting records it then, not after
    every experiment or seed: a sitting may end first).
    `claim(dataset, experiment)`: held while the experiment runs, False when
    another sitting holds it (then it is skipped); its recorded runs are
    read once the claim is held, so a sitting that waited sees what the
    other one saved."""
    outcomes = []
    keys = {exp.key for exp in experiments}
    for dataset in datasets:
        for exp in experiments:
            if only and not selected(exp.key, only, keys):
                continue
            if not runs_on(exp, dataset, quick):
                continue
            with claim(dataset, exp) if claim else contextlib.nullcontext(True) as mine:
                if not mine:
                    print(
                        f"{dataset:<14} {exp.key:<22} run by another sitting; skipped",
                        flush=True,
                    )
                    continue
                kept = recorded(dataset, exp) if recorded else {}
                todo = [
                    (seed, name)
                    for seed in seeds
                    for name in exp.algorithms_for(quick)
                    if seed not in kept.get(safe_name(name), set())
                ]
                if not todo:
                    continue
                seconds, outcome = _run_each(
                    exp, dataset, quick, out, seeds, todo, resume, on_outcome
                )
                outcomes.append(outcome)
            print(f"{dataset:<14} {exp.key:<22} {seconds:7.1f} s", flush=True)
    return outcomes


def _run_each(
    exp: Experiment,
    dataset: str,
    quick: bool,
    out: Path,
    seeds: Sequence[int],
    todo: Sequence[tuple[int, str]],
    resume: bool,
    on_outcome: Callable[[Outcome], object] | None,
) -> tuple[float, Outcome]:
    """Each (seed, algorithm) of `todo` as a comparison of its own into
    `out/<dataset>/<key>/`, seed by seed; `on_outcome` gets the outcome so
    far after every run: a run of hours is recorded when it ends, not when
    its seed's last algorithm does (a working session may end first, and
    the machine with it). The runs are those one comparison of every
    algorithm would make: its `--set`s are resolved against all of them."""
    algorithms = list(exp.algorithms_for(quick))
    base = with_overrides(
        load_scenario(exp.scenario_for(dataset)),
        exp.overrides(dataset),
        algorithms=algorithms,
        rounds=exp.quick_rounds_for(dataset) if quick else None,
        algorithm=algorithms[0],
    )
    folder = out / dataset / exp.key
    runs: dict[str, dict[int, RunResult]] = {}
    start = time.perf_counter()
    for n, (seed, name) in enumerate(todo):
        result = compare(
            base,
            [name],
            out=folder,
            # A rerun replaces its own results: the first run empties the folder.
            overwrite=not resume and n == 0,
            resume=resume or n > 0,
            # Seed 0 alone is a one-seed comparison (no --seeds in its command).
            seeds=None if list(seeds) == [0] else [seed],
            checkpoint_every=_checkpoint_every(exp, dataset),
        )
        for algorithm, by_seed in result.by_seed.items():
            runs.setdefault(algorithm, {}).update(by_seed)
        so_far = CompareResult(folder, runs)
        seconds = time.perf_counter() - start
        if resume:  # the runs kept took their time in an earlier sitting
            seconds = wall_seconds(so_far.seed_summaries)
        outcome = _outcome(exp, dataset, seconds, so_far, folder, quick)
        if on_outcome is not None:  # recorded before the claim is let go
            on_outcome(outcome)
    return seconds, outcome


def wall_seconds(seed_summaries: Mapping[str, Mapping[int, Any]]) -> float:
    """The runs' own wall time, summed exactly (any order, the same float)."""
    return math.fsum(
        s["wall_s"] for by_seed in seed_summaries.values() for s in by_seed.values()
    )


def selected(key: str, only: Sequence[str], keys: set[str]) -> bool:
    """Whether `--only` picks the experiment `key`: an entry that names an
    experiment picks that one alone (`dcfl-table1`, not `dcfl-table1-nodp`
    too), any other entry is a prefix (`dcfl` picks every DCFL experiment)."""
    return any(key == o if o in keys else key.startswith(o) for o in only)


def _outcome(
    exp: Experiment,
    dataset: str,
    seconds: float,
    result: CompareResult,
    folder: Path,
    quick: bool,
) -> Outcome:
    rows = {
        name: {seed: run.rows for seed, run in runs.items()}
        for name, runs in result.by_seed.items()
    }
    return make_outcome(
        exp,
        dataset,
        seconds,
        result.seed_summaries,
        rows,
        folder,
        quick,
        measured_on(rows),
    )


def measured_on(seed_rows: Mapping[str, Mapping[int, list[Row]]]) -> str:
    """What the runs' accuracies were measured on, read from their rows: a
    client scored on a test set reports its hold-out's as `val_acc` beside.
    Runs of both kinds in one experiment (--resume keeping runs of older
    code) are refused."""
    kinds = {
        TEST_SETS
        if any("val_acc" in c for row in rows for c in row.get("clients", ()))
        else HOLD_OUT
        for by_seed in seed_rows.values()
        for rows in by_seed.values()
    }
    if len(kinds) > 1:
        raise ValueError(
            "runs scored on test sets and runs scored on their hold-out in one"
            " experiment: rerun it without --resume"
        )
    return kinds.pop() if kinds else HOLD_OUT


def make_outcome(
    exp: Experiment,
    dataset: str,
    seconds: float,
    seed_summaries: dict[str, dict[int, dict[str, Any]]],
    seed_rows: dict[str, dict[int, list[dict[str, Any]]]],
    folder: Path,
    quick: bool,
    accuracy: str = "",
) -> Outcome:
    """An experiment's outcome from every algorithm's per-seed summaries and
    rows: the means and intervals over the seeds follow from them.
    `accuracy`: what they were measured on (default: what a run makes now)."""
    statistics = {name: seed_statistics(s) for name, s in seed_summaries.items()}
    summaries = {}
    for name, per_seed in seed_summaries.items():
        first = dict(per_seed[min(per_seed)])
        for metric, found in statistics[name].items():
            if found.mean is not None:
                first[metric] = found.mean
        summaries[name] = first
    seeds = tuple(sorted(next(iter(seed_summaries.values()))))
    return Outcome(
        exp,
        dataset,
        seconds,
        summaries,
        seed_rows,
        folder,
        quick,
        seeds,
        statistics,
        seed_summaries,
        accuracy,
    )
