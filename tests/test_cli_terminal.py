"""On a terminal `clusterfed run` says what it loads before the seconds of
imports (issue 39); piped, it prints nothing of the kind."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path


def test_on_a_terminal_the_first_line_says_what_is_loading(tmp_path: Path) -> None:
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "clusterfed.cli", "run", "quickstart"]
        + ["--rounds", "1", "--clients", "4", "--workers", "1"]
        + ["--out", str(tmp_path / "run")],
        stdout=follower,
        stderr=follower,
    )
    os.close(follower)
    written = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the terminal closed with the process
            break
        if not chunk:
            break
        written += chunk
    os.close(leader)
    assert proc.wait(timeout=120) == 0
    lines = written.decode().splitlines()
    assert lines[0] == "clusterfed: quickstart: loading torch and the scenario…"
    assert any(line.startswith("quickstart · fedavg: 1 rounds") for line in lines)
