"""Turning a scenario into a plan: planted groups and the data set aside for
clients that join later, counted by hand on tiny label sets."""

from __future__ import annotations

import math

import numpy as np
import pytest

from clusterfed.actors import ClientSpec
from clusterfed.actors.clock import DeviceProfile
from clusterfed.actors.faults import FaultPlan, FaultyClientSpec
from clusterfed.data import ClientSplit
from clusterfed.errors import ScenarioError
from clusterfed.models import build_model, get_flat
from clusterfed.protocol import TrainConfig
from clusterfed.scenarios import (
    ClassTablePartition,
    DatasetSpec,
    DirichletPartition,
    DPSpec,
    Faulty,
    Join,
    PermutationTransform,
    RotationTransform,
    RunPlan,
    plan_run,
)
from clusterfed.scenarios.build import MODEL_STREAM
from clusterfed.scenarios.dealing import _class_table, _spread
from clusterfed.scenarios.spec import IIDMixPartition
from clusterfed.seeding import derive_seed
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
    """Opacus' RDP accountant, called directly, at its default orders."""
    from opacus.accountants import RDPAccountant

    accountant = RDPAccountant()
    accountant.history = [(sigma, rate, steps)]
    return float(accountant.get_epsilon(delta))


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


def test_each_client_spec_carries_its_faults_device_and_transform() -> None:
    slow = DeviceProfile(samples_per_s=50.0)
    scenario = small_scenario(
        clients=4,
        dataset=DatasetSpec(name="digits", root="/nowhere"),
        devices={2: slow},
        faulty=[Faulty(clients=[1], behaviour="nan", start=2)],
        transform=RotationTransform(angles=[0.0, 90.0]),
    )
    plan = plan_run(scenario)
    specs = plan.clients
    assert [type(c) for c in specs] == [
        ClientSpec,
        FaultyClientSpec,
        ClientSpec,
        ClientSpec,
    ]
    assert specs[1].faults == (FaultPlan(behaviour="nan", start=2),)  # type: ignore[attr-defined]
    # A device is the run's clock's, given by the plan; no spec holds one.
    assert [plan.device(c.id) for c in specs] == [
        DeviceProfile(),
        DeviceProfile(),
        slow,
        DeviceProfile(),
    ]
    assert all("profile" not in c.model_dump() for c in specs)
    assert [c.rotation for c in specs] == [0.0, 90.0, 0.0, 90.0]  # dealt in turn
    assert plan.transform_groups == {0: 0, 1: 1, 2: 0, 3: 1}
    assert all(c.dataset_root == "/nowhere" for c in specs)
    assert all(c.model_params == {"hidden": [32]} for c in specs)
    # ground truth: one Dirichlet group × two rotations
    assert [c.group for c in specs] == [0, 1, 0, 1]


def test_planted_groups_and_rotations_make_distinct_true_groups() -> None:
    scenario = small_scenario(
        clients=4,
        partition=ClassTablePartition(
            table=[[1.0] * 5 + [0.0] * 5, [0.0] * 5 + [1.0] * 5]
        ),
        transform=RotationTransform(angles=[0.0, 90.0]),
    )
    plan = plan_run(scenario)
    # (row, rotation) → row × 2 + rotation: clients 0, 1 in row 0, 2, 3 in row 1
    assert plan.groups == {0: 0, 1: 1, 2: 2, 3: 3}


def test_the_strategy_is_built_with_the_scenario_s_settings() -> None:
    scenario = small_scenario(
        algorithm_params={"fedavg": {"fraction": 0.5}}, aggregator="median"
    )
    plan = plan_run(scenario)
    assert plan.strategy.fraction == 0.5  # type: ignore[attr-defined]
    assert plan.strategy.aggregator == scenario.aggregator
    assert plan.strategy.aggregator.kind == "median"


def test_every_random_draw_follows_the_scenario_seed() -> None:
    jitter = RotationTransform(angles=[0.0, 90.0], jitter=30.0)
    a, b, a2 = (plan_run(small_scenario(seed=s, transform=jitter)) for s in (0, 1, 0))
    for x, y, same in ((a, b, False), (a, a2, True)):
        assert (x.clients[0].train == y.clients[0].train) is same  # the split
        assert np.array_equal(x.initial, y.initial) is same  # the model
        assert (
            [c.rotation for c in x.clients] == [c.rotation for c in y.clients]
        ) is same
        assert ([c.seed for c in x.clients] == [c.seed for c in y.clients]) is same
    seeds = [c.seed for c in a.clients]
    assert len(set(seeds)) == len(seeds)  # a stream of its own for each client
    # the initial model is the MLP 64-32-10 from the model stream
    net = build_model(
        "mlp", (1, 8, 8), 10, seed=derive_seed(0, MODEL_STREAM), hidden=[32]
    )
    assert (
        np.array_equal(a.initial, get_flat(net))
        and a.initial.size == 64 * 32 + 32 + 32 * 10 + 10
    )


def test_a_strategy_of_several_models_gets_distinct_ones_the_first_shared() -> None:
    fedavg = plan_run(small_scenario())
    ifca = plan_run(
        small_scenario(algorithm="ifca", algorithm_params={"ifca": {"clusters": 3}})
    )
    models = ifca.initial_models
    assert len(models) == 3
    assert np.array_equal(models[0], fedavg.initial)  # the same start as FedAvg's
    assert not np.array_equal(models[1], models[0])
    assert not np.array_equal(models[2], models[1])


def test_a_dataset_that_cannot_load_is_a_scenario_error_naming_the_scenario() -> None:
    with pytest.raises(ScenarioError) as error:
        plan_run(small_scenario(dataset=DatasetSpec(name="nope")))
    assert str(error.value).startswith(
        "scenario 'small': unknown dataset 'nope'; known:"
    )


def test_each_step_counts_local_epochs_in_the_dp_plan() -> None:
    plan = plan_run(
        small_scenario(
            rounds=2,
            dp=DPSpec(epsilon=8.0),
            train=TrainConfig(lr=0.05, batch_size=16, epochs=3),
        )
    )
    for c in plan.clients:
        assert c.privacy.steps == 2 * 3 * math.ceil(len(c.train) / 16)  # type: ignore[union-attr]


def test_the_dp_plan_uses_the_scenario_s_accountant() -> None:
    from opacus.accountants import GaussianAccountant

    plan = plan_run(small_scenario(rounds=2, dp=DPSpec(epsilon=4.0, accountant="gdp")))
    privacy = plan.clients[0].privacy
    assert privacy is not None and privacy.accountant == "gdp"
    accountant = GaussianAccountant()
    accountant.history = [
        (privacy.noise_multiplier, privacy.sample_rate, privacy.steps)
    ]
    assert 4.0 - 0.05 <= accountant.get_epsilon(1e-5) <= 4.0 + 1e-3


def test_client_seeds_are_streams_apart_from_the_run_s_own() -> None:
    plan = plan_run(small_scenario())
    # the run's other streams (4, the clients' own key, is client 0's: the
    # seed sequence of (0, 4, 0) is that of (0, 4))
    run_streams = {derive_seed(0, key) for key in (0, 1, 2, 3, 5, 6, 7)}
    assert not run_streams & {c.seed for c in plan.clients}


def classes_of(plan: RunPlan, client: int) -> list[int]:
    labels = plan.dataset.y.numpy()
    c = plan.clients[client]
    return sorted(set(labels[c.train]) | set(labels[c.test]))


@pytest.mark.parametrize("consecutive", [True, False])
def test_an_iid_mix_deals_its_share_of_iid_clients_and_classes(
    consecutive: bool,
) -> None:
    spec = IIDMixPartition(iid_fraction=0.25, consecutive_classes=consecutive)
    plan = plan_run(small_scenario(clients=20, partition=spec))
    assert sum(g == 0 for g in plan.partition_groups.values()) == 5  # 25 % of 20
    runs = []
    for client, group in plan.partition_groups.items():
        if group == 0:
            assert classes_of(plan, client) == list(range(10))
            continue
        held = classes_of(plan, client)
        assert 2 <= len(held) <= 4
        # consecutive modulo 10: a wrap-around run such as 9, 0 counts
        gaps = sum(
            (b - a) % 10 != 1 for a, b in zip(held, held[1:] + held[:1], strict=True)
        )
        runs.append(gaps == 1)
    assert all(runs) if consecutive else not all(runs)


def test_dirichlet_clients_hold_at_least_min_samples() -> None:
    # (with the default of 10, this seed leaves a client 22 samples)
    spec = DirichletPartition(alpha=0.2, min_samples=40)
    plan = plan_run(small_scenario(clients=20, partition=spec))
    assert min(len(c.train) + len(c.test) for c in plan.clients) >= 40


def test_joiners_get_data_of_their_own_from_every_partition() -> None:
    plan = plan_run(
        small_scenario(clients=4, rounds=4, events=[Join(start=1, count=3)])
    )
    held = [set(c.train) | set(c.test) for c in plan.clients]
    held += [set(r.split.train) | set(r.split.test) for r in plan.reserved[0]]
    assert len(held) == 7 and all(held)
    assert sum(map(len, held)) == len(set().union(*held))  # no sample twice


def test_a_drift_to_an_unplanted_angle_gets_the_first_fresh_group() -> None:
    # 2 planted rows × 2 rotations: ids 0-3 planted, 4 the first new one
    scenario = small_scenario(
        clients=4,
        partition=ClassTablePartition(
            table=[[1.0] * 5 + [0.0] * 5, [0.0] * 5 + [1.0] * 5]
        ),
        transform=RotationTransform(angles=[0.0, 90.0]),
    )
    plan = plan_run(scenario)
    assert plan.transforms.group_of_rotation(1, 90.0) == 3
    assert plan.transforms.group_of_rotation(0, 45.0) == 4


def test_a_label_permutation_covers_every_class_of_the_dataset() -> None:
    plan = plan_run(small_scenario(transform=PermutationTransform(groups=2)))
    perms = [c.label_permutation for c in plan.clients]
    assert perms[0] == list(range(10))
    assert sorted(perms[1]) == list(range(10)) and perms[1] != perms[0]  # type: ignore[arg-type]


def test_a_joiner_s_budget_is_checked_over_the_whole_run_before_it_starts() -> None:
    # the first four clients hold digit 0 only; the joiner holds the other
    # nine digits: Opacus' gdp finds no small enough σ for its many steps
    table = [[1.0] + [0.0] * 9, [0.0] + [1.0] * 9]
    scenario = small_scenario(
        clients=4,
        rounds=3,
        dp=DPSpec(epsilon=4.0, accountant="gdp"),
        partition=ClassTablePartition(table=table, clients_per_group=[4, 0]),
        events=[Join(start=1, partition_group=1)],
    )
    with pytest.raises(ScenarioError) as error:
        plan_run(scenario)
    # planned from round 0, however late it joins: the 1,619 images of digits
    # 1-9, 80 % to train (1,295), are 81 batches of 16: 3 rounds × 81 steps
    assert str(error.value).startswith(
        "dp.epsilon = 4 (δ = 1e-05) with dp.accountant = 'gdp': Opacus finds no"
        " noise multiplier for a client of events[0] (243 steps at sampling rate"
        " 0.0123): "
    )
