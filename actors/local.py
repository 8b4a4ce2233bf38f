"""The local runtime: the server on one asyncio loop, clients beside it.

Messages always pass as encoded bytes, so a local run exercises the same codec
as a Ray run. With one worker the client actors live on the same loop and
train inline; with more, they are served by forked worker processes (one
torch thread each) so every core trains — Python threads would queue on the
GIL. Results are the same either way: a task carries all it needs.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch

from clusterfed.protocol import Welcome, decode
from clusterfed.types import ClientId

from .client import Client
from .process_hosts import ProcessHosts
from .server import ParameterServer, RoundOutcome, build_server
from .spec import ClientSpec, ServerSpec


class LocalRuntime:
    """Hosts a server and its clients on this machine.

    Args:
        workers: processes serving clients; default one per CPU core; 1 keeps
            everything in this process.
    """

    name = "local"

    def __init__(self, *, workers: int | None = None) -> None:
        self.workers = workers or os.cpu_count() or 1
        self.server: ParameterServer | None = None
        self.clients: dict[ClientId, Client] = {}
        self._hosts: ProcessHosts | None = None
        self._torch_threads = torch.get_num_threads()

    async def start(self, server: ServerSpec, clients: Sequence[ClientSpec]) -> None:
        """Build the server, start the workers, then let each client join."""
        torch.set_num_threads(1)
        if self.workers > 1:
            self._hosts = ProcessHosts(self.workers)
            await self._hosts.start()
        self.server = build_server(server, self, {})
        await self.add_clients(clients)

    async def add_clients(self, specs: Sequence[ClientSpec]) -> None:
        assert self.server is not None, "start() first"
        if self._hosts is not None:
            self._hosts.add(specs)
        for spec in specs:
            client = Client(spec)
            self.clients[ClientId(spec.id)] = client
            self.server.profiles[ClientId(spec.id)] = spec.profile
            reply = decode(await self.server.handle(client.join_request())).payload
            if not isinstance(reply, Welcome):
                raise RuntimeError(f"client {spec.id} could not join: {reply}")

    async def request(self, client: ClientId, data: bytes) -> bytes:
        if self._hosts is not None:
            return await self._hosts.request(client, data)
        target = self.clients.get(client)
        if target is None:
            raise LookupError(f"no client {client} in this runtime")
        return await target.handle(data)

    async def run_round(self, round: int) -> RoundOutcome:
        assert self.server is not None, "start() first"
        return await self.server.run_round(round)

    async def close(self) -> None:
        try:
            if self.server is not None:
                await self.server.shutdown()
        finally:
            if self._hosts is not None:
                await self._hosts.close()
                self._hosts = None
            torch.set_num_threads(self._torch_threads)
