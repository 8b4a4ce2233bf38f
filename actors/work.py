"""The blocking work of a client task, as plain functions a pool can run.

A trainer keeps nothing between tasks that matters (the weights come with the
task, the shuffling stream is derived from the round), so any thread or
worker process can serve any client: each process keeps a cache of trainers,
rebuilt when a client's data changes. The exception is local DP: a client's
privacy accountant counts every round it trained, so it lives with the
client's trainer on the process that hosts the client (a client stays on its
worker for the whole run), and passes to the trainer rebuilt after a drift.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from clusterfed.algorithms import Candidate, make_policy
from clusterfed.data import load_dataset
from clusterfed.protocol import IdentityRule, TrainConfig
from clusterfed.types import ClusterId

from .spec import ClientSpec, build_trainer
from .trainer import EvalResult, LocalTrainer, TrainResult

_trainers: dict[int, tuple[dict[str, Any], LocalTrainer]] = {}
_lock = threading.Lock()


def trainer_for(spec: ClientSpec) -> LocalTrainer:
    """This process's trainer for `spec`, rebuilt only when its data changes."""
    key = spec.data_key()
    with _lock:
        cached = _trainers.get(spec.id)
        if cached is not None and cached[0] == key:
            return cached[1]
    trainer = build_trainer(spec)
    if (
        cached is not None
        and key["privacy"] is not None
        and cached[0]["privacy"] == key["privacy"]
    ):
        # The same client under the same privacy plan of the same run, with
        # new data (a drift): its budget is the one it has been spending.
        trainer.privacy = cached[1].privacy
    with _lock:
        _trainers[spec.id] = (key, trainer)
    return trainer


def train(
    spec: ClientSpec,
    candidates: Sequence[Candidate],
    identity: IdentityRule | None,
    config: TrainConfig,
    round: int,
) -> tuple[ClusterId, TrainResult]:
    """Pick a candidate (by the identity policy, if several) and train it."""
    trainer = trainer_for(spec)
    trainer.check_budget(config)  # refuse before probing, not only before training
    chosen = candidates[0]
    probe = _Probe(trainer, config.batch_size)
    if identity is not None and len(candidates) > 1:
        policy = make_policy(identity.name, identity.params)
        cluster = policy.choose(probe, candidates, round)
        chosen = next(c for c in candidates if c.cluster == cluster)
    result = trainer.train(chosen.weights, config, round)
    # Probing costs simulated compute too: count its samples like training's.
    return chosen.cluster, replace(
        result, samples_seen=result.samples_seen + probe.samples
    )


def evaluate(spec: ClientSpec, weights: np.ndarray) -> EvalResult:
    return trainer_for(spec).evaluate(weights)


def evaluate_many(spec: ClientSpec, models: Sequence[np.ndarray]) -> list[EvalResult]:
    """Each model's accuracy and loss on the held-out split (a probe task)."""
    trainer = trainer_for(spec)
    return [trainer.evaluate(weights) for weights in models]


def class_histogram(spec: ClientSpec) -> list[int]:
    """Training samples per class, as the client reads its labels (after any
    label permutation): the one description of its data a client may send."""
    labels = trainer_for(spec).y_train.numpy()
    n_classes = load_dataset(spec.dataset, spec.dataset_root).n_classes
    return [int(n) for n in np.bincount(labels, minlength=n_classes)]


def privacy_history(spec: ClientSpec) -> list[tuple[float, float, int]]:
    """The history of the client's privacy accountant in this process (Opacus'
    `(noise multiplier, sample rate, steps)` entries); empty if it never trained."""
    with _lock:
        cached = _trainers.get(spec.id)
    if cached is None or cached[1].privacy is None:
        return []
    return [tuple(entry) for entry in cached[1].privacy.engine.accountant.history]  # type: ignore[misc]


def restore_privacy(spec: ClientSpec, history: Sequence[Sequence[Any]]) -> None:
    """Give the client's accountant `history` back (a resumed run): what it
    spent before the checkpoint counts against its budget as before."""
    with _lock:
        cached = _trainers.get(spec.id)
    if not history and cached is None:
        return  # a trainer built later starts with empty books anyway
    privacy = trainer_for(spec).privacy
    if privacy is None:
        raise ValueError(f"client {spec.id} has no privacy accountant to restore")
    # Opacus keeps tuples; epsilon_of caches on them.
    privacy.engine.accountant.history = [
        (float(s), float(q), int(n)) for s, q, n in history
    ]


def init_worker() -> None:
    """Start-up of a pool worker process: one torch thread, no inherited cache."""
    torch.set_num_threads(1)
    _trainers.clear()


class _Probe:
    """The client's data as an identity policy may see it (a `ClientProbe`)."""

    def __init__(self, trainer: LocalTrainer, batch_size: int) -> None:
        self.trainer = trainer
        self.batch_size = batch_size
        self.samples = 0

    def loss(self, weights: np.ndarray) -> float:
        self.samples += self.trainer.n_train
        return self.trainer.loss(weights)

    def batch_loss_and_gradient(
        self, weights: np.ndarray, round: int
    ) -> tuple[float, np.ndarray]:
        self.samples += min(self.batch_size, self.trainer.n_train)
        return self.trainer.batch_loss_and_gradient(weights, self.batch_size, round)
