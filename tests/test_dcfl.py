"""DCFL: planted clusters, the Dunn-index check, Eq. 5 means, newcomers (Eq. 6)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numpy.testing import assert_allclose

from clusterfed.algorithms import ClientInfo, ClientUpdate, ServerState, make
from clusterfed.algorithms import dcfl as dcfl_module
from clusterfed.algorithms.dcfl import (
    DCFL,
    GLOBAL_MODEL,
    DCFLState,
    affinity_clusters,
    dunn_index,
    match_ids,
)
from clusterfed.algorithms.distances import METRICS
from clusterfed.types import ClientId, ClusterId

DIM = 16
GROUPS = [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]


def _centres() -> np.ndarray:
    return np.random.default_rng(11).standard_normal((3, DIM)) * 2


def _rng() -> np.random.Generator:
    return np.random.default_rng(0)


def _start(
    strategy: DCFL, n: int = len(GROUPS), initial: np.ndarray | None = None
) -> DCFLState:
    if initial is None:
        initial = np.zeros(DIM, dtype=np.float32)
    state = strategy.init_state([initial])
    for i in range(n):
        state = strategy.on_join(state, ClientInfo(ClientId(i), n_train=10 + i))
    return state


def _updates(
    strategy: DCFL,
    state: ServerState,
    ends: np.ndarray,
    n_samples: list[int] | None = None,
) -> list[ClientUpdate]:
    """Each client trains from the model it is sent and ends at `ends[i]`."""
    updates = []
    for i, end in enumerate(ends):
        cluster, base = strategy.model_for(state, ClientId(i))
        delta = (end - base).astype(np.float32)
        n = 10 if n_samples is None else n_samples[i]
        updates.append(ClientUpdate(ClientId(i), cluster, "ok", base, delta, n, 1.0))
    return updates


def _planted_ends(seed: int = 0, noise: float = 0.1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return _centres()[GROUPS] + noise * rng.standard_normal((len(GROUPS), DIM))


def _partition(state: ServerState, n: int = len(GROUPS)) -> set[frozenset[int]]:
    found: dict[ClusterId, set[int]] = {}
    for i in range(n):
        found.setdefault(state.assignment[ClientId(i)], set()).add(i)
    return {frozenset(members) for members in found.values()}


PLANTED = {frozenset(range(0, 4)), frozenset(range(4, 8)), frozenset(range(8, 12))}


@pytest.mark.parametrize("metric", METRICS)
def test_affinity_propagation_recovers_planted_groups(metric: str) -> None:
    dcfl = DCFL(distance=metric)
    state = _start(dcfl)
    new = dcfl.aggregate(state, 0, _updates(dcfl, state, _planted_ends()), _rng())
    assert _partition(new) == PLANTED
    assert new.reclustered is True  # one cluster always re-clusters
    assert set(new.models) == set(new.assignment.values())
    assert 0 in new.models  # the largest overlap keeps the old id


def test_new_cluster_models_are_the_mean_of_member_models() -> None:
    dcfl = DCFL()
    state = _start(dcfl)
    ends = _planted_ends()
    new = dcfl.aggregate(state, 0, _updates(dcfl, state, ends), _rng())
    for members in PLANTED:
        cluster = new.assignment[ClientId(min(members))]
        assert_allclose(
            new.models[cluster], ends[sorted(members)].mean(axis=0), rtol=1e-5
        )
        assert new.models[cluster].dtype == np.float32


def test_sample_weighted_means_weight_by_samples() -> None:
    dcfl = DCFL(sample_weighted=True)
    state = _start(dcfl)
    ends = _planted_ends()
    sizes = [1, 2, 3, 4] * 3
    new = dcfl.aggregate(state, 0, _updates(dcfl, state, ends, sizes), _rng())
    cluster = new.assignment[ClientId(0)]
    expected = (ends[:4] * np.array([1, 2, 3, 4])[:, None]).sum(axis=0) / 10
    assert_allclose(new.models[cluster], expected, rtol=1e-5)


def _two_clusters(dcfl: DCFL, groups: list[int]) -> DCFLState:
    """Six clients in clusters 0 and 1 as `groups` says, models apart."""
    state = _start(dcfl, n=6)
    models = {
        ClusterId(0): np.full(DIM, -1.0, dtype=np.float32),
        ClusterId(1): np.full(DIM, 1.0, dtype=np.float32),
    }
    assignment = {ClientId(i): ClusterId(g) for i, g in enumerate(groups)}
    return state.replace(models=models, assignment=assignment)


def _group_ends(seed: int = 1) -> np.ndarray:
    """Clients 0–2 end near −3, clients 3–5 near +3."""
    rng = np.random.default_rng(seed)
    centres = np.array([-3.0, -3.0, -3.0, 3.0, 3.0, 3.0])[:, None]
    return centres + 0.1 * rng.standard_normal((6, DIM))


def test_dunn_index_above_one_keeps_the_clustering() -> None:
    dcfl = DCFL()
    state = _two_clusters(dcfl, [0, 0, 0, 1, 1, 1])
    ends = _group_ends()
    new = dcfl.aggregate(state, 3, _updates(dcfl, state, ends), _rng())
    assert new.dunn_index is not None and new.dunn_index > 1
    assert new.reclustered is False
    assert new.assignment == state.assignment
    # Algorithm 1, line 17: each cluster model is its members' mean model
    assert_allclose(new.models[0], ends[:3].mean(axis=0), rtol=1e-5)
    assert_allclose(new.models[1], ends[3:].mean(axis=0), rtol=1e-5)


def test_dunn_index_below_one_triggers_reclustering() -> None:
    dcfl = DCFL()
    # clients 2 and 3 sit in each other's cluster
    state = _two_clusters(dcfl, [0, 0, 1, 0, 1, 1])
    ends = _group_ends()
    new = dcfl.aggregate(state, 3, _updates(dcfl, state, ends), _rng())
    assert new.dunn_index is not None and new.dunn_index < 1
    assert new.reclustered is True
    assert _partition(new, 6) == {frozenset({0, 1, 2}), frozenset({3, 4, 5})}
    # the ids follow the majority of each old cluster
    assert new.assignment[ClientId(0)] == 0 and new.assignment[ClientId(5)] == 1
    assert_allclose(new.models[0], ends[:3].mean(axis=0), rtol=1e-5)
    assert_allclose(new.models[1], ends[3:].mean(axis=0), rtol=1e-5)


def test_dunn_index_by_hand() -> None:
    points = np.array([0.0, 1.0, 5.0, 7.0])
    dist = np.abs(points[:, None] - points[None, :])
    # min between {0,1} and {5,7} is 4 (1→5); max within is 2 (5→7)
    assert dunn_index(dist, np.array([0, 0, 1, 1])) == pytest.approx(2.0)
    # {0,5} and {1,7}: min between is 1 (0→1); max within is 6 (1→7)
    assert dunn_index(dist, np.array([0, 1, 0, 1])) == pytest.approx(1 / 6)
    assert math.isnan(dunn_index(dist, np.array([0, 0, 0, 0])))  # one cluster
    assert math.isnan(dunn_index(dist, np.array([0, 1, 2, 3])))  # no pair within
    assert (
        dunn_index(np.array([[0, 0, 1], [0, 0, 1], [1, 1, 0.0]]), np.array([0, 0, 1]))
        == math.inf
    )


def test_ids_survive_relabelling_and_new_clusters_get_fresh_ids() -> None:
    old = [ClusterId(c) for c in [4, 4, 7, 7, 7]]
    ids, next_id = match_ids(old, np.array([1, 1, 0, 0, 2]), next_cluster=9)
    assert ids == [4, 4, 7, 7, 9] and next_id == 10


def test_a_newcomer_trains_from_the_global_model_and_joins_the_nearest_cluster() -> (
    None
):
    dcfl = DCFL()
    rng = np.random.default_rng(0)
    state = _start(dcfl)
    state = dcfl.aggregate(state, 0, _updates(dcfl, state, _planted_ends()), rng)
    state = dcfl.on_join(state, ClientInfo(ClientId(12), n_train=10, joined_round=4))
    assert ClientId(12) not in state.assignment
    w_g = np.mean([state.models[c] for c in sorted(state.models)], axis=0)
    cluster, model = dcfl.model_for(state, ClientId(12))
    assert cluster == GLOBAL_MODEL and cluster not in state.models
    assert_allclose(model, w_g, rtol=1e-6)
    plans = dcfl.plan_round(state, 4, [ClientInfo(ClientId(12), 10, 4)], rng)
    assert_allclose(plans[0].models[GLOBAL_MODEL], w_g, rtol=1e-6)

    # it trains from W_G towards group 1's centre; only it reports this round
    target = state.assignment[ClientId(4)]
    end = _centres()[1] + 0.3
    update = ClientUpdate(
        ClientId(12), GLOBAL_MODEL, "ok", model, (end - model).astype(np.float32), 10
    )
    new = dcfl.aggregate(state, 4, [update], rng)
    assert new.assignment[ClientId(12)] == target
    assert dcfl.model_for(new, ClientId(12))[0] == target
    for c, weights in state.models.items():  # placing it changes no model
        np.testing.assert_array_equal(new.models[c], weights)


def test_clients_present_from_the_start_join_cluster_zero() -> None:
    dcfl = DCFL()
    state = dcfl.on_join(_start(dcfl, 2), ClientInfo(ClientId(5), 10, joined_round=0))
    assert state.assignment[ClientId(5)] == 0


def test_a_failed_newcomer_stays_on_the_global_model() -> None:
    dcfl = DCFL()
    state = dcfl.on_join(_start(dcfl, 3), ClientInfo(ClientId(9), 10, joined_round=2))
    new = dcfl.aggregate(
        state, 2, [ClientUpdate(ClientId(9), GLOBAL_MODEL, "failed")], _rng()
    )
    assert dcfl.model_for(new, ClientId(9))[0] == GLOBAL_MODEL


def test_a_cluster_left_empty_is_dropped() -> None:
    dcfl = DCFL()
    state = _two_clusters(dcfl, [0, 0, 0, 0, 0, 1])
    state = dcfl.on_leave(state, ClientId(5))
    assert set(state.models) == {0}


def test_one_or_two_clients_form_one_cluster() -> None:
    assert affinity_clusters(np.zeros((1, 1))).tolist() == [0]
    assert affinity_clusters(np.array([[0.0, 9.0], [9.0, 0.0]])).tolist() == [0, 0]
    dcfl = DCFL()
    state = _start(dcfl, 2)
    ends = np.stack([np.full(DIM, -5.0), np.full(DIM, 5.0)])
    new = dcfl.aggregate(state, 0, _updates(dcfl, state, ends), _rng())
    assert new.assignment == {0: 0, 1: 0}


def test_affinity_propagation_that_does_not_converge_keeps_the_clustering() -> None:
    dcfl = DCFL(max_iter=1)
    state = _start(dcfl)
    new = dcfl.aggregate(state, 0, _updates(dcfl, state, _planted_ends()), _rng())
    assert new.assignment == state.assignment
    assert new.reclustered is False


@pytest.mark.parametrize(
    "params, shown",
    [
        ({"distance": "manhattan"}, "manhattan"),
        ({"damping": 0.3}, "0.3"),
        ({"damping": 1.0}, "1.0"),
        ({"max_iter": 0}, "0"),
        ({"preference": float("nan")}, "nan"),
    ],
)
def test_bad_options_raise_naming_the_value(params: dict, shown: str) -> None:
    with pytest.raises(ValueError, match=shown):
        make("dcfl", **params)


@pytest.mark.parametrize(("index", "reclusters"), [(1.0, False), (0.999, True)])
def test_a_dunn_index_of_exactly_one_keeps_the_clustering(
    monkeypatch: pytest.MonkeyPatch, index: float, reclusters: bool
) -> None:
    # Algorithm 1 re-clusters only when the index is below 1; at exactly 1
    # the clusters stand and affinity propagation draws nothing.
    monkeypatch.setattr(dcfl_module, "dunn_index", lambda dist, labels: index)
    dcfl = DCFL()
    state = _two_clusters(dcfl, [0, 0, 1, 0, 1, 1])
    rng = _rng()
    before = rng.bit_generator.state
    new = dcfl.aggregate(state, 3, _updates(dcfl, state, _group_ends()), rng)
    assert new.dunn_index == index
    assert new.reclustered is reclusters
    assert (new.assignment == state.assignment) is not reclusters
    assert (rng.bit_generator.state == before) is not reclusters
