"""Ctrl-C: the round in flight finishes and is checkpointed (so a run without
--checkpoint-every resumes), the finished rounds kept with their summary and
plots, status 130, no process left behind (issues 20 and 39)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tests_plugin import InterruptAt

import clusterfed
from clusterfed.checkpoint import read_checkpoint
from helpers import read_rounds, without_wall_time

TESTS = Path(__file__).resolve().parent


@pytest.fixture(autouse=True)
def press_ctrl_c_again() -> None:
    InterruptAt.fired = False  # each test's run presses Ctrl-C anew


def test_sigint_finishes_the_round_checkpoints_it_and_exits_130(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    # The strategy sends SIGINT to its own process during round 1 (the
    # second): a known round, without waiting on the clock. No
    # --checkpoint-every: Ctrl-C writes the checkpoint itself.
    command = [
        sys.executable,
        "-m",
        "clusterfed.cli",
        "run",
        "quickstart",
        "--algorithm",
        "tests_plugin:InterruptAt",
        "--rounds",
        "5",
        "--clients",
        "4",
        "--workers",
        "2",
        "--out",
        str(out),
    ]
    # Its own session: the group id is its pid, and outlives no member.
    proc = subprocess.Popen(
        command,
        cwd=TESTS,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    lines = err.strip().splitlines()
    assert lines == [
        "clusterfed: Ctrl-C: stopping after round 2 finishes (a checkpoint keeps"
        " it); Ctrl-C again to stop now",
        f"clusterfed: interrupted after round 2; results in {out};"
        f" resume with: clusterfed resume {out}",
    ]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rounds"] == 2 and summary["interrupted"] is True
    assert (out / "accuracy.png").exists()
    assert json.loads((out / "config.json").read_text())["interrupted"] is True
    with pytest.raises(ProcessLookupError):  # no worker is left
        os.killpg(proc.pid, 0)


def run_four_rounds(out: Path, algorithm: str = "InterruptAt") -> clusterfed.RunResult:
    return clusterfed.run(
        "quickstart",
        algorithm=f"tests_plugin:{algorithm}",
        rounds=4,
        clients=4,
        workers=1,
        out=out,
    )


def test_an_interrupted_run_resumes_to_the_rows_of_an_uninterrupted_one(
    tmp_path: Path,
) -> None:
    handler = signal.getsignal(signal.SIGINT)
    with pytest.raises(clusterfed.RunInterrupted) as stopped:
        run_four_rounds(tmp_path / "stopped")
    assert signal.getsignal(signal.SIGINT) == handler
    assert stopped.value.rounds_done == 2 and stopped.value.checkpoint
    assert isinstance(stopped.value, KeyboardInterrupt)
    assert read_checkpoint(tmp_path / "stopped").rounds_done == 2
    result = clusterfed.resume(tmp_path / "stopped")
    assert result.summary["rounds"] == 4 and "interrupted" not in result.summary
    InterruptAt.fired = True  # the uninterrupted run: no SIGINT
    whole = run_four_rounds(tmp_path / "whole")
    assert without_wall_time(read_rounds(tmp_path / "stopped")) == without_wall_time(
        whole.rows
    )


def test_a_second_ctrl_c_stops_at_once(tmp_path: Path) -> None:
    # Two SIGINTs in round 1: the round is not waited for; no checkpoint.
    with pytest.raises(clusterfed.RunInterrupted) as stopped:
        run_four_rounds(tmp_path, "InterruptTwiceAt")
    assert stopped.value.rounds_done == 1 and not stopped.value.checkpoint


def test_an_interrupt_before_the_first_round_says_so(tmp_path: Path) -> None:
    stopped = clusterfed.RunInterrupted(tmp_path, 0)
    assert str(stopped) == (
        f"interrupted before its first round finished; results in {tmp_path}"
    )
    assert str(clusterfed.RunInterrupted(tmp_path, 2)).startswith(
        "interrupted after round 2;"
    )
