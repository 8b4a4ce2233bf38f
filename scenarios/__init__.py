"""Scenarios: what a run simulates, as validated data, and the built-ins."""

from __future__ import annotations

from .build import RunPlan, plan_run
from .builtin import BUILTIN
from .loader import load_scenario, validate, with_overrides
from .spec import (
    ClassTablePartition,
    DatasetSpec,
    DirichletPartition,
    IIDPartition,
    ModelSpec,
    Partition,
    Scenario,
    ShardsPartition,
)

__all__ = [
    "BUILTIN",
    "ClassTablePartition",
    "DatasetSpec",
    "DirichletPartition",
    "IIDPartition",
    "ModelSpec",
    "Partition",
    "RunPlan",
    "Scenario",
    "ShardsPartition",
    "load_scenario",
    "plan_run",
    "validate",
    "with_overrides",
]
