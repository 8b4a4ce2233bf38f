"""LocalTrainer without any runtime."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from clusterfed.actors import LocalTrainer
from clusterfed.actors.privacy import PrivateTraining
from clusterfed.models import build_model, get_flat
from clusterfed.protocol import TrainConfig


def _trainer(seed: int = 0) -> LocalTrainer:
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(40, 1, 4, 4, generator=gen)
    y = (x.flatten(1).sum(1) > 8).long()
    model = build_model("mlp", (1, 4, 4), 2, hidden=[8])
    return LocalTrainer(model, x[:30], y[:30], x[30:], y[30:], seed=seed)


def _weights() -> np.ndarray:
    return get_flat(build_model("mlp", (1, 4, 4), 2, hidden=[8], seed=1))


def test_train_returns_the_delta_from_the_received_weights() -> None:
    trainer = _trainer()
    start = _weights()
    result = trainer.train(start, TrainConfig(lr=0.1, epochs=2), round=0)
    assert result.delta.dtype == np.float32 and result.delta.shape == start.shape
    assert np.abs(result.delta).sum() > 0
    np.testing.assert_allclose(get_flat(trainer.model), start + result.delta, rtol=1e-6)
    assert result.n_samples == 30 and result.samples_seen == 60


def _linear_trainer() -> tuple[LocalTrainer, np.ndarray]:
    """Softmax regression (no hidden layer), whose gradient is written by hand."""
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(40, 1, 4, 4, generator=gen)
    y = (x.flatten(1).sum(1) > 8).long()
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 2))
    weights = get_flat(model) * 3  # away from the origin: a real gradient
    return LocalTrainer(model, x[:30], y[:30], x[30:], y[30:], seed=0), weights


def _softmax_regression(
    weights: np.ndarray, x: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    w, b = weights[:32].reshape(2, 16).astype(np.float64), weights[32:]
    logits = x.reshape(len(x), -1) @ w.T + b
    shifted = logits - logits.max(1, keepdims=True)
    p = np.exp(shifted) / np.exp(shifted).sum(1, keepdims=True)
    return w, logits, p


def test_one_full_batch_step_is_minus_lr_times_the_mean_gradient() -> None:
    # Softmax regression: ∂L/∂W = (p − onehot)ᵀ X / n, ∂L/∂b = mean(p − onehot).
    trainer, start = _linear_trainer()
    x, y = trainer.x_train.numpy().reshape(30, -1), trainer.y_train.numpy()
    _, _, p = _softmax_regression(start, x)
    error = p - np.eye(2)[y]
    grad = np.concatenate([(error.T @ x / 30).ravel(), error.mean(0)])
    config = TrainConfig(lr=0.1, momentum=0.0, batch_size=30, epochs=1)
    result = trainer.train(start, config, round=0)
    np.testing.assert_allclose(result.delta, -0.1 * grad, rtol=1e-4, atol=1e-7)
    assert result.n_samples == 30 and result.samples_seen == 30
    loss = -np.log(p[np.arange(30), y]).mean()
    assert abs(result.loss - loss) < 1e-5


def test_same_seed_and_round_give_the_same_delta_other_rounds_differ() -> None:
    config = TrainConfig(lr=0.1)
    a = _trainer().train(_weights(), config, round=3).delta
    b = _trainer().train(_weights(), config, round=3).delta
    c = _trainer().train(_weights(), config, round=4).delta
    other_client = _trainer(seed=1).train(_weights(), config, round=3).delta
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert not np.array_equal(a, other_client)


def test_proximal_term_pulls_towards_the_received_weights() -> None:
    plain = _trainer().train(_weights(), TrainConfig(lr=0.5, epochs=5), 0).delta
    prox = _trainer().train(_weights(), TrainConfig(lr=0.5, epochs=5, mu=5.0), 0).delta
    assert np.linalg.norm(prox) < np.linalg.norm(plain)


def test_evaluate_reports_accuracy_and_loss_on_the_held_out_split() -> None:
    trainer, weights = _linear_trainer()
    x, y = trainer.x_test.numpy(), trainer.y_test.numpy()
    _, logits, p = _softmax_regression(weights, x)
    scores = trainer.evaluate(weights)
    assert scores.n_samples == 10
    assert scores.accuracy == np.mean(logits.argmax(1) == y)
    assert abs(scores.loss - (-np.log(p[np.arange(10), y]).mean())) < 1e-5


@pytest.mark.parametrize(("n_train", "n_test"), [(0, 5), (5, 0), (0, 0)])
def test_a_client_without_a_train_or_a_test_sample_is_refused(
    n_train: int, n_test: int
) -> None:
    x, y = torch.zeros(5, 1, 4, 4), torch.zeros(5, dtype=torch.long)
    model = build_model("mlp", (1, 4, 4), 2, hidden=[8])
    with pytest.raises(ValueError) as refused:
        LocalTrainer(model, x[:n_train], y[:n_train], x[:n_test], y[:n_test], seed=0)
    assert str(refused.value) == (
        "a client needs at least one train and one test sample"
    )


def test_one_train_and_one_test_sample_make_a_client() -> None:
    x, y = torch.zeros(2, 1, 4, 4), torch.zeros(2, dtype=torch.long)
    model = build_model("mlp", (1, 4, 4), 2, hidden=[8])
    trainer = LocalTrainer(model, x[:1], y[:1], x[1:], y[1:], seed=0)
    assert (trainer.n_train, trainer.n_test) == (1, 1)


def _gradient_and_loss(weights: np.ndarray, x: np.ndarray, y: np.ndarray):  # type: ignore[no-untyped-def]
    """Softmax regression's mean cross-entropy and its flat gradient, by hand."""
    _, _, p = _softmax_regression(weights, x)
    error = p - np.eye(2)[y]
    gradient = np.concatenate([(error.T @ x / len(x)).ravel(), error.mean(0)])
    return gradient, -np.log(p[np.arange(len(x)), y]).mean()


def _hand_sgd(
    start: np.ndarray,
    x: np.ndarray,
    y: np.ndarray,
    *,
    lr: float,
    steps: int,
    momentum: float = 0.0,
    weight_decay: float = 0.0,
    mu: float = 0.0,
) -> tuple[np.ndarray, list[float]]:
    """`steps` full-batch steps of torch's SGD on softmax regression: the
    gradient of loss + mu/2 |w - start|², plus weight_decay × w, into a
    momentum buffer (b = g at the first step, then b = momentum b + g);
    the end weights and the loss (without the proximal term) of each step."""
    w = start.astype(np.float64)
    buffer = None
    losses = []
    for _ in range(steps):
        gradient, loss = _gradient_and_loss(w, x, y)
        losses.append(loss)
        gradient = gradient + mu * (w - start) + weight_decay * w
        buffer = gradient if buffer is None else momentum * buffer + gradient
        w = w - lr * buffer
    return w, losses


@pytest.mark.parametrize(
    ("momentum", "weight_decay", "mu"),
    [(0.9, 0.0, 0.0), (0.0, 0.1, 0.0), (0.0, 0.0, 0.5), (0.5, 0.05, 0.3)],
    ids=["momentum", "weight decay", "proximal", "all three"],
)
def test_two_full_batch_steps_are_torch_sgd_worked_by_hand(
    momentum: float, weight_decay: float, mu: float
) -> None:
    # One batch of all 30 samples an epoch, two epochs: two steps; the second
    # sees the momentum of the first and the distance it moved (FedProx).
    trainer, start = _linear_trainer()
    x, y = trainer.x_train.numpy().reshape(30, -1), trainer.y_train.numpy()
    config = TrainConfig(
        lr=0.5,
        momentum=momentum,
        weight_decay=weight_decay,
        mu=mu,
        batch_size=30,
        epochs=2,
    )
    result = trainer.train(start, config, round=0)
    end, losses = _hand_sgd(
        start,
        x,
        y,
        lr=0.5,
        steps=2,
        momentum=momentum,
        weight_decay=weight_decay,
        mu=mu,
    )
    np.testing.assert_allclose(result.delta, end - start, rtol=1e-4, atol=1e-6)
    assert abs(result.loss - np.mean(losses)) < 1e-5
    assert result.n_samples == 30 and result.samples_seen == 60


def test_the_reported_loss_weights_each_batch_by_its_size() -> None:
    # Batches of 16 and 14; at a vanishing lr every batch's loss is the start
    # model's, so their size-weighted mean is its loss over all 30 samples.
    trainer, start = _linear_trainer()
    x, y = trainer.x_train.numpy().reshape(30, -1), trainer.y_train.numpy()
    config = TrainConfig(lr=1e-9, batch_size=16, epochs=1)
    result = trainer.train(start, config, round=0)
    _, loss = _gradient_and_loss(start, x, y)
    assert abs(result.loss - loss) < 1e-6
    assert result.samples_seen == 30


def _without_noise_or_clipping() -> PrivateTraining:
    """DP-SGD with σ = 0 and a clipping bound no gradient reaches: plain SGD
    on Opacus' path, the mean gradient of each Poisson batch."""
    return PrivateTraining(
        epsilon=math.inf, delta=1e-5, max_grad_norm=1e6, noise_multiplier=0
    )


def test_a_private_round_without_noise_or_clipping_is_sgd_worked_by_hand() -> None:
    # As many samples as a batch: the Poisson rate is 1, every sample is in
    # the one step of each epoch. The proximal term joins after the noise,
    # so it moves the second step by -lr × mu × the first step.
    trainer, start = _linear_trainer()
    trainer.privacy = _without_noise_or_clipping()
    x, y = trainer.x_train.numpy().reshape(30, -1), trainer.y_train.numpy()
    config = TrainConfig(lr=0.5, momentum=0.0, mu=0.5, batch_size=30, epochs=2)
    result = trainer.train(start, config, round=0)
    end, losses = _hand_sgd(start, x, y, lr=0.5, steps=2, mu=0.5)
    np.testing.assert_allclose(result.delta, end - start, rtol=1e-4, atol=1e-6)
    assert abs(result.loss - np.mean(losses)) < 1e-5
    assert result.n_samples == 30 and result.samples_seen == 60
    assert result.epsilon == math.inf  # σ = 0: no privacy bought


# The first round of seed 0 in which both Poisson batches of a 2-sample client
# in batches of 1 come out empty (rounds 37, 41 and 51 of the first 60 do).
EMPTY_ROUND = 37


def test_a_private_round_whose_every_batch_is_empty_reports_the_received_loss() -> None:
    # Two samples in batches of 1: two steps an epoch at rate 1/2, both empty
    # with odds 1/16. No sample seen,
    # nothing learned (σ = 0), and the loss is the received model's.
    trainer, start = _linear_trainer()
    trainer = LocalTrainer(
        trainer.model,
        trainer.x_train[:2],
        trainer.y_train[:2],
        trainer.x_test,
        trainer.y_test,
        seed=0,
        privacy=_without_noise_or_clipping(),
    )
    config = TrainConfig(lr=0.5, batch_size=1, epochs=1)
    result = trainer.train(start, config, round=EMPTY_ROUND)
    assert result.samples_seen == 0 and result.n_samples == 2
    np.testing.assert_array_equal(result.delta, np.zeros_like(start))
    x, y = trainer.x_train.numpy().reshape(2, -1), trainer.y_train.numpy()
    _, loss = _gradient_and_loss(start, x, y)
    assert abs(result.loss - loss) < 1e-6


def _one_hot_trainer(seed: int = 0) -> tuple[LocalTrainer, np.ndarray]:
    """Softmax regression on one-hot inputs: sample i moves only column i of
    the weight matrix, so a gradient shows which samples its batch held."""
    x = torch.eye(30)
    y = torch.tensor([i % 3 % 2 for i in range(30)])
    torch.manual_seed(2)
    model = torch.nn.Sequential(torch.nn.Linear(30, 2))
    return LocalTrainer(model, x, y, x[:5], y[:5], seed=seed), get_flat(model)


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(-1, keepdims=True))
    return shifted / shifted.sum(-1, keepdims=True)


def _probe_batch(trainer: LocalTrainer, weights: np.ndarray, round: int) -> set[int]:
    _, gradient = trainer.batch_loss_and_gradient(weights, 10, round)
    columns = np.abs(gradient[:60].reshape(2, 30)).sum(0)
    return set(np.flatnonzero(columns > 0).tolist())


def test_the_probe_gradient_is_the_mean_gradient_of_its_batch() -> None:
    trainer, weights = _one_hot_trainer()
    loss, gradient = trainer.batch_loss_and_gradient(weights, 10, round=4)
    assert gradient.dtype == np.float32 and gradient.shape == weights.shape
    batch = sorted(_probe_batch(trainer, weights, 4))
    assert len(batch) == 10
    w, b = weights[:60].reshape(2, 30).astype(np.float64), weights[60:]
    y = trainer.y_train.numpy()[batch]
    p = _softmax(w[:, batch].T + b)  # x_i = e_i: the logits are column i + b
    error = p - np.eye(2)[y]
    expected = np.zeros((2, 30))
    expected[:, batch] = error.T / 10
    np.testing.assert_allclose(gradient[:60].reshape(2, 30), expected, atol=1e-7)
    np.testing.assert_allclose(gradient[60:], error.mean(0), atol=1e-7)
    assert abs(loss - (-np.log(p[np.arange(10), y]).mean())) < 1e-6


def test_the_probe_batch_is_the_rounds_own_stream() -> None:
    trainer, weights = _one_hot_trainer()
    batch = _probe_batch(trainer, weights, round=4)
    # every candidate model of the round is scored on the same batch, by any
    # copy of the client
    assert _probe_batch(trainer, weights * 2, round=4) == batch
    assert _probe_batch(_one_hot_trainer()[0], weights, round=4) == batch
    # another round, another client: another batch
    assert _probe_batch(trainer, weights, round=5) != batch
    assert _probe_batch(_one_hot_trainer(seed=1)[0], weights, round=4) != batch


def test_the_probe_batch_is_not_the_first_training_batch_of_the_round() -> None:
    # One epoch in batches of 10 at momentum 0: sample i's column moves once,
    # in its batch's step, by -lr/10 × (softmax(column i + bias) - onehot);
    # only in the first step is the bias still the received one, which picks
    # out the first batch.
    trainer, weights = _one_hot_trainer()
    config = TrainConfig(lr=1.0, momentum=0.0, batch_size=10, epochs=1)
    delta = trainer.train(weights, config, round=4).delta[:60].reshape(2, 30)
    w, b = weights[:60].reshape(2, 30).astype(np.float64), weights[60:]
    onehot = np.eye(2)[trainer.y_train.numpy()]
    first_step = -(_softmax(w.T + b) - onehot).T / 10
    first = {i for i in range(30) if np.allclose(delta[:, i], first_step[:, i])}
    assert len(first) == 10
    assert _probe_batch(trainer, weights, round=4) != first
