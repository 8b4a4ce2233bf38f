"""CFL: when a cluster splits, and that the split follows the planted groups."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose

from clusterfed.algorithms import ClientInfo, ClientUpdate, ServerState, make
from clusterfed.algorithms.cfl import (
    CFL,
    CFLSplit,
    CFLState,
    CFLThresholds,
    Split,
    UpdateNorms,
    bipartition,
)
from clusterfed.types import ClientId, ClusterId

DIM = 10


def _rng() -> np.random.Generator:
    return np.random.default_rng(0)


def _start(cfl: CFL, n: int = 6) -> CFLState:
    state = cfl.init_state([np.ones(DIM, dtype=np.float32)])
    for i in range(n):
        state = cfl.on_join(state, ClientInfo(ClientId(i), n_train=10))
    return state


def _updates(
    state: ServerState, deltas: np.ndarray, n_samples: list[int] | None = None
) -> list[ClientUpdate]:
    updates = []
    for i, delta in enumerate(deltas):
        cluster = state.assignment[ClientId(i)]
        n = 10 if n_samples is None else n_samples[i]
        updates.append(
            ClientUpdate(
                ClientId(i),
                cluster,
                "ok",
                state.models[cluster],
                np.asarray(delta, dtype=np.float32),
                n,
                1.0,
            )
        )
    return updates


def _opposed(scale: float = 2.0, n: int = 6) -> np.ndarray:
    """Even clients pull along +v, odd ones along −v: the mean nearly cancels."""
    rng = np.random.default_rng(4)
    v = np.zeros(DIM)
    v[0] = 1.0
    signs = np.array([1.0 if i % 2 == 0 else -1.0 for i in range(n)])[:, None]
    return scale * signs * v + 0.05 * rng.standard_normal((n, DIM))


def test_cluster_models_move_by_the_plain_mean_delta_by_default() -> None:
    cfl = CFL()
    state = _start(cfl, 3)
    deltas = np.array([[1.0] * DIM, [0.0] * DIM, [4.0] * DIM])
    new = cfl.aggregate(state, 0, _updates(state, deltas, [10, 30, 60]), _rng())
    # by hand, the reference's mean: (1 + 0 + 4) / 3 on top of the ones
    assert_allclose(new.models[0], np.full(DIM, 1 + 5 / 3), rtol=1e-6)
    assert new.update_norms is not None
    assert_allclose(new.update_norms[0].mean, 5 / 3 * np.sqrt(DIM), rtol=1e-6)


def test_cluster_models_move_by_the_sample_weighted_mean_delta() -> None:
    cfl = CFL(mean="weighted")
    state = _start(cfl, 3)
    deltas = np.array([[1.0] * DIM, [0.0] * DIM, [4.0] * DIM])
    new = cfl.aggregate(state, 0, _updates(state, deltas, [10, 30, 60]), _rng())
    # by hand: (10·1 + 30·0 + 60·4) / 100 = 2.5 on top of the ones
    assert_allclose(new.models[0], np.full(DIM, 3.5), rtol=1e-6)
    assert new.update_norms is not None
    assert_allclose(new.update_norms[0].mean, 2.5 * np.sqrt(DIM), rtol=1e-6)


def test_the_mean_rule_decides_the_eps1_test_too() -> None:
    # Plain, two clients along +v and two along −v cancel exactly (a split);
    # weighted, the light −v client hardly counts and the mean update is
    # (10 − 10 + 10 − 1)·v / 31, above ε1 (no split).
    v = np.zeros(DIM)
    v[0] = 2.0
    deltas = np.array([v, -v, v, -v])
    counts = [10, 10, 10, 1]
    plain, weighted = CFL(), CFL(mean="weighted")
    state = _start(plain, 4)
    after = plain.aggregate(state, 20, _updates(state, deltas, counts), _rng())
    assert set(after.assignment.values()) == {0, 1}
    after = weighted.aggregate(state, 20, _updates(state, deltas, counts), _rng())
    assert set(after.assignment.values()) == {0}
    assert after.update_norms is not None
    assert_allclose(after.update_norms[0].mean, 2.0 * 9 / 31, rtol=1e-6)


def test_a_planted_split_separates_the_groups_exactly() -> None:
    cfl = CFL()
    state = _start(cfl)
    deltas = _opposed()
    new = cfl.aggregate(state, 20, _updates(state, deltas), _rng())
    assert new.update_norms is not None
    norms = new.update_norms[0]
    assert norms.mean < 0.4 < 1.6 < norms.max  # the planted case meets the criteria
    assert {c: new.assignment[ClientId(c)] for c in range(6)} == {
        0: 0,
        1: 1,
        2: 0,
        3: 1,
        4: 0,
        5: 1,
    }
    # both halves start from the cluster's model after this round's update
    expected = state.models[0] + deltas.astype(np.float32).mean(axis=0)
    assert_allclose(new.models[0], expected, rtol=1e-6)
    np.testing.assert_array_equal(new.models[1], new.models[0])
    assert new.models[1] is not new.models[0]


def test_no_split_before_warmup() -> None:
    cfl = CFL()
    state = _start(cfl)
    new = cfl.aggregate(state, 19, _updates(state, _opposed()), _rng())
    assert set(new.assignment.values()) == {0}
    assert set(
        make("cfl", warmup=5)
        .aggregate(state, 5, _updates(state, _opposed()), _rng())
        .assignment.values()
    ) == {0, 1}


@pytest.mark.parametrize(
    "deltas",
    [
        np.full((6, DIM), 1.0),  # all agree: the mean update is large
        _opposed(scale=0.5),  # the clients barely move: no update is large
    ],
    ids=["large-mean", "small-max"],
)
def test_no_split_when_the_criteria_do_not_hold(deltas: np.ndarray) -> None:
    cfl = CFL()
    state = _start(cfl)
    new = cfl.aggregate(state, 50, _updates(state, deltas), _rng())
    assert set(new.assignment.values()) == {0}
    assert set(new.models) == {0}


def test_clusters_of_two_clients_never_split() -> None:
    cfl = CFL()
    state = _start(cfl, 2)
    new = cfl.aggregate(state, 100, _updates(state, _opposed(n=2)), _rng())
    assert set(new.assignment.values()) == {0}
    # six members, but only two reported: still no split
    state = _start(cfl, 6)
    new = cfl.aggregate(state, 100, _updates(state, _opposed(n=2)), _rng())
    assert set(new.assignment.values()) == {0}


def test_members_that_did_not_report_keep_the_old_cluster() -> None:
    cfl = CFL()
    state = _start(cfl, 8)
    updates = _updates(state, _opposed(n=6))
    updates.append(ClientUpdate(ClientId(7), ClusterId(0), "failed", reason="down"))
    new = cfl.aggregate(state, 20, updates, _rng())
    assert new.assignment[ClientId(6)] == 0 and new.assignment[ClientId(7)] == 0
    assert new.assignment[ClientId(1)] == 1


def test_a_second_split_takes_a_fresh_id() -> None:
    cfl = CFL()
    state = _start(cfl)
    state = cfl.aggregate(state, 20, _updates(state, _opposed()), _rng())
    # now the evens (cluster 0) split again, along a second direction
    w = np.zeros(DIM)
    w[1] = 2.0
    deltas = np.zeros((6, DIM))
    deltas[[0, 4]] = w
    deltas[2] = -2 * w
    new = cfl.aggregate(state, 21, _updates(state, deltas), _rng())
    assert new.assignment[ClientId(2)] == 2
    assert {new.assignment[ClientId(c)] for c in (0, 4)} == {0}
    assert set(new.models) == {0, 1, 2}


def test_bipartition_splits_opposite_updates() -> None:
    first, second = bipartition(_opposed())
    assert first == [0, 2, 4] and second == [1, 3, 5]


def test_a_split_is_recorded_with_its_round() -> None:
    cfl = CFL(warmup=5)
    state = _start(cfl)
    assert cfl.diagnostics(state) is None  # nothing decided yet
    state = cfl.aggregate(state, 4, _updates(state, _opposed()), _rng())
    assert state.splits == ()
    state = cfl.aggregate(state, 7, _updates(state, _opposed()), _rng())
    assert state.splits == (Split(7, ClusterId(0), ClusterId(1), 3, 3),)
    found = cfl.diagnostics(state)
    assert found is not None
    assert found.splits == (
        CFLSplit(
            round=7, cluster=ClusterId(0), new_cluster=ClusterId(1), stayed=3, moved=3
        ),
    )
    assert found.thresholds == CFLThresholds(eps1=0.4, eps2=1.6)
    assert found.summary() == {
        "splits": [
            {"round": 7, "cluster": 0, "new_cluster": 1, "stayed": 3, "moved": 3}
        ]
    }


# -- relative thresholds ----------------------------------------------------------


def _warm(cfl: CFL, scale: float, rounds: int = 2) -> CFLState:
    """`rounds` warm-up rounds in which every client moves by `scale` along
    one shared direction (so no client disagrees yet)."""
    state = _start(cfl)
    agree = np.zeros((6, DIM))
    agree[:, 2] = scale
    for r in range(rounds):
        state = cfl.aggregate(state, r, _updates(state, agree), _rng())
    return state


def test_relative_thresholds_are_multiples_of_the_warmup_client_norm() -> None:
    cfl = CFL(thresholds="relative", warmup=2, eps1=0.25, eps2=1.0)
    state = _warm(cfl, scale=8.0)
    assert state.warmup_norms == (8.0, 8.0)
    assert cfl.norm_thresholds(state) == (2.0, 8.0)  # 0.25·8, 1.0·8
    found = cfl.diagnostics(state)
    assert found is not None
    assert found.thresholds == CFLThresholds(eps1=2.0, eps2=8.0)
    # After the warm-up the reference stays put.
    state = cfl.aggregate(state, 2, _updates(state, _opposed(scale=2.0)), _rng())
    assert state.warmup_norms == (8.0, 8.0)


@pytest.mark.parametrize("scale", [0.01, 1.0, 100.0])
def test_relative_thresholds_decide_alike_at_every_scale(scale: float) -> None:
    # Opposed updates of twice the warm-up step: split, however large a step.
    cfl = CFL(thresholds="relative", warmup=2)
    state = _warm(cfl, scale=scale)
    opposed = scale * _opposed(scale=2.0)  # the noise scales too
    split = cfl.aggregate(state, 2, _updates(state, opposed), _rng())
    assert split.splits == (Split(2, ClusterId(0), ClusterId(1), 3, 3),)
    # Opposed updates of a tenth of it: no client is still moving far.
    small = cfl.aggregate(state, 2, _updates(state, 0.05 * opposed), _rng())
    assert small.splits == () and set(small.assignment.values()) == {0}


def test_absolute_thresholds_miss_a_split_that_relative_ones_see() -> None:
    # Updates 100 times the reference CNN's: the cancelling mean is still
    # above 0.4, so the absolute rule never splits; the relative one does.
    absolute = CFL(warmup=2)
    relative = CFL(thresholds="relative", warmup=2)
    opposed = 100.0 * _opposed(scale=2.0)
    for cfl, parts in ((absolute, {0}), (relative, {0, 1})):
        state = _warm(cfl, scale=100.0)
        state = cfl.aggregate(state, 2, _updates(state, opposed), _rng())
        assert set(state.assignment.values()) == parts


def test_relative_thresholds_wait_for_a_reference() -> None:
    # Every warm-up update failed: no reference, so no split and no thresholds.
    cfl = CFL(thresholds="relative", warmup=1)
    state = _start(cfl)
    failed = [
        ClientUpdate(ClientId(i), ClusterId(0), "failed", reason="down")
        for i in range(6)
    ]
    state = cfl.aggregate(state, 0, failed, _rng())
    state = cfl.aggregate(state, 1, _updates(state, _opposed()), _rng())
    assert state.warmup_norms == () and state.splits == ()
    found = cfl.diagnostics(state)
    assert found is not None and found.thresholds is None
    assert found.record()["thresholds"] is None  # written as null, not left out


def test_defaults_follow_the_threshold_rule() -> None:
    assert (CFL().eps1, CFL().eps2) == (0.4, 1.6)
    relative = CFL(thresholds="relative")
    assert (relative.eps1, relative.eps2) == (0.25, 1.0)
    assert CFL(thresholds="relative", eps1=0.1).eps1 == 0.1


@pytest.mark.parametrize(
    "params, shown",
    [
        ({"eps1": -1.0}, "-1.0"),
        ({"eps2": -0.5}, "-0.5"),
        ({"warmup": -2}, "-2"),
        ({"thresholds": "scaled"}, "'scaled'"),
        ({"mean": "median"}, "'median'"),
        ({"thresholds": "relative", "warmup": 0}, "warmup must be ≥ 1, got 0"),
    ],
)
def test_bad_options_raise_naming_the_value(params: dict, shown: str) -> None:
    with pytest.raises(ValueError, match=shown):
        make("cfl", **params)


# -- edges found by mutation testing (issue 21) ------------------------------------


def test_thresholds_of_zero_are_accepted() -> None:
    cfl = CFL(eps1=0.0, eps2=0.0)
    assert (cfl.eps1, cfl.eps2) == (0.0, 0.0)
    assert CFL(eps2=0.5).eps2 == 0.5


@pytest.mark.parametrize("warmup", [True, 2.5, "3"])
def test_a_warmup_that_is_not_an_integer_is_refused(warmup: object) -> None:
    with pytest.raises(ValueError) as caught:
        CFL(warmup=warmup)  # type: ignore[arg-type]
    assert str(caught.value) == f"warmup must be an integer ≥ 0, got {warmup!r}"


def test_relative_thresholds_without_warmup_say_why() -> None:
    with pytest.raises(ValueError) as caught:
        CFL(thresholds="relative", warmup=0)
    assert str(caught.value) == (
        "relative thresholds measure their reference in the warm-up rounds:"
        " warmup must be ≥ 1, got 0"
    )


def test_the_scenario_aggregator_moves_the_cluster_model() -> None:
    from clusterfed.algorithms.robust import Median

    cfl = CFL()
    cfl.aggregator = Median()
    state = _start(cfl, 3)
    deltas = np.array([[0.0] * DIM, [1.0] * DIM, [100.0] * DIM])
    new = cfl.aggregate(state, 0, _updates(state, deltas), _rng())
    # the coordinate-wise median of the three deltas, 1, on top of the ones
    assert_allclose(new.models[0], np.full(DIM, 2.0))


def test_diagnostics_report_each_clusters_norms_and_thresholds() -> None:
    cfl = CFL()
    state = _start(cfl, 3)
    deltas = np.zeros((3, DIM))
    deltas[:, 0] = [3.0, 0.0, 0.0]
    deltas[2, 1] = 4.0
    state = cfl.aggregate(state, 0, _updates(state, deltas), _rng())
    # by hand: mean update (1, 4/3), norm 5/3; client norms 3, 0, 4
    found = cfl.diagnostics(state)
    assert found is not None
    assert found.update_norms.keys() == {ClusterId(0)}
    norms = found.update_norms[ClusterId(0)]
    assert (norms.mean, norms.max, norms.clients) == pytest.approx((5 / 3, 4.0, 7 / 3))
    assert found.thresholds == CFLThresholds(eps1=0.4, eps2=1.6)
    assert found.splits == ()
    assert list(found.record()) == ["update_norms", "thresholds", "splits"]
    assert list(found.record()["update_norms"]) == ["0"]


def test_a_late_update_counts_neither_in_the_model_nor_in_the_split() -> None:
    # Two accepted updates ±2v and a late one of 0: with the late one, three
    # members whose mean is 0 and whose largest update is 2 would split.
    cfl = CFL()
    state = _start(cfl, 3)
    v = np.zeros(DIM, dtype=np.float32)
    v[0] = 2.0
    updates = _updates(state, np.stack([v, -v]))
    updates.append(
        ClientUpdate(ClientId(2), ClusterId(0), "late", state.models[0], 0 * v, 10)
    )
    new = cfl.aggregate(state, 20, updates, _rng())
    assert new.splits == () and set(new.assignment.values()) == {0}
    assert new.update_norms == {0: UpdateNorms(mean=0.0, max=2.0, clients=2.0)}


def test_an_update_of_no_samples_is_not_a_member() -> None:
    # Same as above with the third update accepted but of 0 samples.
    cfl = CFL()
    state = _start(cfl, 3)
    v = np.zeros(DIM)
    v[0] = 2.0
    new = cfl.aggregate(
        state, 20, _updates(state, np.stack([v, -v, 0 * v]), [10, 10, 0]), _rng()
    )
    assert new.splits == () and set(new.assignment.values()) == {0}
    assert new.update_norms == {0: UpdateNorms(mean=0.0, max=2.0, clients=2.0)}


def test_a_mean_update_exactly_at_eps1_does_not_split() -> None:
    # "below ε1": deltas ±… along v whose mean is exactly 0.5·v, ‖·‖ = 0.5
    v = np.zeros(DIM)
    v[0] = 1.0
    deltas = np.stack([2.5 * v, -1.5 * v, 2.5 * v, -1.5 * v])
    for eps1, parts in ((0.5, {0}), (0.5 + 1e-9, {0, 1})):
        cfl = CFL(eps1=eps1)
        state = _start(cfl, 4)
        new = cfl.aggregate(state, 20, _updates(state, deltas), _rng())
        assert set(new.assignment.values()) == parts


def test_a_largest_update_exactly_at_eps2_does_not_split() -> None:
    # "above ε2": opposed deltas of norm exactly 2
    v = np.zeros(DIM)
    v[0] = 2.0
    deltas = np.stack([v, -v, v, -v])
    for eps2, parts in ((2.0, {0}), (2.0 - 1e-9, {0, 1})):
        cfl = CFL(eps2=eps2)
        state = _start(cfl, 4)
        new = cfl.aggregate(state, 20, _updates(state, deltas), _rng())
        assert set(new.assignment.values()) == parts


def _two_clusters(cfl: CFL) -> CFLState:
    """Six clients split into evens (cluster 0) and odds (cluster 1)."""
    state = _start(cfl)
    state = cfl.aggregate(state, 20, _updates(state, _opposed()), _rng())
    assert state.splits == (Split(20, ClusterId(0), ClusterId(1), 3, 3),)
    assert state.next_cluster == 2  # the lowest id the next split may take
    return state


def test_a_cluster_that_does_not_split_does_not_stop_the_next_one() -> None:
    cfl = CFL()
    state = _two_clusters(cfl)
    # cluster 0 (evens) agrees, cluster 1 (odds) pulls apart along w
    w = np.zeros(DIM)
    w[1] = 2.0
    deltas = np.zeros((6, DIM))
    deltas[[0, 2, 4], 2] = 1.0
    deltas[[1, 5]] = w
    deltas[3] = -2 * w
    new = cfl.aggregate(state, 21, _updates(state, deltas), _rng())
    assert new.splits[1:] == (Split(21, ClusterId(1), ClusterId(2), 2, 1),)
    assert [new.assignment[ClientId(c)] for c in range(6)] == [0, 1, 0, 2, 0, 1]


def test_two_clusters_splitting_in_one_round_take_two_fresh_ids() -> None:
    cfl = CFL()
    state = _two_clusters(cfl)
    w = np.zeros(DIM)
    w[1] = 2.0
    deltas = np.zeros((6, DIM))
    deltas[[0, 4, 1, 5]] = w
    deltas[[2, 3]] = -2 * w
    new = cfl.aggregate(state, 21, _updates(state, deltas), _rng())
    assert new.splits[1:] == (
        Split(21, ClusterId(0), ClusterId(2), 2, 1),
        Split(21, ClusterId(1), ClusterId(3), 2, 1),
    )
    assert [new.assignment[ClientId(c)] for c in range(6)] == [0, 1, 2, 3, 0, 1]
    assert set(new.models) == {0, 1, 2, 3} and new.next_cluster == 4


def _at_angles(*degrees: float) -> np.ndarray:
    radians = np.radians(degrees)
    return np.stack([np.cos(radians), np.sin(radians)], axis=1)


@pytest.mark.parametrize(
    ("degrees", "first"),
    [
        # every cosine negative: 0° and 250° are 110° apart, the nearest pair
        ((0, 130, 250), [0, 2]),
        # every cosine positive: 50° and 80° are the nearest pair
        ((0, 50, 80), [0]),
    ],
)
def test_bipartition_sets_the_most_similar_pair_apart(
    degrees: tuple[float, ...], first: list[int]
) -> None:
    # complete linkage on three updates: the nearest pair, and the third
    found = bipartition(_at_angles(*degrees))
    assert found == (first, [i for i in range(3) if i not in first])


def test_bipartition_is_complete_linkage_on_the_cosine_distance() -> None:
    # against scipy's complete linkage, which computes the cosine itself
    from scipy.cluster.hierarchy import fcluster, linkage

    rng = np.random.default_rng(0)
    for _ in range(30):
        deltas = rng.standard_normal((int(rng.integers(4, 8)), 3))
        labels = fcluster(
            linkage(deltas, method="complete", metric="cosine"), 2, "maxclust"
        )
        first = [i for i, label in enumerate(labels) if label == labels[0]]
        second = [i for i, label in enumerate(labels) if label != labels[0]]
        assert bipartition(deltas) == (first, second)
