"""Asynchronous aggregation on the simulated clock: FedAsync and FedBuff."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from numpy.testing import assert_allclose
from pydantic import ValidationError

import clusterfed
from clusterfed.actors import DeviceProfile
from clusterfed.algorithms import ClientUpdate, make
from clusterfed.algorithms._staleness import staleness_weight
from clusterfed.types import ClientId, ClusterId
from helpers import small_scenario


def _rows(result: clusterfed.RunResult) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "wall_time"} for r in result.rows]


def _arrived(row: dict) -> list[dict]:
    return [c for c in row["clients"] if c.get("staleness") is not None]


def test_staleness_functions_by_hand() -> None:
    assert staleness_weight("constant", 7, a=0.5, b=4) == 1.0
    assert staleness_weight("polynomial", 3, a=0.5, b=4) == pytest.approx(0.5)
    assert staleness_weight("hinge", 4, a=0.5, b=4) == 1.0
    assert staleness_weight("hinge", 6, a=0.5, b=4) == pytest.approx(0.5)


def _update(base: np.ndarray, delta: np.ndarray) -> ClientUpdate:
    return ClientUpdate(ClientId(0), ClusterId(0), "ok", base, delta, 10, 1.0)


def test_fedasync_mixes_each_update_by_its_staleness() -> None:
    # x ← (1 − α s(τ)) x + α s(τ) (base + delta), with s(3) = 4^(−1/2) = 0.5.
    strategy = make("fedasync", alpha=0.8, staleness="polynomial", a=0.5)
    x = np.array([1.0, 2.0], np.float32)
    state = strategy.init_state([x])
    base = np.array([0.0, 0.0], np.float32)
    delta = np.array([2.0, 4.0], np.float32)
    new, advanced = strategy.absorb(
        state, _update(base, delta), 3, np.random.default_rng(0)
    )
    assert advanced
    assert_allclose(new.models[0], 0.6 * x + 0.4 * (base + delta), rtol=1e-6)


def test_fedbuff_steps_once_every_k_updates() -> None:
    strategy = make("fedbuff", buffer_size=3, server_lr=0.5)
    x = np.zeros(2, np.float32)
    state = strategy.init_state([x])
    deltas = [np.array(d, np.float32) for d in ([3, 0], [0, 3], [3, 3])]
    rng = np.random.default_rng(0)
    steps = []
    for delta in deltas:
        state, advanced = strategy.absorb(state, _update(x, delta), 1, rng)
        steps.append(advanced)
    assert steps == [False, False, True]
    assert_allclose(state.models[0], 0.5 * np.array([2.0, 2.0]), rtol=1e-6)
    assert state.buffer is None and state.buffered == 0


def test_a_strategy_without_an_async_mode_is_refused() -> None:
    with pytest.raises(ValidationError, match="no asynchronous mode"):
        small_scenario(mode="async")


def _async_scenario(**changes: object):  # type: ignore[no-untyped-def]
    base: dict[str, object] = dict(
        algorithm="fedasync",
        mode="async",
        rounds=16,
        clients=4,
        # Client 0 computes 5 times slower than the others.
        devices={0: DeviceProfile(samples_per_s=100.0)},
    )
    base.update(changes)
    return small_scenario(**base)


def test_arrivals_follow_the_devices_and_none_is_folded_before_it_arrives(
    tmp_path: Path,
) -> None:
    result = clusterfed.run(_async_scenario(), out=tmp_path, workers=1)
    rows = result.rows
    times = [r["sim_time"] for r in rows]
    assert times == sorted(times)
    order = [c["id"] for r in rows for c in _arrived(r)]
    assert all(len(_arrived(r)) == 1 for r in rows)  # FedAsync: one per version
    # The fast clients come back, start again and arrive again before the
    # slow client's first update, which was sent the model of version 0.
    slow = order.index(0)
    assert slow >= 4 and len(set(order[:slow])) == 3
    slow_row = next(r for r in rows if any(c["id"] == 0 for c in _arrived(r)))
    slow_client = next(c for c in _arrived(slow_row) if c["id"] == 0)
    assert slow_client["staleness"] == slow
    # It started at time 0: it is folded exactly when its task's time is up.
    assert slow_row["sim_time"] == pytest.approx(slow_client["sim_s"])
    for row in rows:
        for client in _arrived(row):
            assert row["sim_time"] >= client["sim_s"] - 1e-9
    summary = result.summary
    assert summary["staleness"]["max"] == slow
    assert sum(summary["staleness"]["counts"].values()) == len(order)


def test_the_same_seed_gives_the_same_async_rows_inline_and_in_workers(
    tmp_path: Path,
) -> None:
    scenario = _async_scenario(algorithm="fedbuff", concurrency=3, rounds=5)
    inline = clusterfed.run(scenario, out=tmp_path / "a", workers=1)
    workers = clusterfed.run(scenario, out=tmp_path / "b", workers=2)
    assert _rows(inline) == _rows(workers)
    # FedBuff: K = 5 updates each version, all of them from the 3 in flight.
    assert all(r["strategy"]["version"] == r["round"] + 1 for r in inline.rows)


def test_updates_older_than_max_staleness_are_dropped_as_late(tmp_path: Path) -> None:
    scenario = _async_scenario(max_staleness=1, rounds=6)
    result = clusterfed.run(scenario, out=tmp_path, workers=1)
    late = [c for r in result.rows for c in r["clients"] if c["late"]]
    assert late and all(c["staleness"] > 1 for c in late)
    assert all("max_staleness = 1" in c["reason"] for c in late)
    assert result.summary["late_updates"] == len(late)
    kept = [c for r in result.rows for c in _arrived(r) if not c["late"]]
    assert all(c["staleness"] <= 1 for c in kept)


def test_time_to_accuracy_is_the_sim_time_of_the_first_round_that_reaches_it(
    tmp_path: Path,
) -> None:
    result = clusterfed.run(
        small_scenario(rounds=4, target_accuracy=0.3), out=tmp_path, workers=1
    )
    means = [np.mean([c["acc"] for c in r["clients"]]) for r in result.rows]
    reached = [
        r["sim_time"] for r, m in zip(result.rows, means, strict=True) if m >= 0.3
    ]
    assert result.summary["time_to_accuracy"] == (reached[0] if reached else None)
    assert result.summary["target_accuracy"] == 0.3


def test_a_join_mid_run_starts_training_in_async_mode(tmp_path: Path) -> None:
    from clusterfed.scenarios import Join

    scenario = _async_scenario(events=[Join(start=3)], rounds=10)
    result = clusterfed.run(scenario, out=tmp_path, workers=1)
    arrivals = [c["id"] for r in result.rows for c in _arrived(r)]
    assert 4 in arrivals and arrivals.index(4) >= 3
