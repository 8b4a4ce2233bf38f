"""The `Strategy` base and `ServerState`: what every algorithm inherits."""

from __future__ import annotations

import numpy as np
import pytest

from clusterfed.algorithms import ClientUpdate, ServerState, make
from clusterfed.types import ClientId, ClusterId


def _state(assignment: dict[int, int], clusters: int = 3) -> ServerState:
    return ServerState(
        models={ClusterId(k): np.zeros(2, np.float32) for k in range(clusters)},
        assignment={ClientId(c): ClusterId(k) for c, k in assignment.items()},
    )


def test_the_largest_cluster_is_the_one_with_most_clients() -> None:
    # Cluster 2 holds three clients, cluster 1 one, cluster 0 none.
    assert _state({0: 2, 1: 1, 2: 2, 3: 2}).largest_cluster() == 2
    assert _state({0: 1, 1: 1, 2: 0}).largest_cluster() == 1


def test_the_largest_cluster_ties_go_to_the_lowest_id() -> None:
    assert _state({0: 2, 1: 1}).largest_cluster() == 1
    assert _state({}).largest_cluster() == 0  # nobody assigned: the lowest id


def test_a_strategy_without_an_asynchronous_mode_says_so() -> None:
    strategy = make("fedavg")
    update = ClientUpdate(ClientId(0), ClusterId(0), "ok")
    state = strategy.init_state([np.zeros(2, np.float32)])
    with pytest.raises(NotImplementedError, match="^fedavg has no asynchronous mode$"):
        strategy.absorb(state, update, 0, np.random.default_rng(0))


def test_the_first_state_holds_the_initial_model_as_cluster_zero() -> None:
    model = np.arange(3, dtype=np.float32)
    state = make("fedavg").init_state([model])
    assert list(state.models) == [ClusterId(0)] and state.models[0] is model
    assert state.assignment == {}
