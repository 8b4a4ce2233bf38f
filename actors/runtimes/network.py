"""The network runtime: some clients are processes that connect over TCP.

`NetworkRuntime` listens (asyncio streams) for the external clients of a
scenario, `external` ids, and hosts every other client in an inner runtime
(the local default). Above it nothing changes: the server's courier sends
each request through `request`, times it out after the scenario's
`task_timeout_s`, and the simulated clock times every task, external or
not, from what its reply reports, so deadlines, stragglers and faults apply
to all alike.

A connection authenticates as one external client (`net_handshake.py`), and
every reply that comes back on it is that client's: identity is the
connection's, never a message field's. A connection carries one request at a
time in each direction, answered in order. A client that is not connected
fails its task at once; one whose connection closes fails the task it was
asked, and may reconnect and go on with the next. A reply the courier stops
waiting for (its timeout) leaves the connection out of step, so it is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence

from clusterfed.protocol import (
    Envelope,
    LeaveNotice,
    ProtocolError,
    decode,
    encode,
    one_line,
)
from clusterfed.protocol.transport import Leave, Update, encode_control
from clusterfed.types import ClientId

from ..client import ClientState, client_address
from ..spec import ClientSpec
from .base import Runtime
from .net_handshake import Admitted, Refusal, accepted, admit
from .net_io import FRAME_TIMEOUT_S, HANDSHAKE_TIMEOUT_S, read_frame, write_frame

log = logging.getLogger(__name__)

JOIN_TIMEOUT_S = 300.0
"""How long the run waits for an external client's first connection."""


class ClientDisconnected(ConnectionError):
    """An external client is not connected, or its connection closed."""


class _Connection:
    """One authenticated client's stream: requests out, replies in, in order."""

    def __init__(
        self,
        admitted: Admitted,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        frame_timeout_s: float,
    ) -> None:
        self.client = admitted.client
        self.want = admitted.want
        self._reader, self._writer = reader, writer
        self._frame_timeout_s = frame_timeout_s
        self._waiting: deque[asyncio.Future[bytes]] = deque()
        self.closed = asyncio.Event()
        self._task = asyncio.create_task(self._read())

    async def ask(self, *parts: bytes) -> bytes:
        """Send one frame; the frame the client answers it with."""
        if self.closed.is_set():
            raise ClientDisconnected(f"client {self.client} is not connected")
        reply: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._waiting.append(reply)
        try:
            await write_frame(self._writer, *parts)
            return await reply
        except asyncio.CancelledError:
            # The courier gave up (its task timeout): a reply still owed
            # would answer the next request. The client may reconnect.
            self.close(f"client {self.client} did not answer in time")
            raise
        except ConnectionError as exc:
            self.close(str(exc))
            raise ClientDisconnected(f"client {self.client} disconnected") from exc

    async def tell(self, body: bytes) -> None:
        """Send one frame that wants no answer (a control message)."""
        try:
            await write_frame(self._writer, body)
        except ConnectionError as exc:
            self.close(str(exc))

    async def _read(self) -> None:
        reason = "closed its connection"
        try:
            while True:
                body = await read_frame(
                    self._reader, body_timeout=self._frame_timeout_s
                )
                if body is None:
                    break
                if not self._waiting:
                    reason = "sent a frame no request asked for"
                    break
                reply = self._waiting.popleft()
                if not reply.done():
                    reply.set_result(body)
        except (ProtocolError, ConnectionError) as exc:
            reason = one_line(str(exc))
        self.close(reason)

    def close(self, reason: str) -> None:
        """Close the stream; every request waiting on it fails."""
        if self.closed.is_set():
            return
        log.info("client %s: connection closed: %s", self.client, reason)
        self.closed.set()
        self._writer.close()
        while self._waiting:
            reply = self._waiting.popleft()
            if not reply.done():
                reply.set_exception(
                    ClientDisconnected(f"client {self.client} disconnected: {reason}")
                )
        if self._task is not asyncio.current_task():
            self._task.cancel()


class NetworkRuntime:
    """Hosts `external` clients over TCP and the rest in `inner` (a `Runtime`).

    Args:
        inner: hosts the simulated clients (the local runtime by default).
        external: the ids played by connected processes.
        tokens: each external client's token (`transport.mac`).
        host, port: where to listen; port 0 picks a free one (`address`).
        on_listen: called with (host, port) once listening.
        join_timeout_s: how long the run waits for an external client to
            connect the first time.
        frame_timeout_s: how long a frame's body may take after its header.
        handshake_timeout_s: how long each handshake step may take.
    """

    name = "network"

    def __init__(
        self,
        inner: Runtime,
        external: Collection[int],
        tokens: Mapping[int, str],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        on_listen: Callable[[str, int], None] | None = None,
        join_timeout_s: float = JOIN_TIMEOUT_S,
        frame_timeout_s: float = FRAME_TIMEOUT_S,
        handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S,
    ) -> None:
        missing = sorted(set(external) - set(tokens))
        if missing:
            raise ValueError(f"no token for external clients {missing}")
        self.inner = inner
        self.external = frozenset(int(c) for c in external)
        self.tokens = dict(tokens)
        self.host, self.port = host, port
        self.on_listen = on_listen
        self.join_timeout_s = join_timeout_s
        self.frame_timeout_s = frame_timeout_s
        self.handshake_timeout_s = handshake_timeout_s
        self.specs: dict[int, ClientSpec] = {}
        self.connections: dict[int, _Connection] = {}
        self.refusals: list[str] = []
        """Why each refused connection was refused, in order."""
        self._joins: dict[int, asyncio.Future[bytes]] = {}
        self._added: dict[int, asyncio.Future[None]] = {}
        self._left: set[int] = set()
        self._server: asyncio.Server | None = None
        self._handshakes: set[asyncio.Task[None]] = set()

    @property
    def parallelism(self) -> int | None:
        inner = self.inner.parallelism
        return None if inner is None else inner + len(self.external)

    @property
    def address(self) -> tuple[str, int]:
        """Where it listens (the port picked, for port 0)."""
        if self._server is None:
            raise RuntimeError("the network runtime is not started")
        host, port = self._server.sockets[0].getsockname()[:2]
        return str(host), int(port)

    async def start(self) -> None:
        await self.inner.start()
        self._server = await asyncio.start_server(self._accept, self.host, self.port)
        if self.on_listen is not None:
            self.on_listen(*self.address)

    async def add(self, specs: Sequence[ClientSpec]) -> list[bytes]:
        """Host the simulated clients in the inner runtime; for each external
        one, wait for its first connection and return its join request."""
        inner = [s for s in specs if s.id not in self.external]
        joins = dict(
            zip((s.id for s in inner), await self.inner.add(inner), strict=True)
        )
        loop = asyncio.get_running_loop()
        waiting = []
        for spec in specs:
            if spec.id in self.external:
                self.specs[spec.id] = spec
                self._left.discard(spec.id)
                self._joins[spec.id] = loop.create_future()
                added = self._added.setdefault(spec.id, loop.create_future())
                if not added.done():
                    added.set_result(None)
                waiting.append(spec.id)
        if waiting:
            log.info("waiting for external clients %s to connect", waiting)
        try:
            async with asyncio.timeout(self.join_timeout_s):
                for client in waiting:
                    joins[client] = await self._joins[client]
        except TimeoutError:
            absent = [c for c in waiting if not self._joins[c].done()]
            raise ClientDisconnected(
                f"external clients {absent} did not connect within"
                f" {self.join_timeout_s} s"
            ) from None
        return [joins[s.id] for s in specs]

    async def update(self, spec: ClientSpec) -> None:
        if spec.id not in self.external:
            await self.inner.update(spec)
            return
        self.specs[spec.id] = spec
        connection = self.connections.get(spec.id)
        if connection is not None:
            sent = accepted(spec, connection.want)
            await connection.tell(
                encode_control(Update(spec=sent.spec, data=sent.data))
            )

    async def remove(self, client: int, reason: str) -> bytes:
        """The client's leave notice: its own answer to a `leave` order, or,
        if it is not connected or answers anything else, one the runtime
        writes in its name (as the local runtime's host does)."""
        if client not in self.external:
            return await self.inner.remove(client, reason)
        self.specs.pop(client, None)
        self._left.add(client)
        self._added.pop(client, None)
        connection = self.connections.pop(client, None)
        notice = _leave_notice(client, reason)
        if connection is None:
            return notice
        try:
            async with asyncio.timeout(self.frame_timeout_s):
                answer = await connection.ask(encode_control(Leave(reason=reason)))
            if _is_leave_of(answer, client):
                notice = answer
            else:
                log.warning("client %s answered a leave with no leave notice", client)
        except (TimeoutError, ConnectionError) as exc:
            log.warning("client %s did not answer its leave: %s", client, exc)
        connection.close("it left")
        return notice

    async def request(self, client: int, head: bytes, body: bytes) -> bytes | None:
        if client not in self.external:
            return await self.inner.request(client, head, body)
        if client not in self.specs:
            raise LookupError(f"no client {client} in this runtime")
        connection = self.connections.get(client)
        if connection is None or connection.closed.is_set():
            raise ClientDisconnected(f"client {client} is not connected")
        return await connection.ask(head, body)

    async def states(self) -> dict[ClientId, ClientState]:
        """The simulated clients' states; an external client keeps its own."""
        return await self.inner.states()

    async def restore(self, states: Mapping[ClientId, ClientState]) -> None:
        await self.inner.restore(
            {c: s for c, s in states.items() if c not in self.external}
        )

    async def settle(self) -> None:
        await self.inner.settle()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._handshakes):
            task.cancel()
        for connection in list(self.connections.values()):
            connection.close("the run is over")
        self.connections.clear()
        await self.inner.close()

    async def _accept(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handshakes.add(task)
        try:
            admitted = await admit(
                reader,
                writer,
                self.tokens,
                self._spec_when_added,
                timeout=self.handshake_timeout_s,
            )
        except Refusal as exc:
            peer = writer.get_extra_info("peername")
            self.refusals.append(str(exc))
            log.warning("refused a connection from %s: %s", peer, exc)
            writer.close()
            return
        finally:
            self._handshakes.discard(task)
        client = admitted.client
        old = self.connections.get(client)
        if old is not None:
            old.close("a newer connection of the same client replaced it")
        self.connections[client] = _Connection(
            admitted, reader, writer, self.frame_timeout_s
        )
        first = self._joins.get(client)
        if first is not None and not first.done():
            first.set_result(admitted.join)
        with contextlib.suppress(asyncio.CancelledError):
            await self.connections[client].closed.wait()

    async def _spec_when_added(self, client: int) -> ClientSpec | None:
        """The spec of an external client, waiting for the run to add it (a
        client may connect before its join); None once it has left."""
        if client in self._left or client not in self.external:
            return None
        added = self._added.setdefault(
            client, asyncio.get_running_loop().create_future()
        )
        try:
            await asyncio.wait_for(asyncio.shield(added), self.join_timeout_s)
        except TimeoutError:
            return None
        return self.specs.get(client)


def _leave_notice(client: int, reason: str) -> bytes:
    address = client_address(client)
    return encode(
        Envelope(
            msg_id=f"{address}:leave",
            sender=address,
            recipient="server",
            round=-1,
            payload=LeaveNotice(client_id=client, reason=reason[:1024]),
        )
    )


def _is_leave_of(data: bytes, client: int) -> bool:
    try:
        envelope = decode(data)
    except ProtocolError:
        return False
    payload = envelope.payload
    return (
        isinstance(payload, LeaveNotice)
        and payload.client_id == client
        and envelope.sender == client_address(client)
    )
