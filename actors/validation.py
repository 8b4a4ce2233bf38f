"""The server's checks on what clients send, before anything reaches a model.

The codec has already refused what is not a well-formed message (garbage,
truncated bytes, a wrong protocol version, NaN or Inf in a tensor). What is
left are messages that are well-formed but wrong here:

- a reply from an unknown client, or from one that has left;
- a reply for a round that is over (a replay of an old reply);
- a duplicate: a message already received, or a second answer to a request
  already answered, in this round;
- a reply that does not answer the request it came back on;
- a payload of the wrong kind, an update for a cluster that was not sent, a
  delta of the wrong shape or dtype, or one whose norm is above the bound.

Each check returns the reason a person reads in `rounds.jsonl`, or None.
`ReplyBooks` keeps what the checks need to remember: who left, and what was
received in the current round.
"""

from __future__ import annotations

import re
from collections.abc import Container

import numpy as np

from clusterfed.algorithms import ProbePlan, TaskPlan
from clusterfed.protocol import (
    ClassHistogram,
    Envelope,
    Message,
    ProbeReply,
    UpdateReply,
)
from clusterfed.types import ClientId

_CLIENT = re.compile(r"^client/(\d+)$")
REPLY_KINDS = frozenset(
    {"update_reply", "evaluate_reply", "probe_reply", "class_histogram", "error"}
)


def client_of(address: str) -> ClientId | None:
    """The client id in an address `client/<id>`; None for any other."""
    match = _CLIENT.match(address)
    return ClientId(int(match.group(1))) if match else None


class ReplyBooks:
    """What the server remembers to judge replies: who has left, and what it
    received in the current round."""

    def __init__(self) -> None:
        self.round = -1
        self.departed: set[ClientId] = set()
        self.answered: dict[str, ClientId] = {}  # request id → who answered it
        self.received: set[str] = set()  # ids of the replies accepted

    def begin_round(self, round: int) -> None:
        self.round = round
        self.answered.clear()
        self.received.clear()

    def sender_problem(self, sender: str, clients: Container[ClientId]) -> str | None:
        client = client_of(sender)
        if client is not None and client in clients:
            return None
        if client is not None and client in self.departed:
            return f"message from client {client}, which has left"
        return f"message from unknown client {sender!r}"

    def check_reply(
        self, reply: Envelope, request: Envelope, clients: Container[ClientId]
    ) -> str | None:
        """Why `reply` is not an acceptable answer to `request`, or None."""
        problem = self.sender_problem(reply.sender, clients)
        if problem is not None:
            return problem
        if 0 <= reply.round < request.round:
            return (
                f"reply for round {reply.round}, which is over"
                f" (this is round {request.round})"
            )
        problem = self._duplicate(reply)
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

    def accept(self, reply: Envelope, request: Envelope) -> None:
        """Note a reply that answered its request."""
        self.received.add(reply.msg_id)
        client = client_of(reply.sender)
        if client is not None:
            self.answered[request.msg_id] = client

    def check_inbound(self, message: Envelope, clients: Container[ClientId]) -> str:
        """Why a reply that came on its own (not on its request) is refused:
        the server takes an answer only on the request it answers."""
        problem = self.sender_problem(message.sender, clients)
        if problem is not None:
            return f"inbound {message.payload.kind!r}: {problem}"
        if 0 <= message.round < self.round:
            return (
                f"inbound {message.payload.kind!r} for round {message.round},"
                f" which is over (this is round {self.round})"
            )
        problem = self._duplicate(message)
        if problem is not None:
            return f"inbound {message.payload.kind!r}: {problem}"
        return (
            f"inbound {message.payload.kind!r} from {message.sender!r} is not accepted"
        )

    def _duplicate(self, reply: Envelope) -> str | None:
        if reply.msg_id in self.received:
            return (
                f"duplicate: message {reply.msg_id!r} was already received"
                f" in round {self.round}"
            )
        if reply.in_reply_to is not None and reply.in_reply_to in self.answered:
            return (
                f"duplicate: request {reply.in_reply_to!r} was already answered"
                f" by client {self.answered[reply.in_reply_to]} in round {self.round}"
            )
        return None


def check_update(
    payload: Message, plan: TaskPlan, n_weights: int, max_norm: float | None
) -> str | None:
    """Why an update may not touch a model, or None."""
    if not isinstance(payload, UpdateReply):
        return f"expected an update_reply, got {payload.kind!r}"
    if payload.cluster not in plan.models:
        return f"update for cluster {payload.cluster}, which was not sent"
    if payload.delta.shape != (n_weights,):
        return (
            f"delta has shape {payload.delta.shape}, the model has {n_weights} weights"
        )
    if payload.delta.dtype != np.float32:
        return f"delta dtype {payload.delta.dtype}, expected float32"
    if max_norm is not None:
        norm = float(np.sqrt(np.square(payload.delta, dtype=np.float64).sum()))
        if norm > max_norm:
            return f"delta norm {norm:.4g} is above max_update_norm = {max_norm:g}"
    return None


def check_histogram(
    payload: Message, client: ClientId, n_classes: int | None
) -> str | None:
    if not isinstance(payload, ClassHistogram):
        return f"expected a class_histogram, got {payload.kind!r}"
    if payload.client_id != client:
        return f"histogram of client {payload.client_id}, asked client {client}"
    if sum(payload.counts) == 0:
        return "class histogram counts no sample"
    if n_classes is not None and len(payload.counts) != n_classes:
        return (
            f"class histogram of {len(payload.counts)} classes,"
            f" the others have {n_classes}"
        )
    return None


def check_probe(payload: Message, plan: ProbePlan) -> str | None:
    if not isinstance(payload, ProbeReply):
        return f"expected a probe_reply, got {payload.kind!r}"
    owners = [s.owner for s in payload.scores]
    if sorted(owners) != sorted(plan.models):
        return (
            f"probe scores for models {sorted(owners)},"
            f" the task sent {sorted(plan.models)}"
        )
    return None
