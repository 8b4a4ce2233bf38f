"""What a runtime is: it hosts client actors and delivers bytes to them.

A runtime knows nothing of rounds, deadlines, reachability or timeouts: the
server's courier (`actors/courier.py`) decides who is reachable, how long to
wait and what a missing reply means, the same way above every runtime.

A runtime says how many hosts compute at once (`parallelism`); the courier
keeps that many times 8 requests in flight (at most 64), 64 when the runtime
cannot say (None).

A request comes in two parts, `request(client, head, body)`, and the client
receives `head + body`: the body (the packed payload, often a model) is one
bytes object for every client that gets the same payload, so a runtime can
send it to a host once and refer to it after, and none has to copy a model
into one buffer with its header.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from clusterfed.types import ClientId

from ..client import ClientState
from ..spec import ClientSpec

KEEP_AT_LEAST = 64 * 1024
"""Request bodies this large are sent to a host once and cited after."""
KEPT_BYTES = 64 * 1024 * 1024
"""The request bodies kept for one host at most, oldest dropped first."""


class Runtime(Protocol):
    """Hosts client actors (inline, in worker processes, in Ray actors)."""

    name: str

    @property
    def parallelism(self) -> int | None:
        """How many hosts compute at once; None when the runtime cannot say."""
        ...

    async def start(self) -> None:
        """Get ready to host clients (start workers, connect to Ray)."""
        ...

    async def add(self, specs: Sequence[ClientSpec]) -> list[bytes]:
        """Host new clients; returns the encoded join request each one sends,
        in the order of `specs`."""
        ...

    async def update(self, spec: ClientSpec) -> None:
        """A hosted client's new spec (a drift, a straggler, a new link)."""
        ...

    async def remove(self, client: int, reason: str) -> bytes:
        """Stop hosting a client; returns the encoded leave notice it sends."""
        ...

    async def request(self, client: int, head: bytes, body: bytes) -> bytes | None:
        """Deliver the encoded request `head + body` (`body` may be empty);
        the encoded reply, or None if the client does not answer (a hung
        faulty client). Raises what the runtime raises when the client cannot
        answer (a dead worker or actor)."""
        ...

    async def states(self) -> dict[ClientId, ClientState]:
        """What each hosted client keeps between rounds (for a checkpoint);
        a client that keeps nothing is left out."""
        ...

    async def restore(self, states: Mapping[ClientId, ClientState]) -> None:
        """Give hosted clients their state back, before any request."""
        ...

    async def settle(self) -> None:
        """Between rounds: wait for hosts that are being restarted."""
        ...

    async def close(self) -> None: ...
