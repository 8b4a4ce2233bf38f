"""How many objects a msgpack message holds, read from its headers alone
(`count_objects`), so that `codec.py` refuses one too big before msgpack
builds any of it. Written here from the msgpack format, which msgpack offers
no call for; this module reads bytes only, and codec.py stays the one module
that imports msgpack."""

from __future__ import annotations

from .errors import ProtocolError


def _shapes() -> tuple[tuple[int, int, int] | None, ...]:
    """First byte → (items per count, width of a big-endian count, count),
    the msgpack format read once so that the scan is one lookup per object.
    Items per count: 1 for an array, 2 for a map, 0 for the rest, whose count
    is bytes to skip (for str, bin and ext: the extra bytes after the count).
    `None` is the one byte that starts nothing."""
    table: list[tuple[int, int, int] | None] = []
    for byte in range(256):
        if byte <= 0x7F or byte >= 0xE0 or byte in (0xC0, 0xC2, 0xC3):
            table.append((0, 0, 0))  # fixint, nil, false, true
        elif byte <= 0x8F:
            table.append((2, 0, byte & 0x0F))  # fixmap
        elif byte <= 0x9F:
            table.append((1, 0, byte & 0x0F))  # fixarray
        elif byte <= 0xBF:
            table.append((0, 0, byte & 0x1F))  # fixstr
        elif byte == 0xC1:
            table.append(None)
        elif byte <= 0xC6:
            table.append((0, 1 << (byte - 0xC4), 0))  # bin 8/16/32
        elif byte <= 0xC9:
            table.append((0, 1 << (byte - 0xC7), 1))  # ext 8/16/32, then type
        elif byte <= 0xD3:  # float 32/64, uint and int 8..64
            table.append((0, 0, (4, 8, 1, 2, 4, 8, 1, 2, 4, 8)[byte - 0xCA]))
        elif byte <= 0xD8:
            table.append((0, 0, 1 + (1 << (byte - 0xD4))))  # fixext, type first
        elif byte <= 0xDB:
            table.append((0, 1 << (byte - 0xD9), 0))  # str 8/16/32
        elif byte <= 0xDD:
            table.append((1, 2 << (byte - 0xDC), 0))  # array 16/32
        else:
            table.append((2, 2 << (byte - 0xDE), 0))  # map 16/32
    return tuple(table)


_SHAPES = _shapes()


def count_objects(data: bytes, most: int, *, max_items: int, max_keys: int) -> None:
    """Refuse `data` if it holds more than `most` objects, or declares more
    items than its bytes can hold, reading headers only.

    msgpack allocates an array's slots when it reads the header and builds
    every item it reads before it can tell the whole is too big; this scan
    tells first. It stops at a container msgpack's own limits refuse (an
    array of more than `max_items`, a map of more than `max_keys`), so that
    msgpack names it.
    """
    size, pos, pending, count = len(data), 0, 1, 0
    while pending:
        if pending > size - pos:  # every object takes at least one byte
            raise ProtocolError(
                f"truncated or malformed message: {pending} objects still to"
                f" come at byte {pos}, more than the {size - pos} bytes left hold"
            )
        shape = _SHAPES[data[pos]]
        if shape is None:
            raise ProtocolError(
                f"truncated or malformed message: byte 0xc1 at {pos} is no object"
            )
        count += 1
        if count > most:
            raise ProtocolError(f"size: more than {most} objects in one message")
        per, width, n = shape
        pos += 1 + width
        if width:
            n += int.from_bytes(data[pos - width : pos], "big")
        if per:
            if n > (max_items if per == 1 else max_keys):
                return
            pending += per * n
        else:
            pos += n
        pending -= 1
    if pos > size:
        raise ProtocolError(
            f"truncated or malformed message: its last object ends past byte {size}"
        )
