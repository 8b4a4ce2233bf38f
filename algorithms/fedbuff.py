"""FedBuff: arriving updates wait in a buffer; every K of them make one step.

Nguyen, Malik, Zhan, Yousefpour, Rabbat, Malek, Huba, "Federated Learning with
Buffered Asynchronous Aggregation", AISTATS 2022.

Each arriving delta, weighted by a staleness function s(τ), is added to the
buffer; when it holds K, the model moves by the server learning rate times
their mean, and the buffer empties. It runs in asynchronous mode only
(`async_only`): its synchronous round would be FedAvg's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._staleness import check_staleness, staleness_weight
from .base import ClientUpdate, ServerState
from .fedavg import FedAvg


@dataclass(frozen=True)
class FedBuffState(ServerState):
    """The model and the buffer: the staleness-weighted sum of the deltas
    that arrived since the last step (float64), and how many."""

    buffer: np.ndarray | None = None
    buffered: int = 0


class FedBuff(FedAvg):
    """FedAvg with an asynchronous mode that steps every `buffer_size` updates.

    Args:
        buffer_size: K, the updates of one step.
        staleness: "constant" (the paper's default), "polynomial" or "hinge"
            (see FedAsync).
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

    def __init__(
        self,
        *,
        buffer_size: int = 5,
        staleness: str = "constant",
        a: float = 0.5,
        b: int = 4,
        server_lr: float = 1.0,
        fraction: float = 1.0,
    ) -> None:
        super().__init__(fraction=fraction, server_lr=server_lr)
        if buffer_size < 1:
            raise ValueError(f"buffer_size must be >= 1, got {buffer_size}")
        self.buffer_size = buffer_size
        self.staleness = check_staleness(staleness, a, b)
        self.a, self.b = a, b

    def absorb(  # type: ignore[override]
        self,
        state: FedBuffState,
        update: ClientUpdate,
        staleness: int,
        rng: np.random.Generator,
    ) -> tuple[FedBuffState, bool]:
        if not update.ok or update.delta is None:
            return state, False
        weight = staleness_weight(self.staleness, staleness, a=self.a, b=self.b)
        step = update.delta.astype(np.float64) * weight
        buffer = step if state.buffer is None else state.buffer + step
        count = state.buffered + 1
        if count < self.buffer_size:
            return state.replace(buffer=buffer, buffered=count), False
        current = state.models[update.cluster].astype(np.float64)
        new = (current + self.server_lr * buffer / count).astype(np.float32)
        models = {**state.models, update.cluster: new}
        return state.replace(models=models, buffer=None, buffered=0), True
