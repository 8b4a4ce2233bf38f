"""An algorithm of one's own, outside clusterfed: the FedMedian of
docs/writing-a-strategy.md, used as `--algorithm tests_plugin:FedMedian`.

Also `InterruptAt`, FedAvg that sends its own process SIGINT after a given
round's aggregation: the Ctrl-C tests use it to interrupt a run at a known
round without waiting on the clock.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence

import numpy as np

from clusterfed.algorithms import ClientUpdate, ServerState, Strategy
from clusterfed.algorithms.fedavg import FedAvg


class FedMedian(Strategy[ServerState]):
    """One global model moved by the coordinate-wise median of the deltas.

    Yin, Chen, Ramchandran, Bartlett, "Byzantine-Robust Distributed Learning:
    Towards Optimal Statistical Rates", ICML 2018.

    Args:
        server_lr: step applied to the median delta (1.0: the median itself).
    """

    name = "fedmedian"
    state_type = ServerState

    def __init__(self, *, server_lr: float = 1.0) -> None:
        if not server_lr > 0:
            raise ValueError(f"server_lr must be > 0, got {server_lr}")
        self.server_lr = server_lr

    def aggregate(
        self,
        state: ServerState,
        round: int,
        updates: Sequence[ClientUpdate],
        rng: np.random.Generator,
    ) -> ServerState:
        models = dict(state.models)
        for cluster, model in state.models.items():
            deltas = [
                u.delta
                for u in updates
                if u.ok and u.cluster == cluster and u.delta is not None
            ]
            if deltas:
                step = np.median(np.stack(deltas), axis=0) * self.server_lr
                models[cluster] = (model + step).astype(np.float32)
        return state.replace(models=models)


class InterruptAt(FedAvg):
    """FedAvg that interrupts its own process (SIGINT, as Ctrl-C does) once
    round `round` is aggregated, the first time a process gets there (a
    resumed run in the same process goes on)."""

    name = "interrupt-at"
    folds = False  # its own aggregate must run: it is where it interrupts
    fired = False
    presses = 1

    def __init__(self, *, round: int = 1, fraction: float = 1.0) -> None:
        super().__init__(fraction=fraction)
        self.round = round

    def aggregate(
        self,
        state: ServerState,
        round: int,
        updates: Sequence[ClientUpdate],
        rng: np.random.Generator,
    ) -> ServerState:
        if round == self.round and not InterruptAt.fired:
            InterruptAt.fired = True
            for _ in range(self.presses):
                os.kill(os.getpid(), signal.SIGINT)
        return super().aggregate(state, round, updates, rng)


class InterruptTwiceAt(InterruptAt):
    """`InterruptAt` pressing Ctrl-C twice: stop at once."""

    name = "interrupt-twice-at"
    presses = 2
