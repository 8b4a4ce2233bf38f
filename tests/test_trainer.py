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


def test_evaluate_reports_accuracy_on_the_held_out_split() -> None:
    trainer = _trainer()
    scores = trainer.evaluate(_weights())
    assert scores.n_samples == 10 and 0.0 <= scores.accuracy <= 1.0
    logits = trainer.model(trainer.x_test)
    expected = (logits.argmax(1) == trainer.y_test).float().mean().item()
    assert scores.accuracy == expected
