"""Where a run's clients compute: the torch device, and cohort training.

`ComputeSpec` is a setting of the run, not of the protocol: no message
carries a device. The scenario holds it (`[compute]` in TOML, `--device`
and `--cohort` on the command line), every `ClientSpec` of a run that
leaves CPU or trains in cohorts carries a copy to its host, and the host
builds its clients' trainers on that device.

There is no "auto" device: a scenario that picked CUDA where present would
give different numbers on a laptop and on a GPU box under one name, since
GPU kernels round differently from CPU ones (docs/runtimes.md). A run names
its device, and a device that is not there is refused before anything runs
(`check_device`).
"""

from __future__ import annotations

import os
import re
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator

from clusterfed.errors import ConfigError

DEVICE_FORMS = "cpu, cuda, cuda:N or mps"
_DEVICE = re.compile(r"^(cpu|mps|cuda(:\d{1,3})?)$")


class ComputeSpec(BaseModel):
    """Where clients compute (`device`) and how many train tasks of one host
    train as one stacked computation (`cohort`; 1: one at a time)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    device: str = Field(
        "cpu",
        description="the torch device of every client's training, evaluation"
        " and probes: cpu, cuda, cuda:N or mps (no auto: a run names its device)",
    )
    cohort: int = Field(
        1,
        ge=1,
        le=4096,
        description="train tasks of one host trained as one stacked computation"
        " (clients of one model and one config); 1: one at a time",
    )

    @field_validator("device", mode="before")
    @classmethod
    def _device_form(cls, value: object) -> object:
        if not isinstance(value, str):
            raise ValueError(f"a device is a name ({DEVICE_FORMS}), got {value!r}")
        name = value.strip().lower()
        if name == "auto":
            raise ValueError(
                'device "auto" does not exist: GPU and CPU runs round differently,'
                f" so a run names its device ({DEVICE_FORMS})"
            )
        if not _DEVICE.match(name):
            raise ValueError(f"unknown device {value!r}; use {DEVICE_FORMS}")
        return name

    @property
    def is_default(self) -> bool:
        """On CPU, one task at a time: what runs did before the setting."""
        return self == ComputeSpec()


def check_device(name: str) -> None:
    """Refuse a device this machine does not have, before anything runs.

    Raises:
        ConfigError: CUDA without a CUDA build or GPU, a CUDA index past the
            GPUs there are, MPS off Apple silicon.
    """
    kind = device_kind(name)
    if kind == "cuda":
        if not torch.cuda.is_available():
            why = (
                "this torch build has no CUDA"
                if torch.version.cuda is None
                else "no CUDA GPU is visible (torch.cuda.is_available() is False)"
            )
            raise ConfigError(f"device {name!r}: {why}; use --device cpu")
        index = torch.device(name).index
        count = torch.cuda.device_count()
        if index is not None and index >= count:
            raise ConfigError(
                f"device {name!r}: this machine has {count} CUDA GPU(s),"
                f" cuda:0..cuda:{count - 1}"
            )
    elif kind == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"device {name!r}: MPS is not available here; use cpu")


def device_kind(name: str) -> Literal["cpu", "cuda", "mps"]:
    """The kind of a device name of `DEVICE_FORMS`: "cpu", "cuda" or "mps"."""
    kind = torch.device(name).type
    if kind == "cuda":
        return "cuda"
    return "mps" if kind == "mps" else "cpu"


def start_method(name: str) -> Literal["fork", "spawn"]:
    """How the local runtime starts its workers for device `name`.

    CUDA state does not survive a fork (a child of a parent that touched
    CUDA fails on its first kernel), and the parent asks the driver whether
    a GPU is there (`check_device`), so CUDA runs start their workers with
    spawn: each initialises CUDA itself. CPU runs keep fork, which shares
    the loaded dataset with every worker.
    """
    return "fork" if device_kind(name) == "cpu" else "spawn"


def prepare_process(name: str) -> None:
    """Set up this process to compute on device `name`, before its first
    kernel: on CUDA, deterministic algorithms where torch has them.

    cuBLAS is deterministic with a fixed workspace (the variable must be set
    before CUDA starts), and `use_deterministic_algorithms` picks the
    deterministic kernels of the few operations that have both (scatter-add
    in embedding and index backward passes); our MLPs and CNNs pay nothing
    measurable for them. `warn_only`: an operation without a deterministic
    kernel warns instead of failing a run. CPU processes are left as they
    are: their kernels are deterministic already.
    """
    if device_kind(name) != "cuda":
        return
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    # TF32 matmuls would round every product to 10 bits of mantissa.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
