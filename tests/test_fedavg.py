"""FedAvg against hand-computed numbers."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose

from clusterfed.algorithms import (
    ClientInfo,
    ClientUpdate,
    average_per_cluster,
    make,
    weighted_mean,
)
from clusterfed.algorithms.fedavg import sample_clients
from clusterfed.algorithms.robust import Median
from clusterfed.types import ClientId, ClusterId


def _rng() -> np.random.Generator:
    return np.random.default_rng(0)


def _state(fedavg, n_clients=3):  # type: ignore[no-untyped-def]
    state = fedavg.init_state([np.array([1.0, 1.0, 1.0], dtype=np.float32)])
    for i in range(n_clients):
        state = fedavg.on_join(state, ClientInfo(ClientId(i), n_train=10))
    return state


def _update(
    client: int, delta: list[float], n: int, status: str = "ok"
) -> ClientUpdate:
    return ClientUpdate(
        client=ClientId(client),
        cluster=ClusterId(0),
        status=status,  # type: ignore[arg-type]
        base=np.ones(3, dtype=np.float32),
        delta=np.array(delta, dtype=np.float32),
        n_samples=n,
        loss=0.5,
    )


def test_fedavg_is_the_sample_weighted_mean_of_deltas() -> None:
    fedavg = make("fedavg")
    state = _state(fedavg)
    updates = [
        _update(0, [1.0, 0.0, -2.0], n=10),
        _update(1, [0.0, 3.0, 2.0], n=30),
        _update(2, [4.0, 4.0, 4.0], n=60),
    ]
    # by hand: (10·[1,0,-2] + 30·[0,3,2] + 60·[4,4,4]) / 100 = [2.5, 3.3, 2.8]
    new = fedavg.aggregate(state, 0, updates, _rng())
    assert_allclose(new.models[0], [1 + 2.5, 1 + 3.3, 1 + 2.8], rtol=1e-6)
    assert new.models[0].dtype == np.float32


def test_failed_late_and_rejected_updates_do_not_count() -> None:
    fedavg = make("fedavg")
    state = _state(fedavg)
    updates = [
        _update(0, [1.0, 1.0, 1.0], n=10),
        _update(1, [100.0, 100.0, 100.0], n=10, status="late"),
        ClientUpdate(ClientId(2), ClusterId(0), "failed", reason="crashed"),
    ]
    assert_allclose(
        fedavg.aggregate(state, 0, updates, _rng()).models[0], [2.0, 2.0, 2.0]
    )


def test_a_round_with_no_usable_update_keeps_the_model() -> None:
    fedavg = make("fedavg")
    state = _state(fedavg)
    new = fedavg.aggregate(
        state, 0, [ClientUpdate(ClientId(0), ClusterId(0), "failed")], _rng()
    )
    assert_allclose(new.models[0], state.models[0])


def test_fraction_samples_a_seeded_subset() -> None:
    fedavg = make("fedavg", fraction=0.5)
    clients = [ClientInfo(ClientId(i), 10) for i in range(10)]
    picks = [
        [p.client for p in fedavg.plan_round(_state(fedavg, 10), 0, clients, _rng())]
        for _ in range(2)
    ]
    assert len(picks[0]) == 5
    assert picks[0] == picks[1]


def test_weighted_mean_refuses_zero_total_weight() -> None:
    with pytest.raises(
        ValueError, match="^weighted_mean needs vectors with a positive total weight$"
    ):
        weighted_mean([np.ones(2)], [0])


@pytest.mark.parametrize(
    "params",
    [{"fraction": 0.0}, {"fraction": 1.5}, {"server_lr": -1}, {"server_lr": 0}],
)
def test_bad_hyperparameters_name_the_value(params: dict) -> None:
    with pytest.raises(ValueError, match=str(next(iter(params.values())))):
        make("fedavg", **params)


def test_unknown_names_list_what_is_known() -> None:
    with pytest.raises(ValueError, match="known: .*fedavg"):
        make("fedavgg")
    with pytest.raises(ValueError, match="fraction"):
        make("fedavg", fractoin=0.5)


def test_sampling_covers_every_client_in_proportion() -> None:
    # 10 clients, fraction 0.3: 3 a round; over 400 rounds each client is
    # drawn about 120 times (binomial sd ≈ 9), and never the same 3 always.
    from clusterfed.algorithms.fedavg import sample_clients

    clients = [ClientInfo(ClientId(i), n_train=10) for i in range(10)]
    rng = np.random.default_rng(5)
    counts = np.zeros(10, dtype=int)
    for _ in range(400):
        picked = [c.id for c in sample_clients(clients, 0.3, rng)]
        assert len(picked) == len(set(picked)) == 3 and picked == sorted(picked)
        counts[picked] += 1
    assert counts.sum() == 1200
    assert counts.min() >= 85 and counts.max() <= 155, counts


def test_server_lr_scales_the_mean_step() -> None:
    fedavg = make("fedavg", server_lr=0.5)
    updates = [_update(0, [1.0, 0.0, -2.0], n=10), _update(1, [3.0, 4.0, 2.0], n=30)]
    # by hand: (10·[1,0,-2] + 30·[3,4,2]) / 40 = [2.5, 3, 1], half of it taken
    new = fedavg.aggregate(_state(fedavg), 0, updates, _rng())
    assert_allclose(new.models[0], [1 + 1.25, 1 + 1.5, 1 + 0.5], rtol=1e-6)


def test_the_scenario_aggregator_replaces_the_mean() -> None:
    fedavg = make("fedavg")
    fedavg.aggregator = Median()
    updates = [
        _update(0, [0.0, 0.0, 0.0], n=10),
        _update(1, [1.0, 2.0, 3.0], n=10),
        _update(2, [100.0, 100.0, 100.0], n=1000),
    ]
    # the coordinate-wise median of the three deltas, whatever the weights
    new = fedavg.aggregate(_state(fedavg), 0, updates, _rng())
    assert_allclose(new.models[0], [1 + 1.0, 1 + 2.0, 1 + 3.0])


def test_average_per_cluster_takes_the_plain_mean_step_by_default() -> None:
    models = {ClusterId(0): np.ones(3, dtype=np.float32)}
    updates = [_update(0, [2.0, 0.0, 4.0], n=1), _update(1, [0.0, 2.0, 0.0], n=3)]
    # by hand: (1·[2,0,4] + 3·[0,2,0]) / 4 = [0.5, 1.5, 1]; a client of one
    # sample counts like any other
    new = average_per_cluster(models, updates)
    assert_allclose(new[ClusterId(0)], [1.5, 2.5, 2.0])


def test_a_cluster_whose_only_update_has_no_samples_keeps_its_model() -> None:
    models = {ClusterId(0): np.ones(3, dtype=np.float32)}
    new = average_per_cluster(models, [_update(0, [5.0, 5.0, 5.0], n=0)])
    assert_allclose(new[ClusterId(0)], [1.0, 1.0, 1.0])


def test_weighted_mean_sums_huge_counts_without_wrapping() -> None:
    # 3 × 2**62 overflows int64; the mean of equal weights is the plain mean
    vectors = [np.array([0.0]), np.array([3.0]), np.array([6.0])]
    assert_allclose(weighted_mean(vectors, [2**62] * 3), [3.0])


def test_weighted_mean_refuses_a_weight_without_its_vector() -> None:
    with pytest.raises(ValueError):
        weighted_mean([np.ones(2), np.ones(2)], [1, 1, 1])


def test_sampling_every_client_leaves_the_generator_untouched() -> None:
    clients = [ClientInfo(ClientId(i), n_train=10) for i in range(4)]
    rng = _rng()
    assert sample_clients(clients, 1.0, rng) == clients
    assert sample_clients(clients[:1], 0.3, rng) == clients[:1]
    assert rng.random() == _rng().random()  # nothing drawn: no choice to make


@pytest.mark.parametrize(("n", "fraction", "k"), [(2, 0.5, 1), (10, 0.1, 1)])
def test_sampling_takes_round_fraction_times_n_clients(
    n: int, fraction: float, k: int
) -> None:
    clients = [ClientInfo(ClientId(i), n_train=10) for i in range(n)]
    picked = sample_clients(clients, fraction, _rng())
    assert len(picked) == k
    assert len({c.id for c in picked}) == k
