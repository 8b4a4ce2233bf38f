"""The processes runtime (the local default): client actors in forked workers.

Each worker (`worker.py`) is a forked process that computes on one thread
(torch's and BLAS's) with one `ClientHost`, hosting a fixed share of the
clients. A client stays on the worker it was first given, so whatever it keeps
between rounds (a privacy accountant, say) stays with it; a new client goes to
the worker with the fewest training samples, which balances the rounds.
Training and the client half of the codec run on all cores. Requests are
pipelined: a worker finds its next request waiting as soon as it replies.
Between the event loop and a worker, frames (`frames.py`) carry the encoded
protocol message unchanged, though a large request body (a model that many
clients get) crosses to a worker once and is cited by its key after. A hung
client's request waits (the server's task timeout), not those behind it.

A worker that stalls (half a frame, then silence) or dies is replaced, so it
costs its clients one round, not the run. A request the server stops waiting
for (its task timeout) means the worker owes a reply it did not give: it is
killed, and what waited on it fails at once. A dead or killed worker is
replaced between rounds (`settle`), or when one of its clients is next
asked; its clients are registered on the new worker from their specs and
given back what they kept (`Client.state`: a privacy accountant, a faulty
client's memory), fetched with each of their replies, as a checkpoint's
`restore` gives it back.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import multiprocessing
import os
import pickle
import socket
from collections import deque
from collections.abc import Mapping, Sequence
from multiprocessing.process import BaseProcess
from typing import Any, Literal

from clusterfed.types import ClientId

from ..client import ClientState, keeps_state
from ..spec import ClientSpec
from . import frames
from .base import KEEP_AT_LEAST, KEPT_BYTES
from .frames import HEADER, KEY, FrameReader
from .worker import serve

_BUFFER = 8 * 1024 * 1024

StartMethod = Literal["fork", "spawn"]


class WorkerDied(ConnectionError):
    """A worker process ended while serving a request."""


class _Worker:
    def __init__(self, index: int, start_method: StartMethod = "fork") -> None:
        self.index = index
        ours, theirs = socket.socketpair()
        for end in (ours, theirs):
            # A whole model in one send: fewer system calls and wake-ups.
            end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _BUFFER)
            end.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _BUFFER)
        # Spawn for CUDA runs (see `compute.start_method`): no CUDA state
        # crosses a fork; the sockets travel to the new interpreter.
        context = (
            multiprocessing.get_context("spawn")
            if start_method == "spawn"
            else multiprocessing.get_context("fork")
        )
        self.process: BaseProcess = context.Process(
            target=serve,
            args=(theirs, ours, os.getpid()),
            name=f"clusterfed-worker-{index}",
            daemon=True,
        )
        self.process.start()
        theirs.close()
        self._socket = ours
        self.known: dict[int, ClientSpec] = {}
        self.writer: asyncio.WriteTransport | None = None
        # Requests are pipelined: the worker answers frames in order, so each
        # reply resolves the oldest waiting future; the next request is already
        # in the worker's socket while it trains.
        self._waiting: deque[asyncio.Future[bytes | None]] = deque()
        self._frames: FrameReader | None = None
        # Request bodies the worker keeps, oldest first: id(body) → (key,
        # body). Holding the body keeps its id from being reused.
        self.kept: dict[int, tuple[int, bytes]] = {}
        self.kept_bytes = 0
        self.next_key = 0
        # What each client that keeps state kept after its last reply.
        self.states: dict[ClientId, ClientState | None] = {}
        self.killed = False

    @property
    def lost(self) -> bool:
        """Killed, or its process ended (its socket closed)."""
        return self.killed or (self._frames is not None and self._frames.closed)

    def kill(self) -> None:
        """End the process at once; every request waiting on it fails
        (`WorkerDied`) as soon as the loss is read."""
        self.killed = True
        if self.process.is_alive():
            self.process.kill()
        if self.writer is not None:
            self.writer.abort()  # a stalled peer reads nothing: drop what is queued

    async def connect(self) -> None:
        frames = FrameReader(self._reply, self._lost)
        self.writer, self._frames = await asyncio.get_running_loop().create_connection(
            lambda: frames, sock=self._socket
        )

    async def call_parts(
        self, spec: ClientSpec, head: bytes, body: bytes
    ) -> bytes | None:
        """The client's reply to `head + body` (None if it does not answer),
        the body sent only if the worker does not keep it already. A client
        that keeps state is asked for it in the same breath (the worker
        answers both in one go), kept in `states` for a replacement."""
        loop = asyncio.get_running_loop()
        reply: asyncio.Future[bytes | None] = loop.create_future()
        state: asyncio.Future[bytes | None] = loop.create_future()
        try:
            if len(body) < KEEP_AT_LEAST or len(body) > KEPT_BYTES:
                await self._send(spec, frames.DELIVER, (head, body), reply)
            else:
                key = KEY.pack(self._keep(body))
                await self._send(spec, frames.CITE, (key, head), reply)
            if keeps_state(spec):
                await self._send(spec, frames.STATE, (), state)
            answer = await reply
            if keeps_state(spec):
                kept = await state
                self.states[ClientId(spec.id)] = _state(kept)
        finally:
            _abandon(reply)
            _abandon(state)
        return answer

    def _keep(self, body: bytes) -> int:
        """The worker's key for `body`; queues the frames that make it keep
        the body (and forget the oldest it keeps, to stay in budget)."""
        assert self.writer is not None
        found = self.kept.get(id(body))
        if found is not None:
            return found[0]
        while self.kept_bytes + len(body) > KEPT_BYTES:
            oldest = next(iter(self.kept))
            key, dropped = self.kept.pop(oldest)
            self.kept_bytes -= len(dropped)
            self.writer.write(HEADER.pack(frames.FORGET, key, 0))
        key, self.next_key = self.next_key, self.next_key + 1
        self.kept[id(body)] = (key, body)
        self.kept_bytes += len(body)
        self.writer.writelines([HEADER.pack(frames.KEEP, key, len(body)), body])
        return key

    async def join(self, spec: ClientSpec) -> bytes:
        self.known[spec.id] = spec
        reply = await self._ask(spec, frames.JOIN, spec.model_dump_json().encode())
        assert reply is not None
        return reply

    async def leave(self, spec: ClientSpec, reason: str) -> bytes:
        reply = await self._ask(spec, frames.LEAVE, reason.encode())
        self.known.pop(spec.id, None)
        self.states.pop(ClientId(spec.id), None)
        assert reply is not None
        return reply

    async def state(self, spec: ClientSpec) -> ClientState | None:
        return _state(await self._ask(spec, frames.STATE, b""))

    async def restore(self, spec: ClientSpec, state: ClientState | None) -> None:
        await self._ask(spec, frames.RESTORE, pickle.dumps(state))
        self.states[ClientId(spec.id)] = state

    async def _ask(self, spec: ClientSpec, kind: int, *data: bytes) -> bytes | None:
        """Send one frame, its body the parts `data`; its reply."""
        reply: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()
        try:
            await self._send(spec, kind, data, reply)
            return await reply
        finally:
            _abandon(reply)

    async def _send(
        self,
        spec: ClientSpec,
        kind: int,
        data: Sequence[bytes],
        reply: asyncio.Future[Any],
    ) -> None:
        assert self.writer is not None and self._frames is not None
        if self._frames.closed:
            raise WorkerDied(f"worker process {self.index} died")
        if self.known.get(spec.id) is not spec:
            body = spec.model_dump_json().encode()
            self.writer.write(HEADER.pack(frames.REGISTER, spec.id, len(body)) + body)
            self.known[spec.id] = spec
        size = sum(len(part) for part in data)
        self.writer.writelines([HEADER.pack(kind, spec.id, size), *data])
        self._waiting.append(reply)
        try:
            await self._frames.drain()
        except ConnectionError as exc:
            raise WorkerDied(f"worker process {self.index} died") from exc

    def _reply(self, kind: int, body: bytearray) -> None:
        reply = self._waiting.popleft()
        if reply.cancelled():  # the server stopped waiting (a timeout)
            return
        if kind == frames.ERROR:
            text = body.decode(errors="replace")
            reply.set_exception(RuntimeError(f"worker {self.index}: {text}"))
        else:
            # A bytearray where bytes are promised: it is this reply's own
            # buffer, read once, and the codec takes either.
            reply.set_result(None if kind == frames.NO_REPLY else body)  # type: ignore[arg-type]

    def _lost(self) -> None:
        while self._waiting:
            reply = self._waiting.popleft()
            if not reply.cancelled():
                reply.set_exception(WorkerDied(f"worker process {self.index} died"))

    async def stop(self) -> None:
        if self.writer is not None and self._frames is not None and not self.killed:
            try:
                self.writer.write(HEADER.pack(frames.STOP, 0, 0))
                await self._frames.drain()
            except ConnectionError:
                pass
            self.writer.close()
        await asyncio.to_thread(self.process.join, 5)
        if self.process.is_alive():
            self.process.kill()


class ProcessRuntime:
    """Hosts clients in `workers` worker processes (a `Runtime`), forked by
    default, spawned with `start_method="spawn"` (CUDA runs)."""

    name = "local"

    def __init__(self, workers: int, start_method: StartMethod = "fork") -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.n_workers = workers
        self.start_method: StartMethod = start_method
        self.specs: dict[ClientId, ClientSpec] = {}
        self.home: dict[ClientId, int] = {}
        self._load = [0] * workers
        self._workers: dict[int, _Worker] = {}
        self._replacing = asyncio.Lock()

    @property
    def parallelism(self) -> int:
        """Hosts that compute at once: the workers."""
        return self.n_workers

    async def start(self) -> None:
        # A worker's first optimizer step would import torch._dynamo (about
        # 145 MiB of modules) into each worker on its own; imported before
        # the fork, the workers share this process's copy.
        importlib.import_module("torch._dynamo")
        for index in range(self.n_workers):
            await self._spawn(index)

    async def add(self, specs: Sequence[ClientSpec]) -> list[bytes]:
        """Host new clients, larger ones placed first on the least loaded
        worker; returns their join requests in the order of `specs`."""
        for spec in sorted(specs, key=lambda s: (-len(s.train), s.id)):
            client = ClientId(spec.id)
            if client in self.home:
                raise ValueError(f"client {spec.id} is already hosted")
            worker = min(range(self.n_workers), key=lambda w: (self._load[w], w))
            self.home[client] = worker
            self._load[worker] += len(spec.train)
            self.specs[client] = spec
        return [await (await self._worker_of(s.id)).join(s) for s in specs]

    async def update(self, spec: ClientSpec) -> None:
        """A new spec; it reaches the worker with the client's next request."""
        client = ClientId(spec.id)
        if client not in self.specs:
            raise LookupError(f"no client {spec.id} in this runtime")
        self.specs[client] = spec

    async def remove(self, client: int, reason: str) -> bytes:
        worker = await self._worker_of(client)
        spec = self.specs.pop(ClientId(client))
        self.home.pop(ClientId(client))
        return await worker.leave(spec, reason)

    async def request(self, client: int, head: bytes, body: bytes) -> bytes | None:
        """The client's reply to `head + body`, None if it does not answer;
        a large body crosses to each worker once while the worker keeps it
        (`KEPT_BYTES`)."""
        spec = self.specs.get(ClientId(client))
        if spec is None:
            raise LookupError(f"no client {client} in this runtime")
        worker = await self._worker_of(client)
        try:
            return await worker.call_parts(spec, head, body)
        except WorkerDied:
            await self._replace(worker)  # this request failed; the next will not
            raise
        except asyncio.CancelledError:
            # The server stopped waiting (its task timeout): a worker that
            # owes a reply that long has stalled, and every later request to
            # its clients would wait behind it. Replaced before the next.
            worker.kill()
            raise

    async def states(self) -> dict[ClientId, ClientState]:
        """What each client keeps between rounds (see `Client.state`)."""
        hosted = sorted(self.specs)
        workers = [self._workers[self.home[c]] for c in hosted]
        found = await asyncio.gather(
            *(w.state(self.specs[c]) for w, c in zip(workers, hosted, strict=True)),
            return_exceptions=True,
        )
        states: dict[ClientId, ClientState] = {}
        for client, worker, state in zip(hosted, workers, found, strict=True):
            if isinstance(state, WorkerDied):
                # Lost before it could be replaced: the state it sent with
                # its last reply is what a replacement would be given back.
                state = worker.states.get(client)
            if isinstance(state, BaseException):
                raise state
            if state is not None:
                states[client] = state
        return states

    async def restore(self, states: Mapping[ClientId, ClientState]) -> None:
        """Give each client its state back (sent before any request to it)."""
        for client, state in states.items():
            cid = ClientId(client)
            if cid in self.specs:
                await (await self._worker_of(cid)).restore(self.specs[cid], state)

    async def settle(self) -> None:
        """Between rounds: replace every worker that stalled or died, so its
        clients are back, with what they kept, for the next round."""
        for worker in list(self._workers.values()):
            if worker.lost:
                # One lost again while it was given its clients back is
                # replaced when one of them is next asked.
                with contextlib.suppress(WorkerDied):
                    await self._replace(worker)

    async def close(self) -> None:
        workers, self._workers = list(self._workers.values()), {}
        await asyncio.gather(*(w.stop() for w in workers))

    async def _spawn(self, index: int) -> _Worker:
        worker = _Worker(index, self.start_method)
        await worker.connect()
        self._workers[index] = worker
        return worker

    async def _worker_of(self, client: int) -> _Worker:
        """The worker hosting `client`, replaced first if it was lost."""
        worker = self._workers[self.home[ClientId(client)]]
        if worker.lost:
            worker = await self._replace(worker)
        return worker

    async def _replace(self, worker: _Worker) -> _Worker:
        """A new worker in `worker`'s place (once, however many callers find
        it lost); its clients are registered there on first use, and those
        that keep state get back what they kept after their last reply."""
        async with self._replacing:
            current = self._workers.get(worker.index)
            if current is not worker:
                if current is None:  # closed meanwhile
                    raise WorkerDied(f"worker process {worker.index} died")
                return current
            worker.kill()
            await asyncio.to_thread(worker.process.join, 5)
            new = await self._spawn(worker.index)
            for client, state in worker.states.items():
                if self.home.get(client) == worker.index:
                    await new.restore(self.specs[client], state)
            return new


def _state(pickled: bytes | None) -> ClientState | None:
    """A client's state as its worker pickled it (`Client.state`)."""
    state: ClientState | None = pickle.loads(pickled) if pickled else None
    return state


def _abandon(future: asyncio.Future[Any]) -> None:
    """Nobody waits for `future` any longer: a reply still to come is
    dropped when it arrives, and a failure already in is not reported."""
    if not future.done():
        future.cancel()
    elif not future.cancelled():
        future.exception()
