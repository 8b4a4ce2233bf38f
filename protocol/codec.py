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
    return encode_many([envelope])[0]


def encode_many(envelopes: Sequence[Envelope]) -> list[bytes]:
    """Serialise envelopes; those sharing one payload object pack it once.

    A server that sends one model to many clients builds one payload and many
    envelopes; each result is byte-for-byte what `encode` gives alone.
    """
    packer = msgpack.Packer(default=_default, use_bin_type=True)
    payloads: dict[int, bytes] = {}
    encoded = []
    for envelope in envelopes:
        body = payloads.get(id(envelope.payload))
        if body is None:
            body = packer.pack(envelope.payload.model_dump(mode="python"))
            payloads[id(envelope.payload)] = body
        head = envelope.model_dump(mode="python", exclude={"payload"})
        parts = [packer.pack_map_header(len(head) + 1)]
        for key, value in head.items():
            parts += [packer.pack(key), packer.pack(value)]
        parts += [packer.pack("payload"), body]
        encoded.append(b"".join(parts))
    return encoded


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
        raise ProtocolError(f"truncated or malformed message: {exc}") from exc
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
