"""--log csv,tensorboard: per-round scalars beside rounds.jsonl, resume-safe."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

import clusterfed
from clusterfed.errors import ConfigError
from clusterfed.summary import mean_std
from clusterfed.tracking import COLUMNS
from helpers import read_rounds, small_scenario


def read_csv(out: Path) -> list[dict[str, str]]:
    with open(out / "scalars.csv", newline="") as file:
        return list(csv.DictReader(file))


def test_the_csv_holds_each_round_s_scalars_as_rounds_jsonl_has_them(
    tmp_path: Path,
) -> None:
    clusterfed.run(small_scenario(rounds=3), out=tmp_path, log="csv")
    rows, scalars = read_rounds(tmp_path), read_csv(tmp_path)
    assert list(scalars[0]) == list(COLUMNS)
    assert [int(s["round"]) for s in scalars] == [0, 1, 2]
    for row, line in zip(rows, scalars, strict=True):
        mean, std = mean_std(row)  # type: ignore[misc]
        assert float(line["mean_acc"]) == pytest.approx(mean, rel=1e-12)
        assert float(line["std_acc"]) == pytest.approx(std, rel=1e-12)
        assert float(line["sim_time"]) == pytest.approx(row["sim_time"], rel=1e-12)
        assert int(line["n_clusters"]) == row["n_clusters"]
        assert line["epsilon_max"] == ""  # no DP: nothing, not 0


def test_a_resumed_run_s_csv_has_every_round_once(tmp_path: Path) -> None:
    clusterfed.run(
        small_scenario(rounds=4), out=tmp_path, log="csv", checkpoint_every=2
    )
    whole = read_csv(tmp_path)
    # As if it had stopped after its checkpoint at round 2.
    (tmp_path / "summary.json").unlink()
    clusterfed.resume(tmp_path)
    again = read_csv(tmp_path)
    assert [int(s["round"]) for s in again] == [0, 1, 2, 3]
    assert [s["mean_acc"] for s in again] == [s["mean_acc"] for s in whole]


def test_tensorboard_gets_the_same_scalars(tmp_path: Path) -> None:
    event_accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator"
    )
    clusterfed.run(small_scenario(rounds=3), out=tmp_path, log="csv,tensorboard")
    events = event_accumulator.EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    logged = events.Scalars("mean_acc")
    assert [e.step for e in logged] == [0, 1, 2]
    expected = [float(s["mean_acc"]) for s in read_csv(tmp_path)]
    assert [e.value for e in logged] == pytest.approx(expected, rel=1e-6)
    assert "ari" in events.Tags()["scalars"]


def test_an_unknown_log_is_refused_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="log 'wanb': not a log; known: csv"):
        clusterfed.run(small_scenario(), out=tmp_path, log="csv,wanb")
    assert not tmp_path.exists() or not any(tmp_path.iterdir())
