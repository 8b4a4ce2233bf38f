"""Results are never lost, and config.json says what ran (issue 20)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import clusterfed
from clusterfed.cli import main
from clusterfed.comparison import table
from clusterfed.errors import ConfigError
from helpers import small_scenario


def test_a_second_run_into_the_same_folder_leaves_the_first_alone(
    tmp_path: Path,
) -> None:
    first = clusterfed.run(small_scenario(rounds=2), out=tmp_path)
    before = (tmp_path / "rounds.jsonl").read_bytes()
    with pytest.raises(ConfigError, match="not empty.*--overwrite"):
        clusterfed.run(small_scenario(rounds=1), out=tmp_path)
    assert (tmp_path / "rounds.jsonl").read_bytes() == before
    assert first.summary["rounds"] == 2


def test_overwrite_replaces_a_results_folder_and_nothing_else(tmp_path: Path) -> None:
    clusterfed.run(small_scenario(rounds=2), out=tmp_path / "run")
    (tmp_path / "run" / "old.png").write_bytes(b"stale")
    result = clusterfed.run(
        small_scenario(rounds=1), out=tmp_path / "run", overwrite=True
    )
    assert result.summary["rounds"] == 1
    assert not (tmp_path / "run" / "old.png").exists()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.tex").write_text("precious")
    with pytest.raises(ConfigError, match="holds none"):
        clusterfed.run(small_scenario(), out=tmp_path / "mine", overwrite=True)
    assert (tmp_path / "mine" / "thesis.tex").read_text() == "precious"


def test_default_folders_differ_by_settings_and_latest_points_at_the_newest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    a = clusterfed.run(small_scenario(rounds=2))
    b = clusterfed.run(small_scenario(rounds=1))
    assert a.out != b.out and a.out.parent == b.out.parent == Path("runs")
    assert a.out.name.startswith("small-fedavg-seed0-")
    # The hash part differs: another number of rounds is another scenario.
    assert a.out.name.split("-")[3] != b.out.name.split("-")[3]
    assert (Path("runs") / "latest").resolve() == b.out.resolve()
    assert json.loads((a.out / "summary.json").read_text())["rounds"] == 2


def test_config_records_the_algorithm_as_built_and_the_provenance(
    tmp_path: Path,
) -> None:
    result = clusterfed.compare(
        small_scenario(rounds=1), ["fedavg", "fedprox"], out=tmp_path
    )
    config = json.loads((tmp_path / "fedprox" / "config.json").read_text())
    assert config["algorithm"]["params"] == {
        "mu": 0.01,
        "fraction": 1.0,
        "server_lr": 1.0,
    }
    assert config["algorithm"]["train_config"]["mu"] == 0.01
    assert config["algorithm"]["class"] == "clusterfed.algorithms.fedprox:FedProx"
    for key in ("command", "host", "started_at", "finished_at", "versions"):
        assert config[key], key
    assert config["versions"]["clusterfed"] and "git" in config
    assert set(result.runs) == {"fedavg", "fedprox"}
    assert "fedprox" in json.loads((tmp_path / "comparison.json").read_text())


def test_the_compare_table_tells_near_equal_runs_apart() -> None:
    base = {
        "final_std_acc": 0.05,
        "avg_mean_acc": 0.9,
        "avg_std_acc": 0.05,
        "n_clusters_final": 1,
        "ari_final": 1.0,
        "purity_final": 1.0,
        "rounds_to_purity90": 1,
    }
    text = table(
        {
            "fedavg": {**base, "final_mean_acc": 0.93881},
            "fedprox": {**base, "final_mean_acc": 0.93862},
        }
    )
    assert "0.9388" in text and "0.9386" in text and "-0.0002" in text


def test_the_cli_refuses_a_used_folder_and_says_how_to_go_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["run", "quickstart", "--rounds", "1", "--clients", "4", "--quiet"]
    assert main([*args, "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "late 0" in out and f"results: {tmp_path}" in out
    assert main([*args, "--out", str(tmp_path)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert main([*args, "--out", str(tmp_path), "--overwrite"]) == 0


def test_load_reads_a_results_folder_back(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    clusterfed.run(small_scenario(rounds=2), out=tmp_path)
    loaded = clusterfed.load(tmp_path)
    assert loaded.summary["rounds"] == 2 and len(loaded.rows) == 2
    assert isinstance(loaded.rounds, pd.DataFrame)
    assert list(loaded.rounds["round"]) == [0, 1]
    assert "mean_acc" in loaded.rounds and "clients" not in loaded.rounds
    assert len(loaded.clients) == 2 * 6 and {"round", "id", "acc"} <= set(
        loaded.clients.columns
    )
    assert loaded.config["seed"] == 0


def test_the_public_names_are_the_functions() -> None:
    from clusterfed import comparison

    assert clusterfed.compare is comparison.compare
    assert callable(clusterfed.load)


def test_plot_draws_a_compare_folder_and_runs_side_by_side(tmp_path: Path) -> None:
    clusterfed.compare(
        small_scenario(rounds=2), ["fedavg", "fedprox"], out=tmp_path / "cmp"
    )
    clusterfed.run(small_scenario(rounds=2, seed=1), out=tmp_path / "seed1")
    assert main(["plot", str(tmp_path / "cmp")]) == 0
    assert (tmp_path / "cmp" / "runs.png").stat().st_size > 0
    assert (tmp_path / "cmp" / "runs.pdf").exists()
    figure = tmp_path / "all.png"
    assert (
        main(
            [
                "plot",
                str(tmp_path / "cmp"),
                str(tmp_path / "seed1"),
                "--out",
                str(figure),
            ]
        )
        == 0
    )
    assert figure.exists() and figure.with_suffix(".pdf").exists()
    for name in ("accuracy", "clusters", "clustering"):
        assert (tmp_path / "seed1" / f"{name}.pdf").exists()
    assert main(["plot", str(tmp_path / "nothing")]) == 2
