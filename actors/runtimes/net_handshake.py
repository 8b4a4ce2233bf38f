"""The server's half of the transport's handshake (docs/protocol.md,
*Transport*): hello, challenge, auth, then accepted or refused, then the
client's join request. What a client is sent when it asks: its spec as JSON,
or its samples as tensors (`client_data`).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import torch

from clusterfed.data import load_dataset
from clusterfed.protocol import (
    PROTOCOL_VERSION,
    JoinRequest,
    ProtocolError,
    decode,
    one_line,
)
from clusterfed.protocol.transport import (
    NONCE_BYTES,
    Accepted,
    Auth,
    Challenge,
    ClientData,
    Hello,
    Refused,
    decode_control,
    encode_control,
    verify,
)

from ..client import client_address
from ..spec import ClientSpec, rotate
from .net_io import HANDSHAKE_TIMEOUT_S, read_frame, write_frame


class Refusal(ProtocolError):
    """A connection refused during its handshake; the reason is sent to it."""


@dataclass(frozen=True)
class Admitted:
    """A connection that authenticated as `client`, and its join request."""

    client: int
    want: tuple[str, ...]
    join: bytes


async def admit(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    tokens: Mapping[int, str],
    spec_of: Callable[[int], Awaitable[ClientSpec | None]],
    *,
    timeout: float = HANDSHAKE_TIMEOUT_S,
) -> Admitted:
    """Run the handshake on a new connection.

    Raises:
        Refusal: the reason the connection is refused (already sent to it
            where the connection still takes writes).
    """
    try:
        return await _admit(reader, writer, tokens, spec_of, timeout)
    except (ProtocolError, ConnectionError) as exc:
        reason = one_line(str(exc))
        if not isinstance(exc, ConnectionError):
            with contextlib.suppress(ConnectionError):
                await write_frame(writer, encode_control(Refused(reason=reason)))
        raise Refusal(reason) from exc


async def _admit(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    tokens: Mapping[int, str],
    spec_of: Callable[[int], Awaitable[ClientSpec | None]],
    timeout: float,
) -> Admitted:
    hello = await _next(reader, Hello, "hello", timeout)
    client = hello.client_id
    if hello.protocol_version != PROTOCOL_VERSION:
        raise ProtocolError(
            f"protocol_version: {hello.protocol_version} is not supported"
            f" (this side speaks {PROTOCOL_VERSION})"
        )
    token = tokens.get(client)
    nonce = secrets.token_bytes(NONCE_BYTES)
    await write_frame(writer, encode_control(Challenge(nonce=nonce)))
    auth = await _next(reader, Auth, "auth", timeout)
    # One answer for an unknown id and a wrong token: a stranger learns
    # nothing of which ids are external.
    if token is None or not verify(token, nonce, client, auth.mac):
        raise ProtocolError(f"client {client}: wrong credentials")
    spec = await spec_of(client)
    if spec is None:
        raise ProtocolError(f"client {client} is not in the run (it has left)")
    await write_frame(writer, encode_control(accepted(spec, hello.want)))
    join = await read_frame(reader, header_timeout=timeout, body_timeout=timeout)
    if join is None:
        raise ConnectionResetError(f"client {client} left before its join request")
    envelope = decode(join)
    payload = envelope.payload
    if (
        not isinstance(payload, JoinRequest)
        or payload.client_id != client
        or envelope.sender != client_address(client)
    ):
        raise ProtocolError(
            f"client {client}: expected its join_request, got a"
            f" {payload.kind} from {envelope.sender}"
        )
    return Admitted(client, hello.want, join)


_Step = TypeVar("_Step", Hello, Auth)


async def _next(
    reader: asyncio.StreamReader, kind: type[_Step], name: str, timeout: float
) -> _Step:
    body = await read_frame(reader, header_timeout=timeout, body_timeout=timeout)
    if body is None:
        raise ConnectionResetError(f"the connection closed before its {name}")
    message = decode_control(body)
    if not isinstance(message, kind):
        raise ProtocolError(f"expected a {name}, got a {message.type}")
    return message


def accepted(spec: ClientSpec, want: tuple[str, ...]) -> Accepted:
    """What an admitted client is sent: its spec and data, as it asked."""
    return Accepted(
        client_id=spec.id,
        spec=spec.model_dump_json() if "spec" in want else None,
        data=client_data(spec) if "data" in want else None,
    )


def client_data(spec: ClientSpec) -> ClientData:
    """The client's training and held-out samples as it reads them: inputs
    rotated by its feature skew and flattened, labels through its label
    permutation (as `spec.build_trainer` builds them). Its test set drawn
    from the dataset's test split, where it has one, is not sent: a client
    fed this way reports its held-out accuracy."""
    data = load_dataset(spec.dataset, spec.dataset_root)
    y = data.y
    if spec.label_permutation is not None:
        y = torch.tensor(spec.label_permutation)[y]

    def rows(indices: list[int]) -> tuple[np.ndarray, np.ndarray]:
        index = torch.tensor(indices, dtype=torch.long)
        x = data.x[index]
        if spec.rotation % 360:
            x = rotate(x, spec.rotation)
        flat = x.reshape(len(index), -1).to(torch.float32).numpy()
        return flat, y[index].to(torch.int64).numpy()

    x_train, y_train = rows(spec.train)
    x_test, y_test = rows(spec.test)
    return ClientData(
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        n_classes=data.n_classes,
    )
