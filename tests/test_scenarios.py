"""Scenario files, scripts and overrides: validated before anything runs."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from clusterfed.algorithms import registry
from clusterfed.algorithms.fedavg import FedAvg
from clusterfed.data.datasets import available
from clusterfed.errors import ClusterfedError, ScenarioError
from clusterfed.scenarios import (
    BUILTIN,
    DirichletPartition,
    IIDPartition,
    load_scenario,
    plan_run,
    validate,
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


@pytest.mark.parametrize(
    ("text", "said"),
    [
        # A typo: the field, where it sits, and the closest known name.
        (
            "[train]\nepochz = 2",
            "train.epochz: unknown field 'epochz'; did you mean 'epochs'?",
        ),
        (
            "partiton = 3",
            "partiton: unknown field 'partiton'; did you mean 'partition'?",
        ),
        (
            '[partition]\nkind = "dirichlet"\nalpah = 1',
            "partition.alpah: unknown field 'alpah'; did you mean 'alpha'?",
        ),
        # Events are named as the scenario's own checks name them.
        (
            '[[events]]\nkind = "drift"\nstart = 1\ntarget = 1\n'
            '[[events]]\nkind = "straggle"\ntarget = 2\nslowdown = 3',
            "events[1] (straggle).slowdown: unknown field 'slowdown'; known: clock,",
        ),
        (
            '[[events]]\nkind = "straggle"\ntarget = 2',
            "events[0] (straggle).factor: missing (required)",
        ),
        (
            '[[events]]\nkind = "drfit"\ntarget = 2',
            "events[0]: unknown kind 'drfit'; did you mean 'drift'?",
        ),
        ('mode = "asnc"', "mode: 'asnc' is not one of 'sync', 'async'; did you mean"),
        # The offending value is shown.
        (
            "clients = -3",
            "clients: Input should be greater than or equal to 1 (got -3)",
        ),
        (
            'algorithm = "fedavgg"',
            "algorithm: unknown algorithm 'fedavgg' (did you mean",
        ),
        (
            'algorithm = "fedprox"\n[algorithm_params.fedprox]\nmux = 1',
            "algorithm_params.fedprox: fedprox has no parameter 'mux'"
            " (did you mean 'mu'?)",
        ),
    ],
)
def test_errors_say_the_field_the_value_and_the_likely_fix(
    tmp_path: Path, text: str, said: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(f'name = "x"\n{text}\n')
    with pytest.raises(ScenarioError) as error:
        load_scenario(path)
    assert said in str(error.value)


def test_a_python_script_s_errors_use_the_same_field_names(tmp_path: Path) -> None:
    path = tmp_path / "bad.py"
    path.write_text(
        "from clusterfed.scenarios import Scenario\n"
        "scenario = Scenario(name='x', events=[{'kind': 'straggle', 'target': 1,"
        " 'factor': 0}])\n"
    )
    with pytest.raises(ScenarioError) as error:
        load_scenario(path)
    assert "events[0] (straggle).factor: Input should be greater than 0 (got 0)" in str(
        error.value
    )


def test_an_override_typo_suggests_the_field_or_parameter() -> None:
    with pytest.raises(ScenarioError, match="did you mean 'rounds'"):
        with_overrides(load_scenario("quickstart"), ["round=3"])
    with pytest.raises(ScenarioError, match="did you mean 'distance'"):
        with_overrides(load_scenario("dcfl-dynamic"), ["distanse=cosine"])


# The papers' scenarios at scale; the benchmark's settings are nobody's paper
# (tests/test_benchmark.py checks them).
BENCHMARK = {n for n, f in BUILTIN.items() if f.__module__.endswith(".benchmark")}
FASHION_SCENARIOS = [n for n in BUILTIN if "fmnist" in n and n not in BENCHMARK]


def test_every_paper_has_a_fashion_mnist_variant() -> None:
    digits = {n for n in BUILTIN if n not in FASHION_SCENARIOS} - BENCHMARK
    # Not a paper's experiment on the digits: quickstart, the byzantine and
    # async demos, and the cross-device populations (Synthetic, no images).
    papers = digits - {
        "quickstart",
        "byzantine",
        "async-stragglers",
        "cross-device",
        "cross-device-clustered",
    }
    assert {f"{n}-fmnist" for n in papers} - {"dcfl-dynamic-fmnist"} <= set(
        FASHION_SCENARIOS
    )
    assert {"dcfl-fmnist", "dcfl-fmnist4"} <= set(FASHION_SCENARIOS)


@pytest.mark.parametrize("name", FASHION_SCENARIOS)
def test_a_fashion_mnist_scenario_says_what_it_stands_in_for_and_plans(
    name: str,
) -> None:
    scenario = load_scenario(name)
    assert scenario.dataset.name == "fashion_mnist"
    assert (
        "Fashion-MNIST stands in for" in scenario.description
        or "Fashion-MNIST is one of the paper's own datasets" in scenario.description
    )
    assert "Departures" in scenario.description or "does not give" in (
        scenario.description
    )
    if not available("fashion_mnist"):
        pytest.skip("dataset-fashion-mnist is not installed")
    plan = plan_run(scenario)
    assert len(plan.clients) == scenario.clients
    assert min(len(c.train) for c in plan.clients) > 0


STRATEGY_SCRIPT = """
from clusterfed.algorithms.fedavg import FedAvg
from clusterfed.scenarios import Scenario


class HalfStep(FedAvg):
    name = "loader-half-step"


class Unnamed(HalfStep):  # inherits its name: not a second algorithm
    pass


scenario = Scenario(name="scripted", algorithm="loader-half-step", clients=4)
"""


def test_a_script_s_own_strategy_outlives_the_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(registry, "_REGISTERED", {})
    path = tmp_path / "script.py"
    path.write_text(STRATEGY_SCRIPT)
    assert load_scenario(path).algorithm == "loader-half-step"
    gc.collect()  # the script's module is gone; only the registry holds the class
    cls = registry.resolve("loader-half-step")
    assert cls.__name__ == "HalfStep" and cls.__module__ == "<run_path>"
    # the built-in it imported is not registered over the package's own
    assert list(registry._REGISTERED) == ["loader-half-step"]


def test_a_script_that_raises_a_clusterfed_error_is_a_scenario_error(
    tmp_path: Path,
) -> None:
    path = tmp_path / "script.py"
    path.write_text(
        "from clusterfed.errors import ConfigError\nraise ConfigError('no data here')\n"
    )
    with pytest.raises(ScenarioError) as error:
        load_scenario(path)
    assert str(error.value) == f"{path}: no data here"


def test_a_relative_trace_path_is_read_beside_the_toml_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "here"
    folder.mkdir()
    (folder / "trace.csv").write_text("client,online_from,online_to\n0,0,inf\n")
    path = folder / "mine.toml"
    path.write_text('[availability]\nkind = "trace"\npath = "trace.csv"\n')
    monkeypatch.chdir(tmp_path)  # not the file's folder
    scenario = load_scenario(path)
    assert scenario.name == "mine"  # the file's stem
    assert scenario.availability.path == str(folder / "trace.csv")  # type: ignore[union-attr]
    assert [w.client for w in scenario.availability.windows] == [0]  # type: ignore[union-attr]
    # an absolute path is kept as written
    other = tmp_path / "elsewhere.csv"
    other.write_text("client,online_from,online_to\n1,5,inf\n")
    path.write_text(f'[availability]\nkind = "trace"\npath = "{other}"\n')
    assert load_scenario(path).availability.path == str(other)  # type: ignore[union-attr]
    path.write_text('availability = "diurnal"\n')
    assert load_scenario(path).availability.kind == "diurnal"


def test_override_values_are_read_as_toml_or_else_as_text() -> None:
    base = load_scenario("quickstart")
    changed = with_overrides(
        base,
        [
            " model.hidden = [64, 32] ",
            "train.momentum=0.5",
            "dataset.name=digits",
            'description="a b"',
            "name=plain words",
        ],
    )
    assert changed.model.params == {"hidden": [64, 32]}
    assert changed.train.momentum == 0.5 and changed.dataset.name == "digits"
    assert changed.description == "a b" and changed.name == "plain words"
    assert with_overrides(base, rounds=None).rounds == 30  # None: left as it was


def test_an_override_names_a_kind_then_sets_its_fields() -> None:
    base = load_scenario("quickstart")
    changed = with_overrides(
        base, ["availability=diurnal", "availability.period_s=100", "dp.epsilon=3"]
    )
    assert changed.availability.kind == "diurnal"
    assert changed.availability.period_s == 100.0  # type: ignore[union-attr]
    assert changed.dp is not None and changed.dp.epsilon == 3.0  # a new table
    # the same kind again keeps the table's other keys
    low = with_overrides(base, ["partition.alpha=0.1", "partition.kind=dirichlet"])
    assert low.partition == DirichletPartition(alpha=0.1)


def test_a_plain_key_sets_the_parameter_of_each_algorithm_that_has_it() -> None:
    base = load_scenario("quickstart")
    changed = with_overrides(
        base, ["fraction=0.5", "mu=0.1"], algorithms=["fedavg", "fedprox", "nosuch"]
    )
    assert changed.algorithm_params == {
        "fedavg": {"fraction": 0.5},
        "fedprox": {"fraction": 0.5, "mu": 0.1},
    }
    # by default the scenario's own algorithm
    assert with_overrides(base, ["fraction=0.5"]).algorithm_params == {
        "fedavg": {"fraction": 0.5}
    }


@pytest.mark.parametrize(
    ("assignment", "starts", "ends"),
    [
        ("rounds.x=1", "--set 'rounds.x=1': 'rounds' is not a table", ""),
        ("=1", "--set '=1': expected key=value", ""),
        (
            "zzz=1",
            "--set 'zzz=1': 'zzz' is neither a scenario field (name, description,",
            " target_accuracy) nor a parameter of fedavg",
        ),
        ("mu=1", "--set 'mu=1': 'mu' is neither", " nor a parameter of fedavg"),
    ],
)
def test_an_override_that_cannot_be_applied_is_said_whole(
    assignment: str, starts: str, ends: str
) -> None:
    with pytest.raises(ScenarioError) as error:
        with_overrides(load_scenario("quickstart"), [assignment])
    said = str(error.value)
    assert said.startswith(starts) and said.endswith(ends or starts)


def test_overrides_change_one_field_of_a_client_s_device() -> None:
    # the dump keys devices by "5" as --set does, so client 5 keeps the rest
    base = load_scenario("async-stragglers")
    changed = with_overrides(base, ["devices.5.samples_per_s=100"])
    assert changed.devices[5] == base.devices[5].model_copy(
        update={"samples_per_s": 100.0}
    )
    assert changed.devices[0] == base.devices[0]


def test_an_override_value_may_hold_an_equals_sign() -> None:
    base = load_scenario("quickstart")
    assert with_overrides(base, ["description=a=b"]).description == "a=b"


def test_override_errors_name_the_assignment_and_the_scenario() -> None:
    base = load_scenario("quickstart")
    with pytest.raises(ScenarioError) as error:
        with_overrides(base, ["algorithm_params.fedavg=3", "fraction=0.5"])
    assert str(error.value) == "--set 'fraction=0.5': 'fedavg' is not a table"
    with pytest.raises(ScenarioError) as error:
        with_overrides(base, ["mu=1"], algorithms=["fedavg", "cfl"])
    assert str(error.value).endswith(" nor a parameter of fedavg, cfl")
    with pytest.raises(ScenarioError) as error:
        with_overrides(base, ["partition.alpha=-1"])
    assert str(error.value) == (
        "scenario 'quickstart' with overrides:"
        " partition.alpha: Input should be greater than 0 (got -1)"
    )


def test_a_library_error_while_validating_names_the_source(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Refuses(FedAvg):
        def __init__(self) -> None:
            # a ClusterfedError that is no ValueError: pydantic lets it through
            raise ClusterfedError("not today")

    monkeypatch.setattr(registry, "_REGISTERED", {"refuses": Refuses})
    with pytest.raises(ScenarioError) as error:
        validate({"name": "x", "algorithm": "refuses"}, source="here.toml")
    assert str(error.value) == "here.toml: not today"


def test_an_unknown_name_lists_the_built_ins() -> None:
    with pytest.raises(ScenarioError) as error:
        load_scenario("quickstrat")
    said = str(error.value)
    assert said.startswith(
        "quickstrat: not a built-in scenario (async-stragglers, bench-dirichlet-fmnist,"
    )
    assert said.endswith(", quickstart) nor a .toml or .py file")
