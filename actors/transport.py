"""What the server needs from a runtime: deliver bytes to a client, get bytes back."""

from __future__ import annotations

from typing import Protocol

from clusterfed.types import ClientId


class Transport(Protocol):
    async def request(self, client: ClientId, data: bytes) -> bytes:
        """Deliver an encoded request to `client` and return its encoded reply.

        Raises whatever the runtime raises when the client cannot answer (a dead
        actor, a closed connection); the server records that as a failure.
        """
        ...
