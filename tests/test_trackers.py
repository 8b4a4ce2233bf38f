"""--log mlflow and --log wandb, offline: the config, every round's scalars and
the figures round-trip through each tracker's own files (issue 39)."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import clusterfed
from clusterfed.errors import ConfigError
from clusterfed.summary import mean_std
from clusterfed.trackers import IDS_FILE
from helpers import read_rounds, small_scenario


def mean_accs(out: Path) -> list[float]:
    return [mean_std(row)[0] for row in read_rounds(out)]  # type: ignore[index]


def mlflow_client(out: Path) -> tuple[Any, str]:
    from mlflow.tracking import MlflowClient

    ids = json.loads((out / IDS_FILE).read_text())["mlflow"]
    assert ids["uri"] == (out / "mlruns").resolve().as_uri()
    return MlflowClient(tracking_uri=ids["uri"]), ids["run_id"]


def test_mlflow_gets_the_config_every_round_and_the_figures(tmp_path: Path) -> None:
    clusterfed.run(small_scenario(rounds=3), out=tmp_path, log="mlflow")
    client, run_id = mlflow_client(tmp_path)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params["scenario.rounds"] == "3"
    assert run.data.params["scenario.train.lr"] == json.dumps(
        read_config(tmp_path)["scenario"]["train"]["lr"]
    )
    history = client.get_metric_history(run_id, "mean_acc")
    assert [m.step for m in history] == [0, 1, 2]
    assert [m.value for m in history] == pytest.approx(mean_accs(tmp_path))
    assert "ari" in run.data.metrics
    assert "epsilon_max" not in run.data.metrics  # no DP: nothing, not 0
    logged = {a.path for a in client.list_artifacts(run_id, "figures")}
    assert "figures/accuracy.png" in logged
    assert {a.path for a in client.list_artifacts(run_id)} >= {"config.json"}


def test_a_resumed_run_reports_to_the_same_mlflow_run(tmp_path: Path) -> None:
    clusterfed.run(
        small_scenario(rounds=4), out=tmp_path, log="mlflow", checkpoint_every=2
    )
    _, first = mlflow_client(tmp_path)
    (tmp_path / "summary.json").unlink()  # as if it stopped after round 2
    clusterfed.resume(tmp_path)
    client, run_id = mlflow_client(tmp_path)
    assert run_id == first
    history = client.get_metric_history(run_id, "mean_acc")
    # Rounds 2 and 3 ran again after the checkpoint, and were reported again.
    assert [m.step for m in history] == [0, 1, 2, 3, 2, 3]
    latest = {m.step: m.value for m in history}
    assert [latest[s] for s in range(4)] == pytest.approx(mean_accs(tmp_path))
    assert client.get_run(run_id).info.status == "FINISHED"
    runs = client.search_runs([client.get_run(run_id).info.experiment_id])
    assert len(runs) == 1


def test_wandb_offline_gets_the_config_every_round_and_the_figures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("WANDB_MODE", raising=False)  # offline is the default
    clusterfed.run(small_scenario(rounds=3), out=tmp_path, log="wandb")
    ids = json.loads((tmp_path / IDS_FILE).read_text())["wandb"]
    (found,) = (tmp_path / "wandb").glob(f"offline-run-*-{ids['id']}/run-*.wandb")
    records = list(wandb_records(found))
    config = next(r.run.config for r in records if r.WhichOneof("record_type") == "run")
    logged = {item.key: json.loads(item.value_json) for item in config.update}
    assert logged["scenario"] == read_config(tmp_path)["scenario"]
    history = [
        {
            item.key or "/".join(item.nested_key): json.loads(item.value_json)
            for item in r.history.item
        }
        for r in records
        if r.WhichOneof("record_type") == "history"
    ]
    rounds = [h for h in history if "mean_acc" in h]
    assert [h["round"] for h in rounds] == [0, 1, 2]
    assert [h["mean_acc"] for h in rounds] == pytest.approx(mean_accs(tmp_path))
    assert any(h.get("figures/accuracy/_type") == "image-file" for h in history)
    (exit_record,) = (r for r in records if r.WhichOneof("record_type") == "exit")
    assert exit_record.exit.exit_code == 0


def test_a_tracker_that_is_not_installed_is_named_with_its_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "mlflow" else real(name, *a),
    )
    with pytest.raises(
        ConfigError, match=r"log mlflow needs .* pip install 'clusterfed\[mlflow\]'"
    ):
        clusterfed.run(small_scenario(), out=tmp_path, log="csv,mlflow")
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def read_config(out: Path) -> dict[str, Any]:
    config: dict[str, Any] = json.loads((out / "config.json").read_text())
    return config


def wandb_records(path: Path) -> Iterator[Any]:
    """The records of an offline W&B run file. W&B reads these in Go only
    (wandb-core), so the test reads them itself: a 7-byte header, then
    LevelDB's log format (32 KiB blocks of records with a 7-byte header:
    CRC, length, type FULL/FIRST/MIDDLE/LAST), each record one protobuf
    `Record` of W&B's own schema (`wandb.proto`)."""
    from wandb.proto import wandb_internal_pb2

    raw = path.read_bytes()
    assert raw[:4] == b":W&B"
    block, position, pieces = 32768, 7, b""
    while position + 7 <= len(raw):
        if block - position % block < 7:  # a block's tail is padding
            position += block - position % block
            continue
        _, length, kind = struct.unpack("<IHB", raw[position : position + 7])
        if length == 0 and kind == 0:
            return
        position += 7
        pieces += raw[position : position + length]
        position += length
        if kind in (1, 4):  # FULL, LAST
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pieces)
            pieces = b""
            yield record


def test_overwrite_replaces_a_tracked_run_with_a_fresh_tracker_run(
    tmp_path: Path,
) -> None:
    clusterfed.run(small_scenario(rounds=2), out=tmp_path, log="mlflow,wandb")
    _, first = mlflow_client(tmp_path)
    clusterfed.run(small_scenario(rounds=2), out=tmp_path, log="mlflow", overwrite=True)
    client, second = mlflow_client(tmp_path)
    assert second != first  # a new run, not the old one taken up again
    assert not (tmp_path / "wandb").exists()
    assert len(client.search_runs([client.get_run(second).info.experiment_id])) == 1
