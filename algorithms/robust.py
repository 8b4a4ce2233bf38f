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
  Learning?", 2019);
- `geomed`, `centered_clip`, `bulyan`, `dnc`, `signguard`, and the
  pre-aggregators `nnm` and `bucketing` in front of any rule (`"nnm+krum"`):
  their papers and maths are in `defences.py`. `centered_clip` starts from
  the cluster's last fold (`remembers`), which the strategy keeps in its
  state (`ServerState.centres`).

`AGGREGATORS` and `PRE_AGGREGATORS` are derived from the rule models.

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
and, for Krum and Bulyan when too few rows reach them (after any
pre-aggregator), keeps its model that step (no neighbour count is defined).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, get_args

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from scipy.stats import trim_mean

from clusterfed.types import ClusterId

from . import defences


class AssumptionWarning(RuntimeWarning):
    """A cluster folded by a rule whose assumption its size breaks."""


PreAggregator = Literal["nnm", "bucketing"]


class _Rule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    if TYPE_CHECKING:  # each rule's own Literal field, declared there
        kind: str

    remembers: ClassVar[bool] = False
    """Whether a fold starts from the cluster's last fold (`centre`), which
    the strategy keeps in its state (`ServerState.centres`, `remember`)."""

    pre: tuple[PreAggregator, ...] = Field(
        (),
        exclude_if=lambda value: not value,
        description="pre-aggregators applied first, in order: nnm (each update"
        " mixed with its n − nnm_f nearest), bucketing (means of shuffled"
        " buckets of bucket_size)",
    )
    nnm_f: int = Field(
        1, ge=0, exclude_if=lambda v: v == 1, description="nnm: Byzantine tolerated"
    )
    bucket_size: int = Field(
        2, ge=1, exclude_if=lambda v: v == 2, description="bucketing: s"
    )

    @property
    def is_mean(self) -> bool:
        """Whether the rule is the algorithm's own mean, with no
        pre-aggregator in front: nothing robust to do, so a round may be
        folded into sums (`nnm+mean` is not: it mixes the updates first)."""
        return self.kind == "mean" and not self.pre

    @property
    def name(self) -> str:
        """The rule as a scenario spells it: `"nnm+krum"`."""
        return "+".join((*self.pre, self.kind))

    def breaks(self, n: int, byzantine: int = 0) -> str | None:
        """Why `n` updates, `byzantine` of them hostile, break the rule's
        assumption, its pre-aggregators' included (None: they fit it)."""
        for step in self.pre:
            if step == "nnm":
                if 2 * self.nnm_f >= n or byzantine > self.nnm_f:
                    return (
                        f"nnm with nnm_f = {self.nnm_f} assumes n > 2·nnm_f and"
                        f" at most nnm_f Byzantine updates; {byzantine} of {n}"
                    )
            else:  # bucketing: worst case, one Byzantine update per bucket
                n = math.ceil(n / self.bucket_size)
                byzantine = min(byzantine, n)
        return self._breaks(n, byzantine)

    def _breaks(self, n: int, byzantine: int) -> str | None:
        return None

    def _minority(self, n: int, byzantine: int) -> str | None:
        if 2 * byzantine >= n:
            return (
                f"{self.kind} assumes fewer than half the updates are Byzantine;"
                f" {byzantine} of {n} are"
            )
        return None


class Mean(_Rule):
    """The algorithm's own weighted mean (the default)."""

    kind: Literal["mean"] = "mean"


class Median(_Rule):
    """The coordinate-wise median, every client alike."""

    kind: Literal["median"] = "median"

    def _breaks(self, n: int, byzantine: int) -> str | None:
        return self._minority(n, byzantine)


class TrimmedMean(_Rule):
    """The coordinate-wise mean without the `beta` share at each end."""

    kind: Literal["trimmed_mean"] = "trimmed_mean"
    beta: float = Field(
        0.1, ge=0, lt=0.5, description="share cut at each end, per coordinate"
    )

    def _breaks(self, n: int, byzantine: int) -> str | None:
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

    def _breaks(self, n: int, byzantine: int) -> str | None:
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


class GeometricMedian(_Rule):
    """The geometric median by smoothed Weiszfeld (RFA), every client alike."""

    kind: Literal["geomed"] = "geomed"
    nu: float = Field(1e-6, gt=0, allow_inf_nan=False, description="smoothing ν")
    iterations: int = Field(8, ge=1, description="Weiszfeld steps from the origin")

    def _breaks(self, n: int, byzantine: int) -> str | None:
        return self._minority(n, byzantine)


class CenteredClipping(_Rule):
    """Centered clipping around the cluster's last aggregate (Karimireddy,
    He, Jaggi's momentum; ByzFL keeps it as `m`), the zero step at first."""

    kind: Literal["centered_clip"] = "centered_clip"
    remembers: ClassVar[bool] = True
    tau: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="the clipping radius; None: the median norm of the updates",
    )
    iterations: int = Field(3, ge=1, description="clipping steps L")

    def _breaks(self, n: int, byzantine: int) -> str | None:
        return self._minority(n, byzantine)


class Bulyan(_Rule):
    """Bulyan over Krum: n − 2f rows by Krum, then a trimmed coordinate mean."""

    kind: Literal["bulyan"] = "bulyan"
    f: int = Field(1, ge=0, description="Byzantine clients tolerated per cluster")

    def _breaks(self, n: int, byzantine: int) -> str | None:
        if n < 4 * self.f + 3:
            return (
                f"bulyan with f = {self.f} assumes n >= 4f + 3 (El Mhamdi et"
                f" al.): it needs at least {4 * self.f + 3} updates, not {n}"
            )
        if byzantine > self.f:
            return (
                f"bulyan with f = {self.f} tolerates {self.f} Byzantine"
                f" update(s), not {byzantine} (set aggregator.f = {byzantine})"
            )
        return None


class DnC(_Rule):
    """Divide-and-Conquer: drop the c·f updates farthest along the top
    singular direction of a coordinate sample, over several samples."""

    kind: Literal["dnc"] = "dnc"
    f: int = Field(1, ge=0, description="Byzantine clients expected per cluster")
    c: float = Field(1.0, gt=0, allow_inf_nan=False, description="filtering factor")
    iterations: int = Field(5, ge=1, description="coordinate samples")
    dims: int = Field(10_000, ge=1, description="coordinates per sample")

    def _breaks(self, n: int, byzantine: int) -> str | None:
        if n - int(self.c * self.f) < 1 or byzantine > self.f:
            return (
                f"dnc with f = {self.f}, c = {self.c} keeps n − ⌊c·f⌋ updates and"
                f" tolerates f Byzantine ones; {byzantine} of {n}"
            )
        return None


class SignGuard(_Rule):
    """SignGuard: a norm filter and the largest cluster of sign statistics."""

    kind: Literal["signguard"] = "signguard"
    lower: float = Field(0.1, ge=0, allow_inf_nan=False, description="norm filter L")
    upper: float = Field(3.0, gt=0, allow_inf_nan=False, description="norm filter R")
    share: float = Field(
        0.1, gt=0, le=1, description="share of coordinates the signs are read on"
    )

    def _breaks(self, n: int, byzantine: int) -> str | None:
        return self._minority(n, byzantine)


AggregatorRule = (
    Mean
    | Median
    | TrimmedMean
    | Krum
    | NormClip
    | GeometricMedian
    | CenteredClipping
    | Bulyan
    | DnC
    | SignGuard
)
Aggregator = Annotated[AggregatorRule, Field(discriminator="kind")]
AGGREGATOR_ADAPTER: TypeAdapter[AggregatorRule] = TypeAdapter(Aggregator)
AGGREGATORS: tuple[str, ...] = tuple(
    rule.model_fields["kind"].default for rule in get_args(AggregatorRule)
)
PRE_AGGREGATORS: tuple[str, ...] = get_args(PreAggregator)
MEAN = Mean()


def parse_aggregator(value: Any) -> Any:
    """A bare name (`"median"`) stands for the table `{kind = "median"}`;
    pre-aggregators go in front, joined by `+`: `"nnm+krum"` is
    `{kind = "krum", pre = ["nnm"]}`, `"bucketing+nnm+median"` both, in
    that order."""
    if isinstance(value, dict) and isinstance(value.get("kind"), str):
        # `--set aggregator=nnm+krum --set aggregator.f=2` makes a table of
        # the name first.
        named = parse_aggregator(value["kind"])
        extra = value.get("pre", ())
        return {**value, **named, "pre": [*named.get("pre", ()), *extra]}
    if not isinstance(value, str):
        return value
    *pre, kind = [part.strip() for part in value.split("+")]
    unknown = [p for p in pre if p not in PRE_AGGREGATORS]
    if unknown:
        raise ValueError(
            f"{unknown[0]!r} is no pre-aggregator (known: {', '.join(PRE_AGGREGATORS)})"
        )
    return {"kind": kind, "pre": pre} if pre else {"kind": kind}


def robust_mean(
    vectors: Sequence[np.ndarray],
    weights: Sequence[float],
    aggregator: AggregatorRule,
    centre: np.ndarray | None = None,
) -> np.ndarray:
    """One vector from `vectors` by `aggregator` (float64); `weights` are the
    algorithm's (used by `mean` and `norm_clip` only, and by neither after a
    pre-aggregator, whose mixed vectors belong to no one client). `centre`:
    the cluster's last fold, where a rule `remembers` it (None: the origin)."""
    from ._aggregate import weighted_mean

    if not vectors:
        raise ValueError("robust_mean needs at least one vector")
    if aggregator.is_mean:
        return weighted_mean(vectors, weights)
    reason = aggregator.breaks(len(vectors))
    if reason is not None:
        # A clustered algorithm's cluster can be smaller than the run the
        # scenario was checked against: said, never silent.
        warnings.warn(f"a cluster of {reason}", AssumptionWarning, stacklevel=2)
    stack = _stack(vectors)
    for step in aggregator.pre:
        if step == "nnm":
            stack = defences.nnm(stack, min(aggregator.nnm_f, (len(stack) - 1) // 2))
        else:
            stack = defences.bucketing(
                stack, aggregator.bucket_size, defences.vector_seed(stack)
            )
        weights = [1.0] * len(stack)
    # Krum and Bulyan are undefined on too few rows: no step. Judged on the
    # rows they get, so a warning about NNM alone does not stop them.
    if isinstance(aggregator, Krum | Bulyan) and aggregator._breaks(len(stack), 0):
        return np.zeros(stack.shape[1:])
    return _fold(stack, weights, aggregator, centre)


def _fold(
    stack: np.ndarray,
    weights: Sequence[float],
    aggregator: AggregatorRule,
    centre: np.ndarray | None,
) -> np.ndarray:
    """The rule itself, on float64 rows."""
    from ._aggregate import weighted_mean

    if isinstance(aggregator, Mean):
        return weighted_mean(list(stack), weights)
    if isinstance(aggregator, NormClip):
        return weighted_mean(clip_norms(list(stack), aggregator.max_norm), weights)
    if isinstance(aggregator, Median):
        return np.asarray(np.median(stack, axis=0))
    if isinstance(aggregator, TrimmedMean):
        return np.asarray(trim_mean(stack, aggregator.beta, axis=0))
    if isinstance(aggregator, Krum):
        return defences.mean_of_rows(stack, krum(stack, aggregator.f, aggregator.m))
    if isinstance(aggregator, GeometricMedian):
        return defences.geometric_median(stack, aggregator.nu, aggregator.iterations)
    if isinstance(aggregator, CenteredClipping):
        tau = aggregator.tau
        if tau is None:
            tau = float(np.median(np.linalg.norm(stack, axis=1))) or 1.0
        return defences.centered_clip(stack, tau, aggregator.iterations, centre)
    if isinstance(aggregator, Bulyan):
        return defences.bulyan(stack, aggregator.f)
    seed = defences.vector_seed(stack)
    if isinstance(aggregator, DnC):
        kept = defences.dnc(
            stack,
            aggregator.f,
            aggregator.c,
            aggregator.iterations,
            aggregator.dims,
            seed,
        )
        if kept is None:  # a mean of no rows would be NaN: no step instead
            warnings.warn(
                f"dnc: no update of the {len(stack)} survived all"
                f" {aggregator.iterations} of its filtering rounds; the"
                " cluster keeps its model this step",
                AssumptionWarning,
                stacklevel=3,
            )
            return np.zeros(stack.shape[1:])
        return kept
    return defences.signguard(
        stack, aggregator.lower, aggregator.upper, aggregator.share, seed
    )


def remember(
    centres: Mapping[ClusterId, np.ndarray],
    folds: Mapping[ClusterId, np.ndarray],
    models: Mapping[ClusterId, np.ndarray],
    aggregator: AggregatorRule,
) -> dict[ClusterId, np.ndarray]:
    """The clusters' centres once `folds` (this aggregation's, per cluster)
    are done: under a rule that `remembers`, each cluster's latest fold, for
    the clusters that still have a model in `models`; none otherwise. A
    cluster id that a split or a merge hands on keeps its centre: it only
    starts the clipping iterations."""
    if not aggregator.remembers:
        return {}
    return {c: v for c, v in {**centres, **folds}.items() if c in models}


def _stack(vectors: Sequence[np.ndarray]) -> np.ndarray:
    """`np.stack` of the vectors as float64, filled row by row (no float64
    copy of each beside the stack)."""
    shape = np.shape(vectors[0])
    stack = np.empty((len(vectors), *shape), dtype=np.float64)
    for row, vector in zip(stack, vectors, strict=True):
        if np.shape(vector) != shape:  # assignment would broadcast it
            raise ValueError(f"an update of shape {np.shape(vector)}, not {shape}")
        row[...] = vector
    return stack


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
