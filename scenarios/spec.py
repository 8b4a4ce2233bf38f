"""A scenario is data: what to simulate, validated before anything runs.

The same pydantic models validate a TOML file, a Python script and the
built-ins. Algorithm hyperparameters sit in `algorithm_params.<name>` tables,
so one scenario carries settings for every algorithm it is compared with.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from clusterfed.actors import DeviceProfile
from clusterfed.actors.availability import AlwaysOnline, Availability
from clusterfed.actors.clock import DeadlinePolicy, WaitAll
from clusterfed.actors.faults import FaultPlan
from clusterfed.actors.spec import Accountant
from clusterfed.algorithms import algorithms, make
from clusterfed.algorithms.registry import resolve
from clusterfed.algorithms.robust import Aggregator, Mean, parse_aggregator
from clusterfed.errors import ConfigError
from clusterfed.models import build_model, n_parameters
from clusterfed.protocol import TrainConfig

from .events import Event, Join, Target
from .transforms import TransformSpec, n_transform_groups


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class IIDPartition(_Spec):
    """Shuffle and deal evenly; one ground-truth group."""

    kind: Literal["iid"] = "iid"

    def iid_groups(self) -> frozenset[int] | None:
        """The ground-truth groups of IID clients; None: the partition does not
        say which clients are IID."""
        return frozenset({0})


class DirichletPartition(_Spec):
    """Label skew: each class split over clients by Dirichlet(alpha) shares."""

    kind: Literal["dirichlet"] = "dirichlet"
    alpha: float = Field(0.5, gt=0)
    min_samples: int = Field(10, ge=2)

    def iid_groups(self) -> frozenset[int] | None:
        return None


class ShardsPartition(_Spec):
    """Sorted shards, about `labels_per_client` labels per client."""

    kind: Literal["shards"] = "shards"
    labels_per_client: int = Field(2, ge=1)

    def iid_groups(self) -> frozenset[int] | None:
        return None


class ClassTablePartition(_Spec):
    """Planted groups: rows are groups, columns classes (counts or weights).

    `clients_per_group` defaults to spreading `clients` evenly over the groups.
    """

    kind: Literal["class_table"] = "class_table"
    table: list[list[float]] = Field(min_length=1)
    clients_per_group: int | list[int] | None = None

    def iid_groups(self) -> frozenset[int] | None:
        """The rows that hold every class in equal measure (e.g. all ones)."""
        return frozenset(
            g
            for g, row in enumerate(self.table)
            if row and min(row) > 0 and min(row) == max(row)
        )


class IIDMixPartition(_Spec):
    """IID clients beside clients holding a few classes (Zhang et al., CAFA §IV).

    A share `iid_fraction` of the clients (rounded) hold a random sample of the
    dataset: ground-truth group 0. Each other client holds between
    `min_class_share` and `max_class_share` of the classes (2 to 4 of 10 by
    default) — consecutive classes from a random first one, as the authors'
    code deals them, unless `consecutive_classes` is false — and about as many
    samples as an IID client; clients holding the same classes share a group
    (1, 2, …).
    """

    kind: Literal["iid_mix"] = "iid_mix"
    iid_fraction: float = Field(0.25, ge=0, le=1)
    min_class_share: float = Field(0.2, gt=0, le=1)
    max_class_share: float = Field(0.4, gt=0, le=1)
    consecutive_classes: bool = True

    @model_validator(mode="after")
    def _shares_ordered(self) -> IIDMixPartition:
        if self.min_class_share > self.max_class_share:
            raise ValueError(
                f"min_class_share {self.min_class_share} is above"
                f" max_class_share {self.max_class_share}"
            )
        return self

    def classes_per_client(self, n_classes: int) -> tuple[int, int]:
        """The range of classes a non-IID client holds, of `n_classes`."""
        low = max(1, math.ceil(self.min_class_share * n_classes - 1e-9))
        high = min(n_classes, math.floor(self.max_class_share * n_classes + 1e-9))
        return low, high

    def iid_groups(self) -> frozenset[int] | None:
        return frozenset({0})


Partition = Annotated[
    IIDPartition
    | DirichletPartition
    | ShardsPartition
    | ClassTablePartition
    | IIDMixPartition,
    Field(discriminator="kind"),
]


# Samples of each known dataset's training split, to refuse a partition that
# cannot fit before any data is loaded (tests/test_data.py checks the table
# against the loaded datasets).
DATASET_SIZES = {
    "digits": 1797,
    "fashion_mnist": 60000,
    "mnist": 60000,
    "emnist": 112800,
    "cifar10": 50000,
}


# Input shape and classes of each known dataset, to size a model before any
# data is loaded.
DATASET_SHAPES: dict[str, tuple[tuple[int, ...], int]] = {
    "digits": ((1, 8, 8), 10),
    "fashion_mnist": ((1, 28, 28), 10),
    "mnist": ((1, 28, 28), 10),
    "emnist": ((1, 28, 28), 47),
    "cifar10": ((3, 32, 32), 10),
}

# The largest model a scenario may ask for. The papers' largest (the CNN on
# 28×28 inputs) has 1.2 M parameters; 50 M float32 weights are 200 MB a copy,
# and the server keeps one per cluster and every client its own, so a model
# past this bound does not run on a laptop or a cluster node, it only hangs
# while its weights are drawn.
MAX_MODEL_PARAMETERS = 50_000_000

# Worker processes of the local runtime: each holds its clients' data and a
# torch runtime (about 100 MB), so more than this is no machine's core count.
MAX_WORKERS = 256


def check_workers(workers: int | None) -> None:
    """Refuse a worker count outside 1..`MAX_WORKERS` (None: one per core).

    Raises:
        ConfigError: naming the count.
    """
    if workers is None:
        return
    if (
        isinstance(workers, bool)
        or not isinstance(workers, int)
        or not 1 <= workers <= MAX_WORKERS
    ):
        raise ConfigError(
            f"workers must be between 1 and {MAX_WORKERS}, got {workers!r}"
        )


def model_parameters(
    model: ModelSpec, input_shape: tuple[int, ...], n_classes: int
) -> int | None:
    """How many parameters `model` has on inputs of `input_shape`, or None
    when it cannot be built (building the plan then refuses it, with the
    family's own message).

    Built on torch's meta device: shapes only, no memory and no time, however
    large the model asks to be.
    """
    with torch.device("meta"):
        try:
            net = build_model(model.name, input_shape, n_classes, **model.params)
        except Exception:  # whatever a family raises, plan_run reports it
            return None
    return n_parameters(net)


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


class DPSpec(_Spec):
    """Local differential privacy: every client trains with DP-SGD (Opacus).

    Each client's noise multiplier is chosen by Opacus so that the rounds it
    plans to take part in (all rounds from the one it joins; see README)
    spend at most `epsilon` at `delta` (`horizon = "run"`), or so that one
    round's local training does (`horizon = "round"`: the budget applies per
    round, and the ε reported is still the total spent); a client that would
    go past it refuses to train.
    """

    epsilon: float = Field(gt=0, allow_inf_nan=False, description="the budget ε")
    delta: float = Field(1e-5, gt=0, lt=1, description="the budget δ")
    max_grad_norm: float = Field(
        1.0, gt=0, allow_inf_nan=False, description="per-sample clipping bound"
    )
    accountant: Accountant = Field("rdp", description="Opacus' accountant")
    horizon: Literal["run", "round"] = Field(
        "run", description="what ε covers: the whole run or each round alone"
    )


class Faulty(FaultPlan):
    """Clients that misbehave on purpose, for tests and fault studies.

    In the rounds of the schedule (`start`, then every `every` rounds, every
    round by default, up to `until` inclusive) each of `clients` answers its
    train task with `behaviour`: "nan" (a NaN delta), "garbage" (bytes that
    are no message), "wrong_shape" (a delta one weight short), "replay" (its
    last honest update again) or "hang" (no reply; needs `task_timeout_s`);
    or, Byzantine, "lie_samples" (2**63 − 1 samples claimed), "huge_delta"
    (3.0e38 everywhere), "sign_flip" (its honest delta × −`scale`, kept
    under `max_update_norm`), "forge_leave" (a leave in client id + 1's
    name), "squat_ids" (a join for an unused id, in its name) or "flood" (a
    1 MB histogram of a million empty maps). See `actors/faults.py`.
    """

    clients: int | list[int] = Field(description="the faulty clients' ids")

    @field_validator("clients")
    @classmethod
    def _ids(cls, value: int | list[int]) -> int | list[int]:
        ids = [value] if isinstance(value, int) else value
        if not ids:
            raise ValueError("lists no client")
        if any(i < 0 for i in ids):
            raise ValueError(f"client ids are >= 0, got {value}")
        return value

    @property
    def ids(self) -> list[int]:
        return [self.clients] if isinstance(self.clients, int) else list(self.clients)

    def plan(self, under_norm: float | None = None) -> FaultPlan:
        """The misbehaviour each of its clients carries; a sign flip stays
        under `under_norm` (the scenario's bound) unless it names its own."""
        return FaultPlan(
            behaviour=self.behaviour,
            start=self.start,
            every=self.every,
            until=self.until,
            scale=self.scale,
            under_norm=self.under_norm if self.under_norm is not None else under_norm,
        )


DP_OFF = ("off", "none", "false", "no")

TASK_TIMEOUT_FLOOR_S = 300.0
"""The least automatic task timeout: a slow start (imports, a first step)
and a busy machine fit in it many times over."""
TASK_SECONDS_PER_SAMPLE = 0.02
"""A pessimistic wall-clock cost of one training sample for one epoch: about
20 times the slowest built-in family on one core (the MNIST CNN, 1.1 ms a
sample) and 4 times that CNN with DP-SGD."""
UNKNOWN_DATASET_TIMEOUT_S = 3600.0
"""The automatic task timeout of a dataset of unknown size."""


def default_task_timeout(scenario: Scenario) -> float:
    """The wall-clock limit on one request of `scenario` when it sets none.

    No task should ever reach it: it bounds the time for one host to train
    on the dataset's whole training split for the configured epochs at a
    pessimistic cost a sample (`TASK_SECONDS_PER_SAMPLE`), at least
    `TASK_TIMEOUT_FLOOR_S`. That is more than any request can wait for, even
    one queued behind every other on its host, since a host's clients hold
    at most the whole split between them. A per-machine measurement would be
    tighter but is unknown before the run, and the courier's clock starts
    when a request is sent, so it is derived from what the scenario says.
    A dataset of unknown size gets `UNKNOWN_DATASET_TIMEOUT_S`. It is there
    so that a stalled worker costs one deadline, never the run; a model far
    heavier than the built-in families should set its own.
    """
    size = DATASET_SIZES.get(scenario.dataset.name)
    if size is None:
        return UNKNOWN_DATASET_TIMEOUT_S
    work = size * scenario.train.epochs * TASK_SECONDS_PER_SAMPLE
    return max(TASK_TIMEOUT_FLOOR_S, float(math.ceil(work)))


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
        4.0,
        ge=1,
        allow_inf_nan=False,
        description="a client's sample count weighs at most this many times the"
        " median count the round's members declared at join, so no client owns"
        " a weighted mean by declaring 2**31 - 1 samples (the built-in digits"
        " partitions stay within 2x the median); none: no cap",
    )
    faulty: list[Faulty] = Field(
        default_factory=list, description="clients that misbehave on purpose"
    )
    aggregator: Aggregator = Field(
        default_factory=Mean,
        description="how each cluster folds its members' updates: mean (the"
        " algorithm's own), median, trimmed_mean, krum or norm_clip",
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
        if value is False or (isinstance(value, str) and value.lower() in DP_OFF):
            return None
        if value is True:
            raise ValueError("give the budget, e.g. dp.epsilon = 10 (or dp = off)")
        return value

    @field_validator("task_timeout_s", mode="before")
    @classmethod
    def _timeout_words(cls, value: Any) -> Any:
        # TOML has no null: `task_timeout_s = "none"` (or off) waits forever.
        if value is False or (isinstance(value, str) and value.lower() in DP_OFF):
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
        # TOML has no null: `max_update_ratio = "none"` (or off) lifts the bound.
        if value is False or (isinstance(value, str) and value.lower() in DP_OFF):
            return None
        return value

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
        # Fails here, before anything runs, with the algorithm's own message.
        try:
            resolve(self.algorithm)
        except ConfigError as exc:
            raise ValueError(f"algorithm: {exc}") from exc
        try:
            strategy = make(self.algorithm, **self.params_of(self.algorithm))
        except ConfigError as exc:
            raise ValueError(f"algorithm_params.{self.algorithm}: {exc}") from exc
        if self.mode == "async" and not strategy.supports_async:
            have = ", ".join(n for n, c in algorithms().items() if c.supports_async)
            raise ValueError(
                f"mode: {self.algorithm!r} has no asynchronous mode"
                f' ({have} have one); use mode = "sync"'
            )
        return self

    @model_validator(mode="after")
    def _capabilities_fit(self) -> Scenario:
        # What the strategy declares (`Strategy.async_only`,
        # `honours_aggregator`) decides; a run that would quietly ignore a
        # setting config.json records is refused instead.
        cls = resolve(self.algorithm)
        if self.mode == "sync" and cls.async_only:
            raise ValueError(
                f"mode: {self.algorithm!r} has no synchronous mode;"
                ' use mode = "async" (--set mode=async)'
            )
        rule = self.aggregator.kind
        if rule == "mean":
            return self
        if self.mode == "async":
            raise ValueError(
                'aggregator: mode = "async" moves each cluster by its buffer\'s'
                f' mean and would ignore aggregator = "{rule}"; use'
                ' aggregator = "mean" or mode = "sync"'
            )
        if not cls.honours_aggregator:
            have = ", ".join(n for n, c in algorithms().items() if c.honours_aggregator)
            raise ValueError(
                f"aggregator: {self.algorithm!r} does not honour"
                f' aggregator = "{rule}" ({have} honour one); use'
                ' aggregator = "mean"'
            )
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
    def _partition_fits(self) -> Scenario:
        size = DATASET_SIZES.get(self.dataset.name)
        total = self.clients + sum(n for _, n in self.joins())
        each = getattr(self.partition, "min_samples", 1)
        if size is None or total * each <= size:
            return self
        knobs = "clients" + (" or partition.min_samples" if each > 1 else "")
        joiners = f" ({self.clients} + {total - self.clients} joining)" * (
            total > self.clients
        )
        raise ValueError(
            f"partition: {total} clients{joiners} × {each} samples each"
            f" = {total * each} samples, but {self.dataset.name} has {size};"
            f" lower {knobs} (at most {size // each} clients of {each})"
        )

    @model_validator(mode="after")
    def _model_fits(self) -> Scenario:
        known = DATASET_SHAPES.get(self.dataset.name)
        if known is None:  # an unknown dataset is refused when data loads
            return self
        shape, n_classes = known
        count = model_parameters(self.model, shape, n_classes)
        if count is None or count <= MAX_MODEL_PARAMETERS:
            return self
        params = "".join(f", {k}={v}" for k, v in self.model.params.items())
        raise ValueError(
            f"model ({self.model.name}{params}) has {count:,} parameters on"
            f" {self.dataset.name} ({count * 4 / 1e9:.1f} GB a copy), above the"
            f" bound of {MAX_MODEL_PARAMETERS:,}; make it smaller"
        )

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
