"""The wire codec: `encode` an envelope to msgpack bytes, `decode` them back.

This is the only module that imports msgpack. `decode` trusts nothing: every
failure, whatever layer it comes from, leaves as a `ProtocolError` that names
the problem, so a receiver can refuse and count a bad message and carry on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgpack
import numpy as np
from pydantic import ValidationError

from .errors import ProtocolError
from .messages import ENVELOPE_ADAPTER, Envelope
from .tensor import TENSOR_EXT, pack_tensor, unpack_tensor
from .version import PROTOCOL_VERSION

MAX_MESSAGE_BYTES = 256 * 1024 * 1024
"""Default limit on one encoded message (a 64M-parameter float32 model)."""


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
        packer = self._packer
        cached = self._payloads.get(id(envelope.payload))
        if cached is None:
            body = packer.pack(envelope.payload.model_dump(mode="python"))
            self._payloads[id(envelope.payload)] = (envelope.payload, body)
        else:
            body = cached[1]
        head = envelope.model_dump(mode="python", exclude={"payload"})
        parts = [packer.pack_map_header(len(head) + 1)]
        for key, value in head.items():
            parts += [packer.pack(key), packer.pack(value)]
        parts += [packer.pack("payload"), body]
        return b"".join(parts)


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
    try:
        raw = msgpack.unpackb(data, ext_hook=_ext_hook, raw=False)
    except ProtocolError:
        raise
    except Exception as exc:  # msgpack raises several unrelated types
        detail = str(exc) or type(exc).__name__  # some carry no text
        raise ProtocolError(f"truncated or malformed message: {detail}") from exc
    if not isinstance(raw, dict):
        raise ProtocolError(f"expected a map at the top, got {type(raw).__name__}")
    version = raw.get("protocol_version")
    if version != PROTOCOL_VERSION:
        raise ProtocolError(
            f"protocol_version: {version!r} is not supported"
            f" (this side speaks {PROTOCOL_VERSION})"
        )
    try:
        return ENVELOPE_ADAPTER.validate_python(raw)
    except ValidationError as exc:
        raise ProtocolError(describe(exc)) from exc
    except Exception as exc:
        raise ProtocolError(f"invalid message: {exc}") from exc


def describe(error: ValidationError) -> str:
    """One line per problem: `field.path: what is wrong`."""
    problems = []
    for item in error.errors(include_url=False, include_input=False):
        where = ".".join(str(part) for part in item["loc"]) or "message"
        problems.append(f"{where}: {item['msg']}")
    return "; ".join(problems)
