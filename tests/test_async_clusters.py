"""Clustered algorithms in asynchronous mode: IFCA and DCFL, each cluster with
its own buffer and version, DCFL deciding on windows of arrivals."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.testing import assert_allclose
from pydantic import ValidationError

import clusterfed
from clusterfed.actors import DeviceProfile
from clusterfed.algorithms import ClientInfo, ClientUpdate, make
from clusterfed.algorithms._buffers import BufferRule, ClusterBuffer
from clusterfed.protocol import TrainConfig
from clusterfed.provenance import algorithm_record
from clusterfed.scenarios import Drift, Join, RotationTransform
from clusterfed.types import ClientId, ClusterId
from helpers import small_scenario


def _ok(client: int, cluster: int, base: np.ndarray, delta: Any) -> ClientUpdate:
    return ClientUpdate(
        ClientId(client),
        ClusterId(cluster),
        "ok",
        base,
        np.asarray(delta, np.float32),
        10,
        1.0,
    )


def _joined(name: str, n: int, **params: Any) -> tuple[Any, Any]:
    strategy = make(name, **params)
    models = [np.full(2, float(k), np.float32) for k in range(strategy.initial_models)]
    state = strategy.init_state(models)
    for c in range(n):
        state = strategy.on_join(state, ClientInfo(ClientId(c), 10))
    return strategy, state


def test_ifca_steps_only_the_chosen_cluster_when_its_buffer_is_full() -> None:
    strategy, state = _joined(
        "ifca", 3, clusters=2, buffer_size=2, staleness="polynomial", a=1.0
    )
    rng = np.random.default_rng(0)
    one = state.models[1]
    # Client 0 picks cluster 1: it moves there, the model waits for a second.
    state, moved = strategy.absorb(state, _ok(0, 1, one, [2.0, 0.0]), 0, rng)
    assert not moved and state.assignment[0] == 1
    assert_allclose(state.models[1], one)
    # Client 1's update is one version old: s(1) = 2^−1 halves it.
    state, moved = strategy.absorb(state, _ok(1, 1, one, [0.0, 4.0]), 1, rng)
    assert moved
    assert_allclose(state.models[1], one + np.array([2.0, 2.0]) / 2)
    assert_allclose(state.models[0], np.zeros(2))  # the other cluster waits
    assert not state.buffers
    # The plan of an asynchronous task carries every cluster to choose from.
    plan = strategy.plan_for(state, ClientId(2))
    assert set(plan.models) == {0, 1} and plan.identity == "min_loss"


def test_an_ifca_update_of_a_client_that_left_changes_nothing() -> None:
    strategy, state = _joined("ifca", 2, clusters=2, buffer_size=1)
    state = strategy.on_leave(state, ClientId(1))
    new, moved = strategy.absorb(
        state, _ok(1, 0, state.models[0], [1, 1]), 0, np.random.default_rng(0)
    )
    assert new is state and not moved


def _apart(n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Updates from one origin: clients 0..n/2−1 go right, the others left."""
    base = np.zeros(2, np.float32)
    return [
        (base, np.array([1.0 + 0.01 * c, 0.0] if c < n // 2 else [-1.0, 0.01 * c]))
        for c in range(n)
    ]


def test_dcfl_decides_on_a_window_of_arrivals_and_not_before() -> None:
    strategy, state = _joined("dcfl", 4, window=4, buffer_size=10)
    rng = np.random.default_rng(0)
    updates = _apart(4)
    for c, (base, delta) in enumerate(updates[:3]):
        state, moved = strategy.absorb(state, _ok(c, 0, base, delta), 0, rng)
        assert not moved and state.n_clusters == 1
    assert len(state.window) == 3 and state.buffers[0].count == 3
    base, delta = updates[3]
    state, moved = strategy.absorb(state, _ok(3, 0, base, delta), 0, rng)
    # One cluster: DCFL re-clusters; the two directions part.
    assert moved and state.reclustered and state.n_clusters == 2
    assert state.assignment[0] == state.assignment[1] != state.assignment[2]
    assert state.window == () and not state.buffers
    # Eq. 5: each new cluster model is the mean of its members' end points.
    right = state.models[state.assignment[0]]
    assert_allclose(right, [1.005, 0.0], rtol=1e-6)


def test_dcfl_buffers_per_cluster_and_skips_a_reclustered_clients_stale_update() -> (
    None
):
    strategy, state = _joined("dcfl", 4, window=4, buffer_size=10)
    rng = np.random.default_rng(0)
    for c, (base, delta) in enumerate(_apart(4)):
        state, _ = strategy.absorb(state, _ok(c, 0, base, delta), 0, rng)
    client = next(c for c in range(4) if state.assignment[c] != 0)
    moved_away = state.assignment[client]
    # The client trained cluster 0's model before the re-clustering moved it.
    late = _ok(client, 0, np.zeros(2, np.float32), [5.0, 5.0])
    state, moved = strategy.absorb(state, late, 3, rng)
    assert not moved and not state.buffers  # in no buffer
    assert [u.client for u in state.window] == [client]  # but in the next window
    # Its next update, from its new cluster, waits in that cluster's buffer.
    fresh = _ok(client, moved_away, state.models[moved_away], [0.5, 0.0])
    state, _ = strategy.absorb(state, fresh, 0, rng)
    assert set(state.buffers) == {moved_away}


def test_dcfl_places_an_async_newcomer_at_its_first_arrival() -> None:
    strategy, state = _joined("dcfl", 4, window=4, buffer_size=10)
    rng = np.random.default_rng(0)
    for c, (base, delta) in enumerate(_apart(4)):
        state, _ = strategy.absorb(state, _ok(c, 0, base, delta), 0, rng)
    state = strategy.on_join(state, ClientInfo(ClientId(9), 10, joined_round=3))
    cluster, w_g = strategy.model_for(state, ClientId(9))
    right = state.assignment[0]
    # From W_G it heads for the "right" cluster's model (Eq. 6).
    step = state.models[right] - w_g
    state, moved = strategy.absorb(state, _ok(9, cluster, w_g, step), 2, rng)
    assert not moved and state.assignment[9] == right and not state.pending


def test_async_parameters_are_checked() -> None:
    with pytest.raises(ValueError, match="window must be an integer >= 3"):
        make("dcfl", window=2)
    with pytest.raises(ValueError, match="buffer_size must be an integer >= 1"):
        make("ifca", buffer_size=0)
    with pytest.raises(ValidationError, match="ifca"):
        small_scenario(algorithm="cfl", mode="async")  # names who has one


def _dynamic(algorithm: str, **changes: Any):  # type: ignore[no-untyped-def]
    """dcfl-dynamic in small: rotated groups, joins and drift, a slow client."""
    base: dict[str, Any] = dict(
        algorithm=algorithm,
        mode="async",
        clients=6,
        rounds=10,
        transform=RotationTransform(angles=[0.0, 180.0]),
        events=[
            Join(start=2, every=3),
            Drift(start=3, every=3, target="random", to_group="other"),
        ],
        devices={0: DeviceProfile(samples_per_s=150.0)},
        algorithm_params={
            "ifca": {"clusters": 2, "buffer_size": 2},
            "dcfl": {"window": 4, "buffer_size": 2},
        },
    )
    base.update(changes)
    return small_scenario(**base)


def _timeless(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "wall_time"} for r in rows]


@pytest.mark.parametrize("algorithm", ["ifca", "dcfl"])
def test_a_clustered_async_run_with_joins_and_drift_repeats_and_records_clusters(
    tmp_path: Path, algorithm: str
) -> None:
    scenario = _dynamic(algorithm)
    inline = clusterfed.run(scenario, out=tmp_path / "a", workers=1)
    workers = clusterfed.run(scenario, out=tmp_path / "b", workers=2)
    assert _timeless(inline.rows) == _timeless(workers.rows)
    rows = inline.rows
    kinds = {e["kind"] for r in rows for e in r["events"]}
    assert {"join", "drift"} <= kinds
    versions = [r["strategy"]["version"] for r in rows]
    assert versions == list(range(1, len(rows) + 1))
    for row in rows:
        placed = [c for c in row["clients"] if c["cluster"] is not None]
        assert placed, "every aggregation records the clients' clusters"
        assert row["n_clusters"] == len({c["cluster"] for c in placed})
    arrivals = [c for r in rows for c in r["clients"] if c.get("staleness") is not None]
    joiner = len(rows[0]["clients"])
    assert any(c["id"] >= joiner and c["trained"] for c in arrivals)


def test_ifca_counts_staleness_in_versions_of_the_chosen_cluster(
    tmp_path: Path,
) -> None:
    rows = clusterfed.run(_dynamic("ifca"), out=tmp_path, workers=1).rows
    assert all("cluster_versions" in r["strategy"] for r in rows)
    before: dict[str, int] = {"0": 0, "1": 0}
    for row in rows:
        for c in row["clients"]:
            tau = c.get("staleness")
            if tau is None or not c["trained"]:
                continue
            # τ counts versions of its own cluster only, never the others'.
            assert tau <= before[str(c["cluster"])]
        before = row["strategy"]["cluster_versions"]


def _sized(
    client: int, cluster: int, base: np.ndarray, delta: Any, n: int
) -> ClientUpdate:
    return dataclasses.replace(_ok(client, cluster, base, delta), n_samples=n)


def test_ifca_weighs_a_buffer_by_sample_count_only_when_asked() -> None:
    rng = np.random.default_rng(0)
    for mean, step in (("weighted", [2.5, -0.5]), ("plain", [2.0, 0.0])):
        strategy, state = _joined(
            "ifca", 2, clusters=2, buffer_size=2, staleness="constant", mean=mean
        )
        one = state.models[1]
        state, _ = strategy.absorb(state, _sized(0, 1, one, [1, 1], 10), 0, rng)
        state, moved = strategy.absorb(state, _sized(1, 1, one, [3, -1], 30), 0, rng)
        # weighted: (10·[1,1] + 30·[3,−1]) / 40; plain: ([1,1] + [3,−1]) / 2
        assert moved
        assert_allclose(state.models[1], one + np.array(step), rtol=1e-6)


def test_a_weighted_ifca_buffer_counts_an_update_of_no_samples_as_nothing() -> None:
    rng = np.random.default_rng(0)
    strategy, state = _joined(
        "ifca", 2, clusters=2, buffer_size=2, staleness="constant", mean="weighted"
    )
    one = state.models[1]
    state, _ = strategy.absorb(state, _sized(0, 1, one, [100, 100], 0), 0, rng)
    state, moved = strategy.absorb(state, _sized(1, 1, one, [1, 2], 1), 0, rng)
    # weights 0 and 1: the step is the second delta alone
    assert moved
    assert_allclose(state.models[1], one + np.array([1.0, 2.0]))


def test_a_weighted_buffer_of_no_samples_at_all_leaves_the_model() -> None:
    # Each update counts by its samples, so none counts: the cluster keeps its
    # model (as a synchronous round skips updates of no samples), never NaN.
    rng = np.random.default_rng(0)
    strategy, state = _joined(
        "ifca", 2, clusters=2, buffer_size=2, staleness="constant", mean="weighted"
    )
    one = state.models[1]
    state, _ = strategy.absorb(state, _sized(0, 1, one, [4, 0], 0), 0, rng)
    state, moved = strategy.absorb(state, _sized(1, 1, one, [0, 2], 0), 0, rng)
    assert moved and not state.buffers
    assert_allclose(state.models[1], one)
    synchronous = make("ifca", clusters=2, mean="weighted").aggregate(
        state, 0, [_sized(0, 1, one, [4, 0], 0), _sized(1, 1, one, [0, 2], 0)], rng
    )
    assert_allclose(synchronous.models[1], one)


def test_a_buffer_folds_nothing_for_a_cluster_without_a_model_or_a_delta() -> None:
    rule = BufferRule.checked(
        buffer_size=1, staleness="constant", a=0.5, b=4, server_lr=1.0
    )
    models = {ClusterId(0): np.zeros(2, np.float32)}
    buffers = {
        ClusterId(0): ClusterBuffer(np.ones(2), 1.0, 1),
    }
    zero = models[ClusterId(0)]
    for update in (
        _ok(0, 3, zero, [1, 1]),
        dataclasses.replace(_ok(0, 0, zero, [1, 1]), delta=None),
    ):
        new_models, new_buffers, moved, _ = rule.fold(models, buffers, update, 0)
        assert not moved
        assert new_models == models and new_models is not models
        assert new_buffers == buffers and new_buffers is not buffers


def test_buffer_parameters_are_checked_at_their_edges() -> None:
    assert make("ifca", buffer_size=1, server_lr=1e-9).buffering.buffer_size == 1
    for name in ("ifca", "dcfl"):
        for bad in (0, True, 2.5):
            with pytest.raises(
                ValueError,
                match=rf"^{name}: buffer_size must be an integer >= 1, got {bad!r}$",
            ):
                make(name, buffer_size=bad)
        for bad in (0, -1.0):
            with pytest.raises(
                ValueError, match=rf"^{name}: server_lr must be > 0, got {bad}$"
            ):
                make(name, server_lr=bad)


@pytest.mark.parametrize("name", ["ifca", "dcfl"])
def test_the_run_records_the_buffer_parameters_as_built(name: str) -> None:
    strategy = make(name, buffer_size=2, staleness="hinge", a=0.25, b=1, server_lr=0.5)
    params = algorithm_record(name, strategy, TrainConfig())["params"]
    assert {
        k: params[k] for k in ("buffer_size", "staleness", "a", "b", "server_lr")
    } == {
        "buffer_size": 2,
        "staleness": "hinge",
        "a": 0.25,
        "b": 1,
        "server_lr": 0.5,
    }


def test_an_ifca_update_it_cannot_use_changes_nothing() -> None:
    strategy, state = _joined("ifca", 2, clusters=2, buffer_size=1)
    rng = np.random.default_rng(0)
    one = state.models[1]
    useless = [
        # a late update carries its delta, but IFCA takes only accepted ones
        dataclasses.replace(_ok(0, 1, one, [1, 1]), status="late"),
        dataclasses.replace(_ok(0, 1, one, [1, 1]), status="failed"),
        dataclasses.replace(_ok(0, 1, one, [1, 1]), delta=None),
        _ok(0, 7, one, [1, 1]),  # a cluster IFCA does not have
    ]
    for update in useless:
        new, moved = strategy.absorb(state, update, 0, rng)
        assert new is state and not moved
        assert state.assignment[0] == 0


def test_ifca_async_defaults_step_every_three_with_polynomial_staleness() -> None:
    # buffer_size 3, s(τ) = (τ + 1)^(−1/2), server_lr 1: three updates three
    # versions old move the model by half their mean
    strategy, state = _joined("ifca", 3, clusters=2)
    rng = np.random.default_rng(0)
    zero = state.models[0]
    moves = []
    for c, delta in enumerate(([2, 0], [0, 2], [4, 4])):
        state, moved = strategy.absorb(state, _ok(c, 0, zero, delta), 3, rng)
        moves.append(moved)
    assert moves == [False, False, True]
    assert_allclose(state.models[0], np.array([1.0, 1.0]), rtol=1e-6)


def test_ifca_hinge_staleness_is_full_up_to_b_and_then_falls() -> None:
    # default a = 0.5, b = 4: s(4) = 1, s(6) = 1 / (0.5·2 + 1) = 1/2
    strategy, state = _joined("ifca", 1, clusters=2, buffer_size=1, staleness="hinge")
    rng = np.random.default_rng(0)
    zero = state.models[0]
    new, _ = strategy.absorb(state, _ok(0, 0, zero, [2, 4]), 4, rng)
    assert_allclose(new.models[0], [2.0, 4.0])
    new, _ = strategy.absorb(state, _ok(0, 0, zero, [2, 4]), 6, rng)
    assert_allclose(new.models[0], [1.0, 2.0])
