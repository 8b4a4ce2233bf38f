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
from typing import Any, BinaryIO, Literal

from clusterfed.protocol import PROTOCOL_VERSION, ProtocolError
from clusterfed.protocol.codec import pack_record, to_json_form, unpack_records

from .runtimes import Runtime
from .spec import ClientSpec

TRACE_FILE = "trace.msgpack"
TraceMode = Literal["full", "headers"]
TRACE_MODES: tuple[TraceMode, ...] = ("full", "headers")
Role = Literal["request", "reply", "inbound", "answer"]
"""A server request through the runtime, the client's reply to it, a message
the client sent on its own (join, leave), the server's answer to that."""


@dataclass(frozen=True)
class TraceRecord:
    """One message of a trace (see the module docstring)."""

    dir: Literal["down", "up"]
    client: int
    round: int
    sim: float
    wall: float
    size: int
    kind: str | None
    msg_id: str | None
    in_reply_to: str | None
    data: bytes | None = None
    outcome: str | None = None  # "no reply" or the runtime's error, for "up"
    role: Role = "request"

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> TraceRecord:
        return cls(**{k: v for k, v in raw.items() if k != "type"})


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


def read_trace(folder: Path) -> tuple[dict[str, Any], list[TraceRecord]]:
    """The header and the message records of the trace in `folder`.

    Raises:
        FileNotFoundError: the folder holds no trace.
        ValueError: the file is not a trace.
    """
    raw = unpack_records((Path(folder) / TRACE_FILE).read_bytes())
    if not raw or raw[0].get("type") != "header":
        raise ValueError(f"{folder / TRACE_FILE}: not a clusterfed trace")
    return raw[0], [TraceRecord.of(r) for r in raw[1:]]


class TracingRuntime:
    """A runtime that records every request and reply it delivers."""

    def __init__(self, runtime: Runtime, writer: TraceWriter) -> None:
        self.inner = runtime
        self.writer = writer
        self.name = runtime.name

    @property
    def parallelism(self) -> int | None:
        return getattr(self.inner, "parallelism", None)

    async def start(self) -> None:
        await self.inner.start()

    async def add(self, specs: Sequence[ClientSpec]) -> list[bytes]:
        return await self.inner.add(specs)

    async def update(self, spec: ClientSpec) -> None:
        await self.inner.update(spec)

    async def remove(self, client: int, reason: str) -> bytes:
        return await self.inner.remove(client, reason)

    async def request(self, client: int, data: bytes) -> bytes | None:
        self.writer.message("request", client, data)
        try:
            reply = await self.inner.request(client, data)
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

    async def states(self) -> dict[int, Any]:
        return await self.inner.states()

    async def restore(self, states: Mapping[int, Any]) -> None:
        await self.inner.restore(states)

    async def settle(self) -> None:
        await self.inner.settle()

    async def close(self) -> None:
        try:
            await self.inner.close()
        finally:
            self.writer.close()
