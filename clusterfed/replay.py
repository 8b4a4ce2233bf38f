"""Replay: re-drive a fresh server from a recorded trace, with no client training.

Every request the new server sends is looked up by its id in the trace
(`--trace` writes it) and compared with the recorded one byte for byte; the
client's recorded answer is delivered in its place (a recorded silence or
runtime failure happens again). The rows the replay writes are compared with
the recorded rounds.jsonl. The first differing request is reported by round,
client, kind and field, so a server or algorithm change that alters behaviour
shows where it first does.

A folder to replay may come from anyone: its trace is read through the wire's
bounded decoder, and its `package.module:Class` algorithm is imported only if
installed, never from the folder or the current one, unless `trust`.
"""

from __future__ import annotations

import json
from collections import defaultdict, deque
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from clusterfed.actors import ClientSpec
from clusterfed.actors.client import ClientState
from clusterfed.actors.trace import TraceRecord, read_trace
from clusterfed.algorithms.registry import no_local_code
from clusterfed.errors import ConfigError
from clusterfed.protocol import ProtocolError
from clusterfed.protocol.codec import printable, to_json_form
from clusterfed.scenarios import validate
from clusterfed.types import ClientId

from .diff import differences, first_difference
from .driving import drive, run_to_end
from .federation import Federation


@dataclass(frozen=True)
class Difference:
    """Where a replay first departs from the recording."""

    where: str
    recorded: Any
    replayed: Any

    def __str__(self) -> str:
        return printable(
            f"{self.where}: recorded {self.recorded!r}, replayed {self.replayed!r}"
        )


@dataclass
class ReplayReport:
    """What a replay compared, and the first difference of each kind."""

    requests: int = 0
    request_difference: Difference | None = None
    row_difference: Difference | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def same(self) -> bool:
        return self.request_difference is None and self.row_difference is None


class ReplayRuntime:
    """A runtime whose clients answer with what the trace recorded."""

    name = "replay"
    parallelism = None  # nothing computes here: the replies are recorded

    def __init__(self, records: Sequence[TraceRecord], report: ReplayReport) -> None:
        self.report = report
        self._joins: dict[int, deque[bytes]] = defaultdict(deque)
        self._leaves: dict[int, deque[bytes]] = defaultdict(deque)
        self._requests: dict[str, tuple[TraceRecord, TraceRecord | None]] = {}
        waiting: dict[int, TraceRecord] = {}
        for record in records:
            if record.role == "inbound" and record.data is not None:
                if record.kind == "join_request":
                    self._joins[record.client].append(record.data)
                elif record.kind == "leave":
                    self._leaves[record.client].append(record.data)
            elif record.role == "request" and record.msg_id is not None:
                waiting[record.client] = record
                self._requests[record.msg_id] = (record, None)
            elif record.role == "reply" and record.client in waiting:
                request = waiting.pop(record.client)
                assert request.msg_id is not None
                self._requests[request.msg_id] = (request, record)

    async def start(self) -> None: ...

    async def add(self, specs: Sequence[ClientSpec]) -> list[bytes]:
        return [
            _next(self._joins[s.id], f"join request of client {s.id}") for s in specs
        ]

    async def update(self, spec: ClientSpec) -> None: ...

    async def remove(self, client: int, reason: str) -> bytes:
        return _next(self._leaves[client], f"leave of client {client}")

    async def request(self, client: int, head: bytes, body: bytes) -> bytes | None:
        data = head + body
        self.report.requests += 1
        sent = to_json_form(data)
        found = self._requests.get(sent.get("msg_id"))
        if found is None:
            self._differ(f"client {client}: request {sent.get('msg_id')!r}", None, sent)
            raise LookupError("replay: the recording has no such request")
        recorded, reply = found
        if recorded.data != data:
            assert recorded.data is not None
            where = (
                f"round {recorded.round}, client {client}, {recorded.kind or 'message'}"
            )
            try:
                was_form = to_json_form(recorded.data, digests=True)
            except ProtocolError as exc:
                self._differ(where, f"no message ({exc})", "a message")
            else:
                now_form = to_json_form(data, digests=True)
                for path, was, now in differences(was_form, now_form):
                    self._differ(f"{where}{path}", was, now)
                    break
        if reply is None or reply.outcome == "no reply":
            raise TimeoutError  # the courier reports it as the recorded timeout
        if reply.outcome is not None:
            name, _, message = reply.outcome.partition(": ")
            # The recorded error again, under its recorded name when it is one.
            named = name if name.isidentifier() else "RecordedError"
            raise type(named, (Exception,), {})(message)
        return reply.data

    async def states(self) -> dict[ClientId, ClientState]:
        return {}

    async def restore(self, states: Mapping[ClientId, ClientState]) -> None: ...

    async def settle(self) -> None: ...

    async def close(self) -> None: ...

    def _differ(self, where: str, recorded: Any, replayed: Any) -> None:
        if self.report.request_difference is None:
            self.report.request_difference = Difference(where, recorded, replayed)


def replay(folder: str | Path, *, trust: bool = False) -> ReplayReport:
    """Replay the traced run in `folder` (see the module docstring).

    With `trust`, a `package.module:Class` algorithm may be imported from the
    current folder, as `run` does; without, only an installed one.

    Raises:
        ConfigError: the folder holds no full trace (or a malformed record,
            named) or no run configuration, or its algorithm is not
            installed (without `trust`).
    """
    folder = Path(folder)
    try:
        header, records = read_trace(folder)
        config = json.loads((folder / "config.json").read_text())
        recorded_rows = [
            json.loads(line)
            for line in (folder / "rounds.jsonl").read_text().splitlines()
        ]
    except (OSError, ValueError, ProtocolError) as exc:
        raise ConfigError(f"{folder}: nothing to replay: {exc}") from exc
    if header["mode"] != "full":
        raise ConfigError(
            f"{folder}: the trace holds headers only; replay needs --trace (full)"
        )
    if not isinstance(config, dict) or not isinstance(config.get("scenario"), dict):
        raise ConfigError(f"{folder / 'config.json'}: no scenario object in it")
    if not all(isinstance(row, dict) for row in recorded_rows):
        raise ConfigError(f"{folder / 'rounds.jsonl'}: a line is not a JSON object")
    with nullcontext() if trust else no_local_code(folder):
        return _replay(folder, header["nonce"], records, config, recorded_rows)


def _replay(
    folder: Path,
    nonce: str,
    records: Sequence[TraceRecord],
    config: dict[str, Any],
    recorded_rows: list[dict[str, Any]],
) -> ReplayReport:
    scenario = validate(config["scenario"], source=str(folder / "config.json"))
    scenario = scenario.model_copy(update={"rounds": len(recorded_rows)})
    report = ReplayReport()
    with TemporaryDirectory() as tmp:
        federation = Federation(
            scenario,
            ReplayRuntime(records, report),
            Path(tmp),
            config={"scenario": config["scenario"], "replay_of": str(folder)},
        )
        federation.server.courier.nonce = nonce
        result = run_to_end(drive(federation))
    report.rows = result.rows
    found = first_difference(_timeless(recorded_rows), _timeless(result.rows))
    if found is not None:
        report.row_difference = Difference(*found)
    return report


def _next(recorded: deque[bytes], what: str) -> bytes:
    if not recorded:
        raise ConfigError(f"replay: the trace holds no (further) {what}")
    return recorded.popleft()


def _timeless(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Rows without wall time, the one field a replay cannot reproduce."""
    return [
        json.loads(json.dumps({k: v for k, v in r.items() if k != "wall_time"}))
        for r in rows
    ]
