"""Scenario events and the timeline alone: schedules, targets, order of firing."""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter, ValidationError

from clusterfed.scenarios import Crash, Drift, Dropout, Join, Leave, Network, Straggle
from clusterfed.scenarios.events import PRIORITY, Event, Target
from clusterfed.scenarios.timeline import Occurrence, Timeline

EVENT = TypeAdapter(Event)


def keys(occurrences: list[Occurrence]) -> list[tuple[str, int, float]]:
    return [(o.event.kind, o.index, o.key) for o in occurrences]


# --- targets ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "parsed"),
    [
        (3, Target(ids=(3,))),
        (0, Target(ids=(0,))),
        ([4, 1], Target(ids=(4, 1))),
        ("all", Target(everyone=True)),
        ("random", Target(random=1)),
        ("random:3", Target(random=3)),
        ("group:2", Target(group=2)),
        ("group:0", Target(group=0)),
    ],
)
def test_each_spelling_of_a_target_parses_to_whom_it_names(
    raw: int | list[int] | str, parsed: Target
) -> None:
    assert Leave(target=raw).target == raw
    assert Target.parse(raw) == parsed


def test_a_target_by_default_names_nobody() -> None:
    target = Target()
    assert (target.ids, target.everyone, target.random, target.group) == (
        (),
        False,
        0,
        None,
    )


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            "someone",
            "target 'someone' is not a client id, a list of ids, 'all', 'random',"
            " 'random:K' or 'group:G'",
        ),
        ("all ", "target 'all ' is not a client id"),
        ("xall", "target 'xall' is not a client id"),
        ("random:", "target 'random:' is not"),
        ("group:x", "target 'group:x' is not"),
        ([], "target lists no client"),
        (-1, "client ids are >= 0, got -1"),
        ([2, -3], "client ids are >= 0, got [2, -3]"),
    ],
)
def test_bad_targets_are_refused_showing_the_value(
    raw: int | list[int] | str, message: str
) -> None:
    with pytest.raises(ValidationError) as error:
        Leave(target=raw)
    assert f"Value error, {message}" in str(error.value)


# --- schedules ---------------------------------------------------------------


def test_an_event_by_default_fires_once_at_round_0() -> None:
    event = Leave(target=0)
    assert (event.clock, event.start, event.every, event.until) == (
        "round",
        0,
        None,
        None,
    )
    assert list(event.occurrences(10)) == [0]


def test_a_one_off_event_fires_at_its_start_if_the_run_reaches_it() -> None:
    assert list(Crash(start=4, target=0).occurrences(4)) == [4]
    assert list(Crash(start=4, target=0).occurrences(3)) == []
    assert list(Crash(start=4, until=4, target=0).occurrences(9)) == [4]


def test_a_repeating_event_without_until_fires_up_to_the_horizon() -> None:
    assert list(Crash(start=1, every=3, target=0).occurrences(10)) == [1, 4, 7, 10]
    assert list(Crash(start=1, every=3, target=0).occurrences(9)) == [1, 4, 7]


def test_a_time_key_within_a_nanosecond_of_the_end_still_fires() -> None:
    # 0.1 * 3 is 0.30000000000000004 in floating point: still "at" 0.3.
    event = Dropout(clock="time", start=0.0, every=0.1, target=0, p=0.5)
    assert len(list(event.occurrences(0.3))) == 4
    assert len(list(event.occurrences(0.3 - 1e-6))) == 3
    # the slack is inclusive: a key exactly 1e-9 past the end still fires
    event = Dropout(clock="time", start=0.5 + 1e-9, every=1.0, target=0, p=0.5)
    assert list(event.occurrences(0.5)) == [0.5 + 1e-9]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"start": 1.5}, "start counts rounds here: 1.5 is not whole"),
        ({"every": 0.5}, "every counts rounds here: 0.5 is not whole"),
        ({"until": 2.5}, "until counts rounds here: 2.5 is not whole"),
        ({"start": 3, "until": 2}, "until (2.0) is before start (3.0)"),
        ({"clock": "time", "start": 3, "until": 2.5}, "until (2.5) is before start"),
        ({"start": -1}, "start"),
        ({"every": 0}, "every"),
        ({"until": -1}, "until"),
        ({"clock": "wall"}, "clock"),
    ],
)
def test_bad_schedules_are_refused(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError) as error:
        Crash(target=0, **fields)
    assert message in str(error.value)


def test_time_keys_may_be_fractional_and_round_keys_whole_floats() -> None:
    timed = Crash(clock="time", start=0.5, every=0.25, until=0.5, target=0)
    assert list(timed.occurrences(9)) == [0.5]
    assert Crash(start=2.0, every=1.0, until=3.0, target=0).until == 3


# --- the kinds' own fields --------------------------------------------------------


def test_each_kind_has_its_defaults() -> None:
    join = Join()
    assert (join.count, join.transform_group, join.partition_group) == (1, None, None)
    assert Straggle(target=0, factor=2).rounds == 1
    assert Crash(target=0).recover_after is None
    assert Network(target=0, latency_s=0).bandwidth_bps is None
    assert Network(target=0, bandwidth_bps=1).latency_s is None
    assert Dropout(target=0, p=0).p == 0 and Dropout(target=0, p=1).p == 1
    assert Join(transform_group=0, partition_group=0).transform_group == 0


@pytest.mark.parametrize(
    ("kind", "fields", "message"),
    [
        (Join, {"count": 0}, "count"),
        (Join, {"transform_group": -1}, "transform_group"),
        (Join, {"partition_group": -1}, "partition_group"),
        (
            Join,
            {"clock": "time", "every": 2.0},
            "a join that repeats on the time clock needs `until`",
        ),
        (Straggle, {"target": 0, "factor": 0}, "factor"),
        (Straggle, {"target": 0, "factor": 2, "rounds": 0}, "rounds"),
        (Straggle, {"target": 0}, "factor"),
        (Crash, {"target": 0, "recover_after": 0}, "recover_after"),
        (Dropout, {"target": 0, "p": 1.01}, "p"),
        (Dropout, {"target": 0, "p": -0.01}, "p"),
        (Dropout, {"target": 0}, "p"),
        (Network, {"target": 0, "latency_s": -1}, "latency_s"),
        (Network, {"target": 0, "bandwidth_bps": 0}, "bandwidth_bps"),
        (
            Network,
            {"target": 0},
            "a network event sets latency_s, bandwidth_bps or both",
        ),
        (Leave, {}, "target"),
        (Leave, {"target": 0, "extra": 1}, "extra"),
    ],
)
def test_bad_event_fields_are_refused(
    kind: type, fields: dict[str, object], message: str
) -> None:
    with pytest.raises(ValidationError) as error:
        kind(**fields)
    assert message in str(error.value)


def test_a_repeating_join_on_the_time_clock_with_until_or_on_rounds_is_countable() -> (
    None
):
    assert Join(clock="time", every=2.0, until=6.0).until == 6
    assert Join(every=2).every == 2
    assert Join(clock="time", start=3.5).start == 3.5


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {},
            "a drift takes exactly one of to_group, rotation, label_permutation,"
            " class_mix; got none",
        ),
        ({"rotation": 9, "to_group": 1}, "got ['to_group', 'rotation']"),
        (
            {"label_permutation": [1, 0], "class_mix": [1, 1]},
            "got ['label_permutation', 'class_mix']",
        ),
        ({"to_group": -1}, "to_group must be >= 0, got -1"),
        ({"class_mix": [1, -0.5, 1]}, "class_mix weights must be >= 0"),
        ({"class_mix": [0, 0]}, "with a positive sum"),
    ],
)
def test_a_drift_takes_exactly_one_valid_change(
    fields: dict[str, object], message: str
) -> None:
    with pytest.raises(ValidationError) as error:
        Drift(target=0, **fields)
    assert message in str(error.value)


def test_a_drift_accepts_each_change_alone_at_its_edges() -> None:
    assert Drift(target=0, to_group=0).to_group == 0
    assert Drift(target=0, to_group="other").to_group == "other"
    assert Drift(target=0, rotation=0).rotation == 0
    assert Drift(target=0, class_mix=[0, 0.5]).class_mix == [0, 0.5]


def test_events_are_told_apart_by_kind() -> None:
    event = EVENT.validate_python({"kind": "crash", "target": "all", "start": 2})
    assert isinstance(event, Crash) and event.start == 2
    with pytest.raises(ValidationError, match="meteor"):
        EVENT.validate_python({"kind": "meteor"})


# --- the timeline --------------------------------------------------------------


def test_same_round_events_fire_leave_crash_join_drift_network_straggle_dropout() -> (
    None
):
    written = [
        Dropout(start=1, target=0, p=0.5),
        Straggle(start=1, target=0, factor=2),
        Network(start=1, target=0, latency_s=1),
        Drift(start=1, target=0, rotation=5),
        Join(start=1),
        Crash(start=1, target=0),
        Leave(start=1, target=0),
    ]
    fired = Timeline(written).due(1, 0.0)
    assert [o.event.kind for o in fired] == [
        "leave",
        "crash",
        "join",
        "drift",
        "network",
        "straggle",
        "dropout",
    ]
    assert sorted(PRIORITY, key=PRIORITY.__getitem__) == [o.event.kind for o in fired]
    assert [o.priority for o in fired] == list(range(7))


def test_same_kind_same_round_events_fire_in_the_order_written() -> None:
    written = [Crash(start=2, target=i) for i in (5, 3, 4)]
    fired = Timeline(written).due(2, 0.0)
    assert [o.event.target for o in fired] == [5, 3, 4]


def test_due_hands_out_each_occurrence_once_when_its_round_or_time_comes() -> None:
    timeline = Timeline(
        [
            Crash(start=1, every=2, until=5, target=0),
            Leave(clock="time", start=2.5, target=1),
        ]
    )
    assert timeline.due(0, 2.4) == []
    assert keys(timeline.due(1, 2.4)) == [("crash", 0, 1)]
    assert timeline.due(1, 2.4) == []
    assert keys(timeline.due(2, 2.5)) == [("leave", 1, 2.5)]
    assert keys(timeline.due(5, 9.0)) == [("crash", 0, 3), ("crash", 0, 5)]
    assert timeline.due(99, 99.0) == []
    assert timeline.fired == {0: 3, 1: 1}


def test_a_late_call_hands_out_what_is_overdue_by_kind_then_event_then_key() -> None:
    timeline = Timeline(
        [
            Dropout(start=0, every=1, target=0, p=0.5),
            Crash(start=1, every=1, target=1),
            Crash(clock="time", start=0.5, every=1.0, until=1.5, target=2),
        ]
    )
    assert keys(timeline.due(2, 1.5)) == [
        ("crash", 1, 1),
        ("crash", 1, 2),
        ("crash", 2, 0.5),
        ("crash", 2, 1.5),
        ("dropout", 0, 0),
        ("dropout", 0, 1),
        ("dropout", 0, 2),
    ]


def test_a_time_occurrence_a_rounding_error_past_now_is_due() -> None:
    timeline = Timeline([Crash(clock="time", start=0.3, target=0)])
    assert timeline.due(0, 0.1 + 0.2 - 1e-10) != []  # within 1e-9 of 0.3
    timeline = Timeline([Crash(clock="time", start=0.3, target=0)])
    assert timeline.due(0, 0.3 - 1e-6) == []
    # the slack is inclusive: an occurrence exactly 1e-9 s on is due too
    timeline = Timeline([Crash(clock="time", start=0.5 + 1e-9, target=0)])
    assert timeline.due(0, 0.5) != []


def test_round_keys_compare_with_rounds_and_time_keys_with_seconds() -> None:
    timeline = Timeline(
        [Crash(start=3, target=0), Crash(clock="time", start=3.0, target=1)]
    )
    assert keys(timeline.due(3, 0.0)) == [("crash", 0, 3)]
    assert keys(timeline.due(0, 3.0)) == [("crash", 1, 3.0)]


def test_a_resumed_timeline_goes_on_where_the_old_one_stopped() -> None:
    events = [Crash(start=0, every=2, target=0), Leave(start=3, target=1)]
    old = Timeline(events)
    old.due(2, 0.0)
    assert old.fired == {0: 2}
    new = Timeline(events, old.fired)
    assert new.fired == {0: 2} and new.fired is not old.fired
    assert keys(new.due(4, 0.0)) == [("leave", 1, 3), ("crash", 0, 4)]
    assert keys(old.due(4, 0.0)) == [("leave", 1, 3), ("crash", 0, 4)]
    done = Timeline(events, {0: 2, 1: 1})
    assert keys(done.due(4, 0.0)) == [("crash", 0, 4)]


def test_a_timeline_that_fired_everything_is_empty() -> None:
    assert Timeline([Crash(start=1, target=0)], {0: 1}).due(9, 9.0) == []
    assert Timeline([Crash(start=1, target=0)], {0: 5}).due(9, 9.0) == []


def test_occurrences_order_by_key_then_priority_then_index() -> None:
    leave, crash = Leave(target=0), Crash(target=0)
    assert Occurrence(1, 5, 0, crash) < Occurrence(2, 0, 0, crash)
    assert Occurrence(1, 0, 9, crash) < Occurrence(1, 1, 0, crash)
    assert Occurrence(1, 0, 0, crash) < Occurrence(1, 0, 1, leave)
    assert Occurrence(1, 0, 0, crash) == Occurrence(1, 0, 0, leave)
