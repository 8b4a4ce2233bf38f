"""Scenario files, scripts and overrides: validated before anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterfed.errors import ScenarioError
from clusterfed.scenarios import (
    DirichletPartition,
    IIDPartition,
    load_scenario,
    plan_run,
    with_overrides,
)

TOML = """
name = "mine"
algorithm = "fedavg"
clients = 8
rounds = 2

[partition]
kind = "shards"
labels_per_client = 3

[model]
name = "mlp"
hidden = [64]

[train]
lr = 0.1

[algorithm_params.fedavg]
fraction = 0.5
"""


def test_a_toml_scenario_is_read_and_validated(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(TOML)
    scenario = load_scenario(path)
    assert scenario.clients == 8 and scenario.partition.kind == "shards"
    assert scenario.model.params == {"hidden": [64]}
    assert scenario.params_of("fedavg") == {"fraction": 0.5}
    assert scenario.train.lr == 0.1 and scenario.train.batch_size == 16


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ('name = "x"\nclients = -3', "clients"),
        ('name = "x"\nrounds = "many"', "rounds"),
        ('name = "x"\n[partition]\nkind = "stripes"', "stripes"),
        ('name = "x"\n[partition]\nkind = "dirichlet"\nalpha = 0', "alpha"),
        ('name = "x"\nalgorithm = "fedsgd"', "fedsgd"),
        ('name = "x"\n[algorithm_params.fedavg]\nfraction = 2.0', "fraction"),
        ('name = "x"\nsurprise = 1', "surprise"),
        ('name = "x"\nrounds = ', "not valid TOML"),
    ],
)
def test_errors_name_the_file_and_the_field(
    tmp_path: Path, text: str, named: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ScenarioError) as error:
        load_scenario(path)
    assert str(path) in str(error.value) and named in str(error.value)


def test_a_python_script_defines_a_scenario(tmp_path: Path) -> None:
    path = tmp_path / "script.py"
    path.write_text(
        "from clusterfed.scenarios import Scenario\n"
        "def build():\n    return Scenario(name='scripted', clients=4, rounds=1)\n"
    )
    assert load_scenario(path).name == "scripted"
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    with pytest.raises(ScenarioError, match="define `scenario"):
        load_scenario(empty)


def test_unknown_names_and_missing_files_are_scenario_errors(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="quickstart"):
        load_scenario("quickstrat")
    with pytest.raises(ScenarioError, match="no such file"):
        load_scenario(tmp_path / "absent.toml")


def test_overrides_reach_nested_fields_and_a_new_kind_starts_afresh() -> None:
    base = load_scenario("quickstart")
    changed = with_overrides(base, ["partition.alpha=0.1", "train.lr=0.2"], rounds=3)
    assert (
        changed.partition == DirichletPartition(alpha=0.1) and changed.train.lr == 0.2
    )
    assert changed.rounds == 3 and base.rounds == 30
    assert with_overrides(base, ["partition.kind=iid"]).partition == IIDPartition()
    with pytest.raises(ScenarioError, match="alpha"):
        with_overrides(base, ["partition.alpha=-1"])
    with pytest.raises(ScenarioError, match="key=value"):
        with_overrides(base, ["rounds"])


def test_class_table_client_count_must_match() -> None:
    bad = with_overrides(
        load_scenario("quickstart"),
        [
            "partition.kind=class_table",
            "partition.table=[[1,1,1,1,1,0,0,0,0,0],[0,0,0,0,0,1,1,1,1,1]]",
            "partition.clients_per_group=3",
        ],
    )
    with pytest.raises(ScenarioError, match="6 clients, scenario has 20"):
        plan_run(bad)


EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.parametrize("name", ["label_skew.toml", "planted_groups.py"])
def test_the_readme_examples_load_and_plan(name: str) -> None:
    scenario = load_scenario(EXAMPLES / name)
    plan = plan_run(scenario)
    assert len(plan.clients) == scenario.clients
    if name.endswith(".py"):
        assert sorted(set(plan.groups.values())) == [0, 1]
