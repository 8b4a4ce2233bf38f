"""Client-level DP (DP-FedAvg) on the issue's two target scenarios: a few
rounds of `quickstart` and of `dcfl-fmnist` with FedAvg end to end, the
refusal of DCFL and CFL there, and the plans of `dcfl-fmnist`'s late
joiners (planning only, no training)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import clusterfed
from clusterfed.actors.privacy import epsilon_of, poisson_steps, quiet_opacus
from clusterfed.data.datasets import available
from clusterfed.errors import ScenarioError
from clusterfed.scenarios import BUILTIN, ScenarioEngine, plan_run, with_overrides
from helpers import RecordingRuntime

FMNIST = pytest.mark.skipif(
    not available("fashion_mnist"), reason="needs Fashion-MNIST"
)
CLIENT = ["dp.epsilon=10", "dp.mechanism=client"]


def _opacus_plan(rate: float, steps: int) -> float:
    """z from Opacus' own planner (ε = 10, δ = 1e-5, its default orders)."""
    from opacus.accountants.utils import get_noise_multiplier

    with quiet_opacus():
        return float(
            get_noise_multiplier(
                target_epsilon=10, target_delta=1e-5, sample_rate=rate, steps=steps
            )
        )


def _check_run(result: Any, rounds: int) -> None:
    """A client-level DP run: every round accounted, ε growing to the
    budget, every client's ε the server's, no update refused."""
    rows, summary = result.rows, result.summary
    assert len(rows) == rounds and summary["rejected_messages"] == 0
    privacy = summary["privacy"]
    assert privacy["mechanism"] == "client" and privacy["rounds"] == rounds
    spent = [r["epsilon_max"] for r in rows]
    assert spent == sorted(spent) and 10 - 0.01 <= spent[-1] <= 10
    for row in rows:
        assert {c["epsilon"] for c in row["clients"]} == {row["epsilon_max"]}
    assert summary["final_mean_acc"] is not None


@pytest.mark.parametrize("clipping", ["fixed", "adaptive"])
def test_quickstart_runs_dp_fedavg(tmp_path: Path, clipping: str) -> None:
    result = clusterfed.run(
        "quickstart",
        out=tmp_path,
        rounds=3,
        clients=6,
        overrides=[*CLIENT, f"dp.clipping={clipping}"],
        workers=1,
    )
    _check_run(result, 3)
    assert result.summary["privacy"]["clipping"] == clipping


@FMNIST
# Its joins (from round 10) and drifts (from round 5) fall after 2 rounds.
@pytest.mark.filterwarnings("ignore:events.*never fires")
def test_dcfl_fmnist_runs_dp_fedavg_with_fedavg(tmp_path: Path) -> None:
    # Batch 256 keeps a round's local training to a few steps a client.
    result = clusterfed.run(
        "dcfl-fmnist",
        out=tmp_path,
        algorithm="fedavg",
        rounds=2,
        clients=8,
        overrides=["dp.mechanism=client", "train.batch_size=256"],
        workers=1,
    )
    _check_run(result, 2)


@pytest.mark.parametrize("algorithm", ["dcfl", "cfl"])
def test_dcfl_fmnist_refuses_dp_fedavg_for_dcfl_and_cfl(algorithm: str) -> None:
    with pytest.raises(ScenarioError) as refused:
        with_overrides(
            BUILTIN["dcfl-fmnist"](), ["dp.mechanism=client"], algorithm=algorithm
        )
    said = str(refused.value)
    assert "reads each client's own update" in said and "fedavg" in said


@FMNIST
def test_dcfl_fmnist_joiners_raise_the_rate_dp_fedavg_accounts() -> None:
    # dcfl-fmnist's own schedule: 20 clients, a joiner every 10 rounds from
    # round 10 (25 by round 50). At fraction 0.15 a round samples 3 of 20
    # (0.15) but 4 of 24 (1/6): z is Opacus' for 1/6 over the 60 rounds,
    # and a client sampled at that rate every round spends at most ε.
    scenario = with_overrides(
        BUILTIN["dcfl-fmnist"](),
        ["dp.mechanism=client", "algorithm_params.fedavg.fraction=0.15"],
        algorithm="fedavg",
    )
    plan = plan_run(scenario).client_dp
    assert plan is not None
    assert plan.sample_rate == pytest.approx(4 / 24)
    assert plan.noise_multiplier == _opacus_plan(4 / 24, 60)
    spent = epsilon_of("rdp", ((plan.noise_multiplier, 4 / 24, 60),), 1e-5)
    assert 10 - 0.01 <= spent <= 10


@FMNIST
def test_dcfl_fmnist_late_joiners_plan_local_dp_over_the_rounds_left() -> None:
    # Local DP (the scenario's own `dp`) on dcfl-fmnist's schedule: each
    # joiner's σ is Opacus' for its own steps from the round it joins to the
    # 60th, which then spend ε = 10 to Opacus' tolerance, not 60 rounds'.
    plan = plan_run(BUILTIN["dcfl-fmnist"]())
    engine = ScenarioEngine(plan)
    runtime = RecordingRuntime()
    joined: dict[int, int] = {}
    for r in range(60):
        before = len(runtime.added)
        asyncio.run(engine.begin_round(runtime, r, 0.0))
        joined.update({spec.id: r for spec in runtime.added[before:]})
    assert sorted(joined.values()) == [10, 20, 30, 40, 50]
    for spec in runtime.added:
        privacy = spec.privacy
        assert privacy is not None and privacy.rounds == 60 - joined[spec.id]
        rate, steps = privacy.sample_rate, privacy.steps
        # 1 local epoch of Opacus' Poisson steps at the batch, each round.
        batch = BUILTIN["dcfl-fmnist"]().train.batch_size
        assert (rate, steps) == (
            poisson_steps(len(spec.train), batch)[0],
            privacy.rounds * poisson_steps(len(spec.train), batch)[1],
        )
        assert privacy.noise_multiplier == _opacus_plan(rate, steps)
        spent = epsilon_of("rdp", ((privacy.noise_multiplier, rate, steps),), 1e-5)
        assert 10 - 0.01 <= spent <= 10
