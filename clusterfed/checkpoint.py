"""Checkpoints: everything a stopped run needs to go on where it stopped.

With `checkpoint_every = N` a run writes `checkpoint.pkl` into its results
folder after every N-th round: a `FederationSnapshot` gathered by
`Federation.snapshot`, one typed snapshot per part: the
server's state (cluster models, the assignment, the strategy's state and
random stream, the client registry, the books, the next message id) and
simulated now, the scenario engine's position (its timeline, the clients'
specs and ground-truth groups, who has crashed or straggles, its random
stream), the results recorder's (how much of rounds.jsonl is written) and
what the clients keep between rounds (each client's privacy accountant with
local DP, a faulty client's memory), from the runtime that hosts them, and
a population's arrays (each registered client's last cluster and round),
and what the summary reads besides the rows (every DP plan, a leaver's too,
and the warnings said); in asynchronous mode the driver's versions and event
queue, with the tasks in flight (trained when they started, their replies
waiting for their arrival time). A round's client work depends only on what
it receives and on those, so the rounds after a resume are the rounds the
run would have written, and its summary the one it would have.

Every snapshot is a `TypedDict` (`ServerSnapshot`, `DriverSnapshot`,
`EngineSnapshot`, `RecorderSnapshot`, `ClientState`, and this one): the
server's was one already, and one style means one check for all of them (the
keys, then each owner's check of the values); the pickle holds plain dicts,
which move between processes and Ray actors as they are.

The file is written to a temporary name, flushed to disk, then renamed over
the last one (`os.replace`), so a run killed at any moment leaves the
previous checkpoint or the new one, never half of one.

The file is one header line, `clusterfed-checkpoint <format> sha256 <hex>`,
then the pickled `Checkpoint`. The SHA-256 digest covers every byte of the
pickle and is compared before anything is unpickled, so a file damaged after
it was written (a flipped bit, a truncated copy, a sync gone wrong) is
refused instead of resuming a run from a state it never had. It protects
against corruption, not against a forger: whoever can edit the file can
write a matching digest, and a pickle is code. Then, before a run resumes,
the checkpoint must agree with its folder: rounds done = the rows it counts
in rounds.jsonl (and those rows are rounds 0, 1, …) = the server's round + 1,
fewer than the scenario's rounds, every snapshot with the keys of its type
and the values the owner checks (`client_state_problem`,
`driver_snapshot_problem`; the engine and the server check theirs when they
take them back, before rounds.jsonl changes), and every cluster model finite
and no larger than a trained model gets (`MAX_WEIGHT`).

The checkpoint is the project's own file, written and read by clusterfed on
the user's machine, never a wire format (messages between actors go through
the msgpack codec, which never unpickles). Unpickling runs code: resume only
folders you trust, as you would run only scripts you trust.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import pickle
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict, TypeGuard

import numpy as np
from pydantic import ValidationError

from clusterfed.actors.asynchronous import DriverSnapshot, driver_snapshot_problem
from clusterfed.actors.client import ClientState, client_state_problem
from clusterfed.actors.clock import ClockDevices, devices_problem
from clusterfed.actors.snapshots import ServerSnapshot
from clusterfed.actors.spec import PrivacyPlan
from clusterfed.errors import ConfigError
from clusterfed.folders import TMP
from clusterfed.scenarios.engine import EngineSnapshot
from clusterfed.scenarios.population import (
    PopulationSnapshot,
    population_snapshot_problem,
)
from clusterfed.types import ClientId

CHECKPOINT = "checkpoint.pkl"
# Bumped when the layout changes; a checkpoint of another format is refused.
# 4: typed snapshots, the run's parts side by side in `federation`.
# 5: the server's snapshot holds client-level DP's books (`client_dp`).
# 6: a population's arrays (`population`; None for a run without one).
# 7: the strategy state keeps each cluster's centre (`ServerState.centres`).
# 8: what the summary reads besides the rows (`summary`: DP plans, warnings).
FORMAT = 8
MAGIC = b"clusterfed-checkpoint"
# Inputs live in [0, 1] and runs train with small learning rates: trained
# weights stay within a few units. A weight past a million is damage (or a
# run that diverged), and resuming it only turns every evaluation into NaN.
MAX_WEIGHT = 1e6


class RecorderSnapshot(TypedDict):
    """Where the results recorder stands (`RunRecorder.snapshot`)."""

    rounds_bytes: int  # of rounds.jsonl, flushed to disk
    n_rows: int
    wall_s: float  # spent before the checkpoint, for the summary


class SummarySnapshot(TypedDict):
    """What summary.json reads besides the rows, said before the checkpoint
    (`Federation.snapshot`): a resumed run's summary is then the one of the
    run never stopped, though its leavers do not join again."""

    privacy: dict[ClientId, dict[str, Any]]  # each DP plan as it joined (dumped)
    warnings: list[str]  # said so far
    punctual_stragglers: list[ClientId]  # warned of once already


class FederationSnapshot(TypedDict):
    """A run between two rounds, every part of it (`Federation.snapshot`)."""

    server: ServerSnapshot
    sim_now: float
    devices: ClockDevices  # every client's device and straggler slowdown
    driver: DriverSnapshot | None  # None: a synchronous run
    engine: EngineSnapshot
    recorder: RecorderSnapshot
    clients: dict[ClientId, ClientState]  # a client that keeps nothing is left out
    population: PopulationSnapshot | None  # None: a run without a population
    summary: SummarySnapshot


@dataclass(frozen=True)
class Checkpoint:
    """A run after `rounds_done` rounds."""

    rounds_done: int
    scenario: dict[str, Any]  # as config.json holds it; resume checks they agree
    federation: FederationSnapshot
    format: int = FORMAT


def _header(payload: bytes) -> bytes:
    digest = hashlib.sha256(payload).hexdigest()
    return MAGIC + f" {FORMAT} sha256 {digest}\n".encode("ascii")


def write_checkpoint(out: Path, checkpoint: Checkpoint) -> Path:
    """Write `checkpoint` into folder `out` atomically; return its path."""
    path = out / CHECKPOINT
    tmp = path.with_name(path.name + TMP)
    payload = pickle.dumps(checkpoint, protocol=pickle.HIGHEST_PROTOCOL)
    with tmp.open("wb") as stream:
        stream.write(_header(payload))
        stream.write(payload)
        stream.flush()
        os.fsync(stream.fileno())
    os.replace(tmp, path)
    return path


def read_checkpoint(out: Path) -> Checkpoint:
    """The last checkpoint in folder `out`, intact and consistent with the
    folder's rounds.jsonl.

    Raises:
        ConfigError: there is none, it is not one this version can read, its
            bytes are not the ones written (checksum), or it disagrees with
            itself or with rounds.jsonl; the message names the problem.
    """
    folder = Path(out)
    path = folder / CHECKPOINT
    if not path.is_file():
        raise ConfigError(
            f"{out}: no {CHECKPOINT} to resume from"
            " (run with --checkpoint-every N to write checkpoints)"
        )
    checkpoint = _unpickle(path, _intact_payload(path))
    problem = inconsistency(checkpoint, folder)
    if problem is not None:
        raise ConfigError(f"{path}: checkpoint refused: {problem}")
    return checkpoint


def _intact_payload(path: Path) -> bytes:
    """The pickle in `path`, once its header and digest say it is the one
    written."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: not a readable checkpoint: {exc}") from exc
    header, newline, payload = data.partition(b"\n")
    if not newline or not header.startswith(MAGIC + b" "):
        raise ConfigError(
            f"{path}: not a checkpoint of this clusterfed (format {FORMAT})"
        )
    if header != _header(payload).rstrip(b"\n"):
        found = header.split(b" ")[1:2]
        if found != [str(FORMAT).encode()]:
            raise ConfigError(f"{path}: {_other_format(found)}")
        raise ConfigError(
            f"{path}: checksum mismatch: the file changed after it was written"
            " (damaged); it is not resumed"
        )
    return payload


def _other_format(found: list[bytes]) -> str:
    """What to say of a checkpoint whose header names another format."""
    named = found[0].decode("ascii", "replace") if found else ""
    if not named.isdigit() or len(named) > 6:
        return f"not a checkpoint of this clusterfed (format {FORMAT})"
    return (
        f"not a checkpoint of this clusterfed (format {FORMAT}): it was written"
        f" in format {named} by another version; resume it with that version,"
        " or run the scenario again"
    )


def _unpickle(path: Path, payload: bytes) -> Checkpoint:
    try:
        checkpoint = pickle.loads(payload)
    except Exception as exc:  # a file of another version, whatever it raises
        raise ConfigError(f"{path}: not a readable checkpoint: {exc}") from exc
    if not isinstance(checkpoint, Checkpoint) or checkpoint.format != FORMAT:
        raise ConfigError(
            f"{path}: not a checkpoint of this clusterfed (format {FORMAT})"
        )
    return checkpoint


def inconsistency(checkpoint: Checkpoint, folder: Path) -> str | None:
    """Why `checkpoint` cannot go on in `folder`, or None.

    Checked before anything in the folder changes: every snapshot has the
    keys of its type and the values its owner checks, the rounds it counts
    agree with each other and with rounds.jsonl, and its models are finite and
    of a trained model's size. The server state's types and shapes are checked
    again when the server takes it back (`check_snapshot`), the engine's when
    the engine does (`ScenarioEngine.snapshot_problem`).
    """
    done = checkpoint.rounds_done
    scenario = checkpoint.scenario if isinstance(checkpoint.scenario, Mapping) else {}
    planned = scenario.get("rounds")
    if not _count(done) or done < 1:
        return f"rounds_done is {done!r}, expected a count of at least 1"
    if _count(planned) and done >= planned:
        return (
            f"rounds_done is {done}, but the scenario runs {planned} rounds"
            " and a checkpoint is written before the last"
        )
    problem = snapshot_problem(checkpoint.federation, scenario.get("mode", "sync"))
    if problem is not None:
        return problem
    server = checkpoint.federation["server"]
    if server["round"] != done - 1:
        return (
            f"rounds_done is {done}, but the server's last round is"
            f" {server['round']!r} (expected {done - 1})"
        )
    recorder = checkpoint.federation["recorder"]
    if recorder["n_rows"] != done:
        return (
            f"rounds_done is {done}, but the recorder counts"
            f" {recorder['n_rows']!r} rows"
        )
    problem = _rows_problem(folder / "rounds.jsonl", recorder["rounds_bytes"], done)
    if problem is not None:
        return problem
    return _models_problem(server["state"])


def snapshot_problem(federation: object, mode: object = "sync") -> str | None:
    """Why `federation` is not a `FederationSnapshot` of a run in `mode`, or
    None: each part has its type's keys, and the values its owner checks."""
    if not isinstance(federation, Mapping):
        kind = type(federation).__name__
        return f"the checkpoint holds a {kind}, not a FederationSnapshot"
    problem = _keys_problem("the checkpoint", federation, FederationSnapshot)
    if problem is not None:
        return problem
    parts: list[tuple[str, object, Any]] = [
        ("the server's snapshot", federation["server"], ServerSnapshot),
        ("the engine's snapshot", federation["engine"], EngineSnapshot),
        ("the recorder's snapshot", federation["recorder"], RecorderSnapshot),
    ]
    driver = federation["driver"]
    if (driver is None) != (mode != "async"):
        taken = "sync" if driver is None else "async"
        return f"it was taken in {taken} mode, the scenario's mode is {mode}"
    if driver is not None:
        parts.append(("the driver's snapshot", driver, DriverSnapshot))
    for name, part, kind in parts:
        problem = _keys_problem(name, part, kind)
        if problem is not None:
            return problem
    if driver is not None:
        problem = driver_snapshot_problem(driver)
        if problem is not None:
            return f"the driver's snapshot: {problem}"
    sim_now = federation["sim_now"]
    if not isinstance(sim_now, float | int) or not 0 <= sim_now < math.inf:
        return f"sim_now is {sim_now!r}, expected a finite simulated time"
    devices = federation["devices"]
    problem = (
        devices_problem(devices)
        if isinstance(devices, Mapping)
        else f"are a {type(devices).__name__}"
    )
    if problem is not None:
        return f"the clock's devices: {problem}"
    population = federation["population"]
    if population is not None:
        problem = _keys_problem(
            "the population's snapshot", population, PopulationSnapshot
        ) or population_snapshot_problem(population)
        if problem is not None:
            return f"the population's snapshot: {problem}"
    wall_s = federation["recorder"]["wall_s"]
    if not isinstance(wall_s, float) or not 0 <= wall_s < math.inf:
        return f"the recorder's wall_s is {wall_s!r}, expected finite seconds"
    summary = federation["summary"]
    problem = _keys_problem(
        "the summary's snapshot", summary, SummarySnapshot
    ) or _summary_problem(summary)
    if problem is not None:
        return problem
    return _clients_problem(federation["clients"])


def _summary_problem(summary: SummarySnapshot) -> str | None:
    """Why the summary's snapshot holds values no run writes, or None."""
    privacy = summary["privacy"]
    if not isinstance(privacy, dict):
        return f"the summary's DP plans are a {type(privacy).__name__}, not a dict"
    for client, plan in privacy.items():
        if not _count(client):
            return f"a DP plan is kept under {client!r}, not a client id"
        try:
            PrivacyPlan.model_validate(plan)
        except ValidationError as exc:
            return f"client {client}'s DP plan: {exc.errors()[0]['msg']}"
    said = summary["warnings"]
    if not isinstance(said, list) or not all(isinstance(w, str) for w in said):
        return "the summary's warnings are not a list of texts"
    warned = summary["punctual_stragglers"]
    if not isinstance(warned, list) or not all(_count(c) for c in warned):
        return "the summary's warned stragglers are not a list of client ids"
    return None


def _keys_problem(name: str, part: object, kind: Any) -> str | None:
    """Why `part` is not a mapping with the keys of the TypedDict `kind`."""
    if not isinstance(part, Mapping):
        return (
            f"{name} is a {type(part).__name__}, expected a mapping ({kind.__name__})"
        )
    required: frozenset[str] = kind.__required_keys__
    known = required | kind.__optional_keys__
    missing = sorted(required - set(part))
    if missing:
        return f"{name} lacks {', '.join(missing)}"
    unknown = sorted(map(str, set(part) - known))
    if unknown:
        return f"{name} holds {', '.join(unknown)}, unknown to a {kind.__name__}"
    return None


def _clients_problem(clients: object) -> str | None:
    """Why `clients` is not one of client ids to their `ClientState`."""
    if not isinstance(clients, dict):
        return f"the clients' states are a {type(clients).__name__}, not a dict"
    for client, state in clients.items():
        if not _count(client):
            return f"a client's state is kept under {client!r}, not a client id"
        problem = client_state_problem(state)
        if problem is not None:
            return f"client {client}'s state {problem}"
    return None


def _rows_problem(rounds: Path, size: object, done: int) -> str | None:
    """Why the first `size` bytes of rounds.jsonl are not rounds 0..done-1."""
    if not _count(size):
        return f"the recorder's rounds_bytes is {size!r}, expected a byte count"
    try:
        with rounds.open("rb") as stream:
            head = stream.read(size)
    except OSError as exc:
        return f"{rounds.name} cannot be read: {exc}"
    if len(head) < size:
        return (
            f"{rounds.name} holds {len(head)} bytes, the checkpoint counts {size}:"
            " rounds it holds are gone"
        )
    lines = head.splitlines()
    if len(lines) != done or (head and not head.endswith(b"\n")):
        return (
            f"rounds_done is {done}, but the first {size} bytes of"
            f" {rounds.name} hold {len(lines)} rows"
        )
    for index, line in enumerate(lines):
        try:
            row = json.loads(line)
        except ValueError:
            return f"row {index} of {rounds.name} is not JSON"
        found = row.get("round") if isinstance(row, dict) else None
        if found != index:
            return f"row {index} of {rounds.name} is round {found!r}, expected {index}"
    return None


def _models_problem(state: object) -> str | None:
    """Why the cluster models cannot be trained on: NaN, Inf or a weight past
    `MAX_WEIGHT`. Models that are no float vectors are left to the server's
    own check, which names them."""
    models = getattr(state, "models", None)
    if not isinstance(models, Mapping):
        return None
    for cluster, model in models.items():
        if not isinstance(model, np.ndarray) or model.size == 0:
            continue
        if not np.isfinite(model).all():
            return f"cluster {cluster}'s model holds NaN or Inf"
        largest = float(np.abs(model).max())
        if largest > MAX_WEIGHT:
            return (
                f"cluster {cluster}'s model holds a weight of {largest:.3g},"
                f" beyond ±{MAX_WEIGHT:g}: no trained model gets there"
                " (the file was edited, or the run diverged)"
            )
    return None


def _count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
