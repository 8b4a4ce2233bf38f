"""The parameter server: membership, the round's phases, and the strategy's state.

The server owns the strategy's state and its random stream and runs every
round the same way (`phases.py`): describe (only for a strategy that `wants`
a description, once per client), plan, train, probe (only for a strategy
that plans probes), aggregate, evaluate. Whatever a client sends back is
checked before it can reach a model (`validation.py`); what fails a check is
refused, counted with its reason, and the round goes on without it. Messages
travel through the courier (`courier.py`), which works the same above every
runtime; simulated time comes from the `SimClock`. Members offline when a
round starts (the clock's availability schedule) sit it out; with nobody
online, the round starts when the first comes online. Joins, leaves and the
other messages clients send on their own are `Membership`'s
(`membership.py`), which the server is.

Between rounds, `snapshot` returns everything the server holds that a resumed
run needs, and `restore` puts it back (see `clusterfed.checkpoint`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np

from clusterfed.algorithms import (
    ClientInfo,
    ClientUpdate,
    ServerState,
    Strategy,
    TaskPlan,
)
from clusterfed.algorithms.base import streams
from clusterfed.algorithms.diagnostics import Diagnostics, as_diagnostics
from clusterfed.errors import ClusterfedError
from clusterfed.protocol import MAX_MESSAGE_BYTES, Shutdown, TrainConfig
from clusterfed.types import ClientId

from . import phases
from .adversary import Adversary
from .client_dp import ClientLevelDP
from .clock import DeadlinePolicy, SimClock, WaitAll, arrives_late
from .courier import Courier
from .folding import RoundFold
from .membership import Membership
from .outcome import ClientOutcome, Exchange, RoundOutcome
from .reply_books import ReplyBooks
from .round import Round, UpdateLimits
from .runtimes import Runtime
from .snapshots import ServerSnapshot, restore_snapshot, take_snapshot
from .validation import check_models

Play = Callable[[list[ClientInfo], Round], Awaitable[RoundOutcome]]
"""How a round is played over its members and books (see `run_round`)."""


class ParameterServer(Membership):
    """Runs the rounds of one federated run.

    `on_book`, when set, is told each exchange's verdict as a round books it
    (the trace records them).

    Args:
        strategy: the algorithm deciding plans and aggregation.
        initial_models: the strategy's `initial_models` flat float32 vectors.
        train_config: the training settings every train task carries, the
            strategy's `train_config` already applied (`RunPlan.train_config`).
        runtime: hosts the clients.
        rng: the strategy's random stream (from the scenario seed).
        clock: simulated time and the clients' devices.
        deadline: when a round stops waiting for replies (simulated time).
        task_timeout_s: wall-clock limit on one request; None waits forever
            (a client that never answers then holds the run).
        max_message_bytes: replies larger than this are refused.
        max_update_norm: updates whose delta has a larger L2 norm are
            refused; None: no bound.
        max_update_ratio: updates whose delta's norm is over this many
            times the norm of the model it was trained from (at least 1)
            are refused; None: no bound.
        max_weight_ratio: an update's sample count counts at most this many
            times the median count the registered clients declared; None: no
            cap.
        max_in_flight: requests outstanding at once (bounds the memory of
            encoded models and of replies in flight); None: 8 per host of
            the runtime, at most 64 (`Courier.in_flight`).
        n_classes: the dataset's class count (from the scenario): a class
            histogram of another length is refused. None: the first
            accepted histogram's length.
        n_features: the model's input size (from the scenario): a data
            subspace of another row count is refused. None: not checked.
        client_dp: client-level DP (DP-FedAvg): every round's updates are
            clipped (by the clients, checked here), summed with equal weights
            per cluster, every cluster's sum noised and divided by the
            round's planned clients before the aggregation. None: off.
    """

    on_book: Callable[[ClientId, Exchange], None] | None = None

    def __init__(
        self,
        *,
        strategy: Strategy[Any],
        initial_models: Sequence[np.ndarray],
        train_config: TrainConfig,
        runtime: Runtime,
        rng: np.random.Generator,
        clock: SimClock | None = None,
        deadline: DeadlinePolicy | None = None,
        task_timeout_s: float | None = None,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        max_update_norm: float | None = None,
        max_update_ratio: float | None = None,
        max_weight_ratio: float | None = None,
        max_in_flight: int | None = None,
        n_classes: int | None = None,
        n_features: int | None = None,
        client_dp: ClientLevelDP | None = None,
    ) -> None:
        models = [np.asarray(m, dtype=np.float32) for m in initial_models]
        self.strategy = strategy
        self.state: ServerState = strategy.init_state(models)
        self.rng = rng
        self.limits = UpdateLimits(
            int(models[0].shape[0]),
            max_update_norm,
            max_update_ratio,
            max_weight_ratio,
            epochs=train_config.epochs,
        )
        self.train_config = train_config
        # Forges the simulated attacks' replies (adversary.py); knows the
        # faulty clients the federation enlists.
        self.adversary = Adversary(strategy.aggregator)
        self.clock = clock if clock is not None else SimClock()
        self.deadline = deadline or WaitAll()
        self.books = ReplyBooks()
        self.courier = Courier(
            runtime,
            self.books,
            task_timeout_s=task_timeout_s,
            max_message_bytes=max_message_bytes,
            max_in_flight=max_in_flight,
        )
        super().__init__()
        self.round = 0
        self.n_classes = n_classes
        self.n_features = n_features
        self.client_dp = client_dp

    # -- the round ------------------------------------------------------------

    async def run_round(
        self, round: int, play: Play | None = None, *, once_per_client: bool = True
    ) -> RoundOutcome:
        """Describe, plan, train, probe, aggregate and evaluate one round;
        `play(members, books)` plays it instead (the asynchronous driver,
        under which a client may send several updates: `once_per_client`
        False).

        A client that announces it leaves during the round leaves when the
        round ends: the round's plans and books still hold it.
        """
        self._in_round = True
        try:
            self.round = round
            self.books.begin_round(round)
            members = self.roster.in_order()
            # Refusals of inbound messages and of replies go in one list, in
            # the order they happen.
            books = Round(
                round,
                self.roster,
                {c.id: ClientOutcome(c.id) for c in members},
                self._rejections,
                self.limits,
                once_per_client=once_per_client,
                adversary=self.adversary,
                on_book=self.on_book,
            )
            return await (play or self._play)(members, books)
        finally:
            self._leave_after_round()

    async def _play(self, members: list[ClientInfo], books: Round) -> RoundOutcome:
        round = books.number
        waiting, active = self._online(members, books)
        describing = await self._describe(active, books)
        plans = (
            self.strategy.plan_round(self.state, round, active, self.rng)
            if active
            else []
        )
        config, norms = self.train_config, list[float]()
        if self.client_dp is not None:
            config, books.limits = self.client_dp.settings(config, books.limits)
        books.fold = self._fold(plans, norms)
        updates, training = await phases.train(
            self.courier,
            self.clock,
            books,
            plans,
            config,
            self.deadline,
            start=self.clock.now + waiting + describing,
        )
        probes = [
            p
            for p in self.strategy.plan_probes(self.state, round, updates, self.rng)
            if p.client in books.outcomes and p.models
        ]
        probing = 0.0
        if probes:
            updates, probing = await phases.probe(
                self.courier, self.clock, books, probes, updates
            )
        if self.client_dp is not None:
            # Only a complete fold carries every clipped update, so only one
            # may be noised and committed; the scenario's checks make sure.
            if books.fold is None or not books.fold.done:
                raise ClusterfedError(
                    f"round {round}: client-level DP needs every update folded"
                )
            self.client_dp.noise(books.fold.sums, self.state.models, len(plans), round)
            self.client_dp.close_round(norms, len(plans), round)
        if books.fold is not None and books.fold.done:
            aggregated = self.strategy.aggregate_sums(
                self.state, round, updates, books.fold.sums, self.rng
            )
        else:  # the deltas were kept (see phases.train)
            aggregated = self.strategy.aggregate(self.state, round, updates, self.rng)
        self.commit(aggregated, f"round {round}: aggregation refused")
        return await self.close_round(
            books, members, waiting + describing + training + probing
        )

    def _fold(self, plans: Sequence[TaskPlan], norms: list[float]) -> RoundFold | None:
        """The round's running sums when it streams: the strategy folds,
        the deadline decides lateness reply by reply (not `Fraction`, which
        ranks every reply) and no client is planned twice. None: every
        delta is kept until `aggregate`. Under client-level DP each member's
        update weighs 1 (DP-FedAvg's equal weights bound one client's share
        of the sum by the clipping norm) and its norm goes to `norms`."""
        clients = [p.client for p in plans]
        if not (
            streams(self.strategy)
            and arrives_late(self.deadline, 0.0) is not None
            and len(set(clients)) == len(clients)
        ):
            return None
        weight: Callable[[ClientUpdate], float]
        weight = partial(self.strategy.fold_weight, self.state)
        if self.client_dp is not None:
            weight = self.client_dp.equal_weights(weight, norms)
        return RoundFold(clients, weight)

    def commit(self, state: ServerState, refusal: str) -> bool:
        """Keep `state`, the strategy's new state, unless a model in it is
        not finite in float32; then record `refusal` with the reason, and the
        models stay as they were. Both schedules commit through here: a
        synchronous round's aggregation, an asynchronous arrival's `absorb`."""
        problem = check_models(state.models)
        if problem is not None:  # the updates' checks make this rare
            self._rejections.append(
                f"{refusal}, {problem}; the models stay as they were"
            )
            return False
        self.state = state
        return True

    def absorb(self, update: ClientUpdate, staleness: int) -> tuple[bool, bool]:
        """Asynchronous mode: the strategy folds one settled update that
        arrived `staleness` versions late. Returns whether the state was
        committed and whether the strategy says the model changed."""
        absorbed, advanced = self.strategy.absorb(
            self.state, update, staleness, self.rng
        )
        refusal = f"round {self.round}: update of client {update.client} refused"
        if not self.commit(absorbed, refusal):
            return False, False
        return True, advanced

    def _online(
        self, members: Sequence[ClientInfo], books: Round
    ) -> tuple[float, list[ClientInfo]]:
        """The members online when the round starts, the others' books
        saying why they sit it out. With nobody online the round starts
        when the first member comes online; returns that wait too."""
        schedule, now = self.clock.availability, self.clock.now
        returns = [schedule.next_online(c.id, now) for c in members]
        first = min((t for t in returns if t is not None), default=now)
        online = [
            c
            for c, t in zip(members, returns, strict=True)
            if t is not None and t <= first
        ]
        present = {c.id for c in online}  # a set: a list is O(N²) at 10,000
        for c in members:
            if c.id not in present:
                books.outcomes[c.id].reason = "offline (availability)"
        return first - now, online

    async def close_round(
        self,
        books: Round,
        members: Sequence[ClientInfo],
        sim_duration: float,
        driver: Diagnostics | None = None,
    ) -> RoundOutcome:
        """Every member evaluates its current model; the round's outcome,
        with the refusals of the round, the strategy's diagnostics and the
        asynchronous `driver`'s own."""
        await phases.evaluate(
            self.courier,
            books,
            {c.id: self.strategy.model_for(self.state, c.id) for c in members},
            phases.mixtures(self.strategy, self.state, members),
        )
        # Client-level DP: one ε covers every client, the server's books'.
        central = None if self.client_dp is None else self.client_dp.spent()
        for outcome in books.outcomes.values():
            outcome.cluster = self.state.assignment.get(outcome.id)
            outcome.epsilon = (
                self.roster.epsilon.get(outcome.id) if central is None else central
            )
            outcome.faulty = outcome.id in self.roster.faulty
        rejections, self._rejections = self._rejections, []
        return RoundOutcome(
            round=books.number,
            sim_duration=sim_duration,
            clients=list(books.outcomes.values()),
            n_clusters=self.state.n_clusters,
            rejections=rejections,
            epsilon_max=self.roster.epsilon_max() if central is None else central,
            diagnostics=as_diagnostics(
                self.strategy.diagnostics(self.state), type(self.strategy).__name__
            ),
            driver=driver,
        )

    async def _describe(self, active: Sequence[ClientInfo], books: Round) -> float:
        """Ask the clients not yet described for what the strategy wants (a
        class histogram or a data subspace); hand the accepted descriptions to
        the strategy. Returns the phase's length.

        Only a strategy whose `wants` names a description gets one: for any
        other, no client is asked and none sends anything about its data. A
        client that does not answer is asked again next round; one whose
        answer is refused is not.
        """
        if not self.strategy.wants:
            return 0.0
        todo = [c.id for c in active if c.id not in self.roster.described]
        if not todo:
            return 0.0
        want = self.strategy.wants[0]  # one at most (Strategy checks it)
        task = phases.describe_task(want, self.strategy.subspace)
        descriptions, described, length = await phases.describe(
            self.courier, self.clock, books, todo, task, self.n_classes, self.n_features
        )
        self.roster.described |= described
        if descriptions:
            if want == "class_histogram" and self.n_classes is None:
                self.n_classes = len(next(iter(descriptions.values())))
            self.state = self.strategy.on_describe(
                self.state, books.number, descriptions, self.rng
            )
        return length

    def snapshot(self) -> ServerSnapshot:
        """Everything a resumed run needs of this server, between two rounds:
        the strategy's state and random stream, the roster, the next
        message id. Picklable; shares nothing mutable with the server."""
        return take_snapshot(self)

    def restore(self, snapshot: Mapping[str, Any]) -> None:
        """Take back what `snapshot` returned (after the clients rejoined).

        Raises:
            ConfigError: the snapshot does not fit this run (a model of
                another size, NaN or Inf in a model, another strategy's
                state, a damaged registry): it is refused, never resumed.
        """
        restore_snapshot(self, snapshot)

    async def shutdown(self) -> None:
        """Tell every client the run is over; a client that cannot hear is skipped."""
        self.courier.set_unreachable({})
        bye = Shutdown(reason="run finished")
        await self.courier.round_trip([(c, bye) for c in self.roster], -1, self.roster)
