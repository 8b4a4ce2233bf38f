"""DCFL's update distance: the paper's stated properties, Gram route = reference."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose

from clusterfed.algorithms.distances import (
    METRICS,
    cosine_similarities,
    divergence,
    naive_pairwise_distances,
    pairwise_distances,
    pairwise_divergence,
    update_distance,
)


def _pair(
    a: list[float], b: list[float], c: list[float], d: list[float]
) -> tuple[np.ndarray, np.ndarray]:
    """Starts and deltas of the updates A → B and C → D."""
    starts = np.array([a, c], dtype=np.float64)
    return starts, np.array([b, d], dtype=np.float64) - starts


def _omega(starts: np.ndarray, deltas: np.ndarray) -> float:
    """ω of the first two updates, by both routes, checked to agree."""
    gram = pairwise_divergence(starts, deltas)[0, 1]
    assert_allclose(
        gram, divergence(starts[0], deltas[0], starts[1], deltas[1]), atol=1e-12
    )
    return float(gram)


def test_collinear_updates_pointing_apart_have_divergence_one() -> None:
    # A=0 → B=−1 and C=1 → D=2 on one line, walking away from each other.
    starts, deltas = _pair([0, 0, 0], [-1, 0, 0], [1, 0, 0], [2, 0, 0])
    assert_allclose(_omega(starts, deltas), 1.0)
    assert_allclose(pairwise_distances(starts, deltas)[0, 1], 3 * np.e**2)


def test_collinear_updates_pointing_towards_each_other_have_divergence_minus_one() -> (
    None
):
    starts, deltas = _pair([0, 0, 0], [1, 0, 0], [3, 0, 0], [2, 0, 0])
    assert_allclose(_omega(starts, deltas), -1.0)
    assert_allclose(pairwise_distances(starts, deltas)[0, 1], 1 * np.e**-2)


def test_parallel_equal_updates_have_divergence_zero_and_euclidean_distance() -> None:
    starts, deltas = _pair([0, 0], [1, 0], [0, 1], [1, 1])
    assert_allclose(_omega(starts, deltas), 0.0, atol=1e-15)
    assert_allclose(pairwise_distances(starts, deltas)[0, 1], 1.0)


@pytest.mark.parametrize("gamma", [0.1, np.pi / 3, np.pi / 2, 2.0, np.pi])
def test_equal_length_updates_from_one_origin_follow_the_half_angle(
    gamma: float,
) -> None:
    length = 2.5
    starts, deltas = _pair(
        [1, -1],
        [1 + length, -1],
        [1, -1],
        [1 + length * np.cos(gamma), -1 + length * np.sin(gamma)],
    )
    omega = _omega(starts, deltas)
    assert_allclose(omega, np.sqrt((1 - np.cos(gamma)) / 2), atol=1e-12)
    # the paper's D_C = 2ω² for this arrangement, and our cosine metric is D_C
    cosine = pairwise_distances(starts, deltas, "cosine")[0, 1]
    assert_allclose(cosine, 2 * omega**2, atol=1e-12)


def test_common_origin_divergence_is_the_norm_ratio() -> None:
    rng = np.random.default_rng(0)
    origin = rng.standard_normal(20)
    deltas = rng.standard_normal((3, 20)) * [[1.0], [0.3], [2.0]]
    omega = pairwise_divergence(origin, deltas)
    for i, j in [(0, 1), (0, 2), (1, 2)]:
        expected = np.linalg.norm(deltas[i] - deltas[j]) / (
            np.linalg.norm(deltas[i]) + np.linalg.norm(deltas[j])
        )
        assert_allclose(omega[i, j], expected, rtol=1e-12)


@pytest.mark.parametrize("metric", ["complete", "divergence", "euclidean"])
def test_same_end_point_gives_distance_zero(metric: str) -> None:
    # A=(0,0) → (1,1) and C=(2,0) → (1,1): one end point from two origins;
    # a third update elsewhere keeps the mean end point off (1,1).
    starts = np.array([[0.0, 0.0], [2.0, 0.0], [5.0, 5.0]])
    deltas = np.array([[1.0, 1.0], [-1.0, 1.0], [1.0, 0.0]])
    dist = pairwise_distances(starts, deltas, metric)
    assert dist[0, 1] == 0.0 and dist[1, 0] == 0.0
    assert dist[0, 2] > 0
    assert update_distance(starts[0], deltas[0], starts[1], deltas[1], metric) == 0.0


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("case", ["float64", "float32-offset", "one-origin"])
def test_gram_route_equals_the_per_pair_reference(metric: str, case: str) -> None:
    rng = np.random.default_rng(42)
    n, d = 7, 50
    starts: np.ndarray = rng.standard_normal((n, d))
    deltas: np.ndarray = 0.1 * rng.standard_normal((n, d))
    if case == "float32-offset":
        # a large common offset is where a plain float32 Gram loses precision
        starts = (starts + 1000.0).astype(np.float32)
        deltas = deltas.astype(np.float32)
    elif case == "one-origin":
        starts = starts[0]
    gram = pairwise_distances(starts, deltas, metric)
    naive = naive_pairwise_distances(starts, deltas, metric)
    assert gram.dtype == np.float64 and gram.shape == (n, n)
    assert_allclose(gram, naive, rtol=1e-9, atol=1e-12)
    assert_allclose(gram, gram.T)
    assert (np.diag(gram) == 0).all()


@pytest.mark.parametrize("metric", METRICS)
def test_zero_updates_give_finite_distances(metric: str) -> None:
    starts = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0], [3.0, 3.0]])
    deltas = np.array([[0.0, 0.0], [0.0, 0.0], [1.0, 0.0], [0.0, -1.0]])
    dist = pairwise_distances(starts, deltas, metric)
    assert np.isfinite(dist).all()
    assert_allclose(dist, naive_pairwise_distances(starts, deltas, metric), atol=1e-12)
    # two zero updates at different points: ω = 0, so d is their distance
    if metric == "complete":
        assert_allclose(dist[0, 1], 1.0)
    # all updates zero at one point: every distance is zero, none is NaN
    same = pairwise_distances(np.zeros(2), np.zeros((3, 2)), metric)
    assert np.isfinite(same).all()


def test_distances_do_not_move_with_the_origin() -> None:
    rng = np.random.default_rng(3)
    starts, deltas = rng.standard_normal((5, 30)), rng.standard_normal((5, 30))
    for metric in METRICS:
        assert_allclose(
            pairwise_distances(starts + 250.0, deltas, metric),
            pairwise_distances(starts, deltas, metric),
            rtol=1e-9,
            atol=1e-12,
        )


def test_cosine_similarities_of_opposite_and_orthogonal_updates() -> None:
    cos = cosine_similarities(np.array([[1.0, 0.0], [-2.0, 0.0], [0.0, 3.0]]))
    assert_allclose(cos, [[1, -1, 0], [-1, 1, 0], [0, 0, 1]], atol=1e-15)


def test_blocks_of_columns_add_up_to_one_product(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from clusterfed.algorithms import distances

    rng = np.random.default_rng(5)
    starts, deltas = rng.standard_normal((4, 3000)), rng.standard_normal((4, 3000))
    whole = pairwise_distances(starts, deltas)
    monkeypatch.setattr(distances, "_BLOCK_VALUES", 1)  # 1024-column blocks
    assert_allclose(pairwise_distances(starts, deltas), whole, rtol=1e-12)


def test_an_unknown_metric_is_named() -> None:
    with pytest.raises(ValueError, match="'manhattan'"):
        pairwise_distances(np.zeros(2), np.zeros((2, 2)), "manhattan")


def test_mismatched_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match=r"\(3, 2\)"):
        pairwise_distances(np.zeros((3, 2)), np.zeros((2, 2)))
