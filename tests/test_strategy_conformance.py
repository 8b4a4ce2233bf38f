"""Every registered strategy keeps the shared state shape and contract."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from clusterfed.algorithms import (
    ClientInfo,
    ClientUpdate,
    ServerState,
    algorithms,
    make,
)
from clusterfed.types import ClientId

DIM = 12


def _joined(name: str, seed: int = 0) -> tuple[object, ServerState, list[ClientInfo]]:
    strategy = make(name)
    initial = np.random.default_rng(1).standard_normal(DIM).astype(np.float32)
    state = strategy.init_state(initial, np.random.default_rng(seed))
    if strategy.initial_models > 1:
        more = np.random.default_rng(2).standard_normal(
            (strategy.initial_models - 1, DIM)
        )
        state = strategy.with_initial_models(state, [initial, *more.astype(np.float32)])
    clients = [ClientInfo(ClientId(i), n_train=20 + i) for i in range(6)]
    for client in clients:
        state = strategy.on_join(state, client)
    return strategy, state, clients


def _updates(plans, ok: bool = True) -> list[ClientUpdate]:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(7)
    updates = []
    for plan in plans:
        cluster, base = next(iter(plan.models.items()))
        if ok:
            delta = (rng.standard_normal(DIM) * 0.1).astype(np.float32)
            updates.append(
                ClientUpdate(plan.client, cluster, "ok", base, delta, 20, 1.0)
            )
        else:
            updates.append(ClientUpdate(plan.client, cluster, "failed", reason="down"))
    return updates


@pytest.fixture(params=sorted(algorithms()))
def name(request: pytest.FixtureRequest) -> str:
    return request.param


def test_state_shape_after_joins(name: str) -> None:
    _, state, clients = _joined(name)
    assert {c.id for c in clients} == set(state.assignment)
    for cluster in state.assignment.values():
        assert cluster in state.models
    for model in state.models.values():
        assert model.dtype == np.float32 and model.shape == (DIM,)


def test_a_round_keeps_the_shape_and_does_not_mutate_inputs(name: str) -> None:
    strategy, state, clients = _joined(name)
    plans = strategy.plan_round(state, 0, clients)  # type: ignore[attr-defined]
    assert plans, "a strategy must give work to someone"
    updates = _updates(plans)
    models_before = copy.deepcopy(dict(state.models))
    deltas_before = [u.delta.copy() for u in updates]
    new = strategy.aggregate(state, 0, updates)  # type: ignore[attr-defined]
    for cluster, model in models_before.items():
        np.testing.assert_array_equal(state.models[cluster], model)
    for update, delta in zip(updates, deltas_before, strict=True):
        np.testing.assert_array_equal(update.delta, delta)
    for model in new.models.values():
        assert model.dtype == np.float32 and model.shape == (DIM,)
    assert all(c in new.models for c in new.assignment.values())


@pytest.mark.parametrize("ok", [True, False], ids=["empty", "all-failed"])
def test_empty_or_all_failed_rounds_are_handled(name: str, ok: bool) -> None:
    strategy, state, clients = _joined(name)
    updates = [] if ok else _updates(strategy.plan_round(state, 0, clients), ok=False)  # type: ignore[attr-defined]
    new = strategy.aggregate(state, 0, updates)  # type: ignore[attr-defined]
    for cluster, model in state.models.items():
        np.testing.assert_array_equal(new.models[cluster], model)


def test_same_seed_same_result(name: str) -> None:
    results = []
    for _ in range(2):
        strategy, state, clients = _joined(name, seed=3)
        for round in range(3):
            plans = strategy.plan_round(state, round, clients)  # type: ignore[attr-defined]
            state = strategy.aggregate(state, round, _updates(plans))  # type: ignore[attr-defined]
        results.append(state)
    assert results[0].assignment == results[1].assignment
    for cluster in results[0].models:
        np.testing.assert_array_equal(
            results[0].models[cluster], results[1].models[cluster]
        )


def test_leaving_clients_leave_the_assignment(name: str) -> None:
    strategy, state, _ = _joined(name)
    state = strategy.on_leave(state, ClientId(2))  # type: ignore[attr-defined]
    assert ClientId(2) not in state.assignment
