"""The scenario engine alone: what each event does to the federation, round by
round, on a membership that only records (no runtime, no training)."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from clusterfed.actors import ClientSpec, DeviceProfile
from clusterfed.scenarios import (
    Crash,
    DPSpec,
    Drift,
    Dropout,
    Join,
    Leave,
    Network,
    PermutationTransform,
    RotationTransform,
    ScenarioEngine,
    Straggle,
    plan_run,
)
from clusterfed.scenarios.build import EVENT_STREAM
from clusterfed.seeding import numpy_rng
from clusterfed.types import ClientId
from helpers import small_scenario


class Recorder:
    """A membership that records every change the engine asks for."""

    def __init__(self) -> None:
        self.added: list[list[int]] = []
        self.removed: list[tuple[int, str]] = []
        self.updated: list[ClientSpec] = []
        self.unreachable: list[dict[int, str]] = []

    async def add_clients(self, specs: Any) -> None:
        self.added.append([s.id for s in specs])

    async def remove_client(self, client: int, reason: str) -> None:
        self.removed.append((client, reason))

    async def update_client(self, spec: ClientSpec) -> None:
        self.updated.append(spec)

    def set_unreachable(self, clients: dict[int, str]) -> None:
        self.unreachable.append(dict(clients))


def engine_of(**changes: Any) -> tuple[ScenarioEngine, Recorder]:
    return ScenarioEngine(plan_run(small_scenario(**changes))), Recorder()


def step(
    engine: ScenarioEngine, members: Recorder, round: int, sim_time: float = 0.0
) -> list[dict[str, Any]]:
    return asyncio.run(engine.begin_round(members, round, sim_time))


def event_stream(seed: int = 0) -> np.random.Generator:
    """The scenario's event stream, drawn from directly."""
    return numpy_rng(seed, EVENT_STREAM)


def test_a_fresh_engine_hosts_the_plans_clients_and_numbers_joiners_after_them() -> (
    None
):
    rotation = RotationTransform(angles=[0, 90])
    engine, _ = engine_of(transform=rotation)
    assert sorted(engine.specs) == [0, 1, 2, 3, 4, 5]
    assert engine.groups == {0: 0, 1: 1, 2: 0, 3: 1, 4: 0, 5: 1}
    assert engine.next_id == 6
    assert engine.crashed == {} and engine.straggling == {}
    assert engine.transform_groups == {0: 0, 1: 1, 2: 0, 3: 1, 4: 0, 5: 1}
    assert engine.partition_groups == {c: 0 for c in range(6)}


def test_a_crash_makes_the_client_unreachable_until_it_recovers() -> None:
    engine, members = engine_of(events=[Crash(start=1, target=2, recover_after=2)])
    applied = [step(engine, members, r) for r in range(5)]
    assert applied == [
        [],
        [{"kind": "crash", "clients": [2]}],
        [],
        [{"kind": "recover", "clients": [2]}],
        [],
    ]
    assert members.unreachable == [{}, {2: "crashed"}, {2: "crashed"}, {}, {}]


def test_a_crash_without_recovery_lasts_for_good() -> None:
    engine, members = engine_of(events=[Crash(start=0, target=[4, 1])])
    for r in range(4):
        step(engine, members, r)
    assert engine.crashed == {1: None, 4: None}
    assert members.unreachable[-1] == {1: "crashed", 4: "crashed"}


def test_recoveries_come_in_client_order() -> None:
    events = [
        Crash(start=0, target=3, recover_after=1),
        Crash(start=0, target=1, recover_after=1),
    ]
    engine, members = engine_of(events=events)
    step(engine, members, 0)
    assert step(engine, members, 1) == [
        {"kind": "recover", "clients": [1]},
        {"kind": "recover", "clients": [3]},
    ]


def test_a_leave_removes_the_client_with_its_crash_and_straggle() -> None:
    events = [
        Crash(start=0, target=1),
        Straggle(start=0, target=4, factor=3, rounds=5),
        Leave(start=1, target=[1, 4]),
    ]
    engine, members = engine_of(events=events)
    step(engine, members, 0)
    assert engine.clock.slowdowns == {4: 3.0}
    assert step(engine, members, 1) == [{"kind": "leave", "clients": [1, 4]}]
    assert members.removed == [(1, "scheduled leave"), (4, "scheduled leave")]
    assert sorted(engine.specs) == [0, 2, 3, 5]
    assert engine.crashed == {} and engine.straggling == {}
    assert members.unreachable[-1] == {}
    # The clock forgets the leavers' devices and slowdowns.
    assert engine.clock.slowdowns == {} and sorted(engine.clock.profiles) == [
        0,
        2,
        3,
        5,
    ]
    for r in range(2, 7):
        step(engine, members, r)
    assert members.updated == []


def test_an_event_whose_targets_have_all_left_applies_to_nobody() -> None:
    events = [Leave(start=1, target=2), Crash(start=2, target=2)]
    engine, members = engine_of(events=events)
    step(engine, members, 1)
    assert step(engine, members, 2) == [
        {"kind": "crash", "clients": [], "note": "no client matched"}
    ]
    assert engine.crashed == {}


def test_a_crashed_client_that_left_is_no_longer_reported_down() -> None:
    engine, members = engine_of(events=[Crash(start=0, target=3)])
    step(engine, members, 0)
    del engine.specs[3]  # gone another way than a scheduled leave
    step(engine, members, 1)
    assert members.unreachable == [{3: "crashed"}, {}]


def test_a_straggler_is_slowed_for_its_rounds_then_back_to_normal() -> None:
    events = [Straggle(start=1, target=3, factor=4, rounds=2)]
    engine, members = engine_of(events=events)
    spec = engine.specs[3]
    applied = [step(engine, members, r) for r in range(5)]
    assert applied[1] == [{"kind": "straggle", "clients": [3], "factor": 4}]
    assert applied[2:] == [[], [], []]
    # The clock holds the slowdown: no hosted client is updated.
    assert members.updated == [] and engine.specs[3] is spec
    assert engine.clock.slowdown(ClientId(3)) == 1.0 and engine.straggling == {}
    # the rounds it straggles: 1 and 2; back to normal before round 3
    engine, members = engine_of(events=events)
    for r in range(3):
        step(engine, members, r)
    assert engine.clock.slowdown(ClientId(3)) == 4.0 and engine.straggling == {3: 3}
    assert engine.clock.slowdowns == {3: 4.0}
    step(engine, members, 3)
    assert engine.clock.slowdown(ClientId(3)) == 1.0 and engine.clock.slowdowns == {}


def test_dropout_at_p_one_drops_every_target_and_at_p_zero_none() -> None:
    events = [Dropout(start=1, target=[5, 0], p=1.0), Dropout(start=2, target=1, p=0)]
    engine, members = engine_of(events=events)
    applied = [step(engine, members, r) for r in range(3)]
    assert applied[1] == [{"kind": "dropout", "clients": [5, 0]}]
    assert applied[2] == [{"kind": "dropout", "clients": []}]
    assert members.unreachable == [{}, {5: "dropped out", 0: "dropped out"}, {}]


def test_dropout_draws_one_uniform_per_target_from_the_event_stream() -> None:
    engine, members = engine_of(events=[Dropout(start=0, target="all", p=0.75)])
    draws = event_stream().random(6)
    expected = [c for c in range(6) if draws[c] < 0.75]
    assert 0 < len(expected) < 6  # the seed drops some, not all
    assert step(engine, members, 0) == [{"kind": "dropout", "clients": expected}]


def test_a_dropped_or_crashed_client_is_reported_so_not_as_unavailable() -> None:
    # availability 0.5 draws for every client after the events
    events = [Dropout(start=0, target=0, p=1.0), Crash(start=0, target=1)]
    engine, members = engine_of(device=DeviceProfile(availability=0.5), events=events)
    step(engine, members, 0)
    draws = event_stream().random(7)  # the dropout's draw, then one per client
    unavailable = {c: "unavailable this round" for c in range(6) if draws[1 + c] > 0.5}
    assert {0, 1} <= set(unavailable)  # so both reasons compete
    assert members.unreachable == [{**unavailable, 0: "dropped out", 1: "crashed"}]


def test_a_draw_equal_to_p_or_to_the_availability_keeps_the_client() -> None:
    # A client is dropped when its uniform draw u in [0, 1) has u < p, and is
    # unavailable when u > availability: p = 0 never drops, availability 1
    # never misses. Here p and the availability are the stream's first draw,
    # the one client 0 gets; the others draw less.
    first = float(event_stream().random())
    engine, members = engine_of(events=[Dropout(start=0, target=0, p=first)])
    assert step(engine, members, 0) == [{"kind": "dropout", "clients": []}]
    assert members.unreachable == [{}]
    engine, members = engine_of(device=DeviceProfile(availability=first))
    step(engine, members, 0)
    assert members.unreachable == [{}]


def test_fully_available_clients_draw_nothing_from_the_event_stream() -> None:
    engine, members = engine_of(events=[Crash(start=2, target="random:2")])
    step(engine, members, 0)
    step(engine, members, 1)
    chosen = sorted(event_stream().choice(6, size=2, replace=False).tolist())
    assert step(engine, members, 2) == [{"kind": "crash", "clients": chosen}]
    assert members.unreachable == [{}, {}, dict.fromkeys(chosen, "crashed")]


def test_a_network_event_changes_only_the_link_settings_it_names() -> None:
    events = [
        Network(start=1, target=2, latency_s=0.5),
        Network(start=2, target=[2, 3], bandwidth_bps=10.0),
        Network(start=3, target=4, latency_s=0, bandwidth_bps=7.0),
    ]
    engine, members = engine_of(events=events)
    default = DeviceProfile()
    applied = [step(engine, members, r) for r in range(4)]
    assert applied[1:] == [
        [{"kind": "network", "clients": [2]}],
        [{"kind": "network", "clients": [2, 3]}],
        [{"kind": "network", "clients": [4]}],
    ]
    links = {
        c: (p.latency_s, p.bandwidth_bps, p.samples_per_s)
        for c, p in ((c, engine.clock.profile(ClientId(c))) for c in (2, 3, 4, 5))
    }
    assert links == {
        2: (0.5, 10.0, default.samples_per_s),
        3: (default.latency_s, 10.0, default.samples_per_s),
        4: (0.0, 7.0, default.samples_per_s),
        5: (default.latency_s, default.bandwidth_bps, default.samples_per_s),
    }
    assert members.updated == []  # a link is the clock's, not the client's


def test_targets_name_everyone_a_group_or_listed_ids_still_present() -> None:
    events = [
        Leave(start=1, target=5),
        Crash(start=2, target="all"),
        Crash(start=3, target="group:1"),
        Crash(start=4, target=[4, 5, 0]),
        Crash(start=5, target=3),
    ]
    engine, members = engine_of(
        transform=RotationTransform(angles=[0, 90]), events=events
    )
    clients = [[e["clients"] for e in step(engine, members, r)] for r in range(6)]
    assert clients == [[], [[5]], [[0, 1, 2, 3, 4]], [[1, 3]], [[4, 0]], [[3]]]


def test_a_random_target_of_more_than_everyone_takes_everyone() -> None:
    engine, members = engine_of(
        events=[Leave(start=0, target=2), Crash(start=1, target="random:9")]
    )
    step(engine, members, 0)
    assert step(engine, members, 1) == [{"kind": "crash", "clients": [0, 1, 3, 4, 5]}]


def test_random_targets_are_distinct_clients_drawn_from_the_event_stream() -> None:
    engine, members = engine_of(events=[Crash(start=0, target="random")])
    (record,) = step(engine, members, 0)
    assert record["clients"] == event_stream().choice(6, 1, replace=False).tolist()
    engine, members = engine_of(events=[Crash(start=0, target="random:3")])
    (record,) = step(engine, members, 0)
    expected = event_stream().choice(6, size=3, replace=False)
    assert record["clients"] == sorted(expected.tolist())
    assert all(type(c) is int for c in record["clients"])


def test_a_join_adds_clients_with_the_data_set_aside_for_it() -> None:
    rotation = RotationTransform(angles=[0, 90])
    events = [Join(start=1, count=2, transform_group=1)]
    engine, members = engine_of(transform=rotation, events=events)
    reserved = list(engine.plan.reserved[0])
    step(engine, members, 0)
    assert step(engine, members, 1) == [{"kind": "join", "clients": [6, 7]}]
    assert members.added == [[6, 7]] and engine.next_id == 8
    assert engine.plan.reserved[0] == type(engine.plan.reserved[0])()
    for cid, kept in zip((6, 7), reserved, strict=True):
        spec = engine.specs[cid]
        assert spec.train == kept.split.train.tolist()
        assert spec.test == kept.split.test.tolist()
        assert spec.rotation == 90.0 and spec.group == 2 * kept.partition_group + 1
        assert engine.transform_groups[cid] == 1
        assert engine.partition_groups[cid] == kept.partition_group
    assert engine.groups[7] == 1


def test_a_join_past_its_set_aside_data_adds_nobody() -> None:
    # rounds 0..2: the join fires at 1 and 2, so two clients are set aside
    engine, members = engine_of(rounds=3, events=[Join(start=1, every=1)])
    assert len(engine.plan.reserved[0]) == 2
    applied = [step(engine, members, r) for r in range(5)]
    assert [a[0]["clients"] if a else None for a in applied] == [
        None,
        [6],
        [7],
        [],
        [],
    ]
    assert members.added == [[6], [7], [], []] and engine.next_id == 8


def test_a_joiner_without_a_transform_group_draws_one_from_the_event_stream() -> None:
    rotation = RotationTransform(angles=[0, 90, 180, 270])
    engine, members = engine_of(transform=rotation, events=[Join(start=0, count=3)])
    step(engine, members, 0)
    drawn = event_stream().integers(4, size=3).tolist()
    assert [engine.transform_groups[c] for c in (6, 7, 8)] == drawn
    assert [engine.specs[c].rotation for c in (6, 7, 8)] == [90.0 * g for g in drawn]


def test_a_joiner_plans_its_privacy_over_the_rounds_left() -> None:
    engine, members = engine_of(rounds=5, dp=DPSpec(epsilon=10), events=[Join(start=2)])
    step(engine, members, 2)
    assert engine.specs[6].privacy is not None
    assert engine.specs[6].privacy.rounds == 3  # rounds 2, 3 and 4
    assert engine.specs[0].privacy is not None and engine.specs[0].privacy.rounds == 5


def test_a_drift_to_a_group_takes_its_transform_and_true_group() -> None:
    rotation = RotationTransform(angles=[0, 90])
    events = [Drift(start=1, target=[0, 1], to_group=1)]
    engine, members = engine_of(transform=rotation, events=events)
    step(engine, members, 0)
    assert step(engine, members, 1) == [
        {"kind": "drift", "clients": [0, 1], "groups": [1, 1]}
    ]
    assert [(s.id, s.rotation, s.group) for s in members.updated] == [
        (0, 90.0, 1),
        (1, 90.0, 1),
    ]
    assert engine.transform_groups[0] == 1 and engine.groups[0] == 1


def test_a_drift_to_another_group_picks_one_of_the_others_from_the_event_stream() -> (
    None
):
    rotation = RotationTransform(angles=[0, 90, 180])
    engine, members = engine_of(
        transform=rotation, events=[Drift(start=0, target=4, to_group="other")]
    )
    # client 4 is dealt transform group 4 % 3 = 1; the others are 0 and 2
    (record,) = step(engine, members, 0)
    drawn = int(event_stream().choice([0, 2]))
    assert record == {"kind": "drift", "clients": [4], "groups": [drawn]}
    assert engine.specs[4].rotation == 90.0 * drawn


def test_a_drift_to_another_of_one_group_stays() -> None:
    engine, members = engine_of(events=[Drift(start=0, target=2, to_group="other")])
    assert step(engine, members, 0) == [
        {"kind": "drift", "clients": [2], "groups": [0]}
    ]
    assert engine.transform_groups[2] == 0


def test_a_drift_to_an_angle_or_permutation_finds_its_group() -> None:
    rotation = RotationTransform(angles=[0, 90])
    events = [
        Drift(start=0, target=0, rotation=90),
        Drift(start=0, target=2, rotation=30),
    ]
    engine, members = engine_of(transform=rotation, events=events)
    assert [r["groups"] for r in step(engine, members, 0)] == [[1], [2]]
    assert (engine.specs[0].rotation, engine.specs[2].rotation) == (90.0, 30.0)

    permutation = PermutationTransform(groups=2)
    swapped = [1, 0, 2, 3, 4, 5, 6, 7, 8, 9]
    events = [Drift(start=0, target=1, label_permutation=swapped)]
    engine, members = engine_of(transform=permutation, events=events)
    planted = engine.plan.transforms.permutations[1]
    assert swapped != planted
    assert step(engine, members, 0) == [
        {"kind": "drift", "clients": [1], "groups": [2]}
    ]
    assert engine.specs[1].label_permutation == swapped
    # back to the planted identity: group (partition 0, transform 0)
    events = [Drift(start=0, target=1, label_permutation=list(range(10)))]
    engine, members = engine_of(transform=permutation, events=events)
    assert engine.groups[1] == 1
    assert step(engine, members, 0)[0]["groups"] == [0]


def test_a_class_mix_drift_redraws_same_sized_data_of_those_classes() -> None:
    mix = [1.0, 3.0] + [0.0] * 8
    events = [Drift(start=0, target=[0, 1], class_mix=mix)]
    engine, members = engine_of(clients=20, events=events)
    before = {c: engine.specs[c] for c in (0, 1)}
    labels = engine.plan.dataset.labels
    (record,) = step(engine, members, 0)
    assert record == {"kind": "drift", "clients": [0, 1], "groups": [1, 1]}
    for c in (0, 1):
        spec = engine.specs[c]
        assert len(spec.train) == len(before[c].train)
        assert len(spec.test) == len(before[c].test)
        assert spec.train == sorted(spec.train) and spec.test == sorted(spec.test)
        assert len(set(spec.train + spec.test)) == len(spec.train + spec.test)
        drawn = labels[spec.train + spec.test]
        assert set(np.unique(drawn).tolist()) == {0, 1}
        assert 0.6 < np.mean(drawn == 1) < 0.9  # about 3 in 4
    assert engine.specs[0].train != before[0].train


def test_another_class_mix_gets_another_fresh_group() -> None:
    events = [
        Drift(start=0, target=0, class_mix=[1.0] * 2 + [0.0] * 8),
        Drift(start=0, target=1, class_mix=[0.0] * 2 + [1.0] * 2 + [0.0] * 6),
        Drift(start=0, target=2, class_mix=[1.0] * 2 + [0.0] * 8),
    ]
    engine, members = engine_of(clients=20, events=events)
    assert [r["groups"] for r in step(engine, members, 0)] == [[1], [2], [1]]


def test_a_class_mix_of_the_wrong_length_is_refused_naming_both_counts() -> None:
    engine, members = engine_of(events=[Drift(start=0, target=0, class_mix=[1, 1])])
    with pytest.raises(ValueError, match="^class_mix needs 10 weights, got 2$"):
        step(engine, members, 0)


def test_events_on_the_time_clock_fire_at_the_first_round_past_their_time() -> None:
    engine, members = engine_of(events=[Crash(clock="time", start=5.0, target=1)])
    assert step(engine, members, 0, 4.9) == []
    assert step(engine, members, 1, 5.2) == [{"kind": "crash", "clients": [1]}]


def _run(engine: ScenarioEngine, members: Recorder, rounds: range) -> list[Any]:
    return [
        (step(engine, members, r), members.unreachable[-1], dict(engine.specs))
        for r in rounds
    ]


EVENTS = [
    Join(start=1, every=2),
    Crash(start=1, target="random", recover_after=2),
    Straggle(start=2, target="random:2", factor=3, rounds=3),
    Drift(start=3, target="random", to_group="other"),
    Dropout(start=0, every=1, target="all", p=0.3),
]


def test_a_restored_engine_goes_on_as_the_original_would() -> None:
    scenario = small_scenario(rounds=8, transform=RotationTransform(), events=EVENTS)
    engine, members = ScenarioEngine(plan_run(scenario)), Recorder()
    _run(engine, members, range(4))
    snapshot = engine.snapshot()
    assert snapshot["reserved_taken"] == {0: 2}
    assert snapshot["next_id"] == 8 and snapshot["fired"][0] == 2
    resumed = ScenarioEngine(plan_run(scenario))
    resumed.restore(snapshot)
    assert len(resumed.plan.reserved[0]) == len(engine.plan.reserved[0]) == 2
    assert resumed.crashed == engine.crashed and resumed.straggling == engine.straggling
    assert resumed.partition_groups == engine.partition_groups
    assert resumed.transform_groups == engine.transform_groups
    assert resumed.next_id == 8
    assert _run(resumed, Recorder(), range(4, 8)) == _run(engine, members, range(4, 8))


def test_one_snapshot_restores_any_number_of_engines_alike() -> None:
    scenario = small_scenario(rounds=8, transform=RotationTransform(), events=EVENTS)
    engine = ScenarioEngine(plan_run(scenario))
    _run(engine, Recorder(), range(3))
    snapshot = engine.snapshot()
    first, second = (ScenarioEngine(plan_run(scenario)) for _ in range(2))
    first.restore(snapshot)
    second.restore(snapshot)
    ahead = _run(first, Recorder(), range(3, 8))
    assert _run(second, Recorder(), range(3, 8)) == ahead


def test_a_snapshot_does_not_move_with_the_engine() -> None:
    scenario = small_scenario(rounds=8, transform=RotationTransform(), events=EVENTS)
    engine, members = ScenarioEngine(plan_run(scenario)), Recorder()
    _run(engine, members, range(2))
    snapshot = engine.snapshot()
    before = (dict(snapshot["fired"]), dict(snapshot["crashed"]), snapshot["next_id"])
    draw = snapshot["rng"].bit_generator.state
    _run(engine, members, range(2, 6))
    assert (
        dict(snapshot["fired"]),
        dict(snapshot["crashed"]),
        snapshot["next_id"],
    ) == (before)
    assert snapshot["rng"].bit_generator.state == draw
    assert sorted(snapshot["specs"]) == [0, 1, 2, 3, 4, 5, 6]


def test_a_restored_private_client_keeps_its_plan_under_the_new_run() -> None:
    scenario = small_scenario(rounds=4, dp=DPSpec(epsilon=10), events=[Join(start=1)])
    engine, members = ScenarioEngine(plan_run(scenario)), Recorder()
    _run(engine, members, range(2))
    snapshot = engine.snapshot()
    resumed = ScenarioEngine(plan_run(scenario))
    assert resumed.plan.run_id != engine.plan.run_id
    resumed.restore(snapshot)
    for cid, spec in resumed.specs.items():
        old = engine.specs[cid]
        assert spec.privacy is not None and old.privacy is not None
        assert spec.privacy.run_id == resumed.plan.run_id
        assert spec.privacy.model_dump(exclude={"run_id"}) == old.privacy.model_dump(
            exclude={"run_id"}
        )
        assert spec.model_dump(exclude={"privacy"}) == old.model_dump(
            exclude={"privacy"}
        )
    # a client without privacy comes back as it was
    plain = ScenarioEngine(plan_run(small_scenario(rounds=4)))
    kept = plain.snapshot()
    fresh = ScenarioEngine(plan_run(small_scenario(rounds=4)))
    fresh.restore(kept)
    assert fresh.specs == plain.specs
