"""FedProx: FedAvg plus the proximal term μ/2·‖w − w_global‖² on the clients."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import clusterfed
from clusterfed.actors import build_trainer
from clusterfed.algorithms import ClientUpdate, ServerState, make
from clusterfed.protocol import TrainConfig
from clusterfed.scenarios import plan_run
from clusterfed.types import ClientId, ClusterId
from helpers import read_rounds, small_scenario


def test_fedprox_sends_mu_and_changes_nothing_else() -> None:
    base = TrainConfig(lr=0.1, epochs=3)
    config = make("fedprox", mu=0.5).train_config(base)
    assert config.mu == 0.5
    assert config.model_dump(exclude={"mu"}) == base.model_dump(exclude={"mu"})
    assert make("fedprox").train_config(base).mu == 0.01


@pytest.mark.parametrize("mu", [-0.1, float("nan"), float("inf")])
def test_a_bad_mu_is_refused_naming_the_value(mu: float) -> None:
    with pytest.raises(ValueError, match=f"mu must be .*{mu}"):
        make("fedprox", mu=mu)


def test_fedprox_with_mu_zero_is_fedavg_exactly(tmp_path: Path) -> None:
    changes = dict(
        rounds=3,
        algorithm_params={
            "fedprox": {"mu": 0.0, "fraction": 0.5},
            "fedavg": {"fraction": 0.5},
        },
    )
    clusterfed.run(small_scenario(algorithm="fedavg", **changes), out=tmp_path / "a")
    clusterfed.run(small_scenario(algorithm="fedprox", **changes), out=tmp_path / "p")
    fedavg, fedprox = read_rounds(tmp_path / "a"), read_rounds(tmp_path / "p")
    for row in fedavg + fedprox:
        row.pop("wall_time")  # the one field that measures the machine
    assert fedavg == fedprox


def test_a_positive_mu_pulls_the_delta_towards_the_received_model() -> None:
    plan = plan_run(small_scenario())
    trainer = build_trainer(plan.clients[0])
    weights = plan.initial
    config = TrainConfig(lr=0.05, momentum=0.9, batch_size=16, epochs=3)
    plain = trainer.train(weights, config, round=0).delta
    again = trainer.train(weights, config, round=0).delta
    proximal = trainer.train(weights, config.model_copy(update={"mu": 1.0}), 0).delta
    np.testing.assert_array_equal(plain, again)
    assert not np.array_equal(plain, proximal)
    assert np.linalg.norm(proximal) < np.linalg.norm(plain)


def test_fedprox_steps_by_its_server_lr() -> None:
    strategy = make("fedprox", mu=0.1, server_lr=0.5)
    model = np.zeros(2, dtype=np.float32)
    state = ServerState(
        models={ClusterId(0): model}, assignment={ClientId(0): ClusterId(0)}
    )
    delta = np.array([2.0, 4.0], dtype=np.float32)
    update = ClientUpdate(ClientId(0), ClusterId(0), "ok", model, delta, 10)
    new = strategy.aggregate(state, 0, [update], np.random.default_rng(0))
    np.testing.assert_allclose(new.models[ClusterId(0)], [1.0, 2.0])  # half a step


def test_the_train_config_is_built_once_and_is_what_runs_and_is_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from clusterfed.algorithms.fedprox import FedProx

    calls: list[TrainConfig] = []
    built = FedProx.train_config

    def counted(self: FedProx, base: TrainConfig) -> TrainConfig:
        calls.append(base)
        return built(self, base)

    monkeypatch.setattr(FedProx, "train_config", counted)
    scenario = small_scenario(
        algorithm="fedprox", rounds=1, algorithm_params={"fedprox": {"mu": 0.25}}
    )
    clusterfed.run(scenario, out=tmp_path)
    assert len(calls) == 1
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["algorithm"]["train_config"]["mu"] == 0.25
