"""The reply books: whether a message is an acceptable answer, by who sent
it and what it answers, before its payload is looked at (`validation.py`).

- a reply from an unknown client, or from one that has left;
- a reply that speaks for another client than the one it came from (identity
  is the transport's: which client actor the runtime delivered the request
  to, never the `sender` a message declares);
- a reply for a round that is over (a replay of an old reply), or to a
  request of another run (request ids carry the run's nonce);
- a duplicate: a message the same client already sent, or a second answer to
  a request already answered, in this round (keyed on the client, so no
  client can spend another's reply id);
- a join or leave that names another client;
- a reply that does not answer the request it came back on.

`ReplyBooks` keeps what these checks need to remember: what was received in
the current round; who is a member and who left is the roster's
(`roster.py`).
"""

from __future__ import annotations

import re

from clusterfed.protocol import Envelope, JoinRequest, LeaveNotice, Message
from clusterfed.types import ClientId

from .roster import Roster

_CLIENT = re.compile(r"^client/(\d+)$")
REPLY_KINDS = frozenset(
    {
        "update_reply",
        "evaluate_reply",
        "probe_reply",
        "class_histogram",
        "data_subspace",
        "error",
    }
)


def client_of(address: str) -> ClientId | None:
    """The client id in an address `client/<id>`; None for any other."""
    match = _CLIENT.match(address)
    return ClientId(int(match.group(1))) if match else None


class ReplyBooks:
    """What the server remembers to judge replies: what it received in the
    current round (who is a member, and who left, is the roster's)."""

    def __init__(self) -> None:
        self.round = -1
        self.answered: dict[str, ClientId] = {}  # request id → who answered it
        # (client, message id) of the replies accepted: a message id is the
        # sender's to choose, so it is only unique per client.
        self.received: set[tuple[ClientId, str]] = set()

    def begin_round(self, round: int) -> None:
        self.round = round
        self.answered.clear()
        self.received.clear()

    def sender_problem(self, sender: str, roster: Roster) -> str | None:
        client = client_of(sender)
        if client is not None and client in roster:
            return None
        if client is not None and client in roster.departed:
            return f"message from client {client}, which has left"
        return f"message from unknown client {sender!r}"

    def check_reply(
        self,
        reply: Envelope,
        request: Envelope,
        client: ClientId,
        roster: Roster,
    ) -> str | None:
        """Why `reply`, delivered by the runtime from `client`, is not an
        acceptable answer to `request`, or None."""
        problem = self.sender_problem(reply.sender, roster)
        if problem is not None:
            return problem
        if client_of(reply.sender) != client:
            return (
                f"reply from {reply.sender!r} came from client {client}:"
                " a client speaks only as itself"
            )
        if 0 <= reply.round < request.round:
            return (
                f"reply for round {reply.round}, which is over"
                f" (this is round {request.round})"
            )
        if reply.in_reply_to is not None and _nonce(reply.in_reply_to) != _nonce(
            request.msg_id
        ):
            return (
                f"stale: {reply.in_reply_to!r} is a request of another run;"
                f" the reply does not answer {request.msg_id!r}"
            )
        problem = self._duplicate(reply, client)
        if problem is not None:
            return problem
        problem = membership_problem(reply.payload, client)
        if problem is not None:
            return problem
        if (
            reply.in_reply_to != request.msg_id
            or reply.sender != request.recipient
            or reply.round != request.round
        ):
            return (
                f"reply {reply.msg_id!r} from {reply.sender!r} does not answer"
                f" {request.msg_id!r} to {request.recipient!r}"
            )
        return None

    def accept(self, reply: Envelope, request: Envelope, client: ClientId) -> None:
        """Note a reply from `client` that answered its request."""
        self.received.add((client, reply.msg_id))
        self.answered[request.msg_id] = client

    def check_inbound(self, message: Envelope, roster: Roster) -> str:
        """Why a reply that came on its own (not on its request) is refused:
        the server takes an answer only on the request it answers."""
        problem = self.sender_problem(message.sender, roster)
        if problem is not None:
            return f"inbound {message.payload.kind!r}: {problem}"
        if 0 <= message.round < self.round:
            return (
                f"inbound {message.payload.kind!r} for round {message.round},"
                f" which is over (this is round {self.round})"
            )
        client = client_of(message.sender)
        problem = self._duplicate(message, client) if client is not None else None
        if problem is not None:
            return f"inbound {message.payload.kind!r}: {problem}"
        return (
            f"inbound {message.payload.kind!r} from {message.sender!r} is not accepted"
        )

    def _duplicate(self, reply: Envelope, client: ClientId) -> str | None:
        if (client, reply.msg_id) in self.received:
            return (
                f"duplicate: message {reply.msg_id!r} of client {client}"
                f" was already received in round {self.round}"
            )
        if reply.in_reply_to is not None and reply.in_reply_to in self.answered:
            return (
                f"duplicate: request {reply.in_reply_to!r} was already answered"
                f" by client {self.answered[reply.in_reply_to]} in round {self.round}"
            )
        return None


def _nonce(msg_id: str) -> str:
    return msg_id.partition(":")[0]


def membership_problem(payload: Message, client: ClientId) -> str | None:
    """Why a join or leave from `client` is refused: it names another client."""
    if isinstance(payload, JoinRequest | LeaveNotice) and payload.client_id != client:
        return (
            f"forged {payload.kind!r} for client {payload.client_id}"
            f" from client {client}: a client speaks only as itself"
        )
    return None
