"""The frames between the event loop and a forked worker, and the loop's
reader of them.

A frame is a header (kind, 1 byte; client id, 8; body length, 8; little
endian) and its body. Frames carry the encoded protocol message unchanged,
though a large request body (a model that many clients get) crosses to a
worker once and is cited by its key after; the worker rebuilds the very
bytes the client would have received:

    join:     body = the client's spec as JSON    → reply: its join request
    register: body = the client's spec as JSON    (no reply; a new spec, or a
                                                    client a new worker lost)
    leave:    body = the reason                   → reply: its leave notice
    deliver:  body = an encoded request           → reply: the encoded reply,
                                                    or no-reply (empty body)
    keep:     client id = a key, body = bytes     (no reply; a request body)
    forget:   client id = a key, empty body       (no reply; drops the body)
    cite:     body = key (8) + a request's head   → as deliver, for the request
                                                    head + the kept body
    state:    empty body                          → reply: the client's state
    restore:  body = a state                      → reply: empty
    error:    body = a text, from a worker that could not serve a frame

Every frame that wants a reply is answered by exactly one frame, in order.

`FrameReader` is an asyncio buffered protocol: the socket's bytes land
directly in the buffer of the frame they belong to, one copy from the kernel,
where a `StreamReader` copies a body three times (into its buffer, out of it,
and the buffer's remainder down). With 1,000 Fashion-MNIST clients that is
2 GB a round of replies through this process.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable

HEADER = struct.Struct("<BQQ")
KEY = struct.Struct("<Q")
"""A kept body's key, first in a cite frame's body."""
(
    REGISTER,
    DELIVER,
    REPLY,
    ERROR,
    STOP,
    NO_REPLY,
    STATE,
    RESTORE,
    JOIN,
    LEAVE,
    KEEP,
    FORGET,
    CITE,
) = range(1, 14)


class FrameReader(asyncio.BufferedProtocol):
    """Hands each complete frame's (kind, body) to `deliver`, in order, and
    calls `lost` once when the connection ends; `drain` waits while the
    transport's write buffer is full."""

    def __init__(
        self, deliver: Callable[[int, bytearray], None], lost: Callable[[], None]
    ) -> None:
        self._deliver = deliver
        self._lost = lost
        self._header = bytearray(HEADER.size)
        self._target = self._header  # the header, or the body being read
        self._filled = 0
        self._kind = 0
        self._writable: asyncio.Future[None] | None = None
        self.closed = False

    def get_buffer(self, sizehint: int) -> memoryview:
        return memoryview(self._target)[self._filled :]

    def buffer_updated(self, nbytes: int) -> None:
        self._filled += nbytes
        # A complete header opens its body, which may be empty and so be
        # complete at once too; the header is never empty, so this ends.
        while self._filled == len(self._target):
            if self._target is self._header:
                self._kind, _, size = HEADER.unpack(self._header)
                self._target, self._filled = bytearray(size), 0
            else:
                body, self._target, self._filled = self._target, self._header, 0
                self._deliver(self._kind, body)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.resume_writing()  # a writer waiting in drain wakes to the loss
        self._lost()

    def pause_writing(self) -> None:
        self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self._writable = None

    async def drain(self) -> None:
        """Return once the transport takes more writes; ConnectionError if
        the connection is gone."""
        if self._writable is not None:
            await asyncio.shield(self._writable)
        if self.closed:
            raise ConnectionResetError("worker gone")
