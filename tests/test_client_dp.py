"""Client-level DP (DP-FedAvg, McMahan et al. 2018; adaptive clipping, Andrew
et al. 2021): the clients' clipping, the server's noise at its planned
standard deviation, the bound tracking its target quantile, ε from Opacus'
accountant, the refusals, and a whole run."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

import clusterfed
from clusterfed.actors import InlineRuntime, work
from clusterfed.actors.client_dp import (
    ClientDPPlan,
    ClientLevelDP,
    clip,
    default_count_noise,
    next_bound,
    update_multiplier,
)
from clusterfed.actors.round import UpdateLimits
from clusterfed.actors.validation import check_update
from clusterfed.algorithms import Candidate, ClientInfo, ClusterSums, TaskPlan
from clusterfed.algorithms.fedavg import sample_clients
from clusterfed.errors import ScenarioError
from clusterfed.federation import Federation
from clusterfed.protocol import (
    ClusterModel,
    Envelope,
    TrainConfig,
    TrainTask,
    UpdateReply,
    encode,
)
from clusterfed.scenarios import BUILTIN, Join, Leave, plan_run, with_overrides
from clusterfed.scenarios.spec import DPSpec
from clusterfed.types import ClientId, ClusterId
from helpers import small_scenario, tiny_model, tiny_trainer

CLIENT = {"epsilon": 10.0, "mechanism": "client"}


def _plan(**changes: object) -> ClientDPPlan:
    fields = {
        "epsilon": 10.0,
        "delta": 1e-5,
        "noise_multiplier": 1.5,
        "sample_rate": 0.5,
        "rounds": 20,
        "clip_norm": 2.0,
        **changes,
    }
    return ClientDPPlan(**fields)  # type: ignore[arg-type]


def _opacus_epsilon(
    z: float, rate: float, steps: int, delta: float, accountant: str = "rdp"
) -> float:
    from opacus.accountants import create_accountant

    books = create_accountant(accountant)
    books.history = [(z, rate, steps)]
    with np.errstate(divide="ignore"):  # PRV's log(1 − q) at q = 1
        return float(books.get_epsilon(delta))


# -- the clients' clipping --------------------------------------------------


def test_an_update_longer_than_the_bound_is_scaled_to_it() -> None:
    delta = np.array([3.0, 4.0], np.float32)  # norm 5
    clipped = clip(delta, 2.0)
    assert clipped.dtype == np.float32
    assert abs(np.linalg.norm(clipped) - 2.0) < 1e-6
    np.testing.assert_allclose(clipped / np.linalg.norm(clipped), delta / 5)
    assert clip(delta, 5.0) is delta  # within the bound: untouched


def test_a_client_clips_its_update_to_the_tasks_bound() -> None:
    candidates = [Candidate(ClusterId(0), tiny_model(1))]
    config = TrainConfig(lr=0.5, momentum=0.0, batch_size=4, epochs=3)
    _, free = work.train(tiny_trainer(), candidates, None, config, 0)
    bound = float(np.linalg.norm(free.delta)) / 4
    capped = config.model_copy(update={"clip_norm": bound})
    _, result = work.train(tiny_trainer(), candidates, None, capped, 0)
    assert abs(np.linalg.norm(result.delta) - bound) < 1e-5 * bound
    np.testing.assert_allclose(result.delta, free.delta / 4, rtol=1e-5, atol=1e-8)


def test_the_bound_travels_only_where_it_is_set() -> None:
    model = (ClusterModel(cluster=0, weights=np.zeros(3, np.float32)),)

    def wire(config: TrainConfig) -> bytes:
        task = TrainTask(models=model, config=config)
        return encode(
            Envelope(msg_id="m", sender="s", recipient="r", round=0, payload=task)
        )

    assert b"clip_norm" not in wire(TrainConfig())
    assert b"clip_norm" in wire(TrainConfig(clip_norm=1.0))
    with pytest.raises(ValidationError):
        TrainConfig(clip_norm=0.0)


def test_the_server_refuses_an_update_longer_than_the_bound() -> None:
    dp = ClientLevelDP(_plan(clip_norm=2.0))
    config, limits = dp.settings(TrainConfig(), UpdateLimits(n_weights=4))
    assert config.clip_norm == 2.0
    assert limits.max_update_norm == pytest.approx(2.0, rel=2e-5)
    plan = TaskPlan(ClientId(1), {ClusterId(0): np.zeros(4, np.float32)})

    def reply(norm: float) -> UpdateReply:
        delta = np.array([norm, 0, 0, 0], np.float32)
        return UpdateReply(
            cluster=0, delta=delta, n_samples=1, loss=0.1, samples_seen=1
        )

    assert check_update(reply(2.0), plan, 4, limits.max_update_norm) is None
    problem = check_update(reply(2.1), plan, 4, limits.max_update_norm)
    assert problem is not None and problem.startswith("delta norm 2.1 is above")
    # A scenario's smaller max_update_norm still holds.
    _, tighter = dp.settings(TrainConfig(), UpdateLimits(4, max_update_norm=1.0))
    assert tighter.max_update_norm == 1.0


# -- the server's noise and books ---------------------------------------------


def _zeros(clusters: int, size: int) -> dict[ClusterId, np.ndarray]:
    return {ClusterId(k): np.zeros(size, np.float32) for k in range(clusters)}


def test_each_clusters_sum_gets_noise_of_the_planned_deviation() -> None:
    plan = _plan(noise_multiplier=1.5, clip_norm=2.0, seed=3)
    sums = ClusterSums()
    size = 200_000
    models = _zeros(2, size)
    for cluster in (0, 1):
        sums.add(ClusterId(cluster), np.zeros(size, np.float32), 1.0)
    stds = ClientLevelDP(plan).noise(sums, models, planned=1, round=4)
    assert stds == [3.0, 3.0]  # z·C
    for cluster in (0, 1):
        drawn = sums.mean(ClusterId(cluster))  # over 1: the sum itself
        assert abs(drawn.std() - 3.0) < 0.02  # 4σ of the std's estimate
        assert abs(drawn.mean()) < 0.03
    assert not np.array_equal(sums.mean(ClusterId(0)), sums.mean(ClusterId(1)))
    # The same seed and round draw the same noise; another round another.
    again, other = ClusterSums(), ClusterSums()
    for target in (again, other):
        target.add(ClusterId(0), np.zeros(size, np.float32), 1.0)
    ClientLevelDP(plan).noise(again, models, planned=1, round=4)
    ClientLevelDP(plan).noise(other, models, planned=1, round=5)
    np.testing.assert_array_equal(again.mean(ClusterId(0)), sums.mean(ClusterId(0)))
    assert not np.array_equal(other.mean(ClusterId(0)), sums.mean(ClusterId(0)))


def test_a_cluster_no_client_chose_moves_by_the_planned_noise() -> None:
    # Three updates reach cluster 0 of three; clusters 1 and 2 still get
    # their noise, over the round's 4 planned clients: std z·C / 4.
    plan = _plan(noise_multiplier=1.5, clip_norm=2.0, seed=3)
    size = 200_000
    models = _zeros(3, size)
    sums = ClusterSums()
    for _ in range(3):
        sums.add(ClusterId(0), np.full(size, 0.25, np.float32), 1.0)
    assert sums.clusters == [0]
    stds = ClientLevelDP(plan).noise(sums, models, planned=4, round=0)
    assert stds == [3.0, 3.0, 3.0]
    new = sums.step(models)
    for cluster in (1, 2):
        moved = new[ClusterId(cluster)].astype(np.float64)
        assert abs(moved.std() - 3.0 / 4) < 0.01
        assert abs(moved.mean()) < 0.01
    # Cluster 0: its sum (0.75 a coordinate) over the 4 planned clients.
    assert abs(new[ClusterId(0)].mean() - 0.75 / 4) < 0.01


def test_the_step_reads_the_planned_count_not_the_true_one() -> None:
    # One client's update δ, or two clients' δ/2 each: the same sum, so the
    # same step, whatever the number of contributors (the true count is not
    # privatised; the planned one is public).
    plan = _plan(seed=5)
    models = _zeros(2, 1000)
    delta = np.linspace(-0.5, 0.5, 1000, dtype=np.float32)
    one, two = ClusterSums(), ClusterSums()
    one.add(ClusterId(0), delta, 1.0)
    two.add(ClusterId(0), delta / 2, 1.0)
    two.add(ClusterId(0), delta / 2, 1.0)
    steps = []
    for sums in (one, two):
        ClientLevelDP(plan).noise(sums, models, planned=6, round=2)
        steps.append(sums.step(models))
    for cluster in models:
        np.testing.assert_allclose(steps[0][cluster], steps[1][cluster], atol=1e-7)


def test_a_round_that_planned_nobody_releases_nothing() -> None:
    models = _zeros(2, 10)
    sums = ClusterSums()
    assert ClientLevelDP(_plan()).noise(sums, models, planned=0, round=0) == []
    assert sums.step(models) == models


def test_in_a_run_every_cluster_model_gets_the_noise(tmp_path: Path) -> None:
    # IFCA with 8 clusters and 6 clients: at least two clusters nobody
    # chose; each still moves, by noise of std z·C over the 6 planned.
    scenario = small_scenario(
        rounds=1,
        algorithm="ifca",
        algorithm_params={"ifca": {"clusters": 8}},
        dp=DPSpec(**CLIENT),  # type: ignore[arg-type]
    )

    async def one_round() -> tuple[Federation, dict[ClusterId, np.ndarray]]:
        federation = Federation(scenario, InlineRuntime(), tmp_path, config={})
        await federation.start()
        start = dict(federation.server.state.models)
        try:
            await federation.step(0)
        finally:
            await federation.close()
        return federation, start

    federation, start = asyncio.run(one_round())
    server = federation.server
    assert server.client_dp is not None
    std = server.client_dp.plan.noise_multiplier * 1.0 / 6  # C = 1, m = 6
    chosen = set(server.state.assignment.values())
    unchosen = [k for k in server.state.models if k not in chosen]
    assert len(unchosen) >= 2
    for k in unchosen:
        moved = server.state.models[k].astype(np.float64) - start[k]
        assert abs(moved.std() - std) < 0.1 * std


def test_the_books_spend_what_opacus_accounts() -> None:
    dp = ClientLevelDP(_plan(noise_multiplier=1.2, sample_rate=0.25))
    assert dp.spent() == 0.0
    for r in range(7):
        dp.close_round([1.0], planned=5, round=r)
    assert dp.spent() == _opacus_epsilon(1.2, 0.25, 7, 1e-5)


def test_the_planned_multiplier_spends_the_budget_over_the_rounds() -> None:
    scenario = small_scenario(rounds=12, dp=DPSpec(**CLIENT))  # type: ignore[arg-type]
    plan = plan_run(scenario).client_dp
    assert plan is not None and plan.rounds == 12 and plan.sample_rate == 1.0
    spent = _opacus_epsilon(plan.noise_multiplier, 1.0, 12, 1e-5)
    assert 10 - 0.01 <= spent <= 10
    assert _opacus_epsilon(plan.noise_multiplier * 0.98, 1.0, 12, 1e-5) > 10
    sampled = small_scenario(
        rounds=12,
        dp=DPSpec(**CLIENT),  # type: ignore[arg-type]
        algorithm_params={"fedavg": {"fraction": 0.5}},
    )
    half = plan_run(sampled).client_dp
    assert half is not None and half.sample_rate == 0.5
    assert half.noise_multiplier < plan.noise_multiplier  # sampling amplifies


@pytest.mark.parametrize("accountant", ["rdp", "prv"])
def test_the_chosen_accountant_plans_and_keeps_the_books(accountant: str) -> None:
    # z is planned by the chosen accountant (it spends the budget to Opacus'
    # tolerance there) and the books read ε from that accountant too.
    dp = DPSpec(epsilon=10.0, mechanism="client", accountant=accountant)  # type: ignore[arg-type]
    plan = plan_run(small_scenario(rounds=12, dp=dp)).client_dp
    assert plan is not None and plan.accountant == accountant
    z = plan.noise_multiplier
    spent = _opacus_epsilon(z, 1.0, 12, 1e-5, accountant)
    assert 10 - 0.05 <= spent <= 10 + 1e-6
    books = ClientLevelDP(plan)
    for r in range(7):
        books.close_round([1.0], planned=6, round=r)
    want = _opacus_epsilon(z, 1.0, 7, 1e-5, accountant)
    assert books.spent() == pytest.approx(want, rel=1e-3)
    assert books.summary()["accountant"] == accountant


def test_rdp_and_prv_plan_different_multipliers() -> None:
    # PRV's tighter accounting needs less noise for the same budget: the
    # choice is not ignored.
    planned = [
        plan_run(
            small_scenario(
                rounds=12,
                dp=DPSpec(epsilon=10.0, mechanism="client", accountant=a),  # type: ignore[arg-type]
            )
        ).client_dp
        for a in ("rdp", "prv")
    ]
    rdp, prv = (p.noise_multiplier for p in planned if p is not None)
    assert prv < rdp


def test_gdp_is_refused_for_client_level_dp_with_the_reason() -> None:
    with pytest.raises(ValidationError, match='"rdp" or "prv".*approximation'):
        DPSpec(epsilon=1, mechanism="client", accountant="gdp")


def _sampled(clients: int, fraction: float, **changes: object) -> ClientDPPlan:
    scenario = small_scenario(
        clients=clients,
        rounds=12,
        dp=DPSpec(**CLIENT),  # type: ignore[arg-type]
        algorithm_params={"fedavg": {"fraction": fraction}},
        **changes,
    )
    plan = plan_run(scenario).client_dp
    assert plan is not None
    return plan


def test_the_rate_accounted_is_the_share_a_round_really_samples() -> None:
    # One of 10 clients at fraction 0.05 is a rate of 0.1, not 0.05: the
    # plan's z spends at most ε at the rate the rounds really have.
    plan = _sampled(10, 0.05)
    assert plan.sample_rate == 0.1
    spent = _opacus_epsilon(plan.noise_multiplier, 0.1, 12, 1e-5)
    assert spent <= 10
    # Where round(f·n)/n is f, f is what is accounted.
    assert _sampled(20, 0.25).sample_rate == 0.25


def test_the_rate_covers_every_size_the_joiners_and_leavers_make() -> None:
    # 11 clients at fraction 0.1 sample 1 (rate 1/11); joiners take the
    # federation to 15, where round(1.5) = 2 of 15 train (rate 2/15).
    joined = _sampled(11, 0.1, events=[Join(start=1, every=1, until=4)])
    assert joined.sample_rate == pytest.approx(2 / 15)
    # 20 clients at 0.05 sample 1 (rate 0.05); 10 may leave: 1 of 10.
    left = _sampled(
        20, 0.05, events=[Leave(start=2, target="random:5", every=3, until=5)]
    )
    assert left.sample_rate == pytest.approx(1 / 10)
    for plan, sizes in ((joined, range(11, 16)), (left, range(10, 21))):
        for n in sizes:  # no round samples more than the plan's rate
            drawn = sample_clients(
                [ClientInfo(ClientId(i), n_train=1) for i in range(n)],
                0.1 if plan is joined else 0.05,
                np.random.default_rng(n),
            )
            assert len(drawn) / n <= plan.sample_rate


def test_a_pool_of_any_size_is_accounted_at_rate_one() -> None:
    # Online clients only (an availability schedule), or PACFL's described
    # clients only: the pool can shrink to one client, who then trains.
    assert _sampled(20, 0.05, availability="diurnal").sample_rate == 1.0
    # A leave of a whole group may leave one client too.
    group = _sampled(20, 0.05, events=[Leave(start=3, target="group:0")])
    assert group.sample_rate == 1.0
    pacfl = small_scenario(
        clients=20,
        rounds=12,
        algorithm="pacfl",
        dp=DPSpec(**CLIENT),  # type: ignore[arg-type]
        algorithm_params={"pacfl": {"fraction": 0.05}},
    )
    plan = plan_run(pacfl).client_dp
    assert plan is not None and plan.sample_rate == 1.0


# -- adaptive clipping ----------------------------------------------------------


def test_the_bounds_update_is_the_papers_geometric_step() -> None:
    # C·exp(−η(b̄ − γ)): 6 of 10 unclipped, γ = 0.5, η = 0.2.
    assert next_bound(2.0, 6.0, 10, 0.5, 0.2) == pytest.approx(2.0 * math.exp(-0.02))
    assert next_bound(2.0, 5.0, 10, 0.5, 0.2) == 2.0


def test_the_updates_multiplier_leaves_the_counts_share() -> None:
    # z_Δ = (z⁻² − (2σ_b)⁻²)^(−1/2)
    assert update_multiplier(1.0, 5.0) == pytest.approx((1 - 1 / 100) ** -0.5)
    with pytest.raises(ValueError, match="2σ_b > z"):
        update_multiplier(3.0, 1.0)
    plan = _plan(noise_multiplier=1.0, adaptive=True, count_noise=5.0)
    assert plan.update_noise_multiplier == pytest.approx((1 - 1 / 100) ** -0.5)


@pytest.mark.parametrize("quantile", [0.3, 0.5, 0.8])
def test_the_bound_tracks_the_target_quantile(quantile: float) -> None:
    # 100 clients a round whose update norms are lognormal: C settles near
    # the norms' `quantile`, from a start 10 times too small.
    plan = _plan(
        adaptive=True,
        clip_norm=0.1,
        target_quantile=quantile,
        noise_multiplier=0.5,
        count_noise=1.0,
        seed=1,
    )
    dp = ClientLevelDP(plan)
    rng = np.random.default_rng(0)
    bounds = []
    for r in range(400):
        norms = rng.lognormal(0.0, 0.5, size=100)
        clipped = np.minimum(norms, dp.clip_norm)
        dp.close_round(list(clipped), planned=100, round=r)
        bounds.append(dp.clip_norm)
    want = float(np.exp(0.5 * _normal_quantile(quantile)))
    settled = float(np.median(bounds[200:]))
    assert abs(settled - want) / want < 0.05


def _normal_quantile(q: float) -> float:
    from scipy.stats import norm

    return float(norm.ppf(q))


# -- the scenario's checks -------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"algorithm": "dcfl"}, "does not aggregate a round as each cluster's sum"),
        ({"algorithm": "fedavg", "aggregator": "median"}, 'aggregator = "median"'),
        ({"deadline": {"policy": "fraction", "fraction": 0.5}}, "fraction deadline"),
    ],
)
def test_a_run_client_dp_cannot_noise_is_refused(
    changes: dict[str, object], reason: str
) -> None:
    with pytest.raises(ValidationError, match=reason):
        small_scenario(dp=DPSpec(**CLIENT), **changes)  # type: ignore[arg-type]


def test_settings_of_the_other_mechanism_are_refused() -> None:
    with pytest.raises(ValidationError, match='horizon = "round" is local DP'):
        DPSpec(epsilon=1, mechanism="client", horizon="round")
    with pytest.raises(ValidationError, match="adaptive.*client-level DP"):
        DPSpec(epsilon=1, clipping="adaptive")


def test_the_default_count_noise_is_m_over_20_or_costs_at_most_10_percent() -> None:
    # Andrew et al.'s m/20 where it leaves z_Δ within 10 % of z (hundreds
    # of clients a round)...
    assert default_count_noise(1.0, 400) == 20.0
    assert update_multiplier(1.0, 20.0) < 1.001
    # ...else the σ_b at which z_Δ = 1.1·z (20 clients a round, z = 2.9,
    # where m/20 = 1 has no z_Δ at all).
    count = default_count_noise(2.9, 20)
    assert count > 20 / 20
    assert update_multiplier(2.9, count) == pytest.approx(1.1 * 2.9)


@pytest.mark.parametrize("algorithm", ["fedavg", "ifca"])
def test_adaptive_clipping_plans_on_quickstart_with_the_default_count_noise(
    algorithm: str,
) -> None:
    scenario = with_overrides(
        BUILTIN["quickstart"](),
        ["dp.epsilon=10", "dp.mechanism=client", "dp.clipping=adaptive"],
        algorithm=algorithm,
    )
    plan = plan_run(scenario).client_dp
    assert plan is not None and plan.adaptive
    z = plan.noise_multiplier
    assert z < plan.update_noise_multiplier <= 1.1 * z * (1 + 1e-9)


def test_a_count_noise_too_small_for_the_budget_is_refused() -> None:
    dp = DPSpec(epsilon=10, mechanism="client", clipping="adaptive", count_noise=0.1)
    with pytest.raises(ScenarioError, match="2σ_b > z"):
        plan_run(small_scenario(rounds=12, dp=dp))


# -- a whole run -----------------------------------------------------------------


def test_a_run_spends_its_budget_and_tells_it(tmp_path: Path) -> None:
    dp = DPSpec(
        epsilon=8.0,
        mechanism="client",
        clipping="adaptive",
        clip_norm=0.5,
        count_noise=5.0,
    )
    scenario = small_scenario(rounds=4, dp=dp)
    result = clusterfed.run(scenario, out=tmp_path / "a", workers=1)
    again = clusterfed.run(scenario, out=tmp_path / "b", workers=2)
    rows = result.rows
    assert result.summary["rejected_messages"] == 0
    spent = [r["epsilon_max"] for r in rows]
    assert spent == sorted(spent) and 8.0 - 0.01 <= spent[-1] <= 8.0
    assert all(c["epsilon"] == rows[-1]["epsilon_max"] for c in rows[-1]["clients"])
    privacy = result.summary["privacy"]
    assert privacy["mechanism"] == "client" and privacy["rounds"] == 4
    assert privacy["clip_norm_end"] != 0.5  # the bound moved
    for a, b in zip(rows, again.rows, strict=True):  # runtime-independent
        a.pop("wall_time"), b.pop("wall_time")
        assert a == b
