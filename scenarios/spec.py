"""A scenario is data: what to simulate, validated before anything runs.

The same pydantic models validate a TOML file, a Python script and the
built-ins. Algorithm hyperparameters sit in `algorithm_params.<name>` tables,
so one scenario carries settings for every algorithm it is compared with.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from clusterfed.actors import DeviceProfile
from clusterfed.algorithms import make
from clusterfed.protocol import TrainConfig


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class IIDPartition(_Spec):
    """Shuffle and deal evenly; one ground-truth group."""

    kind: Literal["iid"] = "iid"


class DirichletPartition(_Spec):
    """Label skew: each class split over clients by Dirichlet(alpha) shares."""

    kind: Literal["dirichlet"] = "dirichlet"
    alpha: float = Field(0.5, gt=0)
    min_samples: int = Field(10, ge=2)


class ShardsPartition(_Spec):
    """Sorted shards, about `labels_per_client` labels per client."""

    kind: Literal["shards"] = "shards"
    labels_per_client: int = Field(2, ge=1)


class ClassTablePartition(_Spec):
    """Planted groups: rows are groups, columns classes (counts or weights).

    `clients_per_group` defaults to spreading `clients` evenly over the groups.
    """

    kind: Literal["class_table"] = "class_table"
    table: list[list[float]] = Field(min_length=1)
    clients_per_group: int | list[int] | None = None


Partition = Annotated[
    IIDPartition | DirichletPartition | ShardsPartition | ClassTablePartition,
    Field(discriminator="kind"),
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
    device: DeviceProfile = Field(
        default_factory=DeviceProfile, description="every client's device"
    )
    task_timeout_s: float | None = Field(
        None, gt=0, description="wall-clock limit on one request"
    )

    @model_validator(mode="after")
    def _algorithm_exists(self) -> Scenario:
        # Fails here, before anything runs, with the algorithm's own message.
        make(self.algorithm, **self.params_of(self.algorithm))
        return self

    def params_of(self, algorithm: str) -> dict[str, Any]:
        return dict(self.algorithm_params.get(algorithm, {}))
