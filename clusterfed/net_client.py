"""The Python reference client over TCP: `clusterfed client --connect
HOST:PORT --id N --token T`.

It is our client actor (`actors.client.Client`) behind a socket: it asks the
server for its spec, builds the actor from it as a worker process would, and
answers each request frame with the actor's reply, so its replies are the
bytes the simulated client would have sent. It computes on one thread, as a
worker does, for the same numerics. A connection that drops before the run's
shutdown is opened again (for `retry_s`), and the client goes on with the
state it kept.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from clusterfed.actors.client import Client
from clusterfed.actors.faults import load_spec
from clusterfed.actors.host import compute_on_one_thread
from clusterfed.actors.runtimes.net_io import (
    HANDSHAKE_TIMEOUT_S,
    parse_address,
    read_frame,
    write_frame,
)
from clusterfed.protocol import PROTOCOL_VERSION, ProtocolError, Shutdown, decode
from clusterfed.protocol.transport import (
    Accepted,
    Auth,
    Challenge,
    Control,
    Hello,
    Leave,
    Refused,
    Update,
    decode_control,
    encode_control,
    is_control,
    mac,
)

log = logging.getLogger(__name__)


class NotAdmitted(ProtocolError):
    """The server refused this client's credentials (or its version)."""


@dataclass
class ReferenceClient:
    """One client of a run served over TCP (see the module's docstring)."""

    host: str
    port: int
    client_id: int
    token: str
    retry_s: float = 30.0
    client: Client | None = field(default=None, init=False)
    done: bool = field(default=False, init=False)

    async def run(self) -> str:
        """Serve the run until its shutdown or a leave; returns how it ended.

        Raises:
            NotAdmitted: the server refused the handshake.
            ConnectionError: the server could not be reached for `retry_s`.
        """
        restore = compute_on_one_thread()
        try:
            deadline = time.monotonic() + self.retry_s
            while True:
                try:
                    reader, writer = await asyncio.open_connection(self.host, self.port)
                except OSError as exc:
                    if time.monotonic() > deadline:
                        raise ConnectionError(
                            f"no server at {self.host}:{self.port}: {exc}"
                        ) from exc
                    await asyncio.sleep(0.2)
                    continue
                try:
                    ended = await self._session(reader, writer)
                except NotAdmitted:
                    raise
                except (ConnectionError, ProtocolError) as exc:
                    # A dropped connection, or a frame refused (one over the
                    # size limit): this connection is over, the client is not.
                    log.warning("client %s: connection lost: %s", self.client_id, exc)
                    ended = None
                finally:
                    writer.close()
                if ended is not None:
                    return ended
                deadline = time.monotonic() + self.retry_s
                await asyncio.sleep(0.2)
        finally:
            restore()

    async def _session(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> str | None:
        """One connection: handshake, join, then requests. A string when the
        run is over for this client; None when the connection dropped."""
        hello = Hello(
            protocol_version=PROTOCOL_VERSION, client_id=self.client_id, want=("spec",)
        )
        await write_frame(writer, encode_control(hello))
        challenge = await self._control(reader)
        if not isinstance(challenge, Challenge):
            raise ProtocolError(f"expected a challenge, got {challenge.type}")
        code = mac(self.token, challenge.nonce, self.client_id)
        await write_frame(writer, encode_control(Auth(mac=code)))
        answer = await self._control(reader)
        if isinstance(answer, Refused):
            raise NotAdmitted(answer.reason)
        if not isinstance(answer, Accepted) or answer.spec is None:
            raise ProtocolError(f"expected accepted with a spec, got {answer.type}")
        spec = load_spec(answer.spec)
        if self.client is None:
            self.client = Client(spec)
        elif spec != self.client.spec:
            self.client.update(spec)
        client = self.client
        await write_frame(writer, client.join_request())
        while True:
            body = await read_frame(reader, body_timeout=None)
            if body is None:
                return "shutdown" if self.done else None
            if is_control(body):
                order = decode_control(body)
                if isinstance(order, Update) and order.spec is not None:
                    client.update(load_spec(order.spec))
                elif isinstance(order, Leave):
                    await write_frame(writer, client.leave_notice(order.reason))
                    return "left"
                continue
            reply = await client.handle(body)
            if reply is None:  # a faulty client that hangs: say nothing
                continue
            await write_frame(writer, reply)
            if _is_shutdown(body):
                self.done = True

    async def _control(self, reader: asyncio.StreamReader) -> Control:
        # No limit on the header: a client that connects before the run
        # adds it is accepted when it is added.
        body = await read_frame(reader, body_timeout=HANDSHAKE_TIMEOUT_S)
        if body is None:
            raise ConnectionResetError("the server closed the connection")
        return decode_control(body)


def _is_shutdown(data: bytes) -> bool:
    try:
        return isinstance(decode(data).payload, Shutdown)
    except ProtocolError:
        return False


def connect(address: str, client_id: int, token: str, retry_s: float = 30.0) -> str:
    """Run the reference client against `address` (HOST:PORT) until its run
    ends; how it ended ("shutdown" or "left")."""
    host, port = parse_address(address)
    return asyncio.run(ReferenceClient(host, port, client_id, token, retry_s).run())
