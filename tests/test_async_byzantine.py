"""Robust aggregation in asynchronous mode: each full buffer is folded by the
scenario's rule, and it defends the async byzantine run as it does the sync
one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from numpy.testing import assert_allclose

import clusterfed
from clusterfed.algorithms import ClientUpdate
from clusterfed.algorithms._buffers import BufferRule
from clusterfed.algorithms.robust import Median
from clusterfed.scenarios import load_scenario
from clusterfed.scenarios.loader import with_overrides
from clusterfed.types import ClientId, ClusterId


def _update(client: int, delta: list[float]) -> ClientUpdate:
    zero = np.zeros(2, np.float32)
    return ClientUpdate(
        ClientId(client), ClusterId(0), "ok", zero, np.float32(delta), 10, 1.0
    )


def test_a_full_buffer_moves_its_cluster_by_the_median_of_its_discounted_deltas() -> (
    None
):
    # Three updates, the second one version stale: s(1) = 2^-1/2 (polynomial,
    # a = 0.5). Discounted: [1, 1], [7.07, -7.07], [3, 0]; median [3, 0]; the
    # step is server_lr (0.5) times it. The mean would have been pulled far.
    rule = BufferRule.checked(
        buffer_size=3, staleness="polynomial", a=0.5, b=4, server_lr=0.5
    )
    models = {ClusterId(0): np.zeros(2, np.float32)}
    buffers: dict = {}
    moved = False
    for i, (delta, tau) in enumerate(
        [([1.0, 1.0], 0), ([10.0, -10.0], 1), ([3.0, 0.0], 0)]
    ):
        models, buffers, moved, _ = rule.fold(
            models, buffers, _update(i, delta), tau, aggregator=Median()
        )
        assert moved == (i == 2)
    assert_allclose(models[ClusterId(0)], [1.5, 0.0])
    assert not buffers


def test_the_async_byzantine_run_with_median_beats_the_mean(tmp_path: Path) -> None:
    # byzantine: 4 of 20 clients send their delta × −10 (under the norm bound)
    # every time; FedBuff steps every 10 arrivals (2 of them Byzantine, in
    # expectation: the median's assumption holds).
    base = load_scenario("byzantine")
    common = [
        "algorithm=fedbuff",
        "mode=async",
        "algorithm_params.fedbuff.buffer_size=10",
        "rounds=20",
    ]
    runs = {
        rule: clusterfed.run(
            with_overrides(base, [*common, f"aggregator={rule}"]),
            out=tmp_path / rule,
            workers=2,
        )
        for rule in ("mean", "median")
    }
    mean = runs["mean"].summary["final_mean_acc"]
    median = runs["median"].summary["final_mean_acc"]
    assert median > mean + 0.15, (mean, median)
