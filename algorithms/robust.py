"""Robust aggregation: how a cluster folds its members' updates into one step.

Every algorithm's per-cluster aggregation takes one of these (the scenario's
`aggregator`; `mean` by default, which is each algorithm's own weighted mean,
bit for bit):

- `mean`: the weighted mean (FedAvg's sample-weighted mean of deltas);
- `median`: the coordinate-wise median (Yin, Chen, Ramchandran, Bartlett,
  "Byzantine-Robust Distributed Learning: Towards Optimal Statistical Rates",
  ICML 2018), numpy's;
- `trimmed_mean`: the coordinate-wise mean after cutting the `beta` share of
  largest and of smallest values (Yin et al., ibid.), scipy's `trim_mean`;
- `krum`: the update whose `n − f − 2` nearest neighbours are closest, or the
  mean of the `m` best so scored (multi-Krum) (Blanchard, El Mhamdi,
  Guerraoui, Stainer, "Machine Learning with Adversaries: Byzantine Tolerant
  Gradient Descent", NeurIPS 2017);
- `norm_clip`: the weighted mean after scaling each update down to an L2 norm
  of at most `max_norm`, by default the median norm of the cluster's updates
  (Sun, Kairouz, Suresh, McMahan, "Can You Really Backdoor Federated
  Learning?", 2019).

`median`, `trimmed_mean` and `krum` weigh every client alike: a sample count
is the client's own claim, and a robust rule gives a claim no leverage.
`norm_clip` keeps the algorithm's weights (a count is bounded by the `n_train`
the client declared at join).

Every rule states what it assumes of the `n` updates it folds, `byzantine` of
them hostile (`Rule.breaks`): the median a minority of them, trimmed mean
`byzantine <= ⌊βn⌋` and at least one value cut per end, Krum Blanchard et
al.'s `n > 2f + 2` and `byzantine <= f`. A scenario that breaks an assumption
is refused when it is validated (`scenarios/spec.py`, with the reason); a
cluster that turns out smaller than its rule needs (clustered algorithms
split the clients) gets an `AssumptionWarning` naming the rule and the size,
and, for Krum, keeps its model that step (no neighbour count is defined).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from scipy.stats import trim_mean


class AssumptionWarning(RuntimeWarning):
    """A cluster folded by a rule whose assumption its size breaks."""


class _Rule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    def breaks(self, n: int, byzantine: int = 0) -> str | None:
        """Why `n` updates, `byzantine` of them hostile, break the rule's
        assumption (None: they fit it)."""
        return None


class Mean(_Rule):
    """The algorithm's own weighted mean (the default)."""

    kind: Literal["mean"] = "mean"


class Median(_Rule):
    """The coordinate-wise median, every client alike."""

    kind: Literal["median"] = "median"

    def breaks(self, n: int, byzantine: int = 0) -> str | None:
        if 2 * byzantine >= n:
            return (
                f"median assumes fewer than half the updates are Byzantine;"
                f" {byzantine} of {n} are"
            )
        return None


class TrimmedMean(_Rule):
    """The coordinate-wise mean without the `beta` share at each end."""

    kind: Literal["trimmed_mean"] = "trimmed_mean"
    beta: float = Field(
        0.1, ge=0, lt=0.5, description="share cut at each end, per coordinate"
    )

    def breaks(self, n: int, byzantine: int = 0) -> str | None:
        cut = int(self.beta * n)  # scipy's trim_mean cuts ⌊βn⌋ per end
        if byzantine > cut:
            return (
                f"trimmed_mean with beta = {self.beta} cuts ⌊{self.beta}·{n}⌋ ="
                f" {cut} value(s) per end, fewer than the {byzantine} Byzantine"
                f" update(s) it must cut (raise beta to at least {byzantine / n:.3g})"
            )
        if cut == 0 and self.beta > 0:
            return (
                f"trimmed_mean with beta = {self.beta} cuts ⌊{self.beta}·{n}⌋ = 0"
                f" values per end of {n} updates: a plain mean (it needs at least"
                f" {_least(self.beta)} updates, or beta >= {1 / n:.3g})"
            )
        return None


class Krum(_Rule):
    """(Multi-)Krum: the `m` updates closest to their neighbours, averaged."""

    kind: Literal["krum"] = "krum"
    f: int = Field(1, ge=0, description="Byzantine clients tolerated per cluster")
    m: int = Field(1, ge=1, description="updates averaged (1: Krum)")

    def breaks(self, n: int, byzantine: int = 0) -> str | None:
        if n <= 2 * self.f + 2:
            return (
                f"krum with f = {self.f} assumes n > 2f + 2 (Blanchard et al.):"
                f" it needs at least {2 * self.f + 3} updates, not {n}"
            )
        if byzantine > self.f:
            return (
                f"krum with f = {self.f} tolerates {self.f} Byzantine update(s),"
                f" not {byzantine} (set aggregator.f = {byzantine})"
            )
        return None


class NormClip(_Rule):
    """The weighted mean of updates clipped to an L2 norm of `max_norm`."""

    kind: Literal["norm_clip"] = "norm_clip"
    max_norm: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="the clipping norm; None: the median norm of the updates",
    )


AggregatorRule = Mean | Median | TrimmedMean | Krum | NormClip
Aggregator = Annotated[
    Mean | Median | TrimmedMean | Krum | NormClip, Field(discriminator="kind")
]
AGGREGATOR_ADAPTER: TypeAdapter[Mean | Median | TrimmedMean | Krum | NormClip] = (
    TypeAdapter(Aggregator)
)
AGGREGATORS: tuple[str, ...] = ("mean", "median", "trimmed_mean", "krum", "norm_clip")
MEAN = Mean()


def parse_aggregator(value: Any) -> Any:
    """A bare name (`"median"`) stands for the table `{kind = "median"}`."""
    return {"kind": value} if isinstance(value, str) else value


def robust_mean(
    vectors: Sequence[np.ndarray],
    weights: Sequence[float],
    aggregator: Mean | Median | TrimmedMean | Krum | NormClip,
) -> np.ndarray:
    """One vector from `vectors` by `aggregator` (float64); `weights` are the
    algorithm's (used by `mean` and `norm_clip` only)."""
    from ._aggregate import weighted_mean

    if not vectors:
        raise ValueError("robust_mean needs at least one vector")
    if isinstance(aggregator, Mean):
        return weighted_mean(vectors, weights)
    reason = aggregator.breaks(len(vectors))
    if reason is not None:
        # A clustered algorithm's cluster can be smaller than the run the
        # scenario was checked against: said, never silent.
        warnings.warn(f"a cluster of {reason}", AssumptionWarning, stacklevel=2)
        if isinstance(aggregator, Krum):  # no neighbour count: no step
            return np.zeros_like(np.asarray(vectors[0], dtype=np.float64))
    if isinstance(aggregator, NormClip):
        return weighted_mean(clip_norms(vectors, aggregator.max_norm), weights)
    stack = np.stack([np.asarray(v, dtype=np.float64) for v in vectors])
    if isinstance(aggregator, Median):
        return np.asarray(np.median(stack, axis=0))
    if isinstance(aggregator, TrimmedMean):
        return np.asarray(trim_mean(stack, aggregator.beta, axis=0))
    chosen = krum(stack, aggregator.f, aggregator.m)
    return np.asarray(stack[chosen].mean(axis=0))


def clip_norms(
    vectors: Sequence[np.ndarray], max_norm: float | None
) -> list[np.ndarray]:
    """Each vector scaled down to an L2 norm of at most `max_norm` (None: the
    median of their norms), in float64."""
    wide = [np.asarray(v, dtype=np.float64) for v in vectors]
    norms = np.array([np.sqrt(np.square(v).sum()) for v in wide])
    bound = float(np.median(norms)) if max_norm is None else max_norm
    return [
        v * (bound / n) if n > bound and n > 0 else v
        for v, n in zip(wide, norms, strict=True)
    ]


def krum(stack: np.ndarray, f: int, m: int = 1) -> list[int]:
    """The rows (in score order) of the `m` vectors whose `n − f − 2` nearest
    neighbours are closest in squared L2 distance (ties: the lower row). From
    one Gram matrix.

    Raises:
        ValueError: `n <= 2f + 2`, where Krum is not defined.
    """
    n = stack.shape[0]
    if n <= 2 * f + 2:
        raise ValueError(f"krum needs n > 2f + 2, got n = {n}, f = {f}")
    gram = stack @ stack.T
    sq = np.diag(gram)
    dist = np.maximum(sq[:, None] + sq[None, :] - 2 * gram, 0.0)
    neighbours = n - f - 2
    others = np.sort(dist + np.diag(np.full(n, np.inf)), axis=1)[:, :neighbours]
    scores = others.sum(axis=1)
    order = np.argsort(scores, kind="stable")
    return [int(i) for i in order[: min(m, n)]]


def _least(beta: float) -> int:
    """The fewest updates of which trimmed mean cuts one per end."""
    n = max(1, math.floor(1 / beta) - 1)  # float rounding: step up from below
    while int(beta * n) < 1:
        n += 1
    return n
