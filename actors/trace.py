"""Traces: every envelope of a run, in order, as it crossed the wire.

A trace is a stream of length-prefixed msgpack records (`codec.pack_record`)
in `trace.msgpack`: first a header (protocol version, the run's request-id
nonce, the mode), then one record per message: its direction ("down": server
to client, "up": client to server), the client, the round, simulated and wall
time, its size, kind and ids, and the encoded bytes unchanged (left out in
"headers" mode). A request that got no reply, or failed in the runtime, is
followed by an "up" record saying so. `TracingRuntime` records what passes
through a runtime; the federation records the messages clients send on their
own (joins, leaves) and the server's answers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, BinaryIO, Literal

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError, with_config
from typing_extensions import TypedDict  # pydantic needs it before Python 3.12

from clusterfed.protocol import PROTOCOL_VERSION, ProtocolError, describe
from clusterfed.protocol.codec import (
    MAX_PROBLEMS,
    pack_record,
    read_records,
    to_json_form,
)
from clusterfed.types import ClientId

from .client import ClientState
from .outcome import Exchange
from .runtimes import Runtime
from .spec import ClientSpec

TRACE_FILE = "trace.msgpack"
TraceMode = Literal["full", "headers"]
TRACE_MODES: tuple[TraceMode, ...] = ("full", "headers")
Role = Literal["request", "reply", "inbound", "answer", "verdict"]
"""A server request through the runtime, the client's reply to it, a message
the client sent on its own (join, leave), the server's answer to that, and
the server's verdict on a reply (in `outcome`: accepted, late, failed or
rejected, with the reason)."""

# A trace may come from anyone (a folder sent with a bug report): every field
# is checked for its type, none coerced, no key unknown.
_Count = Annotated[int, Field(strict=True, ge=0)]
_Time = Annotated[float, Field(strict=True, allow_inf_nan=False)]
_Id = Annotated[str, Field(strict=True, max_length=128)]


@dataclass(frozen=True)
class TraceRecord:
    """One message of a trace (see the module docstring)."""

    __pydantic_config__ = ConfigDict(extra="forbid")

    dir: Literal["down", "up"]
    client: _Count
    round: Annotated[int, Field(strict=True, ge=-1)]
    sim: _Time
    wall: _Time
    size: _Count
    kind: _Id | None
    msg_id: _Id | None
    in_reply_to: _Id | None
    data: Annotated[bytes, Field(strict=True)] | None = None
    # For "up": "no reply", or the runtime's error.
    outcome: Annotated[str, Field(strict=True)] | None = None
    role: Role = "request"


@with_config(ConfigDict(extra="forbid"))
class TraceHeader(TypedDict):
    """The first record of a trace."""

    type: Literal["header"]
    protocol_version: Annotated[int, Field(strict=True)]
    nonce: _Id
    mode: TraceMode


_RECORD = TypeAdapter(TraceRecord)
_HEADER = TypeAdapter(TraceHeader)


class TraceWriter:
    """Appends the records of one run to `folder/trace.msgpack`."""

    def __init__(self, folder: Path, mode: TraceMode, nonce: str) -> None:
        if mode not in TRACE_MODES:
            raise ValueError(f"trace mode must be one of {TRACE_MODES}, got {mode!r}")
        self.mode = mode
        self.round = -1
        self.sim = 0.0
        self._start = time.perf_counter()
        self._stream: BinaryIO = (folder / TRACE_FILE).open("wb")
        self._stream.write(
            pack_record(
                {
                    "type": "header",
                    "protocol_version": PROTOCOL_VERSION,
                    "nonce": nonce,
                    "mode": mode,
                }
            )
        )

    def message(self, role: Role, client: int, data: bytes) -> None:
        head = _head(data)
        self._write(
            {
                "role": role,
                "dir": "down" if role in ("request", "answer") else "up",
                "client": client,
                "size": len(data),
                **head,
                "data": data if self.mode == "full" else None,
            }
        )

    def missing(self, client: int, outcome: str) -> None:
        """The client's reply never came: "no reply", or the runtime's error."""
        self._write(
            {
                "role": "reply",
                "dir": "up",
                "client": client,
                "size": 0,
                "kind": None,
                "msg_id": None,
                "in_reply_to": None,
                "data": None,
                "outcome": outcome,
            }
        )

    def verdict(self, client: int, exchange: Exchange) -> None:
        """The server's verdict on a reply (or on its absence): "accepted",
        or the status and its reason ("late: …", "rejected: …")."""
        status = "accepted" if exchange.status == "ok" else exchange.status
        reply = exchange.reply
        self._write(
            {
                "role": "verdict",
                "dir": "up",
                "client": client,
                "size": 0,
                "kind": None,
                "msg_id": reply.msg_id if reply is not None else None,
                "in_reply_to": reply.in_reply_to if reply is not None else None,
                "data": None,
                "outcome": status
                if not exchange.reason
                else f"{status}: {exchange.reason}",
            }
        )

    def flush(self) -> None:
        self._stream.flush()

    def close(self) -> None:
        self._stream.close()

    def _write(self, record: dict[str, Any]) -> None:
        record.update(
            type="message",
            round=self.round,
            sim=self.sim,
            wall=time.perf_counter() - self._start,
        )
        record.setdefault("outcome", None)
        self._stream.write(pack_record(record))


def _head(data: bytes) -> dict[str, Any]:
    """The kind and ids of a message, or None for each of bytes that are not one."""
    try:
        form = to_json_form(data)
    except ProtocolError:
        form = None
    payload = form.get("payload") if isinstance(form, dict) else None
    kind = payload.get("kind") if isinstance(payload, dict) else None

    def text(value: Any) -> str | None:
        return value if isinstance(value, str) else None

    return {
        "kind": text(kind),
        "msg_id": text(form.get("msg_id")) if isinstance(form, dict) else None,
        "in_reply_to": text(form.get("in_reply_to"))
        if isinstance(form, dict)
        else None,
    }


def read_trace(folder: Path) -> tuple[TraceHeader, list[TraceRecord]]:
    """The header and the message records of the trace in `folder`, each
    read through the bounded decoder and checked field by field.

    Raises:
        FileNotFoundError: the folder holds no trace.
        ProtocolError: the file is not a trace, or a record is malformed (a
            one-line reason naming the record and the field).
    """
    path = Path(folder) / TRACE_FILE
    with path.open("rb") as stream:
        records = read_records(stream)
        first = next(records, None)
        if first is None or first.get("type") != "header":
            raise ProtocolError(f"{path}: not a clusterfed trace (no header)")
        header = _checked(_HEADER, first, path, 0)
        found = []
        for number, raw in enumerate(records, start=1):
            if raw.pop("type", None) != "message":
                raise ProtocolError(f"{path}: record {number}: not a message")
            found.append(_checked(_RECORD, raw, path, number))
    return header, found


def _checked(
    adapter: TypeAdapter[Any], raw: dict[str, Any], path: Path, at: int
) -> Any:
    try:
        return adapter.validate_python(raw)
    except ValidationError as exc:
        reason = describe(exc, max_problems=MAX_PROBLEMS)
        raise ProtocolError(f"{path}: record {at}: {reason}") from exc


class TracingRuntime:
    """A runtime that records every request and reply it delivers."""

    def __init__(self, runtime: Runtime, writer: TraceWriter) -> None:
        self.inner = runtime
        self.writer = writer
        self.name = runtime.name

    @property
    def parallelism(self) -> int | None:
        return self.inner.parallelism

    async def start(self) -> None:
        await self.inner.start()

    async def add(self, specs: Sequence[ClientSpec]) -> list[bytes]:
        return await self.inner.add(specs)

    async def update(self, spec: ClientSpec) -> None:
        await self.inner.update(spec)

    async def remove(self, client: int, reason: str) -> bytes:
        return await self.inner.remove(client, reason)

    async def request(self, client: int, head: bytes, body: bytes) -> bytes | None:
        # The parts go on as they came: a runtime that sends a shared body to
        # a host once still can when traced.
        self.writer.message("request", client, head + body)
        try:
            reply = await self.inner.request(client, head, body)
        except asyncio.CancelledError:  # the courier's timeout gave up on it
            self.writer.missing(client, "no reply")
            raise
        except Exception as exc:
            self.writer.missing(client, f"{type(exc).__name__}: {exc}")
            raise
        if reply is None:
            self.writer.missing(client, "no reply")
        else:
            self.writer.message("reply", client, reply)
        return reply

    async def states(self) -> dict[ClientId, ClientState]:
        return await self.inner.states()

    async def restore(self, states: Mapping[ClientId, ClientState]) -> None:
        await self.inner.restore(states)

    async def settle(self) -> None:
        await self.inner.settle()

    async def close(self) -> None:
        try:
            await self.inner.close()
        finally:
            self.writer.close()
