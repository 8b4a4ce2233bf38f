"""Local differential privacy through Opacus: budgets, noise, clipping, books."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from pydantic import ValidationError
from torch import nn

import clusterfed
from clusterfed.actors import Client, InlineRuntime, LocalTrainer, build_trainer
from clusterfed.actors.privacy import PrivacyBudgetError, PrivateTraining, epsilon_of
from clusterfed.algorithms import algorithms
from clusterfed.data import ClientSplit
from clusterfed.errors import ClusterfedError, ScenarioError
from clusterfed.federation import Federation
from clusterfed.models import build_model, get_flat, n_parameters
from clusterfed.models.registry import MODELS
from clusterfed.protocol import (
    ClusterModel,
    Envelope,
    ErrorReply,
    TrainConfig,
    TrainTask,
    UpdateReply,
    decode,
    encode,
)
from clusterfed.scenarios import (
    Join,
    ScenarioEngine,
    load_scenario,
    plan_run,
    with_overrides,
)
from clusterfed.scenarios.spec import DPSpec
from helpers import RecordingRuntime, opacus_hooks_round, read_rounds, small_scenario

DP = DPSpec(epsilon=10)
# Opacus' get_noise_multiplier stops within this much of the target ε.
TOLERANCE = 0.01


def _opacus_epsilon(history: list[tuple[float, float, int]], delta: float) -> float:
    """ε from Opacus' RDP accountant called directly, at its default orders
    (the ones clusterfed plans and reports with)."""
    from opacus.accountants import RDPAccountant

    accountant = RDPAccountant()
    accountant.history = list(history)
    return float(accountant.get_epsilon(delta))


def _opacus_loader(n: int, batch_size: int) -> tuple[float, int]:
    """Sampling rate and batches per epoch of Opacus' own Poisson DataLoader."""
    from opacus.data_loader import DPDataLoader
    from torch.utils.data import DataLoader, TensorDataset

    plain = DataLoader(TensorDataset(torch.zeros(n, 1)), batch_size=batch_size)
    loader = DPDataLoader.from_data_loader(plain)
    return loader.sample_rate, len(loader)


def _client(row: dict[str, Any], cid: int) -> dict[str, Any]:
    return next(c for c in row["clients"] if c["id"] == cid)


# -- the scenario section -----------------------------------------------------


def test_a_dp_table_in_toml_validates_with_the_paper_defaults(tmp_path: Path) -> None:
    path = tmp_path / "private.toml"
    path.write_text("clients = 4\nrounds = 2\n\n[dp]\nepsilon = 10\n")
    dp = load_scenario(path).dp
    assert dp == DPSpec(epsilon=10.0, delta=1e-5, max_grad_norm=1.0)
    assert dp is not None and dp.accountant == "rdp"


@pytest.mark.parametrize(
    ("table", "named"),
    [
        ("epsilon = -1", "dp.epsilon"),
        ("epsilon = 0", "dp.epsilon"),
        ("delta = 1e-5", "dp.epsilon"),  # the budget has no default
        ("epsilon = 10\ndelta = 1.5", "dp.delta"),
        ("epsilon = 10\nmax_grad_norm = 0", "dp.max_grad_norm"),
        ('epsilon = 10\naccountant = "moments"', "dp.accountant"),
        ("epsilon = 10\nsigma = 1.0", "dp.sigma"),
        ("epsilon = inf", "dp.epsilon"),
    ],
)
def test_bad_dp_values_are_refused_naming_the_field(
    tmp_path: Path, table: str, named: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(f"[dp]\n{table}\n")
    with pytest.raises(ScenarioError, match=named.replace(".", r"\.")):
        load_scenario(path)


def test_set_dp_epsilon_turns_dp_on_and_dp_off_turns_it_off() -> None:
    on = with_overrides(small_scenario(), ["dp.epsilon=10", "dp.max_grad_norm=0.5"])
    assert on.dp == DPSpec(epsilon=10, max_grad_norm=0.5)
    for off in ("dp=off", "dp=false", "dp=none", 'dp="OFF"'):
        assert with_overrides(on, [off]).dp is None
    with pytest.raises(ScenarioError, match="dp"):
        with_overrides(small_scenario(), ["dp=true"])


def test_dp_off_writes_null_epsilons(tmp_path: Path) -> None:
    scenario = with_overrides(small_scenario(rounds=1, dp=DP), ["dp=off"])
    assert all(spec.privacy is None for spec in plan_run(scenario).clients)
    result = clusterfed.run(scenario, out=tmp_path, workers=1)
    assert "privacy" not in result.summary
    (row,) = read_rounds(tmp_path)
    assert row["epsilon_max"] is None
    assert all(c["epsilon"] is None for c in row["clients"])


# -- planning -----------------------------------------------------------------


def test_each_client_plans_its_noise_over_its_own_participation() -> None:
    scenario = small_scenario(rounds=4, dp=DP)
    plan = plan_run(scenario)
    for spec in plan.clients:
        privacy = spec.privacy
        assert privacy is not None and privacy.rounds == 4
        rate, per_epoch = _opacus_loader(len(spec.train), scenario.train.batch_size)
        assert privacy.sample_rate == rate
        assert privacy.steps == 4 * scenario.train.epochs * per_epoch
        # The smallest σ for the budget: its 4 rounds spend ε = 10 to
        # Opacus' tolerance, not less (over-noising) nor more.
        sigma = privacy.noise_multiplier
        spent = _opacus_epsilon([(sigma, rate, privacy.steps)], 1e-5)
        assert 10 - TOLERANCE <= spent <= 10
        assert _opacus_epsilon([(sigma * 0.98, rate, privacy.steps)], 1e-5) > 10
    assert len({s.privacy.run_id for s in plan.clients}) == 1  # type: ignore[union-attr]
    assert plan_run(scenario).run_id != plan.run_id  # books never cross runs


def _opacus_plan(rate: float, steps: int) -> float:
    """σ from Opacus' own planner at its default orders."""
    from opacus.accountants.utils import get_noise_multiplier

    return float(
        get_noise_multiplier(
            target_epsilon=10,
            target_delta=1e-5,
            sample_rate=rate,
            steps=steps,
            accountant="rdp",
        )
    )


def test_sigma_and_epsilon_are_opacus_own_at_its_default_orders() -> None:
    # Every client of a run with joiners, the joiners' shorter plans
    # included: the planned σ is what Opacus' planner gives, and the books'
    # ε after any steps is its accountant's, bit for bit.
    scenario = small_scenario(rounds=5, dp=DP, events=[Join(start=2, every=1)])
    plan = plan_run(scenario)
    split = ClientSplit(np.asarray(plan.clients[0].train), np.asarray([0]), 0)
    joiners = [plan.client_spec(20 + r, split, 0, 0, first_round=r) for r in (2, 4)]
    specs = [*plan.clients, *joiners]
    assert {s.privacy.rounds for s in specs} == {5, 3, 1}  # type: ignore[union-attr]
    for spec in specs:
        privacy = spec.privacy
        assert privacy is not None
        rate, steps = privacy.sample_rate, privacy.steps
        assert privacy.noise_multiplier == _opacus_plan(rate, steps)
        for taken in (1, steps // 2, steps):
            history = ((privacy.noise_multiplier, rate, taken),)
            ours = epsilon_of("rdp", history, 1e-5)
            assert ours == _opacus_epsilon(list(history), 1e-5)
    # Two entries (a drift's new rate), as the books keep them.
    two = ((1.1, 0.05, 40), (0.9, 0.1, 7))
    assert epsilon_of("rdp", two, 1e-5) == _opacus_epsilon(list(two), 1e-5)


def test_a_client_that_joins_late_plans_over_the_rounds_left() -> None:
    plan = plan_run(small_scenario(rounds=5, dp=DP, events=[Join(start=3)]))
    engine = ScenarioEngine(plan)
    runtime = RecordingRuntime()
    for r in range(4):
        asyncio.run(engine.begin_round(runtime, r, 0.0))
    (joiner,) = runtime.added
    assert joiner.privacy is not None and joiner.privacy.rounds == 2
    _, per_epoch = _opacus_loader(len(joiner.train), 16)
    assert joiner.privacy.steps == 2 * per_epoch
    sigma, rate = joiner.privacy.noise_multiplier, joiner.privacy.sample_rate
    spent = _opacus_epsilon([(sigma, rate, 2 * per_epoch)], 1e-5)
    assert 10 - TOLERANCE <= spent <= 10  # its budget spread over 2 rounds, not 5


@pytest.mark.parametrize(("horizon", "rounds"), [("run", 4), ("round", 1)])
def test_the_plan_counts_local_epochs_over_its_horizon(
    horizon: str, rounds: int
) -> None:
    # 3 local epochs: σ spends ε over the 4 rounds' steps (horizon "run") or
    # over one round's steps (horizon "round"), 3 epochs of steps each.
    dp = DPSpec(epsilon=10, horizon=horizon)  # type: ignore[arg-type]
    scenario = small_scenario(
        rounds=4, dp=dp, train=TrainConfig(batch_size=16, epochs=3)
    )
    for spec in plan_run(scenario).clients:
        privacy = spec.privacy
        assert privacy is not None and privacy.horizon == horizon
        rate, per_epoch = _opacus_loader(len(spec.train), 16)
        assert privacy.rounds == rounds and privacy.steps == rounds * 3 * per_epoch
        spent = _opacus_epsilon([(privacy.noise_multiplier, rate, privacy.steps)], 1e-5)
        assert 10 - TOLERANCE <= spent <= 10


def test_a_per_round_budget_needs_less_noise_than_a_run_budget() -> None:
    def sigmas(horizon: str) -> list[float]:
        dp = DPSpec(epsilon=10, horizon=horizon)  # type: ignore[arg-type]
        plan = plan_run(small_scenario(rounds=4, dp=dp))
        return [s.privacy.noise_multiplier for s in plan.clients]  # type: ignore[union-attr]

    assert all(r < w for r, w in zip(sigmas("round"), sigmas("run"), strict=True))


def test_an_unreachable_budget_is_refused_before_the_run() -> None:
    with pytest.raises(ScenarioError, match="dp.epsilon"):
        plan_run(small_scenario(dp=DPSpec(epsilon=1e-9, delta=1e-12)))


# -- training -----------------------------------------------------------------


def _data(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(n, 1, 4, 4, generator=gen)
    return x, (x.flatten(1).sum(1) > 8).long()


def _tiny_trainer(n: int, privacy: PrivateTraining | None) -> LocalTrainer:
    x, y = _data(n)
    model = build_model("mlp", (1, 4, 4), 2, hidden=[8])
    return LocalTrainer(model, x, y, x, y, seed=0, privacy=privacy)


def _weights() -> np.ndarray:
    return get_flat(build_model("mlp", (1, 4, 4), 2, hidden=[8], seed=1))


def _clip_only(max_grad_norm: float) -> PrivateTraining:
    """Clipping without noise (σ = 0) and without a budget to run out of."""
    return PrivateTraining(
        epsilon=math.inf, delta=1e-5, max_grad_norm=max_grad_norm, noise_multiplier=0
    )


def test_one_step_moves_at_most_lr_times_the_clipping_bound() -> None:
    # With as many samples as a batch, Poisson sampling takes every sample in
    # the one step of the epoch; without noise the step is the mean of the
    # clipped per-sample gradients, whose norm is at most max_grad_norm.
    config = TrainConfig(lr=0.5, momentum=0.0, batch_size=8, epochs=1)
    bound = config.lr * 0.01
    plain = _tiny_trainer(8, None).train(_weights(), config, round=0).delta
    clipped = _tiny_trainer(8, _clip_only(0.01)).train(_weights(), config, round=0)
    assert np.linalg.norm(plain) > 10 * bound  # clipping has work to do
    assert 0 < np.linalg.norm(clipped.delta) <= bound * (1 + 1e-5)


def test_one_sample_is_clipped_to_the_bound_exactly() -> None:
    config = TrainConfig(lr=0.5, momentum=0.0, batch_size=1, epochs=1)
    plain = _tiny_trainer(1, None).train(_weights(), config, round=0).delta
    clipped = _tiny_trainer(1, _clip_only(0.01)).train(_weights(), config, round=0)
    # One sample, one step: the update is -lr × its gradient scaled to norm C.
    expected = plain * (config.lr * 0.01 / np.linalg.norm(plain))
    np.testing.assert_allclose(clipped.delta, expected, rtol=1e-4, atol=1e-8)


def test_the_proximal_term_still_pulls_towards_the_received_weights() -> None:
    # FedProx's term reads no data: it joins the gradient after the noise.
    config = TrainConfig(lr=0.2, momentum=0.0, batch_size=8, epochs=5)
    plain = _tiny_trainer(30, _clip_only(1.0)).train(_weights(), config, 0).delta
    prox = _tiny_trainer(30, _clip_only(1.0)).train(
        _weights(), config.model_copy(update={"mu": 2.0}), 0
    )
    assert np.linalg.norm(prox.delta) < np.linalg.norm(plain)


def test_the_accountant_records_the_planned_rate_and_steps() -> None:
    privacy = PrivateTraining(
        epsilon=10, delta=1e-5, max_grad_norm=1.0, noise_multiplier=1.2
    )
    trainer = _tiny_trainer(30, privacy)
    config = TrainConfig(batch_size=8, epochs=2)
    result = trainer.train(_weights(), config, round=0)
    # 30 samples in batches of 8: 4 batches, so 4 Poisson steps an epoch at
    # rate 1/4; 2 epochs are 8 steps.
    assert privacy.engine.accountant.history == [(1.2, 0.25, 8)]
    assert result.epsilon == privacy.spent()
    assert result.epsilon == pytest.approx(_opacus_epsilon([(1.2, 0.25, 8)], 1e-5))
    assert not hasattr(trainer.model, "autograd_grad_sample_hooks")  # unwrapped


@pytest.mark.parametrize("noise", [0.0, 1.1])
def test_one_backward_clipping_equals_opacus_hooks(noise: float) -> None:
    # Clipping at 0.05 binds for every sample of this model and data.
    config = TrainConfig(lr=0.3, momentum=0.9, batch_size=8, epochs=2)

    def private() -> PrivateTraining:
        return PrivateTraining(
            epsilon=math.inf, delta=1e-5, max_grad_norm=0.05, noise_multiplier=noise
        )

    ours = _tiny_trainer(30, private())
    result = ours.train(_weights(), config, round=3)
    reference = _tiny_trainer(30, private())
    expected = opacus_hooks_round(reference, _weights(), config, round=3)
    assert np.linalg.norm(expected) > 0
    np.testing.assert_allclose(result.delta, expected, rtol=1e-5, atol=1e-7)
    assert ours.privacy is not None and reference.privacy is not None
    history = reference.privacy.engine.accountant.history
    assert ours.privacy.engine.accountant.history == history


def _train_task(weights: np.ndarray, config: TrainConfig, round: int = 0) -> bytes:
    task = TrainTask(models=(ClusterModel(cluster=0, weights=weights),), config=config)
    return encode(
        Envelope(
            msg_id=f"server:{round}",
            sender="server",
            recipient="client/0",
            round=round,
            payload=task,
        )
    )


CONFIG = TrainConfig(lr=0.05, momentum=0.9, batch_size=16)


def _reply(client: Client, weights: np.ndarray, round: int = 0) -> Any:
    data = asyncio.run(client.handle(_train_task(weights, CONFIG, round)))
    return decode(data).payload


def test_dp_noise_changes_the_uploaded_delta_under_the_same_seed() -> None:
    private = plan_run(small_scenario(dp=DP))
    plain = plan_run(small_scenario())
    spec = private.clients[0]
    assert spec.privacy is not None
    weights = private.initial
    noisy, plain_reply = (_reply(Client(s), weights) for s in (spec, plain.clients[0]))
    assert isinstance(noisy, UpdateReply) and isinstance(plain_reply, UpdateReply)
    assert plain_reply.epsilon is None and noisy.epsilon > 0
    assert not np.allclose(noisy.delta, plain_reply.delta)
    # The same client, batches and clipping without noise: what differs is
    # the noise, and it is no rounding error.
    quiet = build_trainer(spec)
    quiet.privacy = _clip_only(spec.privacy.max_grad_norm)
    clipped = quiet.train(weights, CONFIG, round=0).delta
    gap = np.linalg.norm(noisy.delta - clipped)
    assert gap > 0.1 * np.linalg.norm(clipped)


def test_a_client_refuses_the_round_that_would_exceed_its_budget() -> None:
    plan = plan_run(small_scenario(rounds=2, dp=DP))
    client = Client(plan.clients[0])
    weights = plan.initial
    spent = [_reply(client, weights, r).epsilon for r in range(2)]
    assert 0 < spent[0] < spent[1] <= 10
    refused = _reply(client, weights, 2)
    assert isinstance(refused, ErrorReply) and refused.code == "budget_spent"
    assert f"privacy budget spent: ε = {spent[1]:.2f} of 10" in refused.message


def test_a_drift_keeps_the_accountant_a_new_run_does_not() -> None:
    plan = plan_run(small_scenario(dp=DP))
    spec = plan.clients[0]
    client = Client(spec)
    first = client.trainer
    assert first.privacy is not None
    client.update(spec.model_copy(update={"rotation": 90.0}))
    drifted = client.trainer
    assert drifted is not first and drifted.privacy is first.privacy
    again = plan_run(small_scenario(dp=DP)).clients[0]
    client.update(again)
    assert client.trainer.privacy is not first.privacy


# -- whole runs ---------------------------------------------------------------


def test_a_run_planned_for_epsilon_10_spends_10(tmp_path: Path) -> None:
    # Every client trains in each of the 3 rounds it planned for: each ends at
    # its budget (to Opacus' tolerance), never past it, and never far below
    # it, which would be noise it did not need.
    result = clusterfed.run(small_scenario(rounds=3, dp=DP), out=tmp_path, workers=1)
    rows = read_rounds(tmp_path)
    spent = [c["epsilon"] for c in rows[-1]["clients"]]
    assert len(spent) == 6
    assert all(10 - TOLERANCE <= e <= 10 for e in spent), spent
    assert rows[-1]["epsilon_max"] == max(spent) == result.summary["epsilon_max"]
    maxima = [r["epsilon_max"] for r in rows]
    assert maxima == sorted(maxima) and 0 < maxima[0] < maxima[1] < maxima[2]
    assert result.summary["failed_updates"] == 0
    # The summary shows each client's σ and steps as planned, and ε as spent.
    books = result.summary["privacy"]
    assert books["horizon"] == "run" and books["epsilon"] == 10
    plans = {s.id: s.privacy for s in plan_run(small_scenario(rounds=3, dp=DP)).clients}
    for row in rows[-1]["clients"]:
        entry, plan = books["clients"][str(row["id"])], plans[row["id"]]
        assert plan is not None
        assert entry["noise_multiplier"] == plan.noise_multiplier
        assert entry["planned_steps"] == plan.steps == 3 * entry["steps_per_round"]
        assert entry["planned_rounds"] == 3
        assert entry["epsilon_spent"] == row["epsilon"]


def test_a_per_round_budget_lets_the_total_pass_epsilon(tmp_path: Path) -> None:
    # dp.horizon=round: each round may spend ε = 10, so three rounds spend
    # more than 10 in all, and the books say so; nobody refuses a round.
    scenario = with_overrides(small_scenario(rounds=3, dp=DP), ["dp.horizon=round"])
    result = clusterfed.run(scenario, out=tmp_path, workers=1)
    assert result.summary["failed_updates"] == 0
    assert result.summary["epsilon_max"] > 10 + TOLERANCE
    books = result.summary["privacy"]
    assert books["horizon"] == "round"
    assert all(
        c["planned_rounds"] == 1 and c["epsilon_spent"] > 10 + TOLERANCE
        for c in books["clients"].values()
    )


def test_a_private_run_is_reproducible_with_its_seed(tmp_path: Path) -> None:
    scenario = small_scenario(rounds=2, dp=DP, events=[Join(start=1)])
    clusterfed.run(scenario, out=tmp_path / "a", workers=1)
    clusterfed.run(scenario, out=tmp_path / "b", workers=1)
    clusterfed.run(scenario, out=tmp_path / "pool", workers=2)
    runs = [read_rounds(tmp_path / name) for name in ("a", "b", "pool")]
    for rows in runs:
        for row in rows:
            row.pop("wall_time")
    assert runs[0] == runs[1] == runs[2]
    assert runs[0][-1]["epsilon_max"] > 0


# Rounds are synchronous: fedasync and fedbuff have no such mode; FedEM
# declares no DP path (test_a_strategy_without_dp_is_refused_with_dp).
@pytest.mark.parametrize(
    "algorithm",
    sorted(n for n, c in algorithms().items() if not c.async_only and c.supports_dp),
)
def test_dp_works_with_every_algorithm(tmp_path: Path, algorithm: str) -> None:
    result = clusterfed.run(
        small_scenario(rounds=2, algorithm=algorithm, dp=DP), out=tmp_path, workers=1
    )
    assert result.summary["failed_updates"] == 0
    assert result.summary["rejected_messages"] == 0
    # a client that trained in both rounds spent its whole budget, no less
    assert 10 - TOLERANCE <= result.summary["epsilon_max"] <= 10


def test_a_strategy_without_dp_is_refused_with_dp() -> None:
    assert [n for n, c in algorithms().items() if not c.supports_dp] == ["fedem"]
    with pytest.raises(ValidationError, match="'fedem' has no local-DP training"):
        small_scenario(algorithm="fedem", dp=DP)
    # A private client refuses a weighted (FedEM) task itself, and spends nothing.
    privacy = _clip_only(1.0)
    trainer = _tiny_trainer(8, privacy)
    with pytest.raises(ClusterfedError, match="has no DP path"):
        trainer.train(_weights(), TrainConfig(), 0, sample_weights=np.ones(8))
    assert privacy.engine.accountant.history == []


def test_a_spent_budget_is_recorded_as_a_failed_update(tmp_path: Path) -> None:
    # The clients plan for 2 rounds; a third is more than their budget allows.
    scenario = small_scenario(rounds=2, dp=DP)

    async def three_rounds() -> None:
        federation = Federation(scenario, InlineRuntime(), tmp_path, config={})
        await federation.start()
        try:
            for r in range(3):
                await federation.step(r)
        finally:
            await federation.close()

    asyncio.run(three_rounds())
    rows = read_rounds(tmp_path)
    assert rows[1]["failed_updates"] == 0 and rows[2]["failed_updates"] == 6
    for c in rows[2]["clients"]:
        assert c["failed"] and not c["trained"]
        assert c["reason"].startswith("budget_spent: privacy budget spent: ε =")
        assert "of 10" in c["reason"]
        assert c["epsilon"] == _client(rows[1], c["id"])["epsilon"] <= 10
    assert rows[2]["epsilon_max"] == rows[1]["epsilon_max"] <= 10


# -- models -------------------------------------------------------------------


def _batch_norm_mlp(input_shape: Any, n_classes: int) -> nn.Module:
    width = int(np.prod(input_shape))
    return nn.Sequential(
        nn.Flatten(), nn.Linear(width, 16), nn.BatchNorm1d(16), nn.ReLU(),
        nn.Linear(16, n_classes),
    )  # fmt: skip


class _ScaledLinear(nn.Linear):
    """A layer with a buffer beside its weights: no per-sample gradient."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.register_buffer("scale", torch.ones(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * self.scale


def _buffered_mlp(input_shape: Any, n_classes: int) -> nn.Module:
    return nn.Sequential(nn.Flatten(), _ScaledLinear(int(np.prod(input_shape)), 10))


def test_batch_norm_is_fixed_by_opacus(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(MODELS, "bn_mlp", _batch_norm_mlp)
    scenario = small_scenario(rounds=1, dp=DP, model={"name": "bn_mlp"})
    plan = plan_run(scenario)
    trainer = Client(plan.clients[0]).trainer
    assert not any(isinstance(m, nn.BatchNorm1d) for m in trainer.model.modules())
    assert any(isinstance(m, nn.GroupNorm) for m in trainer.model.modules())
    assert plan.initial.shape == (n_parameters(trainer.model),)
    result = clusterfed.run(scenario, out=tmp_path, workers=1)
    assert result.summary["failed_updates"] == 0


def test_a_model_opacus_cannot_handle_is_refused_naming_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(MODELS, "buffered", _buffered_mlp)
    scenario = small_scenario(dp=DP, model={"name": "buffered"})
    with pytest.raises(ScenarioError, match=r"model: 'buffered'.*buffers"):
        plan_run(scenario)
    plan_run(small_scenario(model={"name": "buffered"}))  # fine without DP


def test_a_plain_trainer_has_no_budget_to_check() -> None:
    assert _tiny_trainer(30, None).check_budget(TrainConfig()) is None


def test_the_budget_check_counts_every_epoch_of_the_task() -> None:
    # 30 samples in batches of 8: 4 Poisson steps an epoch at rate 1/4 (what
    # Opacus' DataLoader gives). With σ = 1.0 one epoch spends ε1 and two
    # spend ε2 > ε1 (Opacus' own RDP accountant, at δ = 1e-5); a budget
    # between them allows a 1-epoch task and refuses a 2-epoch one.
    from opacus.accountants import RDPAccountant

    def spent(steps: int) -> float:
        accountant = RDPAccountant()
        accountant.history = [(1.0, 0.25, steps)]
        return accountant.get_epsilon(delta=1e-5)

    one, two = spent(4), spent(8)
    assert two > 1.2 * one
    budget = (one + two) / 2

    def trainer() -> LocalTrainer:
        privacy = PrivateTraining(
            epsilon=budget, delta=1e-5, max_grad_norm=1.0, noise_multiplier=1.0
        )
        return _tiny_trainer(30, privacy)

    single = trainer().train(_weights(), TrainConfig(batch_size=8, epochs=1), 0)
    assert single.epsilon is not None and single.epsilon <= budget
    refusing = trainer()
    # nothing spent yet: the refusal reports ε = 0 of the budget
    with pytest.raises(PrivacyBudgetError, match=r"privacy budget spent: ε = 0\.00 of"):
        refusing.train(_weights(), TrainConfig(batch_size=8, epochs=2), 0)
    assert refusing.privacy is not None
    assert refusing.privacy.engine.accountant.history == []  # nothing trained


def test_a_per_round_budget_trains_every_round_and_reports_the_total() -> None:
    # σ = 1.0 over 4 steps an epoch at rate 1/4: one round spends ε1 (Opacus'
    # RDP accountant). With a budget just above ε1, per round the client
    # trains three rounds and reports the total ε of 12 steps, beyond the
    # budget; per run it refuses the second round.
    one = _opacus_epsilon([(1.0, 0.25, 4)], 1e-5)
    config = TrainConfig(batch_size=8, epochs=1)

    def trainer(horizon: str) -> LocalTrainer:
        privacy = PrivateTraining(
            epsilon=1.01 * one,
            delta=1e-5,
            max_grad_norm=1.0,
            noise_multiplier=1.0,
            horizon=horizon,  # type: ignore[arg-type]
        )
        return _tiny_trainer(30, privacy)

    per_round = trainer("round")
    results = [per_round.train(_weights(), config, r) for r in range(3)]
    assert per_round.privacy is not None
    assert per_round.privacy.engine.accountant.history == [(1.0, 0.25, 12)]
    total = _opacus_epsilon([(1.0, 0.25, 12)], 1e-5)
    assert results[-1].epsilon == pytest.approx(total)
    assert total > 1.5 * one  # honest books: more than one round's budget
    per_run = trainer("run")
    per_run.train(_weights(), config, 0)
    with pytest.raises(PrivacyBudgetError, match="privacy budget spent"):
        per_run.train(_weights(), config, 1)


def test_a_round_larger_than_a_per_round_budget_is_refused() -> None:
    one = _opacus_epsilon([(1.0, 0.25, 4)], 1e-5)
    privacy = PrivateTraining(
        epsilon=1.01 * one,
        delta=1e-5,
        max_grad_norm=1.0,
        noise_multiplier=1.0,
        horizon="round",
    )
    trainer = _tiny_trainer(30, privacy)
    with pytest.raises(PrivacyBudgetError, match="privacy budget per round: this"):
        trainer.train(_weights(), TrainConfig(batch_size=8, epochs=2), 0)
    assert privacy.engine.accountant.history == []


def test_an_unknown_horizon_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="horizon must be 'run' or 'round', got 'x'"):
        PrivateTraining(
            epsilon=10,
            delta=1e-5,
            max_grad_norm=1.0,
            noise_multiplier=1.0,
            horizon="x",  # type: ignore[arg-type]
        )


def test_an_unknown_accountant_is_refused_naming_it() -> None:
    with pytest.raises(
        ValueError, match="accountant must be one of rdp, prv, gdp, got 'moments'"
    ):
        PrivateTraining(
            epsilon=10,
            delta=1e-5,
            max_grad_norm=1.0,
            noise_multiplier=1.0,
            accountant="moments",
        )


def test_a_gdp_client_refuses_a_round_at_another_sampling_rate() -> None:
    # Opacus' Gaussian accountant needs one σ and one rate for the whole run;
    # a task in batches of 4 instead of 8 changes the rate from 1/4 to 1/8.
    privacy = PrivateTraining(
        epsilon=100,
        delta=1e-5,
        max_grad_norm=1.0,
        noise_multiplier=1.0,
        accountant="gdp",
    )
    trainer = _tiny_trainer(30, privacy)
    trainer.train(_weights(), TrainConfig(batch_size=8), 0)
    assert privacy.engine.accountant.history == [(1.0, 0.25, 4)]
    with pytest.raises(
        PrivacyBudgetError,
        match="privacy budget cannot be accounted: .*have to stay constant",
    ):
        trainer.train(_weights(), TrainConfig(batch_size=4), 1)
    assert privacy.engine.accountant.history == [(1.0, 0.25, 4)]  # not trained


def test_every_problem_opacus_finds_is_named_in_one_line() -> None:
    from clusterfed.actors.privacy import private_model

    model = nn.Sequential(nn.Flatten(), _ScaledLinear(16, 8), _ScaledLinear(8, 2))
    with pytest.raises(ValueError) as refused:
        private_model(model)
    prefix = "Opacus cannot train it privately: "
    message = str(refused.value)
    assert message.startswith(prefix)
    problems = message[len(prefix) :].split("; ")
    assert len(problems) == 2
    assert all(p.startswith("Model contains") and p.endswith(").") for p in problems)
    assert "buffers" in problems[0] and "(1:_ScaledLinear" in problems[0]
    assert "buffers" in problems[1] and "(2:_ScaledLinear" in problems[1]
