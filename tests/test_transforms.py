"""Group transforms alone: who sees which rotation or permutation, and group ids."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from clusterfed.scenarios import PermutationTransform, RotationTransform
from clusterfed.scenarios.transforms import GroupTransforms, n_transform_groups


def test_the_default_rotations_are_the_four_right_angles_without_jitter() -> None:
    spec = RotationTransform()
    assert (spec.kind, spec.angles, spec.jitter) == (
        "rotation",
        [0.0, 90.0, 180.0, 270.0],
        0.0,
    )
    assert n_transform_groups(spec) == 4
    assert RotationTransform(jitter=0).jitter == 0
    assert RotationTransform(jitter=179.5).jitter == 179.5


def test_the_default_permutations_are_four_groups() -> None:
    spec = PermutationTransform()
    assert (spec.kind, spec.groups) == ("label_permutation", 4)
    assert n_transform_groups(spec) == 4
    assert n_transform_groups(PermutationTransform(groups=1)) == 1


def test_no_transform_is_one_group() -> None:
    assert n_transform_groups(None) == 1
    plain = GroupTransforms(None, 10, 3, np.random.default_rng(0))
    assert plain.n_groups == 1 and plain.fields(0) == {}
    assert [plain.deal(i) for i in range(3)] == [0, 0, 0]
    assert plain.permutations == []


@pytest.mark.parametrize(
    ("kind", "fields", "named"),
    [
        (RotationTransform, {"angles": []}, "angles"),
        (RotationTransform, {"jitter": -0.1}, "jitter"),
        (RotationTransform, {"jitter": 180}, "jitter"),
        (RotationTransform, {"turns": 1}, "turns"),
        (PermutationTransform, {"groups": 0}, "groups"),
    ],
)
def test_bad_transforms_are_refused(
    kind: type, fields: dict[str, object], named: str
) -> None:
    with pytest.raises(ValidationError, match=named):
        kind(**fields)


def test_clients_are_dealt_to_transform_groups_round_robin() -> None:
    spec = RotationTransform(angles=[0, 120, 240])
    transforms = GroupTransforms(spec, 10, 1, np.random.default_rng(0))
    assert transforms.n_groups == 3
    assert [transforms.deal(i) for i in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_a_rotation_group_sees_its_angle() -> None:
    spec = RotationTransform(angles=[0, 90, 180])
    transforms = GroupTransforms(spec, 10, 1, np.random.default_rng(0))
    assert [transforms.fields(g) for g in range(3)] == [
        {"rotation": 0.0},
        {"rotation": 90.0},
        {"rotation": 180.0},
    ]


def test_jitter_adds_a_uniform_offset_drawn_from_the_transform_stream() -> None:
    spec = RotationTransform(angles=[0, 90], jitter=10)
    transforms = GroupTransforms(spec, 10, 1, np.random.default_rng(7))
    got = [transforms.fields(g)["rotation"] for g in (0, 1, 1)]
    offsets = np.random.default_rng(7).uniform(-10, 10, size=3)
    np.testing.assert_allclose(got, [0 + offsets[0], 90 + offsets[1], 90 + offsets[2]])
    assert all(isinstance(a, float) for a in got)


def test_permutation_groups_are_the_identity_then_seeded_permutations() -> None:
    spec = PermutationTransform(groups=3)
    transforms = GroupTransforms(spec, 5, 1, np.random.default_rng(3))
    expected = np.random.default_rng(3)
    assert transforms.permutations == [
        [0, 1, 2, 3, 4],
        expected.permutation(5).tolist(),
        expected.permutation(5).tolist(),
    ]
    assert transforms.fields(0) == {"label_permutation": [0, 1, 2, 3, 4]}
    assert transforms.fields(2) == {"label_permutation": transforms.permutations[2]}


def test_the_true_group_numbers_partition_groups_in_blocks_of_transforms() -> None:
    transforms = GroupTransforms(RotationTransform(), 10, 2, np.random.default_rng(0))
    # 2 partition groups × 4 rotations: (p, t) → 4p + t
    assert [transforms.truth(p, t) for p in (0, 1) for t in (0, 3)] == [0, 3, 4, 7]


def test_an_explicit_angle_of_a_planted_rotation_finds_its_group() -> None:
    spec = RotationTransform(angles=[0, 90, 180])
    transforms = GroupTransforms(spec, 10, 2, np.random.default_rng(0))
    assert transforms.group_of_rotation(0, 90) == 1
    assert transforms.group_of_rotation(1, 90) == 4
    assert transforms.group_of_rotation(1, 450) == 4  # a full turn more
    assert transforms.group_of_rotation(0, -180) == 2
    assert transforms.group_of_rotation(0, 360) == 0


def test_new_angles_get_fresh_ids_in_order_and_the_same_id_again() -> None:
    spec = RotationTransform(angles=[0, 90])
    transforms = GroupTransforms(spec, 10, 2, np.random.default_rng(0))
    # 2 × 2 planted ids (0..3): fresh ones start at 4
    assert transforms.group_of_rotation(0, 45) == 4
    assert transforms.group_of_rotation(0, 30) == 5
    assert transforms.group_of_rotation(0, 405) == 4  # 45 a turn later
    assert transforms.group_of_rotation(1, 45) == 6  # another partition group
    assert transforms.fresh(("anything", 1)) == 7
    assert transforms.fresh(("anything", 1)) == 7


def test_any_angle_is_fresh_where_the_transform_is_not_a_rotation() -> None:
    spec = PermutationTransform(groups=2)
    transforms = GroupTransforms(spec, 4, 1, np.random.default_rng(0))
    assert transforms.group_of_rotation(0, 0) == 2
    assert transforms.group_of_rotation(0, 360) == 2


def test_a_planted_permutation_finds_its_group_and_another_is_fresh() -> None:
    spec = PermutationTransform(groups=3)
    transforms = GroupTransforms(spec, 4, 2, np.random.default_rng(5))
    second = transforms.permutations[2]
    assert transforms.group_of_permutation(1, [0, 1, 2, 3]) == 3
    assert transforms.group_of_permutation(0, list(second)) == 2
    other = next(
        p
        for p in ([3, 2, 1, 0], [1, 0, 3, 2], [2, 3, 0, 1])
        if p not in transforms.permutations
    )
    assert transforms.group_of_permutation(1, other) == 6  # 2 × 3 planted
    assert transforms.group_of_permutation(1, list(other)) == 6
    assert transforms.group_of_permutation(0, other) == 7
