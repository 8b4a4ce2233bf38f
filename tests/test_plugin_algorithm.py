"""Algorithms of one's own, outside clusterfed: `package.module:Class`, a
strategy defined in a scenario script, in both runtimes (issue 20)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import clusterfed
from clusterfed.algorithms import make
from clusterfed.cli import main
from clusterfed.errors import ConfigError
from helpers import small_scenario

SCRIPT = '''
from clusterfed.algorithms.fedavg import FedAvg
from clusterfed.scenarios import Scenario, ModelSpec


class HalfStep(FedAvg):
    """FedAvg moving half way: defined here, in the scenario script."""

    name = "half-step"

    def __init__(self, *, server_lr: float = 0.5) -> None:
        super().__init__(server_lr=server_lr)


scenario = Scenario(
    name="scripted", algorithm="half-step", clients=4, rounds=1,
    model=ModelSpec(name="mlp", hidden=[16]),
)
'''


def _accuracies(rows: list[dict[str, Any]]) -> list[list[float | None]]:
    return [[c["acc"] for c in row["clients"]] for row in rows]


def test_a_module_class_algorithm_runs_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = "run quickstart --algorithm tests_plugin:FedMedian --rounds 2 --clients 4"
    assert main([*args.split(), "--quiet", "--out", str(tmp_path)]) == 0
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["algorithm"]["class"] == "tests_plugin:FedMedian"
    assert config["algorithm"]["params"] == {"server_lr": 1.0}
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["algorithm"] == "tests_plugin:FedMedian"
    assert summary["final_mean_acc"] > 0.3


def test_unknown_algorithms_and_parameters_get_a_hint() -> None:
    with pytest.raises(ConfigError, match="did you mean 'fedavg'"):
        make("fedavgg")
    with pytest.raises(ConfigError, match="cannot import 'no_such_module'"):
        make("no_such_module:Strategy")
    with pytest.raises(ConfigError, match="has no 'FedMedain'; did you mean FedMedian"):
        make("tests_plugin:FedMedain")
    with pytest.raises(ConfigError, match="did you mean 'mu'"):
        make("fedprox", muu=0.1)


def test_own_algorithms_give_the_same_results_on_ray(tmp_path: Path) -> None:
    ray = pytest.importorskip("ray")
    script = tmp_path / "scripted.py"
    script.write_text(SCRIPT)
    plugin = small_scenario(rounds=1, algorithm="tests_plugin:FedMedian")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        for name, scenario in (("plugin", plugin), ("script", script)):
            local = clusterfed.run(scenario, out=tmp_path / name / "local")
            on_ray = clusterfed.run(
                scenario, out=tmp_path / name / "ray", runtime="ray"
            )
            assert _accuracies(local.rows) == _accuracies(on_ray.rows), name
    finally:
        ray.shutdown()


def test_fedmedian_moves_the_model_by_the_median_delta() -> None:
    # The example of docs/writing-a-strategy.md.
    import numpy as np
    from numpy.testing import assert_allclose
    from tests_plugin import FedMedian

    from clusterfed.algorithms import ClientUpdate, ServerState
    from clusterfed.types import ClientId, ClusterId

    model = np.zeros(2, dtype=np.float32)
    state = ServerState(models={ClusterId(0): model}, assignment={})
    deltas = [[1.0, -1.0], [2.0, 5.0], [100.0, 0.0]]
    updates = [
        ClientUpdate(
            ClientId(i), ClusterId(0), "ok", model, np.array(d, np.float32), 10, 1.0
        )
        for i, d in enumerate(deltas)
    ]
    new = FedMedian().aggregate(state, 0, updates, np.random.default_rng(0))
    assert_allclose(new.models[ClusterId(0)], [2.0, 0.0])
    assert state.models[ClusterId(0)] is model


def test_a_scripts_strategy_survives_garbage_collection(tmp_path: Path) -> None:
    # runpy drops the script's module: its class must not live only in
    # Strategy.__subclasses__() (weak references) until the run builds it.
    import gc

    from clusterfed.algorithms import make
    from clusterfed.scenarios import load_scenario

    script = tmp_path / "scripted.py"
    script.write_text(SCRIPT)
    scenario = load_scenario(script)
    gc.collect()
    strategy = make(scenario.algorithm)
    assert type(strategy).__name__ == "HalfStep" and strategy.server_lr == 0.5
