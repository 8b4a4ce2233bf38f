"""`LocalTrainer`: a client's training and evaluation, with no runtime around it.

It owns one model and the client's tensors; a task loads the received weights,
runs plain minibatch SGD and returns the delta. The shuffling stream of a task
is derived from the client's seed and the round, so a result never depends on
which thread, process or Ray actor ran it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from clusterfed.models import get_flat, set_flat
from clusterfed.protocol import TrainConfig
from clusterfed.seeding import derive_seed

PROBE_KEY = 1  # keeps the probe's mini-batch stream apart from training's


@dataclass(frozen=True)
class TrainResult:
    delta: np.ndarray
    loss: float
    n_samples: int
    samples_seen: int


@dataclass(frozen=True)
class EvalResult:
    accuracy: float
    loss: float
    n_samples: int


class LocalTrainer:
    def __init__(
        self,
        model: nn.Module,
        x_train: torch.Tensor,
        y_train: torch.Tensor,
        x_test: torch.Tensor,
        y_test: torch.Tensor,
        *,
        seed: int,
    ) -> None:
        if len(y_train) == 0 or len(y_test) == 0:
            raise ValueError("a client needs at least one train and one test sample")
        self.model = model
        self.x_train, self.y_train = x_train, y_train
        self.x_test, self.y_test = x_test, y_test
        self.seed = seed

    @property
    def n_train(self) -> int:
        return len(self.y_train)

    @property
    def n_test(self) -> int:
        return len(self.y_test)

    def train(
        self, weights: np.ndarray, config: TrainConfig, round: int
    ) -> TrainResult:
        """Train from `weights` for `config.epochs` epochs; return the delta."""
        set_flat(self.model, weights)
        self.model.train()
        params = list(self.model.parameters())
        start = [p.detach().clone() for p in params] if config.mu > 0 else None
        optimizer = torch.optim.SGD(
            params,
            lr=config.lr,
            momentum=config.momentum,
            weight_decay=config.weight_decay,
        )
        generator = torch.Generator().manual_seed(derive_seed(self.seed, round))
        n = self.n_train
        total_loss, seen = 0.0, 0
        for _ in range(config.epochs):
            order = torch.randperm(n, generator=generator)
            for first in range(0, n, config.batch_size):
                batch = order[first : first + config.batch_size]
                loss = F.cross_entropy(
                    self.model(self.x_train[batch]), self.y_train[batch]
                )
                total_loss += loss.item() * len(batch)
                seen += len(batch)
                if start is not None:
                    loss = loss + config.mu / 2 * _squared_distance(params, start)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
        delta = get_flat(self.model) - weights
        return TrainResult(delta, total_loss / seen, n, seen)

    @torch.no_grad()
    def loss(self, weights: np.ndarray) -> float:
        """Mean loss of `weights` over the training samples."""
        set_flat(self.model, weights)
        self.model.eval()
        return F.cross_entropy(self.model(self.x_train), self.y_train).item()

    def batch_loss_and_gradient(
        self, weights: np.ndarray, batch_size: int, round: int
    ) -> tuple[float, np.ndarray]:
        """Mean loss and its flat gradient on one mini-batch of the round.

        The batch is drawn from a stream of its own, the same for every
        candidate model of the round, so candidates are compared on equal data.
        """
        set_flat(self.model, weights)
        self.model.train()
        generator = torch.Generator().manual_seed(
            derive_seed(self.seed, round, PROBE_KEY)
        )
        batch = torch.randperm(self.n_train, generator=generator)[:batch_size]
        self.model.zero_grad(set_to_none=True)
        loss = F.cross_entropy(self.model(self.x_train[batch]), self.y_train[batch])
        loss.backward()
        gradient = torch.cat([p.grad.reshape(-1) for p in self.model.parameters()])  # type: ignore[union-attr]
        return loss.item(), gradient.numpy().astype(np.float32, copy=True)

    @torch.no_grad()
    def evaluate(self, weights: np.ndarray) -> EvalResult:
        """Accuracy and mean loss of `weights` on the held-out split."""
        set_flat(self.model, weights)
        self.model.eval()
        logits = self.model(self.x_test)
        loss = F.cross_entropy(logits, self.y_test).item()
        correct = (logits.argmax(dim=1) == self.y_test).sum().item()
        return EvalResult(correct / self.n_test, loss, self.n_test)


def _squared_distance(
    params: Sequence[torch.Tensor], start: Sequence[torch.Tensor]
) -> torch.Tensor:
    return sum(((p - s) ** 2).sum() for p, s in zip(params, start, strict=True))  # type: ignore[return-value]
