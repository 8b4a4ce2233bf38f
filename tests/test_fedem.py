"""FedEM: the E-step against the authors' code's formula and a brute-force
loop, the weighted local step against torch autograd of the written loss,
the mixture's prediction against the code's sum of softmaxes, the
aggregation by hand, the wire and the server's checks, the conformance
suite, FedEM with one component against FedAvg, and a short digits run."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from numpy.testing import assert_allclose, assert_array_equal
from pydantic import ValidationError
from torch.nn import functional as F

import clusterfed
from clusterfed.actors import work
from clusterfed.actors.mixture import evaluate as evaluate_mixture
from clusterfed.actors.validation import check_update, max_samples_seen
from clusterfed.algorithms import Candidate, ClientInfo, ClientUpdate, TaskPlan, make
from clusterfed.algorithms.fedem import (
    FedEM,
    FedEMDiagnostics,
    FedEMState,
    responsibilities,
)
from clusterfed.conformance import CHECKS
from clusterfed.errors import ClusterfedError
from clusterfed.models import build_model, set_flat
from clusterfed.protocol import (
    ClusterModel,
    Envelope,
    EvaluateTask,
    IdentityRule,
    TrainConfig,
    TrainTask,
    UpdateReply,
    decode,
    encode,
)
from clusterfed.scenarios import BUILTIN
from clusterfed.scenarios.partitions import DirichletPartition
from clusterfed.types import ClientId, ClusterId
from helpers import tiny_model, tiny_trainer

DIM = 6


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


# -- the E-step -----------------------------------------------------------------


def _authors_e_step(losses: np.ndarray, mixture: np.ndarray) -> np.ndarray:
    """`MixtureClient.update_sample_weights` of omarfoq/FedEM, on the same
    inputs: softmax over the learners of log π − the losses (samples × M)."""
    all_losses = torch.tensor(losses, dtype=torch.float64)
    weights = torch.tensor(mixture, dtype=torch.float64)
    return F.softmax(torch.log(weights) - all_losses.T, dim=1).T.numpy()


def _brute_force(losses: np.ndarray, mixture: np.ndarray) -> np.ndarray:
    """q(zᵢ = m) ∝ π_m exp(−ℓ_mi), one sample and one component at a time."""
    n_components, n_samples = losses.shape
    q = np.zeros_like(losses)
    for i in range(n_samples):
        terms = [mixture[m] * math.exp(-losses[m, i]) for m in range(n_components)]
        for m in range(n_components):
            q[m, i] = terms[m] / sum(terms)
    return q


@pytest.mark.parametrize("seed", range(5))
def test_the_e_step_is_the_authors_formula_and_the_papers(seed: int) -> None:
    rng = _rng(seed)
    n_components = int(rng.integers(1, 5))
    losses = rng.random((n_components, 31)) * 5
    mixture = rng.dirichlet(np.ones(n_components))
    q = responsibilities(losses, tuple(mixture))
    assert_allclose(q, _authors_e_step(losses, mixture), rtol=1e-12)
    assert_allclose(q, _brute_force(losses, mixture), rtol=1e-12)
    assert_allclose(q.sum(axis=0), 1.0)


def test_a_component_of_no_weight_takes_no_sample() -> None:
    losses = np.array([[0.1, 3.0], [5.0, 0.2], [0.0, 0.0]])
    q = responsibilities(losses, (0.5, 0.5, 0.0))
    assert_array_equal(q[2], [0.0, 0.0])
    # A sample fits component 0 far better: it takes most of that sample.
    assert q[0, 0] > 0.99 and q[1, 1] > 0.94


@pytest.mark.parametrize(
    ("losses", "mixture", "problem"),
    [
        (np.zeros((0, 3)), (), "components, samples"),
        (np.zeros(3), (1.0,), "components, samples"),
        (np.array([[np.inf, 1.0]]), (1.0,), "non-finite"),
        (np.zeros((2, 3)), (1.0,), "do not fit 2 components"),
        (np.zeros((2, 3)), (1.5, -0.5), "do not fit"),
        (np.zeros((2, 3)), (0.0, 0.0), "do not fit"),
    ],
)
def test_bad_losses_or_weights_are_refused(
    losses: np.ndarray, mixture: tuple[float, ...], problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        responsibilities(losses, mixture)


# -- the weighted local step and the client's work -----------------------------


def test_the_weighted_step_is_autograds_gradient_of_the_written_loss() -> None:
    trainer = tiny_trainer()
    start = tiny_model(1)
    q = _rng(3).random(20)
    config = TrainConfig(lr=0.1, momentum=0.0, batch_size=20, epochs=1)
    result = trainer.train(start, config, 0, sample_weights=q)
    # The code's loss, (loss_vec.T @ weights[indices]) / loss_vec.size(0), on
    # one full batch, in float64 through torch.func on a copy of the model.
    w = torch.tensor(start, dtype=torch.float64, requires_grad=True)
    reference = build_model("mlp", (1, 4, 4), 2, hidden=[5]).double()
    pieces, offset = {}, 0
    for name, p in reference.named_parameters():
        pieces[name] = w[offset : offset + p.numel()].view(p.shape)
        offset += p.numel()
    logits = torch.func.functional_call(reference, pieces, (trainer.x_train.double(),))
    loss_vec = F.cross_entropy(logits, trainer.y_train, reduction="none")
    loss = (loss_vec @ torch.tensor(q, dtype=torch.float64)) / len(q)
    (gradient,) = torch.autograd.grad(loss, w)
    assert_allclose(result.delta, -0.1 * gradient.numpy(), rtol=1e-4, atol=1e-6)
    assert abs(result.loss - loss.item()) < 1e-5


def test_unit_weights_train_as_plain_sgd() -> None:
    start, config = tiny_model(1), TrainConfig(lr=0.1, epochs=2, batch_size=6)
    plain = tiny_trainer().train(start, config, 3).delta
    ones = tiny_trainer().train(start, config, 3, sample_weights=np.ones(20)).delta
    assert_allclose(plain, ones, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize(
    ("weights", "problem"),
    [
        (np.ones(19), "one finite weight per training sample"),
        (np.full(20, np.nan), "one finite weight per training sample"),
        (-np.ones(20), ">= 0"),
    ],
)
def test_bad_sample_weights_are_refused(weights: np.ndarray, problem: str) -> None:
    with pytest.raises(ClusterfedError, match=problem):
        tiny_trainer().train(tiny_model(1), TrainConfig(), 0, sample_weights=weights)


def _candidates(n: int = 3) -> list[Candidate]:
    return [Candidate(ClusterId(m), tiny_model(4 + m)) for m in range(n)]


def test_the_client_runs_the_e_step_then_trains_every_component() -> None:
    trainer = tiny_trainer()
    candidates = _candidates()
    mixture = (0.2, 0.5, 0.3)
    rule = IdentityRule(name="fedem")
    config = TrainConfig(lr=0.1, momentum=0.0, batch_size=7, epochs=2)
    cluster, result = work.train(trainer, candidates, rule, config, 4, mixture)
    losses = np.stack([trainer.sample_losses(c.weights) for c in candidates])
    q = _brute_force(losses, np.array(mixture))
    assert result.importance is not None
    assert_allclose(result.importance, q.mean(axis=1), rtol=1e-12)
    heaviest = int(np.argmax(q.mean(axis=1)))
    assert cluster == heaviest
    # Each component trained from its model on its own q-weighted loss.
    deltas = [
        tiny_trainer().train(c.weights, config, 4, sample_weights=q[m]).delta
        for m, c in enumerate(candidates)
    ]
    assert_allclose(result.delta, deltas[heaviest], rtol=1e-5, atol=1e-7)
    others = [d for m, d in enumerate(deltas) if m != heaviest]
    assert result.components is not None and len(result.components) == 2
    for got, want in zip(result.components, others, strict=True):
        assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    # The E-step read the training set once per component; each trained 2 epochs.
    assert result.samples_seen == 3 * 20 + 3 * 2 * 20


def test_a_mixture_rule_needs_the_tasks_weights_and_no_other_rule_takes_them() -> None:
    config = TrainConfig()
    with pytest.raises(ClusterfedError, match="needs the task's mixture"):
        work.train(tiny_trainer(), _candidates(), IdentityRule(name="fedem"), config, 0)
    with pytest.raises(ClusterfedError, match="no mixture"):
        work.train(tiny_trainer(), _candidates(1), None, config, 0, (1.0,))


def test_the_mixtures_prediction_is_the_codes_sum_of_softmaxes() -> None:
    trainer = tiny_trainer()
    models = [tiny_model(s) for s in (4, 5, 6)]
    mixture = (0.2, 0.5, 0.3)
    parts = list(zip(models, mixture, strict=True))
    held_out, tested = evaluate_mixture(trainer, parts)
    assert tested is None  # no test set: the digits' case
    # `LearnersEnsemble.evaluate_iterator`: Σ π_m softmax, clamped, its log.
    y_pred = torch.zeros(4, 2, dtype=torch.float64)
    for weights, share in zip(models, mixture, strict=True):
        model = build_model("mlp", (1, 4, 4), 2, hidden=[5])
        set_flat(model, weights)
        with torch.no_grad():
            y_pred += share * F.softmax(model(trainer.x_test).double(), dim=1)
    y_pred = torch.clamp(y_pred, min=0.0, max=1.0)
    loss = F.nll_loss(torch.log(y_pred), trainer.y_test).item()
    accuracy = (y_pred.argmax(dim=1) == trainer.y_test).double().mean().item()
    assert abs(held_out.loss - loss) < 1e-5
    assert held_out.accuracy == accuracy and held_out.n_samples == 4


def test_a_mixture_of_one_model_scores_as_that_model() -> None:
    trainer = tiny_trainer()
    weights = tiny_model(4)
    alone = trainer.evaluate(weights)
    held_out, _ = evaluate_mixture(trainer, [(weights, 1.0), (tiny_model(5), 0.0)])
    assert held_out.accuracy == alone.accuracy
    assert abs(held_out.loss - alone.loss) < 1e-6


# -- the server's part -----------------------------------------------------------


def _components(n: int = 2) -> list[np.ndarray]:
    return [np.full(DIM, float(m), np.float32) for m in range(n)]


def _joined(strategy: FedEM, n: int) -> FedEMState:
    state = strategy.init_state(_components(strategy.components))
    for c in range(n):
        state = strategy.on_join(state, ClientInfo(ClientId(c), n_train=10))
    return state


def _update(
    state: FedEMState,
    client: int,
    deltas: list[np.ndarray],
    mixture: tuple[float, ...],
    n: int = 10,
) -> ClientUpdate:
    first = int(np.argmax(mixture))
    return ClientUpdate(
        ClientId(client),
        ClusterId(first),
        "ok",
        state.models[ClusterId(first)],
        deltas[first].astype(np.float32),
        n,
        0.5,
        importance=mixture,
        deltas={ClusterId(m): d.astype(np.float32) for m, d in enumerate(deltas)},
    )


def test_each_component_moves_by_the_sample_weighted_mean_delta() -> None:
    strategy = FedEM(components=2)
    state = _joined(strategy, 2)
    a = [np.ones(DIM), np.full(DIM, 2.0)]
    b = [np.full(DIM, -1.0), np.zeros(DIM)]
    updates = [
        _update(state, 0, a, (0.9, 0.1), n=30),
        _update(state, 1, b, (0.25, 0.75), n=10),
    ]
    new = strategy.aggregate(state, 0, updates, _rng())
    # θ_m + (30·a_m + 10·b_m) / 40.
    assert_allclose(new.models[ClusterId(0)], np.full(DIM, 0 + (30 - 10) / 40))
    assert_allclose(new.models[ClusterId(1)], np.full(DIM, 1 + 60 / 40))
    assert new.mixture[ClientId(0)] == (0.9, 0.1)
    assert new.assignment == {ClientId(0): ClusterId(0), ClientId(1): ClusterId(1)}
    cluster, model = strategy.model_for(new, ClientId(1))
    assert cluster == 1 and model is new.models[ClusterId(1)]
    assert strategy.mixture_for(new, ClientId(1)) == {0: 0.25, 1: 0.75}
    diagnostics = strategy.diagnostics(new)
    assert isinstance(diagnostics, FedEMDiagnostics)
    assert diagnostics.sizes == {0: 1, 1: 1}
    assert_allclose(list(diagnostics.mass.values()), [1.15, 0.85])


def test_an_update_without_every_delta_or_weight_moves_nothing() -> None:
    strategy = FedEM(components=2)
    state = _joined(strategy, 1)
    full = _update(state, 0, [np.ones(DIM), np.ones(DIM)], (0.5, 0.5))
    for bare in (
        ClientUpdate(full.client, full.cluster, "ok", full.base, full.delta, 10, 0.5),
        ClientUpdate(
            full.client,
            full.cluster,
            "ok",
            full.base,
            full.delta,
            10,
            0.5,
            importance=(0.5, 0.5),
            deltas={ClusterId(0): full.delta},
        ),
    ):
        new = strategy.aggregate(state, 0, [bare], _rng())
        for k in state.models:
            assert_array_equal(new.models[k], state.models[k])
        assert new.mixture == state.mixture


def test_every_client_gets_every_component_its_weights_and_the_rule() -> None:
    strategy = FedEM(components=3)
    state = _joined(strategy, 2)
    state = state.replace(mixture={**state.mixture, ClientId(1): (0.1, 0.2, 0.7)})
    clients = [ClientInfo(ClientId(c), n_train=10) for c in range(2)]
    plans = strategy.plan_round(state, 0, clients, _rng())
    assert [p.client for p in plans] == [0, 1]
    for plan in plans:
        assert list(plan.models) == [0, 1, 2] and plan.identity == "fedem"
    assert plans[0].mixture == (1 / 3,) * 3  # uniform before its first update
    assert plans[1].mixture == (0.1, 0.2, 0.7)


def test_a_leaving_client_takes_its_weights() -> None:
    strategy = FedEM(components=2)
    state = _joined(strategy, 2)
    gone = strategy.on_leave(state, ClientId(1))
    assert ClientId(1) not in gone.assignment and ClientId(1) not in gone.mixture


@pytest.mark.parametrize(
    "params", [{"components": 0}, {"components": True}, {"fraction": 0.0}]
)
def test_bad_options_name_the_value(params: dict) -> None:
    with pytest.raises(ValueError, match=str(next(iter(params.values())))):
        make("fedem", **params)


def test_the_defaults_are_the_authors_codes() -> None:
    strategy = make("fedem")
    assert isinstance(strategy, FedEM)
    assert (strategy.components, strategy.fraction) == (3, 1.0)
    assert strategy.initial_models == 3


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_fedem_conforms(check) -> None:  # type: ignore[no-untyped-def]
    check("fedem")


# -- the wire and the server's checks -------------------------------------------


def _reply(
    components: tuple[np.ndarray, ...] | None,
    importance: tuple[float, ...] | None = (0.5, 0.25, 0.25),
) -> UpdateReply:
    return UpdateReply(
        cluster=0,
        delta=np.zeros(4, np.float32),
        n_samples=1,
        loss=0.5,
        samples_seen=1,
        importance=importance,
        components=components,
    )


def _plan(identity: str | None, n_models: int = 3) -> TaskPlan:
    models = {ClusterId(s): np.zeros(4, np.float32) for s in range(n_models)}
    mixture = (1 / n_models,) * n_models if identity == "fedem" else None
    return TaskPlan(ClientId(1), dict(models), identity=identity, mixture=mixture)


def _envelope(payload: object) -> Envelope:
    return Envelope(
        msg_id="m", sender="client/1", recipient="server", round=0, payload=payload
    )


def test_the_mixture_travels_and_other_tasks_keep_their_bytes() -> None:
    w = np.arange(4, dtype=np.float32)
    models = (ClusterModel(cluster=0, weights=w), ClusterModel(cluster=1, weights=w))
    task = TrainTask(models=models, config=TrainConfig(), mixture=(0.25, 0.75))
    got = decode(encode(_envelope(task))).payload
    assert isinstance(got, TrainTask) and got.mixture == (0.25, 0.75)
    reply = _reply((w, w + 1))
    back = decode(encode(_envelope(reply))).payload
    assert isinstance(back, UpdateReply) and back.components is not None
    assert_array_equal(back.components[1], w + 1)
    evaluate = EvaluateTask(model=models[0], others=models[1:], mixture=(0.5, 0.5))
    seen = decode(encode(_envelope(evaluate))).payload
    assert isinstance(seen, EvaluateTask) and seen.mixture == (0.5, 0.5)
    # Left off the wire while None.
    plain = encode(_envelope(TrainTask(models=models, config=TrainConfig())))
    assert b"mixture" not in plain
    assert b"components" not in encode(_envelope(_reply(None, None)))
    assert b"others" not in encode(_envelope(EvaluateTask(model=models[0])))


def test_malformed_mixtures_are_refused_when_decoded() -> None:
    w = np.zeros(4, np.float32)
    one = (ClusterModel(cluster=0, weights=w),)
    with pytest.raises(ValidationError, match="2 mixture weights for 1 models"):
        TrainTask(models=one, config=TrainConfig(), mixture=(0.5, 0.5))
    with pytest.raises(ValidationError, match="sum to 0.9"):
        TrainTask(models=one * 2, config=TrainConfig(), mixture=(0.5, 0.4))
    with pytest.raises(ValidationError, match="both others and mixture"):
        EvaluateTask(model=one[0], mixture=(1.0,))
    with pytest.raises(ValidationError, match="2 mixture weights for 3 models"):
        EvaluateTask(model=one[0], others=one * 2, mixture=(0.5, 0.5))
    with pytest.raises(ValidationError):
        _reply(())  # an empty tuple is not "no components"


@pytest.mark.parametrize(
    ("identity", "components", "reason"),
    [
        ("fedem", None, "0 other deltas (components) for a task that takes 2"),
        ("fedem", (np.zeros(4, np.float32),), "1 other deltas"),
        ("fedem", (np.zeros(3, np.float32),) * 2, "a component delta has shape"),
        ("fedem", (np.zeros(4, np.float64),) * 2, "a component delta of dtype"),
        ("min_loss", (np.zeros(4, np.float32),) * 2, "2 other deltas"),
    ],
)
def test_the_server_refuses_deltas_that_do_not_fit_the_task(
    identity: str, components: tuple[np.ndarray, ...] | None, reason: str
) -> None:
    importance = (0.5, 0.25, 0.25) if identity == "fedem" else None
    problem = check_update(_reply(components, importance), _plan(identity), 4, None)
    assert problem is not None and problem.startswith(reason)


def test_the_server_bounds_every_components_delta() -> None:
    fine = (np.zeros(4, np.float32), np.zeros(4, np.float32))
    assert check_update(_reply(fine), _plan("fedem"), 4, None) is None
    big = (np.zeros(4, np.float32), np.full(4, 10.0, np.float32))
    problem = check_update(_reply(big), _plan("fedem"), 4, 1.0)
    assert problem is not None and problem.startswith("delta norm 20")


def test_a_mixture_task_may_process_every_components_training() -> None:
    # n = 20, 2 epochs, 3 models: 3 × 4 × 2 × 20 training + 3 × 20 probing.
    assert max_samples_seen(20, 2, 3, trained=3) == 20 * (4 * 2 * 3 + 3)
    assert max_samples_seen(20, 2, 3) == 20 * (4 * 2 + 3)


# -- the scenarios and real runs ---------------------------------------------


def test_the_scenarios_hold_what_their_descriptions_say() -> None:
    digits = BUILTIN["fedem-dirichlet"]()
    assert digits.algorithm == "fedem" and digits.dataset.name == "digits"
    assert digits.partition == DirichletPartition(alpha=0.4)
    assert digits.algorithm_params["fedem"] == {"components": 3}
    assert (digits.train.lr, digits.train.momentum) == (0.03, 0.0)
    assert digits.train.weight_decay == 5e-4 and digits.rounds == 200
    fmnist = BUILTIN["fedem-dirichlet-fmnist"]()
    assert fmnist.dataset.name == "fashion_mnist"
    assert (fmnist.clients, fmnist.rounds, fmnist.train.batch_size) == (80, 200, 128)


def test_one_component_is_fedavg(tmp_path: Path) -> None:
    options = {"workers": 1, "rounds": 3, "clients": 5}
    em = clusterfed.run(
        "fedem-dirichlet",
        out=tmp_path / "em",
        overrides=["algorithm_params.fedem.components=1"],
        **options,
    )
    avg = clusterfed.run(
        "fedem-dirichlet", out=tmp_path / "avg", algorithm="fedavg", **options
    )
    for a, b in zip(em.rows, avg.rows, strict=True):
        assert [c["acc"] for c in a["clients"]] == [c["acc"] for c in b["clients"]]
        assert [c["loss"] for c in a["clients"]] == [c["loss"] for c in b["clients"]]


def test_a_short_run_on_the_digits(tmp_path: Path) -> None:
    result = clusterfed.run(
        "fedem-dirichlet", out=tmp_path, workers=1, rounds=3, clients=6
    )
    rows = result.rows
    assert [r["round"] for r in rows] == [0, 1, 2]
    assert all(not c["failed"] and not c["late"] for r in rows for c in r["clients"])
    assert result.summary["rejected_messages"] == 0
    for row in rows:
        assert sum(row["strategy"]["sizes"].values()) == 6
        assert abs(sum(row["strategy"]["mass"].values()) - 6) < 1e-9
    assert rows[-1]["clients"][0]["acc"] is not None
