"""The results folder of a run: config.json, rounds.jsonl, summary.json, plots.

The names written here are a contract (DESIGN §8) that scripts and users read.
"""

from __future__ import annotations

import json
import math
import os
import platform
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from clusterfed.actors import RoundOutcome
from clusterfed.algorithms.diagnostics import Diagnostics
from clusterfed.errors import ConfigError

from .checkpoint import CHECKPOINT, RecorderSnapshot
from .folders import TMP, note, note_new, strangers
from .metrics import ari, purity
from .plots import plot_run
from .provenance import now
from .summary import Row as Row
from .summary import mean_std, summarize

LATE_OUTPUTS = ("trace.msgpack", "scalars.csv", "tensorboard")
"""What a run writes into its folder at times the recorder does not know in
advance (`actors.trace.TRACE_FILE`, `tracking.CSV_FILE`,
`tracking.TENSORBOARD_DIR`): listed in the folder's marker once they appear."""


@dataclass(frozen=True)
class RunResult:
    """Where a run wrote its results, its summary, and its per-round rows.

    `rounds` and `clients` give the rows as pandas DataFrames (the `pandas`
    extra): one row per round, and one row per client and round.
    """

    out: Path
    summary: dict[str, Any]
    rows: list[dict[str, Any]]

    @property
    def config(self) -> dict[str, Any]:
        """The run's config.json: scenario, algorithm as built, provenance."""
        data: dict[str, Any] = json.loads((self.out / "config.json").read_text())
        return data

    @property
    def rounds(self) -> Any:
        """One row per round: the round's scalars (no `clients` list) and the
        mean and std of the client accuracies (`mean_acc`, `std_acc`)."""
        pd = _pandas()
        table = []
        for row in self.rows:
            accs = mean_std(row)
            flat = {k: v for k, v in row.items() if k != "clients"}
            flat["mean_acc"], flat["std_acc"] = accs if accs else (None, None)
            table.append(flat)
        return pd.DataFrame(table)

    @property
    def clients(self) -> Any:
        """Long format: one row per client and round (`round` first)."""
        pd = _pandas()
        return pd.DataFrame(
            [{"round": row["round"], **c} for row in self.rows for c in row["clients"]]
        )


def _pandas() -> Any:
    try:
        import pandas
    except ImportError as exc:
        raise ImportError(
            "RunResult.rounds and .clients need pandas:"
            ' pip install "clusterfed[pandas]"'
        ) from exc
    return pandas


def load(out: str | Path) -> RunResult:
    """A results folder read back: its summary (None keys if the run has no
    summary.json yet) and its rows.

    Raises:
        ConfigError: the folder holds no run (no config.json or rounds.jsonl).
    """
    folder = Path(out)
    rounds = folder / "rounds.jsonl"
    if (folder / "comparison.json").exists() or (
        not rounds.exists() and any(folder.glob("seed*/*/rounds.jsonl"))
    ):
        # A compare folder, over seeds too (`seed<s>/<algorithm>/`), or one
        # stopped before its first seed was done.
        runs = sorted(
            p.parent.relative_to(folder).as_posix()
            for pattern in ("*/rounds.jsonl", "seed*/*/rounds.jsonl")
            for p in folder.glob(pattern)
        )
        raise ConfigError(
            f"{folder}: a compare folder; load one of its runs: {', '.join(runs)}"
        )
    if not (folder / "config.json").is_file() or not rounds.is_file():
        raise ConfigError(
            f"{folder}: not a results folder (no config.json, rounds.jsonl)"
        )
    rows = [json.loads(line) for line in rounds.read_text().splitlines() if line]
    summary_path = folder / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    return RunResult(folder, summary, rows)


class RunRecorder:
    """Writes one run's folder as the rounds come in.

    Args:
        out: the folder; created if missing, previous results in it replaced.
        config: the resolved run configuration for config.json.
        resume: a `snapshot` of the recorder of a stopped run in `out`: its
            rounds.jsonl is cut back to the rounds of the snapshot and read
            back, and config.json is kept.

    The folder's marker (`folders.claim`) lists what the run writes: the
    names known beforehand before they are written, the rest (plots, logs, a
    trace) as they appear, each round and at the end.

    Raises:
        ConfigError: with `resume`, rounds.jsonl holds less than the snapshot.
    """

    def __init__(
        self,
        out: Path,
        config: Mapping[str, Any],
        *,
        resume: RecorderSnapshot | None = None,
        detail: str = "full",
    ) -> None:
        self.out = out
        # "summary": rounds.jsonl gets each round's participants as a digest;
        # the rows kept here (summary.json, the plots) keep every client.
        self.detail = detail
        self.rows: list[Row] = []
        # The strategy's diagnostics of the last round recorded, typed (a
        # resumed run's come from its restored state: `Federation.start`).
        self.diagnostics: Diagnostics | None = None
        self._start = time.perf_counter()
        # What the user put into a stopped run's folder stays theirs.
        self._foreign = frozenset(strangers(out)) if resume is not None else frozenset()
        if resume is not None:
            self._resume(resume)
            return
        out.mkdir(parents=True, exist_ok=True)
        for stale in ("rounds.jsonl", "summary.json"):
            (out / stale).unlink(missing_ok=True)
        note(out, "config.json", "rounds.jsonl", "summary.json")
        _write_json(out / "config.json", {**config, "versions": versions()})

    def snapshot(self) -> RecorderSnapshot:
        """Where the recorder stands, for a checkpoint; rounds.jsonl is
        flushed to disk first, so the rows the snapshot counts are there."""
        # The snapshot goes into the checkpoint written next: list it first.
        note(self.out, CHECKPOINT)
        rounds = self.out / "rounds.jsonl"
        size = 0
        if rounds.exists():
            with rounds.open("rb") as stream:
                os.fsync(stream.fileno())
            size = rounds.stat().st_size
        return {
            "rounds_bytes": size,
            "n_rows": len(self.rows),
            "wall_s": time.perf_counter() - self._start,
        }

    def _resume(self, snapshot: RecorderSnapshot) -> None:
        rounds = self.out / "rounds.jsonl"
        size = int(snapshot["rounds_bytes"])
        have = rounds.stat().st_size if rounds.exists() else 0
        if have < size:
            raise ConfigError(
                f"{rounds}: {have} bytes, the checkpoint counts {size}:"
                " the rounds it holds are gone"
            )
        # Rows written after the checkpoint (and a line cut short by a kill)
        # go: the resumed run writes those rounds again.
        with rounds.open("r+b") as stream:
            stream.truncate(size)
            os.fsync(stream.fileno())
        self.rows = [json.loads(line) for line in rounds.read_text().splitlines()]
        if len(self.rows) != snapshot["n_rows"]:
            raise ConfigError(
                f"{rounds}: {len(self.rows)} rounds where the checkpoint has"
                f" {snapshot['n_rows']}"
            )
        self._start = time.perf_counter() - float(snapshot["wall_s"])

    def record(
        self,
        outcome: RoundOutcome,
        *,
        groups: Mapping[int, int],
        sim_time: float,
        events: Sequence[Any] = (),
        global_acc: float | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> Row:
        """Append the row of one round to rounds.jsonl and return it.

        `groups` is the ground-truth group of each client this round (it moves
        with drift); it scores the clustering and is never shown to algorithms.
        `sim_time` is simulated now at the round's end. `global_acc`: the
        server's one model on the dataset's test split (`GlobalTest`).
        `extra`: fields of the run's own, after `global_acc` (a backdoor's
        `backdoor_success`).
        """
        clients = [
            c.row(groups.get(c.id)) for c in sorted(outcome.clients, key=lambda c: c.id)
        ]
        assigned = [
            c for c in clients if c["cluster"] is not None and c["group"] is not None
        ]
        truth = [c["group"] for c in assigned]
        found = [c["cluster"] for c in assigned]
        row: Row = {
            "round": outcome.round,
            "sim_time": sim_time,
            "wall_time": time.perf_counter() - self._start,
            "n_clusters": outcome.n_clusters,
            "ari": ari(truth, found),
            "purity": purity(truth, found),
            "global_acc": global_acc,
            **(extra or {}),
            "bytes_up": outcome.bytes_up,
            "bytes_down": outcome.bytes_down,
            "epsilon_max": outcome.epsilon_max,
            "events": list(events),
            "planned_updates": outcome.planned_updates,
            "late_updates": outcome.late_updates,
            "failed_updates": outcome.failed_updates,
            "rejected_messages": outcome.rejected_messages,
            "rejections": outcome.rejections,
            "clients": clients,
            "strategy": outcome.strategy_record(),
        }
        self.rows.append(row)
        self.diagnostics = outcome.diagnostics
        written = row if self.detail == "full" else digest(row)
        with (self.out / "rounds.jsonl").open("a") as stream:
            stream.write(json.dumps(written, allow_nan=False) + "\n")
        note_new(self.out, LATE_OUTPUTS, ignore=self._foreign)
        return row

    def finish(
        self,
        *,
        algorithm: str,
        scenario: str,
        title: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> Row:
        """Write summary.json and the plots; return the summary.

        `extra` adds keys to the summary (e.g. `cbcc`); it never replaces one.
        """
        summary = summarize(self.rows, algorithm=algorithm, scenario=scenario)
        for key, value in (extra or {}).items():
            summary.setdefault(key, _plain(value))
        summary["wall_s"] = time.perf_counter() - self._start
        _write_json(self.out / "summary.json", summary)
        self._stamp_config(
            finished_at=now(), interrupted=bool(summary.get("interrupted"))
        )
        plot_run(
            self.out,
            self.rows,
            title or f"{scenario} · {algorithm}",
            target=summary.get("target_accuracy"),
        )
        note_new(self.out, LATE_OUTPUTS, ignore=self._foreign)
        return summary

    def _stamp_config(self, **fields: Any) -> None:
        """Add `fields` to config.json (when the run ended, and how)."""
        path = self.out / "config.json"
        try:
            config = json.loads(path.read_text())
        except (OSError, ValueError):
            return
        _write_json(path, {**config, **fields})


def digest(row: Row) -> Row:
    """`row` without its per-client detail: an empty `clients` and a
    `participants` digest (how many, trained, late, failed, and the mean and
    standard deviation of the accuracy of those not faulty)."""
    clients = row["clients"]
    accs = [c["acc"] for c in clients if c["acc"] is not None and not c.get("faulty")]
    return {
        **row,
        "clients": [],
        "participants": {
            "n": len(clients),
            "trained": sum(bool(c["trained"]) for c in clients),
            "late": sum(bool(c["late"]) for c in clients),
            "failed": sum(bool(c["failed"]) for c in clients),
            "mean_acc": float(np.mean(accs)) if accs else None,
            "std_acc": float(np.std(accs)) if accs else None,
        },
    }


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for dist in (
        "clusterfed",
        "torch",
        "numpy",
        "scikit-learn",
        "pydantic",
        "msgpack",
        "ray",
        "opacus",
    ):
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            found[dist] = "not installed"
    return found


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    # Write then rename, so a reader never sees half a file.
    tmp = path.with_name(path.name + TMP)
    tmp.write_text(
        json.dumps(data, indent=2, default=_jsonable, allow_nan=False) + "\n"
    )
    os.replace(tmp, path)


def _plain(value: Any) -> Any:
    """`value` as plain JSON values: string keys, lists, finite floats (a
    non-finite one becomes None), Python scalars for numpy ones."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset | np.ndarray):
        items = sorted(value) if isinstance(value, set | frozenset) else value
        return [_plain(v) for v in items]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    raise TypeError(f"cannot write {type(value).__name__} to JSON")
