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
    DCFLDiagnostics,
    DCFLState,
    affinity_clusters,
    dunn_index,
    match_ids,
)
from clusterfed.algorithms.distances import METRICS
from clusterfed.types import GLOBAL, ClientId, ClusterId

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
    assert cluster == GLOBAL and cluster not in state.models
    assert_allclose(model, w_g, rtol=1e-6)
    plans = dcfl.plan_round(state, 4, [ClientInfo(ClientId(12), 10, 4)], rng)
    assert_allclose(plans[0].models[GLOBAL], w_g, rtol=1e-6)

    # it trains from W_G towards group 1's centre; only it reports this round
    target = state.assignment[ClientId(4)]
    end = _centres()[1] + 0.3
    update = ClientUpdate(
        ClientId(12), GLOBAL, "ok", model, (end - model).astype(np.float32), 10
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
        state, 2, [ClientUpdate(ClientId(9), GLOBAL, "failed")], _rng()
    )
    assert dcfl.model_for(new, ClientId(9))[0] == GLOBAL


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


# -- edges found by mutation testing (issue 21) ----------------------------------


def test_default_cluster_means_ignore_sample_counts() -> None:
    # Eq. 5 is a plain mean; counts weigh only with sample_weighted=True.
    dcfl = DCFL()
    state = _two_clusters(dcfl, [0, 0, 0, 1, 1, 1])
    ends = _group_ends()
    sizes = [1, 5, 30, 2, 2, 90]
    new = dcfl.aggregate(state, 3, _updates(dcfl, state, ends, sizes), _rng())
    assert new.reclustered is False
    assert_allclose(new.models[0], ends[:3].mean(axis=0), rtol=1e-5)
    assert_allclose(new.models[1], ends[3:].mean(axis=0), rtol=1e-5)


def test_sample_weighted_means_at_one_and_zero_samples() -> None:
    # Cluster 0: one sample in all, held by client 0, so its model is client
    # 0's end point. Cluster 1: no samples at all, so the plain mean.
    dcfl = DCFL(sample_weighted=True)
    state = _two_clusters(dcfl, [0, 0, 0, 1, 1, 1])
    ends = _group_ends()
    sizes = [1, 0, 0, 0, 0, 0]
    new = dcfl.aggregate(state, 3, _updates(dcfl, state, ends, sizes), _rng())
    assert new.reclustered is False
    assert_allclose(new.models[0], ends[0], rtol=1e-6)
    assert_allclose(new.models[1], ends[3:].mean(axis=0), rtol=1e-5)


def test_the_dunn_index_uses_the_chosen_distance() -> None:
    # Euclidean: ‖Bᵢ − Bⱼ‖ of the end points, worked with numpy alone.
    dcfl = DCFL(distance="euclidean")
    state = _two_clusters(dcfl, [0, 0, 0, 1, 1, 1])
    ends = _group_ends()
    new = dcfl.aggregate(state, 3, _updates(dcfl, state, ends), _rng())
    dist = np.linalg.norm(ends[:, None] - ends[None, :], axis=-1)
    between = dist[:3, 3:].min()
    within = max(dist[:3, :3].max(), dist[3:, 3:].max())
    assert new.dunn_index == pytest.approx(between / within, rel=1e-5)


def test_diagnostics_report_the_last_index_and_reclustering() -> None:
    dcfl = DCFL()
    state = _two_clusters(dcfl, [0, 0, 1, 0, 1, 1])
    assert dcfl.diagnostics(state) is None  # no round yet
    new = dcfl.aggregate(state, 3, _updates(dcfl, state, _group_ends()), _rng())
    index = new.dunn_index
    assert index is not None and 0 < index < 1
    assert dcfl.diagnostics(new) == DCFLDiagnostics(dunn_index=index, reclustered=True)
    # The clustering is right now: the next round keeps it and says so.
    again = dcfl.aggregate(new, 4, _updates(dcfl, new, _group_ends(2)), _rng())
    assert again.dunn_index is not None and again.dunn_index > 1
    assert dcfl.diagnostics(again) == DCFLDiagnostics(
        dunn_index=again.dunn_index, reclustered=False
    )
    # Infinite or undefined indices are recorded as None (JSON has neither).
    for value in (math.inf, math.nan):
        shown = dcfl.diagnostics(again.replace(dunn_index=value))
        assert shown == DCFLDiagnostics(dunn_index=None, reclustered=False)
        assert shown.record() == {"dunn_index": None, "reclustered": False}


def test_the_preference_sets_how_many_clusters_form() -> None:
    # In units of −d: above every similarity, each client is its own
    # exemplar; far below all of them, one cluster.
    for preference, clusters in ((-0.01, 12), (-1e6, 1), ("median", 3)):
        dcfl = DCFL(preference=preference)
        state = _start(dcfl)
        new = dcfl.aggregate(state, 0, _updates(dcfl, state, _planted_ends()), _rng())
        assert new.n_clusters == clusters, preference


def test_a_damping_too_heavy_for_the_iterations_never_converges() -> None:
    # At damping 0.95 the exemplars must hold for 7.5 / 0.05 = 150 iterations;
    # 30 (and the retry's 120) cannot, so the clustering stays. At 0.5 (15
    # quiet iterations) the same 30 re-cluster.
    for damping, reclusters in ((0.95, False), (0.5, True)):
        dcfl = DCFL(damping=damping, max_iter=30)
        state = _start(dcfl)
        new = dcfl.aggregate(state, 0, _updates(dcfl, state, _planted_ends()), _rng())
        assert new.reclustered is reclusters, damping


def test_no_convergence_still_moves_each_cluster_to_its_members_mean() -> None:
    dcfl = DCFL(max_iter=1)
    state = _start(dcfl)
    ends = _planted_ends()
    new = dcfl.aggregate(state, 0, _updates(dcfl, state, ends), _rng())
    assert new.reclustered is False
    assert_allclose(new.models[0], ends.mean(axis=0), rtol=1e-5, atol=1e-6)


def test_first_reclustering_numbers_clusters_from_zero_and_remembers_the_next() -> None:
    dcfl = DCFL()
    state = _start(dcfl)
    new = dcfl.aggregate(state, 0, _updates(dcfl, state, _planted_ends()), _rng())
    assert set(new.models) == {0, 1, 2}
    assert new.next_cluster == 3


def _three_ways(seed: int = 1) -> np.ndarray:
    """Clients 0–1 end near −3, 2–3 near +3, 4–5 near (+3, …, −3, …)."""
    rng = np.random.default_rng(seed)
    third = np.concatenate([np.full(DIM // 2, 3.0), np.full(DIM // 2, -3.0)])
    centres = np.stack([np.full(DIM, -3.0), np.full(DIM, 3.0), third])
    return centres[[0, 0, 1, 1, 2, 2]] + 0.1 * rng.standard_normal((6, DIM))


def _one_start(dcfl: DCFL) -> DCFLState:
    """Clients 0–2 in cluster 0, 3–5 in cluster 1, both models at the origin."""
    state = _two_clusters(dcfl, [0, 0, 0, 1, 1, 1])
    origin = np.zeros(DIM, dtype=np.float32)
    return state.replace(models={ClusterId(0): origin, ClusterId(1): origin})


def test_a_new_cluster_takes_an_id_above_every_model_even_if_next_cluster_lags() -> (
    None
):
    # Clusters 0 and 1 with next_cluster still 1: clients {0, 1} keep 0, {4, 5}
    # keep 1, and {2, 3}, split off, must not get 1 again but 2.
    dcfl = DCFL()
    state = _one_start(dcfl)
    assert state.next_cluster == 1
    new = dcfl.aggregate(state, 3, _updates(dcfl, state, _three_ways()), _rng())
    assert new.reclustered is True
    assignment = [new.assignment[ClientId(i)] for i in range(6)]
    assert assignment == [0, 0, 2, 2, 1, 1]
    assert new.next_cluster == 3


def test_a_new_cluster_never_reuses_an_id_given_before() -> None:
    # Ids 2–4 were used by clusters now gone: the split-off cluster gets 5.
    dcfl = DCFL()
    state = _one_start(dcfl).replace(next_cluster=5)
    new = dcfl.aggregate(state, 3, _updates(dcfl, state, _three_ways()), _rng())
    assert [new.assignment[ClientId(i)] for i in range(6)] == [0, 0, 5, 5, 1, 1]
    assert new.next_cluster == 6


def test_the_dunn_index_of_all_zero_distances_is_undefined() -> None:
    # min 0 over max 0: no separation to speak of, so NaN (re-cluster), not +∞.
    assert math.isnan(dunn_index(np.zeros((3, 3)), np.array([0, 0, 1])))


def test_ids_go_to_the_largest_overlap_first() -> None:
    # New cluster 1 shares two clients with old 5; it takes 5 although new
    # cluster 0 (one client of 5) comes first, and 0 gets a fresh id.
    old = [ClusterId(c) for c in [5, 5, 5, 7]]
    ids, next_id = match_ids(old, np.array([0, 1, 1, 1]), next_cluster=9)
    assert ids == [9, 5, 5, 5] and next_id == 10


def test_ids_tied_in_overlap_go_to_the_lower_old_id() -> None:
    old = [ClusterId(3), ClusterId(2)]
    ids, next_id = match_ids(old, np.array([0, 0]), next_cluster=4)
    assert ids == [2, 2] and next_id == 4


def test_an_old_id_tied_between_new_clusters_goes_to_the_lower_label() -> None:
    # Labels 1 and 0 each hold one client of old 5: label 0 keeps 5, even
    # though label 1's client comes first; label 1 gets a fresh id.
    old = [ClusterId(5), ClusterId(5)]
    ids, next_id = match_ids(old, np.array([1, 0]), next_cluster=6)
    assert ids == [6, 5] and next_id == 7


def test_match_ids_refuses_labels_and_ids_of_different_lengths() -> None:
    with pytest.raises(ValueError):
        match_ids([ClusterId(0), ClusterId(0)], np.array([0, 1, 1]), next_cluster=1)


def test_a_client_joining_in_round_one_waits_to_be_placed() -> None:
    dcfl = DCFL()
    state = dcfl.on_join(_start(dcfl, 2), ClientInfo(ClientId(7), 10, joined_round=1))
    assert ClientId(7) not in state.assignment
    assert state.pending == {ClientId(7)}


def test_a_placed_client_joining_again_late_waits_to_be_placed_again() -> None:
    dcfl = DCFL()
    state = _start(dcfl, 3)
    state = dcfl.on_join(state, ClientInfo(ClientId(1), 10, joined_round=5))
    assert ClientId(1) not in state.assignment
    assert state.pending == {ClientId(1)}
    assert dcfl.model_for(state, ClientId(1))[0] == GLOBAL


def test_a_waiting_newcomer_that_leaves_is_forgotten() -> None:
    dcfl = DCFL()
    state = dcfl.on_join(_start(dcfl, 3), ClientInfo(ClientId(9), 10, joined_round=2))
    state = dcfl.on_leave(state, ClientId(9))
    assert state.pending == frozenset()
    with pytest.raises(KeyError):
        dcfl.model_for(state, ClientId(9))


def test_a_client_never_seen_has_no_model() -> None:
    dcfl = DCFL()
    with pytest.raises(KeyError):
        dcfl.model_for(_start(dcfl, 3), ClientId(42))


def test_a_placed_newcomer_no_longer_waits() -> None:
    dcfl = DCFL()
    state = _two_clusters(dcfl, [0, 0, 0, 1, 1, 1])
    state = dcfl.on_join(state, ClientInfo(ClientId(6), 10, joined_round=3))
    _, w_g = dcfl.model_for(state, ClientId(6))
    assert w_g.dtype == np.float32  # models travel as float32
    step = (state.models[1] - w_g).astype(np.float32)
    update = ClientUpdate(ClientId(6), GLOBAL, "ok", w_g, step, 10)
    new = dcfl.aggregate(state, 3, [update], _rng())
    assert new.assignment[ClientId(6)] == 1
    assert new.pending == frozenset()


def test_when_the_last_client_leaves_the_models_stay_for_newcomers() -> None:
    dcfl = DCFL()
    state = _two_clusters(dcfl, [0, 0, 0, 1, 1, 1])
    for i in range(6):
        state = dcfl.on_leave(state, ClientId(i))
    # Cluster 0 went with client 2; cluster 1 outlives its last member.
    assert set(state.models) == {1}
    state = dcfl.on_join(state, ClientInfo(ClientId(6), 10, joined_round=4))
    cluster, w_g = dcfl.model_for(state, ClientId(6))
    assert cluster == GLOBAL
    assert_allclose(w_g, np.ones(DIM))


def test_updates_without_both_models_or_not_ok_are_ignored() -> None:
    dcfl = DCFL()
    state = _two_clusters(dcfl, [0, 0, 1, 0, 1, 1])
    base = state.models[0]
    delta = np.ones(DIM, dtype=np.float32)
    ignored = [
        ClientUpdate(ClientId(0), ClusterId(0), "failed", base, delta, 10),
        ClientUpdate(ClientId(1), ClusterId(0), "ok", None, delta, 10),
        ClientUpdate(ClientId(2), ClusterId(1), "ok", base, None, 10),
    ]
    new = dcfl.aggregate(state, 3, ignored, _rng())
    assert new == state


def test_placing_an_update_without_its_models_names_the_client() -> None:
    dcfl = DCFL()
    state = dcfl.on_join(_start(dcfl, 3), ClientInfo(ClientId(9), 10, joined_round=2))
    _, w_g = dcfl.model_for(state, ClientId(9))
    delta = np.ones(DIM, dtype=np.float32)
    for base, step in ((w_g, None), (None, delta)):
        update = ClientUpdate(ClientId(9), GLOBAL, "ok", base, step, 10)
        with pytest.raises(ValueError, match="the update of client 9 carries no model"):
            dcfl.place_newcomers(state, [update])
