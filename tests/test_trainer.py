"""LocalTrainer without any runtime."""

from __future__ import annotations

import numpy as np
import torch

from clusterfed.actors import LocalTrainer
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
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


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
