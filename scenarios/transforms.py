"""Feature and preference skew: which transform each group of clients sees.

Clients are dealt to transform groups round-robin; a client's ground-truth
group combines its partition group and its transform group. Drifts to a
transform outside the planted groups get fresh group ids, in the order they
first appear, so the same seed names them the same way.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field


class RotationTransform(BaseModel):
    """Feature skew: group g sees its images rotated by `angles[g]` degrees.

    `jitter` adds a per-client uniform offset in ±jitter degrees, so every
    client gets its own angle (the DCFL paper's setting) while its group stays
    the nearest planted angle.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["rotation"] = "rotation"
    angles: list[float] = Field(
        default_factory=lambda: [0.0, 90.0, 180.0, 270.0], min_length=1
    )
    jitter: float = Field(0.0, ge=0, lt=180)


class PermutationTransform(BaseModel):
    """Preference skew: group g reads labels through its own permutation.

    Group 0 keeps the labels; the others get permutations drawn from the seed.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["label_permutation"] = "label_permutation"
    groups: int = Field(4, ge=1)


TransformSpec = Annotated[
    RotationTransform | PermutationTransform, Field(discriminator="kind")
]


def n_transform_groups(spec: TransformSpec | None) -> int:
    match spec:
        case RotationTransform(angles=angles):
            return len(angles)
        case PermutationTransform(groups=groups):
            return groups
    return 1


class GroupTransforms:
    """The transform of each group, and the group ids of what clients see."""

    def __init__(
        self,
        spec: TransformSpec | None,
        n_classes: int,
        n_partition_groups: int,
        rng: np.random.Generator,
    ) -> None:
        self.spec = spec
        self.rng = rng
        self.n_partition_groups = n_partition_groups
        self.permutations: list[list[int]] = []
        if isinstance(spec, PermutationTransform):
            identity = list(range(n_classes))
            self.permutations = [identity] + [
                rng.permutation(n_classes).tolist() for _ in range(spec.groups - 1)
            ]
        self._extra: dict[Any, int] = {}

    @property
    def n_groups(self) -> int:
        return n_transform_groups(self.spec)

    def deal(self, index: int) -> int:
        """The transform group of the index-th client dealt."""
        return index % self.n_groups

    def fields(self, group: int) -> dict[str, Any]:
        """ClientSpec fields for a client of transform group `group`."""
        match self.spec:
            case RotationTransform(angles=angles, jitter=jitter):
                offset = self.rng.uniform(-jitter, jitter) if jitter else 0.0
                return {"rotation": float(angles[group] + offset)}
            case PermutationTransform():
                return {"label_permutation": self.permutations[group]}
        return {}

    def truth(self, partition_group: int, transform_group: int) -> int:
        """Ground-truth group id of a planted (partition, transform) pair."""
        return partition_group * self.n_groups + transform_group

    def group_of_rotation(self, partition_group: int, degrees: float) -> int:
        """Ground truth for an explicit angle: its planted group, or a fresh id."""
        if isinstance(self.spec, RotationTransform):
            for g, angle in enumerate(self.spec.angles):
                if (angle - degrees) % 360 == 0:
                    return self.truth(partition_group, g)
        return self.fresh(("rotation", partition_group, degrees % 360))

    def group_of_permutation(self, partition_group: int, permutation: list[int]) -> int:
        if permutation in self.permutations:
            return self.truth(partition_group, self.permutations.index(permutation))
        return self.fresh(("permutation", partition_group, tuple(permutation)))

    def fresh(self, key: Any) -> int:
        """A group id beyond the planted ones, the same for the same key."""
        planted = self.n_partition_groups * self.n_groups
        return self._extra.setdefault(key, planted + len(self._extra))
