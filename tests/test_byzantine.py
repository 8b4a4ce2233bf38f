"""Byzantine clients and the defences: the fault kinds through the real runtime
and codec, the robust aggregators on hand-computed cases, the `byzantine`
scenario, and worker processes that end with the main process."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import psutil
import pytest
from numpy.testing import assert_allclose

import clusterfed
from clusterfed.algorithms import ClientUpdate, ServerState, make
from clusterfed.algorithms._aggregate import average_per_cluster, weighted_mean
from clusterfed.algorithms.robust import (
    Krum,
    Mean,
    Median,
    NormClip,
    TrimmedMean,
    krum,
    robust_mean,
)
from clusterfed.scenarios import load_scenario
from clusterfed.scenarios.loader import with_overrides
from clusterfed.scenarios.spec import Faulty
from clusterfed.types import ClientId, ClusterId
from helpers import small_scenario

VECTORS = [
    np.array([1.0, 10.0], dtype=np.float32),
    np.array([2.0, 20.0], dtype=np.float32),
    np.array([3.0, 30.0], dtype=np.float32),
    np.array([100.0, -500.0], dtype=np.float32),
]
WEIGHTS = [1.0, 1.0, 2.0, 4.0]


# -- the aggregators, by hand ------------------------------------------------------


def test_mean_is_the_algorithms_own_weighted_mean_bit_for_bit() -> None:
    got = robust_mean(VECTORS, WEIGHTS, Mean())
    np.testing.assert_array_equal(got, weighted_mean(VECTORS, WEIGHTS))


def test_median_is_coordinate_wise_and_ignores_claimed_weights() -> None:
    assert_allclose(robust_mean(VECTORS, WEIGHTS, Median()), [2.5, 15.0])


def test_trimmed_mean_cuts_beta_of_each_end_per_coordinate() -> None:
    # Four values, beta 0.25: one cut at each end, per coordinate.
    assert_allclose(robust_mean(VECTORS, WEIGHTS, TrimmedMean(beta=0.25)), [2.5, 15])
    assert_allclose(robust_mean(VECTORS, WEIGHTS, TrimmedMean(beta=0.0)), [26.5, -110])


def test_krum_picks_the_update_closest_to_its_neighbours() -> None:
    stack = np.stack(VECTORS).astype(np.float64)
    # n = 4, f = 1: one neighbour each. Squared distances: 0-1: 101, 1-2: 101,
    # 0-2: 404; the outlier is far from all. Rows 0 and 1 tie: the lower wins.
    assert krum(stack, f=1) == [0]
    assert krum(stack, f=1, m=3) == [0, 1, 2]
    assert_allclose(robust_mean(VECTORS, WEIGHTS, Krum(f=1, m=3)), [2.0, 20.0])


def test_norm_clip_scales_long_updates_to_the_bound_then_takes_the_mean() -> None:
    got = robust_mean(VECTORS[:2], [1.0, 1.0], NormClip(max_norm=1.0))
    unit = np.array([1.0, 10.0]) / np.sqrt(101)
    assert_allclose(got, unit)  # both point the same way, both clipped to 1
    median_norm = robust_mean(VECTORS[1:], [1.0, 1.0, 1.0], NormClip())
    norms = [np.linalg.norm(v) for v in VECTORS[1:]]
    bound = sorted(norms)[1]
    expected = np.mean(
        [v * min(1.0, bound / n) for v, n in zip(VECTORS[1:], norms, strict=True)],
        axis=0,
    )
    assert_allclose(median_norm, expected, rtol=1e-6)


def test_every_cluster_is_aggregated_by_the_rule() -> None:
    base = {ClusterId(0): np.zeros(2, dtype=np.float32)}
    updates = [
        ClientUpdate(
            ClientId(i), ClusterId(0), "ok", base=base[0], delta=v, n_samples=int(w)
        )
        for i, (v, w) in enumerate(zip(VECTORS, WEIGHTS, strict=True))
    ]
    models = average_per_cluster(base, updates, aggregator=Median())
    assert_allclose(models[ClusterId(0)], [2.5, 15.0])


@pytest.mark.parametrize("algorithm", ["fedavg", "ifca", "cfl", "dcfl", "cafa"])
def test_a_strategy_aggregates_with_the_scenarios_aggregator(algorithm: str) -> None:
    strategy = make(algorithm)
    assert isinstance(strategy.aggregator, Mean)
    scenario = with_overrides(
        small_scenario(algorithm=algorithm), ["aggregator=trimmed_mean"]
    )
    from clusterfed.scenarios import plan_run

    assert plan_run(scenario).strategy.aggregator == TrimmedMean(beta=0.1)


def test_the_aggregator_is_set_by_name_and_its_parameters() -> None:
    scenario = with_overrides(
        load_scenario("quickstart"),
        ["aggregator=trimmed_mean", "aggregator.beta=0.2"],
    )
    assert scenario.aggregator == TrimmedMean(beta=0.2)
    krum_ = with_overrides(scenario, ["aggregator=krum", "aggregator.f=4"])
    assert krum_.aggregator == Krum(f=4, m=1)
    assert load_scenario("quickstart").aggregator == Mean()
    with pytest.raises(clusterfed.errors.ScenarioError, match="beta"):
        with_overrides(scenario, ["aggregator.beta=0.7"])


def test_a_plain_state_keeps_no_aggregator() -> None:
    # The rule is the strategy's, set once; the state stays models + assignment.
    assert set(ServerState.__dataclass_fields__) == {"models", "assignment"}


# -- the fault kinds through the real runtime and codec -----------------------------


def test_every_byzantine_kind_runs_through_worker_processes(tmp_path: Path) -> None:
    kinds = ["lie_samples", "huge_delta", "sign_flip", "forge_leave", "squat_ids"]
    kinds.append("flood")
    scenario = small_scenario(
        rounds=3,
        clients=8,
        max_update_norm=50.0,
        faulty=[
            Faulty(clients=i + 1, behaviour=k, start=1, until=1)
            for i, k in enumerate(kinds)
        ],
    )
    result = clusterfed.run(scenario, out=tmp_path, workers=2)
    rows = result.rows
    assert len(rows) == 3
    assert [r["rejected_messages"] for r in rows] == [0, 5, 0]
    reasons = " | ".join(rows[1]["rejections"])
    for expected in (
        "client 1: payload.update_reply.n_samples",
        "client 2: delta norm",
        "client 4: reply from 'client/5' came from client 4",
        "client 5: message from unknown client 'client/1048581'",
        "client 6: truncated or malformed message: 1000000 exceeds",
    ):
        assert expected in reasons
    by_id = {c["id"]: c for c in rows[1]["clients"]}
    assert by_id[3]["trained"]  # the sign flip, under the bound: accepted
    assert all(by_id[c]["trained"] for c in (0, 7))
    assert all(c["trained"] for c in rows[2]["clients"])


def test_a_sign_flip_under_no_bound_is_the_honest_delta_times_minus_scale(
    tmp_path: Path,
) -> None:
    scenario = small_scenario(
        rounds=1, faulty=[Faulty(clients=1, behaviour="sign_flip", scale=2.0)]
    )
    flipped = clusterfed.run(scenario, out=tmp_path / "a", workers=1)
    honest = clusterfed.run(small_scenario(rounds=1), out=tmp_path / "b", workers=1)
    row = {c["id"]: c for c in flipped.rows[0]["clients"]}[1]
    assert row["trained"] and flipped.rows[0]["rejected_messages"] == 0
    assert flipped.rows[0]["bytes_up"] == honest.rows[0]["bytes_up"]


def test_the_byzantine_scenario_is_steered_by_the_mean_not_by_the_median(
    tmp_path: Path,
) -> None:
    short = ["rounds=6"]
    base = load_scenario("byzantine")
    assert base.aggregator == Mean() and base.max_update_norm == 5.0
    mean = clusterfed.run(with_overrides(base, short), out=tmp_path / "m", workers=2)
    median = clusterfed.run(
        with_overrides(base, [*short, "aggregator=median"]),
        out=tmp_path / "d",
        workers=2,
    )
    assert median.summary["final_mean_acc"] > mean.summary["final_mean_acc"] + 0.15
    assert mean.summary["rejected_messages"] == 0  # every flip was accepted


# -- worker processes die with the main process --------------------------------------

MAIN = textwrap.dedent(
    """
    import asyncio
    from clusterfed.actors.runtimes.processes import ProcessRuntime

    async def main():
        runtime = ProcessRuntime(2)
        await runtime.start()
        pids = [w.process.pid for w in runtime._workers.values()]
        print(" ".join(map(str, pids)), flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())
    """
)


def test_kill_9_of_the_main_process_leaves_no_worker_behind() -> None:
    main = subprocess.Popen([sys.executable, "-c", MAIN], stdout=subprocess.PIPE)
    try:
        assert main.stdout is not None
        workers = [psutil.Process(int(p)) for p in main.stdout.readline().split()]
        assert len(workers) == 2 and all(w.is_running() for w in workers)
    finally:
        main.kill()  # SIGKILL: no handler, no cleanup of its own
        main.wait()
    _, alive = psutil.wait_procs(workers, timeout=5)
    for worker in alive:  # do not leave them behind if the test fails
        worker.kill()
    assert alive == []
