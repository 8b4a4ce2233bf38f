"""Results over simulated time: accuracy against sim time in the run's plots
and in `clusterfed plot`, time_to_accuracy in compare's tables."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import clusterfed
from clusterfed import plots, plots_runs
from clusterfed.tables import seeds_table, table
from helpers import small_scenario


def _summary(acc: float, reached: float | None) -> dict[str, Any]:
    return {
        "final_mean_acc": acc,
        "final_std_acc": 0.05,
        "avg_mean_acc": acc,
        "avg_std_acc": 0.05,
        "n_clusters_final": 1,
        "ari_final": None,
        "purity_final": None,
        "rounds_to_purity90": None,
        "target_accuracy": 0.8,
        "time_to_accuracy": reached,
    }


def test_the_compare_table_shows_time_to_accuracy() -> None:
    text = table({"fedavg": _summary(0.9, 12.3456), "fedasync": _summary(0.7, None)})
    lines = text.splitlines()
    assert "t→acc s" in lines[0]
    assert lines[2].split()[-1] == "12.35"
    assert lines[3].split()[-1] == "-"
    assert "first reached 0.8 (-: never)" in lines[-1]


def test_the_seeds_table_says_how_many_seeds_reached_the_target() -> None:
    text = seeds_table(
        {
            "fedavg": {0: _summary(0.9, 10.0), 1: _summary(0.9, 12.0)},
            "fedbuff": {0: _summary(0.8, 5.0), 1: _summary(0.7, None)},
        }
    )
    fedavg = next(line for line in text.splitlines() if line.startswith("fedavg"))
    fedbuff = next(line for line in text.splitlines() if line.startswith("fedbuff"))
    assert "11.0 ±" in fedavg and "[" not in fedavg
    assert fedbuff.rstrip().endswith("5.0       [1/2]")
    assert "[k/n] when not all" in text


def test_a_run_draws_accuracy_against_simulated_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn: dict[str, list[list[Any]]] = {}
    save = plots._save

    def keep(fig: Any, path: Path, **options: Any) -> list[Path]:
        drawn[path.stem] = [[line.get_xdata() for line in ax.lines] for ax in fig.axes]
        return save(fig, path, **options)

    monkeypatch.setattr(plots, "_save", keep)
    result = clusterfed.run(
        small_scenario(rounds=3, target_accuracy=0.05), out=tmp_path / "run", workers=1
    )
    for suffix in ("png", "pdf"):
        assert (tmp_path / "run" / f"accuracy_time.{suffix}").stat().st_size > 0
    times = [r["sim_time"] for r in result.rows]
    assert times[0] > 0 and times != [0, 1, 2]
    # Every client's line and the mean lie on the rows' simulated times.
    lines = drawn["accuracy_time"][0]
    n_clients = len(result.rows[0]["clients"])
    assert all(np.allclose(x, times) for x in lines[: n_clients + 1])
    # The time the target was reached is marked.
    assert result.summary["time_to_accuracy"] == times[0]
    assert any(len(x) == 2 and np.allclose(x, times[0]) for x in lines)
    # `clusterfed plot`'s figure has a panel of accuracy over simulated time.
    figure = tmp_path / "all.png"
    plots_runs.plot_runs([tmp_path / "run"], figure)
    assert figure.stat().st_size > 0 and figure.with_suffix(".pdf").exists()
    assert np.allclose(drawn["all"][1][0], times)


def test_compare_runs_async_algorithms_with_set_mode_async(tmp_path: Path) -> None:
    # The scenario's own algorithm (fedavg) has no asynchronous mode; the
    # ones compared do.
    result = clusterfed.compare(
        "quickstart",
        ["fedasync", "fedbuff"],
        out=tmp_path,
        rounds=2,
        clients=4,
        overrides=["mode=async", "target_accuracy=0.05"],
        workers=1,
    )
    for summary in result.summaries.values():
        assert summary["time_to_accuracy"] is not None
        assert "staleness" in summary
    text = table(result.summaries)
    assert "t→acc s" in text.splitlines()[0]
