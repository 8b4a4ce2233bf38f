"""Membership: who is in the run, and the messages clients send on their own.

`ParameterServer` is a `Membership`: the roster of clients (`roster.py`),
their joins and leaves (a leave during a round waits for its end, as the
round's books still hold the client) and the inbound messages that carry
them. Identity
comes from the runtime that delivered a message, never from the sender it
declares; every refusal is counted with its reason and reported with the
round's.
"""

from __future__ import annotations

from typing import Any

from clusterfed.algorithms import ClientInfo, ServerState, Strategy
from clusterfed.protocol import (
    ErrorReply,
    JoinRequest,
    LeaveNotice,
    Message,
    ProtocolError,
    Shutdown,
    Welcome,
    decode,
)
from clusterfed.types import ClientId, ClusterId

from .client import client_address
from .courier import Courier
from .reply_books import REPLY_KINDS, ReplyBooks, client_of, membership_problem
from .roster import Roster


class Membership:
    """The roster and the inbound messages that change it."""

    strategy: Strategy[Any]
    state: ServerState
    courier: Courier
    books: ReplyBooks
    round: int

    def __init__(self) -> None:
        self.roster = Roster()
        self._rejections: list[str] = []  # inbound refusals, drained each round
        self._in_round = False

    async def handle(self, data: bytes, client: int | None = None) -> bytes:
        """Serve a message a client sent on its own (a join or leave).

        `client` is the client the runtime delivered it from (the transport's
        identity): a message whose sender, or whose join or leave, names
        another client is refused and counted. None: the runtime's own
        delivery of a client's message (a restarted host's rejoin), whose
        sender it vouches for. A leave during a round takes effect when the
        round ends.
        """
        try:
            request = decode(data, max_bytes=self.courier.max_message_bytes)
        except ProtocolError as exc:
            self._rejections.append(f"inbound: {exc}")
            return self.courier.encode(
                ErrorReply.of("bad_message", str(exc)), "unknown", -1
            )
        sender = client_of(request.sender)
        forged = (
            f"inbound {request.payload.kind!r}: sender {request.sender!r}"
            f" came from client {client}: a client speaks only as itself"
            if client is not None and sender != client
            else membership_problem(request.payload, sender)
            if sender is not None
            else None
        )
        match request.payload:
            case _ if forged is not None:
                self._rejections.append(forged)
                reply: Message = ErrorReply.of("refused", forged)
            case JoinRequest(client_id=cid) if request.sender == client_address(cid):
                cluster = self.join(
                    ClientInfo(
                        ClientId(cid),
                        request.payload.n_train,
                        self.round,
                        n_test=request.payload.n_test,
                    )
                )
                reply = Welcome(client_id=cid, cluster=cluster)
            case LeaveNotice(client_id=cid) if request.sender == client_address(cid):
                if self._in_round:  # the round's books still hold it
                    self.roster.leaving.append(ClientId(cid))
                else:
                    self.leave(ClientId(cid))
                reply = Shutdown(reason="leave acknowledged")
            case other if other.kind in REPLY_KINDS:
                reason = self.books.check_inbound(request, self.roster)
                self._rejections.append(reason)
                reply = ErrorReply.of("refused", reason)
            case other:
                reason = (
                    f"inbound {other.kind!r} from {request.sender!r} is not accepted"
                )
                self._rejections.append(reason)
                reply = ErrorReply.of("refused", reason)
        return self.courier.encode(reply, request.sender, request.round, request.msg_id)

    def join(self, client: ClientInfo) -> ClusterId | None:
        """Register a client; one that joins again (back from a restart)
        keeps its place and its cluster."""
        if self.roster.admit(client):
            self.state = self.strategy.on_join(self.state, client)
        return self.state.assignment.get(client.id)

    def leave(self, client: ClientId) -> None:
        if self.roster.remove(client):
            self.state = self.strategy.on_leave(self.state, client)

    def _leave_after_round(self) -> None:
        """The round is over: the clients that announced a leave during it go."""
        self._in_round = False
        leaving, self.roster.leaving = self.roster.leaving, []
        for client in leaving:
            self.leave(client)
