"""Staleness functions of asynchronous aggregation: how much an update that
is τ server versions old still counts (Xie, Koyejo, Gupta, "Asynchronous
Federated Optimization", 2019, §5.2)."""

from __future__ import annotations

from typing import Literal

Staleness = Literal["constant", "polynomial", "hinge"]


def staleness_weight(kind: Staleness, tau: int, *, a: float, b: int) -> float:
    """s(τ): 1 for `constant`; (τ + 1)^(−a) for `polynomial`; 1 up to τ = b,
    then 1 / (a(τ − b) + 1) for `hinge`."""
    if tau < 0:
        raise ValueError(f"staleness must be >= 0, got {tau}")
    if kind == "constant":
        return 1.0
    if kind == "polynomial":
        return float((tau + 1) ** (-a))
    if kind == "hinge":
        return 1.0 if tau <= b else 1.0 / (a * (tau - b) + 1.0)
    raise ValueError(f"staleness must be constant, polynomial or hinge; got {kind!r}")


def check_staleness(kind: str, a: float, b: int) -> Staleness:
    if kind not in ("constant", "polynomial", "hinge"):
        raise ValueError(
            f"staleness must be constant, polynomial or hinge; got {kind!r}"
        )
    if a < 0:
        raise ValueError(f"a must be >= 0, got {a}")
    if b < 0:
        raise ValueError(f"b must be >= 0, got {b}")
    return kind  # type: ignore[return-value]
