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


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("metric", ["complete", "divergence", "euclidean"])
def test_same_end_point_gives_distance_zero(metric: str, dtype: type) -> None:
    # A=(0,0) → (1,1) and C=(2,0) → (1,1): one end point from two origins;
    # a third update elsewhere keeps the mean end point off (1,1).
    starts = np.array([[0.0, 0.0], [2.0, 0.0], [5.0, 5.0]], dtype=dtype)
    deltas = np.array([[1.0, 1.0], [-1.0, 1.0], [1.0, 0.0]], dtype=dtype)
    dist = pairwise_distances(starts, deltas, metric)
    assert dist[0, 1] == 0.0 and dist[1, 0] == 0.0
    assert dist[0, 2] > 0
    assert update_distance(starts[0], deltas[0], starts[1], deltas[1], metric) == 0.0


# Float32 products (float32 inputs) agree with the float64 reference to a few
# 1e-7 after centring; 2e-6 leaves room and still catches a missing centring
# (errors of order 1 on the offset case) or a wrong term (order 1e-2 or more).
FLOAT32_RTOL = 2e-6


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize(
    "case",
    [
        "float64",
        "float32",
        "float32-offset",
        "one-origin",
        "float32-one-origin",
        "shared-starts",
        "float32-shared-starts",
    ],
)
def test_gram_route_equals_the_per_pair_reference(metric: str, case: str) -> None:
    rng = np.random.default_rng(42)
    n, d = 7, 50
    starts: np.ndarray = rng.standard_normal((n, d))
    deltas: np.ndarray = 0.1 * rng.standard_normal((n, d))
    if case.endswith("offset"):
        # a large common offset is where a plain float32 Gram loses precision
        starts = starts + 1000.0
    elif case.endswith("one-origin"):
        starts = starts[0]
    elif case.endswith("shared-starts"):
        starts = starts[[0, 1, 0, 2, 1, 0, 0]]  # three clusters' models
    rtol, atol = 1e-9, 1e-12
    if case.startswith("float32"):
        starts, deltas = starts.astype(np.float32), deltas.astype(np.float32)
        rtol, atol = FLOAT32_RTOL, 1e-9
    gram = pairwise_distances(starts, deltas, metric)
    naive = naive_pairwise_distances(starts, deltas, metric)
    assert gram.dtype == np.float64 and gram.shape == (n, n)
    assert_allclose(gram, naive, rtol=rtol, atol=atol)
    assert_allclose(gram, gram.T)
    assert (np.diag(gram) == 0).all()


def _dcfl_like(
    scale: float, spread: float = 1.0, apart: float = 3.0
) -> tuple[np.ndarray, np.ndarray]:
    """Float32 updates of 24 clients in 4 clusters: each starts from its
    cluster's model (weights ~0.05 apart by `apart` updates), updates of
    `scale` per parameter with a common part per cluster and `spread` of it
    their own."""
    rng = np.random.default_rng(7)
    d, labels = 2000, np.arange(24) % 4
    weights = rng.standard_normal(d) * 0.05
    models = weights + rng.standard_normal((4, d)) * scale * apart
    common = rng.standard_normal((4, d)) * scale
    own = rng.standard_normal((24, d)) * scale * spread
    return (
        models[labels].astype(np.float32),
        (common[labels] + own).astype(np.float32),
    )


@pytest.mark.parametrize(
    ("scale", "apart", "own_rtol"),
    [
        (1e-2, 3.0, FLOAT32_RTOL),
        (1e-6, 3.0, FLOAT32_RTOL),
        (10.0, 3.0, FLOAT32_RTOL),
        # each client from its own start, the clusters' models 100 updates
        # apart: a within-cluster distance is 1/25 of the spread of the end
        # points, so its square keeps ~25² · 3e-7 of relative error
        (1e-2, 100.0, 5e-4),
    ],
    ids=["realistic", "tiny-updates", "large-updates", "clusters-far-apart"],
)
@pytest.mark.parametrize("metric", ["complete", "divergence", "euclidean"])
def test_float32_distances_keep_their_digits_at_every_update_scale(
    scale: float, apart: float, own_rtol: float, metric: str
) -> None:
    starts, deltas = _dcfl_like(scale, apart=apart)
    dist = pairwise_distances(starts, deltas, metric)
    # the reference reads the same float32 numbers, exactly, in float64
    assert_allclose(
        dist, naive_pairwise_distances(starts, deltas, metric), rtol=FLOAT32_RTOL
    )
    # each client from a start of its own: the end-point route, whose
    # rounding is relative to the spread of all end points
    own = starts + np.float32(scale) * np.arange(24, dtype=np.float32)[:, None]
    assert_allclose(
        pairwise_distances(own, deltas, metric),
        naive_pairwise_distances(own, deltas, metric),
        rtol=own_rtol,
    )


@pytest.mark.parametrize("clients", [24, 8], ids=["six-a-cluster", "two-a-cluster"])
def test_near_identical_float32_updates_of_a_cluster_keep_their_digits(
    clients: int,
) -> None:
    # The updates of a cluster differ by 1e-4 of the update itself: their
    # distances come from the updates less the cluster's mean update, also
    # with as many starts as half the clients (8 clients of 4 clusters).
    starts, deltas = _dcfl_like(1e-2, spread=1e-4)
    starts, deltas = starts[:clients], deltas[:clients]
    assert_allclose(
        pairwise_distances(starts, deltas),
        naive_pairwise_distances(starts, deltas),
        rtol=FLOAT32_RTOL,
    )


def test_a_near_duplicate_pair_loses_digits_as_documented() -> None:
    # Clients 1 and 5 (one cluster) end 1e-2 of the spread of their updates
    # apart: ‖B₁ − B₅‖² is ~1e-4 of the centred squares, whose float32
    # rounding (≤ 3e-7 of them) leaves ≤ 3e-3 of it, half that in d. At 1e-4
    # apart it is below _SAME_END_32 and the two read as one point.
    starts, deltas = _dcfl_like(1e-2)
    noise = np.random.default_rng(1).standard_normal(deltas.shape[1])
    for apart, rtol in [(1e-2, 2e-3), (1e-4, None)]:
        near = deltas.copy()
        near[5] = near[1] + np.float32(apart * 1e-2) * noise
        dist = pairwise_distances(starts, near)
        naive = naive_pairwise_distances(starts, near)
        if rtol is None:
            assert dist[1, 5] == 0.0 < naive[1, 5]
        else:
            assert_allclose(dist[1, 5], naive[1, 5], rtol=rtol)
        others = np.ones_like(dist, dtype=bool)
        others[[1, 5], :] = others[:, [1, 5]] = False
        assert_allclose(dist[others], naive[others], rtol=FLOAT32_RTOL)


def test_the_two_routes_agree() -> None:
    from clusterfed.algorithms import distances

    rng = np.random.default_rng(9)
    starts = rng.standard_normal((3, 40))[[0, 1, 1, 2, 0]]
    deltas = rng.standard_normal((5, 40))
    rows, which = distances._distinct_rows(starts, 5)
    shared = distances._shared_start_sums(starts, rows, which, deltas, np.float64)
    ends = distances._end_point_sums(starts, deltas, np.float64)
    for field in ("end_sq", "numerator", "delta_sq"):
        assert_allclose(getattr(shared, field), getattr(ends, field), atol=1e-10)


def test_distinct_starts_are_equal_rows_only() -> None:
    from clusterfed.algorithms import distances

    rng = np.random.default_rng(2)
    a, b = rng.standard_normal(1000), rng.standard_normal(1000)
    c = a.copy()
    c[1] += 1.0  # not among the key columns: must still count as another start
    rows, which = distances._distinct_rows(np.stack([a, b, a, c, b]), 5)
    assert rows.tolist() == [0, 1, 3]
    assert which.tolist() == [0, 1, 0, 2, 1]
    rows, which = distances._distinct_rows(a, 3)
    assert rows.tolist() == [0] and which.tolist() == [0, 0, 0]


@pytest.mark.parametrize("route", ["own-starts", "shared-starts"])
@pytest.mark.parametrize(
    "value", [1e30, 1e-17, 1e-20], ids=["overflow", "small", "underflow"]
)
def test_float32_out_of_range_runs_in_float64(value: float, route: str) -> None:
    # "small": a mean square per parameter of 1e-34, under _TINY (1e-30)
    # though float32 still holds it: run in float64 all the same, so the
    # float64 tolerance below holds.
    rng = np.random.default_rng(4)
    starts = (rng.standard_normal((6, 300)) * value).astype(np.float32)
    if route == "shared-starts":
        starts = starts[[0, 1, 0, 1, 0, 1]]
    deltas = (rng.standard_normal((6, 300)) * value).astype(np.float32)
    with np.errstate(all="raise"):
        dist = pairwise_distances(starts, deltas)
    assert np.isfinite(dist).all()
    assert_allclose(dist, naive_pairwise_distances(starts, deltas), rtol=1e-9)


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


def test_shared_starts_and_cosines_add_up_over_blocks_of_columns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from clusterfed.algorithms import distances

    rng = np.random.default_rng(5)
    starts, deltas = rng.standard_normal((2, 3000)), rng.standard_normal((4, 3000))
    monkeypatch.setattr(distances, "_BLOCK_VALUES", 1)  # 1024-column blocks
    shared = starts[[0, 1, 0, 1]]
    for metric in METRICS:
        assert_allclose(
            pairwise_distances(shared, deltas, metric),
            naive_pairwise_distances(shared, deltas, metric),
            rtol=1e-10,
        )


def test_cosines_of_many_clients_are_scikit_learns() -> None:
    # past 1,024 clients a block is narrower than 4,096 columns
    from sklearn.metrics.pairwise import cosine_similarity

    deltas = np.random.default_rng(12).standard_normal((1100, 10))
    assert_allclose(
        cosine_similarities(deltas), cosine_similarity(deltas), rtol=1e-9, atol=1e-12
    )


def test_an_unknown_metric_is_named() -> None:
    with pytest.raises(ValueError, match="'manhattan'"):
        pairwise_distances(np.zeros(2), np.zeros((2, 2)), "manhattan")


def test_mismatched_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match=r"\(3, 2\)"):
        pairwise_distances(np.zeros((3, 2)), np.zeros((2, 2)))


# -- edges found by mutation testing (issue 21) --------------------------------


def test_an_unknown_metric_message_lists_the_known_ones() -> None:
    with pytest.raises(ValueError) as caught:
        pairwise_distances(np.zeros(2), np.zeros((2, 2)), "manhattan")
    assert str(caught.value) == (
        "metric must be one of complete, divergence, cosine, euclidean; got 'manhattan'"
    )


@pytest.mark.parametrize(
    "call",
    [
        lambda deltas: pairwise_distances(np.zeros(3), deltas),
        lambda deltas: pairwise_divergence(np.zeros(3), deltas),
        cosine_similarities,
        lambda deltas: naive_pairwise_distances(np.zeros(3), deltas),
    ],
    ids=["pairwise_distances", "pairwise_divergence", "cosine", "naive"],
)
def test_updates_that_are_not_rows_are_refused_by_name(call) -> None:  # noqa: ANN001
    with pytest.raises(ValueError) as caught:
        call(np.zeros(3))
    assert str(caught.value) == "deltas must be a 2-d array (n, d), got shape (3,)"


def test_the_per_pair_distance_defaults_to_the_complete_metric() -> None:
    # the collinear pair pointing apart of the first test: d = 3·e²
    assert_allclose(
        update_distance([0.0, 0.0], [-1.0, 0.0], [1.0, 0.0], [1.0, 0.0]),
        3 * np.e**2,
    )


@pytest.mark.parametrize("metric", METRICS)
def test_the_per_pair_reference_reads_float32_in_float64(metric: str) -> None:
    rng = np.random.default_rng(11)
    a, da, c, dc = rng.standard_normal((4, 500)).astype(np.float32)
    wide = [np.float64(x) for x in (a, da, c, dc)]
    as_32 = update_distance(a, da, c, dc, metric)
    assert as_32 == update_distance(*wide, metric)


def _collinear_pairs(count: int) -> list[tuple[np.ndarray, np.ndarray, float]]:
    """`count` pairs of updates A → B, C → D on one line through the origin,
    the points drawn at random on it (the pair from one start or two), with
    ω on the line by hand: sign(b − d)·(δ₁ − δ₂) / (|δ₁| + |δ₂|)."""
    rng = np.random.default_rng(0)
    pairs = []
    for i in range(count):
        u = rng.standard_normal(5)
        a, b, c, d = rng.uniform(-5, 5, 4)
        if i % 4 == 0:
            c = a  # one start: the shared-start route
        starts = np.stack([a * u, c * u])
        omega = np.sign(b - d) * ((b - a) - (d - c)) / (abs(b - a) + abs(d - c))
        pairs.append((starts, np.stack([b * u, d * u]) - starts, float(omega)))
    return pairs


def test_rounding_never_takes_a_divergence_past_one() -> None:
    # |ω| ≤ 1 (Cauchy–Schwarz); on one line, updates pointing apart or
    # towards each other have ω = ±1 exactly, which rounding would overshoot
    # by an ulp one time in a few without the clip.
    for starts, deltas, expected in _collinear_pairs(200):
        omega = pairwise_divergence(starts, deltas)
        assert (np.abs(omega) <= 1.0).all()
        assert_allclose(omega[0, 1], expected, atol=1e-12)
        reference = divergence(starts[0], deltas[0], starts[1], deltas[1])
        assert -1.0 <= reference <= 1.0
        assert_allclose(reference, expected, atol=1e-12)


def test_rounding_never_takes_a_cosine_past_one() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        v = rng.standard_normal(7)
        scales = rng.uniform(0.1, 10, 2)
        cos = cosine_similarities(np.stack([v, scales[0] * v, -scales[1] * v]))
        assert (np.abs(cos) <= 1.0).all()
        assert_allclose(cos, [[1, 1, -1], [1, 1, -1], [-1, -1, 1]], atol=1e-12)


def test_divergence_is_zero_where_it_is_undefined() -> None:
    # clients 0 and 1 end at one point, 2 and 3 made no update: ω = 0 there
    # and on the diagonal (each client against itself), as documented.
    starts = np.array([[0.0, 0.0], [2.0, 0.0], [5.0, 5.0], [7.0, 1.0]])
    deltas = np.array([[1.0, 1.0], [-1.0, 1.0], [0.0, 0.0], [0.0, 0.0]])
    for _ in range(20):  # fresh buffers may hold anything; check a few times
        omega = pairwise_divergence(starts, deltas)
        assert (np.diag(omega) == 0.0).all()
        assert omega[0, 1] == omega[1, 0] == omega[2, 3] == omega[3, 2] == 0.0
        # two zero updates at different points: d is their distance, √20
        assert_allclose(pairwise_distances(starts, deltas)[2, 3], np.sqrt(20.0))


@pytest.mark.parametrize("route", ["shared-starts", "own-starts"])
def test_a_float32_pair_below_the_threshold_is_one_point_but_not_in_float64(
    route: str,
) -> None:
    # Client 5 ends near client 1: ‖B₁ − B₅‖² is 1e-6 to 1e-5 of the squares
    # it is the difference of (above float32's rounding, below _SAME_END_32),
    # so float32 reads the two as one point and float64 keeps their distance.
    starts, deltas = _dcfl_like(1e-2)
    noise = np.random.default_rng(1).standard_normal(deltas.shape[1])
    near = deltas.copy()
    if route == "shared-starts":
        near[5] = near[1] + np.float32(2e-5) * noise
        # the squares of the two updates less their cluster's mean update
        ends = near.astype(np.float64)
        labels = np.arange(24) % 4
        centred = ends - np.stack([ends[labels == c].mean(axis=0) for c in labels])
    else:
        starts = starts + np.float32(1e-2) * np.arange(24, dtype=np.float32)[:, None]
        near[5] = starts[1] + near[1] - starts[5] + np.float32(3e-4) * noise
        ends = starts.astype(np.float64) + near
        centred = ends - ends.mean(axis=0)
    ends = starts.astype(np.float64) + near if route == "shared-starts" else ends
    ratio = np.sum((ends[1] - ends[5]) ** 2) / np.sum(centred[[1, 5]] ** 2)
    assert 1e-6 < ratio < 1e-5
    for metric in ("complete", "divergence", "euclidean"):
        dist = pairwise_distances(starts, near, metric)
        assert dist[1, 5] == dist[5, 1] == 0.0
        wide = pairwise_distances(starts.astype(np.float64), near.astype(np.float64))
        naive = naive_pairwise_distances(starts, near)
        assert wide[1, 5] > 0
        assert_allclose(wide, naive, rtol=1e-7)


@pytest.mark.parametrize("route", ["shared-starts", "own-starts"])
@pytest.mark.parametrize("wide", ["starts", "deltas"])
def test_float32_beside_float64_runs_in_float64(route: str, wide: str) -> None:
    rng = np.random.default_rng(8)
    starts = rng.standard_normal((6, 50))
    if route == "shared-starts":
        starts = starts[[0, 1, 0, 1, 0, 1]]
    deltas = 0.1 * rng.standard_normal((6, 50))
    if wide == "starts":
        deltas = deltas.astype(np.float32)
    else:
        starts = starts.astype(np.float32)
    for metric in METRICS:
        assert_allclose(
            pairwise_distances(starts, deltas, metric),
            naive_pairwise_distances(starts, deltas, metric),
            rtol=1e-10,
            atol=1e-13,
        )


@pytest.mark.parametrize("route", ["shared-starts", "own-starts"])
def test_float32_updates_with_a_large_common_step_keep_their_digits(
    route: str,
) -> None:
    # Every client moves by one common step 30 times the clusters' spread
    # (a different size per parameter); the distances are of the other parts,
    # and must not drown in the common one.
    starts, deltas = _dcfl_like(1e-2)
    common = np.random.default_rng(3).standard_normal(deltas.shape[1])
    deltas = deltas + np.float32(1.0) * common.astype(np.float32)
    if route == "own-starts":
        starts = starts + np.float32(1e-2) * np.arange(24, dtype=np.float32)[:, None]
    for metric in ("complete", "divergence", "euclidean"):
        assert_allclose(
            pairwise_distances(starts, deltas, metric),
            naive_pairwise_distances(starts, deltas, metric),
            rtol=FLOAT32_RTOL,
        )


def test_float32_clients_of_other_clusters_are_one_point_by_the_spread() -> None:
    # Three clusters of two clients; clusters 0 and 1 end 8e-5 (per
    # parameter) apart, cluster 2 far from both, and the two clients of a
    # cluster 1e-6 from their cluster's mean end point. For clients of
    # clusters 0 and 1, ‖Bᵢ − Bⱼ‖² is 1e-6 to 1e-5 of ‖Xᵢ‖² + ‖Xⱼ‖² (X the
    # end points less their mean), under _SAME_END_32: one point in float32,
    # not in float64, though it is far above the clients' own spread. Two
    # clients of one cluster are compared by their updates less the cluster's
    # mean update, and keep their digits.
    rng = np.random.default_rng(7)
    d, labels = 2000, np.array([0, 0, 1, 1, 2, 2])
    models = 0.05 * rng.standard_normal(d) + 0.03 * rng.standard_normal((3, d))
    near = models[0] + 0.01 * rng.standard_normal(d)
    ends = np.stack(
        [
            near,
            near + 8e-5 * rng.standard_normal(d),
            near + 0.1 * rng.standard_normal(d),
        ]
    )
    deltas = ends[labels] - models[labels] + 1e-6 * rng.standard_normal((6, d))
    starts, deltas = models[labels].astype(np.float32), deltas.astype(np.float32)
    apart = np.zeros((6, 6), dtype=bool)
    apart[:2, 2:4] = apart[2:4, :2] = True
    points = starts.astype(np.float64) + deltas
    gaps = ((points[:, None] - points[None, :]) ** 2).sum(axis=2)
    squares = ((points - points.mean(axis=0)) ** 2).sum(axis=1)
    ratio = gaps[apart] / (squares[:, None] + squares[None, :])[apart]
    assert (ratio > 1e-6).all() and (ratio < 1e-5).all()
    for metric in ("complete", "divergence", "euclidean"):
        dist = pairwise_distances(starts, deltas, metric)
        naive = naive_pairwise_distances(starts, deltas, metric)
        assert (dist[apart] == 0.0).all()
        assert_allclose(dist[~apart], naive[~apart], rtol=FLOAT32_RTOL)
        wide = pairwise_distances(
            starts.astype(np.float64), deltas.astype(np.float64), metric
        )
        assert (wide[apart] > 0).all()
        assert_allclose(wide, naive, rtol=1e-6)
