"""Client actors hosted in worker processes of the local runtime.

Each worker is a forked process that hosts a fixed share of the clients. A
client stays on the worker it was first given, so whatever it keeps between
rounds (a privacy accountant, say) stays with it; a new client goes to the
worker with the fewest training samples, which balances the rounds. Training
and the client half of the codec run on all cores. Requests are pipelined: a
worker finds its next request waiting as soon as it replies. Between the event
loop and a worker, frames carry the encoded protocol message unchanged:

    header: kind (1 byte), client id (8), body length (8), little-endian
    register: body = the client's spec as JSON    (no reply)
    deliver:  body = an encoded request           → reply: the encoded reply,
                                                    or no-reply (empty body)
    state:    empty body                          → reply: the client's state
    restore:  body = a state                      → reply: empty
    error:    body = a text, from a worker that could not serve a frame

Every deliver is answered by exactly one frame, in order, so a faulty client
that does not answer (`faults.py`) still gets a no-reply frame: the worker goes
on serving the requests behind it, and only the hung client's request waits
(until the server's task timeout). A client's state (its privacy accountant,
a faulty client's memory) travels pickled: it is this process's own data on
its way to its own forked worker, never a message from a peer.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import pickle
import socket
import struct
from collections import deque
from collections.abc import Mapping, Sequence
from multiprocessing.process import BaseProcess
from typing import Any

import torch

from clusterfed.types import ClientId

from . import work
from .client import Client
from .faults import load_spec
from .spec import ClientSpec

_HEADER = struct.Struct("<BQQ")
_BUFFER = 8 * 1024 * 1024
REGISTER, DELIVER, REPLY, ERROR, STOP, NO_REPLY, STATE, RESTORE = range(1, 9)


class WorkerDied(ConnectionError):
    """A worker process ended while serving a request."""


class _Worker:
    def __init__(self, index: int) -> None:
        self.index = index
        ours, theirs = socket.socketpair()
        for end in (ours, theirs):
            # A whole model in one send: fewer system calls and wake-ups.
            end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _BUFFER)
            end.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _BUFFER)
        context = multiprocessing.get_context("fork")
        self.process: BaseProcess = context.Process(
            target=_serve,
            args=(theirs,),
            name=f"clusterfed-worker-{index}",
            daemon=True,
        )
        self.process.start()
        theirs.close()
        self._socket = ours
        self.known: dict[int, ClientSpec] = {}
        self.writer: asyncio.StreamWriter | None = None
        # Requests are pipelined: the worker answers frames in order, so each
        # reply resolves the oldest waiting future; the next request is already
        # in the worker's socket while it trains.
        self._waiting: deque[asyncio.Future[bytes | None]] = deque()
        self._reading: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        reader, self.writer = await asyncio.open_connection(sock=self._socket)
        self._reading = asyncio.create_task(self._read_replies(reader))

    async def call(self, spec: ClientSpec, data: bytes) -> bytes | None:
        """The client's reply to `data`; None if it does not answer."""
        return await self._ask(spec, DELIVER, data)

    async def state(self, spec: ClientSpec) -> Any:
        reply = await self._ask(spec, STATE, b"")
        return pickle.loads(reply) if reply else None

    async def restore(self, spec: ClientSpec, state: Any) -> None:
        await self._ask(spec, RESTORE, pickle.dumps(state))

    async def _ask(self, spec: ClientSpec, kind: int, data: bytes) -> bytes | None:
        reply: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()
        await self._send(spec, kind, data, reply)
        return await reply

    async def _send(
        self, spec: ClientSpec, kind: int, data: bytes, reply: asyncio.Future[Any]
    ) -> None:
        assert self.writer is not None
        if self._reading is None or self._reading.done():
            raise WorkerDied(f"worker process {self.index} died")
        if self.known.get(spec.id) is not spec:
            body = spec.model_dump_json().encode()
            self.writer.write(_HEADER.pack(REGISTER, spec.id, len(body)) + body)
            self.known[spec.id] = spec
        self.writer.writelines([_HEADER.pack(kind, spec.id, len(data)), data])
        self._waiting.append(reply)
        try:
            await self.writer.drain()
        except ConnectionError as exc:
            raise WorkerDied(f"worker process {self.index} died") from exc

    async def _read_replies(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                header = await reader.readexactly(_HEADER.size)
                kind, _, size = _HEADER.unpack(header)
                body = await reader.readexactly(size)
                reply = self._waiting.popleft()
                if reply.cancelled():  # the server stopped waiting (a timeout)
                    continue
                if kind == ERROR:
                    text = body.decode(errors="replace")
                    reply.set_exception(RuntimeError(f"worker {self.index}: {text}"))
                else:
                    reply.set_result(None if kind == NO_REPLY else body)
        except (ConnectionError, asyncio.IncompleteReadError):
            while self._waiting:
                self._waiting.popleft().set_exception(
                    WorkerDied(f"worker process {self.index} died")
                )

    async def stop(self) -> None:
        if self.writer is not None:
            try:
                self.writer.write(_HEADER.pack(STOP, 0, 0))
                await self.writer.drain()
                self.writer.close()
            except ConnectionError:
                pass
        await asyncio.to_thread(self.process.join, 5)
        if self.process.is_alive():
            self.process.kill()
        if self._reading is not None:
            self._reading.cancel()
            await asyncio.gather(self._reading, return_exceptions=True)


class ProcessHosts:
    """A pool of worker processes that serve client requests (a `Transport`)."""

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.n_workers = workers
        self.specs: dict[ClientId, ClientSpec] = {}
        self.home: dict[ClientId, int] = {}
        self._load = [0] * workers
        self._workers: dict[int, _Worker] = {}

    async def start(self) -> None:
        for index in range(self.n_workers):
            await self._spawn(index)

    def add(self, specs: Sequence[ClientSpec]) -> None:
        """Host clients (or replace their specs); larger clients are placed first."""
        for spec in sorted(specs, key=lambda s: (-len(s.train), s.id)):
            client = ClientId(spec.id)
            self.specs[client] = spec
            if client not in self.home:
                worker = min(range(self.n_workers), key=lambda w: (self._load[w], w))
                self.home[client] = worker
                self._load[worker] += len(spec.train)

    async def request(self, client: ClientId, data: bytes) -> bytes | None:
        """The client's reply; None if it does not answer."""
        spec = self.specs.get(client)
        if spec is None:
            raise LookupError(f"no client {client} in this runtime")
        worker = self._workers[self.home[client]]
        try:
            return await worker.call(spec, data)
        except WorkerDied:
            # Replace it (once); this request failed, and the clients it hosted
            # start afresh (their specs are sent again on first use).
            if self._workers.get(worker.index) is worker:
                await self._spawn(worker.index)
            raise

    async def states(self, clients: Sequence[ClientId]) -> dict[ClientId, Any]:
        """What each client keeps between rounds (see `Client.state`)."""
        hosted = [c for c in clients if c in self.specs]
        found = await asyncio.gather(
            *(self._workers[self.home[c]].state(self.specs[c]) for c in hosted),
            return_exceptions=True,
        )
        states: dict[ClientId, Any] = {}
        for client, state in zip(hosted, found, strict=True):
            if isinstance(state, WorkerDied):
                continue  # its state died with its worker, as in the run
            if isinstance(state, BaseException):
                raise state
            if state is not None:
                states[client] = state
        return states

    async def restore(self, states: Mapping[ClientId, Any]) -> None:
        """Give each client its state back (sent before any request to it)."""
        for client, state in states.items():
            await self._workers[self.home[client]].restore(self.specs[client], state)

    async def close(self) -> None:
        workers, self._workers = list(self._workers.values()), {}
        await asyncio.gather(*(w.stop() for w in workers))

    async def _spawn(self, index: int) -> None:
        worker = _Worker(index)
        await worker.connect()
        self._workers[index] = worker


def _serve(sock: socket.socket) -> None:
    """A worker's loop: build clients from specs, answer their requests."""
    torch.set_num_threads(1)
    work.init_worker()
    loop = asyncio.new_event_loop()
    clients: dict[int, Client] = {}
    with sock:
        while True:
            header = _read_exactly(sock, _HEADER.size)
            if header is None:
                return
            kind, client_id, size = _HEADER.unpack(header)
            body = _read_exactly(sock, size) if size else b""
            if body is None or kind == STOP:
                return
            if kind == REGISTER:
                spec = load_spec(body)
                known = clients.get(client_id)
                if known is None:
                    clients[client_id] = Client(spec)
                else:
                    known.update(spec)  # it keeps its memory
                continue
            client = clients.get(client_id)
            if kind in (STATE, RESTORE) and client is not None:
                try:
                    if kind == RESTORE:
                        client.restore(pickle.loads(body))
                        answer = b""
                    else:
                        answer = pickle.dumps(client.state())
                except Exception as exc:
                    text = f"{type(exc).__name__}: {exc}".encode()
                    sock.sendall(_HEADER.pack(ERROR, client_id, len(text)) + text)
                    continue
                sock.sendall(_HEADER.pack(REPLY, client_id, len(answer)) + answer)
                continue
            if kind != DELIVER or client is None:
                message = (
                    f"frame kind {kind} for client {client_id} not understood".encode()
                )
                sock.sendall(_HEADER.pack(ERROR, client_id, len(message)) + message)
                continue
            reply = loop.run_until_complete(client.handle(body))
            if reply is None:  # a faulty client that does not answer
                sock.sendall(_HEADER.pack(NO_REPLY, client_id, 0))
            else:
                sock.sendall(_HEADER.pack(REPLY, client_id, len(reply)) + reply)


def _read_exactly(sock: socket.socket, size: int) -> bytes | None:
    buffer = bytearray(size)
    view = memoryview(buffer)
    while view:
        received = sock.recv_into(view)
        if received == 0:
            return None
        view = view[received:]
    return bytes(buffer)
