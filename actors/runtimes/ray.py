"""The Ray runtime: client actors packed into Ray host actors.

A Ray actor is a process of ≈100–150 MB, so one per client does not scale:
each host actor holds `clients_per_host` logical clients in a `ClientHost`
(`clients_per_host=1` gives every client its own actor). Requests and replies
are the same encoded protocol bytes as in the local runtimes, and every host
trains on one thread (torch's and BLAS's), so a run gives the same results everywhere.

The runtime itself lives where the federation's server side lives: inside
the federation's Ray actor (see `clusterfed.remote`), so every call it makes
is awaited on that actor's event loop; nothing here blocks it.

A host actor that dies (`ray.kill`, a lost node) is a fault the server sees:
its clients' requests fail, their updates are counted as failed, and the run
goes on. With `max_restarts > 0` Ray restarts the host from its constructor
arguments, and its clients send their join requests again (to `federation`,
the actor that serves them). Host actors are named
`clusterfed-host-<run>-<index>` in Ray's namespace of the run, so a fault
study can find and kill one from the driver.
"""

from __future__ import annotations

import asyncio
import math
import os
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import ray

from clusterfed.types import ClientId

from ..client import ClientState
from ..host import ClientHost, WaitingRequests, compute_on_one_thread
from ..spec import ClientSpec
from .base import KEEP_AT_LEAST, KEPT_BYTES


class RayClientHost:
    """A Ray actor hosting several client actors; they train one at a time."""

    def __init__(self, specs: Sequence[ClientSpec], federation: Any) -> None:
        compute_on_one_thread()
        self.host = ClientHost()
        self._waiting = WaitingRequests(self.host)
        self._lock: asyncio.Lock | None = None  # made on the actor's loop
        self.joins = joins = self.host.add(specs)
        # Ray re-runs the constructor when it restarts a dead host: its clients
        # then announce themselves again, as a client back from a crash would.
        if federation is not None and (
            ray.get_runtime_context().was_current_actor_reconstructed
        ):
            for spec, join in zip(specs, joins, strict=True):
                federation.handle.remote(join, spec.id)

    def initial_joins(self) -> list[bytes]:
        """The join requests of the clients it was built with."""
        return self.joins

    def add(self, specs: Sequence[ClientSpec]) -> list[bytes]:
        return self.host.add(specs)

    def update(self, spec: ClientSpec) -> None:
        self.host.update(spec)

    def remove(self, client: int, reason: str) -> bytes:
        return self.host.remove(client, reason)

    async def handle(self, client: int, data: bytes) -> bytes | None:
        if self.host.cohort > 1:
            # Calls that arrive together are served together (cohorts).
            if self._lock is None:
                self._lock = asyncio.Lock()
            return await self._waiting.serve(client, data, self._lock, self._gather)
        return await self.host.handle(client, data)

    async def _gather(self) -> None:
        """Let the calls sent with this one arrive: Ray hands an actor its
        calls one by one, so wait a millisecond at a time (20 at most) while
        more keep coming and the cohort is not full. Who shares a cohort
        changes no result (`cohort.py`), only how much a step batches."""
        before = -1
        for _ in range(20):
            now = self._waiting.waiting
            if now >= self.host.cohort or now == before:
                return
            before = now
            await asyncio.sleep(0.001)

    async def handle_parts(self, client: int, head: bytes, body: bytes) -> bytes | None:
        """`handle(client, head + body)`; Ray resolves a body sent as an
        object reference from its object store."""
        return await self.handle(client, head + body)

    def states(self) -> dict[ClientId, ClientState]:
        return self.host.states()

    def restore(self, states: Mapping[ClientId, ClientState]) -> None:
        self.host.restore(states)

    def clients(self) -> list[int]:
        return sorted(self.host.clients)

    def pid(self) -> int:
        return os.getpid()

    def node(self) -> str:
        """The Ray node this host runs on (where SPREAD placed it)."""
        node: str = ray.get_runtime_context().get_node_id()
        return node


class RayRuntime:
    """Hosts clients in Ray host actors.

    Args:
        address: a running cluster ("auto" or "HOST:PORT"); None starts a
            local Ray for the run and stops it afterwards.
        clients_per_host: logical clients per host actor; default spreads the
            first clients over as many hosts as Ray reports CPUs.
        num_cpus: CPUs of a local Ray (default: all of this machine's).
        max_restarts: how often Ray restarts a dead host (0: never).
        restart_wait_s: after a round, how long to wait for hosts being
            restarted (their clients miss the round they died in, then return).
        gpus_per_host: the GPUs (a fraction: 0.25 packs four hosts on one)
            each host actor asks Ray for; None asks for none (CPU runs).
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
        gpus_per_host: float | None = None,
    ) -> None:
        if clients_per_host is not None and clients_per_host < 1:
            raise ValueError(f"clients_per_host must be >= 1, got {clients_per_host}")
        if gpus_per_host is not None and not 0 < gpus_per_host <= 64:
            raise ValueError(
                f"gpus_per_host must be in (0, 64], got {gpus_per_host}"
                " (0.25: four hosts share a GPU)"
            )
        self.gpus_per_host = gpus_per_host
        self.address = address
        self.clients_per_host = clients_per_host
        self.num_cpus = num_cpus
        self.max_restarts = max_restarts
        self.restart_wait_s = restart_wait_s
        self.run_name = ""  # set at start: unique per run, for the hosts' names
        self.hosts: list[Any] = []
        self.home: dict[int, Any] = {}
        self._federation: Any = None
        # Large request bodies put in Ray's object store once, oldest first:
        # id(body) → (body, reference); holding the body keeps its id unused.
        self._bodies: dict[int, tuple[bytes, Any]] = {}
        self._bodies_bytes = 0

    async def start(self) -> None:
        """Inside a Ray actor: the federation's own handle receives rejoins."""
        self.run_name = uuid.uuid4().hex[:8]
        try:
            self._federation = ray.get_runtime_context().current_actor
        except RuntimeError:  # not in an actor (a test hosting by hand)
            self._federation = None

    async def add(self, specs: Sequence[ClientSpec]) -> list[bytes]:
        """New clients fill the hosts with room, then new hosts."""
        if self.clients_per_host is None:
            # Ray declares no types on available_resources; it returns a dict.
            resources: dict[str, float] = ray.available_resources()  # type: ignore[no-untyped-call]
            cpus = max(1, int(resources.get("CPU", 1)))
            self.clients_per_host = max(1, math.ceil(len(specs) / cpus))
        size = self.clients_per_host
        joins: list[bytes] = []
        rest = list(specs)
        # Hosts with room first, oldest first: a population's clients leave
        # after their round, and the next round's reuse their hosts instead
        # of starting new ones every round.
        load = Counter(id(h) for h in self.home.values())
        for old in self.hosts:
            free = max(0, size - load[id(old)])
            room, rest = rest[:free], rest[free:]
            if room:
                joins += await old.add.remote(room)
                self._placed(old, room)
        for first in range(0, len(rest), size):
            group = rest[first : first + size]
            # A host reserves no CPU: a reservation would leave a host created
            # later (a client joining mid-run) waiting forever for a free CPU.
            # SPREAD still places the hosts over a cluster's nodes.
            host: Any = (
                ray.remote(RayClientHost)
                .options(
                    name=f"clusterfed-host-{self.run_name}-{len(self.hosts)}",
                    num_cpus=0,
                    # A fraction lets several hosts share one GPU (Ray then
                    # shows each host its GPU as cuda:0).
                    num_gpus=self.gpus_per_host or 0,
                    scheduling_strategy="SPREAD",
                    max_restarts=self.max_restarts,
                )
                .remote(group, self._federation if self.max_restarts > 0 else None)
            )
            self.hosts.append(host)
            self._placed(host, group)
            joins += await host.initial_joins.remote()
        return joins

    async def update(self, spec: ClientSpec) -> None:
        await self.home[spec.id].update.remote(spec)

    async def remove(self, client: int, reason: str) -> bytes:
        notice: bytes = await self.home.pop(client).remove.remote(client, reason)
        return notice

    @property
    def parallelism(self) -> int | None:
        """Not known here: Ray places the hosts over the cluster's CPUs (a
        host reserves none) and several may share one."""
        return None

    async def request(self, client: int, head: bytes, body: bytes) -> bytes | None:
        """The client's reply to `head + body`; a large body (a model many
        clients get) goes into Ray's object store once, and each host reads
        it from there (once per node) instead of with every call."""
        host = self.home.get(client)
        if host is None:
            raise LookupError(f"no client {client} in this runtime")
        reply: bytes | None
        if KEEP_AT_LEAST <= len(body) <= KEPT_BYTES:
            reply = await host.handle_parts.remote(client, head, self._stored(body))
        else:
            reply = await host.handle.remote(client, head + body)
        return reply

    def _stored(self, body: bytes) -> Any:
        """The object reference of `body`, put in the store the first time;
        the oldest references are dropped past `KEPT_BYTES` (Ray frees an
        object once no call in flight still needs it)."""
        found = self._bodies.get(id(body))
        if found is not None:
            return found[1]
        while self._bodies and self._bodies_bytes + len(body) > KEPT_BYTES:
            dropped, _ = self._bodies.pop(next(iter(self._bodies)))
            self._bodies_bytes -= len(dropped)
        reference = ray.put(body)
        self._bodies[id(body)] = (body, reference)
        self._bodies_bytes += len(body)
        return reference

    async def states(self) -> dict[ClientId, ClientState]:
        """What every client keeps between rounds, from its host."""
        states: dict[ClientId, ClientState] = {}
        found = await asyncio.gather(
            *(h.states.remote() for h in self.hosts), return_exceptions=True
        )
        for hosted in found:
            # A dead host's clients lost their state with it, as in the run.
            if not isinstance(hosted, BaseException):
                states.update(hosted)
        return states

    async def restore(self, states: Mapping[ClientId, ClientState]) -> None:
        by_host: dict[Any, dict[ClientId, ClientState]] = {}
        for cid, state in states.items():
            if cid in self.home:
                by_host.setdefault(self.home[cid], {})[cid] = state
        await asyncio.gather(*(h.restore.remote(s) for h, s in by_host.items()))

    async def settle(self) -> None:
        """Wait for hosts Ray is restarting, so their clients (which rejoin
        from the host's constructor) are back for the next round."""
        if self.max_restarts <= 0:
            return
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
        for host in self.hosts:
            ray.kill(host)
        self.hosts, self.home = [], {}

    def _placed(self, host: Any, specs: Sequence[ClientSpec]) -> None:
        for spec in specs:
            self.home[spec.id] = host
