"""The blocking work of a client task, as plain functions a pool can run.

A trainer keeps nothing between tasks that matters (the weights come with the
task, the shuffling stream is derived from the round), so any thread or
worker process can serve any client: each process keeps a cache of trainers,
rebuilt when a client's spec changes.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import torch

from clusterfed.protocol import TrainConfig

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
    with _lock:
        _trainers[spec.id] = (key, trainer)
    return trainer


def train(
    spec: ClientSpec, weights: np.ndarray, config: TrainConfig, round: int
) -> TrainResult:
    return trainer_for(spec).train(weights, config, round)


def evaluate(spec: ClientSpec, weights: np.ndarray) -> EvalResult:
    return trainer_for(spec).evaluate(weights)


def init_worker() -> None:
    """Start-up of a pool worker process: one torch thread, no inherited cache."""
    torch.set_num_threads(1)
    _trainers.clear()
