"""What is wrong with a scenario: each problem named in one style, whole."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from clusterfed.scenarios import Crash, Join, Scenario
from clusterfed.scenarios.problems import (
    describe_problems,
    did_you_mean,
    field_path,
    scenario_warnings,
    unfired_time_events,
)


def problems(**data: Any) -> str:
    with pytest.raises(ValidationError) as error:
        Scenario.model_validate({"name": "x", **data})
    return describe_problems(error.value, Scenario)


def test_did_you_mean_offers_the_closest_known_name() -> None:
    assert did_you_mean("epochz", ["lr", "epochs"]) == "; did you mean 'epochs'?"
    # the single closest, of names listed once each
    assert did_you_mean("alphq", ["alpha", "alpha", "alphas"]) == (
        "; did you mean 'alpha'?"
    )


def test_did_you_mean_lists_the_known_names_when_none_is_close() -> None:
    assert did_you_mean("zz", ["b", "a", "b"]) == "; known: a, b"
    assert did_you_mean("zz", ["b", "a"], list_known=False) == ""
    assert did_you_mean("zz", []) == ""
    # difflib's ratio 2·3/8 = 0.75 is close; 2·1/4 = 0.5 is not (cutoff 0.6)
    assert did_you_mean("abcd", ["abcz"]) == "; did you mean 'abcz'?"
    assert did_you_mean("ab", ["az"]) == "; known: az"


@pytest.mark.parametrize(
    ("loc", "said"),
    [
        (("events", 1, "straggle", "start"), "events[1] (straggle).start"),
        # a union's tag right after a field is dropped
        (("partition", "dirichlet", "alpha"), "partition.alpha"),
        (("deadline", "deadline", "seconds"), "deadline.seconds"),
        (("clients",), "clients"),
        ((), ""),
        # through a dict to its values' fields
        (("devices", 3, "samples_per_s"), "devices[3].samples_per_s"),
        (
            ("algorithm_params", "fedavg", "fraction"),
            "algorithm_params.fedavg.fraction",
        ),
        (("faulty", 0, "behaviour"), "faulty[0].behaviour"),
        # a field named like a tag stays a field
        (("events", 0, "crash", "kind"), "events[0] (crash).kind"),
    ],
)
def test_a_field_path_names_list_items_by_index_and_kind(
    loc: tuple[int | str, ...], said: str
) -> None:
    assert field_path(loc, Scenario) == said


def test_without_a_model_every_part_of_a_path_is_a_field() -> None:
    assert field_path(("events", 1, "straggle", "start")) == (
        "events[1].straggle.start"
    )


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (
            {"partition": {"kind": "stripes"}},
            "partition: unknown kind 'stripes';"
            " known: class_table, dirichlet, iid, iid_mix, shards",
        ),
        (
            {"deadline": {"policy": "dedline"}},
            "deadline: unknown policy 'dedline'; did you mean 'deadline'?",
        ),
        (
            {"deadline": {"policy": "zzz"}},
            "deadline: unknown policy 'zzz'; known: deadline, fraction, wait_all",
        ),
        (
            {"events": [{"target": 1}]},
            "events[0]: missing 'kind', which says what this is",
        ),
        # an optional table's fields (not None's)
        (
            {"dp": {"epsilom": 1}},
            "dp.epsilom: unknown field 'epsilom'; did you mean 'epsilon'?;"
            " dp.epsilon: missing (required)",
        ),
        (
            {"deadline": {"seconds": 2}},
            "deadline: missing 'policy', which says what this is",
        ),
        # a check's own message, even of a short value, is not followed by it
        ({"dp": True}, "dp: give the budget, e.g. dp.epsilon = 10 (or dp = off)"),
        ({"mode": "zzz"}, "mode: 'zzz' is not one of 'sync', 'async'"),
        (
            {"dp": {"epsilon": 1, "accountant": "rpd"}},
            "dp.accountant: 'rpd' is not one of 'rdp', 'prv', 'gdp';"
            " did you mean 'rdp'?",
        ),
        # a literal given no text: pydantic's words, with the value
        ({"mode": 3}, "mode: Input should be 'sync' or 'async' (got 3)"),
        (
            {"events": [{"kind": "straggle", "target": 2, "slowdown": 3}]},
            "events[0] (straggle).slowdown: unknown field 'slowdown';"
            " known: clock, every, factor, kind, rounds, start, target, until;"
            " events[0] (straggle).factor: missing (required)",
        ),
        # a long value or a list is not repeated
        (
            {"clients": "x" * 80},
            "clients: Input should be a valid integer,"
            " unable to parse string as an integer",
        ),
        ({"clients": [1]}, "clients: Input should be a valid integer"),
        # shown up to a repr of 60 characters
        ({"clients": "x" * 58}, f"(got '{'x' * 58}')"),
        (
            {"clients": "x" * 59},
            "clients: Input should be a valid integer,"
            " unable to parse string as an integer",
        ),
        # a dict's values: their fields, whether the key is a number or text
        (
            {"devices": {3: {"samples_per_sec": 1}}},
            "devices[3].samples_per_sec: unknown field 'samples_per_sec';"
            " did you mean 'samples_per_s'?",
        ),
        (
            {"devices": {"3": {"samples_per_sec": 1}}},
            "devices.3.samples_per_sec: unknown field 'samples_per_sec';"
            " did you mean 'samples_per_s'?",
        ),
        # the scenario's own checks: no field before the message, no value after
        (
            {"devices": {30: {}}},
            "devices: client 30 does not exist (clients are 0..19)",
        ),
        (
            {"clients": 0, "rounds": 0},
            "clients: Input should be greater than or equal to 1 (got 0);"
            " rounds: Input should be greater than or equal to 1 (got 0)",
        ),
        ({"test_fraction": True}, "(got True)"),
    ],
)
def test_each_problem_is_said_whole(data: dict[str, Any], said: str) -> None:
    text = problems(**data)
    assert text == said or (said.startswith("(got") and text.endswith(said))


def test_a_check_s_message_is_shown_without_pydantic_s_prefix() -> None:
    text = problems(algorithm_params={"fedavg": {"fraction": 2.0}})
    assert text == (
        "algorithm_params.fedavg: fedavg: fraction must be in (0, 1], got 2.0"
    )


def test_round_events_after_the_last_round_are_warned_of() -> None:
    scenario = Scenario(
        name="x",
        rounds=5,
        events=[
            Crash(start=4, target=0),
            Crash(start=5, target=1),
            Crash(start=6, target=2),
            Crash(clock="time", start=100.0, target=3),
        ],
    )
    assert scenario_warnings(scenario) == [
        "events[1] (crash): start 5 is after the last round (4): it never fires",
        "events[2] (crash): start 6 is after the last round (4): it never fires",
    ]


def test_time_events_that_never_fired_are_named_with_the_last_round_s_start() -> None:
    scenario = Scenario(
        name="x",
        rounds=5,
        events=[
            Crash(clock="time", start=10.0, target=0),
            Join(start=1),
            Crash(clock="time", start=250.0, target=1),
            Crash(clock="time", start=300.0, target=2),
        ],
    )
    # event 1 is on the round clock; 0 fired, 2 fired zero times, 3 not at all
    assert unfired_time_events(scenario, {0: 1, 1: 0, 2: 0}, 123.456) == [
        "events[2] (crash): start 250 s is after the last round started"
        " (123.5 s): it never fired",
        "events[3] (crash): start 300 s is after the last round started"
        " (123.5 s): it never fired",
    ]


def test_each_dropped_occurrence_of_a_repeating_event_is_named() -> None:
    scenario = Scenario(
        name="x",
        rounds=2,
        events=[
            Join(clock="time", start=1.5, every=2.0, until=5.5),  # 1.5 3.5 5.5
            Crash(clock="time", start=1.0, every=1.0, target=0),  # no end
        ],
    )
    # The join fired once (at 1.5 s): its two later occurrences are named; the
    # endless crash fired, so nothing is said of it.
    assert unfired_time_events(scenario, {0: 1, 1: 2}, 3.0) == [
        "events[0] (join): its occurrence at 3.5 s is after the last round"
        " started (3.0 s): it never fired",
        "events[0] (join): its occurrence at 5.5 s is after the last round"
        " started (3.0 s): it never fired",
    ]
    # Never fired: its start is named, and each later occurrence.
    assert unfired_time_events(scenario, {1: 1}, 1.0)[:2] == [
        "events[0] (join): start 1.5 s is after the last round started"
        " (1.0 s): it never fired",
        "events[0] (join): its occurrence at 3.5 s is after the last round"
        " started (1.0 s): it never fired",
    ]


def test_a_misspelt_tag_is_named_where_it_is_missing() -> None:
    with pytest.raises(ValidationError) as error:
        Scenario.model_validate(
            {"name": "x", "deadline": {"polcy": "fraction", "fraction": 0.5}}
        )
    assert describe_problems(error.value, Scenario) == (
        "deadline: missing 'policy', which says what this is;"
        " is 'polcy' a misspelt 'policy'?"
    )


def test_an_unknown_field_is_told_before_the_field_it_misspells() -> None:
    with pytest.raises(ValidationError) as error:
        Scenario.model_validate({"name": "x", "dp": {"epsilom": 3}})
    assert describe_problems(error.value, Scenario) == (
        "dp.epsilom: unknown field 'epsilom'; did you mean 'epsilon'?;"
        " dp.epsilon: missing (required)"
    )
