"""`clusterfed trace DIR`: what a trace holds, per round and client, readable.

Each request is shown with what came back (the reply's kind, or "no reply",
or the runtime's error), both sizes, and the server's verdict on the reply
in brackets (accepted, late, failed or rejected, with the reason; traces
written before verdicts were recorded show none); messages a client sent on
its own (joins, leaves) with the server's answer. Filters pick clients, rounds and
kinds; `--json` gives the records themselves (without their bytes).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from pathlib import Path

from clusterfed.actors.trace import TraceHeader, TraceRecord, read_trace
from clusterfed.protocol.codec import printable


def select(
    records: Iterable[TraceRecord],
    *,
    clients: Sequence[int] = (),
    rounds: Sequence[int] = (),
    kinds: Sequence[str] = (),
) -> list[TraceRecord]:
    """The records of the given clients, rounds and kinds (all when empty); a
    reply goes with its request whatever its own kind."""
    chosen: list[TraceRecord] = []
    keep_reply: set[int] = set()
    keep_verdict: set[int] = set()  # whose reply was kept: its verdict goes too
    for record in records:
        if clients and record.client not in clients:
            continue
        if rounds and record.round not in rounds:
            continue
        if record.role in ("reply", "answer") and record.client in keep_reply:
            keep_reply.discard(record.client)
            keep_verdict.add(record.client)
            chosen.append(record)
            continue
        if record.role == "verdict":
            # With a kind filter, only the verdicts on the replies kept.
            if not kinds or record.client in keep_verdict:
                chosen.append(record)
            keep_verdict.discard(record.client)
            continue
        keep_verdict.discard(record.client)
        if kinds and record.kind not in kinds:
            continue
        if record.role in ("request", "inbound"):
            keep_reply.add(record.client)
        chosen.append(record)
    return chosen


def as_json(records: Iterable[TraceRecord]) -> str:
    return json.dumps(
        [{k: v for k, v in asdict(r).items() if k != "data"} for r in records],
        indent=1,
    )


def as_text(header: TraceHeader, records: Sequence[TraceRecord]) -> str:
    """Per round, each client's exchanges: `kind size → kind size`; what the
    trace's writer chose (kinds, errors) is escaped, never sent raw to a
    terminal."""
    lines = [
        f"trace of protocol version {header.get('protocol_version')},"
        f" {header.get('mode')} mode,"
        f" {sum(r.role != 'verdict' for r in records)} messages"
    ]
    by_round: dict[int, dict[int, list[str]]] = {}
    totals: dict[int, list[int]] = {}
    pending: dict[int, str] = {}
    unjudged: dict[tuple[int, int], int] = {}  # (round, client) → its reply's line
    for r in records:
        lines_of = by_round.setdefault(r.round, {}).setdefault(r.client, [])
        if r.role == "verdict":
            # The verdict on the client's latest reply, beside its sizes; a
            # verdict on a request never sent (an unreachable client) alone.
            verdict = f"[{printable(r.outcome or '?')}]"
            at = unjudged.pop((r.round, r.client), None)
            if at is None:
                lines_of.append(verdict)
            else:
                lines_of[at] += f" {verdict}"
            continue
        total = totals.setdefault(r.round, [0, 0])
        total[0 if r.dir == "down" else 1] += r.size
        shown = f"{printable(r.kind or 'undecodable')} {_size(r.size)}"
        if r.role in ("request", "inbound"):
            pending[r.client] = shown
            lines_of.append(shown)
        else:
            answer = printable(r.outcome) if r.outcome is not None else shown
            start = pending.pop(r.client, "?")
            if lines_of and lines_of[-1] == start:
                lines_of[-1] = f"{start} → {answer}"
            else:
                lines_of.append(f"→ {answer}")
            if r.role == "reply":
                unjudged[(r.round, r.client)] = len(lines_of) - 1
    for round_, clients in sorted(by_round.items()):
        down, up = totals[round_]
        label = "before the first round" if round_ < 0 else f"round {round_}"
        lines.append(f"{label}: {_size(down)} down, {_size(up)} up")
        for client, exchanges in sorted(clients.items()):
            lines.append(f"  client {client}: " + "; ".join(exchanges))
    return "\n".join(lines)


def report(
    folder: str | Path,
    *,
    clients: Sequence[int] = (),
    rounds: Sequence[int] = (),
    kinds: Sequence[str] = (),
    json_output: bool = False,
) -> str:
    """The trace in `folder`, filtered, as text or JSON."""
    header, records = read_trace(Path(folder))
    chosen = select(records, clients=clients, rounds=rounds, kinds=kinds)
    return as_json(chosen) if json_output else as_text(header, chosen)


def _size(n: int) -> str:
    if n >= 1_000_000:
        return f"{n / 1e6:.1f} MB"
    if n >= 1_000:
        return f"{n / 1e3:.1f} kB"
    return f"{n} B"
