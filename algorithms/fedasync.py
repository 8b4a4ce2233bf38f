"""FedAsync: every arriving update is mixed into the model at once.

Xie, Koyejo, Gupta, "Asynchronous Federated Optimization", OPT workshop
(NeurIPS) 2020 / arXiv:1903.03934 (2019).

x ← (1 − α_τ) x + α_τ x_new, with α_τ = α · s(τ): x_new the client's trained
model (the model it was sent plus its delta) and s a staleness function of τ,
the server versions since that model was sent. It runs in asynchronous mode
only (`async_only`): its synchronous round would be FedAvg's.
"""

from __future__ import annotations

import numpy as np

from ._staleness import check_staleness, staleness_weight
from .base import ClientUpdate, ServerState
from .fedavg import FedAvg


class FedAsync(FedAvg):
    """FedAvg with an asynchronous mode that mixes each update as it arrives.

    Args:
        alpha: the mixing weight α of a fresh update, in (0, 1].
        staleness: "constant", "polynomial" ((τ+1)^−a) or "hinge" (1 up to
            τ = b, then 1/(a(τ−b)+1)).
        a, b: the staleness function's parameters.
        fraction, server_lr: kept for FedAvg's signature; FedAsync has no
            synchronous mode (`async_only`), so neither is used.
    """

    name = "fedasync"
    supports_async = True
    async_only = True
    honours_aggregator = False

    def __init__(
        self,
        *,
        alpha: float = 0.6,
        staleness: str = "polynomial",
        a: float = 0.5,
        b: int = 4,
        fraction: float = 1.0,
        server_lr: float = 1.0,
    ) -> None:
        super().__init__(fraction=fraction, server_lr=server_lr)
        if not 0 < alpha <= 1:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        self.alpha = alpha
        self.staleness = check_staleness(staleness, a, b)
        self.a, self.b = a, b

    def absorb(
        self,
        state: ServerState,
        update: ClientUpdate,
        staleness: int,
        rng: np.random.Generator,
    ) -> tuple[ServerState, bool]:
        if not update.ok or update.base is None or update.delta is None:
            return state, False
        mix = self.alpha * staleness_weight(
            self.staleness, staleness, a=self.a, b=self.b
        )
        cluster = update.cluster_id
        current = state.models[cluster].astype(np.float64)
        trained = update.base.astype(np.float64) + update.delta
        new = ((1.0 - mix) * current + mix * trained).astype(np.float32)
        return state.replace(models={**state.models, cluster: new}), True
