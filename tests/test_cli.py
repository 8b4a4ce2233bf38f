"""The command line: list, run, and exit status 2 on a bad scenario."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from clusterfed.cli import main


def test_list_shows_scenarios_algorithms_datasets_models(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in ("quickstart", "fedavg", "fraction=1.0", "digits", "mlp", "cnn"):
        assert name in out


def test_run_with_overrides_writes_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = (
        "run quickstart --rounds 2 --clients 5 --seed 3 --quiet --set model.hidden=[16]"
    )
    code = main([*args.split(), "--out", str(tmp_path)])
    assert code == 0
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["seed"] == 3 and config["scenario"]["clients"] == 5
    assert config["scenario"]["model"]["hidden"] == [16]
    assert "final mean accuracy" in capsys.readouterr().out


def test_a_bad_scenario_exits_2_naming_file_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('name = "bad"\n[train]\nlr = -1\n')
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "train.lr" in err and "greater than 0" in err
    assert not (tmp_path / "out").exists()


def test_the_console_script_is_installed() -> None:
    exe = shutil.which("clusterfed", path=str(Path(sys.executable).parent))
    assert exe is not None
    done = subprocess.run(
        [exe, "run", "nowhere"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2 and "not a built-in scenario" in done.stderr


def test_dp_epsilon_is_a_shorthand_for_the_dp_section(tmp_path: Path) -> None:
    args = "run quickstart --rounds 1 --clients 4 --quiet --dp-epsilon 3"
    assert main([*args.split(), "--out", str(tmp_path)]) == 0
    config = json.loads((tmp_path / "config.json").read_text())
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert config["scenario"]["dp"]["epsilon"] == 3.0
    # the clients train in the one round they planned for: the budget is
    # spent to Opacus' tolerance (0.01), neither passed nor left unused
    assert 3.0 - 0.01 <= summary["epsilon_max"] <= 3.0
