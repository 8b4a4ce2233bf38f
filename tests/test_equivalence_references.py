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


def test_each_reference_says_which_torch_build_and_cpu_recorded_it() -> None:
    """`check` prints this beside the machine's own when a case differs, to
    tell a new machine's rounding from a change in behaviour."""
    recorded = equivalence.recorded_environments()
    names = {f"{c}-{r}" for c in equivalence.CASES for r in equivalence.RUNTIMES}
    assert recorded.keys() == names
    for said in recorded.values():
        assert said.keys() == equivalence.environment().keys()
        assert all(said[key] for key in ("torch", "numpy", "machine"))


def test_recording_some_cases_leaves_the_others_environments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(equivalence, "HERE", tmp_path)
    monkeypatch.setattr(equivalence, "ENVIRONMENT", tmp_path / "environment.json")
    elsewhere = {**equivalence.environment(), "torch": "0.1-elsewhere"}
    equivalence.ENVIRONMENT.write_text(json.dumps({"quickstart-local": elsewhere}))
    with gzip.open(equivalence.reference_path("quickstart", "local"), "wt") as stream:
        stream.write(json.dumps({"round": 0, "loss": 0.5}) + "\n")
    loss = {"quickstart": 0.25, "fedem": 0.5}
    monkeypatch.setattr(
        equivalence, "rows_of", lambda case, *_: [{"round": 0, "loss": loss[case]}]
    )

    def main(*argv: str) -> int:
        monkeypatch.setattr(sys, "argv", ["equivalence.py", *argv])
        return equivalence.main()

    assert main("record", "--cases", "fedem", "--runtimes", "local") == 0
    recorded = equivalence.recorded_environments()
    assert recorded == {
        "quickstart-local": elsewhere,
        "fedem-local": equivalence.environment(),
    }
    capsys.readouterr()
    # quickstart's reference came from another torch: said, not blamed on the code.
    assert main("check", "--cases", "quickstart", "fedem", "--runtimes", "local") == 1
    out = capsys.readouterr().out
    assert "quickstart         local DIFFERS at round 0" in out
    assert "environment of quickstart-local:" in out
    assert "torch: the reference's '0.1-elsewhere'" in out
    assert "likely the code's" not in out
    loss["fedem"] = 0.75
    assert main("check", "--cases", "fedem", "--runtimes", "local") == 1
    assert "environment of fedem-local:\n  as this machine's" in capsys.readouterr().out
