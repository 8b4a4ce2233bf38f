"""FedAC / FedACP: the split trigger, the bipartition, FedACP's sampled view."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numpy.testing import assert_allclose

from clusterfed.algorithms import ClientInfo, ClientUpdate, Strategy, make
from clusterfed.algorithms.fedac import (
    FedAC,
    FedACP,
    FedACState,
    bipartition,
    cosines_to_update,
    mean_loss,
    should_split,
    split_cluster,
    updates_diverge,
)
from clusterfed.algorithms.robust import Median
from clusterfed.types import ClientId, ClusterId

DIM = 8
U = np.eye(DIM, dtype=np.float32)[0]


def _update(
    client: int,
    delta: np.ndarray,
    loss: float | None = 1.0,
    cluster: int = 0,
    n: int = 10,
    base: np.ndarray | None = None,
) -> ClientUpdate:
    base = np.zeros(DIM, dtype=np.float32) if base is None else base
    return ClientUpdate(
        ClientId(client),
        ClusterId(cluster),
        "ok",
        base,
        delta.astype(np.float32),
        n,
        loss,
    )


def _group_deltas(signs: list[int], seed: int = 0) -> list[np.ndarray]:
    """Deltas along +U or −U (by sign) with a little noise."""
    rng = np.random.default_rng(seed)
    return [s * U + 0.1 * rng.standard_normal(DIM) for s in signs]


def _rng() -> np.random.Generator:
    return np.random.default_rng(0)


def _joined(strategy: Strategy[FedACState], n: int) -> FedACState:
    state = strategy.init_state([np.ones(DIM, dtype=np.float32)])
    for i in range(n):
        state = strategy.on_join(state, ClientInfo(ClientId(i), n_train=10))
    return state


def _round(
    strategy: Strategy[FedACState],
    state: FedACState,
    round: int,
    deltas: dict[int, np.ndarray],
    loss: float,
) -> FedACState:
    updates = [
        _update(
            c,
            d,
            loss,
            cluster=state.assignment[ClientId(c)],
            base=state.models[state.assignment[ClientId(c)]],
        )
        for c, d in deltas.items()
    ]
    return strategy.aggregate(state, round, updates, _rng())


def _clusters(state: FedACState, n: int) -> list[int]:
    return [state.assignment[ClientId(i)] for i in range(n)]


# -- the trigger -----------------------------------------------------------------

OPPOSED = [1, 1, 1, 1, -1, -1]  # the minority points against the cluster update


def test_the_trigger_fires_on_opposed_groups_once_the_loss_settles() -> None:
    updates = [_update(i, d) for i, d in enumerate(_group_deltas(OPPOSED))]
    assert should_split(updates, 0.001, alpha=0.02, beta=90)
    assert should_split(updates, -0.001, alpha=0.02, beta=90)


def test_the_trigger_does_not_fire_on_iid_like_updates() -> None:
    updates = [_update(i, d) for i, d in enumerate(_group_deltas([1] * 6))]
    assert not should_split(updates, 0.0, alpha=0.02, beta=90)


def test_the_trigger_does_not_fire_while_the_loss_still_changes() -> None:
    updates = [_update(i, d) for i, d in enumerate(_group_deltas(OPPOSED))]
    assert not should_split(updates, 0.5, alpha=0.02, beta=90)
    assert not should_split(updates, -0.5, alpha=0.02, beta=90)
    assert not should_split(updates, None, alpha=0.02, beta=90)


def test_beta_is_an_angle_in_degrees() -> None:
    # Deltas 60° apart: each is 30° off their mean.
    a = np.array([1.0, 0.0], dtype=np.float32)
    b = np.array([0.5, np.sqrt(3) / 2], dtype=np.float32)
    updates = [_update(0, np.pad(a, (0, DIM - 2))), _update(1, np.pad(b, (0, DIM - 2)))]
    assert not updates_diverge(updates, beta=90)
    assert not updates_diverge(updates, beta=35)
    assert updates_diverge(updates, beta=25)


def test_a_zero_delta_does_not_count_as_diverging_at_90_degrees() -> None:
    updates = [_update(0, U), _update(1, U), _update(2, np.zeros(DIM))]
    assert not updates_diverge(updates, beta=90)


# -- the bipartition -------------------------------------------------------------


def test_bipartition_seeds_the_most_dissimilar_pair() -> None:
    deltas = [U, -U, 0.9 * U, -0.5 * U]
    assert bipartition(deltas) == ([0, 2], [1, 3])


def test_bipartition_puts_each_planted_group_apart() -> None:
    signs = [1, -1, 1, -1, -1, 1, 1]
    left, right = bipartition(_group_deltas(signs, seed=3))
    assert {signs[i] for i in left} == {signs[left[0]]}
    assert {signs[i] for i in right} == {-signs[left[0]]}
    assert sorted(left + right) == list(range(len(signs)))


def test_fedac_splits_a_cluster_of_two_groups_into_two() -> None:
    strategy = make("fedac")
    state = _joined(strategy, 6)
    deltas = dict(enumerate(_group_deltas(OPPOSED)))
    state = _round(strategy, state, 0, deltas, loss=1.0)
    assert len(state.models) == 1  # no previous loss yet
    before = _round(strategy, state, 1, deltas, loss=0.5)
    assert before.n_clusters == 1  # the loss still moves by 0.5 > α
    after = _round(strategy, before, 2, deltas, loss=0.49)
    clusters = _clusters(after, 6)
    # The larger group keeps id 0, the other gets a new id; both start from
    # the cluster's model after this round's aggregation.
    assert clusters == [0, 0, 0, 0, 1, 1]
    expected = before.models[0] + np.mean(list(deltas.values()), axis=0)
    assert_allclose(after.models[ClusterId(0)], expected, rtol=1e-5)
    assert_allclose(after.models[ClusterId(1)], expected, rtol=1e-5)


def test_an_iid_cluster_never_splits() -> None:
    strategy = make("fedac")
    state = _joined(strategy, 6)
    for round in range(4):
        deltas = dict(enumerate(_group_deltas([1] * 6, seed=round)))
        state = _round(strategy, state, round, deltas, loss=1.0)
    assert state.n_clusters == 1


def test_clusters_smaller_than_min_split_size_never_split() -> None:
    strategy = make("fedac", min_split_size=7)
    state = _joined(strategy, 6)
    deltas = dict(enumerate(_group_deltas(OPPOSED)))
    for round in range(3):
        state = _round(strategy, state, round, deltas, loss=1.0)
    assert state.n_clusters == 1


def test_splitting_recurses_inside_a_child() -> None:
    v = np.eye(DIM, dtype=np.float32)[1]
    strategy = make("fedac")
    state = _joined(strategy, 6)
    first = dict(enumerate(_group_deltas(OPPOSED)))
    for round in range(2):
        state = _round(strategy, state, round, first, loss=1.0)
    assert _clusters(state, 6) == [0, 0, 0, 0, 1, 1]
    # The children remember their group's loss, so the next round can decide:
    # inside cluster 0, client 3 now pulls against clients 0–2.
    second = {0: v, 1: v, 2: v, 3: -v, 4: -U, 5: -U}
    state = _round(strategy, state, 2, second, loss=1.0)
    assert _clusters(state, 6) == [0, 0, 0, 2, 1, 1]
    assert sorted(state.models) == [0, 1, 2]


# -- sampling: FedAC scans, FedACP decides on the sample ---------------------------

GROUPS = [1, 1, 1, 1, -1, -1, -1, -1]  # clients 0–3 and 4–7
SAMPLED = [0, 1, 2, 4]


def _sampled_round(strategy: Strategy[FedACState]) -> FedACState:
    state = _joined(strategy, 8)
    every = dict(enumerate(_group_deltas(GROUPS)))
    sample = {c: every[c] for c in SAMPLED}
    state = _round(strategy, state, 0, sample, loss=1.0)
    return _round(strategy, state, 1, sample, loss=1.0)


def test_fedacp_decides_and_bipartitions_over_the_sampled_clients_only() -> None:
    state = _sampled_round(FedACP(fraction=0.5))
    # Only sampled client 4 moves; unsampled members (3 of the first group,
    # 5–7 of the second) stay with the larger child, which keeps id 0.
    assert _clusters(state, 8) == [0, 0, 0, 0, 1, 0, 0, 0]


def test_fedac_scans_the_whole_cluster_before_it_bipartitions() -> None:
    strategy = FedAC(fraction=0.5)
    state = _sampled_round(strategy)
    assert state.n_clusters == 1
    clients = [ClientInfo(ClientId(i), 10) for i in range(8)]
    plans = strategy.plan_round(state, 2, clients, _rng())
    assert [p.client for p in plans] == list(range(8))
    every = dict(enumerate(_group_deltas(GROUPS)))
    state = _round(strategy, state, 2, every, loss=1.0)
    assert _clusters(state, 8) == [0, 0, 0, 0, 1, 1, 1, 1]
    assert len(strategy.plan_round(state, 3, clients, _rng())) == 4  # back to sampling


def test_a_scan_whose_updates_agree_does_not_split() -> None:
    strategy = FedAC(fraction=0.5)
    state = _sampled_round(strategy)
    aligned = dict(enumerate(_group_deltas([1] * 8)))
    state = _round(strategy, state, 2, aligned, loss=1.0)
    assert state.n_clusters == 1
    assert not state.scans


def test_fraction_samples_each_cluster_with_the_seeded_rng() -> None:
    strategy = FedAC(fraction=0.25)
    state = _joined(strategy, 8)
    state = state.replace(
        models={**state.models, ClusterId(1): state.models[ClusterId(0)]},
        assignment={ClientId(i): ClusterId(i // 4) for i in range(8)},
    )
    clients = [ClientInfo(ClientId(i), 10) for i in range(8)]
    picks = [
        [p.client for p in strategy.plan_round(state, 0, clients, rng)]
        for rng in (np.random.default_rng(4), np.random.default_rng(4))
    ]
    assert picks[0] == picks[1]
    assert sorted(c // 4 for c in picks[0]) == [0, 1]


def test_fedacp_overrides_only_the_scan_hook() -> None:
    # Names with "__mutmut_" are mutmut's copies of wants_scan (bench/mutation.py).
    own = {k for k in vars(FedACP) if not k.startswith("_") and "__mutmut_" not in k}
    assert own == {"name", "wants_scan"}


def test_a_joining_client_goes_to_the_largest_cluster() -> None:
    strategy = FedAC()
    state = _joined(strategy, 3)
    state = state.replace(
        models={**state.models, ClusterId(1): state.models[ClusterId(0)]},
        assignment={ClientId(0): ClusterId(0), **{ClientId(i): 1 for i in (1, 2)}},
    )
    state = strategy.on_join(state, ClientInfo(ClientId(9), 10))
    assert state.assignment[ClientId(9)] == 1


# -- options -----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["fedac", "fedacp"])
@pytest.mark.parametrize(
    "params",
    [
        {"alpha": 0.0},
        {"alpha": -1.0},
        {"beta": 200.0},
        {"beta": 180.5},
        {"beta": -5.0},
        {"fraction": 0.0},
        {"fraction": 1.5},
        {"min_split_size": 1},
    ],
)
def test_bad_options_name_the_value(name: str, params: dict) -> None:
    with pytest.raises(ValueError, match=str(next(iter(params.values())))):
        make(name, **params)


# -- edges (issue 21) ----------------------------------------------------------------


def _padded(*values: float) -> np.ndarray:
    return np.pad(np.array(values, dtype=np.float32), (0, DIM - len(values)))


def test_the_defaults_split_two_clients_just_past_90_degrees() -> None:
    # a = (1, 0) and b = (-1.02, 2): their mean m = (-0.01, 1) makes an angle
    # of 90.57° with a (cos = -0.0100), so the paper's β = 90° fires once the
    # loss settles, and a cluster of two (min_split_size 2) splits in two.
    strategy = make("fedac")
    state = _joined(strategy, 2)
    deltas = {0: _padded(1.0, 0.0), 1: _padded(-1.02, 2.0)}
    state = _round(strategy, state, 0, deltas, loss=1.0)
    assert state.n_clusters == 1
    state = _round(strategy, state, 1, deltas, loss=1.0)
    # Equal halves: the child holding client 0 keeps the id.
    assert _clusters(state, 2) == [0, 1]


@pytest.mark.parametrize("name", ["fedac", "fedacp"])
@pytest.mark.parametrize("beta", [0.0, 180.0])
def test_beta_may_be_any_angle_from_0_to_180(name: str, beta: float) -> None:
    strategy = make(name, beta=beta)
    assert isinstance(strategy, FedAC) and strategy.beta == beta


def test_beta_0_counts_any_angle_and_180_none() -> None:
    updates = [_update(0, _padded(1.0, 0.0)), _update(1, _padded(1.0, 0.1))]
    assert updates_diverge(updates, beta=0)
    opposed = [_update(0, U), _update(1, -2 * U)]
    assert not updates_diverge(opposed, beta=180)


def _settled(strategy: FedAC) -> FedACState:
    """Clients 0-3 in one cluster that has a previous loss of 1.0."""
    state = _joined(strategy, 4)
    return _round(strategy, state, 0, dict(enumerate(_group_deltas([1] * 4))), 1.0)


@pytest.mark.parametrize(
    "outsider",
    [
        ClientUpdate(ClientId(3), ClusterId(0), "late", np.ones(DIM), -U, 10, 1.0),
        ClientUpdate(ClientId(3), ClusterId(0), "ok", np.ones(DIM), -U, 0, 1.0),
        ClientUpdate(ClientId(3), ClusterId(0), "failed", reason="down"),
    ],
    ids=["late", "no-samples", "failed"],
)
def test_only_accepted_updates_with_samples_decide(outsider: ClientUpdate) -> None:
    # Clients 0-2 agree; client 3's update against them must not count: no
    # split, no scan, and the model moves by the mean of 0-2 only.
    strategy = FedAC()
    state = _settled(strategy)
    deltas = dict(enumerate(_group_deltas([1] * 3, seed=1)))
    model = state.models[ClusterId(0)]
    updates = [_update(c, d, 1.0, base=model) for c, d in deltas.items()]
    new = strategy.aggregate(state, 1, [*updates, outsider], _rng())
    assert new.n_clusters == 1 and not new.scans
    expected = model + np.mean([d.astype(np.float32) for d in deltas.values()], 0)
    assert_allclose(new.models[ClusterId(0)], expected, rtol=1e-6)


def test_a_one_sample_client_counts() -> None:
    strategy = FedAC()
    state = _settled(strategy)
    model = state.models[ClusterId(0)]
    deltas = dict(enumerate(_group_deltas([1, 1, 1, -1], seed=1)))
    updates = [
        _update(c, d, 1.0, base=model, n=1 if c == 3 else 10) for c, d in deltas.items()
    ]
    new = strategy.aggregate(state, 1, updates, _rng())
    assert _clusters(new, 4) == [0, 0, 0, 1]


def test_fedavg_inside_a_cluster_uses_the_scenario_aggregator() -> None:
    strategy = FedAC()
    strategy.aggregator = Median()
    state = _joined(strategy, 3)
    deltas = {0: _padded(1.0, 0.0), 1: _padded(0.0, 2.0), 2: _padded(5.0, 5.0)}
    state = _round(strategy, state, 0, deltas, loss=1.0)
    # The coordinate-wise median of the deltas is (1, 2, 0, ...), their mean
    # (2, 7/3, 0, ...); the model started at 1 everywhere.
    assert_allclose(state.models[ClusterId(0)], 1 + _padded(1.0, 2.0))


def test_a_single_update_never_diverges() -> None:
    # Even a zero delta, whose cosine (0 by scikit-learn's convention) is
    # below cos 45°: one client has nobody to disagree with.
    assert not updates_diverge([_update(0, np.zeros(DIM))], beta=45)
    assert not updates_diverge([_update(0, U)], beta=90)


def test_cos_beta_is_taken_to_12_decimals() -> None:
    # A β within 1e-11 degrees of 90° behaves as 90°. With counts n + 1 and n
    # (n = 1e13), a = (1, 0) and b = (-1, 1) average to m = (1, n) / (2n + 1),
    # whose cosine with a is 1 / √(1 + n²) ≈ 1e-13: no divergence at 90°.
    n = 10**13
    updates = [
        _update(0, _padded(1.0, 0.0), n=n + 1),
        _update(1, _padded(-1.0, 1.0), n=n),
    ]
    beta = math.degrees(math.acos(1.7e-13))  # 89.99999999999°
    assert not updates_diverge(updates, beta=beta)
    assert not updates_diverge(updates, beta=90)


def test_a_loss_change_of_exactly_alpha_does_not_split() -> None:
    updates = [_update(i, d) for i, d in enumerate(_group_deltas(OPPOSED))]
    assert not should_split(updates, 0.5, alpha=0.5, beta=90)
    assert not should_split(updates, -0.5, alpha=0.5, beta=90)
    assert should_split(updates, 0.4999, alpha=0.5, beta=90)


def test_bipartition_of_two_deltas_puts_one_in_each_group() -> None:
    assert bipartition([U, -U]) == ([0], [1])
    assert bipartition([U, 2 * U]) == ([0], [1])


def test_bipartition_seeds_two_distinct_deltas_even_when_parallel() -> None:
    # Parallel deltas: every cosine is 1 up to rounding, and here a delta's
    # cosine with itself rounds below its cosine with the other. The seeds
    # are still the pair (0, 1), the first seed's group holding delta 0.
    a = np.array([-4.1983347, -4.8610787], dtype=np.float32)
    b = np.array([-5.4763746, -6.3408685], dtype=np.float32)
    assert bipartition([a, b]) == ([0], [1])


def test_bipartition_needs_two_deltas() -> None:
    with pytest.raises(
        ValueError, match="^bipartition needs at least 2 deltas, got 1$"
    ):
        bipartition([U])


def test_a_delta_as_similar_to_both_seeds_joins_the_second() -> None:
    # Seeds U and -U; V is at 90° from both (Algorithm 2's `else`).
    v = np.eye(DIM, dtype=np.float32)[1]
    assert bipartition([U, -U, v]) == ([0], [1, 2])


def _split_state() -> FedACState:
    model = np.ones(DIM, dtype=np.float32)
    return FedACState(
        models={ClusterId(0): model},
        assignment={ClientId(i): ClusterId(0) for i in range(4)},
    )


def test_a_child_whose_clients_report_no_loss_has_no_previous_loss() -> None:
    # Clients 0-2 (kept, id 0) report no loss; client 3 (moved, id 1) does.
    deltas = [U, U, U, -U]
    losses = [None, None, None, 0.7]
    updates = [
        _update(i, d, loss)
        for i, (d, loss) in enumerate(zip(deltas, losses, strict=True))
    ]
    state, kept = split_cluster(_split_state(), ClusterId(0), updates, {0: 0.9})
    assert _clusters(state, 4) == [0, 0, 0, 1]
    assert kept == {1: 0.7}
    # Nobody reports a loss: neither child has one.
    silent = [_update(i, d, None) for i, d in enumerate(deltas)]
    _, none = split_cluster(_split_state(), ClusterId(0), silent, {0: 0.9})
    assert none == {}


def test_mean_loss_is_none_without_a_reported_loss() -> None:
    assert mean_loss([_update(0, U, None)]) is None
    assert mean_loss([]) is None
    assert mean_loss([_update(0, U, 0.2), _update(1, U, None), _update(2, U, 0.6)]) == (
        pytest.approx(0.4)
    )


def test_an_update_without_a_delta_is_refused_by_name() -> None:
    failed = ClientUpdate(ClientId(5), ClusterId(0), "ok", np.ones(DIM), None, 10)
    with pytest.raises(ValueError, match="^the update of client 5 carries no delta$"):
        cosines_to_update([_update(0, U), failed])
