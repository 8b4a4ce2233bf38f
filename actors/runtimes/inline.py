"""The inline runtime: every client actor in this process, on the event loop.

For tests, the step harness and one-core machines: a request is served where
it is made, so nothing else trains at the same time.

Training blocks the event loop, so the courier's task timeout cannot preempt
a training step here. It is enforced between steps instead: before a request
is served and again before its reply is handed back, every timer already due
runs first. A request whose timeout passed while it waited is not served, and
one that trained past its timeout is reported as the courier reports any
timeout (failed, "no reply within T s"), not accepted; the time it trained is
spent all the same. A timeout counts from when the courier sent the request,
so requests sent with a step that overruns can run out of time behind it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence

from clusterfed.types import ClientId

from ..client import ClientState
from ..host import ClientHost, WaitingRequests, compute_on_one_thread
from ..spec import ClientSpec


class InlineRuntime:
    """Hosts every client in one `ClientHost` of this process."""

    name = "local"

    def __init__(self) -> None:
        self.host = ClientHost()
        self._restore_threads: Callable[[], None] | None = None
        self._lock: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None
        self._waiting = WaitingRequests(self.host)

    parallelism = 1
    """One host: this process."""

    async def start(self) -> None:
        # One thread, as in a worker: the same numerics in every runtime.
        self._restore_threads = compute_on_one_thread()

    async def add(self, specs: Sequence[ClientSpec]) -> list[bytes]:
        return self.host.add(specs)

    async def update(self, spec: ClientSpec) -> None:
        self.host.update(spec)

    async def remove(self, client: int, reason: str) -> bytes:
        return self.host.remove(client, reason)

    async def request(self, client: int, head: bytes, body: bytes) -> bytes | None:
        if self.host.cohort > 1:
            return await self._request_with_others(client, head + body)
        # One at a time, each checked just before it starts: requests sent
        # together would otherwise all pass the check before the first step
        # blocked the loop.
        async with self._serving():
            await _due_timers_first()
            reply = await self.host.handle(client, head + body)
        await _due_timers_first()
        return reply

    async def _request_with_others(self, client: int, data: bytes) -> bytes | None:
        # Timers due run before the batch is served, as before a lone one.
        reply = await self._waiting.serve(
            client, data, self._serving(), _due_timers_first
        )
        await _due_timers_first()
        return reply

    def _serving(self) -> asyncio.Lock:
        """The lock requests are served under, of the running loop (a
        runtime may serve one `asyncio.run` after another)."""
        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock[0] is not loop:
            self._lock = (loop, asyncio.Lock())
        return self._lock[1]

    async def states(self) -> dict[ClientId, ClientState]:
        return self.host.states()

    async def restore(self, states: Mapping[ClientId, ClientState]) -> None:
        self.host.restore(states)

    async def settle(self) -> None:
        """Nothing restarts in this process."""

    async def close(self) -> None:
        if self._restore_threads is not None:
            self._restore_threads()
            self._restore_threads = None


async def _due_timers_first() -> None:
    """Let every timer already due run before this task goes on.

    A bare yield (`sleep(0)`) resumes before timers that fell due while the
    loop was blocked; a timer due now is queued behind them, so a timeout
    that expired during a training step cancels this task here.
    """
    loop = asyncio.get_running_loop()
    due: asyncio.Future[None] = loop.create_future()
    loop.call_at(loop.time(), _set_unless_done, due)
    await due


def _set_unless_done(future: asyncio.Future[None]) -> None:
    if not future.done():  # cancelled by the timeout that ran first
        future.set_result(None)
