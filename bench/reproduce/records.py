"""What a page needs of an experiment, kept in the repository.

Runs live in `--out` on the machine that ran them, and a paper-scale page
takes hours of runs: more than one sitting, and often more than one machine.
`save` writes the part of an outcome the page is made of to
`<records>/<dataset>/<key>.json.gz` (`<key>-quick.json.gz` for --quick):
every seed's summary, every seed's rows cut down to the fields the sections
read (and the row's mean client accuracy), each client's accuracy in the
first seed's rows (the figures') and each client's accuracy and cluster in
every seed's final row. A record grows run by run: the runs of a later
sitting join those already there, and a seed is shown once every algorithm
has its run (a run of hours is kept when it ends, not when its seed's
last run does: a working session, and the machine, may end first). `load`
gives it back as an `Outcome`, so a page can be written from experiments run
on other days, and it is the page the runs themselves give. Gzip: the
per-client accuracies of a paper-scale page are megabytes of JSON.

A record's command names its scenario, not what the scenario holds, so a
record also keeps the scenario its runs were made of (after the
experiment's overrides, without its description): a record of a scenario
edited since (a field, a kind, a default it relied on) is neither resumed
nor shown, and the next sitting replaces it; a field added to `Scenario`
since is read at its default, as `compare --resume` reads a run's
config.json. Beside the scenario the command still decides (the scenario's
name, the algorithms), but not the wording of its `--set`s: a set that
pins a value the scenario already had changes nothing the runs were made
of. The records made before the field were stamped with the
definitions of 2026-11-28, which their commands and rounds agreed with; a
record without it is judged by its command and rounds alone, and takes the
scenario of the next seeds saved into it.
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import json
import shlex
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from clusterfed.folders import safe_name
from clusterfed.scenarios import Scenario

from .runner import (
    HOLD_OUT,
    ROOT,
    Claim,
    Experiment,
    Outcome,
    accuracy_of,
    make_outcome,
    mean_acc,
    runs_on,
    wall_seconds,
)

# The row fields the sections and figures read (besides each client's id and
# accuracy); everything else in rounds.jsonl stays with the runs.
ROW_FIELDS = ("round", "ari", "purity", "n_clusters")
SUFFIX = ".json.gz"


def save(outcome: Outcome, records: Path) -> Path:
    """Write `outcome` to its record. The runs a record of the same
    experiment and settings already holds, and `outcome` did not make, stay:
    a long experiment can be run a few runs a sitting, on any machine."""
    path = _path(records, outcome.dataset, outcome.experiment.key, outcome.quick)
    path.parent.mkdir(parents=True, exist_ok=True)
    out = outcome.out
    summaries: dict[str, dict[int, Any]] = {}
    rows: dict[str, dict[int, Any]] = {}
    seconds = outcome.seconds
    earlier = _read(path) if path.exists() else None
    made_of = scenario_of(outcome.experiment, outcome.dataset)
    if earlier is not None and not _agrees(
        earlier,
        outcome.experiment,
        outcome.dataset,
        outcome.quick,
        outcome.accuracy,
        made_of,
    ):
        print(f"{path}: other settings than this run's; replaced", file=sys.stderr)
    elif earlier is not None:
        new = outcome.seed_summaries
        for name, by_seed in _by_seed(earlier["summaries"]).items():
            ran = new.get(name, {})
            summaries[name] = {s: v for s, v in by_seed.items() if s not in ran}
        for name, by_seed in _by_seed(earlier["rows"]).items():
            ran = new.get(name, {})
            rows[name] = {s: v for s, v in by_seed.items() if s not in ran}
    several_sittings = any(summaries.values())
    for name, by_seed in outcome.seed_summaries.items():
        summaries.setdefault(name, {}).update(by_seed)
    if several_sittings:
        # Their runs' own wall time, summed exactly, so that the order the
        # runs came in leaves no trace.
        seconds = wall_seconds(summaries)
    for name, by_seed in outcome.seed_rows.items():
        rows.setdefault(name, {}).update(
            {seed: compact_rows(runs) for seed, runs in by_seed.items()}
        )
    seeds = sorted({s for by_seed in summaries.values() for s in by_seed})
    # Each client's accuracy in every round of the first seed (the figures'),
    # in the final round of every seed (claims about groups of clients).
    for by_seed in rows.values():
        for seed, runs in by_seed.items():
            if seed != seeds[0]:
                for r in runs[:-1]:
                    r.pop("clients", None)
    record = {
        "key": outcome.experiment.key,
        "dataset": outcome.dataset,
        "command": outcome.experiment.command(
            outcome.quick,
            outcome.dataset,
            _whole_seeds(summaries, outcome.experiment, outcome.quick) or seeds,
        ),
        "quick": outcome.quick,
        "accuracy": outcome.accuracy,
        "scenario": made_of,
        "seconds": seconds,
        "out": str(out.relative_to(ROOT) if out.is_relative_to(ROOT) else out),
        "summaries": _sorted(summaries),
        "rows": _sorted(rows),
    }
    # mtime=0: the same record gives the same bytes, so git sees no change.
    with gzip.GzipFile(path, "wb", mtime=0) as f:
        f.write(json.dumps(record, separators=(",", ":")).encode())
    return path


def load(
    records: Path,
    experiments: Iterable[Experiment],
    datasets: Sequence[str],
    quick: bool,
) -> list[Outcome]:
    """The recorded outcomes of `experiments` on `datasets`, made in the
    same mode (--quick or not), in the order of `experiments` (pages list
    them so: batch 16, 64, 256, not the files' 16, 256, 64); a record of an
    experiment that is no longer defined, or of other rounds than its
    scenario now has, is skipped with a line on stderr."""
    known = {e.key: e for e in experiments}
    order = {key: n for n, key in enumerate(known)}
    outcomes = []
    for dataset in datasets:
        for path in sorted((records / dataset).glob(f"*{SUFFIX}")):
            record = _read(path)
            experiment = known.get(record["key"])
            if experiment is None:
                print(
                    f"{path}: no experiment {record['key']!r}; skipped", file=sys.stderr
                )
                continue
            if record["quick"] != quick:
                continue
            if _rounds(record) != planned_rounds(experiment, dataset, quick):
                # Its scenario changed since: the page leaves it out until
                # a run at the new settings replaces it.
                print(
                    f"{path}: runs of {_rounds(record)} rounds, the scenario"
                    f" now has {planned_rounds(experiment, dataset, quick)};"
                    " left out until re-run",
                    file=sys.stderr,
                )
                continue
            if not _same_scenario(record, scenario_of(experiment, dataset)):
                print(
                    f"{path}: made of another definition of scenario"
                    f" {experiment.scenario_for(dataset)!r} than today's;"
                    " left out until re-run",
                    file=sys.stderr,
                )
                continue
            summaries, rows = _by_seed(record["summaries"]), _by_seed(record["rows"])
            whole = _whole_seeds(summaries, experiment, quick)
            if not whole:
                print(
                    f"{path}: no seed has a run of every algorithm yet;"
                    " left out until one has",
                    file=sys.stderr,
                )
                continue
            seconds = record["seconds"]
            if any(set(by_seed) != set(whole) for by_seed in summaries.values()):
                # A seed some of whose runs are still to come waits for them.
                summaries = _only(summaries, whole)
                rows = _only(rows, whole)
                seconds = wall_seconds(summaries)
            outcomes.append(
                make_outcome(
                    experiment,
                    dataset,
                    seconds,
                    summaries,
                    rows,
                    ROOT / record["out"],
                    quick,
                    _accuracy(record),
                )
            )
    return sorted(
        outcomes,
        key=lambda o: (datasets.index(o.dataset), order[o.experiment.key]),
    )


def recorded(
    records: Path, quick: bool
) -> Callable[[str, Experiment], dict[str, set[int]]]:
    """`(dataset, experiment)` → algorithm → the seeds of its runs that the
    experiment's record in `records` holds, made in the same mode (--quick
    or not) with the same settings; none for a record of other settings,
    which the next `save` replaces."""

    def seeds(dataset: str, experiment: Experiment) -> dict[str, set[int]]:
        path = _path(records, dataset, experiment.key, quick)
        if not path.exists():
            return {}
        record = _read(path)
        same = _agrees(
            record,
            experiment,
            dataset,
            quick,
            accuracy_of(dataset),
            scenario_of(experiment, dataset),
        )
        if not same:
            return {}
        return {name: set(by) for name, by in _by_seed(record["summaries"]).items()}

    return seeds


def pending(
    records: Path,
    experiments: Iterable[Experiment],
    dataset: str,
    quick: bool,
    seeds: int,
) -> list[str]:
    """What a page of `seeds` seeds still lacks on `dataset`, for its
    reader: the experiments with no run recorded, and those with fewer than
    `seeds` seeds of every algorithm (with how many of their runs are in)."""
    found = recorded(records, quick)
    missing, partly = [], []
    for experiment in experiments:
        if not runs_on(experiment, dataset, quick):
            continue
        by_name = found(dataset, experiment)
        if len(_whole_seeds(by_name, experiment, quick)) >= seeds:
            continue
        names = experiment.algorithms_for(quick)
        runs = sum(
            len(by_name.get(safe_name(a), set()) & set(range(seeds))) for a in names
        )
        if runs == 0:
            missing.append(f"`{experiment.key}`")
        else:
            partly.append(f"`{experiment.key}` ({runs} of {seeds * len(names)} runs)")
    lines = []
    if missing:
        lines.append(f"Not recorded yet on {dataset}: {', '.join(missing)}.")
    if partly:
        lines.append(
            f"Recorded in part on {dataset} (a seed is shown once every algorithm"
            f" has its run): {', '.join(partly)}."
        )
    return lines


def claims(records: Path, quick: bool) -> Claim:
    """`(dataset, experiment)` → a context holding the experiment's claim
    while this sitting runs it: True when the claim is this sitting's, False
    while another sitting on the same `records` runs the experiment (two
    sittings given overlapping lists would otherwise run it twice, each
    replacing the other's seeds). The claim is an OS lock (`flock`) on
    `<key>.lock` beside the record, which the kernel drops when its process
    ends: a sitting stopped mid-run leaves nothing to clean up."""

    @contextlib.contextmanager
    def claim(dataset: str, experiment: Experiment) -> Iterator[bool]:
        path = _path(records, dataset, experiment.key, quick, ".lock")
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    return claim


def _path(
    records: Path, dataset: str, key: str, quick: bool, suffix: str = SUFFIX
) -> Path:
    # --quick's records beside the full ones, never in their place.
    return records / dataset / f"{key}{'-quick' if quick else ''}{suffix}"


def _read(path: Path) -> dict[str, Any]:
    return json.loads(gzip.decompress(path.read_bytes()))  # type: ignore[no-any-return]


def _whole_seeds(
    by_name: Mapping[str, Iterable[int]], experiment: Experiment, quick: bool
) -> list[int]:
    """The seeds of which `by_name` (algorithm → seeds, or → seed → value)
    has every algorithm of `experiment`."""
    names = [safe_name(a) for a in experiment.algorithms_for(quick)]
    return sorted(set.intersection(*(set(by_name.get(n, ())) for n in names)))


def _only(
    by_name: dict[str, dict[int, Any]], seeds: list[int]
) -> dict[str, dict[int, Any]]:
    return {
        name: {s: v for s, v in by_seed.items() if s in seeds}
        for name, by_seed in by_name.items()
    }


def _agrees(
    record: dict[str, Any],
    experiment: Experiment,
    dataset: str,
    quick: bool,
    accuracy: str,
    made_of: dict[str, Any],
) -> bool:
    """Whether `record` holds runs of `experiment` as it runs now: the same
    mode, scenario, algorithms and rounds, accuracy measured on the same
    data, and the same scenario after the overrides (`made_of`). A record that keeps
    its scenario is judged by that, not by how its `--set`s were worded:
    sets added to pin a value the scenario already had (the DP study's
    cells, when dcfl-fmnist's defaults move) leave it what it was."""
    stamped = isinstance(record.get("scenario"), dict)
    ours = (
        quick,
        _command_key(experiment.command(quick, dataset), stamped),
        accuracy,
        planned_rounds(experiment, dataset, quick),
    )
    theirs = (
        record["quick"],
        _command_key(record["command"], stamped),
        _accuracy(record),
        _rounds(record),
    )
    return ours == theirs and _same_scenario(record, made_of)


def planned_rounds(experiment: Experiment, dataset: str, quick: bool) -> int:
    """The rounds a run of `experiment` has now: its --quick rounds, else its
    built-in scenario's after the experiment's overrides. The command names
    the scenario, not what it holds, so a record of a scenario whose rounds
    changed since is told apart by this (and any other edit by the scenario
    the record keeps)."""
    rounds = experiment.quick_rounds_for(dataset)
    if quick and rounds is not None:
        return rounds
    return experiment.resolved(dataset).rounds


def scenario_of(experiment: Experiment, dataset: str) -> dict[str, Any]:
    """What `experiment`'s runs on `dataset` are made of: its built-in
    scenario after the experiment's overrides, every field but the
    description's words."""
    return _dump(experiment.resolved(dataset))


def _dump(scenario: Scenario) -> dict[str, Any]:
    return scenario.model_dump(mode="json", exclude={"description"})


def _same_scenario(record: dict[str, Any], made_of: dict[str, Any]) -> bool:
    stored = record.get("scenario")
    if stored is None:  # a record from before the field: command and rounds
        return True
    if not isinstance(stored, dict):
        return False
    # As this version reads it: a field added since gets its default (one it
    # cannot read is compared as written, and differs).
    with contextlib.suppress(ValidationError):
        stored = _dump(Scenario.model_validate({**stored, "description": ""}))
    return bool(stored == made_of)


def _rounds(record: dict[str, Any]) -> int | None:
    """The rounds every run of `record` has; None if they differ."""
    found = {
        s.get("rounds") for by in record["summaries"].values() for s in by.values()
    }
    return found.pop() if len(found) == 1 else None


def _accuracy(record: dict[str, Any]) -> str:
    # Records from before the field scored every client on its hold-out.
    return record.get("accuracy", HOLD_OUT)  # type: ignore[no-any-return]


def _command_key(command: str, without_sets: bool) -> str:
    """`command` without its seeds, and without its `--set`s where the
    record's scenario stands for what they did."""
    parts = shlex.split(command)
    dropped = ("--seeds", "--seed", "--set") if without_sets else ("--seeds", "--seed")
    kept: list[str] = []
    i = 0
    while i < len(parts):
        if parts[i] in dropped:
            i += 2
            continue
        kept.append(parts[i])
        i += 1
    return shlex.join(kept)


def _sorted(by_name: dict[str, dict[int, Any]]) -> dict[str, dict[int, Any]]:
    return {name: dict(sorted(by_seed.items())) for name, by_seed in by_name.items()}


def compact_rows(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A run's rows as a record keeps them: round, clustering, the mean and
    every client's accuracy (and, in the final round, its cluster)."""
    return [_compact(r, i == len(runs) - 1) for i, r in enumerate(runs)]


def _compact(row: dict[str, Any], final: bool) -> dict[str, Any]:
    kept = {f: row[f] for f in ROW_FIELDS if f in row}
    kept["mean_acc"] = mean_acc(row)
    # The final round's clients keep their cluster: the groups a claim about
    # clusters of clients compares (OCFL's Table 3).
    fields = ("id", "acc", "cluster") if final else ("id", "acc")
    if "clients" in row:
        kept["clients"] = [{f: c[f] for f in fields if f in c} for c in row["clients"]]
    return kept


def _by_seed(by_name: dict[str, dict[str, Any]]) -> dict[str, dict[int, Any]]:
    # JSON keys are strings; seeds are ints everywhere else.
    return {
        name: {int(seed): value for seed, value in per_seed.items()}
        for name, per_seed in by_name.items()
    }
