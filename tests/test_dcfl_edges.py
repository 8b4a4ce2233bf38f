"""DCFL at its edges: affinity propagation's options and convergence rule
against scikit-learn, and the asynchronous mode's buffers and windows worked
by hand (issue 21)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numpy.testing import assert_allclose
from sklearn.cluster import AffinityPropagation

from clusterfed.algorithms import ClientInfo, ClientUpdate
from clusterfed.algorithms.dcfl import (
    DCFL,
    DCFLState,
    affinity_clusters,
    nearest_cluster,
)
from clusterfed.types import GLOBAL, ClientId, ClusterId

# Nine points on a line in three groups of three; d = |x − y|.
LINE = np.array([0.0, 1.0, 2.0, 10.0, 11.0, 12.0, 30.0, 31.0, 32.0])
LINE_DIST = np.abs(LINE[:, None] - LINE[None, :])
THREE_GROUPS = [0, 0, 0, 1, 1, 1, 2, 2, 2]


def _iterations(dist: np.ndarray, damping: float) -> int:
    """Iterations scikit-learn's affinity propagation needs to converge on
    `dist` (median preference) when the exemplars must hold for
    7.5 / (1 − damping) iterations, as DCFL asks."""
    off = -dist[~np.eye(len(dist), dtype=bool)]
    model = AffinityPropagation(
        affinity="precomputed",
        damping=damping,
        convergence_iter=round(7.5 / (1 - damping)),
        max_iter=10_000,
        preference=float(np.median(off)),
        random_state=0,
    ).fit(-dist)
    return int(model.n_iter_)


# -- affinity propagation ---------------------------------------------------------


def test_affinity_defaults_find_the_three_groups_on_a_line() -> None:
    labels = affinity_clusters(LINE_DIST)
    assert labels is not None and labels.tolist() == THREE_GROUPS


def test_the_preference_is_in_units_of_minus_d() -> None:
    # Above every similarity (−1 is the highest): each point alone; far
    # below all of them: one cluster; −5 (between the groups' −8 and the
    # members' −1, −2): the three groups.
    assert affinity_clusters(LINE_DIST, preference=-0.5).tolist() == list(range(9))
    assert affinity_clusters(LINE_DIST, preference=-1000.0).tolist() == [0] * 9
    assert affinity_clusters(LINE_DIST, preference=-5.0).tolist() == THREE_GROUPS


def test_the_min_preference_gives_fewer_clusters_than_the_median() -> None:
    # Frey & Dueck: the smallest similarity (−32) as preference; on the line
    # the two near groups merge. Checked against scikit-learn called directly.
    labels = affinity_clusters(LINE_DIST, preference="min")
    assert labels is not None and labels.tolist() == [0, 0, 0, 0, 0, 0, 1, 1, 1]
    direct = AffinityPropagation(
        affinity="precomputed", preference=-32.0, random_state=0
    ).fit(-LINE_DIST)
    assert labels.tolist() == direct.labels_.tolist()


def test_the_median_preference_is_over_the_off_diagonal_only() -> None:
    # Points 0, 1, 2, 3, 10: the 20 off-diagonal distances are 1 ×6, 2 ×4,
    # 3 ×2, 7, 8, 9, 10 ×2 each, median 2.5. scikit-learn's own default counts
    # the five zeros on the diagonal too (median 2) and splits the four.
    points = np.array([0.0, 1.0, 2.0, 3.0, 10.0])
    dist = np.abs(points[:, None] - points[None, :])
    labels = affinity_clusters(dist)
    assert labels is not None and labels.tolist() == [0, 0, 0, 0, 1]
    assert affinity_clusters(dist, preference=-2.5).tolist() == labels.tolist()
    own_default = AffinityPropagation(affinity="precomputed", random_state=0)
    assert own_default.fit(-dist).labels_.tolist() != labels.tolist()


def test_three_points_can_form_two_clusters() -> None:
    # The window of asynchronous mode needs three clients because three
    # already show structure.
    dist = np.abs(np.array([0.0, 1.0, 10.0])[:, None] - np.array([0.0, 1.0, 10.0]))
    assert affinity_clusters(dist, preference=-2.0).tolist() == [0, 0, 1]


def test_integer_distances_are_accepted() -> None:
    labels = affinity_clusters(LINE_DIST.astype(np.int64), preference=-5.0)
    assert labels is not None and labels.tolist() == THREE_GROUPS


def test_labels_without_structure_are_integers() -> None:
    # One client, two clients, all equally far: one cluster, labels usable as
    # indices.
    for dist in (np.zeros((1, 1)), np.array([[0, 3.0], [3.0, 0]]), 1 - np.eye(3)):
        labels = affinity_clusters(dist)
        assert labels is not None
        assert np.bincount(labels).tolist() == [len(dist)]


@pytest.mark.parametrize("damping", [0.5, 0.6])
def test_convergence_needs_the_exemplars_to_hold_for_7_5_over_1_minus_damping(
    damping: float,
) -> None:
    # One iteration short of what scikit-learn needs under the rule, the
    # first try fails, and the retry (damping 0.9, four times the iterations)
    # is too short as well.
    needed = _iterations(LINE_DIST, damping)
    assert 4 * (needed - 1) < _iterations(LINE_DIST, 0.9)
    labels = affinity_clusters(LINE_DIST, damping=damping, max_iter=needed)
    assert labels is not None and labels.tolist() == THREE_GROUPS
    assert affinity_clusters(LINE_DIST, damping=damping, max_iter=needed - 1) is None


def test_a_first_try_that_does_not_converge_is_retried_at_damping_0_9() -> None:
    # At damping 0.7 the first try needs more than the limit; the retry's
    # four times the limit at damping 0.9 is just enough (and one less is not).
    retry = math.ceil(_iterations(LINE_DIST, 0.9) / 4)
    assert retry < _iterations(LINE_DIST, 0.7)
    labels = affinity_clusters(LINE_DIST, damping=0.7, max_iter=retry)
    assert labels is not None and labels.tolist() == THREE_GROUPS
    assert affinity_clusters(LINE_DIST, damping=0.7, max_iter=retry - 1) is None


# -- Eq. 6 ------------------------------------------------------------------------


def test_a_newcomer_is_placed_by_its_own_start_not_the_origin() -> None:
    # From (10, 10) the update goes +2 along x, exactly to the first model.
    base = np.array([10.0, 10.0])
    models = [np.array([12.0, 10.0]), np.array([10.0, 11.0])]
    for metric in ("complete", "euclidean", "cosine"):
        assert nearest_cluster(base, np.array([2.0, 0.0]), models, metric) == 0


def test_the_nearest_model_may_be_the_last() -> None:
    models = [np.array([1.0, 0.0]), np.array([0.0, 1.0]), np.array([-1.0, 0.0])]
    assert nearest_cluster(np.zeros(2), np.array([-1.0, 0.0]), models, "complete") == 2


def test_placement_uses_the_chosen_distance() -> None:
    # The update (10, 0) points at model A = (1, 0) but ends next to B = (10, 1).
    models = [np.array([1.0, 0.0]), np.array([10.0, 1.0])]
    delta = np.array([10.0, 0.0])
    assert nearest_cluster(np.zeros(2), delta, models, "cosine") == 0
    assert nearest_cluster(np.zeros(2), delta, models, "euclidean") == 1
    assert nearest_cluster(np.zeros(2), delta, models, "complete") == 1


# -- options ----------------------------------------------------------------------


def test_window_three_is_the_smallest_accepted() -> None:
    assert DCFL(window=3).window == 3
    for bad in (2, 4.0, True):
        with pytest.raises(
            ValueError, match=f"window must be an integer >= 3 or None, got {bad!r}"
        ):
            DCFL(window=bad)  # type: ignore[arg-type]


def test_preference_min_is_accepted_and_others_named() -> None:
    assert DCFL(preference="min").preference == "min"
    with pytest.raises(
        ValueError, match="preference must be 'median', 'min' or a number: 'mean'"
    ):
        DCFL(preference="mean")


@pytest.mark.parametrize("bad", [True, 2.5, "200"])
def test_max_iter_must_be_a_true_integer(bad: object) -> None:
    with pytest.raises(
        ValueError, match=f"max_iter must be an integer ≥ 1, got {bad!r}"
    ):
        DCFL(max_iter=bad)  # type: ignore[arg-type]


# -- asynchronous mode ----------------------------------------------------------

START = np.array([1.0, 2.0], dtype=np.float32)


def _placed(n: int, **params: object) -> tuple[DCFL, DCFLState]:
    """`n` clients present from the start, all in cluster 0 at `START`."""
    strategy = DCFL(**params)  # type: ignore[arg-type]
    state = strategy.init_state([START])
    for c in range(n):
        state = strategy.on_join(state, ClientInfo(ClientId(c), 10))
    return strategy, state


def _ok(
    client: int, cluster: int, base: np.ndarray, delta: list[float], n: int = 10
) -> ClientUpdate:
    return ClientUpdate(
        ClientId(client),
        ClusterId(cluster),
        "ok",
        np.asarray(base, np.float32),
        np.asarray(delta, np.float32),
        n,
    )


def _two_async_clusters(**params: object) -> tuple[DCFL, DCFLState]:
    """Clients 0, 1 in cluster 0 at (−1, 0); clients 2, 3 in cluster 1 at (1, 0)."""
    strategy, state = _placed(4, **params)
    models = {
        ClusterId(0): np.array([-1.0, 0.0], np.float32),
        ClusterId(1): np.array([1.0, 0.0], np.float32),
    }
    assignment = {ClientId(c): ClusterId(c // 2) for c in range(4)}
    return strategy, state.replace(models=models, assignment=assignment)


def test_by_default_three_updates_step_the_cluster_discounted_by_staleness() -> None:
    # Defaults: buffers of 3, s(τ) = (τ + 1)^−0.5, server_lr 1. The update
    # three versions old counts half: (1, 2) + ((3, 0) + (0, 6)/2 + (−3, 3))/3.
    strategy, state = _placed(4)
    rng = np.random.default_rng(0)
    arrivals = [(0, [3.0, 0.0], 0), (1, [0.0, 6.0], 3), (2, [-3.0, 3.0], 0)]
    for k, (client, delta, tau) in enumerate(arrivals):
        state, moved = strategy.absorb(state, _ok(client, 0, START, delta), tau, rng)
        if k < 2:
            assert not moved and state.buffers[ClusterId(0)].count == k + 1
            assert_allclose(state.models[0], START)
    assert moved
    assert_allclose(state.models[0], [1.0, 4.0], rtol=1e-6)
    assert not state.buffers
    # three arrivals of four placed clients: no clustering decision yet
    assert [u.client for u in state.window] == [0, 1, 2]
    assert state.dunn_index is None


def test_hinge_staleness_discounts_past_b_versions_by_default_b_4() -> None:
    # s(τ) = 1 up to τ = 4, then 1 / (0.5 (τ − 4) + 1): 2/3 at τ = 5.
    for tau, expected in ((4, [4.0, 2.0]), (5, [3.0, 2.0])):
        strategy, state = _placed(4, staleness="hinge", buffer_size=1)
        state, moved = strategy.absorb(
            state, _ok(0, 0, START, [3.0, 0.0]), tau, np.random.default_rng(0)
        )
        assert moved
        assert_allclose(state.models[0], expected, rtol=1e-6)


@pytest.mark.parametrize(
    ("weighted", "sizes", "expected"),
    [
        # plain mean whatever the counts: (1, 2) + ((3, 0) + (0, 6)) / 2
        (False, (1, 3), [2.5, 5.0]),
        # weighted: the update of 0 samples counts for nothing
        (True, (0, 10), [1.0, 8.0]),
    ],
)
def test_async_buffers_weigh_by_samples_only_when_asked(
    weighted: bool, sizes: tuple[int, int], expected: list[float]
) -> None:
    strategy, state = _placed(4, buffer_size=2, sample_weighted=weighted)
    rng = np.random.default_rng(0)
    for client, delta in ((0, [3.0, 0.0]), (1, [0.0, 6.0])):
        update = _ok(client, 0, START, delta, n=sizes[client])
        state, moved = strategy.absorb(state, update, 0, rng)
    assert moved
    assert_allclose(state.models[0], expected, rtol=1e-6)


def test_a_window_of_three_decides_at_the_third_arrival() -> None:
    strategy, state = _placed(5, window=3, buffer_size=10)
    rng = np.random.default_rng(0)
    deltas = [[1.0, 0.0], [1.01, 0.0], [-1.0, 0.02]]
    for client, delta in enumerate(deltas):
        state, moved = strategy.absorb(state, _ok(client, 0, START, delta), 0, rng)
        if client < 2:
            assert not moved and len(state.window) == client + 1
    # One cluster: the Dunn index is undefined, so affinity propagation runs;
    # the buffers of models that may be gone are emptied.
    assert moved and state.reclustered is True
    assert state.dunn_index is not None and math.isnan(state.dunn_index)
    assert state.window == () and not state.buffers
    # The next arrival is a row of its own: it did not re-cluster.
    cluster = state.assignment[ClientId(3)]
    update = _ok(3, cluster, state.models[cluster], [0.0, 1.0])
    state, moved = strategy.absorb(state, update, 0, rng)
    assert not moved and state.reclustered is False
    assert [u.client for u in state.window] == [3]


def test_a_window_counts_clients_not_arrivals() -> None:
    # Three arrivals from two clients fill a window of three but hold only
    # two clients: the window grows until a third client arrives.
    strategy, state = _placed(5, window=3, buffer_size=10)
    rng = np.random.default_rng(0)
    for client, delta in ((0, [1.0, 0.0]), (1, [-1.0, 0.0]), (0, [1.0, 0.1])):
        state, moved = strategy.absorb(state, _ok(client, 0, START, delta), 0, rng)
        assert not moved
    assert len(state.window) == 3 and state.dunn_index is None
    state, moved = strategy.absorb(state, _ok(2, 0, START, [1.0, 0.05]), 0, rng)
    assert moved and state.window == ()


def test_an_update_from_a_cluster_the_client_left_goes_in_no_buffer() -> None:
    strategy, state = _two_async_clusters(buffer_size=1)
    rng = np.random.default_rng(0)
    before = dict(state.models)
    # Client 2 is in cluster 1 now but trained cluster 0's model.
    stale = _ok(2, 0, before[ClusterId(0)], [1.0, 1.0])
    state, moved = strategy.absorb(state, stale, 0, rng)
    assert not moved and not state.buffers
    for c, model in before.items():
        assert_allclose(state.models[c], model)
    assert [u.client for u in state.window] == [2]
    # Client 0 trained its own cluster's model: with buffers of one, it steps.
    state, moved = strategy.absorb(state, _ok(0, 0, before[0], [0.5, 0.5]), 0, rng)
    assert moved
    assert_allclose(state.models[0], [-0.5, 0.5])
    assert_allclose(state.models[1], before[1])


def test_async_updates_that_cannot_count_change_nothing() -> None:
    strategy, state = _two_async_clusters(buffer_size=1)
    rng = np.random.default_rng(0)
    base = state.models[ClusterId(0)]
    delta = np.ones(2, np.float32)
    for update in (
        ClientUpdate(ClientId(0), ClusterId(0), "failed", base, delta, 10),
        ClientUpdate(ClientId(0), ClusterId(0), "ok", None, delta, 10),
        ClientUpdate(ClientId(0), ClusterId(0), "ok", base, None, 10),
    ):
        new, moved = strategy.absorb(state, update, 0, rng)
        assert new is state and not moved
    gone = strategy.on_leave(state, ClientId(1))
    new, moved = strategy.absorb(gone, _ok(1, 0, base, [1.0, 1.0]), 0, rng)
    assert new is gone and not moved


def test_an_async_newcomer_is_placed_at_its_first_arrival_and_moves_nothing() -> None:
    strategy, state = _two_async_clusters(buffer_size=1)
    state = strategy.on_join(state, ClientInfo(ClientId(9), 10, joined_round=3))
    cluster, w_g = strategy.model_for(state, ClientId(9))
    assert cluster == GLOBAL
    assert_allclose(w_g, [0.0, 0.0])
    before = dict(state.models)
    update = _ok(9, GLOBAL, w_g, [0.9, 0.0])
    state, moved = strategy.absorb(state, update, 2, np.random.default_rng(0))
    assert not moved
    assert state.assignment[ClientId(9)] == 1 and state.pending == frozenset()
    assert state.window == () and not state.buffers
    for c, model in before.items():
        assert_allclose(state.models[c], model)
