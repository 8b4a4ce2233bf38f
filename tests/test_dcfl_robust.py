"""DCFL under a robust aggregator: the rule folds the members' updates, not
their models, so rules measured from the origin clip steps."""

from __future__ import annotations

import byzfl
import numpy as np
import pytest
from numpy.testing import assert_allclose

from clusterfed.algorithms import ClientInfo, ClientUpdate
from clusterfed.algorithms.dcfl import DCFL, DCFLState
from clusterfed.algorithms.robust import (
    AggregatorRule,
    CenteredClipping,
    NormClip,
    robust_mean,
)
from clusterfed.types import ClientId, ClusterId

DIM = 4
BASE = np.array([3.0, 4.0, 0.0, 0.0], np.float32)  # norm 5, larger than a step
FAR = np.full(DIM, 1e4, np.float32)  # cluster 1: far enough to keep the Dunn index > 1
_RNG = np.random.default_rng(0)


def _planted() -> np.ndarray:
    """Ten steps of cluster 0: eight honest ones near e₁, two sign flips × 10."""
    honest = np.array([1.0, 0, 0, 0]) + 0.1 * np.random.default_rng(0).normal(
        size=(8, DIM)
    )
    return np.vstack([honest, [[-10.0, 0, 0, 0]] * 2]).astype(np.float32)


def _start(dcfl: DCFL) -> DCFLState:
    """Clients 0–9 in cluster 0 (at BASE), 10–12 in cluster 1 (at FAR)."""
    state = dcfl.init_state([BASE])
    for i in range(13):
        state = dcfl.on_join(state, ClientInfo(ClientId(i), n_train=10))
    assignment = {ClientId(i): ClusterId(0 if i < 10 else 1) for i in range(13)}
    return state.replace(models={0: BASE, 1: FAR}, assignment=assignment)


def _updates(state: DCFLState, cluster_0: np.ndarray) -> list[ClientUpdate]:
    """Cluster 0's members take the steps `cluster_0`, cluster 1's small ones."""
    small = 0.01 * np.ones(DIM, np.float32)
    steps = [*cluster_0.astype(np.float32), small, 2 * small, 3 * small]
    return [
        ClientUpdate(ClientId(i), cluster, "ok", state.models[cluster], step, 10, 1.0)
        for i, step in enumerate(steps)
        for cluster in [state.assignment[ClientId(i)]]
    ]


@pytest.mark.parametrize("rule", [NormClip(), CenteredClipping()])
def test_a_rule_measured_from_the_origin_clips_the_steps_not_the_models(
    rule: AggregatorRule,
) -> None:
    dcfl = DCFL()
    dcfl.aggregator = rule
    state = _start(dcfl)
    new = dcfl.aggregate(state, 1, _updates(state, _planted()), _RNG)
    assert new.reclustered is False  # the sync round's own means
    step = new.models[ClusterId(0)] - BASE
    assert_allclose(step, robust_mean(list(_planted()), [1] * 10, rule), atol=1e-6)
    # The honest direction wins; clipping whole models to the median model
    # norm turned the step against it (cosine −0.96 under norm_clip).
    honest = _planted()[:8].mean(axis=0)
    cosine = step @ honest / np.linalg.norm(step) / np.linalg.norm(honest)
    assert cosine > 0.99


def test_centred_clipping_starts_each_round_from_the_clusters_last_step() -> None:
    rule = CenteredClipping(tau=0.5, iterations=2)
    dcfl = DCFL()
    dcfl.aggregator = rule
    state = _start(dcfl)
    rounds = [_planted(), 0.5 * _planted() + 0.3]
    oracle = byzfl.CenteredClipping(L=rule.iterations, tau=rule.tau)
    for steps in rounds:
        before = state.models[ClusterId(0)]
        state = dcfl.aggregate(state, 1, _updates(state, steps), _RNG)
        assert state.reclustered is False
        step = state.models[ClusterId(0)] - before.astype(np.float64)
        assert_allclose(step, oracle(steps.astype(np.float64)), atol=2e-6)
