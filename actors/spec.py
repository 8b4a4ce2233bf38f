"""Specs: everything needed to build the server or a client in any process.

A spec holds names and indices, not tensors, so it is cheap to send to a Ray
worker; the worker loads the dataset once and slices its client's samples.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from clusterfed.data import Dataset, load_dataset
from clusterfed.data.datasets import load_test_split
from clusterfed.data.synthetic import client_rows
from clusterfed.models import build_model

from .compute import ComputeSpec
from .privacy import Horizon, PrivateTraining, private_model
from .rows import Rows
from .trainer import LocalTrainer

Accountant = Literal["rdp", "prv", "gdp"]


class PrivacyPlan(BaseModel):
    """A client's local DP: its budget and the noise planned to spend it.

    `noise_multiplier` is Opacus' σ that spends at most ε over `steps` DP-SGD
    steps at `sample_rate`: `rounds` × local epochs × steps per epoch, where
    `rounds` is every round the client plans to take part in (horizon "run")
    or 1 (horizon "round": the budget applies to each round alone). A client
    that would go past ε refuses to train.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    epsilon: float = Field(gt=0, allow_inf_nan=False)
    delta: float = Field(gt=0, lt=1)
    max_grad_norm: float = Field(gt=0, allow_inf_nan=False)
    accountant: Accountant = "rdp"
    noise_multiplier: float = Field(ge=0, allow_inf_nan=False)
    horizon: Horizon = Field("run", description="what ε covers: the run or a round")
    rounds: int = Field(ge=1, description="the rounds one ε is planned over")
    sample_rate: float = Field(gt=0, le=1)
    steps: int = Field(ge=1, description="the DP-SGD steps one ε is planned over")
    run_id: str = Field(
        min_length=1,
        description="the run these books belong to: an accountant never"
        " carries over from one run to another",
    )


def privacy_summary(
    plans: Mapping[int, PrivacyPlan], spent: Mapping[int, float]
) -> dict[str, Any] | None:
    """Each client's local DP as planned and as spent, for summary.json: its
    σ, sampling rate, the steps and rounds one ε was planned over, its steps
    per round and the total ε it last reported (None if it never trained);
    None without DP. `plans` and `spent` are keyed by client id."""
    if not plans:
        return None
    first = next(iter(plans.values()))
    sigmas = [p.noise_multiplier for p in plans.values()]
    return {
        "epsilon": first.epsilon,
        "delta": first.delta,
        "accountant": first.accountant,
        "horizon": first.horizon,
        "noise_multiplier": {"min": min(sigmas), "max": max(sigmas)},
        "clients": {
            str(cid): {
                "noise_multiplier": plan.noise_multiplier,
                "sample_rate": plan.sample_rate,
                "planned_rounds": plan.rounds,
                "planned_steps": plan.steps,
                "steps_per_round": plan.steps // plan.rounds,
                "epsilon_spent": spent.get(cid),
            }
            for cid, plan in sorted(plans.items())
        },
    }


class ClientSpec(BaseModel):
    """One client: its samples, its transform, its model and privacy.

    Its simulated device (profile and straggler slowdown) is no part of it: the
    server's `SimClock` holds devices and times every task, so no client
    works out or reports its own compute time."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: int = Field(ge=0)
    group: int = Field(ge=0, description="ground truth, for metrics only")
    dataset: str
    dataset_root: str | None = None
    model: str
    model_params: dict[str, Any] = Field(default_factory=dict)
    train: list[int] = Field(min_length=1)
    test: list[int] = Field(
        min_length=1,
        description="the hold-out of its training samples: validation data for"
        " the algorithms' decisions, and the reported accuracy without `test_set`",
    )
    test_set: list[int] | None = Field(
        None,
        min_length=1,
        # Absent from a dump while None, so a digits client's data key (and
        # whatever is built from it) is as it was before the field existed.
        exclude_if=lambda value: value is None,
        description="its test set: indices into the dataset's own test split,"
        " drawn to its class mix; what its reported accuracy comes from;"
        " None where the dataset has no test split",
    )
    seed: int
    rotation: float = Field(0.0, description="feature skew: degrees, counter-clockwise")
    label_permutation: list[int] | None = Field(
        None, description="preference skew: label y is read as label_permutation[y]"
    )
    privacy: PrivacyPlan | None = Field(None, description="local DP; None: off")
    compute: ComputeSpec | None = Field(
        None,
        # Absent from a dump while None (CPU, one task at a time), so the
        # specs and data keys of such runs are as before the field existed.
        exclude_if=lambda value: value is None,
        description="the torch device it computes on and its host's cohort"
        " size; None: CPU, one task at a time",
    )

    @property
    def device(self) -> torch.device:
        """The torch device the client computes on."""
        return torch.device("cpu" if self.compute is None else self.compute.device)

    def data_key(self) -> dict[str, Any]:
        """The fields a trainer is built from; the others change no tensor."""
        return self.model_dump(exclude={"group"})


class ScratchModels:
    """The models a host's client tasks run in, one per architecture.

    A task loads its weights first and leaves nothing behind, and a host
    serves one task at a time, so one model per architecture is enough:
    1,000 clients of a 500k-weight MLP cost one model, not a thousand. The
    host owns this pool; its clients share it.
    """

    def __init__(self) -> None:
        self._models: dict[str, nn.Module] = {}

    def model_for(
        self, spec: ClientSpec, input_shape: tuple[int, ...], n_classes: int
    ) -> nn.Module:
        private = spec.privacy is not None
        found = [spec.model, spec.model_params, input_shape, n_classes, private]
        if spec.compute is not None:  # CPU keys stay as they were
            found.append(str(spec.device))
        key = json.dumps(found)
        model = self._models.get(key)
        if model is None:
            model = build_model(spec.model, input_shape, n_classes, **spec.model_params)
            model = private_model(model) if private else model
            model = self._models[key] = model.to(spec.device)
        return model


def build_trainer(
    spec: ClientSpec, models: ScratchModels | None = None
) -> LocalTrainer:
    """The client's trainer: its samples, transformed, and a model of `models`
    (the host's pool; a fresh pool by default)."""
    data = load_dataset(spec.dataset, spec.dataset_root)
    pool = models if models is not None else ScratchModels()
    model = pool.model_for(spec, data.input_shape, data.n_classes)
    privacy = None
    if spec.privacy is not None:
        privacy = PrivateTraining(
            epsilon=spec.privacy.epsilon,
            delta=spec.privacy.delta,
            max_grad_norm=spec.privacy.max_grad_norm,
            noise_multiplier=spec.privacy.noise_multiplier,
            accountant=spec.privacy.accountant,
            horizon=spec.privacy.horizon,
        )
    if data.name.startswith("synthetic"):  # rows of its own, from its seed
        n = max(max(spec.train), max(spec.test)) + 1
        x_own, y_own = client_rows(spec.dataset, spec.seed, spec.id, n)
        data = Dataset(data.name, x_own, y_own, data.n_classes)
    y = _labels(spec, data.y, data.n_classes)
    train = torch.tensor(spec.train, dtype=torch.long)
    y_train = y[train]
    test = torch.tensor(spec.test, dtype=torch.long)
    # Unrotated clients read the shared dataset through their indices.
    x_train, x_test = Rows(data.x, train), Rows(data.x, test)
    if spec.rotation % 360:
        x_train = Rows(rotate(x_train.gather(), spec.rotation))
        x_test = Rows(rotate(x_test.gather(), spec.rotation))
    if getattr(spec, "faults", ()):  # a poisoned client trains on its own copy
        from .faults import poisoned_data  # faults.py imports this module

        x_train, y_train = poisoned_data(spec, x_train, y_train, data.n_classes)
    test_set = _test_set(spec, data.n_classes)
    device = spec.device
    if device.type != "cpu":
        # The client's own rows go to the device once, not every batch.
        x_train, x_test = (
            Rows(x_train.gather().to(device)),
            Rows(x_test.gather().to(device)),
        )
        if test_set is not None:
            test_set = (Rows(test_set[0].gather().to(device)), test_set[1].to(device))
    return LocalTrainer(
        model,
        x_train,
        y_train.to(device),
        x_test,
        y[test].to(device),
        seed=spec.seed,
        privacy=privacy,
        test_set=test_set,
    )


def _labels(spec: ClientSpec, y: torch.Tensor, n_classes: int) -> torch.Tensor:
    """`y` as the client reads it: through its label permutation, if any."""
    if spec.label_permutation is None:
        return y
    if sorted(spec.label_permutation) != list(range(n_classes)):
        raise ValueError(
            f"label_permutation must permute 0..{n_classes - 1},"
            f" got {spec.label_permutation}"
        )
    return torch.tensor(spec.label_permutation)[y]


def _test_set(spec: ClientSpec, n_classes: int) -> tuple[Rows, torch.Tensor] | None:
    """The client's test set, transformed as its training samples are."""
    if spec.test_set is None:
        return None
    split = load_test_split(spec.dataset, spec.dataset_root)
    if split is None:
        raise ValueError(f"dataset {spec.dataset!r} has no test split to draw from")
    rows = torch.tensor(spec.test_set, dtype=torch.long)
    if int(rows.max()) >= len(split) or int(rows.min()) < 0:
        raise ValueError(
            f"test_set indices must lie in 0..{len(split) - 1} of {spec.dataset}'s"
            " test split"
        )
    x = Rows(split.x, rows)
    if spec.rotation % 360:
        x = Rows(rotate(x.gather(), spec.rotation))
    return x, _labels(spec, split.y, n_classes)[rows]


def rotate(images: torch.Tensor, degrees: float) -> torch.Tensor:
    """Images rotated counter-clockwise about their centre; exact for 90° steps."""
    if degrees % 90 == 0:
        return torch.rot90(images, k=int(degrees // 90) % 4, dims=(-2, -1))
    # Imported here: torchvision adds 164 MiB to every process that imports
    # it, and only rotations by other angles need it.
    from torchvision.transforms.functional import InterpolationMode
    from torchvision.transforms.functional import rotate as rotate_image

    # torchvision ships no type information: its result is Any until named.
    rotated: torch.Tensor = rotate_image(
        images, degrees, interpolation=InterpolationMode.BILINEAR
    )
    return rotated
