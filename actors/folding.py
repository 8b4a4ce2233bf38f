"""Streaming aggregation: a round's accepted deltas folded as they arrive.

A strategy whose round needs only per-cluster sums (`Strategy.folds`) gets
them from a `RoundFold`: the train phase hands it each update as soon as the
reply is judged; the fold adds the delta to the cluster's running sum and the
update goes on without it, so the server holds one sum per cluster instead
of every client's delta until `aggregate` (1,000 Fashion-MNIST clients held
1.9 GB of deltas per round).

Sums are added in client order, as `average_per_cluster` adds them, so
streaming changes no bit of the result: an update that is decided before an
earlier-planned client waits in a reorder buffer until that client is
decided too. With requests sent in plan order and a bounded number in
flight, the buffer holds about as many deltas as are in flight; more only
while an early client hangs until its timeout.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

import numpy as np

from clusterfed.algorithms import ClientUpdate, ClusterSums, counts_in_mean
from clusterfed.protocol import UpdateReply
from clusterfed.types import ClientId

from .outcome import Exchange


class RoundFold:
    """A round's `ClusterSums`, added to in client order.

    Args:
        clients: the round's planned clients (each once).
        weight: an update's weight in its cluster's sum (`Strategy.fold_weight`).
    """

    def __init__(
        self, clients: Iterable[ClientId], weight: Callable[[ClientUpdate], float]
    ) -> None:
        self.sums = ClusterSums()
        self._order = sorted(clients)
        self._next = 0
        self._waiting: dict[ClientId, ClientUpdate] = {}
        self._weight = weight
        self.most_waiting = 0
        """The most decided updates that waited at once for an earlier client."""

    def add(self, update: ClientUpdate) -> ClientUpdate:
        """Note a decided update; returns it without its delta."""
        self._waiting[update.client] = update
        while self._next < len(self._order):
            ready = self._waiting.pop(self._order[self._next], None)
            if ready is None:
                break
            self._next += 1
            if counts_in_mean(ready):
                assert ready.delta is not None
                self.sums.add(ready.cluster_id, ready.delta, self._weight(ready))
        self.most_waiting = max(self.most_waiting, len(self._waiting))
        return replace(update, delta=None)

    @property
    def done(self) -> bool:
        """Whether every planned client's update has been added."""
        return self._next == len(self._order)


def without_delta(exchange: Exchange) -> Exchange:
    """The exchange with its update's delta dropped (it is folded)."""
    reply = exchange.reply
    if reply is None or not isinstance(reply.payload, UpdateReply):
        return exchange
    payload = reply.payload.model_copy(update={"delta": _FOLDED})
    return replace(exchange, reply=reply.model_copy(update={"payload": payload}))


_FOLDED = np.zeros(0, dtype=np.float32)
