"""Turning a scenario into a plan: planted groups and the data set aside for
clients that join later, counted by hand on tiny label sets."""

from __future__ import annotations

import math

import numpy as np
import pytest

from clusterfed.data import ClientSplit
from clusterfed.errors import ScenarioError
from clusterfed.scenarios import ClassTablePartition, DPSpec, Join, plan_run
from clusterfed.scenarios.build import _class_table, _spread
from helpers import small_scenario

TWO_CLASSES = np.repeat(np.arange(2), 40)  # 40 samples of class 0, then of 1
ROWS = ClassTablePartition(table=[[1.0, 0.0], [0.0, 1.0]])  # row r holds class r


def test_clients_are_spread_over_groups_the_first_ones_taking_the_rest() -> None:
    assert _spread(7, 3) == [3, 2, 2]
    assert _spread(6, 3) == [2, 2, 2]
    assert _spread(2, 3) == [1, 1, 0]


def test_joiners_without_a_row_are_dealt_to_the_rows_in_turn() -> None:
    # 4 first clients (2 a row); event 5 adds three (rows: dealt 0, dealt 1,
    # asked 1), event 7 one (dealt 0: the turn goes on across events)
    partition, initial, joiners = _class_table(
        ROWS, TWO_CLASSES, 4, {5: [None, None, 1], 7: [None]}, np.random.default_rng(0)
    )
    # the partitioner lists each row's 4 parts together: 0-3 row 0, 4-7 row 1
    assert partition.groups == [0, 0, 0, 0, 1, 1, 1, 1]
    assert initial == [0, 1, 4, 5]
    assert joiners == {5: [2, 6, 7], 7: [3]}
    for part, group in enumerate(partition.groups):
        assert set(TWO_CLASSES[partition.indices[part]]) == {group}
    assert sorted(np.concatenate(partition.indices)) == list(range(80))


def test_clients_per_group_may_differ_by_group() -> None:
    spec = ClassTablePartition(table=[[1.0, 0.0], [0.0, 1.0]], clients_per_group=[1, 3])
    partition, initial, joiners = _class_table(
        spec, TWO_CLASSES, 4, {2: [0]}, np.random.default_rng(0)
    )
    # row 0: its client 0 and the joiner's part 1; row 1: parts 2-4
    assert partition.groups == [0, 0, 1, 1, 1]
    assert initial == [0, 2, 3, 4] and joiners == {2: [1]}


def test_more_joiners_than_a_small_turn_counter_still_get_rows() -> None:
    _, initial, joiners = _class_table(
        ROWS,
        np.repeat(np.arange(2), 200),
        2,
        {0: [None] * 91},
        np.random.default_rng(0),
    )
    # 46 of the 91 to row 0 (dealt first), 45 to row 1; row 0's parts 0-46
    assert initial == [0, 47]
    assert joiners[0][:4] == [1, 48, 2, 49] and joiners[0][-1] == 46


@pytest.mark.parametrize(
    ("per_group", "joiners", "said"),
    [
        ([1, 1, 1], {}, "partition.clients_per_group lists 3 groups, the table has 2"),
        (3, {}, "partition.clients_per_group gives 6 clients, scenario has 4"),
        (None, {4: [0, 2]}, "events[4]: partition_group must be < 2"),
    ],
)
def test_a_table_that_does_not_fit_the_clients_is_refused(
    per_group: int | list[int] | None, joiners: dict[int, list[int | None]], said: str
) -> None:
    spec = ClassTablePartition(table=ROWS.table, clients_per_group=per_group)
    with pytest.raises(ScenarioError) as error:
        _class_table(spec, TWO_CLASSES, 4, joiners, np.random.default_rng(0))
    assert str(error.value) == said


def test_a_join_s_clients_hold_the_data_set_aside_for_their_row() -> None:
    scenario = small_scenario(
        clients=4,
        rounds=4,
        partition=ClassTablePartition(
            table=[[1.0] * 5 + [0.0] * 5, [0.0] * 5 + [1.0] * 5]
        ),
        events=[Join(start=1, count=2, partition_group=1)],
    )
    plan = plan_run(scenario)
    assert plan.partition_groups == {0: 0, 1: 0, 2: 1, 3: 1}
    reserved = plan.reserved[0]
    assert [r.partition_group for r in reserved] == [1, 1]
    labels = plan.dataset.y.numpy()
    for r in reserved:
        assert set(labels[r.split.train]) <= {5, 6, 7, 8, 9}
    held = [set(c.train) | set(c.test) for c in plan.clients]
    held += [set(r.split.train) | set(r.split.test) for r in reserved]
    assert sum(map(len, held)) == len(set().union(*held))  # no sample twice


def rdp_epsilon(sigma: float, rate: float, steps: int, delta: float) -> float:
    """Opacus' RDP accountant, called directly, at the integer orders of its
    default list (the ones clusterfed plans over)."""
    from opacus.accountants import RDPAccountant

    accountant = RDPAccountant()
    accountant.history = [(sigma, rate, steps)]
    orders = [a for a in RDPAccountant.DEFAULT_ALPHAS if a == int(a)]
    return float(accountant.get_epsilon(delta, alphas=orders))


@pytest.mark.parametrize("horizon", ["run", "round"])
def test_each_client_plans_its_noise_for_the_rounds_it_takes_part_in(
    horizon: str,
) -> None:
    dp = DPSpec(epsilon=4.0, delta=1e-4, max_grad_norm=0.7, horizon=horizon)
    scenario = small_scenario(rounds=5, dp=dp)
    plan = plan_run(scenario)
    first = plan.clients[0]
    for c in plan.clients:
        privacy = c.privacy
        assert privacy is not None
        batches = math.ceil(len(c.train) / 16)  # batch_size 16, 1 epoch
        rounds = 5 if horizon == "run" else 1
        assert (privacy.rounds, privacy.steps) == (rounds, rounds * batches)
        assert privacy.sample_rate == 1 / batches
        assert (privacy.epsilon, privacy.delta, privacy.max_grad_norm) == (
            4.0,
            1e-4,
            0.7,
        )
        assert (privacy.accountant, privacy.horizon) == ("rdp", horizon)
        assert privacy.run_id == plan.run_id
        spent = rdp_epsilon(
            privacy.noise_multiplier, privacy.sample_rate, privacy.steps, 1e-4
        )
        assert 4.0 - 0.05 <= spent <= 4.0 + 1e-6  # the budget, to Opacus' tolerance
    # a client that joins in round 3 of 5 plans over the 2 rounds left (or 1)
    split = ClientSplit(np.asarray(first.train), np.asarray(first.test), 0)
    late = plan.client_spec(9, split, 0, 0, first_round=3).privacy
    assert late is not None and late.rounds == (2 if horizon == "run" else 1)
    # even one that joins after the last round plans one round
    assert plan.client_spec(9, split, 0, 0, first_round=7).privacy.rounds == 1  # type: ignore[union-attr]


def test_a_budget_no_noise_can_meet_is_refused_naming_the_client() -> None:
    scenario = small_scenario(dp=DPSpec(epsilon=1e-9, accountant="gdp"))
    with pytest.raises(ScenarioError) as error:
        plan_run(scenario)
    said = str(error.value)
    assert said.startswith(
        "dp.epsilon = 1e-09 (δ = 1e-05) with dp.accountant = 'gdp':"
        " Opacus finds no noise multiplier for client 0 ("
    )
