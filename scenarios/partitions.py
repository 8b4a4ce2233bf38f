"""How a scenario deals the training data over its clients.

Each partition is one `kind` of a tagged union, and says which of its
ground-truth groups hold IID data when it knows.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import Field, model_validator

from ._base import _Spec


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
