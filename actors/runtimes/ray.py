"""The Ray runtime: the same server and client actors, as Ray actors.

The parameter server is one Ray async actor; the clients live in host actors,
each holding `clients_per_host` logical clients (a Ray actor is a process of
≈100–150 MB, so one per client does not scale), with `clients_per_host=1`
giving every client its own actor. Requests and replies are the same encoded
protocol bytes as in the local runtime; every host trains with one torch
thread, so a run gives the same results in both runtimes.

A host actor that dies (`ray.kill`, a lost node) is a fault the server sees:
its clients' requests fail, their updates are counted as failed, and the run
goes on. With `max_restarts > 0` Ray restarts the host from its constructor
arguments, and its clients send their join requests again.

Checkpoints take the server's state from the server actor and the clients'
state (privacy accountants, a faulty client's memory) from their hosts, and
give them back the same way on resume. A faulty client that does not answer
leaves its request waiting until the server's task timeout; its host goes on
serving the others.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import ray

from clusterfed.protocol import Shutdown, Welcome, decode
from clusterfed.types import ClientId

from .client import Client, keeps_state
from .server import ParameterServer, RoundOutcome, build_server
from .spec import ClientSpec, ServerSpec


class ClientUnreachable(ConnectionError):
    """A client that crashed or dropped out does not answer."""


class ServerActor:
    """The parameter server inside a Ray actor, talking to host actors."""

    def __init__(self, spec: ServerSpec) -> None:
        import torch

        torch.set_num_threads(1)
        self.hosts: dict[ClientId, Any] = {}
        self.unreachable: dict[ClientId, str] = {}
        self.server: ParameterServer = build_server(spec, self, {})

    def place(self, hosts: Mapping[int, Any], profiles: Mapping[int, Any]) -> None:
        """Which host serves which client, and each client's device."""
        self.hosts.update({ClientId(c): h for c, h in hosts.items()})
        self.server.profiles.update({ClientId(c): p for c, p in profiles.items()})

    def forget(self, client: int) -> None:
        self.hosts.pop(ClientId(client), None)
        self.unreachable.pop(ClientId(client), None)

    def set_unreachable(self, clients: Mapping[int, str]) -> None:
        self.unreachable = {ClientId(c): reason for c, reason in clients.items()}

    async def handle(self, data: bytes) -> bytes:
        return await self.server.handle(data)

    async def run_round(self, round: int) -> RoundOutcome:
        return await self.server.run_round(round)

    def snapshot(self) -> dict[str, Any]:
        return self.server.snapshot()

    def restore(self, snapshot: Mapping[str, Any]) -> None:
        self.server.restore(snapshot)

    async def shutdown(self) -> None:
        self.unreachable = {}
        await self.server.shutdown()

    async def request(self, client: ClientId, data: bytes) -> bytes:
        """The `Transport` of the server: a remote call to the client's host."""
        if client in self.unreachable:
            raise ClientUnreachable(self.unreachable[client])
        host = self.hosts.get(client)
        if host is None:
            raise LookupError(f"no client {client} in this runtime")
        reply: bytes | None = await host.handle.remote(int(client), data)
        if reply is None:  # the client does not answer: its reply never comes
            await asyncio.Event().wait()
            raise AssertionError("unreachable")
        return reply


class ClientHost:
    """A Ray actor hosting several client actors; they train one at a time."""

    def __init__(self, specs: Sequence[ClientSpec], server: Any, rejoin: bool) -> None:
        import torch

        torch.set_num_threads(1)
        self.server = server
        self.clients: dict[int, Client] = {spec.id: Client(spec) for spec in specs}
        # Ray re-runs the constructor when it restarts a dead host: its clients
        # then announce themselves again, as a client back from a crash would.
        if rejoin and ray.get_runtime_context().was_current_actor_reconstructed:
            for client in self.clients.values():
                server.handle.remote(client.join_request())

    async def add(self, specs: Sequence[ClientSpec]) -> list[bytes]:
        """Host (or update) clients; returns the join requests of new ones."""
        joins = []
        for spec in specs:
            known = self.clients.get(spec.id)
            if known is None:
                self.clients[spec.id] = Client(spec)
                joins.append(self.clients[spec.id].join_request())
            else:
                known.update(spec)  # it keeps its memory
        return joins

    async def leave(self, client: int, reason: str) -> bytes:
        return self.clients.pop(client).leave_notice(reason)

    async def handle(self, client: int, data: bytes) -> bytes | None:
        target = self.clients.get(client)
        if target is None:
            raise LookupError(f"client {client} is not hosted here")
        return await target.handle(data)

    def states(self) -> dict[int, Any]:
        """What each hosted client keeps between rounds (see `Client.state`)."""
        found = {
            cid: client.state()
            for cid, client in self.clients.items()
            if keeps_state(client.spec)
        }
        return {cid: state for cid, state in found.items() if state is not None}

    def restore(self, states: Mapping[int, Any]) -> None:
        for cid, state in states.items():
            if cid in self.clients:
                self.clients[cid].restore(state)

    def pid(self) -> int:
        return os.getpid()


class RayRuntime:
    """Hosts the server and the clients as Ray actors.

    Args:
        address: a running cluster ("auto" or "HOST:PORT"); None starts a
            local Ray for this run and stops it afterwards.
        clients_per_host: logical clients per host actor; default spreads the
            clients over as many hosts as Ray reports CPUs.
        num_cpus: CPUs of a local Ray (default: all of this machine's).
        max_restarts: how often Ray restarts a dead host (0: never).
        restart_wait_s: after a round, how long to wait for hosts being
            restarted (their clients miss the round they died in, then return).
    """

    name = "ray"

    def __init__(
        self,
        *,
        address: str | None = None,
        clients_per_host: int | None = None,
        num_cpus: int | None = None,
        max_restarts: int = 0,
        restart_wait_s: float = 120.0,
    ) -> None:
        if clients_per_host is not None and clients_per_host < 1:
            raise ValueError(f"clients_per_host must be >= 1, got {clients_per_host}")
        self.address = address
        self.clients_per_host = clients_per_host
        self.num_cpus = num_cpus
        self.max_restarts = max_restarts
        self.restart_wait_s = restart_wait_s
        self.server: Any = None
        self.hosts: list[Any] = []
        self.home: dict[int, Any] = {}
        self._started_ray = False

    async def start(self, server: ServerSpec, clients: Sequence[ClientSpec]) -> None:
        if not ray.is_initialized():
            ray.init(
                address=self.address,
                num_cpus=self.num_cpus if self.address is None else None,
                include_dashboard=False,
                logging_level=logging.WARNING,
                log_to_driver=False,
            )
            self._started_ray = self.address is None
        self.server = ray.remote(ServerActor).options(num_cpus=0).remote(server)
        per_host = self.clients_per_host or max(
            1,
            math.ceil(
                len(clients) / max(1, int(ray.available_resources().get("CPU", 1)))
            ),
        )
        self.clients_per_host = per_host
        await self._new_hosts(clients)

    async def add_clients(self, specs: Sequence[ClientSpec]) -> None:
        """New clients fill the last host, then new hosts; each joins the server."""
        room = []
        if self.hosts:
            last = self.hosts[-1]
            size = self.clients_per_host or 1
            free = size - sum(h is last for h in self.home.values())
            room = list(specs[: max(0, free)])
            if room:
                joins = await last.add.remote(room)
                self._placed(last, room)
                await self._join(joins)
        await self._new_hosts(specs[len(room) :])

    async def remove_client(self, client: int, reason: str) -> None:
        host = self.home.pop(client)
        notice = await host.leave.remote(client, reason)
        reply = decode(await self.server.handle.remote(notice)).payload
        if not isinstance(reply, Shutdown):
            raise RuntimeError(f"client {client} could not leave: {reply}")
        await self.server.forget.remote(client)

    async def update_client(self, spec: ClientSpec) -> None:
        host = self.home[spec.id]
        await host.add.remote([spec])
        await self.server.place.remote({}, {spec.id: spec.profile})

    def set_unreachable(self, clients: Mapping[int, str]) -> None:
        ray.get(self.server.set_unreachable.remote(dict(clients)))

    async def snapshot(self) -> dict[str, Any]:
        """The server's state between rounds (see `ParameterServer.snapshot`)."""
        snapshot: dict[str, Any] = await self.server.snapshot.remote()
        return snapshot

    async def restore(self, snapshot: Mapping[str, Any]) -> None:
        await self.server.restore.remote(dict(snapshot))

    async def client_states(self) -> dict[int, Any]:
        """What every client keeps between rounds, from its host."""
        states: dict[int, Any] = {}
        found = await asyncio.gather(
            *(h.states.remote() for h in self.hosts), return_exceptions=True
        )
        for hosted in found:
            # A dead host's clients lost their state with it, as in the run.
            if not isinstance(hosted, BaseException):
                states.update(hosted)
        return states

    async def restore_client_states(self, states: Mapping[int, Any]) -> None:
        by_host: dict[Any, dict[int, Any]] = {}
        for cid, state in states.items():
            if cid in self.home:
                by_host.setdefault(self.home[cid], {})[cid] = state
        await asyncio.gather(*(h.restore.remote(s) for h, s in by_host.items()))

    async def run_round(self, round: int) -> RoundOutcome:
        outcome: RoundOutcome = await self.server.run_round.remote(round)
        if self.max_restarts > 0:
            await self._await_restarts()
        return outcome

    async def _await_restarts(self) -> None:
        """Wait for hosts Ray is restarting, so their clients (which rejoin
        from the host's constructor) are back for the next round."""
        deadline = asyncio.get_running_loop().time() + self.restart_wait_s
        for host in self.hosts:
            while True:
                try:
                    await host.pid.remote()
                    break
                except ray.exceptions.ActorUnavailableError:
                    if asyncio.get_running_loop().time() > deadline:
                        break
                    await asyncio.sleep(0.2)
                except ray.exceptions.RayActorError:
                    break  # dead for good: its clients keep failing

    async def close(self) -> None:
        try:
            if self.server is not None:
                await self.server.shutdown.remote()
        finally:
            for actor in [*self.hosts, self.server]:
                if actor is not None:
                    ray.kill(actor)
            self.hosts, self.server, self.home = [], None, {}
            if self._started_ray:
                ray.shutdown()
                self._started_ray = False

    async def _new_hosts(self, specs: Sequence[ClientSpec]) -> None:
        size = self.clients_per_host or 1
        for first in range(0, len(specs), size):
            group = list(specs[first : first + size])
            # A host reserves no CPU: a reservation would leave a host created
            # later (a client joining mid-run) waiting forever for a free CPU.
            # SPREAD still places the hosts over a cluster's nodes.
            host = (
                ray.remote(ClientHost)
                .options(
                    num_cpus=0,
                    scheduling_strategy="SPREAD",
                    max_restarts=self.max_restarts,
                )
                .remote(group, self.server, self.max_restarts > 0)
            )
            self.hosts.append(host)
            self._placed(host, group)
            await self._join([Client(spec).join_request() for spec in group])

    def _placed(self, host: Any, specs: Sequence[ClientSpec]) -> None:
        for spec in specs:
            self.home[spec.id] = host
        ray.get(
            self.server.place.remote(
                {s.id: host for s in specs}, {s.id: s.profile for s in specs}
            )
        )

    async def _join(self, requests: Sequence[bytes]) -> None:
        for request in requests:
            reply = decode(await self.server.handle.remote(request)).payload
            if not isinstance(reply, Welcome):
                raise RuntimeError(f"a client could not join: {reply}")
