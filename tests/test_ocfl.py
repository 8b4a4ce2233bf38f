"""OCFL: OPTICS on trained models, noise rules, merging, FedAvg per cluster."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.metrics import adjusted_rand_score

from clusterfed.algorithms import ClientInfo, ClientUpdate, make
from clusterfed.algorithms.ocfl import (
    OCFL,
    NoiseRule,
    OCFLState,
    assign_noise,
    cluster_models,
    end_model,
    merge_clusters,
    nearest_cluster,
    renumber,
)
from clusterfed.algorithms.robust import Median
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
        {"xi": 0.0},
        {"xi": 1.0},
        {"xi": 1.5},
        {"metric": "hamming"},
        {"assign_noise": "drop"},
        {"target_clusters": 0},
        {"fraction": 0.0},
        {"fraction": 1.5},
    ],
)
def test_bad_options_name_the_value(params: dict) -> None:
    with pytest.raises(ValueError, match=str(next(iter(params.values())))):
        make("ocfl", **params)


# -- edges of each step (issue 21) -----------------------------------------------


def test_two_models_with_min_samples_two_form_one_cluster() -> None:
    # The paper's min_samples = 2: two clients are already a dense region.
    points = np.array([[0.0, 0.0], [0.0, 0.1]])
    labels = cluster_models(points, min_samples=2, xi=0.2, metric="euclidean")
    assert labels.tolist() == [0, 0]


def test_optics_measures_distance_by_the_metric() -> None:
    # Along two directions: four groups by Euclidean distance, two by cosine.
    points, truth = _four_groups_on_two_directions()
    labels = cluster_models(points, min_samples=2, xi=0.2, metric="cosine")
    assert adjusted_rand_score(truth // 2, labels) == 1.0


# Cluster 0 sits at (10, 0), cluster 1 at (1, 1). Worked by hand:
# (5, 0.5) is 5.02 from cluster 0 and 4.03 from cluster 1 (Euclidean), but
# by cosine 0.005 from cluster 0 and 0.226 from cluster 1; (9, 0) is
# nearest cluster 0 either way.
_A, _B = [10.0, 0.0], [1.0, 1.0]
_OFF_AXIS, _NEAR_A = [5.0, 0.5], [9.0, 0.0]


@pytest.mark.parametrize(
    ("metric", "expected"),
    [("euclidean", [0, 0, 1, 1, 1, 0]), ("cosine", [0, 0, 1, 1, 0, 0])],
)
def test_noise_points_join_the_nearest_centre_by_the_metric(
    metric: str, expected: list[int]
) -> None:
    points = np.array([_A, _A, _B, _B, _OFF_AXIS, _NEAR_A])
    labels = np.array([0, 0, 1, 1, -1, -1])
    result = assign_noise(points, labels, np.ones(6), "nearest", metric)
    assert result.tolist() == expected


def test_each_noise_point_becomes_a_singleton_after_the_clusters() -> None:
    points = np.array([_A, _A, _B, _B, _OFF_AXIS, _NEAR_A])
    labels = np.array([0, 0, 1, 1, -1, -1])
    result = assign_noise(points, labels, np.ones(6), "singleton", "euclidean")
    assert result.tolist() == [0, 0, 1, 1, 2, 3]


@pytest.mark.parametrize("rule", ["singleton", "nearest"])
def test_no_points_have_no_labels(rule: NoiseRule) -> None:
    empty = np.zeros((0, 2))
    labels = assign_noise(
        empty, np.zeros(0, dtype=np.int64), np.zeros(0), rule, "cosine"
    )
    assert labels.shape == (0,)
    assert np.arange(3)[labels].shape == (0,)  # integer labels: they still index


def test_renumber_counts_from_zero_in_order_of_appearance() -> None:
    assert renumber(np.array([7, 7, -1, 3, -1])).tolist() == [0, 0, 1, 2, 1]
    none = renumber(np.zeros(0, dtype=np.int64))
    assert np.arange(3)[none].shape == (0,)  # integer labels even when empty


def test_merge_uses_cosine_where_euclidean_distance_would_pair_otherwise() -> None:
    # Centres u, 10u, v, 10v: by Euclidean distance u and v are nearest (4.5
    # against 28.5), by cosine u joins 10u and v joins 10v.
    u = np.zeros(DIM)
    u[: DIM // 2] = 1.0
    v = np.zeros(DIM)
    v[DIM // 2 :] = 1.0
    points = np.stack([u, 10 * u, v, 10 * v])
    merged = merge_clusters(points, np.arange(4), np.ones(4), target=2)
    assert merged.tolist() == [0, 0, 1, 1]


def test_a_single_cluster_is_already_at_a_target_of_one() -> None:
    labels = np.zeros(3, dtype=np.int64)
    assert merge_clusters(np.eye(3), labels, np.ones(3), target=1).tolist() == [0] * 3


def test_target_clusters_one_merges_everything_into_one_fedavg_model() -> None:
    points, _ = _four_groups_on_two_directions()
    state = _clustered(make("ocfl", target_clusters=1), points)
    assert set(_labels(state, len(points))) == {0}
    assert_allclose(state.models[ClusterId(0)], points.mean(axis=0), rtol=1e-5)


def test_nearest_cluster_measures_by_the_metric_and_breaks_ties_low() -> None:
    centres = {
        ClusterId(0): np.array(_A, dtype=np.float32),
        ClusterId(1): np.array(_B, dtype=np.float32),
    }
    point = np.array(_OFF_AXIS, dtype=np.float32)
    assert nearest_cluster(point, centres, "euclidean") == 1
    assert nearest_cluster(point, centres, "cosine") == 0
    twins = {ClusterId(3): centres[ClusterId(0)], ClusterId(2): centres[ClusterId(0)]}
    assert nearest_cluster(point, twins, "euclidean") == 2


@pytest.mark.parametrize(
    ("base", "delta"), [(np.zeros(2), None), (None, np.zeros(2)), (None, None)]
)
def test_an_update_without_base_or_delta_has_no_end_model(
    base: np.ndarray | None, delta: np.ndarray | None
) -> None:
    update = ClientUpdate(ClientId(7), ClusterId(0), "ok", base, delta, 10, 0.5)
    with pytest.raises(ValueError, match="^the update of client 7 carries no model$"):
        end_model(update)


# -- the strategy's edges (issue 21) ---------------------------------------------


def test_the_default_clustering_round_trains_one_epoch_of_the_first_model() -> None:
    strategy = make("ocfl")
    state = _joined(strategy, 3)
    assert list(state.models) == [0]
    clients = [ClientInfo(ClientId(i), 10) for i in range(3)]
    for plan in strategy.plan_round(state, 0, clients, _rng()):
        assert dict(plan.overrides) == {"epochs": 1}
        assert list(plan.models) == [0]


def test_only_accepted_updates_with_samples_are_clustered() -> None:
    # Clients 0-2 and 3-8 make two groups; client 9 is late (its model came
    # after the deadline), client 10 trained on no sample, client 11 failed.
    # None of the three is clustered: they wait in the larger group.
    centres = _centres(2)
    points = np.concatenate([_planted(centres[:1], 3)[0], _planted(centres[1:], 6)[0]])
    strategy = make("ocfl")
    state = _joined(strategy, 12)
    base = state.initial
    updates = [_ended_at(i, p, base) for i, p in enumerate(points)]
    late = _ended_at(9, points[0], base)
    updates.append(
        ClientUpdate(ClientId(9), ClusterId(0), "late", base, late.delta, 10)
    )
    updates.append(_ended_at(10, points[0], base, n=0))
    updates.append(ClientUpdate(ClientId(11), ClusterId(0), "failed", reason="down"))
    state = strategy.aggregate(state, 0, updates, _rng())
    assert state.pending == {ClientId(9), ClientId(10), ClientId(11)}
    small, large = state.assignment[ClientId(0)], state.assignment[ClientId(3)]
    assert small != large
    assert [state.assignment[ClientId(i)] for i in (9, 10, 11)] == [large] * 3
    assert_allclose(state.models[small], points[:3].mean(axis=0), rtol=1e-5)
    assert_allclose(state.models[large], points[3:].mean(axis=0), rtol=1e-5)


def test_fedavg_inside_a_cluster_uses_the_scenario_aggregator() -> None:
    strategy = make("ocfl")
    strategy.aggregator = Median()
    state = strategy.init_state([np.zeros(2, dtype=np.float32)])
    model = np.array([1.0, 1.0], dtype=np.float32)
    state = state.replace(
        models={ClusterId(0): model},
        assignment={ClientId(i): ClusterId(0) for i in range(3)},
        clustered=True,
    )
    deltas = [[1.0, 0.0], [0.0, 2.0], [5.0, 5.0]]
    updates = [
        ClientUpdate(
            ClientId(i), ClusterId(0), "ok", model, np.array(d, np.float32), 10
        )
        for i, d in enumerate(deltas)
    ]
    new = strategy.aggregate(state, 1, updates, _rng())
    # The coordinate-wise median of the deltas is (1, 2); their mean (2, 7/3).
    assert_allclose(new.models[ClusterId(0)], [2.0, 3.0])


def test_pending_clients_placed_in_one_round_then_train_their_cluster() -> None:
    initial = np.zeros(2, dtype=np.float32)
    strategy = make("ocfl")
    state = strategy.init_state([initial])
    centres = {
        ClusterId(0): np.array(_A, dtype=np.float32),
        ClusterId(1): np.array(_B, dtype=np.float32),
    }
    state = state.replace(
        models=centres,
        anchors=dict(centres),
        assignment={ClientId(i): ClusterId(0) for i in (0, 5, 6, 7)},
        clustered=True,
        pending=frozenset({ClientId(5), ClientId(6), ClientId(7)}),
    )
    # Client 6 ends near cluster 0, client 5 near cluster 1; 7 sends nothing.
    updates = [
        _ended_at(6, np.array(_NEAR_A), initial),
        _ended_at(5, np.array([1.0, 2.0]), initial),
    ]
    state = strategy.aggregate(state, 1, updates, _rng())
    assert state.assignment[ClientId(5)] == 1
    assert state.assignment[ClientId(6)] == 0
    assert state.pending == {ClientId(7)}
    clients = [ClientInfo(ClientId(i), 10) for i in (5, 6, 7)]
    plans = {p.client: p for p in strategy.plan_round(state, 2, clients, _rng())}
    for client, cluster in ((5, 1), (6, 0)):
        (model,) = plans[ClientId(client)].models.items()
        assert model[0] == cluster
        assert_array_equal(model[1], centres[ClusterId(cluster)])
    assert not plans[ClientId(5)].overrides and not plans[ClientId(6)].overrides
    assert dict(plans[ClientId(7)].overrides) == {"epochs": 1}
