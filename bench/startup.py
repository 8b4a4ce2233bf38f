"""Start-up times of the command line (issues 20 and 39): `clusterfed --help`,
`--version` and `list`; the time from `clusterfed run quickstart` to its first
line of output on a terminal (a pseudo-terminal here, where the progress bar
and the loading line are shown) and to its first recorded round, beside the
time to import torch and load the digits.

    python bench/startup.py [--repeat 5]

A benchmark, not a test: it prints medians of wall-clock seconds.
"""

from __future__ import annotations

import argparse
import os
import pty
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EXE = str(Path(sys.executable).parent / "clusterfed")


def wall(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    return time.perf_counter() - start


def to_first_round(out: Path) -> float:
    """Seconds from launching `clusterfed run quickstart` to its first row."""
    rounds = out / "rounds.jsonl"
    start = time.perf_counter()
    proc = subprocess.Popen(
        [EXE, "run", "quickstart", "--rounds", "2", "--quiet", "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    while not (rounds.exists() and rounds.read_text().count("\n") >= 1):
        time.sleep(0.005)
    seconds = time.perf_counter() - start
    proc.wait()
    return seconds


def to_first_output(out: Path) -> float:
    """Seconds from launching `clusterfed run quickstart` on a terminal to the
    first byte it writes there; the run is stopped then."""
    leader, follower = pty.openpty()
    start = time.perf_counter()
    proc = subprocess.Popen(
        [EXE, "run", "quickstart", "--rounds", "2", "--out", str(out)],
        stdout=follower,
        stderr=follower,
        start_new_session=True,
    )
    os.close(follower)
    try:
        select.select([leader], [], [], 120)
        seconds = time.perf_counter() - start
        os.read(leader, 1024)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        os.close(leader)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    load = (
        "import torch; from clusterfed.data import load_dataset; load_dataset('digits')"
    )
    cases = {
        "clusterfed --help": [EXE, "--help"],
        "clusterfed --version": [EXE, "--version"],
        "clusterfed list": [EXE, "list"],
        "python -c 'import torch'": [sys.executable, "-c", "import torch"],
        "import torch + load digits": [sys.executable, "-c", load],
    }
    for name, command in cases.items():
        times = [wall(command) for _ in range(args.repeat)]
        print(f"{name:<40} {statistics.median(times):6.2f} s")
    with tempfile.TemporaryDirectory() as tmp:
        output = [to_first_output(Path(tmp) / f"o{i}") for i in range(args.repeat)]
        first = [to_first_round(Path(tmp) / str(i)) for i in range(args.repeat)]
    print(
        f"{'command to first output (quickstart, tty)':<40}"
        f" {statistics.median(output):6.2f} s"
    )
    print(
        f"{'command to first round (quickstart)':<40} {statistics.median(first):6.2f} s"
    )


if __name__ == "__main__":
    main()
