"""FedSoft: the importance estimate against a brute-force count, the centers
by hand, the proximal gradient against torch autograd of the written loss,
the selection's probabilities, the server's check of the weights, the
conformance suite, the scenarios and a short digits run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from numpy.testing import assert_allclose, assert_array_equal
from pydantic import ValidationError
from torch.nn import functional as F

import clusterfed
from clusterfed.actors import work
from clusterfed.actors.validation import check_update
from clusterfed.algorithms import (
    Candidate,
    ClientInfo,
    ClientUpdate,
    TaskPlan,
    make,
)
from clusterfed.algorithms.fedsoft import (
    FedSoft,
    FedSoftDiagnostics,
    FedSoftPolicy,
    FedSoftState,
    draw_selection,
    importance_weights,
    selected_centers,
    soft_centers,
)
from clusterfed.conformance import CHECKS
from clusterfed.models import build_model
from clusterfed.protocol import (
    Envelope,
    IdentityRule,
    TrainConfig,
    UpdateReply,
    decode,
    encode,
)
from clusterfed.scenarios import BUILTIN
from clusterfed.scenarios.transforms import RotationTransform
from clusterfed.types import ClientId, ClusterId
from helpers import tiny_model, tiny_trainer

DIM = 6


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


# -- the importance estimate --------------------------------------------------


def _brute_force(losses: np.ndarray, smoother: float) -> list[float]:
    """The paper's count, one sample and one center at a time."""
    n_centers, n_samples = losses.shape
    counts = [0] * n_centers
    for i in range(n_samples):
        best = 0
        for s in range(1, n_centers):
            if losses[s, i] < losses[best, i]:  # ties stay with the lowest
                best = s
        counts[best] += 1
    shares = [max(c / n_samples, smoother) for c in counts]
    return [u / sum(shares) for u in shares]


def test_the_weights_are_the_share_of_samples_each_center_fits_best() -> None:
    # Center 0 fits samples 0-6, center 1 samples 7-9, center 2 none.
    losses = np.array(
        [
            [0.1] * 7 + [2.0] * 3,
            [1.0] * 7 + [0.5] * 3,
            [3.0] * 10,
        ]
    )
    u = importance_weights(losses, 0.0)
    assert_allclose(u, [0.7, 0.3, 0.0])
    smoothed = importance_weights(losses, 1e-2)  # σ for the empty center
    assert_allclose(smoothed, np.array([0.7, 0.3, 0.01]) / 1.01)
    assert abs(sum(smoothed) - 1) < 1e-12


def test_a_tie_counts_for_the_lowest_center() -> None:
    losses = np.array([[1.0, 1.0, 0.5], [1.0, 0.2, 0.5]])
    assert_allclose(importance_weights(losses, 0.0), [2 / 3, 1 / 3])


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("smoother", [0.0, 1e-4, 0.05])
def test_the_weights_match_a_brute_force_count(seed: int, smoother: float) -> None:
    rng = _rng(seed)
    n_centers = int(rng.integers(1, 5))
    # Rounded losses make ties; a planted bias makes some centers win none.
    losses = np.round(rng.random((n_centers, 57)) * 4, 1)
    losses[0] += 0.3 * seed
    assert_allclose(
        importance_weights(losses, smoother), _brute_force(losses, smoother)
    )


@pytest.mark.parametrize(
    ("losses", "smoother", "problem"),
    [
        (np.zeros((0, 3)), 0.0, "centers, samples"),
        (np.zeros(3), 0.0, "centers, samples"),
        (np.array([[np.nan, 1.0]]), 0.0, "non-finite"),
        (np.zeros((3, 4)), 0.5, r"smoother must be in \[0, 1/3\]"),
    ],
)
def test_bad_losses_or_smoother_are_refused(
    losses: np.ndarray, smoother: float, problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        importance_weights(losses, smoother)


class _Planted:
    """A client whose samples' losses under each model are written down."""

    def __init__(self, table: dict[float, list[float]]) -> None:
        self.table = table  # the model's first weight → its per-sample losses

    def sample_losses(self, weights: np.ndarray) -> np.ndarray:
        return np.asarray(self.table[float(weights[0])])

    def loss(self, weights: np.ndarray) -> float:
        return float(np.mean(self.sample_losses(weights)))

    def batch_loss_and_gradient(
        self, weights: np.ndarray, round: int
    ) -> tuple[float, np.ndarray]:
        raise AssertionError("FedSoft's policy needs no gradient")


def test_the_client_policy_weighs_every_center_and_starts_from_the_heaviest() -> None:
    candidates = [
        Candidate(ClusterId(0), np.full(DIM, 0.0, dtype=np.float32)),
        Candidate(ClusterId(1), np.full(DIM, 1.0, dtype=np.float32)),
    ]
    probe = _Planted({0.0: [0.1, 2.0, 2.0, 2.0], 1.0: [1.0, 0.5, 0.5, 0.5]})
    policy = FedSoftPolicy(smoother=1e-4, lam=0.5)
    u = policy.importance(probe, candidates)
    assert_allclose(u, [0.25, 0.75])
    assert policy.choose(probe, candidates, 0) == ClusterId(1)
    assert_allclose(policy.proximal(u), [0.125, 0.375])


# -- the centers by hand ------------------------------------------------------


def test_each_center_is_the_importance_and_sample_weighted_mean() -> None:
    # Two clients, two centers: v_0 ∝ (0.8·10, 0.2·30) = (8, 6), v_1 ∝ (2, 24).
    w = [np.array([1.0, 0.0]), np.array([0.0, 2.0])]
    u = np.array([[0.8, 0.2], [0.2, 0.8]])
    centers = [np.zeros(2, dtype=np.float32), np.ones(2, dtype=np.float32)]
    new = soft_centers(w, u, [10.0, 30.0], centers)
    assert_allclose(new[0], [8 / 14, 2 * 6 / 14], rtol=1e-6)
    assert_allclose(new[1], [2 / 26, 2 * 24 / 26], rtol=1e-6)
    assert all(c.dtype == np.float32 for c in new)


def test_without_updates_every_center_keeps_its_model() -> None:
    centers = [np.zeros(2, dtype=np.float32), np.ones(2, dtype=np.float32)]
    new = soft_centers([], np.zeros((0, 2)), [], centers)
    assert_array_equal(new[0], centers[0])
    assert_array_equal(new[1], centers[1])


def test_with_selection_a_center_is_the_plain_mean_of_its_drawn_clients() -> None:
    w = [np.array([1.0, 0.0]), np.array([0.0, 2.0]), np.array([4.0, 4.0])]
    clients = [ClientId(0), ClientId(1), ClientId(3)]
    centers = [np.zeros(2, dtype=np.float32), np.full(2, 7.0, dtype=np.float32)]
    # Client 2 was drawn for center 0 but did not report; nobody for center 1.
    selected = {
        ClusterId(0): (ClientId(0), ClientId(2), ClientId(3)),
        ClusterId(1): (ClientId(2),),
    }
    ids = [ClusterId(0), ClusterId(1)]
    new = selected_centers(w, clients, selected, ids, centers)
    assert_allclose(new[0], [2.5, 2.0])
    assert_array_equal(new[1], centers[1])


def _centers(n: int = 2) -> list[np.ndarray]:
    return [np.full(DIM, float(s), dtype=np.float32) for s in range(n)]


def _joined(strategy: FedSoft, n: int, n_train: int = 10) -> FedSoftState:
    state = strategy.init_state(_centers(strategy.clusters))
    for i in range(n):
        state = strategy.on_join(state, ClientInfo(ClientId(i), n_train=n_train))
    return state


def _update(
    state: FedSoftState,
    client: int,
    end: np.ndarray,
    importance: tuple[float, ...],
    n: int = 10,
) -> ClientUpdate:
    """An accepted update that started at the heaviest center, ended at `end`."""
    cluster = ClusterId(int(np.argmax(importance)))
    base = state.models[cluster]
    delta = (np.asarray(end, dtype=np.float64) - base).astype(np.float32)
    return ClientUpdate(
        ClientId(client), cluster, "ok", base, delta, n, 0.5, importance=importance
    )


def test_a_round_keeps_the_weights_moves_clients_and_re_estimates_centers() -> None:
    strategy = FedSoft(clusters=2)
    state = _joined(strategy, 4)
    ends = [np.full(DIM, 1.0), np.full(DIM, 3.0), np.full(DIM, 5.0)]
    u = [(0.9, 0.1), (0.3, 0.7), (0.5, 0.5)]
    updates = [_update(state, i, ends[i], u[i]) for i in range(3)]
    updates.append(ClientUpdate(ClientId(3), ClusterId(0), "failed", reason="down"))
    new = strategy.aggregate(state, 0, updates, _rng())
    assert new.importance == {ClientId(i): u[i] for i in range(3)}
    # The dominant center (a tie goes to the lowest); client 3 stays put.
    assert new.assignment == {0: 0, 1: 1, 2: 0, 3: state.assignment[ClientId(3)]}
    for s in range(2):
        v = np.array([u[i][s] for i in range(3)])
        want = sum(v[i] * ends[i] for i in range(3)) / v.sum()
        assert_allclose(new.models[ClusterId(s)], want, rtol=1e-6)
    assert new.selected is None
    diagnostics = strategy.diagnostics(new)
    assert diagnostics.sizes == {ClusterId(0): 3, ClusterId(1): 1}
    # Client 3, not yet estimated, weighs 1/2 on each center.
    assert_allclose(list(diagnostics.mass.values()), [2.2, 1.8])
    assert "selected" not in diagnostics.record()
    assert isinstance(diagnostics, FedSoftDiagnostics)


def test_every_client_gets_every_center_and_the_policy() -> None:
    strategy = FedSoft(clusters=3, lam=0.2, smoother=0.01)
    state = _joined(strategy, 2)
    clients = [ClientInfo(ClientId(i), n_train=10) for i in range(2)]
    plans = strategy.plan_round(state, 0, clients, _rng())
    assert [p.client for p in plans] == [0, 1]
    for plan in plans:
        assert list(plan.models) == [0, 1, 2]
        assert plan.identity == "fedsoft"
        assert dict(plan.identity_params) == {"smoother": 0.01, "lam": 0.2}


def test_with_selection_round_zero_trains_everyone_then_the_drawn_clients() -> None:
    strategy = FedSoft(clusters=2, selection=2, smoother=0.0)
    state = _joined(strategy, 6)
    clients = [ClientInfo(ClientId(i), n_train=10) for i in range(6)]
    assert len(strategy.plan_round(state, 0, clients, _rng())) == 6
    # Clients 0-2 fit center 0 only, 3-5 center 1 only (σ = 0).
    u = [(1.0, 0.0)] * 3 + [(0.0, 1.0)] * 3
    ends = [np.full(DIM, float(i)) for i in range(6)]
    state = strategy.aggregate(
        state, 0, [_update(state, i, ends[i], u[i]) for i in range(6)], _rng()
    )
    assert state.selected is not None
    assert set(state.selected[ClusterId(0)]) <= {0, 1, 2}
    assert set(state.selected[ClusterId(1)]) <= {3, 4, 5}
    assert all(len(m) == 2 for m in state.selected.values())
    drawn = sorted({c for m in state.selected.values() for c in m})
    plans = strategy.plan_round(state, 1, clients, _rng())
    assert [p.client for p in plans] == drawn
    # Round 1: each center the plain mean of its drawn clients' models.
    updates = [_update(state, c, ends[c] + 1, u[c]) for c in drawn]
    new = strategy.aggregate(state, 1, updates, _rng(1))
    for s in range(2):
        members = state.selected[ClusterId(s)]
        want = np.mean([ends[c] + 1 for c in members], axis=0)
        assert_allclose(new.models[ClusterId(s)], want, rtol=1e-6)
    assert strategy.diagnostics(new).selected is not None


def test_the_draw_follows_importance_times_size() -> None:
    # v_0 ∝ (0.5·10, 0.25·20, 0.1·50) = (5, 5, 5): uniform; v_1 ∝ (5, 15, 45).
    importance = {
        ClientId(0): (0.5, 0.5),
        ClientId(1): (0.25, 0.75),
        ClientId(2): (0.1, 0.9),
    }
    sizes = {ClientId(0): 10, ClientId(1): 20, ClientId(2): 50}
    rng = _rng(3)
    counts = np.zeros((2, 3))
    ids = [ClusterId(0), ClusterId(1)]
    for _ in range(4000):
        drawn = draw_selection(importance, sizes, sorted(sizes), ids, 1, rng)
        for s in range(2):
            counts[s, drawn[ClusterId(s)][0]] += 1
    assert_allclose(counts[0] / 4000, [1 / 3] * 3, atol=0.03)
    assert_allclose(counts[1] / 4000, np.array([5, 15, 45]) / 65, atol=0.03)


def test_a_client_not_yet_estimated_weighs_uniformly_and_the_draw_is_clipped() -> None:
    ids = [ClusterId(0), ClusterId(1)]
    drawn = draw_selection({}, {ClientId(0): 5}, [ClientId(0)], ids, 3, _rng())
    assert drawn == {ClusterId(0): (ClientId(0),), ClusterId(1): (ClientId(0),)}


def test_a_leaving_client_takes_its_weights_and_size() -> None:
    strategy = FedSoft()
    state = _joined(strategy, 2)
    update = _update(state, 1, np.ones(DIM), (0.2, 0.8))
    state = strategy.aggregate(state, 0, [update], _rng())
    gone = strategy.on_leave(state, ClientId(1))
    assert ClientId(1) not in gone.assignment
    assert ClientId(1) not in gone.importance and ClientId(1) not in gone.sizes


def test_an_update_without_weights_moves_nothing() -> None:
    strategy = FedSoft()
    state = _joined(strategy, 1)
    base = state.models[ClusterId(0)]
    delta = np.ones(DIM, np.float32)
    bare = ClientUpdate(ClientId(0), ClusterId(0), "ok", base, delta, 10, 0.5)
    new = strategy.aggregate(state, 0, [bare], _rng())
    for k in state.models:
        assert_array_equal(new.models[k], state.models[k])


@pytest.mark.parametrize(
    "params",
    [
        {"clusters": 0},
        {"clusters": True},
        {"lam": -1.0},
        {"smoother": 0.6},
        {"smoother": -0.1},
        {"selection": 0},
    ],
)
def test_bad_options_name_the_value(params: dict) -> None:
    with pytest.raises(ValueError, match=str(next(iter(params.values())))):
        make("fedsoft", **params)


def test_the_defaults_are_the_authors_solvers_without_selection() -> None:
    # λ and σ are the code's MNIST solver's; selection is off (clusterfed's
    # choice: the code's K = 30 would select every client of our scenarios).
    strategy = make("fedsoft")
    assert isinstance(strategy, FedSoft)
    assert (strategy.clusters, strategy.lam, strategy.smoother) == (2, 0.1, 1e-4)
    assert strategy.selection is None


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_fedsoft_conforms(check) -> None:  # type: ignore[no-untyped-def]
    check("fedsoft")


# -- the proximal gradient and the client's work ------------------------------


@pytest.mark.parametrize("mu", [0.0, 0.3])
def test_the_proximal_step_is_autograds_gradient_of_the_written_loss(
    mu: float,
) -> None:
    trainer = tiny_trainer()
    start = tiny_model(1)
    anchors = [(tiny_model(2), 0.4), (tiny_model(3), 0.1), (start * 2, 0.05)]
    config = TrainConfig(lr=0.1, momentum=0.0, batch_size=20, epochs=1, mu=mu)
    result = trainer.train(start, config, 0, anchors)
    # The loss as written: CE + μ/2‖w − w₀‖² + Σ c/2‖w − a‖², one full batch,
    # in float64 through torch.func on a copy of the architecture.
    w = torch.tensor(start, dtype=torch.float64, requires_grad=True)
    reference = build_model("mlp", (1, 4, 4), 2, hidden=[5]).double()
    pieces, offset = {}, 0
    for name, p in reference.named_parameters():
        pieces[name] = w[offset : offset + p.numel()].view(p.shape)
        offset += p.numel()
    x = trainer.x_train.double()
    logits = torch.func.functional_call(reference, pieces, (x,))
    loss = F.cross_entropy(logits, trainer.y_train)
    loss = loss + mu / 2 * ((w - torch.tensor(start, dtype=torch.float64)) ** 2).sum()
    for anchor, c in anchors:
        a = torch.tensor(anchor, dtype=torch.float64)
        loss = loss + c / 2 * ((w - a) ** 2).sum()
    (gradient,) = torch.autograd.grad(loss, w)
    assert_allclose(result.delta, -0.1 * gradient.numpy(), rtol=1e-4, atol=1e-6)


def test_a_zero_coefficient_is_plain_sgd_bit_for_bit() -> None:
    start, config = tiny_model(1), TrainConfig(lr=0.1, epochs=2)
    plain = tiny_trainer().train(start, config, 3).delta
    zero = tiny_trainer().train(start, config, 3, [(tiny_model(2), 0.0)]).delta
    assert_array_equal(plain, zero)


def test_a_bad_anchor_is_refused() -> None:
    trainer = tiny_trainer()
    with pytest.raises(ValueError, match="coefficient"):
        trainer.train(tiny_model(1), TrainConfig(), 0, [(tiny_model(2), -1.0)])
    wrong = [(np.zeros(3, np.float32), 1.0)]
    with pytest.raises(ValueError, match="anchor of shape"):
        trainer.train(tiny_model(1), TrainConfig(), 0, wrong)


def test_the_trainers_sample_losses_are_its_per_sample_cross_entropy() -> None:
    trainer = tiny_trainer()
    weights = tiny_model(7)
    losses = trainer.sample_losses(weights)
    assert losses.shape == (20,)
    assert abs(losses.mean() - trainer.loss(weights)) < 1e-6


def test_the_client_reports_the_brute_force_weights_and_trains_the_heaviest() -> None:
    trainer = tiny_trainer()
    centers = [tiny_model(s) for s in (4, 5, 6)]
    candidates = [Candidate(ClusterId(s), c) for s, c in enumerate(centers)]
    rule = IdentityRule(name="fedsoft", params={"smoother": 0.01, "lam": 0.5})
    config = TrainConfig(lr=0.1, momentum=0.0, batch_size=20, epochs=1)
    cluster, result = work.train(trainer, candidates, rule, config, 0)
    losses = np.stack([trainer.sample_losses(c) for c in centers])
    want = _brute_force(losses, 0.01)
    assert result.importance is not None
    assert_allclose(result.importance, want)
    assert cluster == int(np.argmax(want))
    # It trained from that center, pulled toward all three by 0.5·u_s.
    anchors = [(c, 0.5 * u) for c, u in zip(centers, want, strict=True)]
    again = tiny_trainer().train(centers[int(cluster)], config, 0, anchors)
    assert_array_equal(result.delta, again.delta)
    # Probing read the training set once per center.
    assert result.samples_seen == 20 + 3 * 20


# -- the weights on the wire and the server's check ---------------------------


def _reply(importance: tuple[float, ...] | None, cluster: int = 0) -> UpdateReply:
    return UpdateReply(
        cluster=cluster,
        delta=np.zeros(4, np.float32),
        n_samples=1,
        loss=0.5,
        samples_seen=1,
        importance=importance,
    )


def _envelope(payload: UpdateReply) -> Envelope:
    return Envelope(
        msg_id="m", sender="client/1", recipient="server", round=0, payload=payload
    )


def _plan(identity: str | None, n_models: int = 2) -> TaskPlan:
    models = {ClusterId(s): np.zeros(4, np.float32) for s in range(n_models)}
    return TaskPlan(ClientId(1), dict(models), identity=identity)


def test_the_weights_travel_and_an_update_without_them_keeps_its_bytes() -> None:
    sent = _envelope(_reply((0.25, 0.75)))
    received = decode(encode(sent)).payload
    assert isinstance(received, UpdateReply)
    assert received.importance == (0.25, 0.75)
    # Left out of the wire while None: every other algorithm's reply is
    # byte for byte what it was before the field existed.
    bare = encode(_envelope(_reply(None)))
    assert b"importance" not in bare
    received = decode(bare).payload
    assert isinstance(received, UpdateReply) and received.importance is None


@pytest.mark.parametrize(
    "importance", [(), (1.5, -0.5), ("0.5", "0.5"), (True, False), (0.001,) * 1025]
)
def test_malformed_weights_are_refused_when_decoded(importance: tuple) -> None:
    with pytest.raises(ValidationError):
        _reply(importance)


@pytest.mark.parametrize(
    ("identity", "importance", "reason"),
    [
        ("fedsoft", None, "no importance weights, which the fedsoft rule reports"),
        ("min_loss", (0.5, 0.5), "importance weights for a task that asked for none"),
        (None, (1.0,), "importance weights for a task that asked for none"),
        ("fedsoft", (1.0,), "1 importance weights for the 2 models sent"),
        ("fedsoft", (0.3, 0.3, 0.4), "3 importance weights for the 2 models sent"),
        ("fedsoft", (0.5, 0.6), "importance weights sum to 1.1, not 1"),
        ("fedsoft", (0.0, 0.0), "importance weights sum to 0, not 1"),
    ],
)
def test_the_server_refuses_weights_that_do_not_fit_the_task(
    identity: str | None, importance: tuple[float, ...] | None, reason: str
) -> None:
    problem = check_update(_reply(importance), _plan(identity), 4, None)
    assert problem is not None and problem.startswith(reason)


def test_the_server_accepts_weights_that_fit_the_task() -> None:
    assert check_update(_reply((0.3, 0.7)), _plan("fedsoft"), 4, None) is None
    assert check_update(_reply(None), _plan("min_loss"), 4, None) is None
    # Float rounding: within 1e-6 of 1.
    near = (0.1 + 0.2, 0.7 + 1e-9)
    assert check_update(_reply(near), _plan("fedsoft"), 4, None) is None


# -- the scenarios and a real run ---------------------------------------------


def test_the_scenarios_hold_what_their_descriptions_say() -> None:
    digits = BUILTIN["fedsoft-rotated"]()
    assert digits.algorithm == "fedsoft" and digits.dataset.name == "digits"
    assert digits.transform == RotationTransform(angles=[0.0, 90.0])
    params = digits.algorithm_params["fedsoft"]
    assert params == {"clusters": 2, "lam": 0.1, "smoother": 1e-4}
    assert (digits.train.epochs, digits.train.batch_size) == (10, 10)
    assert "one distribution" in digits.description
    assert "do_selection=False" in digits.description
    fmnist = BUILTIN["fedsoft-rotated-fmnist"]()  # builds: validation passes
    assert fmnist.dataset.name == "fashion_mnist"
    assert (fmnist.clients, fmnist.rounds) == (100, 50)
    assert fmnist.algorithm_params["fedsoft"]["selection"] == 30
    assert "30 clients drawn per center" in fmnist.description


def test_a_short_run_on_the_digits_finds_the_two_rotations(tmp_path: Path) -> None:
    result = clusterfed.run(
        "fedsoft-rotated",
        out=tmp_path,
        workers=1,
        rounds=3,
        clients=6,
        overrides=["train.epochs=5"],
    )
    rows = result.rows
    assert [r["round"] for r in rows] == [0, 1, 2]
    assert all(not c["failed"] and not c["late"] for r in rows for c in r["clients"])
    assert result.summary["rejected_messages"] == 0
    for row in rows:
        assert sum(row["strategy"]["sizes"].values()) == 6
        assert abs(sum(row["strategy"]["mass"].values()) - 6) < 1e-9
    assert rows[-1]["ari"] == 1.0
