"""The scenario's data: what each part says of itself, worked by hand."""

from __future__ import annotations

import pytest
from torch import nn

from clusterfed.actors.clock import DeviceProfile
from clusterfed.actors.faults import FaultPlan
from clusterfed.models import build_model
from clusterfed.scenarios import (
    BUILTIN,
    ClassTablePartition,
    Crash,
    DirichletPartition,
    Faulty,
    IIDPartition,
    Join,
    Scenario,
    ShardsPartition,
)
from clusterfed.scenarios.spec import IIDMixPartition
from clusterfed.scenarios.transforms import RotationTransform


def test_iid_partitions_are_one_iid_group_and_skewed_ones_say_nothing() -> None:
    assert IIDPartition().iid_groups() == frozenset({0})
    assert IIDMixPartition().iid_groups() == frozenset({0})
    assert DirichletPartition().iid_groups() is None
    assert ShardsPartition().iid_groups() is None


def test_the_iid_rows_of_a_class_table_hold_every_class_equally() -> None:
    table = ClassTablePartition(
        table=[
            [1, 1, 1],  # 0: iid
            [1, 0, 1],  # a class missing
            [2, 2, 2],  # 2: iid, in counts
            [0, 0, 0],  # nothing at all
            [5, 5, 6],  # one class more
            [6, 5, 5],
            [0.5, 0.5, 0.5],  # 6: iid, in weights
        ]
    )
    assert table.iid_groups() == frozenset({0, 2, 6})


@pytest.mark.parametrize(
    ("low", "high", "n_classes", "held"),
    [
        (0.2, 0.4, 10, (2, 4)),  # the defaults: 2 to 4 digits
        (0.05, 0.4, 10, (1, 4)),  # half a class is still one class
        (0.25, 0.35, 10, (3, 3)),  # 2.5 → 3 up, 3.5 → 3 down
        (0.2, 1.0, 10, (2, 10)),
        # 0.28 × 100 = 28.000000000000004 and 0.29 × 100 = 28.999999999999996
        # in floats: exactly 28 and 29 classes
        (0.28, 0.29, 100, (28, 29)),
    ],
)
def test_an_iid_mix_client_holds_its_share_of_the_classes(
    low: float, high: float, n_classes: int, held: tuple[int, int]
) -> None:
    spec = IIDMixPartition(min_class_share=low, max_class_share=high)
    assert spec.classes_per_client(n_classes) == held


def test_a_faulty_plan_stays_under_the_scenario_s_bound_unless_it_names_its_own() -> (
    None
):
    faulty = Faulty(
        clients=[2, 3], behaviour="sign_flip", start=1, every=2, until=9, scale=4.0
    )
    assert faulty.plan(5.0) == FaultPlan(
        behaviour="sign_flip", start=1, every=2, until=9, scale=4.0, under_norm=5.0
    )
    assert faulty.plan() == FaultPlan(
        behaviour="sign_flip", start=1, every=2, until=9, scale=4.0
    )
    own = Faulty(clients=1, behaviour="sign_flip", under_norm=2.0)
    assert own.plan(5.0).under_norm == 2.0 and own.ids == [1]


def test_a_client_carries_the_faults_that_name_it_in_order() -> None:
    scenario = Scenario(
        name="x",
        clients=4,
        max_update_norm=3.0,
        faulty=[
            Faulty(clients=[1, 2], behaviour="sign_flip"),
            Faulty(clients=2, behaviour="nan", start=5),
        ],
    )
    flip = FaultPlan(behaviour="sign_flip", under_norm=3.0)
    nan = FaultPlan(behaviour="nan", start=5, under_norm=3.0)
    assert scenario.faults_of(0) == ()
    assert scenario.faults_of(1) == (flip,)
    assert scenario.faults_of(2) == (flip, nan)


def test_params_of_is_a_copy_of_the_algorithm_s_table_or_empty() -> None:
    scenario = Scenario(
        name="x", algorithm_params={"fedavg": {"fraction": 0.5}, "cfl": {}}
    )
    params = scenario.params_of("fedavg")
    assert params == {"fraction": 0.5}
    params["fraction"] = 1.0
    assert scenario.params_of("fedavg") == {"fraction": 0.5}
    assert scenario.params_of("ifca") == {}


def test_joins_count_the_clients_each_join_adds_over_the_run() -> None:
    scenario = Scenario(
        name="x",
        rounds=10,
        events=[
            Crash(start=1, target=0),
            Join(start=3, every=3, count=2),  # rounds 3, 6, 9: 6 clients
            Join(start=9),  # the last round: 1
            Join(start=10),  # after it: none
            Join(clock="time", start=0.0, every=10.0, until=25.0),  # 0, 10, 20
        ],
    )
    assert scenario.joins() == [(1, 6), (2, 1), (3, 0), (4, 3)]


def test_transform_groups_are_the_transform_s() -> None:
    assert Scenario(name="x").transform_groups() == 1
    rotated = Scenario(name="x", transform=RotationTransform(angles=[0.0, 90.0, 180.0]))
    assert rotated.transform_groups() == 3


def test_byzantine_is_quickstart_with_a_fifth_of_its_clients_flipping_signs() -> None:
    quick, byzantine = BUILTIN["quickstart"](), BUILTIN["byzantine"]()
    flip = byzantine.faulty
    assert [f.behaviour for f in flip] == ["sign_flip"]
    assert len(flip[0].ids) == byzantine.clients // 5 == 4
    assert byzantine.max_update_norm == 5.0
    assert byzantine.model_copy(
        update={"name": "quickstart", "description": quick.description}
    ) == quick.model_copy(update={"max_update_norm": 5.0, "faulty": flip})
    assert "4 of its 20 clients" in byzantine.description
    assert byzantine.faults_of(flip[0].ids[0])[0].under_norm == 5.0


def test_async_stragglers_are_a_fifth_of_quickstart_ten_times_slower() -> None:
    quick, slow = BUILTIN["quickstart"](), BUILTIN["async-stragglers"]()
    assert len(slow.devices) == slow.clients // 5 == 4
    usual = DeviceProfile()
    for profile in slow.devices.values():
        assert profile.samples_per_s * 10 == usual.samples_per_s
        assert profile.bandwidth_bps * 10 == usual.bandwidth_bps
    assert slow.model_copy(
        update={"name": "quickstart", "description": quick.description}
    ) == quick.model_copy(update={"devices": slow.devices})
    assert "10 times slower" in slow.description


def test_quickstart_is_what_the_readme_says_it_is() -> None:
    # README: FedAvg on the embedded digits, 20 clients with Dirichlet(0.5)
    # label skew, 20 % of each client's samples held out, an MLP 512-128, SGD
    # (lr 0.05, momentum 0.9, batch 16, 1 local epoch), 30 rounds, seed 0
    s = BUILTIN["quickstart"]()
    assert (s.algorithm, s.dataset.name, s.clients) == ("fedavg", "digits", 20)
    assert s.partition == DirichletPartition(alpha=0.5) and s.test_fraction == 0.2
    net = build_model(s.model.name, (1, 8, 8), 10, seed=0, **s.model.params)
    widths = [m.out_features for m in net.modules() if isinstance(m, nn.Linear)]
    assert widths == [512, 128, 10]
    t = s.train
    assert (t.lr, t.momentum, t.batch_size, t.epochs) == (0.05, 0.9, 16, 1)
    assert (s.rounds, s.seed) == (30, 0)
    assert s.description.startswith(
        "FedAvg on the embedded digits: 20 clients with Dirichlet(0.5) label skew."
    )


def test_the_stress_scenarios_pick_the_clients_of_the_recorded_figures() -> None:
    # bench/RESULTS.md: byzantine's clients 1, 6, 11 and 16 flip signs;
    # async-stragglers' 0, 5, 10 and 15 are slow
    assert BUILTIN["byzantine"]().faulty[0].ids == [1, 6, 11, 16]
    assert sorted(BUILTIN["async-stragglers"]().devices) == [0, 5, 10, 15]
