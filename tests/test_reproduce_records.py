"""What a reproduction record says its accuracies were measured on
(bench/reproduce/records.py): runs scored on test sets and runs scored on
their hold-out never share a record, a record from before clients had test
sets is re-run on a dataset that has a test split, and the page says which
experiments are on which."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from reproduce import ocfl  # noqa: E402
from reproduce.page import accuracy_words  # noqa: E402
from reproduce.records import (  # noqa: E402
    load,
    pending,
    planned_rounds,
    recorded,
    save,
)
from reproduce.runner import (  # noqa: E402
    HOLD_OUT,
    TEST_SETS,
    Experiment,
    Outcome,
    make_outcome,
    measured_on,
)

EXPERIMENT = ocfl.EXPERIMENTS[0]


def rows(val_acc: bool) -> list[dict[str, Any]]:
    client: dict[str, Any] = {"id": 0, "acc": 0.5}
    if val_acc:
        client["val_acc"] = 0.6
    return [{"round": 0, "clients": [client]}]


def outcome(
    dataset: str,
    seeds: list[int],
    tested: bool,
    rounds: int | None = None,
    experiment: Experiment = EXPERIMENT,
    algorithms: tuple[str, ...] | None = None,
) -> Outcome:
    """Runs of `experiment` of `rounds` rounds (default: its scenario's), of
    `algorithms` (default: all of the experiment's)."""
    rounds = rounds or planned_rounds(experiment, dataset, False)
    algorithms = algorithms or experiment.algorithms
    summaries = {
        a: {
            s: {"final_mean_acc": 0.5 + s / 10, "wall_s": 1.0, "rounds": rounds}
            for s in seeds
        }
        for a in algorithms
    }
    seed_rows = {a: {s: rows(tested) for s in seeds} for a in algorithms}
    return make_outcome(
        experiment,
        dataset,
        1.0,
        summaries,
        seed_rows,
        Path("/tmp/runs"),
        False,
        measured_on(seed_rows),
    )


def seeds_recorded(records: Path, dataset: str, experiment: Experiment) -> set[int]:
    """The seeds of which the record holds a run of every algorithm."""
    found = recorded(records, False)(dataset, experiment)
    names = experiment.algorithms
    return set.intersection(*(found.get(a, set()) for a in names))


def two_quick_experiments() -> list[Experiment]:
    """ "first" and "second": one round of FedAvg on 4 quickstart clients."""
    return [
        Experiment(
            key=key,
            scenario="quickstart",
            algorithms=("fedavg",),
            sets=("clients=4",),
            quick_rounds=1,
        )
        for key in ("first", "second")
    ]


def test_measured_on_reads_the_rows() -> None:
    assert measured_on({"a": {0: rows(True)}, "b": {0: rows(True)}}) == TEST_SETS
    assert measured_on({"a": {0: rows(False)}}) == HOLD_OUT
    with pytest.raises(ValueError, match="hold-out"):
        measured_on({"a": {0: rows(True), 1: rows(False)}})


def test_a_record_keeps_what_its_accuracy_was_measured_on(tmp_path: Path) -> None:
    path = save(outcome("fashion_mnist", [0, 1], tested=True), tmp_path)
    (back,) = load(tmp_path, [EXPERIMENT], ["fashion_mnist"], quick=False)
    assert back.accuracy == TEST_SETS
    assert seeds_recorded(tmp_path, "fashion_mnist", EXPERIMENT) == {0, 1}
    # A record from before the field: its accuracies are the hold-out's, so a
    # dataset with a test split has none of its seeds recorded (re-run)...
    record = json.loads(gzip.decompress(path.read_bytes()))
    del record["accuracy"]
    path.write_bytes(gzip.compress(json.dumps(record).encode()))
    (old,) = load(tmp_path, [EXPERIMENT], ["fashion_mnist"], quick=False)
    assert old.accuracy == HOLD_OUT
    assert seeds_recorded(tmp_path, "fashion_mnist", EXPERIMENT) == set()
    # ... and a new seed replaces the record rather than joining it.
    save(outcome("fashion_mnist", [2], tested=True), tmp_path)
    (new,) = load(tmp_path, [EXPERIMENT], ["fashion_mnist"], quick=False)
    assert new.seeds == (2,) and new.accuracy == TEST_SETS


def test_records_load_in_the_order_the_experiments_are_listed(
    tmp_path: Path,
) -> None:
    # The files sort as ocfl-iid, ocfl-noniid, ocfl-noniid2; a page lists
    # them in its own order (the DP study's batch 16, 64, 256 sorted by file
    # name read 16, 256, 64).
    listed = [e for e in ocfl.EXPERIMENTS if e.key != "ocfl-merge"][::-1]
    assert [e.key for e in listed] != sorted(e.key for e in listed)
    for experiment in listed:
        save(outcome("digits", [0], False, experiment=experiment), tmp_path)
    back = load(tmp_path, listed, ["digits"], quick=False)
    assert [o.experiment.key for o in back] == [e.key for e in listed]


def test_a_record_of_other_rounds_than_its_scenario_has_is_run_again(
    tmp_path: Path,
) -> None:
    # A built-in scenario whose rounds changed after its record was made
    # (the command, which names the scenario, reads the same).
    rounds = planned_rounds(EXPERIMENT, "digits", False)
    save(outcome("digits", [0, 1], tested=False, rounds=rounds - 10), tmp_path)
    assert seeds_recorded(tmp_path, "digits", EXPERIMENT) == set()
    assert load(tmp_path, [EXPERIMENT], ["digits"], quick=False) == []
    save(outcome("digits", [2], tested=False), tmp_path)
    (new,) = load(tmp_path, [EXPERIMENT], ["digits"], quick=False)
    assert new.seeds == (2,)
    assert seeds_recorded(tmp_path, "digits", EXPERIMENT) == {2}


def test_digits_records_stay_on_the_hold_out(tmp_path: Path) -> None:
    save(outcome("digits", [0], tested=False), tmp_path)
    save(outcome("digits", [1], tested=False), tmp_path)
    (back,) = load(tmp_path, [EXPERIMENT], ["digits"], quick=False)
    assert back.seeds == (0, 1) and back.accuracy == HOLD_OUT


def test_the_page_says_which_experiments_are_on_which() -> None:
    tested = outcome("fashion_mnist", [0], tested=True)
    held = outcome("fashion_mnist", [0], tested=False)
    assert "own test set" in accuracy_words([tested])
    assert "holds out from training" in accuracy_words([held])
    assert "own test set" not in accuracy_words([held])
    mixed = accuracy_words([tested, held])
    assert f"({EXPERIMENT.key})" in mixed and "own test set" in mixed


def test_every_seed_keeps_its_final_round_clients_and_their_clusters(
    tmp_path: Path,
) -> None:
    def run_rows(seed: int) -> list[dict[str, Any]]:
        return [
            {
                "round": r,
                "clients": [{"id": 0, "acc": 0.1 * r + seed, "cluster": 4, "loss": 1}],
            }
            for r in range(3)
        ]

    rounds = planned_rounds(EXPERIMENT, "digits", False)
    summaries = {
        a: {s: {"final_mean_acc": 0.5, "wall_s": 1.0, "rounds": rounds} for s in (0, 1)}
        for a in EXPERIMENT.algorithms
    }
    seed_rows = {a: {s: run_rows(s) for s in (0, 1)} for a in EXPERIMENT.algorithms}
    made = make_outcome(
        EXPERIMENT, "digits", 1.0, summaries, seed_rows, Path("/tmp/runs"), False
    )
    save(made, tmp_path)
    (back,) = load(tmp_path, [EXPERIMENT], ["digits"], quick=False)
    first, second = (back.seed_rows[EXPERIMENT.algorithms[0]][s] for s in (0, 1))
    # The first seed: every round's clients (the figures'), clusters at the end.
    assert [r["clients"] for r in first[:2]] == [
        [{"id": 0, "acc": 0.0}],
        [{"id": 0, "acc": 0.1}],
    ]
    assert first[-1]["clients"] == [{"id": 0, "acc": 0.2, "cluster": 4}]
    # Later seeds: the final round's alone.
    assert ["clients" in r for r in second] == [False, False, True]
    assert second[-1]["clients"] == [{"id": 0, "acc": 1.2, "cluster": 4}]


def _sitting_parser(tmp_path: Path, records: Path) -> Any:
    from reproduce import sitting

    return sitting.sitting_parser(
        "a sitting",
        quick="smoke test",
        out=str(tmp_path / "runs"),
        records_folder=records,
        only="keys",
    )


def test_a_quick_sitting_keeps_its_records_beside_its_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from reproduce import sitting

    parser = _sitting_parser(tmp_path, tmp_path / "docs")
    folders: list[Path] = []

    def load_from(folder: Path, *_: Any) -> list[Outcome]:
        folders.append(folder)
        return []

    monkeypatch.setattr(sitting.records, "load", load_from)
    for argv in (
        ["--quick", "--no-run"],
        ["--no-run"],
        ["--quick", "--no-run", "--records", str(tmp_path / "named")],
    ):
        sitting.sit(parser, parser.parse_args(argv), [], "digits")
    # --quick with the default folder writes beside its runs, never into
    # docs/records; a folder named on the command line is used as named.
    assert folders == [
        tmp_path / "runs-quick" / "records",
        tmp_path / "docs",
        tmp_path / "named",
    ]


def test_a_quick_reproduction_never_writes_over_a_committed_page() -> None:
    from reproduce.cli import default_page
    from reproduce.runner import ROOT

    assert default_page(True, ["digits"], "runs/x") == Path("runs/x/REPRODUCTION.md")
    assert default_page(True, ["fashion_mnist"], "o") == Path("o/REPRODUCTION.md")
    docs = ROOT / "docs"
    assert default_page(False, ["digits"], "o") == docs / "REPRODUCTION.md"
    assert (
        default_page(False, ["fashion_mnist"], "o") == docs / "REPRODUCTION-fmnist.md"
    )
    both = default_page(False, ["digits", "fashion_mnist"], "o")
    assert both == docs / "REPRODUCTION.md"


def test_a_sitting_whose_records_hold_every_seed_runs_nothing_and_ends_well(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from reproduce import cli

    save(outcome("digits", [0, 1], tested=False), tmp_path / "records")
    out = tmp_path / "runs"  # never made: nothing runs
    monkeypatch.setattr(
        sys,
        "argv",
        ["reproduce.py", "--datasets", "digits", "--seeds", "2", "--resume"]
        + ["--records", str(tmp_path / "records"), "--out", str(out)]
        + ["--only", EXPERIMENT.key, "--page", str(tmp_path / "P.md")],
    )
    cli.main()
    assert (out / "reproduce.json").exists()
    assert EXPERIMENT.key in (tmp_path / "P.md").read_text()


def test_a_record_of_a_scenario_edited_since_is_run_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from clusterfed.scenarios import BUILTIN
    from clusterfed.scenarios.loader import with_overrides

    save(outcome("digits", [0, 1], tested=False), tmp_path)
    assert seeds_recorded(tmp_path, "digits", EXPERIMENT) == {0, 1}
    # The command names the scenario, not what it holds: an edit that keeps
    # the rounds (a DP study choosing another batch) must not pass for it.
    name = EXPERIMENT.scenario_for("digits")
    original = BUILTIN[name]
    for edit in ("train.batch_size=64", "aggregator=median", "partition.kind=shards"):
        # A value, and a kind whose fields stay at their defaults.
        monkeypatch.setitem(
            BUILTIN, name, lambda e=edit: with_overrides(original(), [e])
        )
        assert seeds_recorded(tmp_path, "digits", EXPERIMENT) == set(), edit
        assert load(tmp_path, [EXPERIMENT], ["digits"], quick=False) == [], edit
    # A description's words are not what the runs are made of.
    monkeypatch.setitem(
        BUILTIN, name, lambda: original().model_copy(update={"description": "new"})
    )
    assert seeds_recorded(tmp_path, "digits", EXPERIMENT) == {0, 1}
    # A record from before the digest is judged by its command and rounds.
    path = tmp_path / "digits" / f"{EXPERIMENT.key}.json.gz"
    record = json.loads(gzip.decompress(path.read_bytes()))
    del record["scenario"]
    path.write_bytes(gzip.compress(json.dumps(record).encode()))
    assert seeds_recorded(tmp_path, "digits", EXPERIMENT) == {0, 1}
    (back,) = load(tmp_path, [EXPERIMENT], ["digits"], quick=False)
    assert back.seeds == (0, 1)


def test_a_set_that_pins_a_value_the_scenario_had_keeps_the_record(
    tmp_path: Path,
) -> None:
    from dataclasses import replace

    from clusterfed.scenarios import load_scenario

    save(outcome("digits", [0, 1], tested=False), tmp_path)
    batch = load_scenario(EXPERIMENT.scenario_for("digits")).train.batch_size
    pinned = replace(EXPERIMENT, sets=(*EXPERIMENT.sets, f"train.batch_size={batch}"))
    assert pinned.command(False, "digits") != EXPERIMENT.command(False, "digits")
    # The runs are made of the same scenario: resumed, and new seeds join.
    assert seeds_recorded(tmp_path, "digits", pinned) == {0, 1}
    save(outcome("digits", [2], tested=False, experiment=pinned), tmp_path)
    (back,) = load(tmp_path, [pinned], ["digits"], quick=False)
    assert back.seeds == (0, 1, 2)
    # A set that changes the value is another experiment.
    moved = replace(
        EXPERIMENT, sets=(*EXPERIMENT.sets, f"train.batch_size={2 * batch}")
    )
    assert seeds_recorded(tmp_path, "digits", moved) == set()
    # So is another algorithm list, whatever the scenario.
    fewer = replace(EXPERIMENT, algorithms=EXPERIMENT.algorithms[:1])
    assert seeds_recorded(tmp_path, "digits", fewer) == set()
    # A record from before the scenario was kept has only its command to go
    # by: there, the wording of the sets decides.
    path = tmp_path / "digits" / f"{EXPERIMENT.key}.json.gz"
    record = json.loads(gzip.decompress(path.read_bytes()))
    del record["scenario"]
    path.write_bytes(gzip.compress(json.dumps(record).encode()))
    assert seeds_recorded(tmp_path, "digits", pinned) == {0, 1, 2}
    assert seeds_recorded(tmp_path, "digits", EXPERIMENT) == set()


def test_a_sitting_records_each_experiment_as_soon_as_it_has_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A sitting of many experiments (the Byzantine table, the DP study) can
    # outlast a working session: what finished must be in the records by
    # then, not after the last experiment.
    from reproduce import sitting

    parser = _sitting_parser(tmp_path, tmp_path / "records")
    first, second = ocfl.EXPERIMENTS[0], ocfl.EXPERIMENTS[1]

    def run_all(*_: Any, on_outcome: Any, **__: Any) -> list[Outcome]:
        on_outcome(outcome("digits", [0], tested=False, experiment=first))
        raise KeyboardInterrupt  # the session ends during the second

    monkeypatch.setattr(sitting, "run_all", run_all)
    with pytest.raises(KeyboardInterrupt):
        sitting.sit(parser, parser.parse_args([]), [first, second], "digits")
    assert seeds_recorded(tmp_path / "records", "digits", first) == {0}
    assert seeds_recorded(tmp_path / "records", "digits", second) == set()


def test_run_all_hands_over_each_outcome_before_the_next_experiment(
    tmp_path: Path,
) -> None:
    from reproduce.runner import run_all

    quick = two_quick_experiments()
    seen: list[tuple[str, bool]] = []

    def on_outcome(done: Outcome) -> None:
        # Whether the other experiment had started when this one was handed.
        seen.append((done.experiment.key, (tmp_path / "digits" / "second").exists()))

    outcomes = run_all(quick, True, tmp_path, [], ["digits"], on_outcome=on_outcome)
    assert seen == [("first", False), ("second", True)]
    assert [o.experiment.key for o in outcomes] == ["first", "second"]


def test_a_claimed_experiment_is_refused_to_a_second_sitting_until_let_go(
    tmp_path: Path,
) -> None:
    from reproduce.records import claims

    claim = claims(tmp_path, False)
    other = ocfl.EXPERIMENTS[1]
    with claim("digits", EXPERIMENT) as mine:
        assert mine
        with claim("digits", EXPERIMENT) as theirs:
            assert not theirs
        with claims(tmp_path, True)("digits", EXPERIMENT) as quick:
            assert quick  # --quick's record is another record
        with claim("digits", other) as next_one:
            assert next_one
    with claim("digits", EXPERIMENT) as again:
        assert again


def test_run_all_skips_what_another_sitting_runs_and_reads_seeds_under_the_claim(
    tmp_path: Path,
) -> None:
    import contextlib
    from collections.abc import Iterator

    from reproduce.records import claims
    from reproduce.runner import run_all

    quick = two_quick_experiments()
    held = claims(tmp_path / "records", True)
    events: list[str] = []

    @contextlib.contextmanager
    def claim(dataset: str, experiment: Experiment) -> Iterator[bool]:
        with held(dataset, experiment) as mine:
            events.append(f"claim {experiment.key}")
            yield mine
            events.append(f"let go {experiment.key}")

    def recorded(_: str, experiment: Experiment) -> dict[str, set[int]]:
        events.append(f"seeds of {experiment.key}")
        return {}

    with held("digits", quick[0]):  # another sitting runs "first"
        outcomes = run_all(
            quick, True, tmp_path, [], ["digits"], recorded=recorded, claim=claim
        )
    assert [o.experiment.key for o in outcomes] == ["second"]
    assert not (tmp_path / "digits" / "first").exists()
    assert events == [
        "claim first",
        "let go first",
        "claim second",
        "seeds of second",
        "let go second",
    ]


def test_a_record_grows_run_by_run_and_shows_a_seed_once_it_is_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A run of hours is kept when it ends: a working session (and the
    # machine) may end before its seed's other algorithms have run.
    first, second = EXPERIMENT.algorithms
    save(outcome("digits", [0], False, algorithms=(first,)), tmp_path)
    assert recorded(tmp_path, False)("digits", EXPERIMENT) == {first: {0}}
    assert load(tmp_path, [EXPERIMENT], ["digits"], quick=False) == []
    assert "no seed has a run of every algorithm" in capsys.readouterr().err
    save(outcome("digits", [0, 1], False, algorithms=(second,)), tmp_path)
    found = recorded(tmp_path, False)("digits", EXPERIMENT)
    assert found == {first: {0}, second: {0, 1}}
    (back,) = load(tmp_path, [EXPERIMENT], ["digits"], quick=False)
    # Seed 1 waits for its first algorithm; the cost is the shown runs'.
    assert back.seeds == (0,) and back.seconds == 2.0
    assert set(back.seed_summaries[second]) == {0}
    save(outcome("digits", [1], False, algorithms=(first,)), tmp_path)
    (whole,) = load(tmp_path, [EXPERIMENT], ["digits"], quick=False)
    assert whole.seeds == (0, 1) and whole.seconds == 4.0
    assert whole.seed_summaries[first][1]["final_mean_acc"] == 0.6


def test_run_all_runs_only_the_runs_not_recorded_and_hands_over_each(
    tmp_path: Path,
) -> None:
    from dataclasses import replace

    from reproduce.runner import run_all

    from clusterfed.comparison import compare

    # `mu` is fedprox's alone: resolved against both algorithms, as one
    # comparison of the two would, even for FedAvg's run on its own.
    (two,) = [
        replace(e, algorithms=("fedprox", "fedavg"), sets=("clients=4", "mu=0.5"))
        for e in two_quick_experiments()[:1]
    ]
    handed: list[set[str]] = []

    def on_outcome(done: Outcome) -> None:
        handed.append(set(done.seed_summaries))

    (ran,) = run_all([two], True, tmp_path / "a", [], ["digits"], on_outcome=on_outcome)
    assert handed == [{"fedprox"}, {"fedprox", "fedavg"}]
    together = compare(
        "quickstart",
        ["fedprox", "fedavg"],
        out=tmp_path / "together",
        rounds=1,
        overrides=["clients=4", "mu=0.5"],
    ).summaries
    for name in ("fedavg", "fedprox"):
        alone = ran.seed_summaries[name][0]
        assert alone["final_mean_acc"] == together[name]["final_mean_acc"], name
    handed.clear()
    (rest,) = run_all(
        [two],
        True,
        tmp_path / "b",
        [],
        ["digits"],
        recorded=lambda _, __: {"fedprox": {0}},
        on_outcome=on_outcome,
    )
    assert handed == [{"fedavg"}]
    assert not (tmp_path / "b" / "digits" / "first" / "fedprox").exists()
    again = rest.seed_summaries["fedavg"][0]["final_mean_acc"]
    assert again == ran.seed_summaries["fedavg"][0]["final_mean_acc"]


def test_the_page_names_what_its_records_still_lack(tmp_path: Path) -> None:
    first, second = EXPERIMENT.algorithms
    other, never, merge = ocfl.EXPERIMENTS[1], ocfl.EXPERIMENTS[2], ocfl.MERGE
    save(outcome("digits", [0], False, experiment=other), tmp_path)
    save(outcome("digits", [0, 1], False, algorithms=(first,)), tmp_path)
    save(outcome("digits", [0], False, algorithms=(second,)), tmp_path)
    listed = [EXPERIMENT, other, never, merge]
    # The merge experiment is Fashion-MNIST's alone: none of it is missing.
    assert pending(tmp_path, listed, "digits", False, seeds=2) == [
        f"Not recorded yet on digits: `{never.key}`.",
        "Recorded in part on digits (a seed is shown once every algorithm has"
        f" its run): `{EXPERIMENT.key}` (3 of 4 runs), `{other.key}` (2 of 4 runs).",
    ]
    save(outcome("digits", [1], False, algorithms=(second,)), tmp_path)
    save(outcome("digits", [1], False, experiment=other), tmp_path)
    assert pending(tmp_path, listed[:2], "digits", False, seeds=2) == []
    assert pending(tmp_path, listed[:2], "digits", False, seeds=3) == [
        "Recorded in part on digits (a seed is shown once every algorithm has"
        f" its run): `{EXPERIMENT.key}` (4 of 6 runs), `{other.key}` (4 of 6 runs)."
    ]


@pytest.mark.parametrize(
    ("argv", "out"),
    [
        (["--quick"], "runs-quick"),
        (["--quick", "--out", "mine"], "mine"),
        (["--out", "mine", "--quick"], "mine"),
        (["--out", "runs", "--quick"], "runs"),  # the default, but named
        ([], "runs"),
    ],
)
def test_a_smoke_test_runs_apart_from_the_full_runs_unless_told_where(
    tmp_path: Path, argv: list[str], out: str
) -> None:
    """--resume refuses a finished run of other rounds: a smoke test's short
    runs left in the full runs' folder would stop the next sitting there."""
    parser = _sitting_parser(tmp_path, tmp_path / "docs")
    in_tmp = [str(tmp_path / a) if a == "runs" else a for a in argv]
    named = out if out == "mine" else str(tmp_path / out)
    assert parser.parse_args(in_tmp).out == named
