"""`clusterfed conformance`: our clients pass it, and a broken client fails
exactly the cases of its planted faults (tests/broken_client.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from test_network_clients import JS_CLIENT, needs_node

from clusterfed.client_conformance import CASES, check, report

ROOT = Path(__file__).resolve().parent.parent
CONNECT = ["--connect", "{address}", "--id", "{id}", "--token", "{token}"]


def failed(command: list[str]) -> dict[str, list[str]]:
    verdicts = check(command, timeout_s=10)
    print(report(verdicts))
    assert [v.case for v in verdicts] == list(CASES)
    return {v.case: v.problems for v in verdicts if not v.passed}


def test_the_reference_client_passes_every_case() -> None:
    assert failed([sys.executable, "-m", "clusterfed.cli", "client", *CONNECT]) == {}


def test_the_numpy_client_passes_every_case() -> None:
    numpy_client = str(ROOT / "examples" / "numpy_client.py")
    assert failed([sys.executable, numpy_client, *CONNECT]) == {}


@needs_node
def test_the_js_client_passes_every_case() -> None:
    assert failed(["node", str(JS_CLIENT / "client.js"), *CONNECT]) == {}


def test_a_broken_client_fails_the_cases_of_its_planted_faults() -> None:
    found = failed([sys.executable, str(ROOT / "tests" / "broken_client.py"), *CONNECT])
    assert set(found) == {
        "echoes ids",
        "keeps its sample count",
        "malformed frame",
        "newer protocol version",
    }
    assert all("evaluate_task: in_reply_to" in p for p in found["echoes ids"])
    assert found["keeps its sample count"] == [
        "update_reply: n_samples 59, it holds 60"
    ]
    assert "died after the frame (exit status 3)" in found["malformed frame"]
    assert found["newer protocol version"] == ["answered evaluate_reply, not an error"]


@pytest.mark.parametrize("words", [[], ["--"]])
def test_conformance_without_a_command_says_what_is_missing(
    words: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    from clusterfed.cli import main

    assert main(["conformance", *words]) == 2
    assert "give the client's command after --" in capsys.readouterr().err
