"""A federation inside a Ray actor: the parameter server is a Ray actor too.

The driver starts (or joins) Ray, places one `FederationActor` on its own
node (it writes the results folder there) and asks it for rounds; the actor
runs the whole server side — server, scenario engine, clock, recorder — and
its `RayRuntime` talks to the client host actors. The driver only streams
the rows back.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from clusterfed.actors.runtimes.ray import RayRuntime
from clusterfed.actors.trace import TraceMode
from clusterfed.algorithms import Strategy
from clusterfed.algorithms.registry import is_builtin, register, resolve
from clusterfed.scenarios import Scenario

from .checkpoint import Checkpoint
from .federation import Federation
from .results import Row


class FederationActor:
    """A `Federation` hosted in a Ray actor (see `RemoteFederation`)."""

    def __init__(
        self,
        scenario: Scenario,
        runtime: RayRuntime,
        out: str,
        config: dict[str, Any],
        checkpoint_every: int | None,
        resume: Checkpoint | None,
        plugin: type[Strategy[Any]] | None = None,
        trace: TraceMode | None = None,
    ) -> None:
        if plugin is not None:  # an algorithm of the user's own (by value)
            register(scenario.algorithm, plugin)
        self.federation = Federation(
            scenario,
            runtime,
            Path(out),
            config=config,
            checkpoint_every=checkpoint_every,
            resume=resume,
            trace=trace,
        )

    async def start(self) -> int:
        return await self.federation.start()

    async def step(self, round: int) -> Row:
        return await self.federation.step(round)

    async def finish(
        self, interrupted: bool = False
    ) -> tuple[dict[str, Any], list[Row]]:
        return await self.federation.finish(interrupted=interrupted)

    async def checkpoint(self) -> str:
        return str(await self.federation.checkpoint())

    async def close(self) -> None:
        await self.federation.close()

    async def handle(self, data: bytes, client: int | None = None) -> bytes:
        """A message a client sent on its own (a restarted host's rejoin);
        `client`: the client whose host delivered it."""
        return await self.federation.handle(data, client)


def _plugin(algorithm: str) -> type[Strategy[Any]] | None:
    """The class of an algorithm that is not clusterfed's own, to hand to the
    actor: a `module:Class` one travels by value (its module need not be
    importable on the worker); a scenario script's travels by value anyway;
    an installed plug-in by reference."""
    if is_builtin(algorithm):
        return None
    cls = resolve(algorithm)
    module = sys.modules.get(cls.__module__)
    if ":" in algorithm and module is not None:
        # Ray's vendored cloudpickle has no annotations; there is no typed
        # way to register a module for pickling by value.
        ray.cloudpickle.register_pickle_by_value(module)  # type: ignore[no-untyped-call]
    return cls


class RemoteFederation:
    """The driver's side of a federation that runs in a Ray actor; it has the
    `Federation` methods a run loop calls."""

    def __init__(
        self,
        scenario: Scenario,
        runtime: RayRuntime,
        out: Path,
        *,
        config: dict[str, Any],
        checkpoint_every: int | None = None,
        resume: Checkpoint | None = None,
        trace: TraceMode | None = None,
    ) -> None:
        self.scenario = scenario
        self.out = out
        self._started_ray = False
        if not ray.is_initialized():
            ray.init(
                address=runtime.address,
                num_cpus=runtime.num_cpus if runtime.address is None else None,
                include_dashboard=False,
                logging_level=logging.WARNING,
                log_to_driver=False,
            )
            self._started_ray = runtime.address is None
        plugin = _plugin(scenario.algorithm)
        here = ray.get_runtime_context().get_node_id()
        self.actor: Any = (
            ray.remote(FederationActor)
            .options(
                num_cpus=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False),
            )
            .remote(
                scenario,
                runtime,
                str(out),
                config,
                checkpoint_every,
                resume,
                plugin,
                trace,
            )
        )

    async def start(self) -> int:
        first: int = await self.actor.start.remote()
        return first

    async def step(self, round: int) -> Row:
        row: Row = await self.actor.step.remote(round)
        return row

    async def finish(
        self, *, interrupted: bool = False
    ) -> tuple[dict[str, Any], list[Row]]:
        done: tuple[dict[str, Any], list[Row]] = await self.actor.finish.remote(
            interrupted
        )
        return done

    async def checkpoint(self) -> Path:
        written: str = await self.actor.checkpoint.remote()
        return Path(written)

    async def close(self) -> None:
        try:
            await self.actor.close.remote()
        finally:
            ray.kill(self.actor)
            if self._started_ray:
                ray.shutdown()
                self._started_ray = False
