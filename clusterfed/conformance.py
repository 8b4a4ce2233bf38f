"""The strategy conformance suite: the contract every `Strategy` keeps.

Every algorithm of clusterfed passes it, and so should one of your own:

    import pytest
    from clusterfed.conformance import CHECKS

    @pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
    def test_fedmedian_conforms(check):
        check("mystrategies:FedMedian")

Each check takes an algorithm name as `--algorithm` takes it (a registered
name or `package.module:Class`) and raises `AssertionError` saying what broke:
the state is a frozen dataclass of `ServerState` built from the given
models; the state keeps its shape through joins and rounds; no hook mutates
its inputs; empty and all-failed rounds change nothing; the same seed gives
the same result; a leaving client leaves the assignment; accepted updates
move the models, and zero updates do not; a strategy with an asynchronous
mode folds single updates by the same rules; a strategy that folds its round
into running sums (streaming aggregation) gets what `aggregate` gives; the
diagnostics are typed and their record is JSON that reads back as them.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np
from pydantic import ValidationError

from clusterfed.algorithms import (
    ClientInfo,
    PeerScore,
    ServerState,
    make,
)
from clusterfed.algorithms.base import streams
from clusterfed.algorithms.diagnostics import PlainDiagnostics, as_diagnostics
from clusterfed.types import ClientId

from . import conformance_inputs as inputs


def the_state_type_is_a_frozen_dataclass_of_server_state(name: str) -> None:
    strategy, state, _, _ = inputs.joined(name)
    state_type = strategy.state_type
    assert issubclass(state_type, ServerState)
    assert dataclasses.is_dataclass(state_type)
    assert type(state) is state_type
    with inputs.raises(dataclasses.FrozenInstanceError, ""):
        # Assigning a frozen field is the error this check provokes.
        state.models = {}  # type: ignore[misc]
    # The random stream is passed to the hooks, never kept in the state.
    for f in dataclasses.fields(state):
        assert not isinstance(getattr(state, f.name), np.random.Generator), f.name


def init_state_starts_from_the_given_models(name: str) -> None:
    strategy = make(name)
    models = inputs.initial_models(strategy)
    state = strategy.init_state(models)
    assert type(state) is strategy.state_type
    assert state.models[min(state.models)] is models[0]
    assert all(any(m is given for given in models) for m in state.models.values())
    assert not state.assignment
    with inputs.raises(ValueError, "initial models"):
        strategy.init_state([*models, models[0]])


def state_shape_after_joins(name: str) -> None:
    _, state, clients, _ = inputs.joined(name)
    assert {c.id for c in clients} == set(state.assignment)
    for cluster in state.assignment.values():
        assert cluster in state.models
    for model in state.models.values():
        assert model.dtype == np.float32 and model.shape == (inputs.DIM,)


def a_round_keeps_the_shape_and_does_not_mutate_inputs(name: str) -> None:
    strategy, state, clients, rng = inputs.joined(name)
    plans = strategy.plan_round(state, 0, clients, rng)
    assert plans, "a strategy must give work to someone"
    updates = inputs.updates(plans)
    models_before = copy.deepcopy(dict(state.models))
    deltas_before = [u.delta.copy() for u in updates if u.delta is not None]
    new = strategy.aggregate(state, 0, updates, rng)
    for cluster, model in models_before.items():
        np.testing.assert_array_equal(state.models[cluster], model)
    for update, delta in zip(updates, deltas_before, strict=True):
        np.testing.assert_array_equal(update.delta, delta)
    for model in new.models.values():
        assert model.dtype == np.float32 and model.shape == (inputs.DIM,)
    assert all(c in new.models for c in new.assignment.values())


def no_hook_mutates_its_inputs(name: str) -> None:
    """Each hook, in the server's order, leaves its arguments as they were."""
    strategy, state, clients, rng = inputs.joined(name)

    def unchanged(*args: Any) -> Any:
        return inputs.frozen_copy(args)

    if strategy.wants:
        histograms = inputs.descriptions(strategy, clients)
        before = unchanged(state, histograms)
        described = strategy.on_describe(state, 0, histograms, rng)
        assert unchanged(state, histograms) == before
        assert type(described) is strategy.state_type
        state = described
    before = unchanged(state, clients)
    plans = strategy.plan_round(state, 0, clients, rng)
    assert unchanged(state, clients) == before
    updates = inputs.updates(plans)
    before = unchanged(state, updates)
    probes = strategy.plan_probes(state, 0, updates, rng)
    assert unchanged(state, updates) == before
    scored = [
        dataclasses.replace(
            u,
            peer_scores={
                p.client: PeerScore(0.5, 1.0, 10)
                for p in probes
                if u.client in p.models
            },
        )
        for u in updates
    ]
    before = unchanged(state, scored)
    new = strategy.aggregate(state, 0, scored, rng)
    assert unchanged(state, scored) == before
    assert type(new) is strategy.state_type

    before = unchanged(new)
    strategy.diagnostics(new)
    for client in clients:
        strategy.model_for(new, client.id)
        strategy.plan_for(new, client.id)
    assert unchanged(new) == before
    late = ClientInfo(ClientId(99), n_train=20, joined_round=1)
    joined = strategy.on_join(new, late)
    assert unchanged(new) == before
    strategy.on_leave(joined, ClientId(2))
    strategy.on_leave(new, ClientId(2))
    assert unchanged(new) == before


def empty_or_all_failed_rounds_change_nothing(name: str) -> None:
    for ok in (True, False):
        strategy, state, clients, rng = inputs.joined(name)
        updates = (
            []
            if ok
            else inputs.updates(strategy.plan_round(state, 0, clients, rng), ok=False)
        )
        new = strategy.aggregate(state, 0, updates, rng)
        for cluster, model in state.models.items():
            np.testing.assert_array_equal(new.models[cluster], model)


def same_seed_same_result(name: str) -> None:
    results = []
    for _ in range(2):
        strategy, state, clients, rng = inputs.joined(name, seed=3)
        for round in range(3):
            plans = strategy.plan_round(state, round, clients, rng)
            state = strategy.aggregate(state, round, inputs.updates(plans), rng)
        results.append(state)
    assert results[0].assignment == results[1].assignment
    for cluster in results[0].models:
        np.testing.assert_array_equal(
            results[0].models[cluster], results[1].models[cluster]
        )


def leaving_clients_leave_the_assignment(name: str) -> None:
    strategy, state, _, _ = inputs.joined(name)
    state = strategy.on_leave(state, ClientId(2))
    assert ClientId(2) not in state.assignment


def accepted_updates_move_the_models(name: str) -> None:
    # A strategy that ignored its updates would keep every model as it was.
    # Two rounds: a clustering strategy may spend its first one deciding.
    strategy, state, clients, rng = inputs.joined(name)
    if strategy.wants:
        state = strategy.on_describe(
            state, 0, inputs.descriptions(strategy, clients), rng
        )
    before = {k: v.copy() for k, v in state.models.items()}
    for round in range(2):
        plans = strategy.plan_round(state, round, clients, rng)
        state = strategy.aggregate(state, round, inputs.updates(plans), rng)
    moved = [
        k
        for k, model in state.models.items()
        if k not in before or not np.array_equal(model, before[k])
    ]
    assert moved, f"{name}: two rounds of accepted updates changed no model"
    # ... and by the updates: with every delta zero (a mixture update's every
    # model's too), no model moves at all.
    strategy, state, clients, rng = inputs.joined(name)
    if strategy.wants:
        state = strategy.on_describe(
            state, 0, inputs.descriptions(strategy, clients), rng
        )
    plans = strategy.plan_round(state, 0, clients, rng)
    zero = np.zeros(inputs.DIM, np.float32)
    still = [
        replace(
            u,
            delta=zero,
            deltas=None if u.deltas is None else dict.fromkeys(u.deltas, zero),
        )
        for u in inputs.updates(plans)
    ]
    new = strategy.aggregate(state, 0, still, rng)
    for k, model in new.models.items():
        if k in state.models:
            np.testing.assert_allclose(model, state.models[k], atol=1e-6)


def the_async_mode_folds_updates_alone(name: str) -> None:
    """A strategy with an asynchronous mode (`supports_async`): `absorb`
    keeps the state's type and shape, mutates none of its inputs, ignores a
    failed update, moves a model with accepted ones, and repeats itself
    under the same seed. Other strategies pass as they are."""
    if not make(name).supports_async:
        return
    results = []
    for _ in range(2):
        strategy, state, clients, rng = inputs.joined(name, seed=3)
        start = {k: v.copy() for k, v in state.models.items()}
        for staleness in range(3):
            for client in clients:
                [update] = inputs.updates([strategy.plan_for(state, client.id)])
                before = inputs.frozen_copy((state, update))
                new, moved = strategy.absorb(state, update, staleness, rng)
                assert inputs.frozen_copy((state, update)) == before, "absorb mutated"
                assert type(new) is strategy.state_type
                assert isinstance(moved, bool)
                for model in new.models.values():
                    assert model.dtype == np.float32 and model.shape == (inputs.DIM,)
                assert all(c in new.models for c in new.assignment.values())
                state = new
        assert any(
            k not in start or not np.array_equal(m, start[k])
            for k, m in state.models.items()
        ), f"{name}: accepted updates absorbed changed no model"
        [failed] = inputs.updates([strategy.plan_for(state, clients[0].id)], ok=False)
        same, moved = strategy.absorb(state, failed, 0, rng)
        assert not moved
        for k, model in state.models.items():
            np.testing.assert_array_equal(same.models[k], model)
        results.append(state)
    assert results[0].assignment == results[1].assignment
    for k in results[0].models:
        np.testing.assert_array_equal(results[0].models[k], results[1].models[k])


def folding_equals_aggregate(name: str) -> None:
    """A strategy that the server folds (`algorithms.base.streams`):
    `aggregate_sums` over its updates' running sums, added in any order of
    arrival as the server adds them, equals `aggregate` over the same round
    bit for bit — with unequal sample counts, a failed update and one of 0
    samples. Other strategies pass."""
    from clusterfed.actors.folding import RoundFold

    strategy, state, clients, _ = inputs.joined(name, seed=3)
    if not streams(strategy):
        return
    if strategy.wants:
        state = strategy.on_describe(
            state, 0, inputs.descriptions(strategy, clients), np.random.default_rng(3)
        )
    plan_rng = np.random.default_rng(5)
    for round in range(3):
        plans = strategy.plan_round(state, round, clients, plan_rng)
        updates = [
            replace(u, n_samples=1 + 7 * i) for i, u in enumerate(inputs.updates(plans))
        ]
        updates[0] = replace(updates[0], status="failed", base=None, delta=None)
        updates[-1] = replace(updates[-1], n_samples=0)
        fold = RoundFold(
            (u.client for u in updates), partial(strategy.fold_weight, state)
        )
        kept = {u.client: fold.add(u) for u in reversed(updates)}
        assert fold.done, "every update was added, yet the fold is not done"
        assert all(u.delta is None for u in kept.values())
        stripped = [kept[u.client] for u in updates]
        expected = strategy.aggregate(
            state, round, updates, np.random.default_rng(round)
        )
        got = strategy.aggregate_sums(
            state, round, stripped, fold.sums, np.random.default_rng(round)
        )
        assert inputs.frozen_copy(got) == inputs.frozen_copy(expected), (
            f"round {round}: aggregate_sums differs from aggregate"
        )
        state = expected


def diagnostics_are_typed_and_recorded_as_json(name: str) -> None:
    """Before the first round and after each of three, `diagnostics` gives a
    `Diagnostics` or None (or a plug-in's mapping of JSON values); its record
    is JSON, and reads back as the same object: a non-finite float, which
    the record writes as null, must be None already."""
    strategy, state, clients, rng = inputs.joined(name, seed=3)
    if strategy.wants:
        state = strategy.on_describe(
            state, 0, inputs.descriptions(strategy, clients), rng
        )
    for round in range(4):
        try:
            found = as_diagnostics(strategy.diagnostics(state), name)
        except TypeError as exc:
            raise AssertionError(f"round {round}: {exc}") from exc
        if found is not None:
            record = found.record()
            json.dumps(record, allow_nan=False)
            if not isinstance(found, PlainDiagnostics):
                try:
                    same = type(found).model_validate(record) == found
                except ValidationError:
                    same = False
                assert same, (
                    f"round {round}: the record of {type(found).__name__} reads"
                    f" back as another object: {record}"
                )
        if round < 3:
            plans = strategy.plan_round(state, round, clients, rng)
            state = strategy.aggregate(state, round, inputs.updates(plans), rng)


Check = Callable[[str], None]

# Every check, in the order a strategy's life goes.
CHECKS: tuple[Check, ...] = (
    the_state_type_is_a_frozen_dataclass_of_server_state,
    init_state_starts_from_the_given_models,
    state_shape_after_joins,
    a_round_keeps_the_shape_and_does_not_mutate_inputs,
    no_hook_mutates_its_inputs,
    empty_or_all_failed_rounds_change_nothing,
    same_seed_same_result,
    leaving_clients_leave_the_assignment,
    accepted_updates_move_the_models,
    the_async_mode_folds_updates_alone,
    folding_equals_aggregate,
    diagnostics_are_typed_and_recorded_as_json,
)


def check_strategy(name: str) -> None:
    """Run every check on algorithm `name`; the first that fails raises
    `AssertionError`, prefixed with the check's name."""
    for check in CHECKS:
        try:
            check(name)
        except AssertionError as exc:
            raise AssertionError(f"{name}: {check.__name__}: {exc}") from exc
