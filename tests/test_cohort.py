"""Cohort training: equal to one-at-a-time up to rounding, and a client's
numbers the same bits whoever else is in its cohort."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from clusterfed import run
from clusterfed.actors import Client
from clusterfed.actors.cohort import CohortTask, train_cohort
from clusterfed.actors.host import compute_on_one_thread
from clusterfed.actors.spec import ScratchModels
from clusterfed.protocol import TrainConfig
from clusterfed.scenarios import plan_run, with_overrides
from helpers import read_rounds, small_scenario


def _tasks(config: TrainConfig, clients: int = 6, **anchors: Any) -> list[CohortTask]:
    plan = plan_run(small_scenario(clients=clients))
    pool = ScratchModels()
    trainers = [Client(spec, pool).trainer for spec in plan.clients]
    rng = np.random.default_rng(0)
    tasks = []
    for c, trainer in enumerate(trainers):
        pulls: tuple[tuple[np.ndarray, float], ...] = ()
        if anchors.get("fedsoft"):
            # FedSoft: a pull toward each of two centers, coefficients per client.
            pulls = tuple(
                (
                    plan.initial
                    + rng.normal(0, 0.05, plan.initial.shape).astype(np.float32),
                    0.01 * (c + k),
                )
                for k in range(2)
            )
        tasks.append(CohortTask(trainer, plan.initial, config, 3, pulls))
    return tasks


CONFIGS = {
    "plain": TrainConfig(lr=0.05, momentum=0.0, batch_size=16, epochs=1),
    "momentum, 2 epochs": TrainConfig(lr=0.05, momentum=0.9, batch_size=16, epochs=2),
    "fedprox, weight decay": TrainConfig(
        lr=0.05, momentum=0.5, batch_size=10, epochs=1, mu=0.1, weight_decay=1e-3
    ),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_a_cohort_equals_one_at_a_time_up_to_rounding(name: str) -> None:
    tasks = _tasks(CONFIGS[name])
    steps = {len(t.trainer.y_train) for t in tasks}
    assert len(steps) > 1  # clients of different sizes: masking is exercised
    together = train_cohort(tasks)
    for task, got in zip(tasks, together, strict=True):
        alone = task.trainer.train(task.weights, task.config, task.round)
        np.testing.assert_allclose(got.delta, alone.delta, rtol=1e-4, atol=2e-6)
        assert got.loss == pytest.approx(alone.loss, rel=1e-5)
        assert (got.n_samples, got.samples_seen) == (
            alone.n_samples,
            alone.samples_seen,
        )


def test_fedsoft_anchors_pull_each_client_as_alone() -> None:
    tasks = _tasks(CONFIGS["fedprox, weight decay"], fedsoft=True)
    together = train_cohort(tasks)
    for task, got in zip(tasks, together, strict=True):
        alone = task.trainer.train(task.weights, task.config, task.round, task.anchors)
        np.testing.assert_allclose(got.delta, alone.delta, rtol=1e-4, atol=2e-6)


@pytest.fixture
def one_thread() -> Iterator[None]:
    """Torch on one thread, as every client host computes: with two, a
    step that one client takes alone runs its matrix product split over
    both threads, which rounds otherwise than the one-thread product per
    client of a step that several take (seen with batch 10 on 2 cores)."""
    restore = compute_on_one_thread()
    yield
    restore()


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_a_clients_delta_does_not_depend_on_its_cohort(
    name: str, one_thread: None
) -> None:
    tasks = _tasks(CONFIGS[name], fedsoft=name == "plain")
    everyone = train_cohort(tasks)
    pair = train_cohort([tasks[4], tasks[1]])
    single = train_cohort([tasks[1]])
    for got in (pair[1], single[0]):
        assert np.array_equal(got.delta, everyone[1].delta)
        assert got.loss == everyone[1].loss
    assert np.array_equal(pair[0].delta, everyone[4].delta)


def test_a_cohort_refuses_mixed_configs() -> None:
    a = _tasks(CONFIGS["plain"], clients=2)
    b = _tasks(CONFIGS["fedprox, weight decay"], clients=2)
    with pytest.raises(ValueError, match="one config"):
        train_cohort([a[0], b[1]])


def _rows(out: Path) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "wall_time"} for r in read_rounds(out)]


def test_cohort_runs_give_the_same_rows_on_one_and_two_workers(
    tmp_path: Path,
) -> None:
    scenario = with_overrides(small_scenario(rounds=2), ["compute.cohort=4"])
    one = run(scenario, out=tmp_path / "one", workers=1)
    two = run(scenario, out=tmp_path / "two", workers=2)
    assert _rows(one.out) == _rows(two.out)
    plain = run(small_scenario(rounds=2), out=tmp_path / "plain", workers=2)
    for a, b in zip(_rows(one.out), _rows(plain.out), strict=True):
        for x, y in zip(a["clients"], b["clients"], strict=True):
            assert x["cluster"] == y["cluster"]
            assert x["acc"] == pytest.approx(y["acc"], abs=0.02)


def _cohort_sizes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the cohorts this process trains, as they train."""
    import clusterfed.actors.host as host

    sizes: list[int] = []
    real = host.train_cohort

    def counted(tasks: list[CohortTask]) -> Any:
        sizes.append(len(tasks))
        return real(tasks)

    monkeypatch.setattr(host, "train_cohort", counted)
    return sizes


@pytest.mark.parametrize(
    ("changes", "joins"),
    [
        ({"dp": {"epsilon": 50}}, True),  # DP as a private cohort
        ({"algorithm": "fedem"}, False),  # a mixture task trains alone
        ({"algorithm": "ifca"}, True),  # probes alone, then trains in a cohort
        ({"algorithm": "fedsoft"}, True),  # importance probes, anchors in cohort
        ({"algorithm": "feddrift"}, True),  # loss probes, then a cohort
    ],
)
def test_which_tasks_train_in_cohorts_and_which_alone(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    changes: dict[str, Any],
    joins: bool,
) -> None:
    sizes = _cohort_sizes(monkeypatch)
    base = small_scenario(rounds=2, **changes)
    cohort = with_overrides(base, ["compute.cohort=6"])
    together = _rows(run(cohort, out=tmp_path / "cohort", workers=1).out)
    assert bool(sizes) == joins and all(n <= 6 for n in sizes)
    alone = _rows(run(base, out=tmp_path / "alone", workers=1).out)
    if not joins:
        assert together == alone  # the same path: the same bits
        return
    assert max(sizes) > 1
    for a, b in zip(together, alone, strict=True):
        for x, y in zip(a["clients"], b["clients"], strict=True):
            assert x["acc"] == pytest.approx(y["acc"], abs=0.02)
