"""Per-cluster buffers of asynchronous aggregation: FedBuff in every cluster.

Nguyen et al., "Federated Learning with Buffered Asynchronous Aggregation",
AISTATS 2022, applied cluster by cluster: each arriving delta, discounted by
the staleness function s(τ) (τ counted in versions of its own cluster), is
added to its cluster's buffer; when a buffer holds `buffer_size` updates its
cluster model moves by `server_lr` times their weighted mean and the buffer
empties. The other clusters' models and buffers stay as they are, so every
cluster keeps its own pace.

Under a robust `aggregator` (`robust.py`) a buffer keeps its discounted deltas
one by one and the full buffer moves its cluster by the rule's fold of them
(`server_lr` times it): the same rule as a synchronous round, over the
buffer's `buffer_size` updates, from the cluster's centre where the rule
keeps one (centred clipping: the cluster's last fold). Under `mean` it keeps
only the sums, and the step is bit for bit what it was.

A cluster's model moves by deltas, never to the mean of the members' end
points: an end point of a stale update lies near the model it started from,
and averaging end points would pull the cluster back there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from clusterfed.types import ClusterId

from ._staleness import Staleness, check_staleness, staleness_weight
from .base import ClientUpdate
from .robust import MEAN, AggregatorRule, remember, robust_mean


@dataclass(frozen=True)
class ClusterBuffer:
    """What a cluster has received since its last step: Σ s(τ)·w·δ (float64),
    Σ w, and how many updates; under a robust rule each s(τ)·δ and its w too
    (empty under `mean`)."""

    total: np.ndarray
    weight: float
    count: int
    members: tuple[np.ndarray, ...] = ()
    weights: tuple[float, ...] = ()


class Folded(NamedTuple):
    """A buffer's fold of one update: the models, the buffers, whether a
    model moved and the clusters' centres (`ServerState.centres`). New
    mappings; none of the inputs is mutated."""

    models: dict[ClusterId, np.ndarray]
    buffers: dict[ClusterId, ClusterBuffer]
    moved: bool
    centres: dict[ClusterId, np.ndarray]


@dataclass(frozen=True)
class BufferRule:
    """When and how far a cluster model moves in asynchronous mode.

    Args:
        buffer_size: updates a cluster gathers before its model moves.
        staleness: "constant", "polynomial" ((τ+1)^−a) or "hinge".
        a, b: the staleness function's parameters.
        server_lr: the step on the buffer's mean.
    """

    buffer_size: int
    staleness: Staleness
    a: float
    b: int
    server_lr: float

    @classmethod
    def checked(
        cls, *, buffer_size: int, staleness: str, a: float, b: int, server_lr: float
    ) -> BufferRule:
        """The rule, or ValueError naming the bad value."""
        if (
            isinstance(buffer_size, bool)
            or not isinstance(buffer_size, int)
            or buffer_size < 1
        ):
            raise ValueError(
                f"buffer_size must be an integer >= 1, got {buffer_size!r}"
            )
        if not server_lr > 0:
            raise ValueError(f"server_lr must be > 0, got {server_lr}")
        kind = check_staleness(staleness, a, b)
        return cls(buffer_size, kind, a, b, server_lr)

    def fold(
        self,
        models: Mapping[ClusterId, np.ndarray],
        buffers: Mapping[ClusterId, ClusterBuffer],
        update: ClientUpdate,
        staleness: int,
        weight: float = 1.0,
        aggregator: AggregatorRule = MEAN,
        centres: Mapping[ClusterId, np.ndarray] | None = None,
    ) -> Folded:
        """Add `update` (weighted by `weight` and s(τ)) to its cluster's
        buffer; step that cluster when the buffer is full, by `aggregator`
        (from the cluster's entry in `centres`, where the rule remembers its
        last fold)."""
        centres = dict(centres or {})
        if update.delta is None or update.cluster not in models:
            return Folded(dict(models), dict(buffers), False, centres)
        cluster = update.cluster_id
        discount = staleness_weight(self.staleness, staleness, a=self.a, b=self.b)
        step = update.delta.astype(np.float64) * (discount * weight)
        robust = not aggregator.is_mean
        member = (update.delta.astype(np.float64) * discount,) if robust else ()
        kept = (weight,) if robust else ()
        old = buffers.get(cluster)
        buffer = (
            ClusterBuffer(step, weight, 1, member, kept)
            if old is None
            else ClusterBuffer(
                old.total + step,
                old.weight + weight,
                old.count + 1,
                old.members + member,
                old.weights + kept,
            )
        )
        new_models = dict(models)
        new_buffers = dict(buffers)
        if buffer.count < self.buffer_size:
            new_buffers[cluster] = buffer
            return Folded(new_models, new_buffers, False, centres)
        current = models[cluster].astype(np.float64)
        # Weights are sample counts or 1. When every count is 0 the total is 0
        # too: dividing by the count instead of 0 leaves the model where it was,
        # as a synchronous round skips updates of no samples.
        total = buffer.weight if buffer.weight > 0 else float(buffer.count)
        if robust:
            fold = robust_mean(
                buffer.members, buffer.weights, aggregator, centres.get(cluster)
            )
            moved = current + self.server_lr * fold
            centres = remember(centres, {cluster: fold}, models, aggregator)
        else:
            moved = current + self.server_lr * buffer.total / total
        new_models[cluster] = moved.astype(np.float32)
        new_buffers.pop(cluster, None)
        return Folded(new_models, new_buffers, True, centres)


class Buffered:
    """A strategy with per-cluster buffers: its keyword parameters
    `buffer_size`, `staleness`, `a`, `b`, `server_lr` and their `BufferRule`."""

    buffering: BufferRule

    def init_buffering(
        self, *, buffer_size: int, staleness: str, a: float, b: int, server_lr: float
    ) -> None:
        """Check and keep the parameters (ValueError naming a bad value)."""
        self.buffering = BufferRule.checked(
            buffer_size=buffer_size, staleness=staleness, a=a, b=b, server_lr=server_lr
        )
        self.buffer_size = buffer_size
        self.staleness = self.buffering.staleness
        self.a, self.b, self.server_lr = a, b, server_lr


def latest_per_client(updates: tuple[ClientUpdate, ...]) -> list[ClientUpdate]:
    """Each client's last update of `updates`, in client order."""
    latest = {u.client: u for u in updates}
    return [latest[c] for c in sorted(latest)]
