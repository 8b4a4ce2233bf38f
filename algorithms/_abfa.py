"""CAFA's ABFA: accuracy-based weights from the members' peer scores.

Zhang, Wang, Li, Cardiff, Ranaweera, "Optimizing Federated Learning on
Non-IID Data with Clustering and Model Sharing" (Sec. III-B, Eq. 9–11).
Each step is a plain function, tested alone; `clusterfed.algorithms.cafa`
runs them each round and re-exports the public ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from clusterfed.types import ClientId

from .diagnostics import Diagnostics


@dataclass(frozen=True)
class ABFAWeight:
    """One member's ABFA numbers in a round: the accuracy its model got (Eq. 9),
    its CBCC weight (Eq. 8) and its coefficient in Eq. 11."""

    client: ClientId
    accuracy: float
    cbcc_weight: float
    weight: float


def weighted_accuracy(
    accuracies: Sequence[float], sizes: Sequence[int | float]
) -> float:
    """Eq. 9: Σ a_j S_j / Σ S_j, the accuracies weighted by validation sizes."""
    a = np.asarray(accuracies, dtype=np.float64)
    s = np.asarray(sizes, dtype=np.float64)
    if a.shape != s.shape or not len(a) or s.sum() <= 0:
        raise ValueError("weighted_accuracy needs one positive size per accuracy")
    return float((a * s).sum() / s.sum())


def abfa_weights(accuracies: Sequence[float] | np.ndarray) -> np.ndarray:
    """Eq. 10: A_i / Σ A_j; equal weights when every A is zero."""
    a = np.asarray(accuracies, dtype=np.float64)
    total = a.sum()
    return a / total if total > 0 else np.full(len(a), 1.0 / len(a))


def combined_weights(
    cbcc: Sequence[float] | np.ndarray, abfa: Sequence[float] | np.ndarray
) -> np.ndarray:
    """Eq. 11's coefficients: w^K_i · w^A_i / Σ_j w^K_j · w^A_j."""
    product = np.asarray(cbcc, dtype=np.float64) * np.asarray(abfa, dtype=np.float64)
    total = product.sum()
    return product / total if total > 0 else np.full(len(product), 1.0 / len(product))


def fill_missing(values: Sequence[float | None]) -> np.ndarray:
    """Missing values become the mean of the others, or 1 if all are missing."""
    known = [v for v in values if v is not None]
    default = float(np.mean(known)) if known else 1.0
    return np.array([default if v is None else v for v in values], dtype=np.float64)


class ABFARecord(Diagnostics):
    """A round's ABFA numbers as the diagnostics report them: the members in
    client order, and each member's accuracy (Eq. 9), CBCC weight (Eq. 8) and
    coefficient (Eq. 11), keyed by client."""

    members: tuple[ClientId, ...]
    accuracy: dict[ClientId, float]
    cbcc_weight: dict[ClientId, float]
    weight: dict[ClientId, float]


def abfa_record(rows: Sequence[ABFAWeight]) -> ABFARecord:
    """The ABFA weights as the diagnostics report them, keyed by client."""
    return ABFARecord(
        members=tuple(r.client for r in rows),
        accuracy={r.client: r.accuracy for r in rows},
        cbcc_weight={r.client: r.cbcc_weight for r in rows},
        weight={r.client: r.weight for r in rows},
    )
