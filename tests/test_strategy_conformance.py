"""Every registered strategy, and one of a user's own, passes the strategy
conformance suite that ships in the package (clusterfed.conformance)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from clusterfed.algorithms import ClientUpdate, ServerState, Strategy, algorithms
from clusterfed.algorithms.fedasync import FedAsync
from clusterfed.algorithms.fedavg import FedAvg
from clusterfed.conformance import CHECKS, Check, check_strategy


# Every built-in algorithm, and one of a user's own, as a plug-in is named.
@pytest.mark.parametrize("name", [*sorted(algorithms()), "tests_plugin:FedMedian"])
@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_the_strategy_conforms(check: Check, name: str) -> None:
    check(name)


# Strategies that each break one rule: the suite must catch every one.
class MutatesItsInput(FedAvg):
    name = "conformance_mutates"
    folds = False  # its own aggregate, never FedAvg's sums

    def aggregate(
        self,
        state: ServerState,
        round: int,
        updates: Sequence[ClientUpdate],
        rng: np.random.Generator,
    ) -> ServerState:
        for update in updates:
            if update.delta is not None:
                update.delta[:] *= 2  # in place: the server's copy changes
        return super().aggregate(state, round, updates, rng)


class IgnoresItsUpdates(FedAvg):
    name = "conformance_ignores"
    folds = False  # its own aggregate, never FedAvg's sums

    def aggregate(
        self,
        state: ServerState,
        round: int,
        updates: Sequence[ClientUpdate],
        rng: np.random.Generator,
    ) -> ServerState:
        return state


class KeepsNoLeavers(FedAvg):
    name = "conformance_keeps_leavers"

    def on_leave(self, state: ServerState, client: Any) -> ServerState:
        return state


class AbsorbMutatesItsInput(FedAsync):
    name = "conformance_absorb_mutates"

    def absorb(
        self,
        state: ServerState,
        update: ClientUpdate,
        staleness: int,
        rng: np.random.Generator,
    ) -> tuple[ServerState, bool]:
        if update.delta is not None:
            update.delta[:] *= 2  # in place: the update the server holds changes
        return super().absorb(state, update, staleness, rng)


@dataclasses.dataclass(frozen=True)
class _WithGenerator(ServerState):
    rng: np.random.Generator = dataclasses.field(default_factory=np.random.default_rng)


class KeepsAGenerator(FedAvg):
    name = "conformance_keeps_a_generator"
    state_type = _WithGenerator  # type: ignore[assignment]


@pytest.mark.parametrize(
    ("strategy", "broken"),
    [
        (MutatesItsInput, "a_round_keeps_the_shape_and_does_not_mutate_inputs"),
        (IgnoresItsUpdates, "accepted_updates_move_the_models"),
        (KeepsNoLeavers, "leaving_clients_leave_the_assignment"),
        (KeepsAGenerator, "the_state_type_is_a_frozen_dataclass_of_server_state"),
        (AbsorbMutatesItsInput, "the_async_mode_folds_updates_alone"),
    ],
)
def test_the_suite_catches_a_broken_strategy(
    strategy: type[Strategy[Any]], broken: str
) -> None:
    with pytest.raises(AssertionError, match=f"{strategy.name}: {broken}: "):
        check_strategy(strategy.name)
