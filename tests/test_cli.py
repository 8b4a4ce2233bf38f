"""The command line: list, run, and exit status 2 on a bad scenario."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from clusterfed.cli import main
from clusterfed.scenarios import load_scenario, with_overrides


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


# -- bounds and reports without a traceback (issue 33) ----------------------------


@pytest.mark.parametrize("workers", ["-5", "0", "100000"])
@pytest.mark.parametrize("command", ["run", "resume"])
def test_workers_out_of_bounds_exit_2_naming_workers_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, workers: str
) -> None:
    out = tmp_path / "out"
    args = (
        ["run", "quickstart", "--out", str(out)]
        if command == "run"
        else [
            "resume",
            str(out),
        ]
    )
    assert main([*args, "--workers", workers, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert (
        err == f"clusterfed: error: workers must be between 1 and 256, got {workers}\n"
    )
    assert not out.exists()


def test_a_model_past_the_size_bound_exits_2_naming_model_without_building_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    args = ["run", "quickstart", "--set", "model.hidden=[10000000]", "--out", str(out)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert (
        "model (mlp, hidden=[10000000]) has 750,000,010 parameters on digits"
        " (3.0 GB a copy), above the bound of 50,000,000"
    ) in err
    assert not out.exists()
    # 45 M parameters are inside the bound (validated, not built here)
    with_overrides(load_scenario("quickstart"), ["model.hidden=[600000]"])


UNKNOWN_ACCURACY = """\
name = "flipped"
clients = 4
rounds = 1

[model]
name = "mlp"
hidden = [16]

[[faulty]]
clients = [0, 1, 2, 3]
behaviour = "sign_flip"
scale = 1e30
"""


def test_a_run_with_no_final_accuracy_reports_n_a_and_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every update × −1e30: the model overflows and no evaluation has an
    # accuracy, but the run finished.
    scenario = tmp_path / "flipped.toml"
    scenario.write_text(UNKNOWN_ACCURACY)
    out = tmp_path / "out"
    args = ["run", str(scenario), "--out", str(out), "--workers", "1", "--quiet"]
    assert main(args) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["final_mean_acc"] is None and summary["final_std_acc"] is None
    assert "final mean accuracy n/a ± n/a" in capsys.readouterr().out


# -- one list of options for every command that parses them ---------------------


class _Called(Exception):
    """Stops a command at the call it makes, with the keywords it passed."""

    def __init__(self, keywords: dict[str, object]) -> None:
        super().__init__("called")
        self.keywords = keywords


def _capture(*_args: object, **keywords: object) -> None:
    raise _Called(keywords)


_COMMANDS = {
    "run": ("clusterfed.api.run", ["run", "quickstart"]),
    "resume": ("clusterfed.api.resume", ["resume", "somewhere"]),
    "compare": ("clusterfed.comparison.compare", ["compare", "quickstart"]),
    "sweep": ("clusterfed.sweeps.sweep", ["sweep", "quickstart", "--out", "x"]),
    "serve": ("clusterfed.serve.serve", ["serve", "quickstart", "--external", "0"]),
}
_SCENARIO_OPTIONS = ["--rounds", "3", "--clients", "4", "--cohort", "2"]
_RUNTIME_OPTIONS = ["--workers", "2", "--clients-per-host", "5"]


def _keywords(
    monkeypatch: pytest.MonkeyPatch, command: str, extra: list[str]
) -> dict[str, object]:
    target, args = _COMMANDS[command]
    monkeypatch.setattr(target, _capture)
    more = ["--algorithms", "fedavg"] if command == "compare" else []
    more += ["--grid", "train.lr=0.1"] if command == "sweep" else []
    more += [] if command == "resume" else ["--set", "train.lr=0.2"]
    with pytest.raises(_Called) as called:
        main([*args, *more, *extra, "--quiet"])
    return called.value.keywords


@pytest.mark.parametrize("command", ["run", "compare", "sweep", "serve"])
def test_every_scenario_command_passes_rounds_clients_and_overrides(
    monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    keywords = _keywords(monkeypatch, command, _SCENARIO_OPTIONS)
    assert keywords["rounds"] == 3 and keywords["clients"] == 4
    assert keywords["overrides"] == ["compute.cohort=2", "train.lr=0.2"]


@pytest.mark.parametrize("command", ["run", "resume", "compare", "sweep"])
def test_every_command_that_parses_runtime_options_passes_them_all(
    monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    # A sweep once dropped --gpus-per-host.
    extra = [*_RUNTIME_OPTIONS, "--runtime", "ray", "--gpus-per-host", "0.5"]
    keywords = _keywords(monkeypatch, command, extra)
    assert keywords["runtime"] == "ray" and keywords["gpus_per_host"] == 0.5
    assert keywords["workers"] == 2 and keywords["clients_per_host"] == 5
    assert keywords["ray_address"] is None and keywords["progress"] is False
