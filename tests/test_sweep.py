"""`clusterfed sweep`: a grid of settings × algorithms × seeds in one folder,
its table and figure, and a resume that runs only what a stopped sweep
lacks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import clusterfed
from clusterfed import comparison
from clusterfed import sweeps as sweeping
from clusterfed.cli import main
from clusterfed.errors import ConfigError
from clusterfed.sweeps import Cell, cells, parse_grid, sweep, sweep_table

GRID = {"train.lr": ["0.01", "0.05"], "algorithm": ["fedavg", "fedprox"]}
SMALL = {"rounds": 3, "clients": 4, "workers": 1}


def test_the_grid_is_every_combination_in_the_order_given() -> None:
    assert parse_grid(["train.lr=0.01, 0.05", "algorithm=fedavg,fedprox"]) == GRID
    found = cells(GRID)
    assert [c.name for c in found] == [
        "train.lr=0.01,algorithm=fedavg",
        "train.lr=0.01,algorithm=fedprox",
        "train.lr=0.05,algorithm=fedavg",
        "train.lr=0.05,algorithm=fedprox",
    ]
    assert found[1].algorithm == "fedprox" and found[1].overrides == ["train.lr=0.01"]
    assert Cell((("partition.alpha", "0.1"),)).algorithm is None


@pytest.mark.parametrize(
    ("entries", "reason"),
    [
        ([], "at least one --grid"),
        (["train.lr"], "give KEY=V1,V2"),
        (["train.lr="], "give KEY=V1,V2"),
        (["a=1", "a=2"], "given twice"),
        (["a=1,1"], "listed twice"),
    ],
)
def test_a_bad_grid_is_refused(entries: list[str], reason: str) -> None:
    with pytest.raises(ConfigError, match=reason):
        parse_grid(entries)


def test_a_cell_that_does_not_validate_stops_the_sweep_before_any_run(
    tmp_path: Path,
) -> None:
    with pytest.raises(ConfigError, match=r"sweep cell train\.lr=-1"):
        sweep("quickstart", {"train.lr": ["0.1", "-1"]}, out=tmp_path, **SMALL)
    assert not any(tmp_path.glob("*/summary.json"))


def test_a_sweep_writes_every_cell_its_table_and_figure(tmp_path: Path) -> None:
    result = clusterfed.sweep("quickstart", GRID, out=tmp_path, seeds=2, **SMALL)
    assert [c.name for c in result.cells] == [c.name for c in cells(GRID)]
    data = json.loads((tmp_path / "sweep.json").read_text())
    assert data["grid"] == GRID and len(data["cells"]) == 4
    for name, cell in data["cells"].items():
        assert cell["seeds"] == [0, 1]
        assert cell["statistics"]["final_mean_acc"]["n"] == 2
        for seed in (0, 1):
            algorithm = cell["settings"]["algorithm"]
            run = tmp_path / name / f"seed{seed}" / algorithm
            config = json.loads((run / "config.json").read_text())
            assert config["scenario"]["train"]["lr"] == float(
                cell["settings"]["train.lr"]
            )
    assert (tmp_path / "sweep.png").exists() and (tmp_path / "sweep.pdf").exists()
    lines = sweep_table(result).splitlines()
    assert len(lines) == 2 + 4 + 1 and "± " in lines[2]
    assert lines[-1] == "mean ± 95 % interval over 2 seed(s) per cell"


def test_a_resumed_sweep_runs_only_what_a_stopped_one_lacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The sweep is stopped as its third cell starts (as Ctrl-C would).
    real = comparison.compare
    started: list[Any] = []

    def stop_at_the_third(*args: Any, **kwargs: Any) -> Any:
        started.append(kwargs["out"])
        if len(started) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(sweeping, "compare", stop_at_the_third)
    with pytest.raises(KeyboardInterrupt):
        sweep("quickstart", GRID, out=tmp_path, seeds=2, **SMALL)
    monkeypatch.setattr(sweeping, "compare", real)
    # Resumed: the 4 runs of the two finished cells are read back; the two
    # missing cells' 4 runs are run.
    ran: list[str] = []
    run = comparison.run

    def counted(scenario: Any, **kwargs: Any) -> Any:
        ran.append(str(Path(kwargs["out"]).relative_to(tmp_path)))
        return run(scenario, **kwargs)

    monkeypatch.setattr(comparison, "run", counted)
    result = sweep("quickstart", GRID, out=tmp_path, seeds=2, resume=True, **SMALL)
    assert sorted(ran) == [
        f"train.lr=0.05,algorithm={a}/seed{s}/{a}"
        for a in ("fedavg", "fedprox")
        for s in (0, 1)
    ]
    assert len(result.cells) == 4
    # A sweep that finished resumes to itself without running anything.
    ran.clear()
    sweep("quickstart", GRID, out=tmp_path, seeds=2, resume=True, **SMALL)
    assert ran == []


def test_the_command_line_sweep_prints_its_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "sweep"
    code = main(
        [
            "sweep",
            "quickstart",
            "--grid",
            "train.lr=0.01,0.05",
            "--rounds",
            "2",
            "--clients",
            "4",
            "--workers",
            "1",
            "--quiet",
            "--out",
            str(out),
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0 and "train.lr=0.05" in printed and f"results: {out}" in printed
    assert main(["sweep", "quickstart", "--grid", "a=1", "--seed", "3"]) == 2
