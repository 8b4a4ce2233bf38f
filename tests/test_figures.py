"""The multi-run figure (`clusterfed plot`, and the one `compare` writes):
its band is the 95 % interval the tables print, events are marked, counts get
integer ticks, equal lines stay visible, the title names the scenario."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib.collections import PolyCollection

import clusterfed
from clusterfed import plots, plots_runs
from clusterfed.seeds import interval

SMALL = {"rounds": 3, "clients": 4, "workers": 1}


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("compare")
    clusterfed.compare(
        "dcfl-dynamic",
        ["fedavg", "fedprox"],
        out=out,
        seeds=3,
        overrides=["dp=off"],
        **{**SMALL, "rounds": 6},
    )
    return out


def _figure(monkeypatch: pytest.MonkeyPatch, folder: Path, tmp: Path) -> Any:
    """Draw `folder`'s runs and keep the figure open to read its artists."""
    kept: list[Any] = []
    save = plots._save

    def keep(fig: Any, path: Path, **options: Any) -> list[Path]:
        kept.append(fig)
        return save(fig, path, **options)

    monkeypatch.setattr(plots, "_save", keep)
    plots_runs.plot_runs([folder], tmp / "runs.png")
    return kept[-1]


def test_compare_writes_its_figure(compared: Path) -> None:
    assert (compared / "runs.png").exists() and (compared / "runs.pdf").exists()


def test_the_band_is_the_95_percent_interval_over_seeds(
    compared: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fig = _figure(monkeypatch, compared, tmp_path)
    acc = fig.axes[0]
    runs = [
        plots_runs._runs_in(compared / f"seed{s}" / "fedavg")[0][1] for s in range(3)
    ]
    means = np.array([[plots_runs._mean_acc(r) for r in rows] for rows in runs])
    want = [interval(list(column)) for column in means.T]
    band = next(c for c in acc.collections if isinstance(c, PolyCollection))
    ys = band.get_paths()[0].vertices[:, 1]
    for found in want:
        assert any(abs(y - found.low) < 1e-9 for y in ys)  # type: ignore[operator]
        assert any(abs(y - found.high) < 1e-9 for y in ys)  # type: ignore[operator]
    labels = [t.get_text() for t in acc.get_legend().get_texts()]
    assert "dcfl-dynamic · fedavg (3 runs; band: 95 % interval)" in labels
    # fedprox's line is dashed where fedavg's is solid: equal lines stay visible
    styles = {line.get_label(): line.get_linestyle() for line in acc.get_lines()}
    assert styles["dcfl-dynamic · fedavg (3 runs; band: 95 % interval)"] == "-"
    assert styles["dcfl-dynamic · fedprox (3 runs; band: 95 % interval)"] == "--"
    assert fig._suptitle.get_text() == "dcfl-dynamic"


def test_events_are_marked_and_counts_have_integer_ticks(
    compared: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fig = _figure(monkeypatch, compared, tmp_path)
    acc, timed, clusters, _ = fig.axes
    # dcfl-dynamic: a join in round 0 and a drift in round 5, among others
    rows = plots_runs._runs_in(compared / "seed0" / "fedavg")[0][1]
    fired = sorted({r["round"] for r in rows if r.get("events")})
    assert fired
    # The marks are the unlabelled lines (the means carry the legend's labels).
    marks = [line for line in acc.get_lines() if line.get_label().startswith("_")]
    marked = {float(line.get_xdata()[0]) + 0.5 for line in marks}
    assert set(fired) <= marked
    assert any(t.get_text() == "drift" for t in acc.get_legend().get_texts())
    ticks = clusters.get_yticks()
    assert len(ticks) and all(float(t).is_integer() for t in ticks)
    assert np.all(np.diff(clusters.get_ylim()) >= 2)  # a constant count has room
