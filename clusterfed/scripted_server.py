"""The exchanges of `clusterfed conformance`'s scripted server with the
client under test: it addresses each request, asks, decodes the answer and
judges its envelope (ids echoed, round, sender and recipient), its sample
counts and the errors a case expects, into the suite's verdicts. The cases
that use them are `Suite`'s, in `client_conformance.py`.
"""

from __future__ import annotations

from typing import TypeVar

from clusterfed.client_under_test import CLIENT, ClientUnderTest, Verdict
from clusterfed.protocol import (
    ClassHistogram,
    Envelope,
    ErrorReply,
    EvaluateReply,
    Message,
    ProbeReply,
    ProtocolError,
    Shutdown,
    UpdateReply,
    decode,
    encode,
)

_Reply = TypeVar(
    "_Reply", UpdateReply, EvaluateReply, ProbeReply, ClassHistogram, Shutdown
)
NONCE = "c0ffee"


class ScriptedServer:
    """The server side of one exchange at a time with the client under test;
    `Suite` sets the attributes."""

    client: ClientUnderTest
    verdicts: dict[str, Verdict]
    timeout_s: float
    _next: int

    def _envelope(self, payload: Message) -> Envelope:
        msg_id = f"{NONCE}:{self._next}"
        self._next += 1
        return Envelope(
            msg_id=msg_id,
            sender="server",
            recipient=f"client/{CLIENT}",
            round=self._next,
            payload=payload,
        )

    async def _ask(self, body: bytes, verdict: Verdict) -> bytes | None:
        answer = await self.client.require_peer().ask(body, self.timeout_s)
        if answer is None:
            verdict.fail("closed the connection instead of answering")
            self.client.peer = None
        return answer

    async def _exchange(
        self, verdict: Verdict, payload: Message, kind: type[_Reply]
    ) -> _Reply | None:
        request = self._envelope(payload)
        answer = await self._ask(encode(request), verdict)
        if answer is None:
            return None
        reply = self._decoded(verdict, answer, "its reply")
        if reply is None:
            return None
        self._echoes(request, reply)
        if isinstance(reply.payload, ErrorReply):
            verdict.fail(
                f"answered an error: {reply.payload.code}: {reply.payload.message}"
            )
            return None
        if not isinstance(reply.payload, kind):
            verdict.fail(f"answered {reply.payload.kind} to {payload.kind}")
            return None
        return reply.payload

    @staticmethod
    def _decoded(verdict: Verdict, answer: bytes, what: str) -> Envelope | None:
        """The answer's envelope; None, `verdict` failed, if it does not
        decode (`what` names the answer in the reason)."""
        try:
            return decode(answer)
        except ProtocolError as exc:
            verdict.fail(f"{what} does not decode: {exc}")
            return None

    def _echoes(self, request: Envelope, reply: Envelope) -> None:
        verdict = self.verdicts["echoes ids"]
        kind = request.payload.kind
        expected = f"client/{CLIENT}:re:{request.msg_id}"[:128]
        if reply.msg_id != expected:
            verdict.fail(f"{kind}: reply id {reply.msg_id!r}, expected {expected!r}")
        if reply.in_reply_to != request.msg_id:
            verdict.fail(
                f"{kind}: in_reply_to {reply.in_reply_to!r},"
                f" expected {request.msg_id!r}"
            )
        if reply.round != request.round:
            verdict.fail(
                f"{kind}: round {reply.round}, the request's is {request.round}"
            )
        if reply.sender != f"client/{CLIENT}" or reply.recipient != "server":
            verdict.fail(f"{kind}: from {reply.sender!r} to {reply.recipient!r}")

    def _count(self, found: int, expected: int, kind: str) -> None:
        if found != expected:
            self.verdicts["keeps its sample count"].fail(
                f"{kind}: n_samples {found}, it holds {expected}"
            )

    async def _expect_error(
        self,
        verdict: Verdict,
        answer: bytes | None,
        code: str | None,
        starts: str | None,
    ) -> None:
        if answer is None:
            await self.client.back(verdict, "after the frame")
            return
        reply = self._decoded(verdict, answer, "its answer")
        if reply is None:
            return
        payload = reply.payload
        if not isinstance(payload, ErrorReply):
            verdict.fail(f"answered {payload.kind}, not an error")
            return
        if code is not None and payload.code != code:
            verdict.fail(f"error code {payload.code!r}, expected {code!r}")
        if starts is not None and not payload.message.startswith(starts):
            verdict.fail(f"error {payload.message!r}, expected {starts!r}…")
