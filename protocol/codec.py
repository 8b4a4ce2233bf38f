"""The wire codec: `encode` an envelope to msgpack bytes, `decode` them back.

This is the only module that imports msgpack. `decode` trusts nothing: every
failure, whatever layer it comes from, leaves as a `ProtocolError` that names
the problem, so a receiver can refuse and count a bad message and carry on.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, BinaryIO, get_args

import msgpack
import numpy as np
from annotated_types import MaxLen
from pydantic import ValidationError

from .errors import ProtocolError
from .messages import ENVELOPE_ADAPTER, MAX_CLASSES, Envelope, Message
from .scan import count_objects
from .tensor import TENSOR_EXT, json_form, pack_tensor, unpack_tensor
from .version import PROTOCOL_VERSION

MAX_MESSAGE_BYTES = 256 * 1024 * 1024
"""Default limit on one encoded message (a 64M-parameter float32 model)."""
MAX_ITEMS = 2 * MAX_CLASSES
"""The longest array msgpack builds: past the longest any field allows (a
class histogram), so the field's own limit names it below this."""
MAX_KEYS = 64
"""The most keys of any map in a message."""
MAX_TEXT_BYTES = 64 * 1024
"""The longest string (or binary) any message holds."""
MAX_REASON = 300
"""The longest refusal reason: one line, whatever was wrong and how often."""
MAX_PROBLEMS = 3
"""The validation problems a refusal names; the rest are counted."""
MAX_OBJECTS = 2 * MAX_ITEMS
"""The most objects (maps, arrays, keys, strings, numbers, tensors) one message
may hold: room for the longest array msgpack builds and all around it, so that
a field's own limit names a field too long. Beyond its own bytes (strings,
tensors), a message then costs at most this many small Python objects, about
20 MB, however it nests."""
MAX_RECORD_BYTES = MAX_MESSAGE_BYTES + MAX_TEXT_BYTES
"""The longest frame of a record stream: one message and its trace fields."""
MAX_RECORD_OBJECTS = 64
"""The most objects of one record (a trace record has a dozen keys)."""


def _item_limits() -> dict[str, dict[str, int]]:
    """kind → {field: most items}, read from the message models' `max_length`."""
    limits: dict[str, dict[str, int]] = {}
    for model in get_args(get_args(Message)[0]):
        kind = model.model_fields["kind"].default
        for name, info in model.model_fields.items():
            for meta in info.metadata:
                if isinstance(meta, MaxLen) and name != "kind":
                    limits.setdefault(kind, {})[name] = meta.max_length
    return limits


ITEM_LIMITS: Mapping[str, Mapping[str, int]] = _item_limits()
"""Per message kind, the most items each sequence field may hold."""


def _default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        return msgpack.ExtType(TENSOR_EXT, pack_tensor(obj))
    raise TypeError(f"cannot encode {type(obj).__name__}")


def _ext_hook(code: int, data: bytes) -> Any:
    if code != TENSOR_EXT:
        raise ProtocolError(f"unknown extension type {code}")
    return unpack_tensor(data)


def encode(envelope: Envelope) -> bytes:
    """Serialise an envelope; tensors become msgpack extension types."""
    return Encoder().encode(envelope)


def encode_many(envelopes: Sequence[Envelope]) -> list[bytes]:
    """Serialise envelopes; those sharing one payload object pack it once."""
    encoder = Encoder()
    return [encoder.encode(e) for e in envelopes]


class Encoder:
    """Encodes envelopes, packing each payload object once.

    A server that sends one model to many clients builds one payload and many
    envelopes; each result is byte-for-byte what `encode` gives alone. The
    encoder keeps the payloads it has packed (so their ids stay theirs):
    use one per batch of messages.
    """

    def __init__(self) -> None:
        self._packer = msgpack.Packer(default=_default, use_bin_type=True)
        self._payloads: dict[int, tuple[object, bytes]] = {}

    def encode(self, envelope: Envelope) -> bytes:
        return b"".join(self.encode_parts(envelope))

    def encode_parts(self, envelope: Envelope) -> tuple[bytes, bytes]:
        """`encode(envelope)` in two parts, head + body: the body is the
        packed payload, the same bytes object for every envelope of that
        payload (a transport can send it once and refer to it after)."""
        packer = self._packer
        cached = self._payloads.get(id(envelope.payload))
        if cached is None:
            body = packer.pack(envelope.payload.model_dump(mode="python"))
            self._payloads[id(envelope.payload)] = (envelope.payload, body)
        else:
            body = cached[1]
        fields = envelope.model_dump(mode="python", exclude={"payload"})
        head = [packer.pack_map_header(len(fields) + 1)]
        for key, value in fields.items():
            head += [packer.pack(key), packer.pack(value)]
        head.append(packer.pack("payload"))
        return b"".join(head), body


def decode(data: bytes, *, max_bytes: int = MAX_MESSAGE_BYTES) -> Envelope:
    """Parse and validate one message.

    Raises:
        ProtocolError: for anything but a well-formed envelope of this protocol
            version: truncated or malformed bytes, a size over `max_bytes`, an
            unknown kind, an extra or missing field, a bad tensor, NaN or Inf in
            an update.
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise ProtocolError(f"expected bytes, got {type(data).__name__}")
    if len(data) > max_bytes:
        raise ProtocolError(
            f"size: message of {len(data)} bytes is over the limit of {max_bytes}"
        )
    raw = _unpack(data, _ext_hook, max_bytes=max_bytes)
    if not isinstance(raw, dict):
        raise ProtocolError(f"expected a map at the top, got {type(raw).__name__}")
    version = raw.get("protocol_version")
    if version != PROTOCOL_VERSION:
        raise ProtocolError(
            one_line(
                f"protocol_version: {version!r} is not supported"
                f" (this side speaks {PROTOCOL_VERSION})"
            )
        )
    _check_items(raw.get("payload"))
    try:
        return ENVELOPE_ADAPTER.validate_python(raw)
    except ValidationError as exc:
        raise ProtocolError(describe(exc, max_problems=MAX_PROBLEMS)) from exc
    except Exception as exc:
        raise ProtocolError(one_line(f"invalid message: {exc}")) from exc


def _unpack(
    data: bytes,
    ext_hook: Callable[[int, bytes], Any],
    *,
    max_bytes: int,
    most: int = MAX_OBJECTS,
    max_text: int = MAX_TEXT_BYTES,
) -> Any:
    """`data` unpacked by msgpack within the limits; `ProtocolError` otherwise.

    The limits bound what msgpack builds, not only the bytes it reads: a
    megabyte of one-byte empty maps would otherwise become a million objects,
    and a million validation errors. msgpack bounds each array, map and
    string; `count_objects` (scan.py) bounds them all together, before any
    is built.
    """
    try:
        count_objects(data, most, max_items=MAX_ITEMS, max_keys=MAX_KEYS)
        return msgpack.unpackb(
            data,
            ext_hook=ext_hook,
            raw=False,
            max_array_len=MAX_ITEMS,
            max_map_len=MAX_KEYS,
            max_str_len=max_text,
            max_bin_len=max_text,
            max_ext_len=max_bytes,
        )
    except ProtocolError:
        raise
    except Exception as exc:  # msgpack raises several unrelated types
        detail = str(exc) or type(exc).__name__  # some carry no text
        raise ProtocolError(
            one_line(f"truncated or malformed message: {detail}")
        ) from exc


def _check_items(payload: Any) -> None:
    """Refuse a sequence field longer than its schema allows, before pydantic
    builds (and judges) its items."""
    if not isinstance(payload, dict):
        return
    kind = payload.get("kind")
    limits = ITEM_LIMITS.get(kind) if isinstance(kind, str) else None
    for name, most in (limits or {}).items():
        value = payload.get(name)
        if isinstance(value, list | dict) and len(value) > most:
            raise ProtocolError(
                f"payload.{kind}.{name}: {len(value)} items, at most {most}"
            )


def describe(error: ValidationError, *, max_problems: int | None = None) -> str:
    """One entry per problem, `field.path: what is wrong`, joined by "; ".

    With `max_problems`, only the first ones are named and the rest counted,
    and the whole is one short line (`one_line`): a refusal reason stays
    short however many items were wrong.
    """
    problems = []
    items = error.errors(include_url=False, include_input=False)
    for item in items[:max_problems]:
        where = ".".join(str(part) for part in item["loc"]) or "message"
        problems.append(f"{where}: {item['msg']}")
    if max_problems is None:
        return "; ".join(problems)
    if len(items) > max_problems:
        problems.append(f"and {len(items) - max_problems} more")
    return one_line("; ".join(problems))


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")


def one_line(text: str, limit: int = MAX_REASON) -> str:
    """`text` as one printable line of at most `limit` characters: control
    characters (newlines, terminal escapes) become spaces, the rest is cut."""
    flat = _CONTROL.sub(" ", text[: limit * 4]).strip()
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def printable(text: str) -> str:
    """`text` safe to print: each character that is not printable (a terminal
    escape, a newline) written as a Python repr writes it (`\\x1b`, `\\n`),
    so the reader sees what was there and the terminal obeys none of it."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def to_json_form(data: bytes, *, digests: bool = False) -> Any:
    """An encoded message as plain JSON values, each tensor shown by
    `tensor.json_form` (what the published schema describes); with
    `digests`, each tensor also shows the SHA-256 of its bytes, so two forms
    differ where the values do. Raises `ProtocolError` for bytes that are not
    msgpack."""

    def hook(code: int, payload: bytes) -> Any:
        if code != TENSOR_EXT:
            raise ProtocolError(f"unknown extension type {code}")
        form = json_form(payload)
        if digests:
            form["sha256"] = hashlib.sha256(payload).hexdigest()
        return form

    return _unpack(data, hook, max_bytes=MAX_MESSAGE_BYTES)


def pack_record(record: Mapping[str, Any]) -> bytes:
    """One length-prefixed frame of a record stream (a trace): 4 bytes of
    little-endian length, then the record as msgpack."""
    body: bytes = msgpack.packb(dict(record), use_bin_type=True)
    return len(body).to_bytes(4, "little") + body


def pack_map(record: Mapping[str, Any]) -> bytes:
    """`record` as one msgpack map, tensors as extensions of type 1: the body
    of a transport frame (`transport.py`), without its length prefix."""
    body: bytes = msgpack.packb(dict(record), default=_default, use_bin_type=True)
    return body


def unpack_map(data: bytes, *, max_bytes: int = MAX_MESSAGE_BYTES) -> dict[str, Any]:
    """A transport frame's body as a map, within the limits of a record (a
    few dozen objects; strings up to `max_bytes`). Raises `ProtocolError`
    for anything else."""
    found = _unpack(
        data,
        _ext_hook,
        max_bytes=max_bytes,
        most=MAX_RECORD_OBJECTS,
        max_text=max_bytes,
    )
    if not isinstance(found, dict):
        raise ProtocolError(f"expected a map, got {type(found).__name__}")
    return found


def read_records(
    stream: BinaryIO, *, max_bytes: int = MAX_RECORD_BYTES
) -> Iterator[dict[str, Any]]:
    """The records of a stream written with `pack_record`, each a map read
    within the limits of a message; a frame cut short at the end (a run
    killed while writing) is left out.

    Raises:
        ProtocolError: a frame over `max_bytes` (refused before its body is
            read), or a body that is not one map within the limits.
    """
    number = 0
    while len(prefix := stream.read(4)) == 4:
        size = int.from_bytes(prefix, "little")
        if size > max_bytes:
            raise ProtocolError(
                f"record {number}: a frame of {size} bytes, over the limit of"
                f" {max_bytes}"
            )
        body = stream.read(size)
        if len(body) < size:
            return
        try:
            record = _unpack(
                body,
                _ext_hook,
                max_bytes=max_bytes,
                most=MAX_RECORD_OBJECTS,
                max_text=max_bytes,
            )
        except ProtocolError as exc:
            raise ProtocolError(f"record {number}: {exc}") from exc
        if not isinstance(record, dict):
            raise ProtocolError(
                f"record {number}: expected a map, got {type(record).__name__}"
            )
        yield record
        number += 1
