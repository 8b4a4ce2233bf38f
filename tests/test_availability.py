"""Client availability over simulated time: always, diurnal, a trace file.
Offline clients are neither sampled (sync) nor started (async), and a client
that goes offline while training has failed, in both modes."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

import clusterfed
from clusterfed.actors import DeviceProfile
from clusterfed.actors.availability import (
    Diurnal,
    TraceAvailability,
    schedule,
)
from clusterfed.errors import ScenarioError
from clusterfed.scenarios import load_scenario
from clusterfed.scenarios.loader import with_overrides
from helpers import small_scenario


def test_a_diurnal_client_is_online_its_share_of_each_cycle_from_its_phase() -> None:
    spec = Diurnal(period_s=10.0, online_fraction=0.3)
    days = schedule(spec, seed=1, stream=7)
    times = np.linspace(0, 1000, 20001)[:-1]
    for client in range(4):
        share = np.mean([days.online(client, t) for t in times])
        assert share == pytest.approx(0.3, abs=0.01)
    # Phases come from the seed and the client id alone.
    again = schedule(spec, seed=1, stream=7)
    other = schedule(spec, seed=2, stream=7)
    pattern = [[days.online(c, t) for t in times[:200]] for c in range(4)]
    assert pattern == [[again.online(c, t) for t in times[:200]] for c in range(4)]
    assert pattern != [[other.online(c, t) for t in times[:200]] for c in range(4)]
    assert len({tuple(p) for p in pattern}) > 1  # clients differ


@pytest.mark.parametrize(
    "spec",
    [
        Diurnal(period_s=7.0, online_fraction=0.4),
        TraceAvailability(
            windows=[
                {"client": 0, "online_from": 1.0, "online_to": 2.5},
                {"client": 0, "online_from": 2.5, "online_to": 4.0},
                {"client": 1, "online_from": 0.0, "online_to": 3.0},
                {"client": 1, "online_from": 6.0, "online_to": math.inf},
            ]
        ),
    ],
    ids=["diurnal", "trace"],
)
def test_the_schedule_answers_agree_with_each_other(spec: Any) -> None:
    days = schedule(spec, seed=0, stream=7)
    rng = np.random.default_rng(0)
    for t in rng.uniform(0, 30, 300):
        for client in (0, 1):
            back = days.next_online(client, float(t))
            if back is not None:
                assert back >= t and days.online(client, back)
                assert back == t or not days.online(client, (t + back) / 2)
            if days.online(client, float(t)):
                off = days.offline_at(client, float(t), float(t) + 5.0)
                if off is None:
                    assert all(
                        days.online(client, t + d) for d in np.linspace(0, 4.99, 50)
                    )
                else:
                    assert t < off < t + 5 and not days.online(client, off)
                    assert days.online(client, (t + off) / 2)


def test_a_trace_joins_touching_windows_and_keeps_unlisted_clients_online() -> None:
    spec = TraceAvailability(
        windows=[
            {"client": 0, "online_from": 1.0, "online_to": 2.5},
            {"client": 0, "online_from": 2.5, "online_to": 4.0},
        ]
    )
    days = schedule(spec, seed=0, stream=7)
    assert days.offline_at(0, 1.0, 10.0) == 4.0  # not at 2.5
    assert days.offline_at(0, 1.0, 4.0) is None  # back exactly at the end
    assert days.online(5, 123.0) and days.offline_at(5, 0.0, 1e9) is None
    closed = schedule(spec.model_copy(update={"unlisted": "offline"}), 0, 7)
    assert not closed.online(5, 1.0) and closed.next_online(5, 1.0) is None


def _trace(folder: Path, text: str) -> Path:
    path = folder / "trace.csv"
    path.write_text(text)
    return path


def test_trace_file_errors_name_the_field_the_line_and_the_value(
    tmp_path: Path,
) -> None:
    bad = _trace(tmp_path, "client,online_from,online_to\n0,0,10\n1,5,2\n")
    with pytest.raises(ValidationError) as caught:
        small_scenario(availability={"kind": "trace", "path": str(bad)})
    assert "line 3: online_to 2 is not after online_from 5" in str(caught.value)
    bad.write_text("0,zero,10\n")
    with pytest.raises(ValidationError, match="line 1: could not convert"):
        small_scenario(availability={"kind": "trace", "path": str(bad)})
    with pytest.raises(ValidationError, match="cannot read it"):
        small_scenario(availability={"kind": "trace", "path": str(tmp_path / "no")})
    bad.write_text("0,0,10\n40,0,10\n")
    with pytest.raises(ValidationError, match="trace names client 40, which does"):
        small_scenario(availability={"kind": "trace", "path": str(bad)})
    scenario = small_scenario()
    with pytest.raises(ScenarioError, match=r"availability\.period_s: .*\(got -1\)"):
        with_overrides(scenario, ["availability=diurnal", "availability.period_s=-1"])
    with pytest.raises(ScenarioError, match="unknown kind 'diurnl'.*'diurnal'"):
        with_overrides(scenario, ["availability=diurnl"])
    days = with_overrides(scenario, ["availability=diurnal"]).availability
    assert isinstance(days, Diurnal) and days.online_fraction == 0.5


def test_a_relative_trace_path_in_a_toml_file_is_beside_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _trace(tmp_path, "0,1.5,9\n")
    toml = tmp_path / "s.toml"
    toml.write_text('[availability]\nkind = "trace"\npath = "trace.csv"\n')
    monkeypatch.chdir(tmp_path.parent)
    spec = load_scenario(toml).availability
    assert isinstance(spec, TraceAvailability)
    assert [(w.client, w.online_from) for w in spec.windows] == [(0, 1.5)]


# Client 1 is online only from t = 1000 (never, in these runs); client 2
# only for its first 0.01 s, which its first task outlives; client 3 from
# t = 1.0 on; the others always.
TRACE = """\
client,online_from,online_to
1,1000,2000
2,0,0.01
3,1.0,inf
"""


def _traced(tmp_path: Path, mode: str, **changes: Any):  # type: ignore[no-untyped-def]
    path = _trace(tmp_path, TRACE)
    base: dict[str, Any] = dict(
        algorithm="fedavg" if mode == "sync" else "fedasync",
        mode=mode,
        rounds=8,
        availability={"kind": "trace", "path": str(path)},
    )
    base.update(changes)
    return small_scenario(**base)


def _client(row: dict[str, Any], cid: int) -> dict[str, Any]:
    return next(c for c in row["clients"] if c["id"] == cid)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_with_a_trace_offline_clients_never_train_and_one_going_offline_fails(
    tmp_path: Path, mode: str
) -> None:
    result = clusterfed.run(_traced(tmp_path, mode), out=tmp_path / "run", workers=1)
    rows = result.rows
    never = [_client(r, 1) for r in rows]
    assert not any(c["trained"] or c["failed"] for c in never)
    assert all(c["reason"] == "offline (availability)" for c in never)
    # Client 2 starts at t = 0, online, and goes offline 0.01 s in: failed,
    # once; it never starts again.
    two = [_client(r, 2) for r in rows]
    failed = [c for c in two if c["failed"]]
    assert len(failed) == 1 and not any(c["trained"] for c in two)
    assert failed[0]["reason"] == "went offline 0.01 s into its task (availability)"
    assert failed[0]["sim_s"] == pytest.approx(0.01)
    assert result.summary["failed_updates"] == 1
    # Client 3 trains, but no task of it starts before t = 1.0.
    starts = [
        r["sim_time"] - _client(r, 3)["sim_s"]
        if mode == "async"
        else (rows[i - 1]["sim_time"] if i else 0.0)
        for i, r in enumerate(rows)
        if _client(r, 3)["trained"]
    ]
    assert starts and min(starts) >= 1.0 - 1e-9
    # The others train as usual.
    assert any(_client(r, 0)["trained"] for r in rows)


def test_a_sync_round_with_nobody_online_waits_for_the_first_to_come(
    tmp_path: Path,
) -> None:
    path = _trace(tmp_path, "0,5,inf\n1,7,inf\n")
    scenario = small_scenario(
        clients=2,
        rounds=2,
        availability={"kind": "trace", "path": str(path), "unlisted": "offline"},
    )
    rows = clusterfed.run(scenario, out=tmp_path / "run", workers=1).rows
    first = rows[0]
    assert _client(first, 0)["trained"] and not _client(first, 1)["trained"]
    assert first["sim_time"] == pytest.approx(5.0 + _client(first, 0)["sim_s"])


def _timeless(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "wall_time"} for r in rows]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_diurnal_run_repeats_in_workers_and_per_round_availability_still_works(
    tmp_path: Path, mode: str
) -> None:
    scenario = small_scenario(
        algorithm="fedavg" if mode == "sync" else "fedbuff",
        mode=mode,
        rounds=6,
        availability={"kind": "diurnal", "period_s": 3.0, "online_fraction": 0.6},
        devices={4: DeviceProfile(availability=0.5)},
        algorithm_params={"fedbuff": {"buffer_size": 2}},
    )
    inline = clusterfed.run(scenario, out=tmp_path / "a", workers=1)
    workers = clusterfed.run(scenario, out=tmp_path / "b", workers=2)
    assert _timeless(inline.rows) == _timeless(workers.rows)
    reasons = {c["reason"] for r in inline.rows for c in r["clients"]}
    assert "offline (availability)" in reasons
    if mode == "sync":  # the per-round chance, drawn by the scenario engine
        assert any("unavailable this round" in (r or "") for r in reasons)
