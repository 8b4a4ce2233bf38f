"""`compare` over several seeds: the seeds asked for, the intervals, the
layout (a one-seed comparison per seed, comparison.json, seeds.json), the
table and the plot (issue 16)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.testing import assert_allclose
from scipy import stats

import clusterfed
from clusterfed.cli import main
from clusterfed.comparison import CompareResult, default_compare_out, run_folder
from clusterfed.errors import ConfigError
from clusterfed.folders import MARKER
from clusterfed.seeds import (
    METRICS,
    interval,
    parse_seeds,
    resolve_seeds,
    seed_statistics,
    seeds_json,
)
from clusterfed.tables import seeds_table
from helpers import assert_compare_contract, small_scenario, without_wall_time

# -- the statistics --------------------------------------------------------------


def test_the_interval_is_scipys_student_t_interval() -> None:
    values = [0.91, 0.93, 0.96]
    found = interval(values)
    low, high = stats.t.interval(
        0.95, df=2, loc=np.mean(values), scale=stats.sem(values)
    )
    ci = stats.ttest_1samp(values, 0.0).confidence_interval(0.95)
    assert found.n == 3
    assert_allclose([found.low, found.high], [low, high], rtol=1e-12)
    assert_allclose([found.low, found.high], [ci.low, ci.high], rtol=1e-12)
    # By hand: t(0.975, 2) = 4.302653, s = 0.0251661, half = t·s/√3.
    assert found.std == pytest.approx(0.0251661148, rel=1e-8)
    assert found.half_width == pytest.approx(4.302652730 * 0.0251661148 / math.sqrt(3))
    assert found.mean == pytest.approx(0.9333333333)


def test_a_90_percent_interval_is_narrower_than_a_95_percent_one() -> None:
    values = [0.5, 0.7, 0.65, 0.6]
    wide, narrow = interval(values, 0.95), interval(values, 0.90)
    low, high = stats.t.interval(
        0.90, df=3, loc=np.mean(values), scale=stats.sem(values)
    )
    assert narrow.low == pytest.approx(low) and narrow.high == pytest.approx(high)
    assert narrow.half_width is not None and wide.half_width is not None
    assert narrow.half_width < wide.half_width


def test_one_value_has_no_interval_and_equal_values_a_zero_width_one() -> None:
    one = interval([0.8])
    assert (one.n, one.mean) == (1, 0.8)
    assert one.std is one.half_width is one.low is one.high is None
    equal = interval([0.8, 0.8, 0.8])
    assert equal.half_width == 0.0 and equal.low == equal.high == pytest.approx(0.8)
    assert interval([]).mean is None


def test_seed_statistics_leave_out_seeds_without_a_value() -> None:
    summaries = {
        0: {m: 0.5 for m in METRICS} | {"ari_final": None},
        1: {m: 0.7 for m in METRICS} | {"ari_final": None},
        2: {m: 0.9 for m in METRICS} | {"ari_final": 0.4},
    }
    found = seed_statistics(summaries)
    assert found["final_mean_acc"].n == 3
    assert found["final_mean_acc"].mean == pytest.approx(0.7)
    assert found["ari_final"].n == 1 and found["ari_final"].mean == 0.4
    assert found["ari_final"].half_width is None


# -- which seeds -----------------------------------------------------------------


def test_a_single_number_is_a_count_and_a_list_names_the_seeds() -> None:
    assert parse_seeds("3") == [0, 1, 2]
    assert parse_seeds("0,1,2") == [0, 1, 2]
    assert parse_seeds(" 5, 7 ") == [5, 7]
    assert resolve_seeds(2) == [0, 1]
    assert resolve_seeds((4, 9)) == [4, 9]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        (",", "empty item"),
        ("0,,1", "empty item"),
        ("0", "count of seeds.*at least 1"),
        ("-2", "count of seeds.*at least 1"),
        ("1,-2", "-2 is negative"),
        ("1,2,1", "1 listed twice"),
        ("1.5", "'1.5' is not an integer"),
    ],
)
def test_bad_seeds_are_refused_naming_the_value(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=f"--seeds '{text.strip()}': .*{message}"):
        parse_seeds(text)


@pytest.mark.parametrize("seeds", [0, [], [1, 1], [-1], True, "0,1"])
def test_the_python_api_refuses_bad_seeds_before_running(
    seeds: object, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match="seeds="):
        clusterfed.compare(
            small_scenario(rounds=1),
            ["fedavg"],
            seeds=seeds,  # type: ignore[arg-type]
            out=tmp_path / "cmp",
        )
    assert not (tmp_path / "cmp").exists()


def test_seed_and_seeds_together_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not both"):
        clusterfed.compare(
            small_scenario(rounds=1), ["fedavg"], seed=1, seeds=2, out=tmp_path
        )


def test_the_cli_refuses_bad_seeds_before_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cmp"
    args = ["compare", "quickstart", "--algorithms", "fedavg", "--out", str(out)]
    assert main([*args, "--seeds", "0,0"]) == 2
    assert "--seeds '0,0': 0 listed twice" in capsys.readouterr().err
    assert main([*args, "--seeds", ""]) == 2
    assert "--seeds '': empty" in capsys.readouterr().err
    assert not out.exists()


def test_the_default_folder_names_the_seeds_and_hashes_them() -> None:
    scenario = small_scenario()
    three = default_compare_out(scenario, [0, 1, 2]).name
    two = default_compare_out(scenario, [0, 1]).name
    one = default_compare_out(scenario).name
    assert three.startswith("small-compare-seeds0to2-")
    assert two.startswith("small-compare-seeds0_1-")
    assert one.startswith("small-compare-seed0-")
    assert len({name.split("-")[3] for name in (one, two, three)}) == 3


# -- a comparison over two seeds -------------------------------------------------


@pytest.fixture(scope="module")
def over_seeds(tmp_path_factory: pytest.TempPathFactory) -> CompareResult:
    out = tmp_path_factory.mktemp("seeds") / "cmp"
    return clusterfed.compare(
        small_scenario(rounds=2), ["fedavg", "fedprox"], seeds=[0, 3], out=out
    )


def test_each_seed_is_a_one_seed_comparison_of_its_own(
    over_seeds: CompareResult,
) -> None:
    out = over_seeds.out
    assert sorted(p.name for p in out.iterdir()) == [
        MARKER,
        "comparison.json",
        "runs.pdf",
        "runs.png",
        "seed0",
        "seed3",
        "seeds.json",
    ]
    for seed in (0, 3):
        folder = out / f"seed{seed}"
        # What a one-seed compare writes, and nothing else.
        assert sorted(p.name for p in folder.iterdir()) == [
            MARKER,
            "comparison.json",
            "fedavg",
            "fedprox",
        ]
        assert_compare_contract(folder)
        table = json.loads((folder / "comparison.json").read_text())
        assert list(table) == ["fedavg", "fedprox"]
        for name in ("fedavg", "fedprox"):
            loaded = clusterfed.load(folder / name)
            assert loaded.config["seed"] == seed
            assert loaded.summary["algorithm"] == name and len(loaded.rows) == 2
            assert table[name] == loaded.summary
            assert over_seeds.by_seed[name][seed].out == run_folder(out, name, seed)
    assert over_seeds.seeds == (0, 3)
    seeds = over_seeds.seed_summaries["fedavg"]
    # Another seed is another federation (data split, initial model).
    assert seeds[0]["avg_mean_acc"] != seeds[3]["avg_mean_acc"]
    with pytest.raises(ValueError, match="over seeds"):
        over_seeds.runs  # noqa: B018
    with pytest.raises(ConfigError, match="load one of its runs: seed0/fedavg, seed0/"):
        clusterfed.load(out)
    with pytest.raises(ConfigError, match="load one of its runs: fedavg, fedprox"):
        clusterfed.load(out / "seed3")


def test_the_top_comparison_json_names_every_run_and_its_summary(
    over_seeds: CompareResult,
) -> None:
    out = over_seeds.out
    assert_compare_contract(out)
    data = json.loads((out / "comparison.json").read_text())
    assert list(data) == [
        "seed0/fedavg",
        "seed0/fedprox",
        "seed3/fedavg",
        "seed3/fedprox",
    ]
    for key, summary in data.items():
        assert summary == json.loads((out / key / "summary.json").read_text())


def test_seeds_json_holds_the_intervals_and_paired_differences(
    over_seeds: CompareResult,
) -> None:
    data = json.loads((over_seeds.out / "seeds.json").read_text())
    assert data["seeds"] == [0, 3] and data["confidence"] == 0.95
    assert list(data["statistics"]) == ["fedavg", "fedprox"]
    finals = {
        name: [over_seeds.seed_summaries[name][s]["final_mean_acc"] for s in (0, 3)]
        for name in ("fedavg", "fedprox")
    }
    for name, entry in data["statistics"].items():
        assert set(entry) == set(METRICS)
        final = entry["final_mean_acc"]
        low, high = stats.t.interval(
            0.95, df=1, loc=np.mean(finals[name]), scale=stats.sem(finals[name])
        )
        assert final["n"] == 2
        assert final["mean"] == pytest.approx(np.mean(finals[name]))
        assert final["low"] == pytest.approx(low)
        assert final["high"] == pytest.approx(high)
    assert data["reference"] == "fedavg"
    assert list(data["paired_differences"]) == ["fedprox"]
    paired = data["paired_differences"]["fedprox"]
    assert set(paired) == set(METRICS)
    diffs = [b - a for a, b in zip(finals["fedavg"], finals["fedprox"], strict=True)]
    assert paired["final_mean_acc"] == interval(diffs).as_json()


def test_seeds_json_counts_only_seeds_every_algorithm_ran() -> None:
    data = seeds_json(
        {"a": {0: _summary(0.5), 1: _summary(0.6)}, "b": {1: _summary(0.7)}}
    )
    assert data["seeds"] == [1]
    assert data["paired_differences"]["b"]["final_mean_acc"]["n"] == 1
    assert data["paired_differences"]["b"]["final_mean_acc"]["mean"] == pytest.approx(
        0.1
    )
    assert seeds_json({})["reference"] is None


def test_a_comparison_stopped_midway_is_one_over_the_seeds_that_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from clusterfed import comparison

    real = comparison.run

    def stopped_at_seed_1(scenario: Any, **options: Any) -> Any:
        if scenario.seed == 1:
            raise KeyboardInterrupt
        return real(scenario, **options)

    monkeypatch.setattr(comparison, "run", stopped_at_seed_1)
    out = tmp_path / "cmp"
    with pytest.raises(KeyboardInterrupt):
        clusterfed.compare(small_scenario(rounds=1), ["fedavg"], seeds=2, out=out)
    assert_compare_contract(out)
    assert_compare_contract(out / "seed0")
    assert list(json.loads((out / "comparison.json").read_text())) == ["seed0/fedavg"]
    assert json.loads((out / "seeds.json").read_text())["seeds"] == [0]


def _count_runs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """The (algorithm, seed) of every run `compare` starts from now on."""
    from clusterfed import comparison

    real, started = comparison.run, []

    def counted(scenario: Any, **options: Any) -> Any:
        started.append((scenario.algorithm, scenario.seed))
        return real(scenario, **options)

    monkeypatch.setattr(comparison, "run", counted)
    return started


def test_resume_runs_only_what_did_not_finish_and_adds_seeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "cmp"
    scenario = small_scenario(rounds=2)
    first = clusterfed.compare(scenario, ["fedavg", "fedprox"], seeds=[0, 1], out=out)
    # Seed 1's fedprox stopped before its summary: it runs again, and seed 2
    # is new; seed 0 and seed 1's fedavg are read back.
    (out / "seed1" / "fedprox" / "summary.json").unlink()
    kept = (out / "seed0" / "fedavg" / "rounds.jsonl").stat().st_mtime_ns
    started = _count_runs(monkeypatch)
    resumed = clusterfed.compare(
        scenario, ["fedavg", "fedprox"], seeds=[0, 1, 2], out=out, resume=True
    )
    assert started == [("fedprox", 1), ("fedavg", 2), ("fedprox", 2)]
    assert (out / "seed0" / "fedavg" / "rounds.jsonl").stat().st_mtime_ns == kept
    assert_compare_contract(out)
    assert json.loads((out / "seeds.json").read_text())["seeds"] == [0, 1, 2]
    for name in ("fedavg", "fedprox"):
        for seed in (0, 1):
            assert (
                resumed.seed_summaries[name][seed]["final_mean_acc"]
                == first.seed_summaries[name][seed]["final_mean_acc"]
            )
    # Everything finished: a second resume runs nothing.
    started.clear()
    clusterfed.compare(
        scenario, ["fedavg", "fedprox"], seeds=[0, 1, 2], out=out, resume=True
    )
    assert started == []


# IFCA has both modes: an async checkpoint holds the event queue and the
# tasks in flight, which a sync one has not.
@pytest.mark.parametrize(("algorithm", "mode"), [("fedavg", "sync"), ("ifca", "async")])
def test_resume_goes_on_from_a_stopped_runs_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, algorithm: str, mode: str
) -> None:
    out = tmp_path / "cmp"
    scenario = small_scenario(rounds=5, algorithm=algorithm, mode=mode)
    whole = clusterfed.compare(scenario, [algorithm], out=out, checkpoint_every=2)
    # As if the sitting had been stopped while it wrote round 5's row.
    stopped = out / algorithm
    (stopped / "summary.json").unlink()
    with (stopped / "rounds.jsonl").open("a") as stream:
        stream.write('{"round": 4, "sim_ti')
    started = _count_runs(monkeypatch)
    resumed = clusterfed.compare(
        scenario, [algorithm], out=out, resume=True, checkpoint_every=2
    )
    assert started == []  # continued from round 4, not run again
    assert without_wall_time(resumed.runs[algorithm].rows) == without_wall_time(
        whole.runs[algorithm].rows
    )
    # A stopped run of other settings starts again from round 0, and so does
    # one asked for what a resume cannot carry on (a trace of every round).
    for option in ({"checkpoint_every": 2}, {"trace": "headers"}):
        (stopped / "summary.json").unlink()
        # There is a checkpoint each time: the default lr's, then lr 0.2's.
        assert (stopped / "checkpoint.pkl").is_file()
        clusterfed.compare(
            scenario,
            [algorithm],
            out=out,
            resume=True,
            overrides=["train.lr=0.2"],
            **option,
        )
    assert started == [(algorithm, 0), (algorithm, 0)]


def test_compare_writes_checkpoints_from_the_command_line(tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    args = ["compare", "quickstart", "--algorithms", "fedavg", "--rounds", "3"]
    assert main([*args, "--checkpoint-every", "1", "--out", str(out)]) == 0
    assert (out / "fedavg" / "checkpoint.pkl").is_file()


@pytest.mark.parametrize("damage", ["truncated", "of another scenario"])
def test_a_checkpoint_that_cannot_be_resumed_is_run_again_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    out = tmp_path / "cmp"
    scenario = small_scenario(rounds=3)
    clusterfed.compare(scenario, ["fedavg"], out=out, checkpoint_every=1)
    (out / "fedavg" / "summary.json").unlink()
    checkpoint = out / "fedavg" / "checkpoint.pkl"
    if damage == "truncated":
        checkpoint.write_bytes(checkpoint.read_bytes()[:-7])
    else:  # config.json still of `scenario`: only the checkpoint differs
        other = tmp_path / "other"
        clusterfed.compare(
            scenario, ["fedavg"], out=other, checkpoint_every=1, overrides=["seed=1"]
        )
        for name in ("checkpoint.pkl", "rounds.jsonl"):
            (out / "fedavg" / name).write_bytes((other / "fedavg" / name).read_bytes())
    started = _count_runs(monkeypatch)
    reason = "damaged" if damage == "truncated" else "another scenario"
    with pytest.warns(UserWarning, match=f"not resumed.*{reason}"):
        clusterfed.compare(scenario, ["fedavg"], out=out, resume=True)
    assert started == [("fedavg", 0)]


def test_resume_on_one_seed_keeps_the_finished_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "cmp"
    clusterfed.compare(small_scenario(rounds=1), ["fedavg"], out=out)
    started = _count_runs(monkeypatch)
    result = clusterfed.compare(
        small_scenario(rounds=1), ["fedavg", "fedprox"], out=out, resume=True
    )
    assert started == [("fedprox", 0)]
    assert list(json.loads((out / "comparison.json").read_text())) == [
        "fedavg",
        "fedprox",
    ]
    assert result.runs["fedavg"].out == out / "fedavg"


def test_resume_reads_a_run_of_an_older_version_with_the_defaults_added_since(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "cmp"
    clusterfed.compare(small_scenario(rounds=1), ["fedavg"], out=out)
    config_path = out / "fedavg" / "config.json"
    config = json.loads(config_path.read_text())
    # A run written before `availability` existed (its default: always).
    assert config["scenario"].pop("availability") == {"kind": "always"}
    config_path.write_text(json.dumps(config))
    started = _count_runs(monkeypatch)
    clusterfed.compare(small_scenario(rounds=1), ["fedavg"], out=out, resume=True)
    assert started == []
    config["scenario"]["availability"] = {"kind": "bernoulli", "p": 0.5}
    config_path.write_text(json.dumps(config))
    with pytest.raises(ConfigError, match=r"other settings \(availability"):
        clusterfed.compare(small_scenario(rounds=1), ["fedavg"], out=out, resume=True)


def test_resume_refuses_a_finished_run_of_other_settings_before_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "cmp"
    clusterfed.compare(small_scenario(rounds=1), ["fedavg"], seeds=[0, 1], out=out)
    started = _count_runs(monkeypatch)
    with pytest.raises(
        ConfigError,
        match=r"seed0/fedavg holds a finished run of other settings \(train.lr\)",
    ):
        clusterfed.compare(
            small_scenario(rounds=1),
            ["fedavg"],
            seeds=[0, 1],
            out=out,
            resume=True,
            overrides=["train.lr=0.5"],
        )
    assert started == []


def test_resume_refuses_a_finished_run_of_other_rounds_and_keeps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More rounds asked of a finished run: refused, not run over (its
    rounds were once read as a run that stopped early, and replaced)."""
    out = tmp_path / "cmp"
    clusterfed.compare(small_scenario(rounds=1), ["fedavg"], out=out)
    rounds = (out / "fedavg" / "rounds.jsonl").read_text()
    started = _count_runs(monkeypatch)
    with pytest.raises(
        ConfigError, match=r"fedavg holds a finished run of other settings \(rounds\)"
    ):
        clusterfed.compare(
            small_scenario(rounds=1), ["fedavg"], out=out, resume=True, rounds=2
        )
    assert started == []
    assert (out / "fedavg" / "rounds.jsonl").read_text() == rounds


def test_resume_needs_its_folder_and_no_overwrite(tmp_path: Path) -> None:
    for options in ({}, {"out": tmp_path, "overwrite": True}):
        with pytest.raises(ConfigError, match="--resume goes on with the comparison"):
            clusterfed.compare(
                small_scenario(rounds=1), ["fedavg"], resume=True, **options
            )


def test_the_plot_of_a_folder_over_seeds_draws_each_algorithm_once(
    over_seeds: CompareResult, tmp_path: Path
) -> None:
    from clusterfed.plots_runs import _runs_in

    runs = _runs_in(over_seeds.out)
    assert [label for label, _ in runs] == ["small · fedavg", "small · fedprox"] * 2
    assert main(["plot", str(over_seeds.out), "--out", str(tmp_path / "f.png")]) == 0
    assert (tmp_path / "f.png").stat().st_size > 0 and (tmp_path / "f.pdf").exists()
    # One seed's folder, and one algorithm's seeds, plot on their own too.
    seed = ["plot", str(over_seeds.out / "seed3"), "--out", str(tmp_path / "s")]
    assert main(seed) == 0 and (tmp_path / "s.png").stat().st_size > 0
    algorithm = [
        str(over_seeds.out / f"seed{s}" / "fedavg") for s in over_seeds.seeds or ()
    ]
    assert main(["plot", *algorithm, "--out", str(tmp_path / "a")]) == 0
    assert (tmp_path / "a.png").stat().st_size > 0


# -- the table -------------------------------------------------------------------


def _summary(final: float, ari: float | None = 1.0) -> dict[str, object]:
    return {
        "final_mean_acc": final,
        "final_std_acc": 0.05,
        "avg_mean_acc": 0.9,
        "avg_std_acc": 0.05,
        "n_clusters_final": 2,
        "ari_final": ari,
        "purity_final": 1.0,
    }


def test_the_table_shows_mean_and_half_width_and_a_paired_difference() -> None:
    text = seeds_table(
        {
            "fedavg": {0: _summary(0.93881), 1: _summary(0.93901)},
            "fedprox": {0: _summary(0.93862), 1: _summary(0.93880)},
        }
    )
    half = interval([0.93881, 0.93901]).half_width
    assert f"0.9389 ± {half:.4f}" in text
    # fedprox − fedavg per seed: −0.00019, −0.00021 → −0.0002 ± 0.0001.
    paired = interval([0.93862 - 0.93881, 0.93880 - 0.93901])
    assert f"{paired.mean:+.4f} ± {paired.half_width:.4f}" in text
    assert "-0.0002 ± 0.0001" in text
    assert "95% Student t interval" in text


def test_one_seed_gives_a_table_without_intervals() -> None:
    text = seeds_table({"fedavg": {4: _summary(0.9)}, "cfl": {4: _summary(0.8)}})
    rows = text.splitlines()[2:4]
    assert "±" not in "".join(rows)
    assert rows[0].split()[:3] == ["fedavg", "1", "0.9000"]
    assert "-0.1000" in rows[1] and "n=1" in text


def test_the_cli_prints_the_table_over_seeds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cmp"
    args = ["compare", "quickstart", "--algorithms", "fedavg", "--rounds", "1"]
    assert main([*args, "--clients", "4", "--seeds", "2", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    row = next(line for line in printed.splitlines() if line.startswith("fedavg"))
    assert row.split()[1] == "2" and "±" in row
    assert sorted(p.name for p in out.iterdir()) == [
        MARKER,
        "comparison.json",
        "runs.pdf",
        "runs.png",
        "seed0",
        "seed1",
        "seeds.json",
    ]
    assert list(json.loads((out / "comparison.json").read_text())) == [
        "seed0/fedavg",
        "seed1/fedavg",
    ]
