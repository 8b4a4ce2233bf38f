"""Same seed, same results in every runtime: bench/equivalence.py keeps a
reference of each case per runtime, and `check` compares a runtime only with
its own; so the references of the local and the Ray runtime must be the same
rows, or one of them was recorded from a run that disagreed."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import equivalence  # noqa: E402


def rows(case: str, runtime: str) -> list[dict[str, Any]]:
    with gzip.open(equivalence.reference_path(case, runtime), "rt") as stream:
        return [json.loads(line) for line in stream]


@pytest.mark.parametrize("case", sorted(equivalence.CASES))
def test_the_local_and_ray_references_are_the_same_rows(case: str) -> None:
    local = rows(case, "local")
    assert local, f"{case}: empty reference"
    assert rows(case, "ray") == local


def test_the_references_say_which_torch_build_and_cpu_recorded_them() -> None:
    """`check` prints this beside the machine's own when a case differs, to
    tell a new machine's rounding from a change in behaviour."""
    recorded = json.loads(equivalence.ENVIRONMENT.read_text())
    assert recorded.keys() == equivalence.environment().keys()
    assert all(recorded[key] for key in ("torch", "numpy", "machine"))
