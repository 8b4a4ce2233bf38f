"""A host of client actors: the one place their objects and state live.

Every runtime hosts clients the same way, through a `ClientHost`: the inline
runtime holds one, each worker process of the local runtime holds one, each
Ray host actor wraps one. Its clients share the host's pool of scratch models
and keep everything else (trainer, privacy accountant, a faulty client's
memory) on their own objects.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
from threadpoolctl import threadpool_limits

from clusterfed.types import ClientId

from .client import Client, ClientState, keeps_state
from .compute import prepare_process
from .spec import ClientSpec, ScratchModels


def compute_on_one_thread() -> Callable[[], None]:
    """Torch's threads and the BLAS libraries' (numpy's OpenBLAS, through
    threadpoolctl) down to one in this process; returns what restores them.

    A host computes one client at a time beside the other hosts, one core
    each: a second BLAS thread only competes with another host (OpenBLAS
    spins while it waits), and a dot product summed in two halves rounds
    differently from one summed whole, so every host uses one thread for the
    same numerics in every runtime.
    """
    torch_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    blas = threadpool_limits(1)

    def restore() -> None:
        blas.restore_original_limits()
        torch.set_num_threads(torch_threads)

    return restore


class ClientHost:
    """Client actors hosted together; they serve one request at a time."""

    def __init__(self) -> None:
        self.clients: dict[int, Client] = {}
        self.models = ScratchModels()

    def add(self, specs: Sequence[ClientSpec]) -> list[bytes]:
        """Host new clients; returns the join request each of them sends."""
        joins = []
        for spec in specs:
            if spec.compute is not None:  # before the first kernel on it
                prepare_process(spec.compute.device)
            if spec.id in self.clients:
                raise ValueError(f"client {spec.id} is already hosted here")
            client = self.clients[spec.id] = Client(spec, self.models)
            joins.append(client.join_request())
        return joins

    def update(self, spec: ClientSpec) -> None:
        """A hosted client's new spec (a drift, a straggler, a new link); it
        keeps what it remembers."""
        self._client(spec.id).update(spec)

    def remove(self, client: int, reason: str) -> bytes:
        """Stop hosting a client; returns the leave notice it sends."""
        return self.clients.pop(client).leave_notice(reason)

    async def handle(self, client: int, data: bytes) -> bytes | None:
        """The client's reply to `data`; None if it does not answer."""
        return await self._client(client).handle(data)

    def states(
        self, clients: Sequence[int] | None = None
    ) -> dict[ClientId, ClientState]:
        """What hosted clients keep between rounds (see `Client.state`)."""
        ids = sorted(self.clients) if clients is None else clients
        found = {
            ClientId(cid): self.clients[cid].state()
            for cid in ids
            if cid in self.clients and keeps_state(self.clients[cid].spec)
        }
        return {cid: state for cid, state in found.items() if state is not None}

    def restore(self, states: Mapping[ClientId, ClientState]) -> None:
        """Give hosted clients what `states` returned; others are not here."""
        for cid, state in states.items():
            if cid in self.clients:
                self.clients[cid].restore(state)

    def _client(self, client: int) -> Client:
        found = self.clients.get(client)
        if found is None:
            raise LookupError(f"client {client} is not hosted here")
        return found
