"""FL+HC: FedAvg, one agglomerative clustering of the updates, FedAvg per
cluster; the clustering checked against scipy's hierarchy on the same updates."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.spatial.distance import pdist
from sklearn.metrics import adjusted_rand_score

import clusterfed
from clusterfed.algorithms import ClientInfo, ClientUpdate, make
from clusterfed.algorithms.flhc import (
    FLHC,
    FLHCDiagnostics,
    FLHCState,
    cluster_updates,
    nearest_anchor,
)
from clusterfed.scenarios import BUILTIN
from clusterfed.scenarios.transforms import PermutationTransform
from clusterfed.types import ClientId, ClusterId

DIM = 16


def _rng() -> np.random.Generator:
    return np.random.default_rng(0)


def _planted(
    groups: int = 3, per_group: int = 4, spread: float = 0.05, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Update vectors around `groups` directions, in client order
    round-robin (client i in group i % groups)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((groups, DIM))
    truth = np.arange(groups * per_group) % groups
    deltas = centres[truth] + spread * rng.standard_normal((truth.size, DIM))
    return deltas.astype(np.float32), truth


def _joined(strategy: FLHC, n: int) -> FLHCState:
    state = strategy.init_state([np.zeros(DIM, dtype=np.float32)])
    for i in range(n):
        state = strategy.on_join(state, ClientInfo(ClientId(i), n_train=10 + i))
    return state


def _update(
    client: int, delta: np.ndarray, base: np.ndarray, cluster: int = 0, n: int = 10
) -> ClientUpdate:
    return ClientUpdate(
        ClientId(client), ClusterId(cluster), "ok", base, delta.astype(np.float32), n
    )


def _clustered(
    strategy: FLHC, deltas: np.ndarray, round: int = 0
) -> tuple[FLHCState, np.ndarray]:
    state = _joined(strategy, len(deltas))
    base = state.models[ClusterId(0)]
    updates = [_update(i, d, base, n=10 + i) for i, d in enumerate(deltas)]
    return strategy.aggregate(state, round, updates, _rng()), base


def _labels(state: FLHCState, n: int) -> np.ndarray:
    return np.array([state.assignment[ClientId(i)] for i in range(n)])


# -- the decisions, by hand -----------------------------------------------------


def test_fedavg_moves_the_one_model_before_the_clustering_round() -> None:
    strategy = make("flhc", cluster_round=2)
    state = _joined(strategy, 2)
    base = state.models[ClusterId(0)]
    updates = [
        _update(0, np.full(DIM, 1.0), base, n=10),
        _update(1, np.full(DIM, 4.0), base, n=30),
    ]
    new = strategy.aggregate(state, 0, updates, _rng())
    assert_allclose(new.models[ClusterId(0)], np.full(DIM, 3.25))  # (10 + 120) / 40
    assert new.clustering is None and set(new.models) == {ClusterId(0)}


def test_the_clustering_round_separates_three_planted_groups_of_updates() -> None:
    deltas, truth = _planted(groups=3)
    strategy = make("flhc", cluster_round=0)
    state, base = _clustered(strategy, deltas)
    labels = _labels(state, len(deltas))
    assert_array_equal(labels, truth)  # ids by lowest member: 0, 1, 2 round-robin
    # Each cluster steps W by its members' sample-weighted mean update.
    weights = 10 + np.arange(len(deltas), dtype=np.float64)
    for k in range(3):
        members = truth == k
        want = (
            base
            + (weights[members, None] * deltas[members]).sum(0) / weights[members].sum()
        )
        assert_allclose(state.models[ClusterId(k)], want, rtol=1e-6)
    assert state.clustering is not None
    assert dict(state.clustering.sizes) == {0: 4, 1: 4, 2: 4}
    assert not state.pending


def test_the_relative_threshold_is_a_multiple_of_the_median_update_norm() -> None:
    deltas, _ = _planted(groups=2)
    state, _ = _clustered(make("flhc", cluster_round=0, distance_threshold=1.5), deltas)
    assert state.clustering is not None
    median = float(np.median(np.linalg.norm(deltas.astype(np.float64), axis=1)))
    assert state.clustering.threshold == pytest.approx(1.5 * median)
    absolute = make(
        "flhc", cluster_round=0, distance_threshold=1.5, threshold="absolute"
    )
    state, _ = _clustered(absolute, deltas)
    assert state.clustering is not None and state.clustering.threshold == 1.5


def test_a_threshold_above_every_merge_keeps_one_cluster() -> None:
    deltas, _ = _planted(groups=3)
    state, _ = _clustered(make("flhc", cluster_round=0, distance_threshold=1e6), deltas)
    assert set(_labels(state, len(deltas))) == {0}


def test_clusters_cuts_the_tree_at_that_many() -> None:
    deltas, truth = _planted(groups=4)
    state, _ = _clustered(make("flhc", cluster_round=0, clusters=2), deltas)
    labels = _labels(state, len(deltas))
    assert len(set(labels)) == 2
    assert state.clustering is not None and state.clustering.threshold is None
    # Every planted group stays whole inside one of the two.
    for k in range(4):
        assert len(set(labels[truth == k])) == 1


def test_the_clustering_round_trains_everyone_and_later_rounds_a_sample() -> None:
    strategy = make("flhc", cluster_round=1, fraction=0.25)
    state = _joined(strategy, 8)
    clients = [ClientInfo(ClientId(i), 10) for i in range(8)]
    assert len(strategy.plan_round(state, 0, clients, _rng())) == 2  # FedAvg's C
    assert len(strategy.plan_round(state, 1, clients, _rng())) == 8
    deltas, _ = _planted(groups=2, per_group=4)
    state, _ = _clustered(strategy, deltas, round=1)
    plans = strategy.plan_round(state, 2, clients, _rng())
    # One client of each cluster (max(1, round(0.25 * 4))), each its cluster's.
    assert len(plans) == 2
    assert {state.assignment[p.client] for p in plans} == {0, 1}
    for plan in plans:
        ((cluster, model),) = plan.models.items()
        assert cluster == state.assignment[plan.client]
        assert model is state.models[cluster]


def test_fedavg_runs_inside_each_cluster_after_the_clustering() -> None:
    deltas, truth = _planted(groups=2, per_group=2)
    strategy = make("flhc", cluster_round=0, clusters=2)
    state, _ = _clustered(strategy, deltas)
    assert_array_equal(_labels(state, 4), truth)
    before = {k: m.copy() for k, m in state.models.items()}
    # Clients 0 and 2 (cluster 0) report; cluster 1 nobody: it keeps its model.
    updates = [
        _update(0, np.full(DIM, 1.0), before[ClusterId(0)], cluster=0, n=10),
        _update(2, np.full(DIM, 3.0), before[ClusterId(0)], cluster=0, n=10),
        ClientUpdate(ClientId(1), ClusterId(1), "late", before[1], np.ones(DIM)),
    ]
    new = strategy.aggregate(state, 1, updates, _rng())
    assert_allclose(new.models[ClusterId(0)], before[ClusterId(0)] + 2.0, rtol=1e-6)
    assert_array_equal(new.models[ClusterId(1)], before[ClusterId(1)])
    assert new.assignment == state.assignment


def test_diagnostics_report_the_clustering_once_it_happened() -> None:
    strategy = make("flhc", cluster_round=0, distance_threshold=1.5)
    assert strategy.diagnostics(_joined(strategy, 3)) is None
    deltas, _ = _planted(groups=3)
    state, _ = _clustered(strategy, deltas)
    state = strategy.on_join(state, ClientInfo(ClientId(40), 10, joined_round=1))
    found = strategy.diagnostics(state)
    assert isinstance(found, FLHCDiagnostics)
    assert state.clustering is not None
    assert found.record() == {
        "clustered_in": 0,
        "threshold": state.clustering.threshold,
        "sizes": {"0": 4, "1": 4, "2": 4},
        "pending": 1,
    }


# -- clients that join after the clustering, or miss it ------------------------


def test_a_client_failing_the_clustering_round_waits_then_joins_the_nearest() -> None:
    deltas, truth = _planted(groups=3)
    strategy = make("flhc", cluster_round=0)
    state = _joined(strategy, len(deltas) + 1)
    base = state.models[ClusterId(0)]
    updates = [_update(i, d, base) for i, d in enumerate(deltas)]
    late = ClientId(len(deltas))
    updates.append(ClientUpdate(late, ClusterId(0), "failed", reason="down"))
    state = strategy.aggregate(state, 0, updates, _rng())
    assert state.pending == {late}
    assert state.assignment[late] in state.models  # evaluated somewhere meanwhile

    # It trains the clustering round's W, not a cluster model ...
    clients = [ClientInfo(ClientId(i), 10) for i in range(len(deltas) + 1)]
    plan = next(
        p for p in strategy.plan_round(state, 1, clients, _rng()) if p.client == late
    )
    ((cluster, model),) = plan.models.items()
    assert model is base
    # ... and its update, near group 2's, places it there and moves no model.
    delta = deltas[truth == 2].mean(axis=0) + 0.01
    new = strategy.aggregate(state, 1, [_update(late, delta, base, cluster)], _rng())
    assert new.assignment[late] == new.assignment[ClientId(2)]
    assert not new.pending
    for k, m in state.models.items():
        assert_array_equal(new.models[k], m)


def test_a_newcomer_after_the_clustering_is_pending_until_placed() -> None:
    deltas, _ = _planted(groups=2)
    strategy = make("flhc", cluster_round=0)
    state, _ = _clustered(strategy, deltas)
    state = strategy.on_join(state, ClientInfo(ClientId(50), 10, joined_round=3))
    assert ClientId(50) in state.pending
    assert state.assignment[ClientId(50)] == state.largest_cluster()
    state = strategy.on_leave(state, ClientId(50))
    assert ClientId(50) not in state.pending and ClientId(50) not in state.assignment


def test_nearest_anchor_measures_by_the_metric_and_breaks_ties_low() -> None:
    anchors = {ClusterId(0): np.array([1.0, 0.0]), ClusterId(1): np.array([0.0, 10.0])}
    # (0.1, 3) is 3.1 from (1, 0) and 7 from (0, 10), but points almost along
    # (0, 10): the metric decides.
    point = np.array([0.1, 3.0])
    assert nearest_anchor(point, anchors, "euclidean") == 0
    assert nearest_anchor(point, anchors, "cosine") == 1
    tied = {ClusterId(3): np.array([0.0, 1.0]), ClusterId(1): np.array([1.0, 0.0])}
    assert nearest_anchor(np.zeros(2), tied, "euclidean") == 1


# -- the independent check: scipy's hierarchy on the same updates ---------------


@pytest.mark.parametrize(
    ("metric", "method"),
    [
        ("euclidean", "ward"),
        ("euclidean", "complete"),
        ("euclidean", "average"),
        ("euclidean", "single"),
        ("cityblock", "average"),
        ("cosine", "complete"),
    ],
)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_partition_equals_scipy_linkage_and_fcluster(
    metric: str, method: str, seed: int
) -> None:
    # Groups close enough that the threshold cuts inside the tree, not above it.
    deltas, _ = _planted(groups=3, per_group=5, spread=0.6, seed=seed)
    points = deltas.astype(np.float64)
    tree = (
        linkage(points, method=method)
        if method == "ward"
        else linkage(pdist(points, metric=metric), method=method)
    )
    # A threshold halfway between two merge heights, so ties cannot decide.
    heights = np.sort(tree[:, 2])
    cut = float((heights[-3] + heights[-2]) / 2)
    want = fcluster(tree, t=cut, criterion="distance")
    ours = {"cityblock": "manhattan"}.get(metric, metric)
    strategy = make(
        "flhc",
        cluster_round=0,
        metric=ours,
        linkage=method,
        distance_threshold=cut,
        threshold="absolute",
    )
    state, _ = _clustered(strategy, deltas)
    got = _labels(state, len(deltas))
    assert adjusted_rand_score(want, got) == 1.0
    assert len(set(got)) == 3  # the cut left three clusters
    assert_array_equal(
        cluster_updates(
            deltas,
            metric=ours,
            linkage=method,
            distance_threshold=cut,  # type: ignore[arg-type]
        ),
        got,
    )


def test_one_update_is_one_cluster() -> None:
    labels = cluster_updates(
        np.ones((1, DIM), np.float32),
        metric="euclidean",
        linkage="ward",
        distance_threshold=1.0,
    )
    assert_array_equal(labels, [0])


def test_identical_updates_merge_under_a_relative_threshold() -> None:
    state, _ = _clustered(make("flhc", cluster_round=0), np.zeros((4, DIM)))
    assert set(_labels(state, 4)) == {0}


# -- options --------------------------------------------------------------------


@pytest.mark.parametrize(
    "params",
    [
        {"cluster_round": -1},
        {"cluster_round": 1.5},
        {"metric": "hamming"},
        {"linkage": "centroid"},
        {"linkage": "ward", "metric": "cosine"},
        {"distance_threshold": 0.0},
        {"distance_threshold": -2.0},
        {"threshold": "scaled"},
        {"clusters": 0},
        {"fraction": 0.0},
        {"fraction": 1.5},
    ],
)
def test_bad_options_name_the_value(params: dict) -> None:
    with pytest.raises(ValueError, match=str(list(params.values())[-1])):
        make("flhc", **params)


# -- its scenarios and a real run ---------------------------------------------


def test_the_scenarios_hold_what_their_descriptions_say() -> None:
    digits = BUILTIN["flhc-swap"]()
    assert digits.algorithm == "flhc" and digits.dataset.name == "digits"
    assert digits.transform == PermutationTransform(groups=4)
    assert "in round 10" in digits.description
    assert digits.algorithm_params["flhc"]["cluster_round"] == 10
    assert "(2.0)" in digits.description
    assert make("flhc").distance_threshold == 2.0
    assert (digits.train.epochs, digits.train.lr, digits.train.momentum) == (
        5,
        0.05,
        0.9,
    )
    fmnist = BUILTIN["flhc-swap-fmnist"]()  # builds: validation passes
    assert fmnist.dataset.name == "fashion_mnist"
    assert (fmnist.clients, fmnist.rounds) == (100, 50)
    assert "100 clients" in fmnist.description and "40 more rounds" in (
        fmnist.description
    )
    assert (fmnist.train.epochs, fmnist.train.batch_size) == (1, 10)


def test_a_short_run_on_the_digits_clusters_in_its_clustering_round(
    tmp_path: Path,
) -> None:
    result = clusterfed.run(
        "flhc-swap",
        out=tmp_path,
        workers=1,
        rounds=3,
        clients=8,
        overrides=["algorithm_params.flhc.cluster_round=1", "train.epochs=2"],
    )
    rows = result.rows
    assert [r["round"] for r in rows] == [0, 1, 2]
    assert rows[0]["n_clusters"] == 1 and rows[0]["strategy"] == {}
    assert rows[1]["strategy"]["clustered_in"] == 1
    assert rows[2]["strategy"] == rows[1]["strategy"]
    assert rows[2]["n_clusters"] >= 1
    assert all(not c["failed"] for r in rows for c in r["clients"])
