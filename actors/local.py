"""The local runtime: the server on one asyncio loop, clients beside it.

Messages always pass as encoded bytes, so a local run exercises the same codec
as a Ray run. With one worker the client actors live on the same loop and
train inline; with more, they are served by forked worker processes (one
torch thread each) so every core trains — Python threads would queue on the
GIL. Results are the same either way: a task carries all it needs.

A faulty client that does not answer (`faults.py`) leaves its request
waiting, as a real one would; the server's task timeout ends it. Checkpoints
take the server's state and the clients' state (privacy accountants) through
`snapshot`/`client_states` and give them back through `restore` and
`restore_client_states`.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from clusterfed.protocol import Shutdown, Welcome, decode
from clusterfed.types import ClientId

from .client import Client, keeps_state
from .process_hosts import ProcessHosts
from .server import ParameterServer, RoundOutcome, build_server
from .spec import ClientSpec, ServerSpec


class ClientUnreachable(ConnectionError):
    """A client that crashed or dropped out does not answer."""


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
        self.unreachable: dict[ClientId, str] = {}
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
        """Host new clients; each sends its join request to the server."""
        server = self._server()
        for spec in specs:
            client = self._host(spec)
            reply = decode(await server.handle(client.join_request())).payload
            if not isinstance(reply, Welcome):
                raise RuntimeError(f"client {spec.id} could not join: {reply}")

    async def remove_client(self, client: int, reason: str) -> None:
        """The client announces it leaves, then stops being hosted."""
        leaving = self.clients.pop(ClientId(client))
        reply = decode(
            await self._server().handle(leaving.leave_notice(reason))
        ).payload
        if not isinstance(reply, Shutdown):
            raise RuntimeError(f"client {client} could not leave: {reply}")
        self.unreachable.pop(ClientId(client), None)

    async def update_client(self, spec: ClientSpec) -> None:
        """Replace a client's spec (a drift, a straggler, a new link)."""
        self._host(spec)

    def set_unreachable(self, clients: Mapping[int, str]) -> None:
        """Who does not answer this round (crashed, dropped out), and why."""
        self.unreachable = {ClientId(c): reason for c, reason in clients.items()}

    async def request(self, client: ClientId, data: bytes) -> bytes:
        if client in self.unreachable:
            raise ClientUnreachable(self.unreachable[client])
        target = self.clients.get(client)
        if target is None:
            raise LookupError(f"no client {client} in this runtime")
        if self._hosts is not None:
            reply = await self._hosts.request(client, data)
        else:
            reply = await target.handle(data)
        if reply is None:  # the client does not answer: its reply never comes
            await asyncio.Event().wait()
            raise AssertionError("unreachable")
        return reply

    async def run_round(self, round: int) -> RoundOutcome:
        return await self._server().run_round(round)

    async def snapshot(self) -> dict[str, Any]:
        """The server's state between rounds (see `ParameterServer.snapshot`)."""
        return self._server().snapshot()

    async def restore(self, snapshot: Mapping[str, Any]) -> None:
        """Put the server back where `snapshot` was taken (after `start`)."""
        self._server().restore(snapshot)

    async def client_states(self) -> dict[int, Any]:
        """What every hosted client keeps between rounds (see `Client.state`)."""
        ids = sorted(
            c for c, client in self.clients.items() if keeps_state(client.spec)
        )
        if self._hosts is not None:
            states = await self._hosts.states(ids)
            return {int(c): s for c, s in states.items()}
        found = {int(c): self.clients[c].state() for c in ids}
        return {c: s for c, s in found.items() if s is not None}

    async def restore_client_states(self, states: Mapping[int, Any]) -> None:
        """Give clients their state back, before any request reaches them."""
        mine = {
            ClientId(c): s for c, s in states.items() if ClientId(c) in self.clients
        }
        if self._hosts is not None:
            await self._hosts.restore(mine)
        else:
            for client, state in mine.items():
                self.clients[client].restore(state)

    async def close(self) -> None:
        try:
            if self.server is not None:
                self.unreachable = {}
                await self.server.shutdown()
        finally:
            if self._hosts is not None:
                await self._hosts.close()
                self._hosts = None
            torch.set_num_threads(self._torch_threads)

    def _host(self, spec: ClientSpec) -> Client:
        client = self.clients.get(ClientId(spec.id))
        if client is None:
            client = self.clients[ClientId(spec.id)] = Client(spec)
        else:
            client.update(spec)  # it keeps its memory
        self._server().profiles[ClientId(spec.id)] = spec.profile
        if self._hosts is not None:
            self._hosts.add([spec])
        return client

    def _server(self) -> ParameterServer:
        if self.server is None:
            raise RuntimeError("start() the runtime first")
        return self.server
