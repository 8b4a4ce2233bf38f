"""Client actors hosted in worker processes of the local runtime.

Each worker is a forked process that serves the protocol bytes of any client
(it builds the client from its spec the first time it sees it), so training
and the client half of the codec run on all cores. Between the event loop and
a worker, frames carry the encoded protocol message unchanged:

    header: kind (1 byte), client id (8), body length (8), little-endian
    register: body = the client's spec as JSON    (no reply)
    deliver:  body = an encoded request           → reply: the encoded reply
    error:    body = a text, from a worker that could not serve a frame
"""

from __future__ import annotations

import asyncio
import multiprocessing
import socket
import struct
from collections.abc import Sequence
from multiprocessing.process import BaseProcess

import torch

from clusterfed.types import ClientId

from . import work
from .client import Client
from .spec import ClientSpec

_HEADER = struct.Struct("<BQQ")
REGISTER, DELIVER, REPLY, ERROR, STOP = 1, 2, 3, 4, 5


class WorkerDied(ConnectionError):
    """A worker process ended while serving a request."""


class _Worker:
    def __init__(self, index: int) -> None:
        self.index = index
        ours, theirs = socket.socketpair()
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
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def connect(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(sock=self._socket)

    async def call(self, spec: ClientSpec, data: bytes) -> bytes:
        assert self.reader is not None and self.writer is not None
        if self.known.get(spec.id) is not spec:
            body = spec.model_dump_json().encode()
            self.writer.write(_HEADER.pack(REGISTER, spec.id, len(body)) + body)
            self.known[spec.id] = spec
        self.writer.write(_HEADER.pack(DELIVER, spec.id, len(data)))
        self.writer.write(data)
        try:
            await self.writer.drain()
            kind, _, size = _HEADER.unpack(await self.reader.readexactly(_HEADER.size))
            body = await self.reader.readexactly(size)
        except (ConnectionError, asyncio.IncompleteReadError) as exc:
            raise WorkerDied(f"worker process {self.index} died") from exc
        if kind == ERROR:
            raise RuntimeError(f"worker {self.index}: {body.decode(errors='replace')}")
        return body

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


class ProcessHosts:
    """A pool of worker processes that serve client requests (a `Transport`)."""

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.n_workers = workers
        self.specs: dict[ClientId, ClientSpec] = {}
        self._workers: list[_Worker] = []
        self._idle: asyncio.Queue[_Worker] = asyncio.Queue()

    async def start(self) -> None:
        for index in range(self.n_workers):
            await self._spawn(index)

    def add(self, specs: Sequence[ClientSpec]) -> None:
        for spec in specs:
            self.specs[ClientId(spec.id)] = spec

    async def request(self, client: ClientId, data: bytes) -> bytes:
        spec = self.specs.get(client)
        if spec is None:
            raise LookupError(f"no client {client} in this runtime")
        worker = await self._idle.get()
        try:
            reply = await worker.call(spec, data)
        except WorkerDied:
            await self._spawn(worker.index)  # replace it; this request failed
            raise
        except BaseException:
            self._idle.put_nowait(worker)
            raise
        self._idle.put_nowait(worker)
        return reply

    async def close(self) -> None:
        workers, self._workers = self._workers, []
        await asyncio.gather(*(w.stop() for w in workers))

    async def _spawn(self, index: int) -> None:
        worker = _Worker(index)
        await worker.connect()
        self._workers = [w for w in self._workers if w.index != index] + [worker]
        self._idle.put_nowait(worker)


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
                clients[client_id] = Client(ClientSpec.model_validate_json(body))
                continue
            client = clients.get(client_id)
            if kind != DELIVER or client is None:
                message = (
                    f"frame kind {kind} for client {client_id} not understood".encode()
                )
                sock.sendall(_HEADER.pack(ERROR, client_id, len(message)) + message)
                continue
            reply = loop.run_until_complete(client.handle(body))
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
