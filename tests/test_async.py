"""Asynchronous aggregation on the simulated clock: FedAsync and FedBuff."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from numpy.testing import assert_allclose
from pydantic import ValidationError

import clusterfed
from clusterfed.actors import DeviceProfile
from clusterfed.algorithms import ClientInfo, ClientUpdate, make
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
    strategy = make("fedbuff", buffer_size=3, server_lr=0.5, staleness="constant")
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
    assert state.buffers == {}


def test_fedbuff_keeps_a_buffer_per_cluster_and_steps_each_at_k() -> None:
    # Two models (a subclass that clusters): an update moves only its own
    # cluster, after K of that cluster's updates, never the other's.
    strategy = make("fedbuff", buffer_size=2, staleness="constant")
    zero = np.zeros(2, np.float32)
    state = strategy.state_type(
        models={ClusterId(0): zero, ClusterId(1): zero + 10}, assignment={}
    )
    rng = np.random.default_rng(0)
    moves = []
    for cluster, delta in ((0, [2, 0]), (1, [0, 4]), (0, [4, 0]), (1, [0, 8])):
        update = dataclasses.replace(
            _update(state.models[ClusterId(cluster)], np.array(delta, np.float32)),
            cluster=ClusterId(cluster),
        )
        state, advanced = strategy.absorb(state, update, 0, rng)
        moves.append(advanced)
    assert moves == [False, False, True, True]
    assert_allclose(state.models[ClusterId(0)], [3.0, 0.0])
    assert_allclose(state.models[ClusterId(1)], [10.0, 16.0])
    assert state.buffers == {}


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


def test_staleness_functions_at_their_edges() -> None:
    # hinge: full weight for every τ up to b, then 1 / (a(τ − b) + 1)
    for tau in (0, 3, 4):
        assert staleness_weight("hinge", tau, a=0.5, b=4) == 1.0
    assert staleness_weight("hinge", 5, a=2.0, b=4) == pytest.approx(1 / 3)
    assert staleness_weight("hinge", 9, a=0.5, b=0) == pytest.approx(1 / 5.5)
    # a = 0: no discount at all; a = 1: 1 / (τ + 1)
    assert staleness_weight("polynomial", 9, a=0.0, b=4) == 1.0
    assert staleness_weight("polynomial", 4, a=1.0, b=4) == pytest.approx(0.2)
    with pytest.raises(ValueError, match=r"^staleness must be >= 0, got -1$"):
        staleness_weight("constant", -1, a=0.5, b=4)
    with pytest.raises(
        ValueError,
        match=r"^staleness must be constant, polynomial or hinge; got 'linear'$",
    ):
        staleness_weight("linear", 1, a=0.5, b=4)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["fedasync", "fedbuff"])
def test_staleness_parameters_are_checked_at_their_edges(name: str) -> None:
    for kind in ("constant", "polynomial", "hinge"):
        assert make(name, staleness=kind, a=0.0, b=0).staleness == kind
    for params, message in (
        ({"staleness": "linear"}, "staleness must be constant, polynomial or hinge;"),
        ({"a": -0.1}, "a must be >= 0, got -0.1"),
        ({"b": -1}, "b must be >= 0, got -1"),
    ):
        with pytest.raises(ValueError, match=rf"^{name}: {message}"):
            make(name, **params)


def test_fedasync_alpha_is_checked_at_its_edges() -> None:
    assert make("fedasync", alpha=1.0).alpha == 1.0
    for bad in (0, -0.5, 1.5):
        with pytest.raises(
            ValueError, match=rf"^fedasync: alpha must be in \(0, 1\], got {bad}$"
        ):
            make("fedasync", alpha=bad)


def test_fedbuff_buffer_size_is_checked_and_one_steps_every_update() -> None:
    for bad in (0, -2):
        with pytest.raises(
            ValueError,
            match=rf"^fedbuff: buffer_size must be an integer >= 1, got {bad}$",
        ):
            make("fedbuff", buffer_size=bad)
    strategy = make("fedbuff", buffer_size=1)
    state = strategy.init_state([np.zeros(2, np.float32)])
    delta = np.array([1.0, -2.0], np.float32)
    state, advanced = strategy.absorb(
        state, _update(delta * 0, delta), 7, np.random.default_rng(0)
    )
    assert advanced
    assert_allclose(state.models[0], delta / np.sqrt(8), rtol=1e-6)  # s(7)


def _step_of(strategy, state, deltas, staleness):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(0)
    moves = []
    for delta in deltas:
        base = state.models[0]
        update = _update(base, np.asarray(delta, np.float32))
        state, advanced = strategy.absorb(state, update, staleness, rng)
        moves.append(advanced)
    return state, moves


def test_fedbuff_defaults_step_every_five_updates_discounted_as_the_paper() -> None:
    # the paper's experiments: K = 5, each update scaled by 1/sqrt(1 + tau), η_g = 1
    strategy = make("fedbuff")
    state = strategy.init_state([np.zeros(2, np.float32)])
    deltas = [[5, 0], [0, 5], [5, 5], [0, 0], [-5, 0]]
    state, moves = _step_of(strategy, state, deltas, 9)
    assert moves == [False] * 4 + [True]
    assert_allclose(state.models[0], np.array([1.0, 2.0]) / np.sqrt(10), rtol=1e-6)
    # "constant": Algorithm 1 without a discount
    plain = make("fedbuff", staleness="constant")
    state, _ = _step_of(plain, plain.init_state([np.zeros(2, np.float32)]), deltas, 9)
    assert_allclose(state.models[0], [1.0, 2.0])


@pytest.mark.parametrize(
    ("staleness", "tau", "weight"),
    [("polynomial", 3, 0.5), ("hinge", 4, 1.0), ("hinge", 6, 0.5)],
)
def test_fedbuff_discounts_each_update_by_its_staleness(
    staleness: str, tau: int, weight: float
) -> None:
    # default a = 0.5, b = 4: s(3) = 4^(−1/2); hinge s(4) = 1, s(6) = 1/(0.5·2+1)
    strategy = make("fedbuff", buffer_size=2, staleness=staleness)
    state = strategy.init_state([np.zeros(2, np.float32)])
    state, moves = _step_of(strategy, state, [[4, 0], [0, 8]], tau)
    assert moves == [False, True]
    assert_allclose(state.models[0], weight * np.array([2.0, 4.0]), rtol=1e-6)


@pytest.mark.parametrize(
    ("staleness", "tau", "weight"),
    [
        ("polynomial", 8, 1 / 3),
        ("hinge", 4, 1.0),
        ("hinge", 8, 1 / 3),
        ("constant", 8, 1),
    ],
)
def test_fedasync_defaults_mix_by_alpha_and_staleness(
    staleness: str, tau: int, weight: float
) -> None:
    # α = 0.6, a = 0.5, b = 4: polynomial s(8) = 9^(−1/2); hinge s(8) = 1/(0.5·4+1)
    strategy = make("fedasync", staleness=staleness)
    x = np.array([3.0, 0.0], np.float32)
    state = strategy.init_state([x])
    update = _update(np.zeros(2, np.float32), np.array([0.0, 3.0], np.float32))
    new, advanced = strategy.absorb(state, update, tau, np.random.default_rng(0))
    mix = 0.6 * weight
    assert advanced
    assert_allclose(new.models[0], [3 * (1 - mix), 3 * mix], rtol=1e-6)


def test_fedasync_and_fedbuff_take_only_accepted_updates_with_their_models() -> None:
    rng = np.random.default_rng(0)
    x = np.array([1.0, 1.0], np.float32)
    ok = _update(np.zeros(2, np.float32), np.array([2.0, 2.0], np.float32))
    useless = [
        # a late update carries its model and delta; neither strategy takes it
        dataclasses.replace(ok, status="late"),
        dataclasses.replace(ok, status="failed"),
        dataclasses.replace(ok, delta=None),
    ]
    for name in ("fedasync", "fedbuff"):
        strategy = make(name, **({"buffer_size": 1} if name == "fedbuff" else {}))
        state = strategy.init_state([x])
        cases = (
            [*useless, dataclasses.replace(ok, base=None)]
            if name == "fedasync"
            else useless
        )
        for update in cases:
            new, advanced = strategy.absorb(state, update, 0, rng)
            assert new is state and not advanced, (name, update.status)


@pytest.mark.parametrize("name", ["fedasync", "fedbuff"])
def test_the_synchronous_mode_is_fedavg_with_its_fraction_and_server_lr(
    name: str,
) -> None:
    strategy = make(name, fraction=0.5, server_lr=0.5)
    state = strategy.init_state([np.zeros(2, np.float32)])
    clients = [ClientInfo(ClientId(c), 10) for c in range(4)]
    for c in clients:
        state = strategy.on_join(state, c)
    plans = strategy.plan_round(state, 0, clients, np.random.default_rng(3))
    assert len(plans) == 2  # round(0.5 · 4)
    updates = [
        ClientUpdate(ClientId(c), ClusterId(0), "ok", state.models[0], d, 10, 1.0)
        for c, d in enumerate(np.array([[2, 0], [0, 4]], np.float32))
    ]
    # half of the mean step ([2, 0] + [0, 4]) / 2
    new = strategy.aggregate(state, 0, updates, np.random.default_rng(0))
    assert_allclose(new.models[0], [0.5, 1.0])
    # by default the synchronous step is the whole mean
    new = make(name).aggregate(state, 0, updates, np.random.default_rng(0))
    assert_allclose(new.models[0], [1.0, 2.0])
