"""The TCP transport: frames, the handshake's control messages, and the MAC.

A frame is 4 bytes of little-endian unsigned length and then that many bytes
of msgpack: one map (the framing `trace.msgpack` uses). The server's side of a
connection says at most `MAX_FRAME_BYTES` in a frame and refuses a longer
declared length before it reads the body. Before a client speaks the protocol
it authenticates by challenge and response (docs/protocol.md, *Transport*):

    client: hello {client_id, protocol_version, want}
    server: challenge {nonce: 16 random bytes}
    client: auth {mac: HMAC-SHA256(token, AUTH_CONTEXT + nonce + client id)}
    server: accepted {client_id, spec, data}   or   refused {reason}
    client: its join_request envelope; from then on, envelopes both ways

The token never crosses the wire and each nonce is fresh, so a recorded
`auth` opens no later connection. Control messages are maps tagged by `type`
(envelopes have none); `update` and `leave` travel server → client after the
handshake too.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from .codec import MAX_MESSAGE_BYTES, describe, pack_map, unpack_map
from .errors import ProtocolError
from .messages import MAX_COUNT, MAX_TEXT
from .tensor import Tensor

PREFIX = struct.Struct("<I")
"""A frame's length: 4 bytes, little-endian, unsigned."""
MAX_FRAME_BYTES = MAX_MESSAGE_BYTES
"""The longest frame body a side accepts (256 MiB): one message."""
NONCE_BYTES = 16
MAC_BYTES = 32
AUTH_CONTEXT = b"clusterfed-auth"
"""The bytes an authentication code starts with, before the nonce: a token's
MAC is good for nothing but this handshake."""
MAX_SPEC_BYTES = 16 * 1024 * 1024
"""The longest client spec (JSON) an `accepted` or `update` carries."""

Want = Literal["spec", "data"]


class _Control(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, allow_inf_nan=False, arbitrary_types_allowed=True
    )


class Hello(_Control):
    """A client opens: which client it claims to be, and what it wants sent.

    `want`: "spec" asks for the client's spec as JSON (what a clusterfed
    client builds its actor from); "data" for its samples as tensors (what a
    client without our datasets trains on)."""

    type: Literal["hello"] = "hello"
    protocol_version: int = Field(strict=True)
    client_id: int = Field(strict=True, ge=0, le=MAX_COUNT)
    want: tuple[Want, ...] = Field((), max_length=2)


class Challenge(_Control):
    type: Literal["challenge"] = "challenge"
    nonce: bytes = Field(min_length=NONCE_BYTES, max_length=NONCE_BYTES)


class Auth(_Control):
    type: Literal["auth"] = "auth"
    mac: bytes = Field(min_length=MAC_BYTES, max_length=MAC_BYTES, strict=True)


class ClientData(_Control):
    """A simulated client's samples, for a client that has no dataset of its
    own: inputs flattened (one row per sample, float32) and labels (int64),
    as the client reads them (after its scenario's rotation and label
    permutation)."""

    x_train: Tensor
    y_train: Tensor
    x_test: Tensor
    y_test: Tensor
    n_classes: int = Field(strict=True, ge=1)


class Accepted(_Control):
    type: Literal["accepted"] = "accepted"
    client_id: int = Field(strict=True, ge=0, le=MAX_COUNT)
    spec: str | None = Field(None, max_length=MAX_SPEC_BYTES)
    data: ClientData | None = None


class Refused(_Control):
    type: Literal["refused"] = "refused"
    reason: str = Field(max_length=MAX_TEXT)


class Update(_Control):
    """The client's spec changed (a drift): its new spec and data, as wanted."""

    type: Literal["update"] = "update"
    spec: str | None = Field(None, max_length=MAX_SPEC_BYTES)
    data: ClientData | None = None


class Leave(_Control):
    """The scenario makes this client leave: it answers with its `leave`
    envelope and the server closes the connection."""

    type: Literal["leave"] = "leave"
    reason: str = Field("", max_length=MAX_TEXT)


Control = Annotated[
    Hello | Challenge | Auth | Accepted | Refused | Update | Leave,
    Field(discriminator="type"),
]
CONTROL_ADAPTER: TypeAdapter[Control] = TypeAdapter(Control)


def frame(body: bytes) -> bytes:
    """`body` with its length prefix."""
    if len(body) > MAX_FRAME_BYTES:
        raise ProtocolError(
            f"size: a frame of {len(body)} bytes is over the limit of {MAX_FRAME_BYTES}"
        )
    return PREFIX.pack(len(body)) + body


def body_size(prefix: bytes, limit: int = MAX_FRAME_BYTES) -> int:
    """The body length a prefix declares; `ProtocolError` over `limit`, so a
    receiver refuses it before reading (or allocating) the body."""
    (size,) = PREFIX.unpack(prefix)
    if size > limit:
        raise ProtocolError(
            f"size: a frame declares {size} bytes, over the limit of {limit}"
        )
    return int(size)


def encode_control(
    message: Hello | Challenge | Auth | Accepted | Refused | Update | Leave,
) -> bytes:
    """A control message's frame body (no prefix); None fields are left out."""
    return pack_map(message.model_dump(mode="python", exclude_none=True))


def decode_control(body: bytes) -> Control:
    """A control message from a frame body; `ProtocolError` naming the problem."""
    raw = unpack_map(body, max_bytes=MAX_FRAME_BYTES)
    try:
        return CONTROL_ADAPTER.validate_python(raw)
    except ValidationError as exc:
        raise ProtocolError(describe(exc, max_problems=3)) from exc


def is_control(body: bytes) -> bool:
    """Whether a frame body is a control message: a map whose first key is
    `type`, as the server writes them (an envelope starts with
    `protocol_version`). Reads two bytes past the map's header."""
    return body[1:6] == b"\xa4type" and 0x80 <= body[0] <= 0x8F


def mac(token: str, nonce: bytes, client_id: int) -> bytes:
    """The authentication code of `client_id` for `nonce`: HMAC-SHA256 keyed
    by the token's UTF-8 bytes over AUTH_CONTEXT + nonce + the id as 8 bytes
    little-endian."""
    message = AUTH_CONTEXT + nonce + client_id.to_bytes(8, "little")
    return hmac.new(token.encode(), message, hashlib.sha256).digest()


def verify(token: str, nonce: bytes, client_id: int, code: bytes) -> bool:
    """Whether `code` is `mac(token, nonce, client_id)`, in constant time."""
    return hmac.compare_digest(mac(token, nonce, client_id), code)
