"""OCFL: OPTICS on trained models, noise rules, merging, FedAvg per cluster."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose
from sklearn.metrics import adjusted_rand_score

from clusterfed.algorithms import ClientInfo, ClientUpdate, make
from clusterfed.algorithms.ocfl import (
    OCFL,
    OCFLState,
    assign_noise,
    cluster_models,
    merge_clusters,
)
from clusterfed.types import ClientId, ClusterId

DIM = 20


def _planted(
    centres: np.ndarray, per_group: int = 5, spread: float = 0.1, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    points = np.concatenate(
        [c + spread * rng.standard_normal((per_group, c.size)) for c in centres]
    ).astype(np.float32)
    return points, np.repeat(np.arange(len(centres)), per_group)


def _centres(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, DIM)) * 5


def _rng() -> np.random.Generator:
    return np.random.default_rng(0)


def _joined(strategy: OCFL, n: int, initial: np.ndarray | None = None) -> OCFLState:
    initial = np.zeros(DIM, dtype=np.float32) if initial is None else initial
    state = strategy.init_state([initial])
    for i in range(n):
        state = strategy.on_join(state, ClientInfo(ClientId(i), n_train=10))
    return state


def _ended_at(
    client: int, end: np.ndarray, base: np.ndarray, cluster: int = 0, n: int = 10
) -> ClientUpdate:
    """An accepted update whose end model B = base + delta is `end`."""
    delta = (end - base).astype(np.float32)
    return ClientUpdate(ClientId(client), ClusterId(cluster), "ok", base, delta, n, 0.5)


def _clustered(strategy: OCFL, points: np.ndarray) -> OCFLState:
    state = _joined(strategy, len(points))
    base = state.initial
    updates = [_ended_at(i, p, base) for i, p in enumerate(points)]
    return strategy.aggregate(state, 0, updates, _rng())


def _labels(state: OCFLState, n: int) -> list[int]:
    return [state.assignment[ClientId(i)] for i in range(n)]


# -- the clustering round -----------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_optics_recovers_three_planted_groups_of_models(seed: int) -> None:
    points, truth = _planted(_centres(3, seed), seed=seed)
    labels = cluster_models(points, min_samples=2, xi=0.2, metric="euclidean")
    assert adjusted_rand_score(truth, labels) == 1.0


def test_the_clustering_round_assigns_planted_groups_and_averages_end_models() -> None:
    points, truth = _planted(_centres(3))
    state = _clustered(make("ocfl"), points)
    assert adjusted_rand_score(truth, _labels(state, len(points))) == 1.0
    assert len(state.models) == 3
    for group in range(3):
        cluster = state.assignment[ClientId(int(np.flatnonzero(truth == group)[0]))]
        assert_allclose(
            state.models[cluster], points[truth == group].mean(axis=0), rtol=1e-5
        )
        assert state.models[cluster].dtype == np.float32


def test_cluster_models_are_sample_weighted_means_of_end_models() -> None:
    # Two tight pairs far apart; by hand: (1·a + 3·b) / 4 per pair.
    initial = np.zeros(2, dtype=np.float32)
    strategy = make("ocfl")
    state = strategy.init_state([initial])
    for i in range(4):
        state = strategy.on_join(state, ClientInfo(ClientId(i), 10))
    ends = [[0.0, 0.0], [0.0, 0.4], [10.0, 10.0], [10.4, 10.0]]
    sizes = [1, 3, 1, 3]
    updates = [
        _ended_at(i, np.array(e, dtype=np.float32), initial, n=n)
        for i, (e, n) in enumerate(zip(ends, sizes, strict=True))
    ]
    state = strategy.aggregate(state, 0, updates, _rng())
    assert _labels(state, 4) == [0, 0, 1, 1]
    assert_allclose(state.models[ClusterId(0)], [0.0, 0.3], atol=1e-6)
    assert_allclose(state.models[ClusterId(1)], [10.3, 10.0], atol=1e-6)


def test_fewer_points_than_min_samples_are_all_noise() -> None:
    labels = cluster_models(np.ones((1, 3)), min_samples=2, xi=0.2, metric="cosine")
    assert labels.tolist() == [-1]


# -- noise ----------------------------------------------------------------------


def _with_outlier() -> tuple[np.ndarray, np.ndarray]:
    centres = np.stack([np.zeros(DIM), np.full(DIM, 5.0)])
    points, truth = _planted(centres)
    # Far from both groups but nearer the first. (OPTICS-xi in scikit-learn
    # keeps a far point that ends the ordering in the last cluster when its
    # nearest neighbour is there; this one's is in the first group.)
    outlier = np.full((1, DIM), -20.0, dtype=np.float32)
    return np.concatenate([points, outlier]), np.append(truth, 0)


def test_a_noise_point_becomes_its_own_cluster_by_default() -> None:
    points, truth = _with_outlier()
    raw = cluster_models(points, min_samples=2, xi=0.2, metric="euclidean")
    assert raw[-1] == -1
    state = _clustered(make("ocfl"), points)
    labels = _labels(state, len(points))
    assert len(set(labels)) == 3
    assert labels.count(labels[-1]) == 1
    assert adjusted_rand_score(truth[:-1], labels[:-1]) == 1.0
    assert_allclose(state.models[labels[-1]], points[-1])


def test_a_noise_point_joins_the_nearest_centre_when_asked() -> None:
    points, truth = _with_outlier()
    state = _clustered(make("ocfl", assign_noise="nearest"), points)
    labels = _labels(state, len(points))
    assert len(set(labels)) == 2
    assert adjusted_rand_score(truth, labels) == 1.0


def test_nearest_noise_with_no_cluster_to_join_stays_singleton() -> None:
    labels = assign_noise(
        np.eye(3), np.array([-1, -1, -1]), np.ones(3), "nearest", "euclidean"
    )
    assert labels.tolist() == [0, 1, 2]


# -- merging --------------------------------------------------------------------


def _four_groups_on_two_directions() -> tuple[np.ndarray, np.ndarray]:
    # Groups 0, 1 lie along u and groups 2, 3 along v ⟂ u: far apart in
    # Euclidean distance (OPTICS keeps four), alike in pairs by cosine.
    u = np.zeros(DIM)
    u[: DIM // 2] = 1.0
    v = np.zeros(DIM)
    v[DIM // 2 :] = 1.0
    points, truth = _planted(np.stack([5 * u, 10 * u, 5 * v, 10 * v]))
    return points, truth


def test_merge_joins_clusters_with_alike_mean_models() -> None:
    points, truth = _four_groups_on_two_directions()
    merged = merge_clusters(points, truth, np.ones(len(points)), target=2)
    assert adjusted_rand_score(truth // 2, merged) == 1.0


def test_target_clusters_merges_what_optics_found_down_to_the_target() -> None:
    points, truth = _four_groups_on_two_directions()
    unmerged = _clustered(make("ocfl"), points)
    assert adjusted_rand_score(truth, _labels(unmerged, len(points))) == 1.0
    state = _clustered(make("ocfl", target_clusters=2), points)
    labels = _labels(state, len(points))
    assert sorted(state.models) == [0, 1]
    assert adjusted_rand_score(truth // 2, labels) == 1.0
    assert_allclose(state.models[labels[0]], points[truth < 2].mean(axis=0), rtol=1e-5)


def test_merge_leaves_fewer_clusters_than_the_target_alone() -> None:
    labels = np.array([0, 0, 1, 1])
    assert merge_clusters(np.eye(4), labels, np.ones(4), target=3).tolist() == [
        0,
        0,
        1,
        1,
    ]


# -- rounds after the clustering ------------------------------------------------


def test_the_clustering_round_sends_the_initial_model_with_cluster_epochs() -> None:
    strategy = make("ocfl", cluster_epochs=3, fraction=0.2)
    state = _joined(strategy, 6)
    clients = [ClientInfo(ClientId(i), 10) for i in range(6)]
    plans = strategy.plan_round(state, 0, clients, _rng())
    assert [p.client for p in plans] == list(range(6))
    for plan in plans:
        assert dict(plan.overrides) == {"epochs": 3}
        (model,) = plan.models.values()
        assert model is state.initial


def test_later_rounds_sample_frac_of_each_cluster_without_overrides() -> None:
    points, truth = _planted(_centres(2), per_group=5)
    strategy = make("ocfl", fraction=0.4)
    state = _clustered(strategy, points)
    clients = [ClientInfo(ClientId(i), 10) for i in range(10)]
    picks = []
    for _ in range(2):
        plans = strategy.plan_round(state, 1, clients, np.random.default_rng(5))
        picks.append([p.client for p in plans])
        for plan in plans:
            assert not plan.overrides
            (cluster,) = plan.models
            assert cluster == state.assignment[plan.client]
    chosen = [truth[c] for c in picks[0]]
    assert chosen.count(0) == 2 and chosen.count(1) == 2
    assert picks[0] == picks[1]


def test_a_tiny_frac_still_samples_one_client_per_cluster() -> None:
    points, _ = _planted(_centres(3))
    strategy = make("ocfl", fraction=0.01)
    state = _clustered(strategy, points)
    clients = [ClientInfo(ClientId(i), 10) for i in range(15)]
    plans = strategy.plan_round(state, 1, clients, _rng())
    assert sorted(state.assignment[p.client] for p in plans) == [0, 1, 2]


def test_fedavg_inside_each_cluster_by_hand() -> None:
    initial = np.zeros(2, dtype=np.float32)
    strategy = make("ocfl")
    state = strategy.init_state([initial])
    state = state.replace(
        models={
            ClusterId(0): np.array([1.0, 1.0], dtype=np.float32),
            ClusterId(1): np.array([5.0, 5.0], dtype=np.float32),
        },
        assignment={ClientId(0): 0, ClientId(1): 0, ClientId(2): 1},
        clustered=True,
    )

    def update(client: int, cluster: int, delta: list[float], n: int) -> ClientUpdate:
        base = state.models[ClusterId(cluster)]
        d = np.array(delta, dtype=np.float32)
        return ClientUpdate(ClientId(client), ClusterId(cluster), "ok", base, d, n, 0.1)

    new = strategy.aggregate(
        state,
        1,
        [
            update(0, 0, [1.0, 0.0], 10),
            update(1, 0, [0.0, 2.0], 30),
            update(2, 1, [-1.0, 1.0], 7),
        ],
        _rng(),
    )
    # cluster 0: [1,1] + (10·[1,0] + 30·[0,2]) / 40 = [1.25, 2.5]
    assert_allclose(new.models[ClusterId(0)], [1.25, 2.5])
    assert_allclose(new.models[ClusterId(1)], [4.0, 6.0])
    assert new.assignment == state.assignment


# -- clients that missed the clustering -----------------------------------------


def test_a_client_failing_the_clustering_round_is_placed_at_its_first_update() -> None:
    points, truth = _planted(_centres(3))
    strategy = make("ocfl", cluster_epochs=2)
    state = _joined(strategy, 16)
    base = state.initial
    updates = [_ended_at(i, p, base) for i, p in enumerate(points)]
    updates.append(ClientUpdate(ClientId(15), ClusterId(0), "failed", reason="down"))
    state = strategy.aggregate(state, 0, updates, _rng())
    assert state.pending == {ClientId(15)}
    assert state.assignment[ClientId(15)] in state.models

    clients = [ClientInfo(ClientId(i), 10) for i in range(16)]
    plan = next(
        p for p in strategy.plan_round(state, 1, clients, _rng()) if p.client == 15
    )
    assert dict(plan.overrides) == {"epochs": 2}
    assert next(iter(plan.models.values())) is base

    # It ends near the third group's models: it joins that cluster, and its
    # update (from the initial model) changes no cluster model.
    end = points[truth == 2].mean(axis=0) + 0.05
    (cluster,) = plan.models
    new = strategy.aggregate(
        state, 1, [_ended_at(15, end, base, cluster=cluster)], _rng()
    )
    assert new.assignment[ClientId(15)] == new.assignment[ClientId(10)]
    assert not new.pending
    for k, model in state.models.items():
        np.testing.assert_array_equal(new.models[k], model)


def test_a_late_joiner_waits_in_the_largest_cluster_until_placed() -> None:
    centres = _centres(2)
    points = np.concatenate([_planted(centres[:1], 6)[0], _planted(centres[1:], 3)[0]])
    strategy = make("ocfl")
    state = _clustered(strategy, points)
    state = strategy.on_join(state, ClientInfo(ClientId(20), 10, joined_round=4))
    assert state.assignment[ClientId(20)] == state.assignment[ClientId(0)]
    assert ClientId(20) in state.pending
    state = strategy.on_leave(state, ClientId(20))
    assert ClientId(20) not in state.pending


# -- options ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "params",
    [
        {"cluster_epochs": 0},
        {"min_samples": 1},
        {"xi": 1.5},
        {"metric": "hamming"},
        {"assign_noise": "drop"},
        {"target_clusters": 0},
        {"fraction": 0.0},
    ],
)
def test_bad_options_name_the_value(params: dict) -> None:
    with pytest.raises(ValueError, match=str(next(iter(params.values())))):
        make("ocfl", **params)
