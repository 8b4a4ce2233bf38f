"""Frames over asyncio streams (docs/protocol.md, *Transport*): the one reader
and writer of the TCP transport, for the server, our client and the
conformance suite alike.

A frame's declared length is checked against the limit before its body is
read, and the body must follow its header within a timeout: a peer that
declares 2 GB or sends a header and then nothing is refused, never waited on
and never given a buffer.
"""

from __future__ import annotations

import asyncio

from clusterfed.protocol import ProtocolError
from clusterfed.protocol.transport import MAX_FRAME_BYTES, PREFIX, body_size

FRAME_TIMEOUT_S = 10.0
"""How long a frame's body may take once its header is in."""
HANDSHAKE_TIMEOUT_S = 10.0
"""How long each step of the handshake may take."""


class FrameTimeout(ProtocolError):
    """A frame (or its body) did not come in time."""


async def read_frame(
    reader: asyncio.StreamReader,
    *,
    limit: int = MAX_FRAME_BYTES,
    header_timeout: float | None = None,
    body_timeout: float | None = FRAME_TIMEOUT_S,
) -> bytes | None:
    """The next frame's body; None at a clean end of stream (between frames).

    Raises:
        ProtocolError: a declared length over `limit` (before any of the body
            is read), or a stream that ends inside a frame.
        FrameTimeout: no header within `header_timeout`, or a body not
            complete within `body_timeout` of its header.
    """
    try:
        prefix = await asyncio.wait_for(
            reader.readexactly(PREFIX.size), timeout=header_timeout
        )
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            return None
        raise ProtocolError("the connection ended inside a frame's length") from exc
    except TimeoutError as exc:
        raise FrameTimeout(f"no frame within {header_timeout} s") from exc
    size = body_size(prefix, limit)
    try:
        return await asyncio.wait_for(reader.readexactly(size), timeout=body_timeout)
    except asyncio.IncompleteReadError as exc:
        raise ProtocolError(
            f"the connection ended after {len(exc.partial)} of a frame's {size} bytes"
        ) from exc
    except TimeoutError as exc:
        raise FrameTimeout(
            f"a frame of {size} bytes did not come whole within {body_timeout} s"
        ) from exc


async def write_frame(writer: asyncio.StreamWriter, *parts: bytes) -> None:
    """Send one frame whose body is `parts` joined (a request's head and body
    are sent without being copied into one buffer)."""
    size = sum(len(p) for p in parts)
    if size > MAX_FRAME_BYTES:
        raise ProtocolError(
            f"size: a frame of {size} bytes is over the limit of {MAX_FRAME_BYTES}"
        )
    writer.writelines([PREFIX.pack(size), *parts])
    await writer.drain()


def parse_address(text: str, default_host: str = "127.0.0.1") -> tuple[str, int]:
    """HOST:PORT (or :PORT, or PORT) as (host, port); ValueError naming it."""
    host, _, port = text.rpartition(":")
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"{text!r} is not HOST:PORT") from None
    if not 0 <= number <= 65535:
        raise ValueError(f"port {number} of {text!r} is not in 0..65535")
    return (host.strip("[]") or default_host), number
