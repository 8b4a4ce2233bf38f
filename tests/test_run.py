"""Whole runs through the public API: results contract, accuracy, determinism."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import clusterfed
from helpers import assert_results_contract, read_rounds, small_scenario


def test_quickstart_reaches_the_accuracy_of_a_plain_loop(tmp_path: Path) -> None:
    result = clusterfed.run("quickstart", out=tmp_path)
    assert_results_contract(tmp_path)
    summary = result.summary
    assert summary["rounds"] == 30 and summary["n_clusters_final"] == 1
    assert summary["final_mean_acc"] >= 0.85
    assert summary["rejected_messages"] == summary["failed_updates"] == 0
    assert summary["bytes_up"] > 0 and summary["sim_s"] > 0


def _accuracies(out: Path) -> list[list[float]]:
    return [[c["acc"] for c in row["clients"]] for row in read_rounds(out)]


def test_same_seed_writes_identical_per_client_accuracies(tmp_path: Path) -> None:
    scenario = small_scenario(rounds=4)
    clusterfed.run(scenario, out=tmp_path / "a")
    clusterfed.run(scenario, out=tmp_path / "b")
    clusterfed.run(scenario, out=tmp_path / "inline", workers=1)
    assert _accuracies(tmp_path / "a") == _accuracies(tmp_path / "b")
    assert _accuracies(tmp_path / "a") == _accuracies(tmp_path / "inline")


def test_another_seed_gives_other_results(tmp_path: Path) -> None:
    # Another seed splits the data, initialises the model and shuffles anew:
    # the clients hold other samples, and most accuracies differ.
    clusterfed.run(small_scenario(), out=tmp_path / "a")
    clusterfed.run(small_scenario(), out=tmp_path / "b", seed=1)
    a, b = _accuracies(tmp_path / "a"), _accuracies(tmp_path / "b")
    pairs = [
        (x, y) for ra, rb in zip(a, b, strict=True) for x, y in zip(ra, rb, strict=True)
    ]
    assert sum(x != y for x, y in pairs) > len(pairs) / 2
    config_a = json.loads((tmp_path / "a" / "config.json").read_text())
    config_b = json.loads((tmp_path / "b" / "config.json").read_text())
    assert (config_a["seed"], config_b["seed"]) == (0, 1)


def test_rows_account_for_bytes_and_simulated_time(tmp_path: Path) -> None:
    result = clusterfed.run(small_scenario(), out=tmp_path)
    rows = result.rows
    assert all(r["bytes_down"] > r["bytes_up"] > 0 for r in rows)
    assert all(r["bytes_up"] == sum(c["bytes_up"] for c in r["clients"]) for r in rows)
    times = [r["sim_time"] for r in rows]
    assert times == sorted(times) and times[0] > 0


def test_an_unknown_runtime_is_refused_before_running(tmp_path: Path) -> None:
    with pytest.raises(clusterfed.errors.ConfigError, match="known: local"):
        clusterfed.run(small_scenario(), out=tmp_path, runtime="cloud")
    assert not (tmp_path / "rounds.jsonl").exists()
