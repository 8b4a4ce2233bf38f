"""Experiment trackers a run reports to: MLflow and Weights & Biases.

Each gets the run's config once, every recorded round's scalars (with the
round as its step) and, when the run ends, its figures. Both work without a
server by default: MLflow into a file store in the run folder (`mlruns/`),
W&B in offline mode (`wandb/` in the run folder, `wandb sync` uploads it
later). `--mlflow-uri` (or MLflow's own MLFLOW_TRACKING_URI) names any
tracking server; WANDB_MODE, WANDB_PROJECT and the rest of W&B's variables
work as W&B documents them.

A resumed run reports to the same tracker run (its id is kept in
`trackers.json` in the run folder); rounds between the checkpoint and the
interrupt are reported again, as the resumed run records them again.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal, Protocol

from .folders import note, note_new

IDS_FILE = "trackers.json"
MLFLOW_DIR = "mlruns"
WANDB_DIR = "wandb"
EXPERIMENT = "clusterfed"

Ending = Literal["finished", "interrupted", "failed"]


class Tracker(Protocol):
    """One tracker's share of a run."""

    def write(self, step: int, scalars: Mapping[str, float]) -> None: ...

    def finish(self, figures: list[Path], ending: Ending) -> None: ...


def note_tracker_files(out: Path) -> None:
    """List what the trackers wrote in the folder's marker (`--overwrite`
    removes exactly what is listed)."""
    note_new(out, (IDS_FILE, MLFLOW_DIR, WANDB_DIR))


def open_tracker(
    kind: str, out: Path, config: Mapping[str, Any], mlflow_uri: str | None
) -> Tracker:
    """The tracker `kind` ("mlflow" or "wandb") for the run in `out`, its
    tracker run started (or taken up again, on resume)."""
    # Listed in the folder's marker before they exist: `--overwrite` then
    # replaces them with the rest of the run, even one killed at its start.
    note(out, IDS_FILE, MLFLOW_DIR if kind == "mlflow" else WANDB_DIR)
    ids = _read_ids(out)
    if kind == "mlflow":
        return MlflowTracker(out, config, mlflow_uri, ids.get("mlflow"))
    if kind == "wandb":
        return WandbTracker(out, config, ids.get("wandb"))
    raise ValueError(f"tracker {kind!r}: not a tracker")


class MlflowTracker:
    """A run of MLflow's tracking client (not its fluent API: a user's own
    active MLflow run is left alone)."""

    def __init__(
        self,
        out: Path,
        config: Mapping[str, Any],
        uri: str | None,
        known: Mapping[str, str] | None,
    ) -> None:
        from mlflow.tracking import MlflowClient

        self.out = out
        if known is not None:
            uri = known["uri"]
        elif uri is None:
            uri = os.environ.get("MLFLOW_TRACKING_URI") or _default_uri(out)
        if uri.startswith("file:"):
            # MLflow 3 keeps its file store in maintenance mode behind this
            # switch; it is the store that needs no server and no database.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            if uri == _default_uri(out) and not (out / MLFLOW_DIR).exists():
                # MLflow caches a store per URI, and a cached one does not
                # lay its folder out again after `--overwrite` removed it: a
                # new one does.
                from mlflow.store.tracking.file_store import FileStore

                FileStore(uri)  # type: ignore[no-untyped-call]  # mlflow is untyped here
        self.client = MlflowClient(tracking_uri=uri)
        if known is not None:
            self.run_id = known["run_id"]
            self.client.update_run(self.run_id, status="RUNNING")
            return
        experiment = self.client.get_experiment_by_name(EXPERIMENT)
        experiment_id = (
            experiment.experiment_id
            if experiment is not None
            else self.client.create_experiment(EXPERIMENT)
        )
        run = self.client.create_run(experiment_id, run_name=out.name)
        self.run_id = run.info.run_id
        _write_id(out, "mlflow", {"uri": uri, "run_id": self.run_id})
        from mlflow.entities import Param

        params = [Param(key, _short(value)) for key, value in _flat(config, "")]
        for start in range(0, len(params), 100):  # MLflow's batch limit
            self.client.log_batch(self.run_id, params=params[start : start + 100])
        self.client.log_dict(self.run_id, dict(config), "config.json")

    def write(self, step: int, scalars: Mapping[str, float]) -> None:
        from mlflow.entities import Metric

        now = _millis()
        self.client.log_batch(
            self.run_id,
            metrics=[Metric(k, v, now, step) for k, v in scalars.items()],
        )

    def finish(self, figures: list[Path], ending: Ending) -> None:
        for figure in figures:
            self.client.log_artifact(self.run_id, str(figure), "figures")
        status = {"finished": "FINISHED", "interrupted": "KILLED"}.get(ending, "FAILED")
        self.client.set_terminated(self.run_id, status=status)


class WandbTracker:
    """A W&B run, offline unless WANDB_MODE says otherwise; every scalar is
    plotted against the `round` metric (W&B's own step must only grow, and
    a resumed run reports some rounds again)."""

    def __init__(
        self,
        out: Path,
        config: Mapping[str, Any],
        known: Mapping[str, str] | None,
    ) -> None:
        import wandb

        self.wandb = wandb
        self.out = out
        run_id = known["id"] if known is not None else uuid.uuid4().hex[:12]
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", EXPERIMENT),
            name=out.name,
            id=run_id,
            resume="allow",
            dir=str(out),
            mode=_wandb_mode(),
            config=dict(config),
            settings=wandb.Settings(silent=True, console="off"),
            reinit="create_new",
        )
        if known is None:
            _write_id(out, "wandb", {"id": run_id})
        self.run.define_metric("round")
        self.run.define_metric("*", step_metric="round")

    def write(self, step: int, scalars: Mapping[str, float]) -> None:
        self.run.log({"round": step, **scalars})

    def finish(self, figures: list[Path], ending: Ending) -> None:
        if figures:
            self.run.log(
                {f"figures/{f.stem}": self.wandb.Image(str(f)) for f in figures}
            )
        self.run.finish(exit_code=0 if ending == "finished" else 1)
        # W&B links its newest run and its logs in wandb/ (one to its
        # service's log outside the folder); with one run per folder they say
        # nothing the run's own folder does not, and a link would make
        # `--overwrite` refuse the folder.
        for entry in (self.out / WANDB_DIR).rglob("*"):
            if entry.is_symlink():
                entry.unlink()


def _default_uri(out: Path) -> str:
    return (out / MLFLOW_DIR).resolve().as_uri()


def _wandb_mode() -> Literal["online", "offline", "disabled"]:
    mode = os.environ.get("WANDB_MODE", "offline")
    if mode == "online":
        return "online"
    if mode == "disabled":
        return "disabled"
    return "offline"


def _read_ids(out: Path) -> dict[str, dict[str, str]]:
    try:
        ids: dict[str, dict[str, str]] = json.loads((out / IDS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return ids


def _write_id(out: Path, kind: str, value: dict[str, str]) -> None:
    ids = _read_ids(out)
    ids[kind] = value
    (out / IDS_FILE).write_text(json.dumps(ids, indent=2) + "\n")


def _flat(value: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    """A nested config as `a.b.c` keys (MLflow's params are flat)."""
    if isinstance(value, Mapping):
        for key, each in value.items():
            yield from _flat(each, f"{prefix}{key}.")
    else:
        yield prefix[:-1], value


def _short(value: Any) -> str:
    # MLflow refuses a param value over 6000 characters; config.json,
    # logged whole beside the params, keeps what is cut here.
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 6000 else text[:5997] + "..."


def _millis() -> int:
    import time

    return int(time.time() * 1000)
