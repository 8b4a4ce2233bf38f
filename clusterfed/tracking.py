"""Per-round scalars for experiment trackers: `scalars.csv` and TensorBoard.

rounds.jsonl stays the record of a run; these are views of it, written as
each round is recorded, so a tracker follows a run while it goes. The first
row written after a start or a resume rewrites the CSV from rounds.jsonl (a
resumed run has cut rounds.jsonl back to its checkpoint); TensorBoard is told
to purge the steps from that round on.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from clusterfed.errors import ConfigError

from .summary import Row, mean_std

LOGS = ("csv", "tensorboard")
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
    if "tensorboard" in kinds:
        try:
            import tensorboard  # noqa: F401
        except ImportError as exc:
            raise ConfigError(
                "log tensorboard needs the tensorboard package:"
                " pip install 'clusterfed[tensorboard]'"
            ) from exc
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
    """Writes each recorded round's scalars to the chosen logs in `out`."""

    def __init__(self, out: Path, kinds: Iterable[str]) -> None:
        self.out = out
        self.kinds = tuple(kinds)
        self._writer: Any = None
        self._started = False

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
        if self._writer is not None and step >= self._first_round:
            for name, value in scalars.items():
                if value is not None:
                    self._writer.add_scalar(name, value, step)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


def _rounds(out: Path) -> list[Row]:
    with open(out / "rounds.jsonl") as file:
        return [json.loads(line) for line in file if line.strip()]
