"""A step harness for protocol tests: a real parameter server, no runtime.

`ServerHarness` builds the server of a scenario and hands the test every
request as the server sends it; the test answers it — with the real client's
reply (`honest`), scripted bytes, a rewritten reply, nothing (the client
never answers: the request fails as a timeout), or an exception (the runtime
failed) — and then asserts on the outcome, the rejections and the models.

    async def test_a_nan_update_is_refused():
        harness = ServerHarness(small_scenario())
        await harness.join()

        async def answer(request):
            reply = await harness.honest(request)
            return nan_delta(reply) if request.kind == "train_task" else reply

        outcome = await harness.run_round(0, answer)
        assert outcome.rejected_messages == 1

As a pytest fixture: `@pytest.fixture def harness(): return ServerHarness(...)`.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from clusterfed.actors import Client, ClientSpec, ParameterServer, RoundOutcome
from clusterfed.actors.asynchronous import AsyncDriver
from clusterfed.actors.client import ClientState
from clusterfed.protocol import Envelope, ProtocolError, Welcome, decode
from clusterfed.scenarios import RunPlan, Scenario, load_scenario, plan_run
from clusterfed.types import ClientId

from .federation import build_server


@dataclass(frozen=True)
class Request:
    """One request the server sent: to whom, its bytes, and what they say."""

    client: int
    data: bytes
    envelope: Envelope

    @property
    def kind(self) -> str:
        return self.envelope.payload.kind

    @property
    def round(self) -> int:
        return self.envelope.round


Answer = Callable[[Request], Awaitable[bytes | None] | bytes | None]
"""How a test answers a request: the reply's bytes, None for no reply at all
(the server's task times out), or an exception (the runtime failed)."""


class ServerHarness:
    """The parameter server of `scenario`, its requests handed to the test.

    Args:
        scenario: a `Scenario`, a built-in name or a scenario file.
        answer: the default answer to every request; the clients' honest
            replies by default.

    Attributes:
        plan: the scenario's plan (client specs, initial models, strategy).
        server: the `ParameterServer` under test.
        clients: a real `Client` actor for each client of the plan, which
            `honest` asks.
        requests: every request the server has sent, in order.
    """

    name = "harness"

    def __init__(
        self, scenario: Scenario | str | Path, *, answer: Answer | None = None
    ):
        resolved = (
            scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
        )
        self.plan: RunPlan = plan_run(resolved)
        self.clients: dict[int, Client] = {s.id: Client(s) for s in self.plan.clients}
        self.server: ParameterServer = build_server(self.plan, self)
        # A scenario in async mode runs its aggregations through the driver,
        # as a federation would: `run_round` is then one aggregation.
        self.driver = (
            AsyncDriver(
                self.server,
                concurrency=resolved.concurrency,
                max_staleness=resolved.max_staleness,
            )
            if resolved.mode == "async"
            else None
        )
        self.answer: Answer = answer if answer is not None else self.honest
        self.requests: list[Request] = []

    async def join(
        self,
        clients: Sequence[int] | None = None,
        *,
        data: Mapping[int, bytes] | None = None,
    ) -> None:
        """Let clients join: each sends its join request (the real client's,
        or `data[client]`) and must be welcomed."""
        for client in sorted(self.clients) if clients is None else clients:
            request = (data or {}).get(client) or self.clients[client].join_request()
            reply = decode(await self.server.handle(request, client)).payload
            if not isinstance(reply, Welcome):
                raise AssertionError(f"client {client} was not welcomed: {reply}")

    async def run_round(self, round: int, answer: Answer | None = None) -> RoundOutcome:
        """Run one round of the server (in async mode, one aggregation),
        every request answered by `answer` (the harness's default answer if
        None)."""
        previous = self.answer
        if answer is not None:
            self.answer = answer
        try:
            if self.driver is not None:
                return await self.driver.step(round)
            return await self.server.run_round(round)
        finally:
            self.answer = previous

    async def honest(self, request: Request) -> bytes | None:
        """The real client's reply to `request`."""
        return await self.clients[request.client].handle(request.data)

    # -- the runtime the server sees -----------------------------------------------

    parallelism: int | None = None
    """Hosts that compute at once, as a runtime declares them: None (the
    courier's most requests in flight) unless a test sets it."""

    async def request(self, client: int, head: bytes, body: bytes) -> bytes | None:
        data = head + body
        try:
            envelope = decode(data)
        except ProtocolError as exc:  # the server sent something undecodable
            raise AssertionError(f"the server sent a bad message: {exc}") from exc
        request = Request(client, data, envelope)
        self.requests.append(request)
        reply = self.answer(request)
        if inspect.isawaitable(reply):
            reply = await reply
        if reply is None:
            raise TimeoutError  # reported as the scenario's task timeout
        return reply

    async def start(self) -> None: ...

    async def add(self, specs: Sequence[ClientSpec]) -> list[bytes]:
        for spec in specs:
            self.clients[spec.id] = Client(spec)
        return [self.clients[s.id].join_request() for s in specs]

    async def update(self, spec: ClientSpec) -> None:
        self.clients[spec.id].update(spec)

    async def remove(self, client: int, reason: str) -> bytes:
        return self.clients.pop(client).leave_notice(reason)

    async def states(self) -> dict[ClientId, ClientState]:
        return {}

    async def restore(self, states: Mapping[ClientId, ClientState]) -> None: ...

    async def settle(self) -> None: ...

    async def close(self) -> None: ...
