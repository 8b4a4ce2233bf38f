"""Centred clipping's centre: each cluster's last aggregate (Karimireddy, He,
Jaggi's momentum; ByzFL keeps it as `m`), carried in the strategy state from
one aggregation to the next, synchronous and buffered, and through a
checkpoint."""

from __future__ import annotations

from pathlib import Path

import byzfl
import numpy as np
from numpy.testing import assert_allclose

import clusterfed
from clusterfed.algorithms import ClientInfo, ClientUpdate, ServerState, Strategy, make
from clusterfed.algorithms.robust import CenteredClipping
from clusterfed.checkpoint import read_checkpoint
from clusterfed.scenarios.faults import Faulty
from clusterfed.types import ClientId, ClusterId
from helpers import read_rounds, small_scenario, without_wall_time

RULE = CenteredClipping(tau=0.5, iterations=2)
RNG = np.random.default_rng(5)
ROUNDS = [RNG.normal(size=(7, 6)), RNG.normal(loc=1.0, size=(7, 6))]


def _joined(strategy: Strategy[ServerState]) -> ServerState:
    strategy.aggregator = RULE
    state = strategy.init_state([np.zeros(6, np.float32)])
    for i in range(7):
        state = strategy.on_join(state, ClientInfo(ClientId(i), n_train=10))
    return state


def _updates(state: ServerState, deltas: np.ndarray) -> list[ClientUpdate]:
    base = state.models[ClusterId(0)]
    return [
        ClientUpdate(ClientId(i), ClusterId(0), "ok", base, d.astype(np.float32), 10)
        for i, d in enumerate(deltas)
    ]


def _byzfl_steps() -> list[np.ndarray]:
    """Two successive calls on one ByzFL instance: the second starts from
    the first's output."""
    oracle = byzfl.CenteredClipping(L=RULE.iterations, tau=RULE.tau)
    return [oracle(deltas.astype(np.float32).astype(np.float64)) for deltas in ROUNDS]


def _steps(models: list[np.ndarray]) -> list[np.ndarray]:
    return [b.astype(np.float64) - a for a, b in zip(models, models[1:], strict=False)]


def test_two_rounds_of_centred_clipping_equal_two_calls_of_byzfls() -> None:
    fedavg = make("fedavg")
    state = _joined(fedavg)
    models = [state.models[ClusterId(0)]]
    for deltas in ROUNDS:
        state = fedavg.aggregate(state, 0, _updates(state, deltas), RNG)
        models.append(state.models[ClusterId(0)])
    expected = _byzfl_steps()
    assert_allclose(_steps(models), expected, atol=2e-6)
    # From the origin the second step would be another one.
    fresh = byzfl.CenteredClipping(L=RULE.iterations, tau=RULE.tau)(ROUNDS[1])
    assert not np.allclose(expected[1], fresh, atol=1e-3)
    assert_allclose(state.centres[ClusterId(0)], expected[1], atol=1e-12)


def test_two_full_buffers_of_centred_clipping_equal_two_calls_of_byzfls() -> None:
    # A buffer of 7 arrivals of no staleness folds what a round of 7 would.
    fedbuff = make("fedbuff", buffer_size=7, staleness="constant")
    state = _joined(fedbuff)
    models = [state.models[ClusterId(0)]]
    for deltas in ROUNDS:
        for update in _updates(state, deltas):
            state, moved = fedbuff.absorb(state, update, 0, RNG)
        assert moved
        models.append(state.models[ClusterId(0)])
    assert_allclose(_steps(models), _byzfl_steps(), atol=2e-6)


def test_the_centre_survives_a_checkpoint(tmp_path: Path) -> None:
    scenario = small_scenario(
        rounds=4,
        aggregator=RULE,
        faulty=[Faulty(clients=[1], behaviour="sign_flip")],
    )
    first = clusterfed.run(scenario, out=tmp_path, workers=1, checkpoint_every=2)
    centres = read_checkpoint(tmp_path).federation["server"]["state"].centres
    assert set(centres) == {ClusterId(0)}
    # As if it had been killed after the checkpoint of round 2.
    (tmp_path / "summary.json").unlink()
    clusterfed.resume(tmp_path, workers=1)
    assert without_wall_time(read_rounds(tmp_path)) == without_wall_time(first.rows)
