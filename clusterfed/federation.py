"""One object runs a federation: the strategy (built once), the parameter
server, the scenario engine, the simulated clock, the results recorder and the
runtime that hosts the clients.

    round r:  engine fires the events due (through this object's membership
              methods) → server.run_round(r) (describe · train · probe ·
              aggregate · evaluate) → clock.advance → recorder.record

`snapshot()`/`restore()` are the one place a checkpoint is taken and given
back. Under Ray the whole object runs inside one Ray actor (`remote.py`) and
the driver only asks it for rounds and streams the rows; `driving.drive`
runs either from start to end.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from clusterfed.actors import ClientSpec, ParameterServer, SimClock
from clusterfed.actors.asynchronous import AsyncDriver
from clusterfed.actors.availability import schedule
from clusterfed.actors.client_dp import ClientLevelDP
from clusterfed.actors.clock import WaitAll
from clusterfed.actors.courier import cohort_in_flight
from clusterfed.actors.faults import FaultyClientSpec
from clusterfed.actors.host import compute_on_one_thread
from clusterfed.actors.runtimes import Runtime
from clusterfed.actors.spec import PrivacyPlan
from clusterfed.actors.trace import TraceMode, TraceWriter, TracingRuntime
from clusterfed.algorithms.diagnostics import as_diagnostics
from clusterfed.errors import ConfigError, ScenarioWarning
from clusterfed.protocol import Shutdown, Welcome, decode
from clusterfed.scenarios import RunPlan, Scenario, ScenarioEngine, plan_run
from clusterfed.scenarios.build import AVAILABILITY_STREAM, STRATEGY_STREAM
from clusterfed.scenarios.population import Population
from clusterfed.scenarios.problems import scenario_warnings, unfired_time_events
from clusterfed.seeding import numpy_rng
from clusterfed.types import ClientId

from .checkpoint import (
    Checkpoint,
    FederationSnapshot,
    SummarySnapshot,
    write_checkpoint,
)
from .global_test import GlobalTest, backdoor_test
from .provenance import algorithm_record
from .results import Row, RunRecorder
from .run_summary import summary_extra


def build_server(
    plan: RunPlan, runtime: Runtime, clock: SimClock | None = None
) -> ParameterServer:
    """The parameter server of `plan`, its clients hosted by `runtime`, on
    `clock` (a fresh `plan.clock()` by default: the first clients' devices)."""
    s = plan.scenario
    return ParameterServer(
        strategy=plan.strategy,
        initial_models=plan.initial_models,
        train_config=plan.train_config,
        runtime=runtime,
        rng=numpy_rng(s.seed, STRATEGY_STREAM),
        clock=clock if clock is not None else plan.clock(),
        deadline=s.deadline,
        task_timeout_s=s.task_timeout(),
        max_update_norm=s.max_update_norm,
        max_update_ratio=s.max_update_ratio,
        max_weight_ratio=s.max_weight_ratio,
        n_classes=plan.dataset.n_classes,
        n_features=math.prod(plan.dataset.input_shape),
        client_dp=None if plan.client_dp is None else ClientLevelDP(plan.client_dp),
        max_in_flight=cohort_in_flight(s.compute.cohort, runtime.parallelism),
    )


class Federation:
    """A run of `scenario` on `runtime`, writing its results into `out`.

    Args:
        scenario: the resolved scenario.
        runtime: hosts the clients (inline, processes, Ray hosts).
        out: the results folder.
        config: what config.json records about the run.
        checkpoint_every: write a checkpoint after every N-th round.
        resume: a checkpoint of a stopped run in `out` to go on from.
        trace: record every envelope into `out/trace.msgpack` ("full"), or
            every envelope's header without its bytes ("headers").
    """

    def __init__(
        self,
        scenario: Scenario,
        runtime: Runtime,
        out: Path,
        *,
        config: Mapping[str, Any],
        checkpoint_every: int | None = None,
        resume: Checkpoint | None = None,
        trace: TraceMode | None = None,
    ) -> None:
        self.scenario = scenario
        self.out = out
        self.runtime = runtime
        self.config = dict(config)
        self.checkpoint_every = checkpoint_every
        self.plan = plan_run(scenario)
        # What ran, as built: every parameter, the train config sent.
        self.config.setdefault(
            "algorithm",
            algorithm_record(
                scenario.algorithm, self.plan.strategy, self.plan.train_config
            ),
        )
        if self.plan.dp_layers is not None:  # which clipping each layer takes
            self.config.setdefault("dp_layers", self.plan.dp_layers)
        self.clock = self.plan.clock(
            schedule(scenario.availability, scenario.seed, AVAILABILITY_STREAM)
        )
        # The clock holds the devices; the engine keeps them current.
        self.engine = ScenarioEngine(self.plan, self.clock)
        self.global_test = GlobalTest(scenario, self.plan.dataset)
        self.backdoor = backdoor_test(scenario, self.plan.dataset, self.plan.clients)
        self.server = build_server(self.plan, runtime, self.clock)
        # A lazy population's clients join for their round only.
        self.population: Population | None = None
        if scenario.population is not None:
            self.population = Population(self.plan)
        self.driver: AsyncDriver | None = None
        if scenario.mode == "async":
            self.driver = AsyncDriver(
                self.server,
                concurrency=scenario.concurrency,
                max_staleness=scenario.max_staleness,
            )
        self._resume = resume
        self._restore_threads: Callable[[], None] | None = None
        # Every client's DP plan as it joined, for the summary (a client that
        # leaves stays in it).
        self.privacy: dict[int, PrivacyPlan] = {}
        # The simulated time the last round started: the last moment a
        # time-keyed event could fire (None before any round of this process).
        self._last_round_start: float | None = None
        # What the scenario says but cannot do; in summary.json too.
        self.warnings: list[str] = []
        self._punctual_stragglers: set[int] = set()
        for text in scenario_warnings(scenario):
            self.warn(text)
        if scenario.rows == "summary" and (checkpoint_every or resume is not None):
            raise ConfigError(
                "rows = summary keeps no per-client rows to resume from; run"
                " it without checkpoint_every"
            )
        if resume is None:
            self.recorder = RunRecorder(out, self.config, detail=scenario.rows)
            self.first_round = 0
        else:
            # The same plan (all from the seed), then the checkpoint's position.
            self.engine.restore(resume.federation["engine"])
            # Before the recorder cuts rounds.jsonl back to the checkpoint.
            problem = self._summary_mismatch(resume.federation["summary"])
            if problem is not None:
                raise ConfigError(f"checkpoint refused: the summary's {problem}")
            self.recorder = RunRecorder(
                out, self.config, resume=resume.federation["recorder"]
            )
            self.first_round = resume.rounds_done
        self.trace: TraceWriter | None = None
        if trace is not None:
            self.trace = TraceWriter(out, trace, self.server.courier.nonce)
            self.server.on_book = self.trace.verdict
            self.runtime = TracingRuntime(runtime, self.trace)
            self.server.courier.runtime = self.runtime

    # -- the run ----------------------------------------------------------------

    async def start(self) -> int:
        """Start the runtime and let the clients join; returns the first round
        to run (after a checkpoint's, when resuming).

        The server computes on one thread from here to `close`, as every
        client host does: on more, a Gram matrix of 100 updates (Krum's,
        Bulyan's) sums in a different order and rounds differently, so its
        decisions would depend on the machine's cores and the runtime (the
        inline one already ran it on one); and a BLAS thread spinning
        beside busy hosts slowed that Gram matrix many times over.
        """
        self._restore_threads = compute_on_one_thread()
        await self.runtime.start()
        if self._resume is None:
            await self.add_clients(self.plan.clients)
        else:
            await self.add_clients(
                [self.engine.specs[c] for c in sorted(self.engine.specs)]
            )
            self.restore(self._resume.federation)
            await self.runtime.restore(self._resume.federation["clients"])
            # The checkpoint follows a round's record: its diagnostics are
            # those of the restored state.
            strategy = self.server.strategy
            self.recorder.diagnostics = as_diagnostics(
                strategy.diagnostics(self.server.state), type(strategy).__name__
            )
        return self.first_round

    async def step(self, round: int) -> Row:
        """Run one round: fire its events, run it, record it (and checkpoint)."""
        if self.trace is not None:
            self.trace.round, self.trace.sim = round, self.clock.now
        self._last_round_start = self.clock.now  # when its events fired
        events = await self.engine.begin_round(self, round, self.clock.now)
        if self.population is not None:
            await self.population.enter(self, round, self.clock)
        if self.driver is None:
            outcome = await self.server.run_round(round)
        else:
            outcome = await self.driver.step(round)
        self.clock.advance(outcome.sim_duration)
        await self.runtime.settle()
        row = self.recorder.record(
            outcome,
            groups=(
                self.engine.groups
                if self.population is None
                else self.population.groups()
            ),
            sim_time=self.clock.now,
            events=events,
            global_acc=self.global_test.accuracy(self.server.state.models),
            extra=(
                {"backdoor_success": self.backdoor.success(self.server.state.models)}
                if self.backdoor is not None
                else None
            ),
        )
        if self.trace is not None:
            self.trace.flush()
        self._check_stragglers(round, row)
        if self.population is not None:
            assignment = dict(self.server.state.assignment)
            await self.population.leave(self, assignment, round, self.clock)
        done = round + 1
        every = self.checkpoint_every
        if every and done % every == 0 and done < self.scenario.rounds:
            await self.checkpoint()
        return row

    async def finish(
        self, *, interrupted: bool = False
    ) -> tuple[dict[str, Any], list[Row]]:
        """Write summary.json and the plots; return the summary and the rows.
        `interrupted`: the run stopped early; the summary covers the rounds
        that finished and says so."""
        extra = summary_extra(
            self.scenario, self.recorder, self.engine, self.server, self.privacy
        )
        if interrupted:
            extra["interrupted"] = True
        else:
            fired = self.engine.timeline.fired
            last = self._last_round_start
            for text in unfired_time_events(
                self.scenario, fired, self.clock.now if last is None else last
            ):
                self.warn(text)
        if self.warnings:
            extra["warnings"] = list(self.warnings)
        summary = self.recorder.finish(
            algorithm=self.scenario.algorithm,
            scenario=self.scenario.name,
            extra=extra,
        )
        return summary, self.recorder.rows

    def warn(self, text: str) -> None:
        """Say that part of the scenario cannot do what it says."""
        self.warnings.append(text)
        warnings.warn(text, ScenarioWarning, stacklevel=2)

    def _check_stragglers(self, round: int, row: Row) -> None:
        """Warn, once per client, of a straggler that finished inside the
        deadline: the scenario meant it to be late."""
        if self.driver is not None or isinstance(self.scenario.deadline, WaitAll):
            return
        for client in row["clients"]:
            cid = client["id"]
            if (
                cid in self.engine.straggling
                and client["trained"]
                and not client["late"]
                and cid not in self._punctual_stragglers
            ):
                self._punctual_stragglers.add(cid)
                factor = self.clock.slowdown(ClientId(cid))
                self.warn(
                    f"round {round}: client {cid} straggles (×{factor:g}) but"
                    f" finished in {client['sim_s']:.2f} simulated s, inside the"
                    " deadline, so it is not late; raise the straggle factor or"
                    " tighten the deadline"
                )

    async def close(self) -> None:
        """Tell the clients the run is over, then stop hosting them."""
        try:
            await self.server.shutdown()
        finally:
            try:
                await self.runtime.close()
            finally:
                if self._restore_threads is not None:
                    self._restore_threads()
                    self._restore_threads = None

    # -- checkpoints --------------------------------------------------------------

    async def snapshot(self) -> FederationSnapshot:
        """The whole run between two rounds: the server's state, simulated
        now, in async mode the driver's queue and tasks in flight, the
        engine's position, the recorder's, and what the clients keep."""
        return {
            "server": self.server.snapshot(),
            "sim_now": self.clock.now,
            "devices": self.clock.devices(),
            "driver": None if self.driver is None else self.driver.snapshot(),
            "engine": self.engine.snapshot(),
            "recorder": self.recorder.snapshot(),
            "clients": await self.runtime.states(),
            "population": None
            if self.population is None
            else self.population.snapshot(),
            "summary": {
                "privacy": {
                    ClientId(c): plan.model_dump() for c, plan in self.privacy.items()
                },
                "warnings": list(self.warnings),
                "punctual_stragglers": sorted(
                    ClientId(c) for c in self._punctual_stragglers
                ),
            },
        }

    def restore(self, snapshot: FederationSnapshot) -> None:
        """Take back the server's, the clock's and the driver's part of what
        `snapshot` returned (the engine and the recorder took theirs when
        this federation was built, the clients take theirs in `start`).

        Raises:
            ConfigError: the checkpoint's mode or population is not this
                run's, or its server state does not fit this run.
        """
        if (self.driver is None) != (snapshot["driver"] is None):
            mode = "sync" if snapshot["driver"] is None else "async"
            raise ConfigError(
                f"checkpoint refused: it was taken in {mode} mode, this run's"
                f" mode is {self.scenario.mode}"
            )
        population = snapshot["population"]
        if (self.population is None) != (population is None):
            raise ConfigError(
                "checkpoint refused: it was taken in a run "
                + ("without" if population is None else "with")
                + " a population, this scenario has "
                + ("one" if self.population is not None else "none")
            )
        self.server.restore(snapshot["server"])
        self.clock.now = float(snapshot["sim_now"])
        try:
            self.clock.restore_devices(snapshot["devices"])
        except ValueError as exc:
            raise ConfigError(f"checkpoint refused: the clock's {exc}") from exc
        if self.driver is not None and snapshot["driver"] is not None:
            self.driver.restore(snapshot["driver"])
        if self.population is not None and population is not None:
            self.population.restore(population, self.first_round)
        said = snapshot["summary"]
        # The clients that left before the checkpoint join no more: their
        # plans come from it (those that joined again have the same ones).
        self.privacy = {
            **{c: PrivacyPlan.model_validate(p) for c, p in said["privacy"].items()},
            **self.privacy,
        }
        # This process said the scenario's own warnings again when it began.
        self.warnings = [
            *said["warnings"],
            *(w for w in self.warnings if w not in said["warnings"]),
        ]
        self._punctual_stragglers = set(said["punctual_stragglers"])

    def _summary_mismatch(self, said: SummarySnapshot) -> str | None:
        """Why the summary's part of a checkpoint cannot be this run's, or
        None: DP plans that this scenario's DP would not make, or a client
        id that the run has not had."""
        known = self.engine.next_id
        if self.population is not None:
            known = max(known, self.population.n)
        ids = [int(c) for c in said["privacy"]] + said["punctual_stragglers"]
        stranger = next((c for c in ids if c >= known), None)
        if stranger is not None:
            return f"client {stranger} was never in this run (ids 0..{known - 1})"
        dp = self.scenario.dp
        for client, kept in said["privacy"].items():
            if dp is None or dp.mechanism != "sample":
                return f"client {client} has a DP-SGD plan; this run has no DP-SGD"
            # `kept` passed PrivacyPlan's validation when the checkpoint was read.
            for field in ("epsilon", "delta", "max_grad_norm", "accountant", "horizon"):
                if kept[field] != getattr(dp, field):
                    return (
                        f"client {client}'s DP plan has {field} = {kept[field]!r},"
                        f" this run's dp.{field} is {getattr(dp, field)!r}"
                    )
        return None

    async def checkpoint(self) -> Path:
        """Write the run's state after its last recorded round."""
        return write_checkpoint(
            self.recorder.out,
            Checkpoint(
                rounds_done=len(self.recorder.rows),
                scenario=self.config["scenario"],
                federation=await self.snapshot(),
            ),
        )

    # -- membership: what the scenario engine changes ------------------------------

    async def add_clients(self, specs: Sequence[ClientSpec]) -> None:
        """Host new clients; each sends its join request to the server."""
        for spec in specs:
            if isinstance(spec, FaultyClientSpec):
                self.server.roster.faulty.add(ClientId(spec.id))
                self.server.adversary.enlist(ClientId(spec.id), spec.faults, spec.seed)
            if spec.privacy is not None:
                self.privacy[spec.id] = spec.privacy
        joins = await self.runtime.add(specs)
        for spec, join in zip(specs, joins, strict=True):
            reply = decode(await self.handle(join, spec.id)).payload
            if not isinstance(reply, Welcome):
                raise RuntimeError(f"a client could not join: {reply}")

    async def remove_client(self, client: int, reason: str) -> None:
        """The client announces it leaves, then stops being hosted."""
        notice = await self.runtime.remove(client, reason)
        reply = decode(await self.handle(notice, client)).payload
        if not isinstance(reply, Shutdown):
            raise RuntimeError(f"client {client} could not leave: {reply}")

    async def update_client(self, spec: ClientSpec) -> None:
        """A client's new spec (a drift: its data or transform)."""
        await self.runtime.update(spec)

    def set_unreachable(self, clients: Mapping[int, str]) -> None:
        self.server.courier.set_unreachable(clients)

    async def handle(self, data: bytes, client: int | None = None) -> bytes:
        """A message a client sends on its own (a join, a leave, a restarted
        host's rejoin); `client`: the client the runtime got it from."""
        if self.trace is None or client is None:
            return await self.server.handle(data, client)
        self.trace.message("inbound", client, data)
        reply = await self.server.handle(data, client)
        self.trace.message("answer", client, reply)
        return reply
