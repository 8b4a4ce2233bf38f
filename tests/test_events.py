"""Every scenario event, through whole runs: its effect shows in rounds.jsonl."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest

import clusterfed
from clusterfed.actors.clock import Deadline, Fraction
from clusterfed.errors import ScenarioError, ScenarioWarning
from clusterfed.scenarios import (
    Crash,
    Drift,
    Dropout,
    Join,
    Leave,
    Network,
    RotationTransform,
    Straggle,
    load_scenario,
)
from helpers import read_rounds, small_scenario


def run(tmp_path: Path, **changes: Any) -> list[dict[str, Any]]:
    clusterfed.run(small_scenario(**changes), out=tmp_path)
    return read_rounds(tmp_path)


def client(row: dict[str, Any], cid: int) -> dict[str, Any] | None:
    return next((c for c in row["clients"] if c["id"] == cid), None)


def test_a_join_at_round_10_adds_a_client_from_round_10_on(tmp_path: Path) -> None:
    rows = run(tmp_path, rounds=12, events=[Join(start=10)])
    newcomer = 6  # ids continue after the six first clients
    assert all(client(r, newcomer) is None for r in rows[:10])
    for row in rows[10:]:
        assert client(row, newcomer)["acc"] is not None  # type: ignore[index]
    assert rows[10]["events"] == [{"kind": "join", "clients": [newcomer]}]
    assert [len(r["clients"]) for r in rows] == [6] * 10 + [7, 7]


def test_joins_that_repeat_get_their_own_data(tmp_path: Path) -> None:
    scenario = small_scenario(rounds=5, events=[Join(start=1, every=2)])
    result = clusterfed.run(scenario, out=tmp_path)
    assert [len(r["clients"]) for r in result.rows] == [6, 7, 7, 8, 8]


def test_a_leave_removes_the_client_for_good(tmp_path: Path) -> None:
    rows = run(tmp_path, rounds=4, events=[Leave(start=2, target=3)])
    assert [client(r, 3) is not None for r in rows] == [True, True, False, False]
    assert rows[2]["events"] == [{"kind": "leave", "clients": [3]}]


def test_a_drift_changes_transform_and_true_group_from_that_round(
    tmp_path: Path,
) -> None:
    rotation = RotationTransform(angles=[0, 180])
    rows = run(
        tmp_path,
        rounds=4,
        transform=rotation,
        events=[Drift(start=2, target=0, to_group=1)],
    )
    groups = [client(r, 0)["group"] for r in rows]  # type: ignore[index]
    assert groups == [0, 0, 1, 1]
    assert rows[2]["events"][0] == {"kind": "drift", "clients": [0], "groups": [1]}
    assert all(client(r, 1)["group"] == 1 for r in rows)  # type: ignore[index]


def test_a_drift_to_a_new_angle_or_class_mix_gets_a_fresh_group(tmp_path: Path) -> None:
    events = [
        Drift(start=1, target=2, rotation=45),
        Drift(start=2, target=3, class_mix=[1] * 5 + [0] * 5),
    ]
    rows = run(
        tmp_path, rounds=3, transform=RotationTransform(angles=[0, 90]), events=events
    )
    planted = {c["group"] for c in rows[0]["clients"]}
    assert planted == {0, 1}
    assert client(rows[1], 2)["group"] not in planted  # type: ignore[index]
    fresh = client(rows[2], 3)["group"]  # type: ignore[index]
    assert fresh not in planted and fresh != client(rows[2], 2)["group"]  # type: ignore[index]


def test_a_straggler_is_late_exactly_while_it_straggles(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", ScenarioWarning)  # nothing to warn of
        rows = run(
            tmp_path,
            rounds=6,
            deadline=Deadline(seconds=2.0),
            events=[Straggle(start=2, target=1, factor=50, rounds=2)],
        )
    late = [client(r, 1)["late"] for r in rows]  # type: ignore[index]
    assert late == [False, False, True, True, False, False]
    assert [r["late_updates"] for r in rows] == [0, 0, 1, 1, 0, 0]
    for row in rows:
        others_done = max(c["sim_s"] for c in row["clients"] if not c["late"])
        assert others_done < 2.0
    lengths = [
        b["sim_time"] - a["sim_time"] for a, b in zip(rows, rows[1:], strict=False)
    ]
    assert lengths[1] == pytest.approx(2.0) and lengths[2] == pytest.approx(2.0)
    assert lengths[3] < 2.0 and lengths[0] < 2.0


def test_what_cannot_happen_as_written_is_warned_of_and_kept(tmp_path: Path) -> None:
    with pytest.warns(ScenarioWarning) as caught:
        clusterfed.run(
            small_scenario(
                rounds=4,
                deadline=Deadline(seconds=60.0),
                events=[
                    Drift(start=40, target=1, rotation=90.0),
                    Straggle(start=1, target=2, factor=2.0),
                    Leave(clock="time", start=9999.0, target=3),
                ],
            ),
            out=tmp_path,
        )
    said = [str(w.message) for w in caught]
    assert said[0] == (
        "events[0] (drift): start 40 is after the last round (3): it never fires"
    )
    assert said[1].startswith(
        "round 1: client 2 straggles (×2) but finished in"
    ) and said[1].endswith(
        "so it is not late; raise the straggle factor or tighten the deadline"
    )
    assert said[2].startswith(
        "events[2] (leave): start 9999 s is after the last round started"
    )
    assert len(said) == 3
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["warnings"] == said


def test_a_fraction_policy_leaves_the_slowest_late(tmp_path: Path) -> None:
    rows = run(
        tmp_path,
        rounds=2,
        deadline=Fraction(fraction=5 / 6),
        events=[Straggle(start=0, target=4, factor=30, rounds=2)],
    )
    assert [r["late_updates"] for r in rows] == [1, 1]
    assert all(client(r, 4)["late"] for r in rows)  # type: ignore[index]


def test_a_crash_marks_failed_until_recovery(tmp_path: Path) -> None:
    rows = run(tmp_path, rounds=5, events=[Crash(start=1, target=2, recover_after=2)])
    failed = [client(r, 2)["failed"] for r in rows]  # type: ignore[index]
    assert failed == [False, True, True, False, False]
    assert (
        client(rows[1], 2)["acc"] is None and "crashed" in client(rows[1], 2)["reason"]
    )  # type: ignore[index]
    assert [e["kind"] for e in rows[3]["events"]] == ["recover"]


def test_dropout_at_p_one_yields_no_update_from_the_targets(tmp_path: Path) -> None:
    rows = run(tmp_path, rounds=3, events=[Dropout(start=1, target=[0, 5], p=1.0)])
    assert [r["failed_updates"] for r in rows] == [0, 2, 0]
    for cid in (0, 5):
        assert not client(rows[1], cid)["trained"]  # type: ignore[index]
        assert client(rows[2], cid)["trained"]  # type: ignore[index]


def test_a_slower_network_makes_rounds_longer(tmp_path: Path) -> None:
    rows = run(
        tmp_path, rounds=3, events=[Network(start=1, target="all", bandwidth_bps=1e3)]
    )
    lengths = [rows[0]["sim_time"]] + [
        b["sim_time"] - a["sim_time"] for a, b in zip(rows, rows[1:], strict=False)
    ]
    # about 20 kB each way at 1 kB/s instead of 1.25 MB/s
    assert lengths[1] > 10 * lengths[0] and lengths[2] == pytest.approx(lengths[1])


def test_random_and_group_targets_follow_the_seed(tmp_path: Path) -> None:
    events = [Crash(start=1, target="random:2"), Leave(start=2, target="group:1")]
    transform = RotationTransform(angles=[0, 90])
    a = run(tmp_path / "a", rounds=3, transform=transform, events=events)
    b = run(tmp_path / "b", rounds=3, transform=transform, events=events)
    assert a[1]["events"] == b[1]["events"] and len(a[1]["events"][0]["clients"]) == 2
    assert {c["group"] for c in a[2]["clients"]} == {0}


def test_the_same_scenario_and_seed_reproduce_rounds_jsonl(tmp_path: Path) -> None:
    events = [
        Join(start=1, every=2),
        Drift(start=1, target="random", to_group="other"),
        Dropout(start=0, every=1, target="all", p=0.3),
        Straggle(start=2, target="random", factor=20),
    ]
    changes = dict(
        rounds=5,
        transform=RotationTransform(),
        deadline=Deadline(seconds=3),
        events=events,
    )
    a, b = run(tmp_path / "a", **changes), run(tmp_path / "b", **changes)
    for row in a + b:
        row.pop("wall_time")  # the one field that measures the machine, not the run
    assert a == b


REFUSED = [
    ('[[events]]\nkind = "meteor"\nstart = 1', "meteor"),
    (
        '[[events]]\nkind = "leave"\nstart = 1\ntarget = 99',
        "target [99] does not exist",
    ),
    ('[[events]]\nkind = "crash"\nstart = -4\ntarget = 0', "start"),
    ('[[events]]\nkind = "straggle"\nstart = 1\ntarget = 0\nfactor = "slow"', "factor"),
    ('[[events]]\nkind = "leave"\nstart = 1.5\ntarget = 0', "not whole"),
    ('[[events]]\nkind = "leave"\nstart = 1\ntarget = "someone"', "someone"),
    ('[[events]]\nkind = "drift"\nstart = 1\ntarget = 0', "exactly one"),
    ('[[events]]\nkind = "drift"\nstart = 1\ntarget = 0\nto_group = 3', "to_group 3"),
    (
        '[[events]]\nkind = "join"\nclock = "time"\nstart = 5\nevery = 10',
        "needs `until`",
    ),
    ('[deadline]\npolicy = "fraction"\nfraction = 1.5', "fraction"),
]


@pytest.mark.parametrize(("text", "named"), REFUSED)
def test_bad_timelines_are_refused_naming_the_field(
    tmp_path: Path, text: str, named: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('name = "bad"\nclients = 6\n' + text)
    with pytest.raises(ScenarioError) as error:
        load_scenario(path)
    assert str(path) in str(error.value) and named in str(error.value)


def test_a_target_that_exists_only_after_a_join_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "ok.toml"
    path.write_text(
        'name = "ok"\nclients = 6\nrounds = 4\n'
        '[[events]]\nkind = "join"\nstart = 1\n'
        '[[events]]\nkind = "leave"\nstart = 3\ntarget = 6\n'
    )
    rows = [
        r["clients"]
        for r in clusterfed.run(load_scenario(path), out=tmp_path / "o").rows
    ]
    assert [len(c) for c in rows] == [6, 7, 7, 6]


def test_device_availability_makes_clients_miss_rounds_reproducibly(
    tmp_path: Path,
) -> None:
    from clusterfed.actors import DeviceProfile

    flaky = DeviceProfile(availability=0.5)
    a = run(tmp_path / "a", rounds=6, device=flaky)
    b = run(tmp_path / "b", rounds=6, device=flaky)
    missed = [r["failed_updates"] for r in a]
    assert 0 < sum(missed) < 36 and missed == [r["failed_updates"] for r in b]
    reasons = {c["reason"] for r in a for c in r["clients"] if c["failed"]}
    assert reasons == {"ClientUnreachable: unavailable this round"}


def test_an_event_at_its_until_still_fires() -> None:
    # start 2, every 3, until 8: rounds 2, 5 and 8 (until is inclusive).
    event = Crash(start=2, every=3, until=8, target=0)
    assert list(event.occurrences(100)) == [2, 5, 8]
    assert list(event.occurrences(7)) == [2, 5]  # the run ends first
    timed = Crash(clock="time", start=0.5, every=0.25, until=1.0, target=0)
    assert list(timed.occurrences(100)) == [0.5, 0.75, 1.0]


class _Unreachable:
    """Membership that only records who is unreachable each round."""

    def __init__(self) -> None:
        self.rounds: list[dict[int, str]] = []

    async def add_clients(self, specs: Any) -> None: ...

    async def remove_client(self, client: int, reason: str) -> None: ...

    async def update_client(self, spec: Any) -> None: ...

    def set_unreachable(self, clients: dict[int, str]) -> None:
        self.rounds.append(dict(clients))


@pytest.mark.parametrize("availability", [0.2, 0.9])
def test_availability_is_the_share_of_rounds_a_client_is_reachable(
    availability: float,
) -> None:
    import asyncio

    from clusterfed.actors import DeviceProfile
    from clusterfed.scenarios import ScenarioEngine, plan_run

    scenario = small_scenario(
        rounds=300, device=DeviceProfile(availability=availability)
    )
    engine = ScenarioEngine(plan_run(scenario))
    members = _Unreachable()
    for r in range(300):
        asyncio.run(engine.begin_round(members, r, 0.0))
    missed = sum(len(r) for r in members.rounds) / (300 * scenario.clients)
    # 1,800 client-rounds: the share missed is within 0.05 of 1 − availability.
    assert abs(missed - (1 - availability)) < 0.05, missed
    reasons = {reason for r in members.rounds for reason in r.values()}
    assert reasons == {"unavailable this round"}
