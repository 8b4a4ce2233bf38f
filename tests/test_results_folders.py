"""Results are never lost, and config.json says what ran (issue 20)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import clusterfed
from clusterfed.cli import main
from clusterfed.errors import ConfigError
from clusterfed.folders import MARKER
from clusterfed.tables import table
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
    result = clusterfed.run(
        small_scenario(rounds=1), out=tmp_path / "run", overwrite=True
    )
    assert result.summary["rounds"] == 1
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.tex").write_text("precious")
    with pytest.raises(ConfigError, match=f"{MARKER}.*thesis.tex.*nothing was"):
        clusterfed.run(small_scenario(), out=tmp_path / "mine", overwrite=True)
    assert (tmp_path / "mine" / "thesis.tex").read_text() == "precious"


# -- issue 33: --overwrite deletes only what clusterfed wrote ----------------------


def _tree(folder: Path) -> dict[str, bytes | None]:
    """Every entry under `folder`: a file's bytes, None for a folder."""
    return {
        p.relative_to(folder).as_posix(): None if p.is_dir() else p.read_bytes()
        for p in sorted(folder.rglob("*"))
    }


def _listed(folder: Path) -> set[str]:
    return set(json.loads((folder / MARKER).read_text())["wrote"])


def test_overwrite_refuses_a_folder_clusterfed_did_not_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The red-team case: a config.json makes a folder look like results.
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "src" / "x.py").write_text("print('mine')\n")
    (project / "data.csv").write_text("a,b\n1,2\n")
    (project / "config.json").write_text("{}\n")
    before = _tree(project)
    with pytest.raises(ConfigError, match="config.json, data.csv, src.*did not"):
        clusterfed.run(small_scenario(rounds=1), out=project, overwrite=True)
    args = ["run", "quickstart", "--rounds", "1", "--clients", "4", "--quiet"]
    assert main([*args, "--out", str(project), "--overwrite"]) == 2
    err = capsys.readouterr().err.strip()
    assert str(project) in err and "data.csv" in err and "\n" not in err
    assert _tree(project) == before


def test_overwrite_of_a_run_removes_exactly_the_files_it_wrote(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    clusterfed.run(small_scenario(rounds=3), out=out, checkpoint_every=1, log="csv")
    listed = _listed(out)
    assert {"config.json", "rounds.jsonl", "summary.json", "checkpoint.pkl"} <= listed
    assert {"scalars.csv", "accuracy.png", "accuracy.pdf"} <= listed
    # The list is what the folder holds: nothing written goes unlisted.
    assert set(_tree(out)) == listed | {MARKER}
    (tmp_path / "beside.txt").write_text("not in the folder")
    clusterfed.run(small_scenario(rounds=1), out=out, overwrite=True)
    assert not (out / "checkpoint.pkl").exists()
    assert not (out / "scalars.csv").exists()
    assert set(_tree(out)) == _listed(out) | {MARKER}
    assert (tmp_path / "beside.txt").read_text() == "not in the folder"


def test_a_run_cut_short_leaves_a_list_overwrite_can_use(tmp_path: Path) -> None:
    out = tmp_path / "run"

    def crash(row: dict[str, object]) -> None:
        if row["round"] == 1:
            raise RuntimeError("power cut")

    # Dies as a killed run does: no summary, no plots, no final listing.
    with pytest.raises(RuntimeError, match="power cut"):
        clusterfed.run(
            small_scenario(rounds=3),
            out=out,
            checkpoint_every=1,
            log="csv",
            trace="headers",
            on_round=crash,
        )
    assert not (out / "summary.json").exists()
    assert {"checkpoint.pkl", "scalars.csv", "trace.msgpack"} <= set(_tree(out))
    assert set(_tree(out)) <= _listed(out) | {MARKER}
    clusterfed.run(small_scenario(rounds=1), out=out, overwrite=True)
    assert not (out / "trace.msgpack").exists()
    assert not (out / "checkpoint.pkl").exists()


def test_a_file_the_user_put_into_a_run_folder_stops_overwrite(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    clusterfed.run(small_scenario(rounds=1), out=out)
    (out / "notes.md").write_text("what I saw")
    (out / "figures").mkdir()
    (out / "figures" / "fig1.png").write_bytes(b"mine")
    before = _tree(out)
    with pytest.raises(ConfigError, match="figures, notes.md, which the run"):
        clusterfed.run(small_scenario(rounds=1), out=out, overwrite=True)
    assert _tree(out) == before


def test_a_file_the_user_puts_into_a_run_folder_while_it_runs_is_never_listed(
    tmp_path: Path,
) -> None:
    # The recorder lists what appeared after each round: only the names the
    # run writes late (a trace, a tracker's log), never a user's file.
    out = tmp_path / "run"
    saved: list[str] = []

    def user_saves_notes(row: dict[str, object]) -> None:
        if not saved:
            (out / "my_notes.txt").write_text("mine")
            (out / "config.json.tmp").write_text("mine too")
            saved.append("yes")

    clusterfed.run(
        small_scenario(rounds=2), out=out, on_round=user_saves_notes, log="csv"
    )
    listed = json.loads((out / MARKER).read_text())["wrote"]
    assert "scalars.csv" in listed
    assert "my_notes.txt" not in listed and "config.json.tmp" not in listed
    with pytest.raises(ConfigError, match="config.json.tmp, my_notes.txt"):
        clusterfed.run(small_scenario(rounds=1), out=out, overwrite=True)
    assert (out / "my_notes.txt").read_text() == "mine"
    assert (out / "config.json.tmp").read_text() == "mine too"


def test_the_names_a_run_writes_late_are_the_writers_names() -> None:
    from clusterfed.actors.trace import TRACE_FILE
    from clusterfed.results import LATE_OUTPUTS
    from clusterfed.tracking import CSV_FILE, TENSORBOARD_DIR

    assert set(LATE_OUTPUTS) == {TRACE_FILE, CSV_FILE, TENSORBOARD_DIR}


def test_overwrite_of_a_comparison_goes_by_each_runs_list(tmp_path: Path) -> None:
    cmp = tmp_path / "cmp"
    clusterfed.compare(small_scenario(rounds=1), ["fedavg", "fedprox"], out=cmp)
    assert main(["plot", str(cmp)]) == 0
    assert {"fedavg", "fedprox", "comparison.json", "runs.png"} <= _listed(cmp)
    (cmp / "fedprox" / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="fedprox/notes.txt"):
        clusterfed.compare(
            small_scenario(rounds=1), ["fedavg", "fedprox"], out=cmp, overwrite=True
        )
    assert (cmp / "runs.png").exists() and (cmp / "fedprox" / "summary.json").exists()
    (cmp / "fedprox" / "notes.txt").unlink()
    clusterfed.compare(small_scenario(rounds=1), ["fedavg"], out=cmp, overwrite=True)
    assert sorted(p.name for p in cmp.iterdir()) == [
        MARKER,
        "comparison.json",
        "fedavg",
        "runs.pdf",
        "runs.png",
    ]


def test_an_out_that_is_a_symbolic_link_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    clusterfed.run(small_scenario(rounds=1), out=real)
    (real / "keep.txt").write_text("mine")
    before = _tree(real)
    link = tmp_path / "link"
    link.symlink_to(real)
    for overwrite in (False, True):
        with pytest.raises(ConfigError, match="symbolic link"):
            clusterfed.run(small_scenario(rounds=1), out=link, overwrite=overwrite)
    assert _tree(real) == before


def test_a_listed_file_turned_into_a_link_stops_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "run"
    clusterfed.run(small_scenario(rounds=1), out=out)
    precious = tmp_path / "precious.jsonl"
    precious.write_text("mine\n")
    (out / "rounds.jsonl").unlink()
    (out / "rounds.jsonl").symlink_to(precious)
    with pytest.raises(ConfigError, match="rounds.jsonl: a symbolic link"):
        clusterfed.run(small_scenario(rounds=1), out=out, overwrite=True)
    assert precious.read_text() == "mine\n"
    assert (out / "rounds.jsonl").is_symlink() and (out / "config.json").exists()


def test_a_dangling_link_as_out_is_a_clean_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    link = tmp_path / "results"
    link.symlink_to(tmp_path / "gone")
    args = ["run", "quickstart", "--rounds", "1", "--clients", "4", "--quiet"]
    for extra in ([], ["--overwrite"]):
        assert main([*args, "--out", str(link), *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert "symbolic link" in err and "does not exist" in err
        assert "\n" not in err and "Traceback" not in err
    assert link.is_symlink() and not (tmp_path / "gone").exists()


def test_a_marker_that_lists_paths_outside_its_folder_is_refused(
    tmp_path: Path,
) -> None:
    outside = tmp_path / "thesis.tex"
    outside.write_text("precious")
    out = tmp_path / "run"
    out.mkdir()
    (out / "rounds.jsonl").write_text("")
    (out / MARKER).write_text(json.dumps({"wrote": ["rounds.jsonl", "../thesis.tex"]}))
    with pytest.raises(ConfigError, match="not a clusterfed run marker.*thesis"):
        clusterfed.run(small_scenario(rounds=1), out=out, overwrite=True)
    assert outside.read_text() == "precious" and (out / "rounds.jsonl").exists()


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
