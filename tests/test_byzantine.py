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
    AssumptionWarning,
    Krum,
    Mean,
    Median,
    NormClip,
    TrimmedMean,
    clip_norms,
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
    # n = 4, f = 0 (n > 2f + 2): two neighbours each. Squared distances: 0-1:
    # 101, 1-2: 101, 0-2: 404; the outlier is far from all. Scores: row 1
    # 202, rows 0 and 2 505 (tie: the lower row first), row 3 far.
    assert krum(stack, f=0) == [1]
    assert krum(stack, f=0, m=3) == [1, 0, 2]
    assert_allclose(robust_mean(VECTORS, WEIGHTS, Krum(f=0, m=3)), [2.0, 20.0])


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


def test_krum_ranks_updates_by_their_nearest_squared_distances() -> None:
    # Scalars 0.5, 0, 0.01, 0.03 (n = 4, f = 0: two neighbours each). By hand:
    # row 2: 1e-4 + 4e-4, row 1: 1e-4 + 9e-4, row 3: 4e-4 + 9e-4,
    # row 0: 0.47² + 0.49². All below 1, all apart from the origin's.
    stack = np.array([[0.5, 0.0], [0.0, 0.0], [0.01, 0.0], [0.03, 0.0]])
    assert krum(stack, f=0, m=4) == [2, 1, 3, 0]
    # Far from the origin: 20, 10, 10.1, 10.3. Row 2: 0.1² + 0.2², row 1:
    # 0.1² + 0.3², row 3: 0.2² + 0.3², row 0: 9.9² + 9.7².
    far = np.array([[20.0], [10.0], [10.1], [10.3]])
    assert krum(far, f=0, m=4) == [2, 1, 3, 0]


def test_krum_counts_n_minus_f_minus_2_neighbours() -> None:
    # Scalars 0, 0.1, 0.3, 1.0, 1.05; n = 5, f = 1: two neighbours each.
    # By hand: 0.10, 0.05, 0.13, 0.4925, 0.565 (one neighbour would favour
    # row 3, four would favour row 2).
    stack = np.array([[0.0], [0.1], [0.3], [1.0], [1.05]])
    assert krum(stack, f=1, m=5) == [1, 0, 2, 3, 4]
    assert_allclose(robust_mean(list(stack), [1.0] * 5, Krum(f=1)), [0.1])


def test_krum_of_three_picks_from_the_closest_pair() -> None:
    stack = np.array([[0.0], [10.0], [10.5]])
    assert krum(stack, f=0) == [1]  # rows 1 and 2 tie: the lower row


def test_krum_refuses_n_at_most_2f_plus_2_and_a_small_cluster_keeps_its_model() -> None:
    # Blanchard et al.'s n > 2f + 2: n = 4, f = 1 is no Krum (it once fell
    # back to one neighbour without a word).
    stack = np.stack(VECTORS).astype(np.float64)
    with pytest.raises(ValueError, match=r"n > 2f \+ 2, got n = 4, f = 1"):
        krum(stack, f=1)
    assert Krum(f=1).breaks(4) is not None and Krum(f=1).breaks(5) is None
    with pytest.warns(AssumptionWarning, match="at least 5 updates, not 4"):
        step = robust_mean(VECTORS, WEIGHTS, Krum(f=1))
    assert_allclose(step, [0.0, 0.0])


def test_trimmed_mean_that_cuts_nothing_warns() -> None:
    # beta 0.1 of 4 updates cuts ⌊0.4⌋ = 0 per end: a plain mean, said.
    with pytest.warns(AssumptionWarning, match=r"⌊0.1·4⌋ = 0 values"):
        got = robust_mean(VECTORS, WEIGHTS, TrimmedMean(beta=0.1))
    assert_allclose(got, [26.5, -110])
    assert TrimmedMean(beta=0.1).breaks(10) is None
    assert "at least 10 updates" in (TrimmedMean(beta=0.1).breaks(9) or "")


def test_krum_breaks_ties_by_the_lower_row_among_many() -> None:
    # 60 updates at two points: each one's score is 2 × (the other group's
    # size − 1) (every neighbour but the farthest), so the larger group comes
    # first, each group in row order. numpy's default sort reorders such ties.
    groups = np.random.default_rng(0).integers(0, 2, 60)
    stack = np.repeat(groups[:, None].astype(np.float64), 2, axis=1)
    larger = int(np.bincount(groups).argmax())
    rows = list(range(60))
    expected = [i for i in rows if groups[i] == larger] + [
        i for i in rows if groups[i] != larger
    ]
    assert krum(stack, f=0, m=60) == expected


def test_norm_clip_measures_norms_in_float64_and_clips_below_one() -> None:
    # 3e19² overflows float32; its norm is 3e19, so the update clips to 1.
    huge = np.array([3e19, 0.0], dtype=np.float32)
    (clipped,) = clip_norms([huge], max_norm=1.0)
    assert_allclose(clipped, [1.0, 0.0])
    (short,) = clip_norms([np.array([0.3, 0.4])], max_norm=0.1)
    assert_allclose(short, [0.06, 0.08])


def test_robust_rules_work_in_float64_and_need_a_vector() -> None:
    # The float32 neighbours 1 and 1 + 2⁻²³: their midpoint, 1 + 2⁻²⁴, exists
    # in float64 only; float32 sums of 3e19² overflow.
    ends = [np.float32([1.0]), np.float32([1.0 + 2.0**-23])]
    for rule in (Median(), TrimmedMean(beta=0.0)):
        got = robust_mean(ends, [1.0, 1.0], rule)
        assert got.dtype == np.float64 and got[0] == 1.0 + 2.0**-24
    far = [np.float32([0.0, 0.0]), np.float32([3e19, 0.0]), np.float32([3e19, 1.0])]
    assert_allclose(robust_mean(far, [1.0] * 3, Krum(f=0)), [3e19, 0.0])
    with pytest.raises(ValueError, match="^robust_mean needs at least one vector$"):
        robust_mean([], [], Median())


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
        small_scenario(algorithm=algorithm),
        ["aggregator=trimmed_mean", "aggregator.beta=0.2"],
    )
    from clusterfed.scenarios import plan_run

    assert plan_run(scenario).strategy.aggregator == TrimmedMean(beta=0.2)


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
    # The rule is the strategy's, set once; the state keeps models and
    # assignment, and what a rule remembers of a cluster's last fold.
    assert set(ServerState.__dataclass_fields__) == {"models", "assignment", "centres"}
    assert not ServerState(models={}, assignment={}).centres


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
