"""PACFL: principal angles between the clients' data subspaces, one
hierarchical clustering of them, FedAvg per cluster. The angles checked
against scipy.linalg.subspace_angles, the clustering against scikit-learn and
the authors' merge loop, planted label groups clustered as planted."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
import torch
from numpy.testing import assert_allclose, assert_array_equal
from pydantic import ValidationError
from scipy.linalg import subspace_angles
from sklearn.cluster import AgglomerativeClustering
from sklearn.datasets import load_digits
from sklearn.metrics import adjusted_rand_score

import clusterfed
from clusterfed.actors import ParameterServer, RoundOutcome, work
from clusterfed.actors.trainer import LocalTrainer
from clusterfed.actors.validation import check_subspace
from clusterfed.algorithms import ClientInfo, ClientUpdate, make
from clusterfed.algorithms._subspace import (
    basis_angle,
    cluster,
    orthonormal,
    proximity,
    renumber,
    smallest_angle,
)
from clusterfed.algorithms.pacfl import PACFL, PACFLDiagnostics, PACFLState
from clusterfed.conformance import CHECKS, Check
from clusterfed.protocol import (
    MAX_BASIS,
    ClassHistogram,
    DataSubspace,
    DescribeTask,
    Envelope,
    TrainConfig,
    decode,
    encode,
)
from clusterfed.protocol.codec import to_json_form
from clusterfed.scenarios import BUILTIN, plan_run
from clusterfed.scenarios.partitions import ClassTablePartition
from clusterfed.scenarios.spec import ModelSpec
from clusterfed.types import ClientId, ClusterId
from helpers import Tamper, TamperingRuntime, start_server

DIM = 6  # model size
D = 12  # input size of the subspaces


def _rng() -> np.random.Generator:
    return np.random.default_rng(0)


def _basis(columns: list[int], tilt: float = 0.0, seed: int = 0) -> np.ndarray:
    """Unit columns along coordinate axes of R^D, tilted by `tilt` radians
    towards a random direction."""
    rng = np.random.default_rng(seed)
    basis = np.eye(D)[:, columns]
    basis = np.cos(tilt) * basis + np.sin(tilt) * rng.standard_normal(basis.shape)
    return (basis / np.linalg.norm(basis, axis=0)).astype(np.float32)


def _joined(strategy: PACFL, n: int) -> PACFLState:
    state = strategy.init_state([np.zeros(DIM, dtype=np.float32)])
    for i in range(n):
        state = strategy.on_join(state, ClientInfo(ClientId(i), n_train=10 + i))
    return state


def _update(
    client: int, cluster: int, delta: list[float], base: np.ndarray, n: int = 10
) -> ClientUpdate:
    return ClientUpdate(
        ClientId(client),
        ClusterId(cluster),
        "ok",
        base,
        np.array(delta, dtype=np.float32),
        n,
        1.0,
    )


# Three planted groups of two clients each: planes (0, 1), (4, 5), (8, 9).
PLANTED = {
    ClientId(0): _basis([0, 1]),
    ClientId(1): _basis([0, 1], tilt=0.01, seed=1),
    ClientId(2): _basis([4, 5]),
    ClientId(3): _basis([8, 9], tilt=0.02, seed=2),
    ClientId(4): _basis([5, 4], tilt=0.01, seed=3),
    ClientId(5): _basis([9, 8]),
}


# -- the angles ---------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize(("ka", "kb"), [(1, 1), (2, 3), (4, 2), (6, 6)])
def test_the_smallest_angle_equals_scipys_subspace_angles(
    seed: int, ka: int, kb: int
) -> None:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((D, ka))
    # A subspace near a's (sharing a's first column up to 1e-4) and a random one.
    near = np.hstack([a[:, :1] + 1e-4 * rng.standard_normal((D, 1)), a[:, 1:kb]])
    near = np.hstack([near, rng.standard_normal((D, kb - near.shape[1]))])
    for b in (near, rng.standard_normal((D, kb))):
        ours = smallest_angle(orthonormal(a), orthonormal(b))
        theirs = np.degrees(subspace_angles(a, b).min())
        assert_allclose(ours, theirs, rtol=1e-7, atol=1e-9)


def test_stacked_blocks_span_what_scipy_spans() -> None:
    """Per-class blocks are not orthogonal to each other, and may be more
    columns than dimensions: the angle is between their spans."""
    rng = np.random.default_rng(1)
    blocks = [np.linalg.qr(rng.standard_normal((D, 3)))[0] for _ in range(5)]
    wide, other = np.hstack(blocks), np.hstack(blocks[:2])  # 15 > D columns
    assert orthonormal(wide).shape == (D, D)
    assert smallest_angle(orthonormal(wide), orthonormal(other)) == pytest.approx(0)
    third = rng.standard_normal((D, 2))
    assert smallest_angle(orthonormal(other), orthonormal(third)) == pytest.approx(
        np.degrees(subspace_angles(other, third).min()), rel=1e-7
    )


def test_the_proximity_matrix_holds_every_pair_of_angles() -> None:
    bases = list(PLANTED.values())
    matrix = proximity(bases, "smallest")
    assert_array_equal(matrix, matrix.T)
    assert_array_equal(np.diag(matrix), 0)
    for i, a in enumerate(bases):
        for j, b in enumerate(bases):
            if i != j:
                angles = subspace_angles(a.astype(np.float64), b.astype(np.float64))
                assert matrix[i, j] == pytest.approx(np.degrees(angles.min()))
    assert matrix[0, 1] < 2 and matrix[0, 2] == pytest.approx(90)


def test_the_basis_measure_is_the_authors_elementwise_arccos() -> None:
    """min over column pairs of arccos(u·w) with the signs as sent: an upper
    bound on the smallest principal angle that a sign flip changes."""
    rng = np.random.default_rng(2)
    a = np.linalg.qr(rng.standard_normal((D, 3)))[0]
    b = np.linalg.qr(rng.standard_normal((D, 3)))[0]
    expected = np.degrees(np.arccos(np.clip(a.T @ b, -1, 1)).min())
    assert basis_angle(a, b) == pytest.approx(expected)
    assert basis_angle(a, b) >= smallest_angle(a, b) - 1e-9
    assert basis_angle(a, a) == pytest.approx(0, abs=1e-5)
    assert basis_angle(a[:, :1], -a[:, :1]) == pytest.approx(180)
    assert smallest_angle(a[:, :1], -a[:, :1]) == pytest.approx(0, abs=1e-6)


# -- the clustering -----------------------------------------------------------


def _authors_merge(matrix: np.ndarray, threshold: float, rule: str) -> np.ndarray:
    """The authors' `hierarchical_clustering` (MMorafah/PACFL,
    src/clustering/hierarchical_clustering.py) restated: merge the closest
    pair of rows while it is at most `threshold` apart, the merged row the
    maximum, minimum or mean of the two. Labels in order of first member."""
    a = matrix.astype(np.float64).copy()
    groups = [[i] for i in range(len(a))]
    while len(a) > 1:
        np.fill_diagonal(a, np.inf)
        i, j = np.unravel_index(np.argmin(a), a.shape)
        if a[i, j] > threshold:
            break
        merged = {"maximum": np.maximum, "minimum": np.minimum}.get(
            rule, lambda x, y: (x + y) / 2
        )(a[:, i], a[:, j])
        a[:, i] = a[i, :] = merged
        a = np.delete(np.delete(a, j, axis=0), j, axis=1)
        groups[i] = groups[i] + groups.pop(j)
    labels = np.empty(len(matrix), dtype=np.int64)
    for k, members in enumerate(groups):
        labels[members] = k
    return renumber(labels)


def _thresholds(matrix: np.ndarray) -> list[float]:
    """Three cuts, each halfway between two distinct entries (a cut at an
    entry is a tie: scikit-learn merges below it, scipy and the authors at it)."""
    values = np.unique(matrix[matrix > 0])
    picks = (int(len(values) * q) for q in (0.1, 0.3, 0.6))
    return [float(values[i] + values[i + 1]) / 2 for i in picks]


def _random_proximity(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((4, 5)) * 3
    points = centres[rng.integers(0, 4, n)] + rng.standard_normal((n, 5))
    return np.linalg.norm(points[:, None] - points[None], axis=-1) * 5


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(
    ("method", "rule"),
    [("weighted", "mean"), ("complete", "maximum"), ("single", "minimum")],
)
def test_the_cut_equals_the_authors_merge_loop(
    seed: int, method: str, rule: str
) -> None:
    matrix = _random_proximity(14, seed)
    for threshold in _thresholds(matrix):
        ours = cluster(matrix, threshold, method)  # type: ignore[arg-type]
        assert_array_equal(ours, _authors_merge(matrix, threshold, rule))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("method", ["average", "complete", "single"])
def test_the_cut_equals_scikit_learns_agglomerative_clustering(
    seed: int, method: str
) -> None:
    matrix = _random_proximity(14, seed)
    for threshold in _thresholds(matrix):
        theirs = AgglomerativeClustering(
            n_clusters=None,
            metric="precomputed",
            linkage=method,
            distance_threshold=threshold,
        ).fit_predict(matrix)
        ours = cluster(matrix, threshold, method)  # type: ignore[arg-type]
        assert_array_equal(ours, renumber(np.asarray(theirs)))


def test_one_client_is_one_cluster() -> None:
    assert_array_equal(cluster(np.zeros((1, 1)), 5.0, "weighted"), [0])


# -- the strategy, by hand -----------------------------------------------------


def _clustered(strategy: PACFL | None = None) -> tuple[PACFL, PACFLState]:
    strategy = strategy or PACFL(threshold=10.0)
    state = strategy.on_describe(_joined(strategy, 6), 0, PLANTED, _rng())
    return strategy, state


def test_fedavg_trains_everyone_before_any_client_is_described() -> None:
    strategy = PACFL()
    state = _joined(strategy, 3)
    plans = strategy.plan_round(
        state, 0, [ClientInfo(ClientId(i), 10) for i in range(3)], _rng()
    )
    assert [p.client for p in plans] == [0, 1, 2]
    base = state.models[ClusterId(0)]
    updates = [_update(i, 0, [float(i)] * DIM, base, n=10 * (i + 1)) for i in range(3)]
    new = strategy.aggregate(state, 0, updates, _rng())
    assert_allclose(new.models[ClusterId(0)], (0 * 10 + 1 * 20 + 2 * 30) / 60)
    assert strategy.diagnostics(new) is None


def test_the_first_descriptions_are_clustered_as_planted() -> None:
    strategy, state = _clustered()
    assert state.assignment == {0: 0, 1: 0, 2: 1, 3: 2, 4: 1, 5: 2}
    assert state.clustered_in == 0 and state.pending == frozenset()
    start = np.zeros(DIM, dtype=np.float32)
    for model in state.models.values():
        assert_array_equal(model, start)
    assert strategy.diagnostics(state) == PACFLDiagnostics(
        clustered_in=0, sizes={0: 2, 1: 2, 2: 2}, pending=0, placed=0
    )


def test_a_threshold_above_every_angle_keeps_one_cluster() -> None:
    _, state = _clustered(PACFL(threshold=95.0))
    assert set(state.assignment.values()) == {0}


def test_fedavg_runs_inside_each_cluster() -> None:
    strategy, state = _clustered()
    base = state.models[ClusterId(0)]
    updates = [
        _update(0, 0, [1.0] * DIM, base, n=10),
        _update(1, 0, [4.0] * DIM, base, n=30),
        _update(2, 1, [-2.0] * DIM, base, n=5),
    ]
    new = strategy.aggregate(state, 1, updates, _rng())
    assert_allclose(new.models[ClusterId(0)], (1 * 10 + 4 * 30) / 40)
    assert_allclose(new.models[ClusterId(1)], -2.0)
    assert_array_equal(new.models[ClusterId(2)], base)  # nobody reported
    assert state.models[ClusterId(0)] is base  # the input is untouched


def test_a_fraction_samples_the_placed_clients() -> None:
    strategy, state = _clustered(PACFL(threshold=10.0, fraction=0.5))
    clients = [ClientInfo(ClientId(i), 10) for i in range(6)]
    plans = strategy.plan_round(state, 1, clients, _rng())
    assert len(plans) == 3
    for plan in plans:
        assert list(plan.models) == [state.assignment[plan.client]]


def test_a_client_not_described_waits_and_does_not_train() -> None:
    strategy = PACFL(threshold=10.0)
    state = _joined(strategy, 7)
    state = strategy.on_describe(state, 0, PLANTED, _rng())  # client 6 failed
    assert state.pending == {6}
    assert state.assignment[ClientId(6)] == state.largest_cluster()
    clients = [ClientInfo(ClientId(i), 10) for i in range(7)]
    plans = strategy.plan_round(state, 1, clients, _rng())
    assert 6 not in [p.client for p in plans]
    base = state.models[ClusterId(0)]
    new = strategy.aggregate(state, 1, [_update(6, 0, [9.0] * DIM, base)], _rng())
    assert_array_equal(new.models[ClusterId(0)], base)  # a stray update counts not
    # Its subspace arrives next round: it joins the planted plane (4, 5).
    later = strategy.on_describe(
        state, 1, {ClientId(6): _basis([4, 5], tilt=0.01, seed=9)}, _rng()
    )
    assert later.assignment[ClientId(6)] == 1 and later.pending == frozenset()
    assert later.placed == 1


def test_a_newcomer_far_from_every_cluster_starts_its_own() -> None:
    strategy, state = _clustered()
    state = strategy.on_join(state, ClientInfo(ClientId(9), 10))
    assert state.pending == {9}
    new = strategy.on_describe(state, 3, {ClientId(9): _basis([2, 3])}, _rng())
    assert new.assignment[ClientId(9)] == 3
    assert_array_equal(new.models[ClusterId(3)], np.zeros(DIM))  # the start model
    assert strategy.diagnostics(new) == PACFLDiagnostics(
        clustered_in=0, sizes={0: 2, 1: 2, 2: 2, 3: 1}, pending=0, placed=1
    )


@pytest.mark.parametrize(
    ("linkage", "expected"), [("single", 0), ("complete", None), ("weighted", None)]
)
def test_a_newcomer_is_placed_by_the_linkage(
    linkage: str, expected: int | None
) -> None:
    """A newcomer 5° from client 0 and 50° from client 1 (both in cluster 0):
    single linkage takes the nearest member (5° ≤ 20°); complete the farthest,
    and the mean is 27.5°, both beyond 20°: a new cluster."""
    e = np.eye(D)
    members = {
        ClientId(0): e[:, :1].astype(np.float32),
        ClientId(1): (
            np.cos(np.radians(45)) * e[:, :1] + np.sin(np.radians(45)) * e[:, 1:2]
        ).astype(np.float32),
    }
    strategy = PACFL(threshold=50.0, linkage=linkage)  # type: ignore[arg-type]
    state = strategy.on_describe(_joined(strategy, 2), 0, members, _rng())
    assert set(state.assignment.values()) == {0}
    strategy.threshold = 20.0
    newcomer = (
        np.cos(np.radians(-5)) * e[:, :1] + np.sin(np.radians(-5)) * e[:, 1:2]
    ).astype(np.float32)
    state = strategy.on_join(state, ClientInfo(ClientId(2), 10))
    new = strategy.on_describe(state, 1, {ClientId(2): newcomer}, _rng())
    assert new.assignment[ClientId(2)] == (1 if expected is None else expected)


def test_a_client_that_leaves_takes_its_subspace() -> None:
    strategy, state = _clustered()
    state = strategy.on_leave(state, ClientId(2))
    assert ClientId(2) not in state.subspaces and ClientId(2) not in state.assignment
    assert strategy.diagnostics(state).sizes == {0: 2, 1: 1, 2: 2}  # type: ignore[union-attr]
    # A description of a client that already left is ignored.
    assert (
        strategy.on_describe(state, 1, {ClientId(2): _basis([0, 1])}, _rng()) == state
    )


def test_planted_label_groups_of_the_digits_are_clustered_as_planted() -> None:
    """Clients holding two digits each, 4 clients per pair of digits: their
    per-class subspaces (p = 3) cluster into the 5 planted pairs."""
    x, y = load_digits(return_X_y=True)
    x = x / 16.0
    rng = np.random.default_rng(0)
    by_class = {c: rng.permutation(np.flatnonzero(y == c)) for c in range(10)}
    bases, truth = {}, []
    for g, (a, b) in enumerate([(0, 1), (2, 3), (4, 5), (6, 7), (8, 9)]):
        for i in range(4):
            blocks = []
            for c in (a, b):
                rows = x[by_class[c][i * 35 : (i + 1) * 35]]
                u = np.linalg.svd(rows.T, full_matrices=False)[0]
                blocks.append(u[:, :3])
            bases[ClientId(len(truth))] = np.hstack(blocks).astype(np.float32)
            truth.append(g)
    strategy = PACFL()
    state = strategy.on_describe(_joined(strategy, 20), 0, bases, _rng())
    labels = [state.assignment[ClientId(i)] for i in range(20)]
    assert_array_equal(labels, truth)


@pytest.mark.parametrize(
    "params",
    [
        {"n_basis": 0},
        {"n_basis": True},
        {"per_class": "yes"},
        {"threshold": 0.0},
        {"threshold": 180.0},
        {"measure": "cosine"},
        {"linkage": "ward"},
        {"fraction": 0.0},
    ],
)
def test_bad_options_name_the_value(params: dict) -> None:
    with pytest.raises(ValueError, match=str(list(params.values())[-1])):
        make("pacfl", **params)


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_pacfl_conforms(check: Check) -> None:
    check("pacfl")


# -- its scenarios -------------------------------------------------------------


def test_the_scenarios_hold_what_their_descriptions_say() -> None:
    digits = BUILTIN["pacfl-labels"]()
    assert digits.algorithm == "pacfl" and digits.dataset.name == "digits"
    assert isinstance(digits.partition, ClassTablePartition)
    pairs = [{c for c, w in enumerate(row) if w > 0} for row in digits.partition.table]
    assert all(len(p) == 2 for p in pairs) and len(set().union(*pairs)) == 10
    assert "threshold 7 degrees" in digits.description
    assert make("pacfl").threshold == 7.0 and make("pacfl").n_basis == 3
    assert "first 3 left singular vectors" in digits.description
    assert (
        digits.train.epochs,
        digits.train.batch_size,
        digits.train.lr,
        digits.train.momentum,
    ) == (10, 10, 0.01, 0.5)
    assert digits.algorithm_params["pacfl"] == {"fraction": 0.2}
    assert "20 % of them sampled" in digits.description
    assert (digits.clients, digits.rounds) == (20, 50)
    fmnist = BUILTIN["pacfl-labels-fmnist"]()
    assert fmnist.dataset.name == "fashion_mnist"
    assert (fmnist.clients, fmnist.rounds) == (100, 200)
    assert fmnist.algorithm_params["pacfl"] == {"fraction": 0.1, "threshold": 2.5}
    assert "10 % sampled" in fmnist.description and "2.5 degrees" in (
        fmnist.description
    )


# -- the description on the wire: the client's answer, the checks -------------


def _trainer(x: torch.Tensor, y: torch.Tensor) -> LocalTrainer:
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(x[0].numel(), 3))
    return LocalTrainer(model, x, y, x[:2], y[:2], seed=0)


def test_a_client_sends_the_first_vectors_of_each_class_it_holds() -> None:
    rng = np.random.default_rng(0)
    x = torch.tensor(rng.random((30, 1, 2, 3)), dtype=torch.float32)
    y = torch.tensor([2] * 12 + [0] * 16 + [1] * 2)
    basis = work.data_subspace(_trainer(x, y), 3, per_class=True)
    # Classes 0, 1, 2 in order; class 1 has 2 samples, so 2 vectors.
    assert basis.dtype == np.float32 and basis.shape == (6, 3 + 2 + 3)
    flat = x.reshape(30, -1).numpy().astype(np.float64)
    for block, c in ((basis[:, :3], 0), (basis[:, 5:], 2)):
        u = np.linalg.svd(flat[y.numpy() == c].T, full_matrices=False)[0][:, :3]
        assert_allclose(np.abs(np.sum(block * u, axis=0)), 1, atol=1e-5)  # ± u
        assert_allclose(block.T @ block, np.eye(3), atol=1e-5)
    whole = work.data_subspace(_trainer(x, y), 2, per_class=False)
    u = np.linalg.svd(flat.T, full_matrices=False)[0][:, :2]
    assert whole.shape == (6, 2)
    assert_allclose(np.abs(np.sum(whole * u, axis=0)), 1, atol=1e-5)


def _subspace(basis: np.ndarray, client: int = 1) -> DataSubspace:
    return DataSubspace(client_id=client, basis=basis.astype(np.float32))


def test_a_good_subspace_passes_the_server_s_checks() -> None:
    basis = np.eye(D)[:, :4]
    assert check_subspace(_subspace(basis), ClientId(1), D, 4) is None
    assert check_subspace(_subspace(basis), ClientId(1), None, 8) is None


@pytest.mark.parametrize(
    ("payload", "n_features", "most", "reason"),
    [
        (_subspace(np.eye(D)[:, :2], client=2), D, 6, "of client 2, asked client 1"),
        (_subspace(np.eye(D + 1)[:, :2]), D, 6, "of 13 features, the model's input"),
        (_subspace(np.eye(D)[:, :7]), D, 6, "7 vectors, the task asked at most 6"),
        (_subspace(2 * np.eye(D)[:, :2]), D, 6, "vector 0 has norm 2, not 1"),
        (_subspace(np.zeros((D, 1))), D, 6, "vector 0 has norm 0, not 1"),
        (ClassHistogram(client_id=1, counts=(3,)), D, 6, "expected a data_subspace"),
    ],
)
def test_a_subspace_that_does_not_fit_is_refused_by_name(
    payload: DataSubspace | ClassHistogram, n_features: int, most: int, reason: str
) -> None:
    problem = check_subspace(payload, ClientId(1), n_features, most)
    assert problem is not None and reason in problem


@pytest.mark.parametrize(
    ("basis", "reason"),
    [
        (np.eye(D)[:, :2].astype(np.float64), "expected float32 values"),
        (np.ones(D, dtype=np.float32), "expected a matrix"),
        (np.full((D, 2), np.nan, dtype=np.float32), "NaN or Inf"),
        (np.zeros((D, 0), dtype=np.float32), "1 to 1024 vectors"),
        (np.zeros((2, MAX_BASIS + 1), dtype=np.float32), "1 to 1024 vectors"),
    ],
)
def test_decoding_refuses_a_subspace_that_is_no_bounded_matrix(
    basis: np.ndarray, reason: str
) -> None:
    good = _envelope(_subspace(np.eye(D)[:, :2]))
    raw = good.model_dump(mode="python")
    raw["payload"]["basis"] = basis
    with pytest.raises(ValidationError, match=reason):
        Envelope.model_validate(raw)


def _envelope(payload: DescribeTask | DataSubspace) -> Envelope:
    return Envelope(
        msg_id="m", sender="server", recipient="client/1", round=0, payload=payload
    )


def test_a_subspace_round_trips_and_a_histogram_task_is_sent_as_before() -> None:
    basis = np.linalg.qr(_rng().standard_normal((D, 3)))[0].astype(np.float32)
    back = decode(encode(_envelope(_subspace(basis)))).payload
    assert isinstance(back, DataSubspace) and back.client_id == 1
    assert_array_equal(back.basis, basis)
    task = DescribeTask(want="data_subspace", n_basis=3, per_class=True)
    assert decode(encode(_envelope(task))).payload == task
    # CAFA's task carries neither field: its bytes are version 1's.
    form = to_json_form(encode(_envelope(DescribeTask())))
    assert form["payload"] == {"kind": "describe_task", "want": "class_histogram"}
    for bad in ({"want": "data_subspace"}, {"n_basis": 3}):
        with pytest.raises(ValidationError, match="task"):
            DescribeTask(**bad)


def test_a_strategy_asks_for_one_description_at_most() -> None:
    with pytest.raises(TypeError, match="one description at most"):

        class Greedy(PACFL):
            wants = ("data_subspace", "class_histogram")


# -- a real run ----------------------------------------------------------------


def test_a_short_run_on_the_digits_clusters_the_planted_pairs_first(
    tmp_path: Path,
) -> None:
    result = clusterfed.run(
        "pacfl-labels", out=tmp_path, workers=1, rounds=2, overrides=["train.epochs=1"]
    )
    rows = result.rows
    assert [r["round"] for r in rows] == [0, 1]
    for row in rows:  # clustered before the first training, as planted
        assert row["ari"] == 1.0 and row["n_clusters"] == 5
        assert row["strategy"] == {
            "clustered_in": 0,
            "sizes": {str(k): 4 for k in range(5)},
            "pending": 0,
            "placed": 0,
        }
    assert not any(c["failed"] for r in rows for c in r["clients"])
    # Each client's answer (64 x 6 float32) went up once, in round 0.
    assert rows[0]["bytes_up"] > rows[1]["bytes_up"]


def _run_tampered(
    tamper: Tamper,
) -> tuple[ParameterServer, list[RoundOutcome], dict[ClientId, int]]:
    """pacfl-labels on 10 clients (2 per planted pair), 2 rounds, every client
    training, one local epoch of a small MLP; `tamper` may rewrite a reply.
    Also returns each client's planted group."""
    scenario = BUILTIN["pacfl-labels"]().model_copy(
        update={
            "clients": 10,
            "rounds": 2,
            "algorithm_params": {"pacfl": {"fraction": 1.0}},
            "train": TrainConfig(lr=0.01, momentum=0.5, batch_size=10, epochs=1),
            "model": ModelSpec(name="mlp", hidden=[32]),
        }
    )
    plan = plan_run(scenario)

    async def go() -> tuple[ParameterServer, list[RoundOutcome]]:
        server = await start_server(plan, TamperingRuntime(tamper))
        return server, [await server.run_round(r) for r in range(2)]

    server, outcomes = asyncio.run(go())
    return server, outcomes, {c.id: c.group for c in plan.clients}


def test_a_subspace_that_does_not_fit_the_model_is_refused_and_its_client_waits() -> (
    None
):
    """Client 3 sends half its rows: refused by name, not asked again; it sits
    out training (pending, evaluated with the largest cluster's model) and the
    others are clustered as planted."""
    asked = []

    def halve(cid: ClientId, request: bytes, reply: bytes) -> bytes:
        env = decode(reply)
        if isinstance(env.payload, DataSubspace):
            asked.append(cid)
            if cid == 3:
                cut = env.payload.model_copy(update={"basis": env.payload.basis[:32]})
                return encode(env.model_copy(update={"payload": cut}))
        return reply

    server, outcomes, truth = _run_tampered(halve)
    assert sorted(asked) == list(range(10))  # once each: round 0 only
    assert outcomes[0].rejections == [
        "client 3: describe: data subspace of 32 features, the model's input has 64"
    ]
    assert outcomes[1].rejected_messages == 0
    state = server.state
    assert isinstance(state, PACFLState) and state.pending == {3}
    assert ClientId(3) not in state.subspaces
    trained = {c.id for c in outcomes[1].clients if c.status == "ok"}
    assert ClientId(3) not in trained and len(trained) == 9
    placed = {c: k for c, k in state.assignment.items() if c != 3}
    assert adjusted_rand_score([truth[c] for c in placed], list(placed.values())) == 1
    assert state.assignment[ClientId(3)] == state.largest_cluster()
