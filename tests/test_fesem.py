"""FeSEM: K centers, the E-step (nearest center by L2) and the M-step (mean
of the members' local models) by hand, and the reference code's k-means
assignment step reproduced on the same inputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

import clusterfed
from clusterfed.algorithms import ClientInfo, ClientUpdate, make
from clusterfed.algorithms.fesem import (
    FeSEM,
    FeSEMDiagnostics,
    FeSEMState,
    assign,
    kmeans,
    local_model,
    m_step,
)
from clusterfed.scenarios import BUILTIN
from clusterfed.scenarios.transforms import RotationTransform
from clusterfed.types import ClientId, ClusterId

DIM = 8


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _joined(strategy: FeSEM, n: int) -> FeSEMState:
    state = strategy.init_state([np.zeros(DIM, dtype=np.float32)])
    for i in range(n):
        state = strategy.on_join(state, ClientInfo(ClientId(i), n_train=10))
    return state


def _ended_at(
    client: int, end: np.ndarray, base: np.ndarray, cluster: int = 0, n: int = 10
) -> ClientUpdate:
    """An accepted update whose local model base + delta is `end`."""
    delta = (np.asarray(end, dtype=np.float64) - base).astype(np.float32)
    return ClientUpdate(ClientId(client), ClusterId(cluster), "ok", base, delta, n, 0.5)


def _planted(
    groups: int, per_group: int, spread: float = 0.1, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Models around `groups` far-apart points, client i in group i % groups."""
    rng = np.random.default_rng(seed)
    centres = 10 * rng.standard_normal((groups, DIM))
    truth = np.arange(groups * per_group) % groups
    return centres[truth] + spread * rng.standard_normal((truth.size, DIM)), truth


def _seeded(strategy: FeSEM, points: np.ndarray, seed: int = 0) -> FeSEMState:
    state = _joined(strategy, len(points))
    base = state.models[ClusterId(0)]
    updates = [_ended_at(i, p, base) for i, p in enumerate(points)]
    return strategy.aggregate(state, 0, updates, _rng(seed))


def _labels(state: FeSEMState, n: int) -> list[int]:
    return [int(state.assignment[ClientId(i)]) for i in range(n)]


def _same_partition(a: list[int], b: list[int] | np.ndarray) -> bool:
    pairs = {(x, int(y)) for x, y in zip(a, b, strict=True)}
    return len(pairs) == len(set(a)) == len({int(y) for y in b})


# -- the E-step and M-step by hand ------------------------------------------------


def test_the_e_step_takes_the_nearest_center_by_squared_l2() -> None:
    centers = np.array([[0.0, 0.0], [4.0, 0.0], [0.0, 4.0]])
    points = np.array([[1.0, 1.0], [3.0, 0.5], [0.5, 3.0], [2.0, 0.0]])
    # (2, 0) is 2 from centers 0 and 1: the tie goes to the lowest id.
    assert_array_equal(assign(points, centers), [0, 1, 2, 0])


def test_the_m_step_is_the_members_mean_and_keeps_an_empty_center() -> None:
    points = np.array([[1.0, 1.0], [3.0, 3.0], [10.0, 0.0]])
    centers = np.array([[0.0, 0.0], [9.0, 0.0], [50.0, 50.0]])
    labels = np.array([0, 0, 1])
    plain = m_step(points, labels, centers, [1.0, 1.0, 1.0])
    assert_allclose(plain[0], [2.0, 2.0])
    assert_allclose(plain[1], [10.0, 0.0])
    assert_array_equal(plain[2], [50.0, 50.0])  # nobody: it stays
    weighted = m_step(points, labels, centers, [30.0, 10.0, 5.0])
    assert_allclose(weighted[0], [1.5, 1.5])  # (30 * 1 + 10 * 3) / 40
    assert all(c.dtype == np.float32 for c in plain + weighted)


def test_the_first_round_seeds_k_centers_from_the_clients_local_models() -> None:
    points, truth = _planted(groups=3, per_group=4)
    strategy = make("fesem", clusters=3)
    state = _seeded(strategy, points)
    assert state.clustered_in == 0
    assert set(state.models) == {0, 1, 2}
    labels = _labels(state, len(points))
    assert _same_partition(labels, truth)
    for k in range(3):
        members = [i for i, label in enumerate(labels) if label == k]
        assert_allclose(state.models[ClusterId(k)], points[members].mean(0), rtol=1e-5)


def test_fewer_reports_than_centers_step_the_one_model_and_wait() -> None:
    strategy = make("fesem", clusters=3)
    state = _joined(strategy, 5)
    base = state.models[ClusterId(0)]
    updates = [
        _ended_at(0, np.full(DIM, 1.0), base, n=10),
        _ended_at(1, np.full(DIM, 4.0), base, n=30),
        ClientUpdate(ClientId(2), ClusterId(0), "failed", reason="down"),
    ]
    new = strategy.aggregate(state, 0, updates, _rng())
    assert new.clustered_in is None and set(new.models) == {0}
    assert_allclose(new.models[ClusterId(0)], np.full(DIM, 3.25))  # FedAvg's mean


def test_each_round_moves_a_client_to_the_center_nearest_its_local_model() -> None:
    points, _ = _planted(groups=2, per_group=3)
    strategy = make("fesem", clusters=2)
    state = _seeded(strategy, points)
    first = state.assignment[ClientId(0)]
    other = ClusterId(1 - first)
    # Client 0 trained its center but ended next to the other one: it moves,
    # and both centers become their new members' mean local model.
    near_other = state.models[other] + 0.2
    updates = [
        _ended_at(0, near_other, state.models[first], cluster=first),
        _ended_at(1, points[1], state.models[state.assignment[ClientId(1)]]),
    ]
    new = strategy.aggregate(state, 1, updates, _rng())
    assert new.assignment[ClientId(0)] == other
    assert new.moved == 1
    assert new.assignment[ClientId(1)] == state.assignment[ClientId(1)]
    # Only clients 0 and 1 reported: each center is the mean of its reporters.
    reporters: dict[ClusterId, list[np.ndarray]] = {other: [near_other]}
    reporters.setdefault(state.assignment[ClientId(1)], []).append(points[1])
    for k in (ClusterId(0), ClusterId(1)):
        want = np.mean(np.stack(reporters[k]), axis=0) if k in reporters else None
        if want is None:
            assert_array_equal(new.models[k], state.models[k])
        else:
            assert_allclose(new.models[k], want, rtol=1e-5)


def test_a_center_nobody_reports_to_keeps_its_model_and_silent_clients_stay() -> None:
    points, _ = _planted(groups=3, per_group=2)
    strategy = make("fesem", clusters=3)
    state = _seeded(strategy, points)
    k = state.assignment[ClientId(0)]
    new = strategy.aggregate(
        state, 1, [_ended_at(0, state.models[k] + 0.1, state.models[k], k)], _rng()
    )
    for other in set(state.models) - {k}:
        assert_array_equal(new.models[other], state.models[other])
    assert new.assignment == state.assignment
    assert strategy.aggregate(state, 1, [], _rng()).models == state.models


def test_weighted_mean_weighs_the_m_step_by_sample_count() -> None:
    strategy = make("fesem", clusters=1, mean="weighted")
    state = _joined(strategy, 2)
    base = state.models[ClusterId(0)]
    updates = [
        _ended_at(0, np.full(DIM, 2.0), base, n=30),
        _ended_at(1, np.full(DIM, 6.0), base, n=10),
    ]
    state = strategy.aggregate(state, 0, updates, _rng())
    assert_allclose(state.models[ClusterId(0)], np.full(DIM, 3.0))  # (60 + 60) / 40
    plain = make("fesem", clusters=1)
    other = plain.aggregate(_joined(plain, 2), 0, updates, _rng())
    assert_allclose(other.models[ClusterId(0)], np.full(DIM, 4.0))


def test_a_newcomer_trains_the_largest_center_until_its_update_places_it() -> None:
    points, _ = _planted(groups=2, per_group=3)
    strategy = make("fesem", clusters=2)
    state = _seeded(strategy, points)
    state = strategy.on_join(state, ClientInfo(ClientId(9), 10, joined_round=2))
    assert state.assignment[ClientId(9)] == state.largest_cluster()
    home = state.assignment[ClientId(9)]
    elsewhere = ClusterId(1 - home)
    update = _ended_at(9, state.models[elsewhere], state.models[home], home)
    new = strategy.aggregate(state, 2, [update], _rng())
    assert new.assignment[ClientId(9)] == elsewhere


def test_diagnostics_report_sizes_and_moves_once_seeded() -> None:
    strategy = make("fesem", clusters=2)
    assert strategy.diagnostics(_joined(strategy, 4)) is None
    points, _ = _planted(groups=2, per_group=2)
    state = _seeded(strategy, points)
    found = strategy.diagnostics(state.replace(moved=1))
    assert isinstance(found, FeSEMDiagnostics)
    assert found.record() == {"clustered_in": 0, "sizes": {"0": 2, "1": 2}, "moved": 1}


def test_the_seeds_come_from_the_servers_stream() -> None:
    points, _ = _planted(groups=3, per_group=3)
    strategy = make("fesem", clusters=3, init_iterations=1)
    a = _seeded(strategy, points, seed=4)
    b = _seeded(strategy, points, seed=4)
    assert a.assignment == b.assignment
    for k in a.models:
        assert_array_equal(a.models[k], b.models[k])


def test_local_model_is_base_plus_delta() -> None:
    base = np.ones(DIM, np.float32)
    update = _ended_at(0, np.full(DIM, 3.0), base)
    assert_allclose(local_model(update), np.full(DIM, 3.0))
    with pytest.raises(ValueError, match="client 1"):
        local_model(ClientUpdate(ClientId(1), ClusterId(0), "failed"))


# -- the independent check: the reference code's assignment step ---------------


def _reference_kmeans(
    data: np.ndarray, k: int, iterations: int
) -> tuple[np.ndarray, np.ndarray]:
    """The reference code's `KmeanModel.assign_clusters` on its first call
    (mingxuts/multi-center-fed-learning, models/kmean_model.py), restated
    with numpy: centers start as the first k points; each iteration tiles
    the points and the centers to n × k × d, sums the squared differences,
    takes the argmin as membership, and sets each center to the segment sum
    of its points over the segment sum of ones; the membership returned is
    the last iteration's, computed before that iteration's center update."""
    n, d = data.shape
    centroids = data[:k].copy()
    membership = np.zeros(n, dtype=np.int64)
    for _ in range(iterations):
        tiled_points = np.tile(data, (1, k)).reshape(n, k, d)
        tiled_centers = np.tile(centroids, (n, 1)).reshape(n, k, d)
        distances = np.sum(np.square(tiled_points - tiled_centers), axis=2)
        membership = np.argmin(distances, axis=1)
        sums = np.zeros((k, d))
        counts = np.zeros((k, d))
        np.add.at(sums, membership, data)
        np.add.at(counts, membership, np.ones_like(data))
        centroids = sums / counts
    return membership, centroids


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_the_reference_codes_first_kmeans_call_gives_the_same_decision(
    seed: int,
) -> None:
    # Overlapping groups, so that the five iterations move points around.
    points, _ = _planted(groups=3, per_group=6, spread=6.0, seed=seed)
    rng = np.random.default_rng(seed)
    points = points[rng.permutation(len(points))]  # the code's shuffled order
    want_labels, want_centers = _reference_kmeans(points, 3, 5)
    assert len(set(want_labels)) == 3  # no empty center (the code would NaN)
    centers, labels = kmeans(points, points[:3], [1.0] * len(points), 5)
    assert_array_equal(labels, want_labels)
    assert_allclose(np.stack(centers), want_centers, rtol=1e-5)


@pytest.mark.parametrize("seed", [0, 1])
def test_the_e_step_equals_a_brute_force_minimum(seed: int) -> None:
    rng = np.random.default_rng(seed)
    points, centers = rng.standard_normal((30, DIM)), rng.standard_normal((5, DIM))
    brute = [
        min(range(5), key=lambda k, p=p: float(np.sum((p - centers[k]) ** 2)))
        for p in points
    ]
    assert_array_equal(assign(points, centers), brute)


# -- options --------------------------------------------------------------------


@pytest.mark.parametrize(
    "params",
    [
        {"clusters": 0},
        {"clusters": 2.5},
        {"init_iterations": 0},
        {"mean": "median"},
        {"fraction": 0.0},
        {"fraction": 1.5},
    ],
)
def test_bad_options_name_the_value(params: dict) -> None:
    with pytest.raises(ValueError, match=str(next(iter(params.values())))):
        make("fesem", **params)


def test_the_defaults_are_the_papers_mean_and_the_codes_seeding() -> None:
    # K = 3 is clusterfed's choice; 5 seeding iterations are the code's; the
    # plain mean is the paper's (the code weighs by samples).
    strategy = make("fesem")
    assert (strategy.clusters, strategy.init_iterations, strategy.mean) == (
        3,
        5,
        "plain",
    )


# -- its scenarios and a real run ---------------------------------------------


def test_the_scenarios_hold_what_their_descriptions_say() -> None:
    digits = BUILTIN["fesem-rotated"]()
    assert digits.algorithm == "fesem" and digits.dataset.name == "digits"
    assert digits.transform == RotationTransform(angles=[0.0, 120.0, 240.0])
    assert digits.algorithm_params["fesem"]["clusters"] == 3
    assert (digits.train.epochs, digits.train.batch_size, digits.train.lr) == (
        10,
        10,
        0.01,
    )
    assert digits.train.momentum == 0.9 and "momentum 0.9 added" in (digits.description)
    fmnist = BUILTIN["fesem-rotated-fmnist"]()  # builds: validation passes
    assert fmnist.dataset.name == "fashion_mnist"
    assert (fmnist.clients, fmnist.rounds) == (100, 60)
    assert fmnist.train.momentum == 0.0 and "plain SGD at lr 0.01" in (
        fmnist.description
    )


def test_a_short_run_on_the_digits_seeds_its_centers_in_round_zero(
    tmp_path: Path,
) -> None:
    result = clusterfed.run(
        "fesem-rotated",
        out=tmp_path,
        workers=1,
        rounds=2,
        clients=6,
        overrides=["train.epochs=2"],
    )
    rows = result.rows
    assert [r["round"] for r in rows] == [0, 1]
    for row in rows:
        assert row["strategy"]["clustered_in"] == 0
        assert sum(row["strategy"]["sizes"].values()) == 6
    assert all(not c["failed"] for r in rows for c in r["clients"])
