"""CFL: when a cluster splits, and that the split follows the planted groups."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose

from clusterfed.algorithms import ClientInfo, ClientUpdate, ServerState, make
from clusterfed.algorithms.cfl import CFL, CFLState, bipartition
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


def test_cluster_models_move_by_the_sample_weighted_mean_delta() -> None:
    cfl = CFL()
    state = _start(cfl, 3)
    deltas = np.array([[1.0] * DIM, [0.0] * DIM, [4.0] * DIM])
    new = cfl.aggregate(state, 0, _updates(state, deltas, [10, 30, 60]), _rng())
    # by hand: (10·1 + 30·0 + 60·4) / 100 = 2.5 on top of the ones
    assert_allclose(new.models[0], np.full(DIM, 3.5), rtol=1e-6)


def test_a_planted_split_separates_the_groups_exactly() -> None:
    cfl = CFL()
    state = _start(cfl)
    deltas = _opposed()
    new = cfl.aggregate(state, 20, _updates(state, deltas), _rng())
    assert new.update_norms is not None
    mean_norm, max_norm = new.update_norms[0]
    assert mean_norm < 0.4 < 1.6 < max_norm  # the planted case meets the criteria
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


@pytest.mark.parametrize(
    "params, shown",
    [({"eps1": -1.0}, "-1.0"), ({"eps2": -0.5}, "-0.5"), ({"warmup": -2}, "-2")],
)
def test_bad_options_raise_naming_the_value(params: dict, shown: str) -> None:
    with pytest.raises(ValueError, match=shown):
        make("cfl", **params)
