"""Per-round scalars for experiment trackers: `scalars.csv`, TensorBoard,
MLflow and W&B (`trackers.py`).

rounds.jsonl stays the record of a run; these are views of it, written as
each round is recorded, so a tracker follows a run while it goes. The first
row written after a start or a resume rewrites the CSV from rounds.jsonl (a
resumed run has cut rounds.jsonl back to its checkpoint); TensorBoard is told
to purge the steps from that round on.
"""

from __future__ import annotations

import csv
import importlib.util
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from clusterfed.errors import ConfigError

from .summary import Row, mean_std
from .trackers import Ending, Tracker, note_tracker_files, open_tracker

LOGS = ("csv", "tensorboard", "mlflow", "wandb")
# The package each optional log needs, and the extra that installs it.
_NEEDS = {
    "tensorboard": ("tensorboard", "tensorboard"),
    "mlflow": ("mlflow", "mlflow"),
    "wandb": ("wandb", "wandb"),
}
CSV_FILE = "scalars.csv"
TENSORBOARD_DIR = "tensorboard"

# Row fields that are scalars as they stand.
_FIELDS = (
    "sim_time",
    "wall_time",
    "n_clusters",
    "ari",
    "purity",
    "global_acc",
    "epsilon_max",
    "late_updates",
    "failed_updates",
    "rejected_messages",
    "bytes_up",
    "bytes_down",
)
COLUMNS = ("round", "mean_acc", "std_acc", *_FIELDS)


def parse_logs(text: str | Sequence[str] | None) -> tuple[str, ...]:
    """`"csv,tensorboard"` (or a list of names) as checked log kinds."""
    if text is None:
        return ()
    names = text.split(",") if isinstance(text, str) else list(text)
    kinds = tuple(dict.fromkeys(n.strip() for n in names if n.strip()))
    unknown = [k for k in kinds if k not in LOGS]
    if unknown:
        raise ConfigError(
            f"log {', '.join(map(repr, unknown))}: not a log; known: {', '.join(LOGS)}"
        )
    for kind in kinds:
        if kind not in _NEEDS:
            continue
        package, extra = _NEEDS[kind]
        if importlib.util.find_spec(package) is None:
            raise ConfigError(
                f"log {kind} needs the {package} package:"
                f" pip install 'clusterfed[{extra}]'"
            )
    return kinds


def round_scalars(row: Mapping[str, Any]) -> dict[str, float | None]:
    """A row's scalars: the clients' mean and std accuracy, and the row's own
    numeric fields (None where the run has none, e.g. ARI without groups)."""
    spread = mean_std(dict(row))
    scalars: dict[str, float | None] = {
        "mean_acc": spread[0] if spread else None,
        "std_acc": spread[1] if spread else None,
    }
    for name in _FIELDS:
        value = row.get(name)
        scalars[name] = value if isinstance(value, (int, float)) else None
    return scalars


class ScalarLog:
    """Writes each recorded round's scalars to the chosen logs in `out`;
    trackers (MLflow, W&B) also get the run's `config` and, at `close`, its
    figures."""

    def __init__(
        self,
        out: Path,
        kinds: Iterable[str],
        *,
        config: Mapping[str, Any] | None = None,
        mlflow_uri: str | None = None,
    ) -> None:
        self.out = out
        self.kinds = tuple(kinds)
        self.config = dict(config or {})
        self._writer: Any = None
        self._started = False
        # Started before the first round, so that a tracker that cannot
        # start (a wrong URI) stops the run before it has run anything.
        self._trackers: list[Tracker] = [
            open_tracker(kind, out, self.config, mlflow_uri)
            for kind in self.kinds
            if kind in ("mlflow", "wandb")
        ]

    def __call__(self, row: Row) -> None:
        if not self._started:
            self._start(int(row["round"]))
            rows = _rounds(self.out)  # this row included
        else:
            rows = [row]
        for each in rows:
            self._write(each)

    def _start(self, first_round: int) -> None:
        self._started = True
        if "csv" in self.kinds:
            with open(self.out / CSV_FILE, "w", newline="") as file:
                csv.writer(file).writerow(COLUMNS)
        if "tensorboard" in self.kinds:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(
                str(self.out / TENSORBOARD_DIR), purge_step=first_round
            )
        self._first_round = first_round

    def _write(self, row: Mapping[str, Any]) -> None:
        scalars = round_scalars(row)
        step = int(row["round"])
        if "csv" in self.kinds:
            with open(self.out / CSV_FILE, "a", newline="") as file:
                csv.writer(file).writerow(
                    [
                        step,
                        *(
                            "" if scalars[c] is None else scalars[c]
                            for c in COLUMNS[1:]
                        ),
                    ]
                )
        if step < self._first_round:
            return  # a resumed run's trackers have these rounds already
        known = {k: v for k, v in scalars.items() if v is not None}
        if self._writer is not None:
            for name, value in known.items():
                self._writer.add_scalar(name, value, step)
        for tracker in self._trackers:
            tracker.write(step, known)

    def close(self, ending: Ending = "finished") -> None:
        """Close the logs; trackers get the run's figures and how it ended."""
        if self._writer is not None:
            self._writer.close()
        figures = sorted(self.out.glob("*.png"))
        for tracker in self._trackers:
            tracker.finish(figures, ending)
        if self._trackers:
            note_tracker_files(self.out)


def _rounds(out: Path) -> list[Row]:
    with open(out / "rounds.jsonl") as file:
        return [json.loads(line) for line in file if line.strip()]
