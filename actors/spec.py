"""Specs: everything needed to build the server or a client in any process.

A spec holds names and indices, not tensors, so it is cheap to send to a Ray
worker; the worker loads the dataset once and slices its client's samples.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field
from torchvision.transforms.functional import InterpolationMode
from torchvision.transforms.functional import rotate as rotate_image

from clusterfed.data import load_dataset
from clusterfed.models import build_model
from clusterfed.protocol import MAX_MESSAGE_BYTES, TrainConfig

from .clock import DeadlinePolicy, DeviceProfile, WaitAll
from .trainer import LocalTrainer


class ClientSpec(BaseModel):
    """One client: its samples, its transform, its device."""

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
    rotation: float = Field(0.0, description="feature skew: degrees, counter-clockwise")
    label_permutation: list[int] | None = Field(
        None, description="preference skew: label y is read as label_permutation[y]"
    )
    slowdown: float = Field(1.0, gt=0, description="straggler factor on compute time")

    def data_key(self) -> dict[str, Any]:
        """The fields a trainer is built from; the others change no tensor."""
        return self.model_dump(exclude={"group", "profile", "slowdown"})


def build_trainer(spec: ClientSpec) -> LocalTrainer:
    """The client's trainer: its samples, transformed, and a fresh model."""
    data = load_dataset(spec.dataset, spec.dataset_root)
    model = build_model(
        spec.model, data.input_shape, data.n_classes, **spec.model_params
    )
    y = data.y
    if spec.label_permutation is not None:
        if sorted(spec.label_permutation) != list(range(data.n_classes)):
            raise ValueError(
                f"label_permutation must permute 0..{data.n_classes - 1},"
                f" got {spec.label_permutation}"
            )
        y = torch.tensor(spec.label_permutation)[y]
    train, test = list(spec.train), list(spec.test)
    x_train, x_test = data.x[train], data.x[test]
    if spec.rotation % 360:
        x_train, x_test = rotate(x_train, spec.rotation), rotate(x_test, spec.rotation)
    return LocalTrainer(model, x_train, y[train], x_test, y[test], seed=spec.seed)


def rotate(images: torch.Tensor, degrees: float) -> torch.Tensor:
    """Images rotated counter-clockwise about their centre; exact for 90° steps."""
    if degrees % 90 == 0:
        return torch.rot90(images, k=int(degrees // 90) % 4, dims=(-2, -1))
    return rotate_image(images, degrees, interpolation=InterpolationMode.BILINEAR)


class ServerSpec(BaseModel):
    """Everything needed to build the parameter server in any process."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    algorithm: str
    algorithm_params: dict[str, Any] = Field(default_factory=dict)
    initial: np.ndarray
    more_initial: list[np.ndarray] = Field(
        default_factory=list,
        description="more independent initial models, for strategies that ask",
    )
    train_config: TrainConfig
    seed: int
    deadline: DeadlinePolicy = Field(default_factory=WaitAll)
    task_timeout_s: float | None = Field(None, gt=0)
    max_message_bytes: int = Field(MAX_MESSAGE_BYTES, gt=0)
