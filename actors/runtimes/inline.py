"""The inline runtime: every client actor in this process, on the event loop.

For tests, the step harness and one-core machines: a request is served where
it is made, so nothing else trains at the same time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..host import ClientHost, compute_on_one_thread
from ..spec import ClientSpec


class InlineRuntime:
    """Hosts every client in one `ClientHost` of this process."""

    name = "local"

    def __init__(self) -> None:
        self.host = ClientHost()
        self._restore_threads: Callable[[], None] | None = None

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

    async def request(self, client: int, data: bytes) -> bytes | None:
        return await self.host.handle(client, data)

    async def states(self) -> dict[int, Any]:
        return self.host.states()

    async def restore(self, states: Mapping[int, Any]) -> None:
        self.host.restore(states)

    async def settle(self) -> None:
        """Nothing restarts in this process."""

    async def close(self) -> None:
        if self._restore_threads is not None:
            self._restore_threads()
            self._restore_threads = None
