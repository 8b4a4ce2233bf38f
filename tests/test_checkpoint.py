"""Checkpoints and resume: a run killed with SIGKILL and resumed writes the
rounds.jsonl of a run that was never interrupted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import clusterfed
from clusterfed.checkpoint import CHECKPOINT, read_checkpoint
from clusterfed.cli import main
from clusterfed.errors import ConfigError
from clusterfed.scenarios import Crash, Drift, Join, RotationTransform, load_scenario
from clusterfed.scenarios.events import Dropout
from clusterfed.scenarios.spec import DPSpec, Faulty
from clusterfed.scenarios.timeline import Timeline
from helpers import read_rounds, small_scenario

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


def without_wall_time(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in row.items() if k != "wall_time"} for row in rows]


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


@pytest.mark.parametrize("text", [EVENTS, PRIVATE], ids=["events", "dp"])
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
    assert not list(killed.glob("*.tmp"))

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


def test_a_checkpoint_is_written_every_n_rounds_but_not_after_the_last(
    tmp_path: Path,
) -> None:
    clusterfed.run(small_scenario(rounds=3), out=tmp_path, checkpoint_every=1)
    checkpoint = read_checkpoint(tmp_path)
    assert checkpoint.rounds_done == 2
    assert checkpoint.server["state"].models.keys() == {0}
    assert checkpoint.recorder["n_rows"] == 2
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
