"""Ctrl-C: one line, the finished rounds kept with their summary and plots,
status 130, no process left behind (issue 20)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import clusterfed

TESTS = Path(__file__).resolve().parent


def test_sigint_keeps_the_finished_rounds_and_exits_130(tmp_path: Path) -> None:
    out = tmp_path / "run"
    # The strategy sends SIGINT to its own process during round 1: a known
    # round, without waiting on the clock.
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
        "--checkpoint-every",
        "1",
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
        f"clusterfed: interrupted after round 1; results in {out};"
        f" resume with: clusterfed resume {out}"
    ]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rounds"] == 1 and summary["interrupted"] is True
    assert (out / "accuracy.png").exists()
    assert json.loads((out / "config.json").read_text())["interrupted"] is True
    with pytest.raises(ProcessLookupError):  # no worker is left
        os.killpg(proc.pid, 0)


def test_an_interrupted_run_can_be_resumed(tmp_path: Path) -> None:
    handler = signal.getsignal(signal.SIGINT)
    with pytest.raises(clusterfed.RunInterrupted) as stopped:
        clusterfed.run(
            "quickstart",
            algorithm="tests_plugin:InterruptAt",
            rounds=3,
            clients=4,
            workers=1,
            checkpoint_every=1,
            out=tmp_path,
        )
    assert signal.getsignal(signal.SIGINT) == handler
    assert stopped.value.rounds_done == 1 and stopped.value.checkpoint
    assert isinstance(stopped.value, KeyboardInterrupt)
    result = clusterfed.resume(tmp_path)
    assert result.summary["rounds"] == 3 and "interrupted" not in result.summary


def test_an_interrupt_before_the_first_round_says_so(tmp_path: Path) -> None:
    stopped = clusterfed.RunInterrupted(tmp_path, 0)
    assert str(stopped) == (
        f"interrupted before its first round finished; results in {tmp_path}"
    )
    assert str(clusterfed.RunInterrupted(tmp_path, 2)).startswith(
        "interrupted after round 2;"
    )
