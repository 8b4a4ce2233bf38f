"""Scenarios: what a run simulates, as validated data, and the built-ins."""

from __future__ import annotations

from .build import RunPlan, plan_run
from .builtin import BUILTIN
from .engine import EngineSnapshot, Membership, ScenarioEngine
from .events import Crash, Drift, Dropout, Event, Join, Leave, Network, Straggle
from .loader import load_scenario, validate, with_overrides
from .spec import (
    ClassTablePartition,
    DatasetSpec,
    DirichletPartition,
    DPSpec,
    Faulty,
    IIDPartition,
    ModelSpec,
    Partition,
    Scenario,
    ShardsPartition,
)
from .transforms import PermutationTransform, RotationTransform

__all__ = [
    "BUILTIN",
    "ClassTablePartition",
    "Crash",
    "DatasetSpec",
    "DirichletPartition",
    "DPSpec",
    "Drift",
    "Dropout",
    "EngineSnapshot",
    "Event",
    "Faulty",
    "IIDPartition",
    "Join",
    "Leave",
    "ModelSpec",
    "Network",
    "Partition",
    "PermutationTransform",
    "RotationTransform",
    "RunPlan",
    "Scenario",
    "ScenarioEngine",
    "Membership",
    "ShardsPartition",
    "Straggle",
    "load_scenario",
    "plan_run",
    "validate",
    "with_overrides",
]
