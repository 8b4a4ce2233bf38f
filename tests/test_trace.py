"""Traces and replay: every envelope of a run recorded, a fresh server re-driven
from the recorded replies, and the first difference reported."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from clusterfed.actors.trace import read_trace
from clusterfed.errors import ConfigError
from clusterfed.replay import replay
from clusterfed.scenarios import Drift, Join, RotationTransform, Scenario
from helpers import small_scenario, traced_run


def dcfl_with_a_join_and_a_drift() -> Scenario:
    return small_scenario(
        algorithm="dcfl",
        rounds=4,
        transform=RotationTransform(angles=[0.0, 90.0]),
        events=[Join(start=2), Drift(start=1, target=3, to_group="other")],
    )


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("traced")
    traced_run(folder, dcfl_with_a_join_and_a_drift())
    return folder


def test_a_trace_holds_every_envelope_in_order(recorded: Path) -> None:
    header, records = read_trace(recorded)
    assert header["mode"] == "full" and len(header["nonce"]) == 6
    joins = [r for r in records if r.kind == "join_request"]
    assert sorted(r.client for r in joins) == list(range(7))  # 6, then 1 joins
    assert all(r.role == "inbound" and r.dir == "up" for r in joins)
    train = [r for r in records if r.kind == "train_task"]
    updates = [r for r in records if r.kind == "update_reply"]
    assert len(train) == len(updates) > 0
    # Every reply follows its request and answers it.
    sent = {r.msg_id: i for i, r in enumerate(records) if r.role == "request"}
    for i, r in enumerate(records):
        if r.role == "reply" and r.in_reply_to is not None:
            assert sent[r.in_reply_to] < i
    messages = [r for r in records if r.role != "verdict"]
    assert all(r.data is not None and len(r.data) == r.size for r in messages)
    assert [r.round for r in records] == sorted(r.round for r in records)
    # Each update gets the server's verdict, naming the reply it judges.
    verdicts = {r.msg_id: r.outcome for r in records if r.role == "verdict"}
    assert all(verdicts[r.msg_id] == "accepted" for r in updates)


def test_a_replay_sends_the_same_requests_and_writes_the_same_rows(
    recorded: Path,
) -> None:
    report = replay(recorded)
    assert report.same, (report.request_difference, report.row_difference)
    assert report.requests > 0 and len(report.rows) == 4


def test_a_changed_aggregation_is_reported_at_the_first_differing_message(
    recorded: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from clusterfed.algorithms.dcfl import DCFL

    real = DCFL._cluster_means

    def nudged(self, *args):  # type: ignore[no-untyped-def]
        means, folds = real(self, *args)
        nudged = {
            k: (v + np.float32(1e-3)).astype(np.float32) for k, v in means.items()
        }
        return nudged, folds

    monkeypatch.setattr(DCFL, "_cluster_means", nudged)
    report = replay(recorded)
    assert not report.same
    difference = report.request_difference
    assert difference is not None
    # The first aggregation ends round 0's training: the first request to
    # differ is round 0's evaluation, in the model's weights it carries.
    assert difference.where == (
        "round 0, client 0, evaluate_task.payload.model.weights.sha256"
    )
    assert difference.recorded != difference.replayed
    assert report.row_difference is not None


def test_headers_only_traces_leave_out_the_bytes_and_cannot_be_replayed(
    tmp_path: Path,
) -> None:
    traced_run(tmp_path, small_scenario(rounds=1), mode="headers")
    header, records = read_trace(tmp_path)
    assert header["mode"] == "headers"
    messages = [r for r in records if r.role != "verdict"]
    assert messages and all(r.data is None and r.size > 0 for r in messages)
    with pytest.raises(ConfigError, match="headers only"):
        replay(tmp_path)


def test_the_command_line_records_summarizes_and_replays_a_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from clusterfed.cli import main

    out = tmp_path / "run"
    args = ["run", "quickstart", "--rounds", "2", "--clients", "4", "--quiet"]
    assert main([*args, "--workers", "1", "--trace", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["trace", str(out), "--client", "2", "--kind", "train_task"]) == 0
    text = capsys.readouterr().out
    assert "round 0" in text and "round 1" in text
    assert "client 2: train_task" in text and "→ update_reply" in text
    assert "client 1" not in text
    assert main(["trace", str(out), "--json", "--round", "0"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert records and {r["round"] for r in records} == {0}
    assert {r["client"] for r in records} == {0, 1, 2, 3}
    assert main(["replay", str(out)]) == 0
    assert "the same requests" in capsys.readouterr().out
    schema = tmp_path / "schema.json"
    assert main(["schema", "--out", str(schema)]) == 0
    assert "update_reply" in json.loads(schema.read_text())["x-message-kinds"]
    assert main(["trace", str(tmp_path)]) == 2  # no trace there
