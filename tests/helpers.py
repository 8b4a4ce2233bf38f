"""Helpers shared by the tests: small scenarios that run in seconds on digits."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clusterfed.actors import Client, InlineRuntime, ParameterServer, Runtime
from clusterfed.federation import Federation, build_server, drive
from clusterfed.protocol import TrainConfig, Welcome, decode
from clusterfed.scenarios import DirichletPartition, ModelSpec, RunPlan, Scenario
from clusterfed.types import ClientId


def small_scenario(**changes: Any) -> Scenario:
    """Digits, 6 clients, a narrow MLP, 3 rounds: the smallest real federation."""
    base: dict[str, Any] = dict(
        name="small",
        partition=DirichletPartition(alpha=1.0),
        model=ModelSpec(name="mlp", hidden=[32]),
        train=TrainConfig(lr=0.05, momentum=0.9, batch_size=16, epochs=1),
        clients=6,
        rounds=3,
        seed=0,
    )
    base.update(changes)
    return Scenario(**base)


def read_rounds(out: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line) for line in (out / "rounds.jsonl").read_text().splitlines()
    ]


Tamper = Callable[[ClientId, bytes, bytes], bytes]


class TamperingRuntime(InlineRuntime):
    """Clients hosted in this process; `tamper(client, request, reply)` may
    rewrite a reply, or raise to make the exchange fail."""

    def __init__(self, tamper: Tamper | None = None) -> None:
        super().__init__()
        self.tamper = tamper

    @property
    def clients(self) -> dict[int, Client]:
        return self.host.clients

    async def request(self, client: int, data: bytes) -> bytes | None:
        reply = await super().request(client, data)
        if self.tamper is None or reply is None:
            return reply
        return self.tamper(ClientId(client), data, reply)


async def start_server(plan: RunPlan, runtime: Runtime) -> ParameterServer:
    """A parameter server for `plan` whose first clients have joined."""
    server = build_server(plan, runtime)
    for join in await runtime.add(plan.clients):
        reply = decode(await server.handle(join)).payload
        assert isinstance(reply, Welcome), reply
    return server


def traced_run(folder: Path, scenario: Scenario, mode: str = "full") -> list[dict]:
    """Run `scenario` in this process with a trace ("full" or "headers")."""
    config = {"scenario": scenario.model_dump(mode="json")}
    federation = Federation(
        scenario,
        InlineRuntime(),
        folder,
        config=config,
        trace=mode,  # type: ignore[arg-type]
    )
    return asyncio.run(drive(federation)).rows
