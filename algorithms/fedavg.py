"""FedAvg: the sample-weighted mean of client deltas.

McMahan, Moore, Ramage, Hampson, Agüera y Arcas, "Communication-Efficient
Learning of Deep Networks from Decentralized Data", AISTATS 2017.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ._aggregate import ClusterSums, member_weight, move_clusters
from .base import ClientInfo, ClientUpdate, ServerState, Strategy, TaskPlan


class FedAvg(Strategy[ServerState]):
    """One global model; a fraction `fraction` of clients trains each round.

    Args:
        fraction: share of available clients sampled each round (C in the
            paper); at least one client is always sampled.
        server_lr: step applied to the mean delta (1.0 is plain FedAvg).
    """

    name = "fedavg"
    state_type = ServerState
    folds = True
    honours_aggregator = True

    def __init__(self, *, fraction: float = 1.0, server_lr: float = 1.0) -> None:
        if not 0 < fraction <= 1:
            raise ValueError(f"fraction must be in (0, 1], got {fraction}")
        if server_lr <= 0:
            raise ValueError(f"server_lr must be > 0, got {server_lr}")
        self.fraction = fraction
        self.server_lr = server_lr

    def plan_round(
        self,
        state: ServerState,
        round: int,
        clients: Sequence[ClientInfo],
        rng: np.random.Generator,
    ) -> list[TaskPlan]:
        chosen = sample_clients(clients, self.fraction, rng)
        return [self.plan_for(state, c.id) for c in chosen]

    def aggregate(
        self,
        state: ServerState,
        round: int,
        updates: Sequence[ClientUpdate],
        rng: np.random.Generator,
    ) -> ServerState:
        return move_clusters(
            state, updates, server_lr=self.server_lr, aggregator=self.aggregator
        )

    def fold_weight(self, state: ServerState, update: ClientUpdate) -> float:
        return member_weight(update, "weighted")

    def aggregate_sums(
        self,
        state: ServerState,
        round: int,
        updates: Sequence[ClientUpdate],
        sums: ClusterSums,
        rng: np.random.Generator,
    ) -> ServerState:
        return state.replace(models=sums.step(state.models, server_lr=self.server_lr))


def sample_clients(
    clients: Sequence[ClientInfo], fraction: float, rng: np.random.Generator
) -> list[ClientInfo]:
    """A seeded sample of `sample_size(fraction, n)` of the n clients, in id
    order.

    Draws from `rng` only when there is a choice to make (fraction < 1 and
    more than one client).
    """
    if fraction >= 1 or len(clients) <= 1:
        return list(clients)
    k = sample_size(fraction, len(clients))
    picked = rng.choice(len(clients), size=k, replace=False)
    return [clients[i] for i in sorted(picked)]


def sample_size(fraction: float, n: int) -> int:
    """How many of `n` clients `sample_clients` draws: all of them with
    fraction 1 or at most one client, else max(1, round(fraction·n)), which
    may be more than fraction·n (client-level DP accounts the largest k/n a
    run reaches, scenarios/privacy.py; robust rules check their assumption
    at this many, scenarios/robustness.py)."""
    if fraction >= 1 or n <= 1:
        return n
    return max(1, round(fraction * n))
