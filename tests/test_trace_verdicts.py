"""`clusterfed trace` shows the server's verdict on each reply beside its
size, and ends quietly when its reader stops early (`| head`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from clusterfed.actors.clock import Deadline
from clusterfed.scenarios import Crash, Straggle
from clusterfed.trace_report import report
from helpers import small_scenario, traced_run


def test_the_report_shows_accepted_late_failed_and_rejected_replies(
    tmp_path: Path,
) -> None:
    # Client 1 straggles past the deadline, client 2 has crashed, and every
    # update of round 1 is over a tiny max_update_norm.
    scenario = small_scenario(
        rounds=1,
        events=[Straggle(start=0, target=1, factor=1000), Crash(start=0, target=2)],
        deadline=Deadline(seconds=5.0),
    )
    rows = traced_run(tmp_path / "a", scenario)
    assert [c["late"] for c in rows[0]["clients"]][:3] == [False, True, False]
    text = report(tmp_path / "a", rounds=[0])
    lines = {line.split(":")[0].strip(): line for line in text.splitlines()[2:]}
    assert "update_reply" in lines["client 0"] and "[accepted]" in lines["client 0"]
    assert "[late: " in lines["client 1"]
    assert "train_task" not in lines["client 2"]  # never sent: it crashed
    assert lines["client 2"].startswith("  client 2: [failed: ")

    refused = small_scenario(rounds=1, max_update_norm=1e-9)
    traced_run(tmp_path / "b", refused)
    text = report(tmp_path / "b", rounds=[0], clients=[0])
    assert "[rejected: delta norm" in text and "above max_update_norm" in text


def test_trace_into_a_pipe_closed_early_ends_quietly(tmp_path: Path) -> None:
    traced_run(tmp_path, small_scenario(rounds=2))
    process = subprocess.Popen(
        [sys.executable, "-m", "clusterfed.cli", "trace", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # the reader is gone before the first line
    err = process.stderr.read().decode()
    assert process.wait(timeout=60) == 0, err
    assert err == ""
