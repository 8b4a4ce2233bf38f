"""The update metrics by name, each computed pair by pair from its definition.

The metrics are DCFL's (Eq. 1–2) and those of its ablation (Table II) of

    Augello, Falzone, Lo Re, "DCFL: Dynamic Clustered Federated Learning under
    Differential Privacy Settings", PerCom Workshops 2023.

`update_distance`, `divergence` and `naive_pairwise_distances` are the
reference `clusterfed.algorithms.distances` (the Gram route, which re-exports
every name here) is tested and benchmarked against, not for production use.
"""

from __future__ import annotations

from typing import Literal, cast, get_args

import numpy as np

Metric = Literal["complete", "divergence", "cosine", "euclidean"]
METRICS: tuple[str, ...] = get_args(Metric)


def check_metric(metric: str) -> Metric:
    """`metric` if it is one of `METRICS`, else ValueError naming it."""
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)}; got {metric!r}")
    return cast(Metric, metric)


def _as_rows(array: np.ndarray, name: str) -> np.ndarray:
    array = np.asarray(array)
    if array.ndim != 2:
        raise ValueError(f"{name} must be a 2-d array (n, d), got shape {array.shape}")
    return array


def divergence(
    start_1: np.ndarray, delta_1: np.ndarray, start_2: np.ndarray, delta_2: np.ndarray
) -> float:
    """ω of two updates (Eq. 1), straight from the definition, in float64."""
    a, da = np.asarray(start_1, np.float64), np.asarray(delta_1, np.float64)
    c, dc = np.asarray(start_2, np.float64), np.asarray(delta_2, np.float64)
    apart = (a + da) - (c + dc)
    gap = float(np.linalg.norm(apart))
    length = float(np.linalg.norm(da) + np.linalg.norm(dc))
    if gap == 0.0 or length == 0.0:
        return 0.0
    return float(np.clip(np.dot(da - dc, apart) / (gap * length), -1.0, 1.0))


def update_distance(
    start_1: np.ndarray,
    delta_1: np.ndarray,
    start_2: np.ndarray,
    delta_2: np.ndarray,
    metric: str = "complete",
) -> float:
    """The distance of two updates under `metric`, computed for this pair alone."""
    metric = check_metric(metric)
    da, dc = np.asarray(delta_1, np.float64), np.asarray(delta_2, np.float64)
    if metric == "cosine":
        scale = float(np.linalg.norm(da) * np.linalg.norm(dc))
        return 1.0 - (float(np.dot(da, dc)) / scale if scale > 0 else 0.0)
    gap = float(
        np.linalg.norm(
            (np.asarray(start_1, np.float64) + da)
            - (np.asarray(start_2, np.float64) + dc)
        )
    )
    if metric == "euclidean" or gap == 0.0:
        return gap
    omega = divergence(start_1, delta_1, start_2, delta_2)
    return float(np.exp(2 * omega)) * (1.0 if metric == "divergence" else gap)


def naive_pairwise_distances(
    starts: np.ndarray, deltas: np.ndarray, metric: str = "complete"
) -> np.ndarray:
    """`pairwise_distances` by a double loop over pairs: the slow reference."""
    deltas = _as_rows(deltas, "deltas")
    starts = np.broadcast_to(np.asarray(starts), deltas.shape)
    n = deltas.shape[0]
    dist = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1, n):
            dist[i, j] = dist[j, i] = update_distance(
                starts[i], deltas[i], starts[j], deltas[j], metric
            )
    return dist
