"""The asynchronous driver: every update folded when it arrives, on the
simulated clock.

At most `concurrency` clients train at once. A client's task starts at a
simulated time with the model of that moment; its update arrives at start +
download + compute + upload (its device profile, `SimClock.exchange_s`).
Arrivals are taken from a heap in order of arrival time, ties broken by
client id, then by start order: the server reacts to each in that order and
never to one before its time. An arrival is judged like any update, its
staleness τ is the number of server versions since its model was sent, an
update older than `max_staleness` versions is dropped (late), and the
strategy's `absorb` folds it in. Versions are counted per cluster: a
cluster's version goes up each time an arrival gives it a new model (states
are immutable, so a new model is a new array), and an update's τ counts the
versions of the cluster it trained (of every model it was sent: an IFCA
client picks its cluster after the models left) — for a single-model
strategy the server's version. An update of a model that is no cluster (a
DCFL newcomer's W_G) counts the server's versions. The freed client's place
goes to an idle client drawn from the strategy's random stream, starting at
that arrival's time. One aggregation (a new model version) is one row of
rounds.jsonl: `step` runs arrivals until the strategy says a model changed,
then every client evaluates its current model.

The real training runs when a task is started (the simulation knows the
update's content and size then), but it is only used at its arrival time;
events of the scenario (joins, drift, crashes) fire between aggregations,
and so are checkpoints taken (`snapshot`: the queue with its tasks in flight).

Availability (`SimClock.availability`): an offline client is not started; it
gets a wake-up event at the time it comes back online, when idle places are
filled again. A task that outlives its client's online time fails at the
moment the client goes offline (its arrival event is then), and the client
rests until the next aggregation like any failed one.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

from clusterfed.algorithms import ClientInfo, ClientUpdate, TaskPlan
from clusterfed.algorithms.diagnostics import Diagnostics
from clusterfed.types import ClientId, ClusterId, ModelKey

from . import phases
from .outcome import Exchange, RoundOutcome
from .round import Round
from .tasks import train_tasks

if TYPE_CHECKING:
    from .server import ParameterServer


@dataclass(frozen=True)
class _Running:
    """A task on its way: what was sent (with the server's version and each
    sent cluster's), what came back, when it arrives."""

    plan: TaskPlan
    exchange: Exchange
    version: int
    start: float
    duration: float | None
    sent: Mapping[ClusterId, int]
    gone: float | None = None  # it went offline this far into its task


Queued = tuple[float, int, int, _Running | None]
"""An event of the driver's queue: (time, client, start order, task); no task:
an offline client comes back online then."""


class DriverSnapshot(TypedDict):
    """The driver between two aggregations, for a checkpoint (`snapshot`)."""

    version: int
    versions: dict[ClusterId, int]
    heap: list[Queued]
    seq: int
    waking: set[ClientId]


def driver_snapshot_problem(snapshot: DriverSnapshot) -> str | None:
    """Why `snapshot` (from a checkpoint) cannot be a driver's, or None: its
    values are checked, its keys are the checkpoint's to check."""
    if not _count(snapshot["version"]) or not _count(snapshot["seq"]):
        return (
            f"version {snapshot['version']!r} and seq {snapshot['seq']!r}"
            " are not both counts"
        )
    versions = snapshot["versions"]
    if not isinstance(versions, dict) or not all(
        _count(k) and _count(v) for k, v in versions.items()
    ):
        return "versions is not one of clusters to counts"
    waking = snapshot["waking"]
    if not isinstance(waking, set) or not all(_count(c) for c in waking):
        return "waking is not a set of clients"
    heap = snapshot["heap"]
    if not isinstance(heap, list):
        return f"queue is a {type(heap).__name__}, not a list"
    for index, event in enumerate(heap):
        if not (
            isinstance(event, tuple)
            and len(event) == 4
            and isinstance(event[0], float | int)
            and not isinstance(event[0], bool)
            and math.isfinite(event[0])
            and _count(event[1])
            and _count(event[2])
            and event[2] < snapshot["seq"]
            and (event[3] is None or isinstance(event[3], _Running))
        ):
            return (
                f"queue entry {index} is not (time, client, start order < seq,"
                " task or None)"
            )
    return None


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class DriverDiagnostics(Diagnostics):
    """What the driver adds to each row's `strategy`: the server's version
    after the aggregation and, with several clusters, each cluster's (by
    cluster id, in the order of the state's models; left out with one)."""

    omit_when_none = frozenset({"cluster_versions"})
    version: int
    cluster_versions: dict[ClusterId, int] | None = None


class AsyncDriver:
    """Runs a `ParameterServer` asynchronously (see the module docstring).

    Args:
        server: the server whose strategy has an asynchronous mode.
        concurrency: clients training at once (None: every client).
        max_staleness: drop updates more versions old than this (None: keep).
    """

    def __init__(
        self,
        server: ParameterServer,
        *,
        concurrency: int | None = None,
        max_staleness: int | None = None,
    ) -> None:
        if not server.strategy.supports_async:
            raise ValueError(f"{server.strategy.name} has no asynchronous mode")
        self.server = server
        self.concurrency = concurrency
        self.max_staleness = max_staleness
        self.version = 0
        self.versions: dict[ClusterId, int] = {}  # per cluster, see above
        # When a client comes back online, idle places are filled again.
        self._heap: list[Queued] = []
        self._seq = 0
        self._waking: set[ClientId] = set()  # offline clients with a wake-up
        # Clients whose task failed, or whose reply was refused before it
        # could be read, in this aggregation rest until the next: such an
        # end takes no simulated time, and restarting at once would spin.
        self._resting: set[ClientId] = set()

    def snapshot(self) -> DriverSnapshot:
        """The driver between two aggregations, for a checkpoint (picklable):
        the versions, and the event queue with the tasks in flight. A task in
        flight was trained when it started and its reply is in the queue, so
        a resumed run takes it at its arrival time as this run would."""
        return {
            "version": self.version,
            "versions": dict(self.versions),
            "heap": list(self._heap),
            "seq": self._seq,
            "waking": set(self._waking),
        }

    def restore(self, snapshot: DriverSnapshot) -> None:
        """Take back what `snapshot` returned."""
        self.version = int(snapshot["version"])
        self.versions = dict(snapshot["versions"])
        self._heap = list(snapshot["heap"])
        heapq.heapify(self._heap)
        self._seq = int(snapshot["seq"])
        self._waking = set(snapshot["waking"])
        self._resting = set()

    async def step(self, round: int) -> RoundOutcome:
        """Arrivals until the next aggregation; then every client evaluates."""
        return await self.server.run_round(round, self._play, once_per_client=False)

    async def _play(self, members: list[ClientInfo], books: Round) -> RoundOutcome:
        server = self.server
        start = now = server.clock.now
        self._resting = set()
        await self._top_up(books, now)
        while self._heap:
            arrival, client, _, running = heapq.heappop(self._heap)
            now = arrival
            if running is None:  # back online
                self._waking.discard(ClientId(client))
                await self._top_up(books, now)
                continue
            advanced = self._arrive(books, ClientId(client), running)
            await self._top_up(books, now)
            if advanced:
                self.version += 1
                break
        for outcome in books.outcomes.values():
            if not outcome.planned and not server.clock.availability.online(
                outcome.id, now
            ):
                outcome.reason = "offline (availability)"
        return await server.close_round(
            books, members, now - start, self._diagnostics()
        )

    def _diagnostics(self) -> DriverDiagnostics:
        """The server's version; with several clusters each one's too."""
        models = self.server.state.models
        if len(models) < 2:
            return DriverDiagnostics(version=self.version)
        return DriverDiagnostics(
            version=self.version,
            cluster_versions={k: self.versions.get(k, 0) for k in models},
        )

    def _staleness(self, running: _Running, cluster: ModelKey) -> int:
        # A cluster's model counts its versions; the global model, the server's.
        if isinstance(cluster, int) and cluster in running.sent:
            return self.versions.get(cluster, 0) - running.sent[cluster]
        return self.version - running.version

    def _arrive(self, books: Round, client: ClientId, running: _Running) -> bool:
        """Settle one arrival (`Round.settle`, as every update) and let the
        strategy absorb it; whether the model changed."""
        if client not in books.outcomes:  # it left while training
            return False

        def stale(update: ClientUpdate) -> tuple[str | None, int | None]:
            staleness = self._staleness(running, update.cluster)
            if self.max_staleness is not None and staleness > self.max_staleness:
                return (
                    f"stale: {staleness} versions old,"
                    f" max_staleness = {self.max_staleness}",
                    staleness,
                )
            return None, staleness

        settled = books.settle(
            running.plan,
            running.exchange,
            length_s=running.duration,
            gone_s=running.gone,
            lateness=stale,
        )
        update = books.record(settled)
        if update.status == "failed" or running.duration is None:
            self._resting.add(client)
        if not update.ok:
            return False
        server = self.server
        before = dict(server.state.models)
        committed, advanced = server.absorb(update, settled.staleness or 0)
        if not committed:
            return False
        for cluster, model in server.state.models.items():
            if model is not before.get(cluster):
                self.versions[cluster] = self.versions.get(cluster, 0) + 1
        return advanced

    async def _top_up(self, books: Round, now: float) -> None:
        """Start idle clients at `now` until `concurrency` are training."""
        server = self.server
        busy = {client for _, client, _, task in self._heap if task is not None}
        idle = [
            c for c in sorted(server.roster) if c not in busy and c not in self._resting
        ]
        idle = self._online(idle, now)
        room = len(server.roster) if self.concurrency is None else self.concurrency
        free = max(0, room - len(busy))
        if not idle or not free:
            return
        if free < len(idle):
            picked = server.rng.choice(len(idle), size=free, replace=False)
            chosen = [idle[i] for i in sorted(picked)]
        else:
            chosen = idle
        plans = [server.strategy.plan_for(server.state, c) for c in chosen]
        tasks = train_tasks(plans, server.train_config)
        exchanges = await server.courier.round_trip(
            list(zip(chosen, tasks, strict=True)), books.number, books.roster
        )
        for plan, exchange in zip(plans, exchanges, strict=True):
            samples = books.samples_to_time(plan, exchange)
            duration = phases.duration(server.clock, plan.client, exchange, samples)
            cut = phases.went_offline(server.clock, plan.client, now, duration)
            if cut is not None:  # it fails when it goes offline
                duration = cut
            sent = {
                k: self.versions.get(k, 0)
                for k in server.state.models
                if k in plan.models
            }
            running = _Running(plan, exchange, self.version, now, duration, sent, cut)
            arrival = now + (duration if duration is not None else 0.0)
            heapq.heappush(self._heap, (arrival, int(plan.client), self._seq, running))
            self._seq += 1

    def _online(self, idle: list[ClientId], now: float) -> list[ClientId]:
        """The idle clients online at `now`; each offline one gets a wake-up
        at the time it comes back (once: until then it has one)."""
        schedule = self.server.clock.availability
        online = []
        for client in idle:
            if schedule.online(client, now):
                online.append(client)
                continue
            back = schedule.next_online(client, now)
            if client not in self._waking and back is not None and back > now:
                heapq.heappush(self._heap, (back, int(client), self._seq, None))
                self._seq += 1
                self._waking.add(client)
        return online
