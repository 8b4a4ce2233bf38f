"""Checkpoints: everything a stopped run needs to go on where it stopped.

With `checkpoint_every = N` a run writes `checkpoint.pkl` into its results
folder after every N-th round, all gathered by `Federation.checkpoint`: the
server's state (cluster models, the assignment, the strategy's state and
random stream, the client registry, the books, the next message id) and
simulated now, the scenario engine's position (its timeline, the clients'
specs and ground-truth groups, who has crashed or straggles, its random
stream), the results recorder's (how much of rounds.jsonl is written) and
what the clients keep between rounds (each client's privacy accountant with
local DP, a faulty client's memory), from the runtime that hosts them; in
asynchronous mode the driver's versions and event queue, with the tasks in
flight (trained when they started, their replies waiting for their arrival
time). A round's client work depends only on what it receives and on those,
so the rounds after a resume are the rounds the run would have written.

The file is written to a temporary name, flushed to disk, then renamed over
the last one (`os.replace`), so a run killed at any moment leaves the
previous checkpoint or the new one, never half of one.

The checkpoint is pickled. It is the project's own file, written and read by
clusterfed on the user's machine, never a wire format (messages between
actors go through the msgpack codec, which never unpickles). Unpickling runs
code: resume only folders you trust, as you would run only scripts you trust.
"""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusterfed.errors import ConfigError

CHECKPOINT = "checkpoint.pkl"
FORMAT = 2  # bumped when the layout changes; an older checkpoint is refused


@dataclass(frozen=True)
class Checkpoint:
    """A run after `rounds_done` rounds."""

    rounds_done: int
    scenario: dict[str, Any]  # as config.json holds it; resume checks they agree
    server: dict[str, Any]
    engine: dict[str, Any]
    recorder: dict[str, Any]
    clients: dict[int, Any]  # what each client keeps between rounds
    format: int = FORMAT


def write_checkpoint(out: Path, checkpoint: Checkpoint) -> Path:
    """Write `checkpoint` into folder `out` atomically; return its path."""
    path = out / CHECKPOINT
    tmp = path.with_suffix(".pkl.tmp")
    with tmp.open("wb") as stream:
        pickle.dump(checkpoint, stream, protocol=pickle.HIGHEST_PROTOCOL)
        stream.flush()
        os.fsync(stream.fileno())
    os.replace(tmp, path)
    return path


def read_checkpoint(out: Path) -> Checkpoint:
    """The last checkpoint in folder `out`.

    Raises:
        ConfigError: there is none, or it is not one this version can read.
    """
    path = Path(out) / CHECKPOINT
    if not path.is_file():
        raise ConfigError(
            f"{out}: no {CHECKPOINT} to resume from"
            " (run with --checkpoint-every N to write checkpoints)"
        )
    try:
        with path.open("rb") as stream:
            checkpoint = pickle.load(stream)
    except Exception as exc:  # a damaged or foreign file
        raise ConfigError(f"{path}: not a readable checkpoint: {exc}") from exc
    if not isinstance(checkpoint, Checkpoint) or checkpoint.format != FORMAT:
        raise ConfigError(
            f"{path}: not a checkpoint of this clusterfed (format {FORMAT})"
        )
    return checkpoint
