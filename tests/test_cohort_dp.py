"""DP inside a cohort: Opacus' Poisson batches, clipping, noise stream and
books per client, held against the one-at-a-time Opacus path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from clusterfed import run
from clusterfed.actors import Client
from clusterfed.actors.cohort import CohortTask, train_cohort
from clusterfed.actors.spec import ScratchModels
from clusterfed.protocol import TrainConfig
from clusterfed.scenarios import plan_run, with_overrides
from helpers import read_rounds, small_scenario


def _clients(sigma: float, clients: int = 6) -> tuple[list[Client], Any]:
    """Private clients with noise multiplier `sigma` and a budget that never
    runs out (σ = 0 spends an infinite ε)."""
    plan = plan_run(with_overrides(small_scenario(clients=clients), ["dp.epsilon=50"]))
    pool = ScratchModels()
    found = []
    for spec in plan.clients:
        assert spec.privacy is not None
        private = spec.privacy.model_copy(update={"noise_multiplier": sigma})
        client = Client(spec.model_copy(update={"privacy": private}), pool)
        privacy = client.trainer.privacy
        assert privacy is not None
        privacy.epsilon = float("inf")
        found.append(client)
    return found, plan


CONFIGS = {
    "plain": TrainConfig(lr=0.05, momentum=0.9, batch_size=16, epochs=1),
    "fedprox, 2 epochs": TrainConfig(
        lr=0.05, momentum=0.5, batch_size=8, epochs=2, mu=0.1, weight_decay=1e-3
    ),
}


# σ = 0 spends an infinite ε, which Opacus' RDP bound warns about.
@pytest.mark.filterwarnings("ignore:Optimal order is the")
@pytest.mark.parametrize("sigma", [0.0, 1.1])
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_a_private_cohort_equals_opacus_one_at_a_time(sigma: float, name: str) -> None:
    config = CONFIGS[name]
    alone_clients, plan = _clients(sigma)
    cohort_clients, _ = _clients(sigma)
    tasks = [CohortTask(c.trainer, plan.initial, config, 4) for c in cohort_clients]
    together = train_cohort(tasks)
    for client, task, got in zip(alone_clients, tasks, together, strict=True):
        alone = client.trainer.train(plan.initial, config, 4)
        # The same Poisson batches, the same noise draws: rounding apart.
        assert got.samples_seen == alone.samples_seen
        np.testing.assert_allclose(got.delta, alone.delta, rtol=1e-5, atol=1e-6)
        assert got.loss == pytest.approx(alone.loss, rel=1e-6)
        ours, theirs = task.trainer.privacy, client.trainer.privacy
        assert ours is not None and theirs is not None
        assert ours.engine.accountant.history == theirs.engine.accountant.history
        assert got.epsilon == alone.epsilon


def test_a_private_clients_delta_does_not_depend_on_its_cohort() -> None:
    config = CONFIGS["plain"]
    everyone_clients, plan = _clients(1.1)
    few_clients, _ = _clients(1.1)
    everyone = train_cohort(
        [CohortTask(c.trainer, plan.initial, config, 1) for c in everyone_clients]
    )
    few = [CohortTask(c.trainer, plan.initial, config, 1) for c in few_clients]
    pair = train_cohort([few[5], few[2]])
    assert np.array_equal(pair[1].delta, everyone[2].delta)
    assert np.array_equal(pair[0].delta, everyone[5].delta)


def test_a_cohort_mixing_private_and_plain_tasks_is_refused() -> None:
    private, plan = _clients(1.0, clients=2)
    plain = Client(plan_run(small_scenario(clients=2)).clients[0], ScratchModels())
    config = CONFIGS["plain"]
    with pytest.raises(ValueError, match="a cohort"):
        train_cohort(
            [
                CohortTask(private[0].trainer, plan.initial, config, 1),
                CohortTask(plain.trainer, plan.initial, config, 1),
            ]
        )


def _rows(out: Path) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "wall_time"} for r in read_rounds(out)]


def test_a_private_cohort_run_gives_the_same_rows_on_one_and_two_workers(
    tmp_path: Path,
) -> None:
    base = small_scenario(rounds=2, dp={"epsilon": 50})
    cohort = with_overrides(base, ["compute.cohort=6"])
    one = _rows(run(cohort, out=tmp_path / "one", workers=1).out)
    two = _rows(run(cohort, out=tmp_path / "two", workers=2).out)
    assert one == two
    alone = _rows(run(base, out=tmp_path / "alone", workers=2).out)
    for a, b in zip(one, alone, strict=True):
        assert a["epsilon_max"] == b["epsilon_max"]
        for x, y in zip(a["clients"], b["clients"], strict=True):
            assert x["acc"] == pytest.approx(y["acc"], abs=0.02)
