"""A scenario is data: what to simulate, validated before anything runs.

The same pydantic models validate a TOML file, a Python script and the
built-ins. Algorithm hyperparameters sit in `algorithm_params.<name>` tables,
so one scenario carries settings for every algorithm it is compared with.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from clusterfed.actors import DeviceProfile
from clusterfed.actors.availability import AlwaysOnline, Availability
from clusterfed.actors.clock import DeadlinePolicy, WaitAll
from clusterfed.actors.compute import ComputeSpec
from clusterfed.actors.faults import FaultPlan
from clusterfed.algorithms.robust import (
    AGGREGATORS,
    PRE_AGGREGATORS,
    Aggregator,
    Mean,
    parse_aggregator,
)
from clusterfed.protocol import TrainConfig

from ._base import _Spec
from .bounds import (
    DATASET_SIZES,
    TASK_TIMEOUT_FLOOR_S,
    UNKNOWN_DATASET_TIMEOUT_S,
    check_model_fits,
    check_partition_fits,
    check_workers,
    default_task_timeout,
)
from .capabilities import check_algorithm, check_capabilities
from .events import Event, Join, Target
from .faults import BackdoorProbe, Faulty
from .partitions import (
    ClassTablePartition,
    DirichletPartition,
    IIDMixPartition,
    IIDPartition,
    Partition,
    ShardsPartition,
)
from .population import PopulationSpec, check_population
from .privacy import DPSpec
from .robustness import check_attacks
from .transforms import TransformSpec, n_transform_groups

# Partitions, bounds and client specs live in modules of their own; the
# names callers import from here stay importable from here.
__all__ = [
    "DATASET_SIZES",
    "OFF_WORDS",
    "TASK_TIMEOUT_FLOOR_S",
    "UNKNOWN_DATASET_TIMEOUT_S",
    "ClassTablePartition",
    "DatasetSpec",
    "DirichletPartition",
    "DPSpec",
    "Faulty",
    "IIDMixPartition",
    "IIDPartition",
    "ModelSpec",
    "Partition",
    "Scenario",
    "ShardsPartition",
    "check_workers",
]


class DatasetSpec(_Spec):
    name: str = "digits"
    root: str | None = Field(None, description="folder of a file-based dataset")


class ModelSpec(BaseModel):
    """A model family by name; any other key is a parameter of the family."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: str = "mlp"

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


OFF_WORDS = ("off", "none", "false", "no")


def _means_off(value: Any) -> bool:
    """Whether a setting's value is a word of OFF_WORDS, or false: TOML has no
    null, so `--set X=off` or `X = "none"` is how a run leaves X unset."""
    return value is False or (isinstance(value, str) and value.lower() in OFF_WORDS)


class Scenario(_Spec):
    """One simulated federation: data, model, algorithm, clients, rounds, seed."""

    name: str = Field(min_length=1)
    description: str = ""
    dataset: DatasetSpec = DatasetSpec()
    partition: Partition = DirichletPartition()
    test_fraction: float = Field(0.2, gt=0, lt=1)
    model: ModelSpec = ModelSpec()
    algorithm: str = "fedavg"
    algorithm_params: dict[str, dict[str, Any]] = Field(default_factory=dict)
    train: TrainConfig = TrainConfig()
    clients: int = Field(20, ge=1)
    rounds: int = Field(30, ge=1)
    seed: int = Field(0, ge=0)
    transform: TransformSpec | None = Field(
        None, description="feature/preference skew by group: rotation or labels"
    )
    device: DeviceProfile = Field(
        default_factory=DeviceProfile, description="every client's device"
    )
    devices: dict[int, DeviceProfile] = Field(
        default_factory=dict, description="per-client devices, by client id"
    )
    deadline: DeadlinePolicy = Field(
        default_factory=WaitAll, description="when a round stops waiting"
    )
    events: list[Event] = Field(default_factory=list)
    task_timeout_s: (
        Annotated[float, Field(gt=0, allow_inf_nan=False)] | Literal["auto"] | None
    ) = Field(
        "auto",
        description='wall-clock limit on one request; "auto": derived from the'
        ' scenario (see `default_task_timeout`); none (or "none"): wait forever',
    )
    max_update_norm: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="updates whose delta has a larger L2 norm are refused",
    )
    max_update_ratio: float | None = Field(
        1000.0,
        ge=1,
        allow_inf_nan=False,
        description="updates whose delta's L2 norm is over this many times the"
        " norm of the model it was trained from (counted as at least 1) are"
        " refused: no honest step comes near (honest digits runs measured at"
        " most 5.4, dcfl-dynamic with DP; 0.1 quickstart), an absurd one (1e30"
        " everywhere) would ruin or freeze the model; none: no bound",
    )
    max_weight_ratio: float | None = Field(
        10.0,
        ge=1,
        allow_inf_nan=False,
        description="a client's sample count weighs at most this many times the"
        " median count the registered clients declared at join, so no client"
        " owns a weighted mean by declaring 2**31 - 1 samples (honest digits"
        " partitions measured at most 3.1x their median: Dirichlet(0.3), 40"
        " clients); a capped count is named in its client's row; none: no cap",
    )
    faulty: list[Faulty] = Field(
        default_factory=list, description="clients that misbehave on purpose"
    )
    backdoor_probe: BackdoorProbe | None = Field(
        None,
        description="a backdoor's trigger measured on a run with no backdoor"
        " client: each row reports backdoor_success for it, the rate a clean"
        " model gives (a backdoor's baseline); None: off",
    )
    aggregator: Aggregator = Field(
        default_factory=Mean,
        description="how each cluster folds its members' updates: mean (the"
        f" algorithm's own) or {', '.join(AGGREGATORS[1:])}; pre-aggregators"
        f" ({', '.join(PRE_AGGREGATORS)}) go in front, joined by + (nnm+krum)",
    )
    dp: DPSpec | None = Field(
        None, description='local differential privacy; None (or "off"): off'
    )
    mode: Literal["sync", "async"] = Field(
        "sync",
        description="sync: rounds closed by the deadline policy; async: every"
        " update is folded when it arrives on the simulated clock (a row per"
        " aggregation), for strategies with an asynchronous mode",
    )
    concurrency: int | None = Field(
        None, ge=1, description="async: clients training at once (default: all)"
    )
    max_staleness: int | None = Field(
        None,
        ge=0,
        description="async: updates more server versions old than this are"
        " dropped (counted late)",
    )
    availability: Availability = Field(
        default_factory=AlwaysOnline,
        description='when clients are online: "always", "diurnal" (period_s,'
        ' online_fraction, seed) or "trace" (path: a CSV of client,'
        " online_from, online_to in simulated seconds); an offline client is"
        " not sampled or started, and one that goes offline while training"
        " has failed",
    )
    compute: ComputeSpec = Field(
        default_factory=ComputeSpec,
        # Absent from config.json while CPU and one task at a time, so the
        # runs (and folder hashes) of before the setting read the same.
        exclude_if=lambda value: value.is_default,
        description="where clients compute: device (cpu, cuda, cuda:N, mps) and"
        " cohort (train tasks of a host trained as one stacked computation);"
        " a setting of the run, never sent in a message",
    )
    population: PopulationSpec | None = Field(
        None,
        # Absent from config.json while None: runs without one read as before.
        exclude_if=lambda value: value is None,
        description="a lazy population of registered clients of a procedural"
        " dataset, K of them a round (population.py); None: `clients` are all"
        " built at start and take part as the strategy samples them",
    )
    rows: Literal["full", "summary"] = Field(
        "full",
        # Absent from config.json while "full": runs before it read the same.
        exclude_if=lambda value: value == "full",
        description="rounds.jsonl's per-client detail: full (a row per client"
        ' in each round\'s "clients"), or summary (an empty "clients" and a'
        ' "participants" digest: counts, mean and std accuracy), for rounds'
        " of thousands of clients",
    )
    target_accuracy: float = Field(
        0.8,
        gt=0,
        le=1,
        description="the mean client accuracy whose simulated time"
        " summary.json reports as time_to_accuracy",
    )

    @field_validator("dp", mode="before")
    @classmethod
    def _dp_off(cls, value: Any) -> Any:
        # `--set dp=off` (or false, none) turns DP off.
        if _means_off(value):
            return None
        if value is True:
            raise ValueError("give the budget, e.g. dp.epsilon = 10 (or dp = off)")
        return value

    @field_validator("backdoor_probe", mode="before")
    @classmethod
    def _probe_off(cls, value: Any) -> Any:
        # `--set backdoor_probe=off` (or none) removes it; `=on` its defaults.
        if _means_off(value):
            return None
        if value is True or (isinstance(value, str) and value.lower() == "on"):
            return {}
        return value

    @field_validator("task_timeout_s", mode="before")
    @classmethod
    def _timeout_words(cls, value: Any) -> Any:
        # `task_timeout_s = "none"` (or off) waits forever.
        if _means_off(value):
            return None
        if isinstance(value, str) and value.lower() == "auto":
            return "auto"
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if value is not None and not (number and 0 < value < math.inf):
            raise ValueError(
                f'{value!r} is no limit: give seconds (> 0), "auto" or "none"'
            )
        return value

    @field_validator("max_update_ratio", "max_weight_ratio", mode="before")
    @classmethod
    def _guard_off(cls, value: Any) -> Any:
        # `max_update_ratio = "none"` (or off) lifts the bound.
        return None if _means_off(value) else value

    def task_timeout(self) -> float | None:
        """The wall-clock limit on one request the server applies: the one
        set, `default_task_timeout` for "auto", None (wait forever) for none."""
        if self.task_timeout_s == "auto":
            return default_task_timeout(self)
        return self.task_timeout_s

    @field_validator("availability", mode="before")
    @classmethod
    def _availability_by_name(cls, value: Any) -> Any:
        # `availability = "diurnal"` (or `--set availability=diurnal`) names
        # the kind, with its defaults.
        return {"kind": value} if isinstance(value, str) else value

    @field_validator("aggregator", mode="before")
    @classmethod
    def _aggregator_by_name(cls, value: Any) -> Any:
        # `aggregator = "median"` (or `--set aggregator=median`) names the kind.
        return parse_aggregator(value)

    @model_validator(mode="after")
    def _algorithm_exists(self) -> Scenario:
        check_algorithm(self)  # capabilities.py
        return self

    @model_validator(mode="after")
    def _capabilities_fit(self) -> Scenario:
        check_capabilities(self)  # capabilities.py
        return self

    @model_validator(mode="after")
    def _targets_exist(self) -> Scenario:
        total = self.clients + sum(n for _, n in self.joins())
        known = f"clients are 0..{total - 1}"
        for cid in self.devices:
            if cid >= total:
                raise ValueError(f"devices: client {cid} does not exist ({known})")
        for window in getattr(self.availability, "windows", []):
            if window.client >= total:
                raise ValueError(
                    f"availability: the trace names client {window.client},"
                    f" which does not exist ({known})"
                )
        n_groups = self.transform_groups()
        for i, event in enumerate(self.events):
            where = f"events[{i}] ({event.kind})"
            target = getattr(event, "target", None)
            if target is not None:
                missing = [c for c in Target.parse(target).ids if c >= total]
                if missing:
                    raise ValueError(
                        f"{where}: target {missing} does not exist ({known})"
                    )
            group = getattr(event, "to_group", None)
            if group is not None and group != "other" and group >= n_groups:
                raise ValueError(
                    f"{where}: to_group {group} does not exist"
                    f" (the transform has {n_groups} group(s))"
                )
            joiner_group = event.transform_group if isinstance(event, Join) else None
            if joiner_group is not None and joiner_group >= n_groups:
                raise ValueError(
                    f"{where}: transform_group {joiner_group} does not exist"
                    f" (the transform has {n_groups} group(s))"
                )
        return self

    @model_validator(mode="after")
    def _within_bounds(self) -> Scenario:
        check_partition_fits(self)
        check_model_fits(self)
        check_population(self)
        return self

    @model_validator(mode="after")
    def _faulty_clients_exist(self) -> Scenario:
        total = self.clients + sum(n for _, n in self.joins())
        for i, faulty in enumerate(self.faulty):
            where = f"faulty[{i}] ({faulty.behaviour})"
            missing = [c for c in faulty.ids if c >= total]
            if missing:
                raise ValueError(
                    f"{where}: client {missing} does not exist"
                    f" (clients are 0..{total - 1})"
                )
            if faulty.behaviour == "hang" and not isinstance(
                self.task_timeout_s, float
            ):
                raise ValueError(
                    f"{where}: a client that never answers needs task_timeout_s,"
                    " the wall-clock limit that ends its task as failed (the"
                    f" automatic {default_task_timeout(self):g} s would hold"
                    " each of its rounds that long)"
                )
        if self.backdoor_probe is not None and any(
            f.behaviour == "backdoor" for f in self.faulty
        ):
            raise ValueError(
                "backdoor_probe measures a trigger on a run with no backdoor"
                " client; this one has a backdoor faulty entry, whose own"
                " trigger the run measures: drop one of them"
            )
        check_attacks(self)  # robustness.py
        return self

    def faults_of(self, client: int) -> tuple[FaultPlan, ...]:
        """The misbehaviours client `client` carries, in the order written."""
        return tuple(
            f.plan(self.max_update_norm) for f in self.faulty if client in f.ids
        )

    def params_of(self, algorithm: str) -> dict[str, Any]:
        return dict(self.algorithm_params.get(algorithm, {}))

    def joins(self) -> list[tuple[int, int]]:
        """(event index, clients it adds over the run) for every join event."""
        found = []
        for index, event in enumerate(self.events):
            if isinstance(event, Join):
                horizon = self.rounds - 1 if event.clock == "round" else float("inf")
                found.append(
                    (index, event.count * len(list(event.occurrences(horizon))))
                )
        return found

    def transform_groups(self) -> int:
        return n_transform_groups(self.transform)
