"""FedBuff: arriving updates wait in a buffer; every K of them make one step.

Nguyen, Malik, Zhan, Yousefpour, Rabbat, Malek, Huba, "Federated Learning with
Buffered Asynchronous Aggregation", AISTATS 2022.

Each arriving delta, weighted by a staleness function s(τ), is added to its
cluster's buffer; when that buffer holds K, the cluster's model moves by the
server learning rate times their mean, and the buffer empties. One model has
one buffer, as in the paper; a cluster per model (a scenario that starts
several) keeps each cluster's updates apart (`_buffers.py`), never applying
one cluster's deltas to another's model. It runs in asynchronous mode only
(`async_only`): its synchronous round would be FedAvg's.

The staleness default is the paper's experiments': each update scaled by
s(τ) = 1/√(1 + τ) (its Sec. 5, "polynomial" with a = 0.5 here, FLSim's
`PolynomialStalenessWeight(exponent=0.5)`); "constant" gives the algorithm
as its Algorithm 1 states it, without a discount.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from clusterfed.types import ClusterId

from ._buffers import Buffered, ClusterBuffer
from .base import ClientUpdate, ServerState
from .fedavg import FedAvg


@dataclass(frozen=True)
class FedBuffState(ServerState):
    """The model(s) and each one's buffer: the staleness-weighted sum of the
    deltas that arrived since its last step (float64), and how many."""

    buffers: Mapping[ClusterId, ClusterBuffer] = field(default_factory=dict)


class FedBuff(Buffered, FedAvg):
    """FedAvg with an asynchronous mode that steps every `buffer_size` updates.

    Args:
        buffer_size: K, the updates of one step.
        staleness: "polynomial" (default, with a = 0.5: 1/√(1 + τ), as the
            paper's experiments), "constant" or "hinge" (see FedAsync).
        a, b: the staleness function's parameters.
        server_lr: η_g, the step on the buffer's mean.
        fraction: kept for FedAvg's signature; FedBuff has no synchronous
            mode (`async_only`), so it is not used.
    """

    name = "fedbuff"
    state_type = FedBuffState
    supports_async = True
    async_only = True
    honours_aggregator = False
    honours_aggregator_async = True

    def __init__(
        self,
        *,
        buffer_size: int = 5,
        staleness: str = "polynomial",
        a: float = 0.5,
        b: int = 4,
        server_lr: float = 1.0,
        fraction: float = 1.0,
    ) -> None:
        super().__init__(fraction=fraction, server_lr=server_lr)
        self.init_buffering(
            buffer_size=buffer_size,
            staleness=staleness,
            a=a,
            b=b,
            server_lr=server_lr,
        )

    def absorb(  # type: ignore[override]
        self,
        state: FedBuffState,
        update: ClientUpdate,
        staleness: int,
        rng: np.random.Generator,
    ) -> tuple[FedBuffState, bool]:
        if not update.ok or update.delta is None or update.cluster not in state.models:
            return state, False
        # Every update weighs 1: the buffer's step is the plain mean of its
        # discounted deltas (Algorithm 1), whatever the sample counts.
        folded = self.buffering.fold(
            state.models,
            state.buffers,
            update,
            staleness,
            aggregator=self.aggregator,
            centres=state.centres,
        )
        new = state.replace(
            models=folded.models, buffers=folded.buffers, centres=folded.centres
        )
        return new, folded.moved
