"""A lazy population: K of N registered clients a round, built on demand."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

import clusterfed
from clusterfed.actors.runtimes import InlineRuntime
from clusterfed.checkpoint import read_checkpoint, snapshot_problem
from clusterfed.errors import ConfigError
from clusterfed.federation import Federation
from clusterfed.scenarios import Scenario
from helpers import read_rounds

BASE: dict[str, Any] = {
    "name": "pop",
    "dataset": {"name": "synthetic"},
    "model": {"name": "mlp", "hidden": []},
    "train": {"epochs": 1, "batch_size": 10, "lr": 0.01},
    "test_fraction": 0.1,
    "rounds": 2,
    "seed": 3,
}


def population(**changes: Any) -> Scenario:
    fields = {
        **BASE,
        "population": {"registered": 300, "per_round": 8, "max_samples": 200},
        **changes,
    }
    return Scenario.model_validate(fields)


def comparable(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "wall_time"} for r in rows]


def test_rows_hold_the_participants_only_the_same_in_every_runtime(
    tmp_path: Path,
) -> None:
    scenario = population(availability="diurnal")
    inline = clusterfed.run(scenario, out=tmp_path / "a", runtime=InlineRuntime())
    local = clusterfed.run(scenario, out=tmp_path / "b", runtime="local", workers=2)
    assert comparable(inline.rows) == comparable(local.rows)
    for row in inline.rows:
        ids = [c["id"] for c in row["clients"]]
        assert len(ids) == 8 and all(0 <= c < 300 for c in ids)
        assert all(c["trained"] for c in row["clients"])
    # Rounds draw their own samples.
    first, second = ([c["id"] for c in r["clients"]] for r in inline.rows)
    assert first != second


def test_a_spec_cache_of_one_gives_the_rows_of_a_cache_of_everyone(
    tmp_path: Path,
) -> None:
    small = population(
        population={"registered": 12, "per_round": 6, "cached_specs": 1}, rounds=3
    )
    big = population(
        population={"registered": 12, "per_round": 6, "cached_specs": 12}, rounds=3
    )
    a = clusterfed.run(small, out=tmp_path / "a", runtime=InlineRuntime())
    b = clusterfed.run(big, out=tmp_path / "b", runtime=InlineRuntime())
    assert comparable(a.rows) == comparable(b.rows)


def test_a_million_registered_clients_cost_their_ids_until_sampled(
    tmp_path: Path,
) -> None:
    scenario = population(
        population={"registered": 1_000_000, "per_round": 5, "max_samples": 100},
        rounds=1,
    )
    began = time.perf_counter()
    federation = Federation(
        scenario, InlineRuntime(), tmp_path, config={"scenario": {}}
    )
    assert time.perf_counter() - began < 10
    people = federation.population
    assert people is not None and people.built == 0
    assert people.cluster.dtype == np.int16 and people.cluster.nbytes == 2_000_000
    assert people.last_round.dtype == np.int32
    assert federation.server.roster.members == {}


def test_the_compact_arrays_remember_who_took_part_and_where(tmp_path: Path) -> None:
    scenario = population(
        algorithm="ifca",
        algorithm_params={"ifca": {"clusters": 2}},
        transform={"kind": "label_permutation", "groups": 2},
        rounds=2,
    )
    federation = Federation(
        scenario, InlineRuntime(), tmp_path, config={"scenario": {}}
    )

    async def go() -> list[dict[str, Any]]:
        await federation.start()
        rows = [await federation.step(r) for r in range(2)]
        await federation.close()
        return rows

    import asyncio

    rows = asyncio.run(go())
    people = federation.population
    assert people is not None
    took_part = {
        c["id"]: (r["round"], c["cluster"]) for r in rows for c in r["clients"]
    }
    for cid, (round, cluster) in took_part.items():
        assert people.last_round[cid] == round and people.cluster[cid] == cluster
    others = np.setdiff1d(np.arange(300), list(took_part))
    assert np.all(people.last_round[others] == -1)
    assert np.all(people.cluster[others] == -1)
    assert len(federation.server.roster.members) == 0  # everyone left again
    for row in rows:
        assert {c["group"] for c in row["clients"]} <= {0, 1}
        assert row["ari"] is not None
        assert all(c["group"] == c["id"] % 2 for c in row["clients"])


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"dataset": {"name": "digits"}}, "is not procedural"),
        ({"algorithm": "dcfl"}, "keeps client history"),
        ({"algorithm_params": {"fedavg": {"fraction": 0.5}}}, "would sample again"),
        ({"events": [{"kind": "leave", "start": 1, "target": 0}]}, "events is not"),
        ({"transform": {"kind": "rotation"}}, "no images to rotate"),
        (
            {"population": {"registered": 10, "per_round": 2, "fraction": 0.5}},
            "one of per_round",
        ),
        ({"population": {"registered": 10}}, "one of per_round"),
    ],
)
def test_what_a_population_cannot_run_is_refused_by_name(
    changes: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        population(**changes)


def clustered_population(rounds: int) -> Scenario:
    return population(
        algorithm="ifca",
        algorithm_params={"ifca": {"clusters": 2}},
        transform={"kind": "label_permutation", "groups": 2},
        rounds=rounds,
    )


def test_a_resumed_population_run_writes_the_rounds_of_an_uninterrupted_one(
    tmp_path: Path,
) -> None:
    scenario = clustered_population(rounds=5)
    first = clusterfed.run(scenario, out=tmp_path, workers=2, checkpoint_every=2)
    checkpoint = read_checkpoint(tmp_path)
    assert checkpoint.rounds_done == 4
    kept = checkpoint.federation["population"]
    assert kept is not None and len(kept["cluster"]) == 300
    # The arrays as the rows of the first four rounds left them.
    for row in first.rows[:4]:
        for c in row["clients"]:
            assert kept["last_round"][c["id"]] >= row["round"]
    assert int(kept["last_round"].max()) == 3
    # As if it had been killed while writing round 5's row:
    (tmp_path / "summary.json").unlink()
    with (tmp_path / "rounds.jsonl").open("a") as stream:
        stream.write('{"round": 4, "sim_ti')
    resumed = clusterfed.resume(tmp_path, workers=1)
    assert comparable(read_rounds(tmp_path)) == comparable(first.rows)
    assert comparable(resumed.rows) == comparable(first.rows)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda p: p.update(cluster=p["cluster"][:10]), "differ in length"),
        (
            lambda p: p.update(cluster=p["cluster"].astype(np.int64)),
            "not an array of int16",
        ),
        (lambda p: p["last_round"].__setitem__(0, -5), "holds -5"),
        (lambda p: p.pop("last_round"), "lacks last_round"),
    ],
)
def test_a_damaged_population_snapshot_is_refused(
    tmp_path: Path, damage: Any, message: str
) -> None:
    clusterfed.run(clustered_population(rounds=3), out=tmp_path, checkpoint_every=1)
    checkpoint = read_checkpoint(tmp_path)
    population_part = checkpoint.federation["population"]
    assert population_part is not None
    damage(population_part)
    problem = snapshot_problem(checkpoint.federation)
    assert problem is not None and message in problem


def test_a_population_checkpoint_must_fit_the_scenario(tmp_path: Path) -> None:
    clusterfed.run(clustered_population(rounds=3), out=tmp_path, checkpoint_every=1)
    checkpoint = read_checkpoint(tmp_path)
    bigger = population(
        population={"registered": 400, "per_round": 8, "max_samples": 200}
    )
    federation = Federation(bigger, InlineRuntime(), tmp_path / "x", config={})
    federation.first_round = checkpoint.rounds_done
    with pytest.raises(ConfigError, match="registers 300 clients, the scenario 400"):
        federation.restore(checkpoint.federation)
    plain = Federation(
        Scenario.model_validate({**BASE, "dataset": {"name": "digits"}}),
        InlineRuntime(),
        tmp_path / "y",
        config={},
    )
    with pytest.raises(ConfigError, match="with a population, this scenario has none"):
        plain.restore(checkpoint.federation)


def test_the_cross_device_scenarios_are_what_their_descriptions_say() -> None:
    from clusterfed.scenarios import BUILTIN

    plain, clustered = BUILTIN["cross-device"](), BUILTIN["cross-device-clustered"]()
    for scenario in (plain, clustered):
        assert scenario.population is not None
        assert scenario.population.registered == 1_000_000
        assert scenario.population.k == 1_000
        assert scenario.availability.kind == "diurnal"
        assert scenario.rounds == 20
        assert "1 local epoch" in plain.description
    assert plain.dataset.name == "synthetic_1_1"
    # One shared model, so that a label permutation makes a concept.
    assert clustered.dataset.name == "synthetic_iid"
    assert plain.algorithm == "fedavg"
    assert clustered.algorithm == "ifca"
    assert clustered.params_of("ifca") == {"clusters": 4}
    assert clustered.transform_groups() == 4


def test_cross_device_runs_scaled_down_through_overrides(tmp_path: Path) -> None:
    result = clusterfed.run(
        "cross-device-clustered",
        out=tmp_path,
        runtime=InlineRuntime(),
        rounds=2,
        overrides=["population.registered=5000", "population.per_round=12"],
    )
    assert [len(r["clients"]) for r in result.rows] == [12, 12]
    assert all(r["ari"] is not None for r in result.rows)
    assert result.summary["ari_final"] is not None


def test_rows_summary_writes_each_rounds_participants_as_a_digest(
    tmp_path: Path,
) -> None:
    from clusterfed.cli import main

    full = clusterfed.run(population(), out=tmp_path / "full", runtime=InlineRuntime())
    code = main(
        [
            "run",
            "cross-device",
            "--rounds",
            "2",
            "--rows",
            "summary",
            "--out",
            str(tmp_path / "digest"),
            "--seed",
            "3",
            "--set",
            "population.registered=300",
            "--set",
            "population.per_round=8",
            "--set",
            "population.max_samples=200",
        ]
    )
    assert code == 0
    import json

    written = [
        json.loads(line)
        for line in (tmp_path / "digest" / "rounds.jsonl").read_text().splitlines()
    ]
    assert [r["clients"] for r in written] == [[], []]
    assert [r["participants"]["n"] for r in written] == [8, 8]
    assert all(r["participants"]["mean_acc"] is not None for r in written)
    config = json.loads((tmp_path / "digest" / "config.json").read_text())
    assert config["scenario"]["rows"] == "summary"
    assert (
        "rows"
        not in json.loads((tmp_path / "full" / "config.json").read_text())["scenario"]
    )
    summary = json.loads((tmp_path / "digest" / "summary.json").read_text())
    assert summary["final_mean_acc"] == pytest.approx(
        written[-1]["participants"]["mean_acc"]
    )
    assert len(full.rows[0]["clients"]) == 8


def test_a_sampled_client_trains_on_its_own_generated_rows(tmp_path: Path) -> None:
    from clusterfed.actors.spec import build_trainer
    from clusterfed.data.synthetic import SyntheticParams, generate
    from clusterfed.scenarios import plan_run
    from clusterfed.scenarios.population import Population

    scenario = population(transform={"kind": "label_permutation", "groups": 2})
    people = Population(plan_run(scenario))
    spec = people.client_spec(5)  # group 1: its labels are permuted
    assert people.client_spec(5) is spec and people.built == 1
    trainer = build_trainer(spec)
    rows = generate(spec.seed, 5, SyntheticParams(), n=len(spec.train) + len(spec.test))
    n_train = len(spec.train)
    assert len(spec.test) == max(1, round(0.1 * (n_train + len(spec.test))))
    np.testing.assert_array_equal(trainer._x_train.gather().numpy(), rows.x[:n_train])
    permutation = np.asarray(spec.label_permutation)
    assert permutation.tolist() != list(range(10))
    np.testing.assert_array_equal(
        trainer.y_train.numpy(), permutation[rows.y[:n_train]]
    )
    np.testing.assert_array_equal(trainer.y_test.numpy(), permutation[rows.y[n_train:]])
