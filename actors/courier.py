"""The server's courier: requests out, replies in, judged the same way above
every runtime.

It numbers and encodes each request when it is sent (at most
`in_flight()` at a time, so memory holds a bounded number of encoded
models however many clients there are), delivers it through the runtime,
and judges what comes back: a client the scenario made unreachable fails at
once; a runtime failure (a dead worker or actor) fails; no reply within
`task_timeout_s` (wall clock) fails — a client that does not answer at all
otherwise holds the round; undecodable bytes and replies that fail the books'
checks are rejected. Request ids carry a random nonce of this run and the
message counter (`3fa9c1:17`, as long as `server:17` was, so no byte count
changes); replies are checked against the request they came back on and the
client it was delivered to: a reply speaks for that client only.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable, Mapping, Sequence

from clusterfed.protocol import (
    MAX_MESSAGE_BYTES,
    Encoder,
    Envelope,
    ErrorReply,
    Message,
    ProtocolError,
    decode,
    encode,
    one_line,
)
from clusterfed.types import ClientId

from .client import client_address
from .outcome import Exchange
from .reply_books import ReplyBooks
from .roster import Roster
from .runtimes import Runtime

SERVER_ADDRESS = "server"
NONCE_LENGTH = len(SERVER_ADDRESS)  # request ids keep the length they had
IN_FLIGHT_PER_HOST = 8
MAX_IN_FLIGHT = 64


def cohort_in_flight(cohort: int, hosts: int | None) -> int | None:
    """Requests outstanding at once when hosts train cohorts of `cohort`
    tasks: enough that each of the `hosts` finds a whole cohort waiting
    (a host batches only the requests it holds); None (the default,
    `Courier.in_flight`) for one task at a time."""
    if cohort <= 1:
        return None
    per_host = max(IN_FLIGHT_PER_HOST, cohort)
    return max(MAX_IN_FLIGHT, per_host) if hosts is None else per_host * hosts


class ClientUnreachable(ConnectionError):
    """A client that crashed or dropped out does not answer."""


class Courier:
    """Delivers the server's requests through a runtime and judges replies.

    Args:
        runtime: hosts the clients.
        books: what the reply checks remember (who left, what came this round).
        task_timeout_s: wall-clock limit on one request; None waits forever.
        max_message_bytes: replies larger than this are refused.
        max_in_flight: requests outstanding at once; None: `in_flight()`.
    """

    def __init__(
        self,
        runtime: Runtime,
        books: ReplyBooks,
        *,
        task_timeout_s: float | None = None,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        max_in_flight: int | None = None,
    ) -> None:
        if max_in_flight is not None and max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        self.runtime = runtime
        self.books = books
        self.task_timeout_s = task_timeout_s
        self.max_message_bytes = max_message_bytes
        self.max_in_flight = max_in_flight
        self.unreachable: dict[ClientId, str] = {}
        # Message ids: <nonce>:0, <nonce>:1, ... A reply to another run's
        # request (a capture replayed) names another nonce and is refused.
        self.nonce = secrets.token_hex(NONCE_LENGTH // 2)
        self.next_id = 0

    def in_flight(self) -> int:
        """Requests outstanding at once: `max_in_flight`, or by default
        `IN_FLIGHT_PER_HOST` for each host that computes at once (the
        runtime's `parallelism`; a runtime that cannot say counts as
        many), at most `MAX_IN_FLIGHT`. Each holds an encoded request and
        then a reply (a model each): with 1,000 Fashion-MNIST clients on 2
        workers, 16 kept the server at 1.2 GiB and 64 at 1.6 GiB, no slower
        (bench/RESULTS.md)."""
        if self.max_in_flight is not None:
            return self.max_in_flight
        hosts = self.runtime.parallelism
        if hosts is None or hosts < 1:
            return MAX_IN_FLIGHT
        return min(MAX_IN_FLIGHT, IN_FLIGHT_PER_HOST * hosts)

    def set_unreachable(self, clients: Mapping[int, str]) -> None:
        """Who does not answer this round (crashed, dropped out), and why."""
        self.unreachable = {ClientId(c): reason for c, reason in clients.items()}

    async def round_trip(
        self,
        requests: Sequence[tuple[ClientId, Message]],
        round: int,
        roster: Roster,
        on_exchange: Callable[[int, Exchange], Exchange] | None = None,
    ) -> list[Exchange]:
        """Send the requests and judge every reply (in the order of `requests`);
        `roster` holds the clients the server knows now. `on_exchange(i, e)`
        sees request i's exchange as soon as it is judged and returns what is
        kept of it (streaming aggregation keeps an update without its delta)."""
        envelopes = [self.envelope(p, client_address(c), round) for c, p in requests]
        encoder = Encoder()
        slots = asyncio.Semaphore(self.in_flight())

        async def one(index: int, client: ClientId, envelope: Envelope) -> Exchange:
            async with slots:
                parts = encoder.encode_parts(envelope)
                exchange = await self._exchange(client, envelope, parts, roster)
            return exchange if on_exchange is None else on_exchange(index, exchange)

        return list(
            await asyncio.gather(
                *(
                    one(i, client, envelope)
                    for i, ((client, _), envelope) in enumerate(
                        zip(requests, envelopes, strict=True)
                    )
                )
            )
        )

    def envelope(
        self,
        payload: Message,
        recipient: str,
        round: int,
        in_reply_to: str | None = None,
    ) -> Envelope:
        msg_id = f"{self.nonce}:{self.next_id}"
        self.next_id += 1
        return Envelope(
            msg_id=msg_id,
            sender=SERVER_ADDRESS,
            recipient=recipient,
            round=round,
            in_reply_to=in_reply_to,
            payload=payload,
        )

    def encode(
        self,
        payload: Message,
        recipient: str,
        round: int,
        in_reply_to: str | None = None,
    ) -> bytes:
        return encode(self.envelope(payload, recipient, round, in_reply_to))

    async def _deliver(self, client: ClientId, parts: tuple[bytes, bytes]) -> bytes:
        if client in self.unreachable:
            raise ClientUnreachable(self.unreachable[client])
        reply = await self.runtime.request(int(client), *parts)
        if reply is None:  # the client does not answer: its reply never comes
            await asyncio.Event().wait()
        assert reply is not None
        return reply

    async def _exchange(
        self,
        client: ClientId,
        request: Envelope,
        parts: tuple[bytes, bytes],
        roster: Roster,
    ) -> Exchange:
        sent = len(parts[0]) + len(parts[1])
        try:
            raw = await asyncio.wait_for(
                self._deliver(client, parts), timeout=self.task_timeout_s
            )
        except TimeoutError:
            return Exchange(
                "failed", None, f"no reply within {self.task_timeout_s} s", sent
            )
        except Exception as exc:  # the runtime's own failure types (dead actor, ...)
            return Exchange("failed", None, f"{type(exc).__name__}: {exc}", sent)
        try:
            reply = decode(raw, max_bytes=self.max_message_bytes)
        except ProtocolError as exc:
            return Exchange("rejected", None, str(exc), sent, len(raw))
        problem = self.books.check_reply(reply, request, client, roster)
        if problem is not None:
            return Exchange("rejected", None, problem, sent, len(raw))
        self.books.accept(reply, request, client)
        if isinstance(reply.payload, ErrorReply):
            # The client's own words: one short printable line in the books.
            problem = one_line(f"{reply.payload.code}: {reply.payload.message}")
            return Exchange("failed", reply, problem, sent, len(raw))
        return Exchange("ok", reply, None, sent, len(raw))
