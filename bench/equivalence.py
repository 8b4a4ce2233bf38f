"""Behaviour unchanged: runs fixed scenarios and compares their rounds.jsonl
with references recorded before a refactoring, field by field, in both
runtimes.

    python bench/equivalence.py check             # every case, local and ray
    python bench/equivalence.py check --runtimes local --cases quickstart
    python bench/equivalence.py record            # new references (on purpose)

A reference is the run's rounds.jsonl without `wall_time` (the one field that
depends on the machine's load), gzipped in bench/equivalence/. `check` prints
the first difference of each case (round, client, field, both values) and
exits 1 if any case differs. A reference comes from one machine's torch
build and CPU: another CPU or torch version may round differently, so
`record` keeps each reference's environment beside it (environment.json,
by `CASE-RUNTIME`) and `check` prints a differing case's beside this
machine's.
"""

from __future__ import annotations

import argparse
import gzip
import json
import platform
import sys
import time
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import numpy as np
import torch

import clusterfed
from clusterfed.diff import differences

HERE = Path(__file__).resolve().parent / "equivalence"

# name → (scenario, run options)
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "quickstart": ("quickstart", {}),
    "dcfl-dynamic-dp": ("dcfl-dynamic", {"rounds": 12}),
    "dcfl-dynamic": ("dcfl-dynamic", {"rounds": 12, "overrides": ["dp=off"]}),
    "cafa-mix": ("cafa-mix", {"rounds": 10}),
    "faulty": (str(HERE / "faulty.toml"), {}),
    # Issue 36's baselines, one round each: FL+HC clusters in it, FeSEM seeds.
    "flhc": (
        "flhc-swap",
        {"rounds": 1, "overrides": ["algorithm_params.flhc.cluster_round=0"]},
    ),
    "fesem": ("fesem-rotated", {"rounds": 1}),
    # FedSoft: every client weighs both centers and trains with their pull.
    "fedsoft": ("fedsoft-rotated", {"rounds": 1}),
    # PACFL clusters the clients' data subspaces before its first round.
    "pacfl": ("pacfl-labels", {"rounds": 1}),
    # FedDrift: client 1's drift (round 5) flagged, its cluster open in round 6.
    "feddrift": ("feddrift-swap", {"rounds": 7}),
    # FedEM: every client trains all 3 components and is scored by its mixture.
    "fedem": ("fedem-dirichlet", {"rounds": 1}),
}
RUNTIMES = ("local", "ray")
ENVIRONMENT = HERE / "environment.json"
# The CPU features that pick torch's and BLAS's kernels, and so their rounding.
KERNEL_FLAGS = ("avx", "amx", "fma", "f16c")


def environment() -> dict[str, str]:
    """What the rows' last bits depend on besides the code."""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:  # not Linux
        cpuinfo = []
    flags = next(
        (line.split(":", 1)[1].split() for line in cpuinfo if line.startswith("flags")),
        [],
    )
    return {
        "torch": torch.__version__,
        "numpy": np.__version__,
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "machine": platform.machine(),
        "cpu_flags": " ".join(sorted(f for f in flags if f.startswith(KERNEL_FLAGS))),
    }


def rows_of(case: str, runtime: str, out: Path) -> list[dict[str, Any]]:
    scenario, options = CASES[case]
    result = clusterfed.run(scenario, out=out, runtime=runtime, **options)
    return [{k: v for k, v in row.items() if k != "wall_time"} for row in result.rows]


def reference_path(case: str, runtime: str) -> Path:
    return HERE / f"{case}-{runtime}.jsonl.gz"


def recorded_environments() -> dict[str, dict[str, str]]:
    """Each reference's environment, by `CASE-RUNTIME`."""
    found: dict[str, dict[str, str]] = (
        json.loads(ENVIRONMENT.read_text()) if ENVIRONMENT.exists() else {}
    )
    return found


def keep_environment(case: str, runtime: str) -> None:
    """Say that this machine recorded the reference of `case` in `runtime`;
    the other references keep theirs."""
    kept = recorded_environments() | {f"{case}-{runtime}": environment()}
    ENVIRONMENT.write_text(json.dumps(kept, indent=2, sort_keys=True) + "\n")


def environment_lines(differing: list[str]) -> list[str]:
    """How the environments of the `differing` references (`CASE-RUNTIME`)
    differ from this machine's, references of one environment together."""
    here = environment()
    recorded = recorded_environments()
    groups: dict[str, tuple[dict[str, str], list[str]]] = {}
    for name in differing:
        theirs = recorded.get(name, {})
        groups.setdefault(json.dumps(theirs, sort_keys=True), (theirs, []))[1].append(
            name
        )
    lines = []
    for theirs, names in groups.values():
        lines.append(f"environment of {', '.join(names)}:")
        lines += [
            f"  {key}: the reference's {theirs.get(key)!r}, here {here.get(key)!r}"
            for key in sorted(set(theirs) | set(here))
            if theirs.get(key) != here.get(key)
        ]
        if theirs == here:
            lines.append("  as this machine's in all it records: likely the code's")
    return lines


def _client_keys(rows: list[dict[str, Any]]) -> set[str]:
    return {k for row in rows for c in row.get("clients", []) for k in c}


def _without_client_keys(row: dict[str, Any], keys: list[str]) -> dict[str, Any]:
    clients = [
        {k: v for k, v in c.items() if k not in keys} for c in row.get("clients", [])
    ]
    return {**row, "clients": clients}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["check", "record"])
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--runtimes", nargs="+", choices=RUNTIMES, default=RUNTIMES)
    args = parser.parse_args()
    failed = []
    for runtime in args.runtimes:
        for case in args.cases:
            start = time.perf_counter()
            with TemporaryDirectory() as tmp:
                rows = rows_of(case, runtime, Path(tmp))
            took = time.perf_counter() - start
            path = reference_path(case, runtime)
            if args.action == "record":
                with gzip.open(path, "wt") as stream:
                    stream.writelines(
                        json.dumps(r, sort_keys=True) + "\n" for r in rows
                    )
                keep_environment(case, runtime)
                print(
                    f"{case:18} {runtime:5} recorded {len(rows)} rounds ({took:.1f} s)"
                )
                continue
            with gzip.open(path, "rt") as stream:
                want = [json.loads(line) for line in stream]
            got = json.loads(json.dumps(rows))  # the same JSON round trip
            # A field added since the reference is new output, not changed
            # behaviour: named, then left out of the comparison.
            added = sorted(
                {k for row in got for k in row} - {k for w in want for k in w}
            )
            if added:
                print(f"{case:18} {runtime:5} new fields, not compared: {added}")
                got = [{k: v for k, v in row.items() if k not in added} for row in got]
            # The same for a client's row (e.g. `faulty`).
            added_client = sorted(_client_keys(got) - _client_keys(want))
            if added_client:
                print(
                    f"{case:18} {runtime:5} new client fields, not compared:"
                    f" {added_client}"
                )
                got = [_without_client_keys(row, added_client) for row in got]
            found = []
            for r, (a, b) in enumerate(zip(want, got, strict=False)):
                found = [(f"round {r}{w}", x, y) for w, x, y in differences(a, b)]
                if found:
                    break
            if not found and len(want) != len(got):
                found = [("rounds", len(want), len(got))]
            if found:
                failed.append(f"{case}-{runtime}")
                where, a, b = found[0]
                print(
                    f"{case:18} {runtime:5} DIFFERS at {where}: reference {a!r},"
                    f" now {b!r} ({len(found)} differences in that round)"
                )
            else:
                print(
                    f"{case:18} {runtime:5} identical, {len(got)} rounds ({took:.1f} s)"
                )
    if failed:
        print("\n".join(environment_lines(failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
