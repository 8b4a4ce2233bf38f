"""Checkpoints and resume: a run killed with SIGKILL and resumed writes the
rounds.jsonl of a run that was never interrupted."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import clusterfed
from clusterfed.actors.clock import Deadline
from clusterfed.actors.roster import Roster
from clusterfed.actors.snapshots import ServerSnapshot, check_snapshot
from clusterfed.algorithms import ClientInfo, ServerState
from clusterfed.checkpoint import (
    CHECKPOINT,
    FORMAT,
    MAGIC,
    Checkpoint,
    FederationSnapshot,
    read_checkpoint,
    write_checkpoint,
)
from clusterfed.cli import main
from clusterfed.errors import ConfigError, ScenarioWarning
from clusterfed.scenarios import Crash, Drift, Join, RotationTransform, load_scenario
from clusterfed.scenarios.events import Dropout, Leave, Straggle
from clusterfed.scenarios.spec import DPSpec, Faulty
from clusterfed.scenarios.timeline import Timeline
from clusterfed.types import ClientId, ClusterId
from helpers import read_rounds, small_scenario, without_wall_time

EVENTS = """\
name = "killed"
clients = 6
rounds = 8
seed = 3

[model]
name = "mlp"
hidden = [32]

[partition]
kind = "dirichlet"
alpha = 1.0

[transform]
kind = "rotation"
angles = [0, 90]

[[events]]
kind = "join"
start = 1
every = 3

[[events]]
kind = "drift"
start = 2
every = 3
target = "random"
to_group = "other"

[[events]]
kind = "crash"
start = 3
target = "random:2"
recover_after = 1

[[events]]
kind = "dropout"
start = 0
every = 1
target = "all"
p = 0.2
"""

PRIVATE = """\
name = "killed-dp"
clients = 6
rounds = 6
seed = 1

[model]
name = "mlp"
hidden = [32]

[dp]
epsilon = 10

[[events]]
kind = "join"
start = 3
"""


def kill_after_checkpoint(scenario: Path, out: Path, rounds_done: int) -> int:
    """Run `scenario` in a process of its own, SIGKILL the whole process group
    once a checkpoint of `rounds_done` rounds exists and the next round is in
    rounds.jsonl (so the resumed run has a row to take back); return how many
    rounds rounds.jsonl held by then."""
    command = [
        sys.executable,
        "-m",
        "clusterfed.cli",
        "run",
        str(scenario),
        "--out",
        str(out),
        "--checkpoint-every",
        "2",
        "--workers",
        "2",
        "--quiet",
    ]
    process = subprocess.Popen(
        command, start_new_session=True, stdout=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if (
                (out / CHECKPOINT).exists()
                and read_checkpoint(out).rounds_done >= rounds_done
                and _lines(out / "rounds.jsonl") > rounds_done
            ):
                break
            assert process.poll() is None, "the run ended before it was killed"
            time.sleep(0.01)
        else:
            raise AssertionError("no checkpoint came")
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    assert process.returncode == -signal.SIGKILL
    return _lines(out / "rounds.jsonl")


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


# FedEM keeps each client's mixture weights in its state: they must survive.
MIXTURE = EVENTS.replace("seed = 3\n", 'seed = 3\nalgorithm = "fedem"\n', 1)
# Client-level DP's adaptive bound and books live on the server.
CLIENT_DP = EVENTS.replace(
    "[model]",
    '[dp]\nepsilon = 8.0\nmechanism = "client"\nclipping = "adaptive"\n'
    "clip_norm = 0.5\ncount_noise = 5.0\n\n[model]",
    1,
)


@pytest.mark.parametrize(
    "text",
    [EVENTS, PRIVATE, MIXTURE, CLIENT_DP],
    ids=["events", "dp", "fedem", "client-dp"],
)
def test_a_killed_run_resumes_to_the_rounds_of_an_uninterrupted_one(
    tmp_path: Path, text: str
) -> None:
    scenario = tmp_path / "scenario.toml"
    scenario.write_text(text)
    killed = tmp_path / "killed"
    written = kill_after_checkpoint(scenario, killed, rounds_done=2)
    assert not (killed / "summary.json").exists()
    assert 3 <= written < load_scenario(scenario).rounds
    assert read_checkpoint(killed).rounds_done in (2, 4)
    assert not list(killed.glob("*.clusterfed-tmp"))

    resumed = clusterfed.resume(killed, workers=2)
    whole = clusterfed.run(scenario, out=tmp_path / "whole", workers=2)
    assert without_wall_time(read_rounds(killed)) == without_wall_time(
        read_rounds(tmp_path / "whole")
    )
    assert without_wall_time(resumed.rows) == without_wall_time(whole.rows)
    summary = json.loads((killed / "summary.json").read_text())
    summary.pop("wall_s")
    whole.summary.pop("wall_s")
    assert summary == whole.summary
    if "dp" in text:
        assert whole.summary["epsilon_max"] is not None


def test_a_resumed_run_with_faulty_clients_and_dp_matches_in_one_process(
    tmp_path: Path,
) -> None:
    # In one process (workers=1) the trainers of the first run are still
    # cached; the resumed run must use the checkpoint's books, not theirs.
    scenario = small_scenario(
        rounds=5,
        dp=DPSpec(epsilon=10),
        events=[Join(start=1, every=2), Crash(start=2, target=0, recover_after=1)],
        task_timeout_s=2.0,
        faulty=[
            Faulty(clients=1, behaviour="replay", start=3),
            Faulty(clients=2, behaviour="nan", start=1, every=2),
            Faulty(clients=3, behaviour="hang", start=4),
        ],
    )
    first = clusterfed.run(scenario, out=tmp_path, workers=1, checkpoint_every=2)
    assert read_checkpoint(tmp_path).rounds_done == 4
    # As if it had been killed while writing round 5's row:
    (tmp_path / "summary.json").unlink()
    with (tmp_path / "rounds.jsonl").open("a") as stream:
        stream.write('{"round": 5, "sim_ti')
    clusterfed.resume(tmp_path, workers=1)
    assert without_wall_time(read_rounds(tmp_path)) == without_wall_time(first.rows)
    last = first.rows[-1]
    assert any("which is over" in r for r in last["rejections"])  # the replay
    assert last["failed_updates"] == 1  # the hang


def test_a_resumed_runs_summary_keeps_its_leavers_and_warnings(
    tmp_path: Path,
) -> None:
    """Client 0 leaves, and client 2 straggles inside the deadline (a
    warning), before the checkpoint: the resumed summary still lists client
    0's DP plan and says the warning, as the run never stopped does."""
    scenario = small_scenario(
        rounds=5,
        dp=DPSpec(epsilon=10),
        deadline=Deadline(seconds=60.0),
        events=[Leave(start=1, target=0), Straggle(start=1, target=2, factor=2.0)],
    )
    with pytest.warns(ScenarioWarning, match="client 2 straggles"):
        first = clusterfed.run(scenario, out=tmp_path, workers=1, checkpoint_every=2)
    assert read_checkpoint(tmp_path).rounds_done == 4
    assert "0" in first.summary["privacy"]["clients"]
    assert_resumes_to(first, tmp_path)


def assert_resumes_to(first: clusterfed.RunResult, out: Path) -> None:
    """Its summary lost, the run in `out` resumes from its checkpoint to the
    rows and the summary of `first`, the run that never stopped."""
    (out / "summary.json").unlink()
    resumed = clusterfed.resume(out, workers=1)
    assert without_wall_time(resumed.rows) == without_wall_time(first.rows)
    first.summary.pop("wall_s")
    resumed.summary.pop("wall_s")
    assert resumed.summary == first.summary


def test_a_checkpoint_is_written_every_n_rounds_but_not_after_the_last(
    tmp_path: Path,
) -> None:
    clusterfed.run(small_scenario(rounds=3), out=tmp_path, checkpoint_every=1)
    checkpoint = read_checkpoint(tmp_path)
    assert checkpoint.rounds_done == 2
    assert checkpoint.federation["server"]["state"].models.keys() == {0}
    assert checkpoint.federation["recorder"]["n_rows"] == 2
    assert checkpoint.federation["driver"] is None
    assert json.loads((tmp_path / "config.json").read_text())["checkpoint_every"] == 1
    assert not list(tmp_path.glob("*.tmp"))


def test_resume_refuses_what_it_cannot_continue(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no run to resume"):
        clusterfed.resume(tmp_path / "nothing")
    clusterfed.run(small_scenario(rounds=2), out=tmp_path / "plain")
    with pytest.raises(ConfigError, match="finished"):
        clusterfed.resume(tmp_path / "plain")
    (tmp_path / "plain" / "summary.json").unlink()
    with pytest.raises(ConfigError, match="checkpoint-every"):
        clusterfed.resume(tmp_path / "plain")


def test_the_resume_command_exits_2_without_a_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["resume", str(tmp_path)]) == 2
    assert "no run to resume" in capsys.readouterr().err
    assert main(["run", "quickstart", "--checkpoint-every", "0"]) == 2


# -- damaged and edited checkpoints (issue 33) -----------------------------------


@pytest.fixture(scope="module")
def stopped(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Any]]:
    """A run of 5 rounds with its checkpoint after round 3, its summary gone as
    if it had been stopped there; and the rows of the whole run."""
    out = tmp_path_factory.mktemp("stopped")
    whole = clusterfed.run(
        small_scenario(rounds=5), out=out, workers=1, checkpoint_every=3
    )
    assert read_checkpoint(out).rounds_done == 3
    (out / "summary.json").unlink()
    return out, whole.rows


def _copy(stopped: tuple[Path, list[Any]], to: Path) -> Path:
    shutil.copytree(stopped[0], to)
    return to


def _refused(out: Path, match: str) -> str:
    """Resume `out`, which must be refused naming `match` in one line, with
    rounds.jsonl untouched; return the reason."""
    before = (out / "rounds.jsonl").read_bytes()
    with pytest.raises(ConfigError, match=match) as refusal:
        clusterfed.resume(out, workers=1)
    assert "\n" not in str(refusal.value)
    assert (out / "rounds.jsonl").read_bytes() == before
    return str(refusal.value)


def test_twenty_random_bit_flips_are_each_refused_or_resume_to_the_same_rounds(
    stopped: tuple[Path, list[Any]], tmp_path: Path
) -> None:
    pristine = (stopped[0] / CHECKPOINT).read_bytes()
    bits = np.random.default_rng(33).choice(len(pristine) * 8, 20, replace=False)
    refused = 0
    for i, bit in enumerate(bits.tolist()):
        out = _copy(stopped, tmp_path / f"flip{i}")
        damaged = bytearray(pristine)
        damaged[bit // 8] ^= 1 << (bit % 8)
        (out / CHECKPOINT).write_bytes(bytes(damaged))
        before = (out / "rounds.jsonl").read_bytes()
        try:
            resumed = clusterfed.resume(out, workers=1)
        except ConfigError as exc:
            refused += 1
            assert "checksum mismatch" in str(exc) or "not a checkpoint" in str(exc)
            assert (out / "rounds.jsonl").read_bytes() == before
        else:
            assert without_wall_time(resumed.rows) == without_wall_time(stopped[1])
    # The digest covers every byte, the header is compared exactly: no flip
    # gets through, not even one in the digest's own letters.
    assert refused == len(bits)


@pytest.mark.parametrize(
    ("rounds_done", "reason"),
    [
        (1, "rounds_done is 1, but the server's last round is 2"),
        (4, "rounds_done is 4, but the server's last round is 2"),
        (9, "rounds_done is 9, but the scenario runs 5 rounds"),
    ],
    ids=["down", "up", "past-the-end"],
)
def test_an_edited_rounds_done_is_refused_before_rounds_jsonl_changes(
    stopped: tuple[Path, list[Any]], tmp_path: Path, rounds_done: int, reason: str
) -> None:
    out = _copy(stopped, tmp_path / "edited")
    # Rewritten through write_checkpoint: the checksum holds, the content lies.
    edited = dataclasses.replace(read_checkpoint(out), rounds_done=rounds_done)
    write_checkpoint(out, edited)
    _refused(out, reason)


def test_a_recorder_that_disagrees_with_rounds_jsonl_is_refused(
    stopped: tuple[Path, list[Any]], tmp_path: Path
) -> None:
    out = _copy(stopped, tmp_path / "edited")
    checkpoint = read_checkpoint(out)
    # Every count edited to agree, but rounds.jsonl holds 3 rows, not 2.
    federation = checkpoint.federation
    edited: FederationSnapshot = {
        **federation,
        "recorder": {**federation["recorder"], "n_rows": 2},
        "server": {**federation["server"], "round": 1},
    }
    write_checkpoint(
        out, dataclasses.replace(checkpoint, rounds_done=2, federation=edited)
    )
    _refused(out, "hold 3 rows")


def test_a_sign_flipped_model_in_the_file_is_refused_by_the_checksum(
    stopped: tuple[Path, list[Any]], tmp_path: Path
) -> None:
    out = _copy(stopped, tmp_path / "flipped")
    model = read_checkpoint(out).federation["server"]["state"].models[0]
    data = (out / CHECKPOINT).read_bytes()
    assert data.count(model.tobytes()) == 1
    (out / CHECKPOINT).write_bytes(data.replace(model.tobytes(), (-model).tobytes()))
    _refused(out, "checksum mismatch")


def test_a_model_scaled_by_1e30_is_refused_naming_the_weight(
    stopped: tuple[Path, list[Any]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = _copy(stopped, tmp_path / "huge")
    checkpoint = read_checkpoint(out)
    federation = checkpoint.federation
    state = federation["server"]["state"]
    huge = {c: m * np.float32(1e30) for c, m in state.models.items()}
    server: ServerSnapshot = {
        **federation["server"],
        "state": state.replace(models=huge),
    }
    # finite weights and a finite norm: the server's own check lets it pass
    assert check_snapshot(server, type(state), state.models[0].size) is None
    write_checkpoint(
        out,
        dataclasses.replace(checkpoint, federation={**federation, "server": server}),
    )
    _refused(out, r"cluster 0's model holds a weight of .*e\+29, beyond ±1e\+06")
    assert main(["resume", str(out), "--workers", "1", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "beyond ±1e+06" in err


_UNPICKLED: list[str] = []


def _mark_unpickled() -> Checkpoint:
    _UNPICKLED.append("unpickled")
    raise AssertionError("a damaged checkpoint was unpickled")


class _Tripwire:
    def __reduce__(self) -> tuple[Any, tuple[()]]:
        return _mark_unpickled, ()


@pytest.mark.parametrize("with_header", [False, True], ids=["bare", "bad-digest"])
def test_a_damaged_checkpoint_is_refused_before_it_is_unpickled(
    stopped: tuple[Path, list[Any]], tmp_path: Path, with_header: bool
) -> None:
    out = _copy(stopped, tmp_path / "tripwire")
    # bare: a pickle with no header, as format 2 wrote; bad-digest: this
    # format's header over bytes it does not describe
    header = f" {FORMAT} sha256 {'0' * 64}\n".encode() if with_header else b""
    (out / CHECKPOINT).write_bytes(
        (MAGIC + header if with_header else b"") + pickle.dumps(_Tripwire())
    )
    _refused(out, "not a checkpoint of this clusterfed|checksum mismatch")
    assert _UNPICKLED == []


def test_a_rebuilt_timeline_hands_out_what_the_old_one_would_have() -> None:
    scenario = small_scenario(
        rounds=30,
        transform=RotationTransform(angles=[0, 90]),
        events=[
            Join(start=1, every=4),
            Drift(clock="time", start=2.5, every=7.0, target=0, to_group=1),
            Dropout(start=0, every=1, target="all", p=0.1),
        ],
    )
    times = [1.7 * r for r in range(30)]
    whole = Timeline(scenario.events)
    trace = [whole.due(r, times[r]) for r in range(30)]
    for cut in (3, 11):
        head = Timeline(scenario.events)
        for r in range(cut):
            head.due(r, times[r])
        rebuilt = Timeline(scenario.events, head.fired)
        assert [rebuilt.due(r, times[r]) for r in range(cut, 30)] == trace[cut:]


# -- check_snapshot, on snapshots built by hand -----------------------------------

N_WEIGHTS = 4


@dataclasses.dataclass(frozen=True)
class WiderState(ServerState):
    """Another strategy's state: a ServerState with one field more."""

    dunn: float = 0.0


def fitting_snapshot(**changes: Any) -> dict[str, Any]:
    """A snapshot that fits a run of 4 weights, at the edges of what is allowed:
    round and next id 0, a client that declared no sample and spent no ε (int 0),
    one class."""
    models = {
        ClusterId(0): np.zeros(N_WEIGHTS, np.float32),
        ClusterId(1): np.full(N_WEIGHTS, -2.5, np.float32),
    }
    snapshot: dict[str, Any] = {
        "round": 0,
        "state": ServerState(
            models=models,
            assignment={ClientId(0): ClusterId(1), ClientId(1): ClusterId(0)},
        ),
        "rng": np.random.default_rng(0),
        "roster": roster(),
        "next_id": 0,
        "n_classes": 1,
        "rejections": [],
        "client_dp": None,
    }
    return snapshot | changes


def roster(**changes: Any) -> Roster:
    """The fitting snapshot's roster, with `changes`."""
    fitting = Roster(
        members={
            ClientId(0): ClientInfo(ClientId(0), n_train=0),
            ClientId(1): ClientInfo(ClientId(1), n_train=9, joined_round=2),
        },
        epsilon={ClientId(0): 0, ClientId(1): 0.0},
    )
    return dataclasses.replace(fitting, **changes)


def with_models(**models: np.ndarray) -> ServerState:
    """The fitting snapshot's state with cluster `c<k>`'s model replaced."""
    state = fitting_snapshot()["state"]
    replaced = dict(state.models)
    replaced.update({ClusterId(int(k[1:])): m for k, m in models.items()})
    return state.replace(models=replaced)


def with_centre(centre: np.ndarray) -> ServerState:
    """The fitting snapshot's state with cluster 0's centre."""
    return fitting_snapshot()["state"].replace(centres={ClusterId(0): centre})


@pytest.mark.parametrize("n_classes", [1, 10, None])
def test_a_snapshot_at_the_edges_of_what_fits_is_taken(n_classes: int | None) -> None:
    snapshot = fitting_snapshot(n_classes=n_classes)
    assert check_snapshot(snapshot, ServerState, N_WEIGHTS) is None
    centred = {"state": with_centre(np.ones(N_WEIGHTS))}
    assert check_snapshot(snapshot | centred, ServerState, N_WEIGHTS) is None
    # another strategy's state that extends this run's type is one of it
    wider = WiderState(models=snapshot["state"].models, assignment={})
    assert check_snapshot(snapshot | {"state": wider}, ServerState, N_WEIGHTS) is None


def test_a_snapshot_missing_keys_names_them_all_in_order() -> None:
    snapshot = fitting_snapshot()
    del snapshot["rng"], snapshot["roster"]
    assert check_snapshot(snapshot, ServerState, N_WEIGHTS) == (
        "the server state lacks rng, roster"
    )


DAMAGED: dict[str, tuple[dict[str, Any], str]] = {
    "another strategy's state": (
        {"state": ServerState(models={}, assignment={})},
        # judged against WiderState below
        "the strategy state is a ServerState, this run's strategy keeps a WiderState",
    ),
    "no model": (
        {"state": ServerState(models={}, assignment={})},
        "the strategy state holds no model",
    ),
    "a float64 model": (
        {"state": with_models(c1=np.zeros(N_WEIGHTS))},
        "cluster 1's model is not a float32 vector",
    ),
    "a list for a model": (
        {"state": with_models(c1=[0.0] * N_WEIGHTS)},  # type: ignore[arg-type]
        "cluster 1's model is not a float32 vector",
    ),
    "a weight short": (
        {"state": with_models(c1=np.zeros(N_WEIGHTS - 1, np.float32))},
        "cluster 1's model has shape (3,), the run's model has 4 weights",
    ),
    "an Inf weight": (
        {"state": with_models(c1=np.array([0, 0, np.inf, 0], np.float32))},
        "cluster 1's model holds NaN or Inf",
    ),
    # every weight finite in float32, the norm (2 × 3e38) not: the next
    # forward pass would overflow
    "a norm past float32": (
        {"state": with_models(c1=np.full(N_WEIGHTS, 3e38, np.float32))},
        "cluster 1's model would not be finite",
    ),
    "a list for a registry": (
        {"roster": roster(members=[ClientInfo(ClientId(0), 0)])},
        "the client registry is not one of client ids to their ClientInfo",
    ),
    "a registry entry under another id": (
        {
            "roster": roster(
                members={0: ClientInfo(ClientId(0), 0), 1: ClientInfo(2, 9)}
            )
        },
        "the client registry is not one of client ids to their ClientInfo",
    ),
    "a negative n_train": (
        {
            "roster": roster(
                members={0: ClientInfo(ClientId(0), 0), 1: ClientInfo(1, -1)}
            )
        },
        "the client registry is not one of client ids to their ClientInfo",
    ),
    "a look-alike of ClientInfo": (
        {
            "roster": roster(
                members={
                    ClientId(0): ClientInfo(ClientId(0), 0),
                    1: types.SimpleNamespace(id=1, n_train=9, joined_round=0),
                }
            )
        },
        "the client registry is not one of client ids to their ClientInfo",
    ),
    "an assigned client not registered": (
        {"roster": roster(members={ClientId(1): ClientInfo(ClientId(1), 9)})},
        "client 0 is assigned a cluster but is not registered",
    ),
    "a cluster without a model": (
        {
            "state": ServerState(
                models={ClusterId(0): np.zeros(N_WEIGHTS, np.float32)},
                assignment={ClientId(0): ClusterId(0), ClientId(1): ClusterId(5)},
            )
        },
        "client 1 is assigned cluster 5, which has no model",
    ),
    "a legacy RandomState": (
        {"rng": np.random.RandomState(0)},
        "the strategy's random stream is not a numpy Generator",
    ),
    "a negative round": ({"round": -1}, "round is -1, expected a count"),
    "a bool round": ({"round": True}, "round is True, expected a count"),
    "a float round": ({"round": 1.5}, "round is 1.5, expected a count"),
    "a text round": ({"round": "3"}, "round is '3', expected a count"),
    "a negative next_id": ({"next_id": -1}, "next_id is -1, expected a count"),
    "a bool next_id": ({"next_id": False}, "next_id is False, expected a count"),
    "a list of ε": (
        {"roster": roster(epsilon=[0.0, 1.0])},
        "the privacy books (epsilon) hold a value that is not a finite ε",
    ),
    "an infinite ε": (
        {"roster": roster(epsilon={ClientId(0): 0.0, ClientId(1): math.inf})},
        "the privacy books (epsilon) hold a value that is not a finite ε",
    ),
    "a NaN ε": (
        {"roster": roster(epsilon={ClientId(0): math.nan})},
        "the privacy books (epsilon) hold a value that is not a finite ε",
    ),
    "a negative ε": (
        {"roster": roster(epsilon={ClientId(0): -0.5})},
        "the privacy books (epsilon) hold a value that is not a finite ε",
    ),
    "an ε written as text": (
        {"roster": roster(epsilon={ClientId(0): "0.5"})},
        "the privacy books (epsilon) hold a value that is not a finite ε",
    ),
    "a plain dict for the roster": (
        {"roster": {"members": {}}},
        "the roster is a dict, not a Roster",
    ),
    "a list of leavers": (
        {"roster": roster(departed=[ClientId(3)])},
        "the roster's departed is not a set of client ids",
    ),
    "a member that also left": (
        {"roster": roster(departed={ClientId(1)})},
        "clients [1] are both members and departed",
    ),
    "a leave mid-round": (
        {"roster": roster(leaving=[ClientId(1)])},
        "the roster holds leaves of a round that did not end",
    ),
    "a float32 centre": (
        {"state": with_centre(np.zeros(N_WEIGHTS, np.float32))},
        "cluster 0's centre is not a finite float64 vector",
    ),
    "a centre of another length": (
        {"state": with_centre(np.zeros(N_WEIGHTS + 1))},
        f"cluster 0's centre is not a vector of {N_WEIGHTS} weights",
    ),
    "a NaN centre": (
        {"state": with_centre(np.full(N_WEIGHTS, np.nan))},
        "cluster 0's centre is not a finite float64 vector",
    ),
    "no class": ({"n_classes": 0}, "n_classes is 0"),
    "a float class count": ({"n_classes": 2.0}, "n_classes is 2.0"),
    "a text class count": ({"n_classes": "10"}, "n_classes is '10'"),
    "client DP books of another shape": (
        {"client_dp": {"clip_norm": 1.0}},
        "client-level DP's books are {'clip_norm': 1.0}",
    ),
    "a negative clipping bound": (
        {"client_dp": {"clip_norm": -1.0, "rounds_done": 2}},
        "client-level DP's clipping bound is -1.0",
    ),
    "an infinite clipping bound": (
        {"client_dp": {"clip_norm": math.inf, "rounds_done": 2}},
        "client-level DP's clipping bound is inf",
    ),
    "client DP rounds as text": (
        {"client_dp": {"clip_norm": 1.0, "rounds_done": "2"}},
        "client-level DP's rounds are '2', expected a count",
    ),
}


@pytest.mark.parametrize("case", list(DAMAGED))
def test_a_damaged_snapshot_is_refused_naming_what_is_wrong(case: str) -> None:
    changes, reason = DAMAGED[case]
    state_type = WiderState if case == "another strategy's state" else ServerState
    snapshot = fitting_snapshot(**changes)
    assert check_snapshot(snapshot, state_type, N_WEIGHTS) == reason
