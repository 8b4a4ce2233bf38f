"""Specs: everything needed to build the server or a client in any process.

A spec holds names and indices, not tensors, so it is cheap to send to a Ray
worker; the worker loads the dataset once and slices its client's samples.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from clusterfed.data import load_dataset
from clusterfed.models import build_model
from clusterfed.protocol import MAX_MESSAGE_BYTES, TrainConfig

from .clock import DeviceProfile
from .trainer import LocalTrainer


class ClientSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: int = Field(ge=0)
    group: int = Field(ge=0, description="ground truth, for metrics only")
    dataset: str
    dataset_root: str | None = None
    model: str
    model_params: dict[str, Any] = Field(default_factory=dict)
    train: list[int] = Field(min_length=1)
    test: list[int] = Field(min_length=1)
    seed: int
    profile: DeviceProfile = Field(default_factory=DeviceProfile)


def build_trainer(spec: ClientSpec) -> LocalTrainer:
    data = load_dataset(spec.dataset, spec.dataset_root)
    model = build_model(
        spec.model, data.input_shape, data.n_classes, **spec.model_params
    )
    train, test = list(spec.train), list(spec.test)
    return LocalTrainer(
        model,
        data.x[train],
        data.y[train],
        data.x[test],
        data.y[test],
        seed=spec.seed,
    )


class ServerSpec(BaseModel):
    """Everything needed to build the parameter server in any process."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    algorithm: str
    algorithm_params: dict[str, Any] = Field(default_factory=dict)
    initial: np.ndarray
    train_config: TrainConfig
    seed: int
    task_timeout_s: float | None = Field(None, gt=0)
    max_message_bytes: int = Field(MAX_MESSAGE_BYTES, gt=0)
