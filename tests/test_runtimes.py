"""Every runtime declares what the courier calls (issue 32): how many hosts
compute at once, and a request in two parts, head and body; the courier and
the tracing wrapper hand the parts on as they came."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from pathlib import Path

import pytest

from clusterfed.actors import InlineRuntime, ProcessRuntime, Runtime
from clusterfed.actors.courier import MAX_IN_FLIGHT, Courier
from clusterfed.actors.reply_books import ReplyBooks
from clusterfed.actors.runtimes.ray import RayRuntime
from clusterfed.actors.trace import TraceWriter, TracingRuntime, read_trace
from clusterfed.driving import drive
from clusterfed.federation import Federation
from clusterfed.replay import ReplayReport, ReplayRuntime
from clusterfed.testing import ServerHarness
from helpers import small_scenario

Build = Callable[[Path], Runtime]

# Each runtime, built without starting it, and the hosts it says compute at once.
RUNTIMES: dict[str, tuple[Build, int | None]] = {
    "inline": (lambda _: InlineRuntime(), 1),
    "processes": (lambda _: ProcessRuntime(3), 3),
    "traced": (
        lambda out: TracingRuntime(ProcessRuntime(3), TraceWriter(out, "headers", "")),
        3,
    ),
    "ray": (lambda _: RayRuntime(), None),
    "harness": (lambda _: ServerHarness(small_scenario(clients=2, rounds=1)), None),
    "replay": (lambda _: ReplayRuntime([], ReplayReport()), None),
}


@pytest.mark.parametrize("name", sorted(RUNTIMES))
def test_every_runtime_declares_its_hosts_and_takes_a_request_in_two_parts(
    name: str, tmp_path: Path
) -> None:
    build, hosts = RUNTIMES[name]
    runtime = build(tmp_path)
    parameters = list(inspect.signature(runtime.request).parameters)
    assert parameters == ["client", "head", "body"]
    assert runtime.parallelism == hosts
    expected = MAX_IN_FLIGHT if hosts is None else min(MAX_IN_FLIGHT, 8 * hosts)
    assert Courier(runtime, ReplyBooks()).in_flight() == expected
    if isinstance(runtime, TracingRuntime):
        runtime.writer.close()


class PartsSeen(InlineRuntime):
    """In-process clients; notes the parts of every request."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[tuple[bytes, bytes]] = []

    async def request(self, client: int, head: bytes, body: bytes) -> bytes | None:
        self.parts.append((head, body))
        return await super().request(client, head, body)


def test_a_traced_runtime_gets_one_body_for_every_client_of_a_payload(
    tmp_path: Path,
) -> None:
    scenario = small_scenario(clients=4, rounds=1)
    inner = PartsSeen()
    config = {"scenario": scenario.model_dump(mode="json")}
    federation = Federation(scenario, inner, tmp_path, config=config, trace="full")
    asyncio.run(drive(federation))
    # The round's train tasks carry one model: one body object for all four.
    bodies = [body for _, body in inner.parts if body]
    assert len(bodies) >= 4
    assert any(sum(b is body for b in bodies) >= 4 for body in bodies)
    # What the trace recorded is what the clients received: head + body.
    _, records = read_trace(tmp_path)
    sent = [r.data for r in records if r.role == "request"]
    assert sent == [head + body for head, body in inner.parts]
