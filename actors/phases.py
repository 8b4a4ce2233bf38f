"""The phases of a round: describe, train, probe, evaluate.

Each phase builds its tasks, sends them through the courier, and judges every
reply into the client's `ClientOutcome` (bytes, reason, status); the server
hands what was accepted to the strategy. A phase's simulated length is its
slowest reply that arrived (on the server's `SimClock`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from clusterfed.algorithms import (
    ClientInfo,
    ClientUpdate,
    PeerScore,
    ProbePlan,
    TaskPlan,
)
from clusterfed.protocol import (
    ClassHistogram,
    ClusterModel,
    DescribeTask,
    EvaluateReply,
    EvaluateTask,
    Message,
    ProbeReply,
    TrainConfig,
    UpdateReply,
)
from clusterfed.types import ClientId, ClusterId

from .clock import DeadlinePolicy, SimClock, arrives_late, close_round
from .courier import Courier
from .folding import RoundFold, without_delta
from .outcome import ClientOutcome, Exchange
from .tasks import probe_tasks, train_tasks
from .validation import (
    check_evaluation,
    check_histogram,
    check_probe,
    check_update,
)


@dataclass
class RoundBooks:
    """A round's shared books: the outcome of each client and every refusal."""

    round: int
    members: Mapping[ClientId, ClientInfo]
    outcomes: dict[ClientId, ClientOutcome]
    rejections: list[str] = field(default_factory=list)

    def book(self, client: ClientId, exchange: Exchange) -> None:
        """Count an exchange's bytes and, unless it went well, its reason."""
        outcome = self.outcomes[client]
        outcome.bytes_down += exchange.bytes_down
        outcome.bytes_up += exchange.bytes_up
        if exchange.status == "rejected":
            self.rejections.append(f"client {client}: {exchange.reason}")
        if exchange.status != "ok":
            outcome.reason = exchange.reason


def duration(clock: SimClock, client: ClientId, exchange: Exchange) -> float | None:
    """Simulated time until the reply arrived; None if it never does."""
    if exchange.status == "failed" or exchange.reply is None:
        return None
    payload = exchange.reply.payload
    compute = (
        payload.compute_s if isinstance(payload, UpdateReply | ProbeReply) else 0.0
    )
    return clock.exchange_s(client, exchange.bytes_down, compute, exchange.bytes_up)


def _slowest(durations: Sequence[float | None]) -> float:
    return max((d for d in durations if d is not None), default=0.0)


def _prefixed(exchange: Exchange, phase: str) -> Exchange:
    if exchange.status != "ok" and exchange.reason is not None:
        return replace(exchange, reason=f"{phase}: {exchange.reason}")
    return exchange


async def describe(
    courier: Courier,
    clock: SimClock,
    books: RoundBooks,
    todo: Sequence[ClientId],
    n_classes: int | None,
) -> tuple[dict[ClientId, np.ndarray], set[ClientId], float]:
    """Ask `todo` for their class histograms. Returns the accepted ones, the
    clients that count as described (answered, or refused: not asked again),
    and the phase's length."""
    task = DescribeTask(want="class_histogram")
    exchanges = await courier.round_trip(
        [(c, task) for c in todo], books.round, books.members
    )
    histograms: dict[ClientId, np.ndarray] = {}
    described: set[ClientId] = set()
    durations = []
    for client, exchange in zip(todo, exchanges, strict=True):
        if exchange.status == "ok" and exchange.reply is not None:
            reply = exchange.reply.payload
            declared = books.members.get(client)
            problem = check_histogram(
                reply, client, n_classes, declared.n_train if declared else None
            )
            if problem is None and isinstance(reply, ClassHistogram):
                histograms[client] = np.asarray(reply.counts, dtype=np.int64)
                n_classes = len(reply.counts)  # when the scenario did not say
            else:
                exchange = replace(exchange, status="rejected", reason=problem)
        exchange = _prefixed(exchange, "describe")
        books.book(client, exchange)
        if exchange.status != "failed":
            described.add(client)
        durations.append(duration(clock, client, exchange))
    return histograms, described, _slowest(durations)


async def train(
    courier: Courier,
    clock: SimClock,
    books: RoundBooks,
    plans: Sequence[TaskPlan],
    config: TrainConfig,
    deadline: DeadlinePolicy,
    limits: UpdateLimits,
    start: float | None = None,
    fold: RoundFold | None = None,
) -> tuple[list[ClientUpdate], dict[ClientId, float], float]:
    """Send the planned train tasks and judge each update. Returns the
    updates (one per plan), the ε each client reported, the phase's length.

    The tasks start at simulated `start` (default: now); a client that goes
    offline before its update is back (`clock.availability`) has failed,
    though it trained (its ε is spent, as a late update's).

    With a `fold` (streaming aggregation) each update is judged as its reply
    arrives, added to the fold's sums and returned without its delta —
    wherever the deadline decides lateness reply by reply (not `Fraction`,
    which ranks every reply) and no client is planned twice; otherwise the
    deltas are kept and the fold stays empty."""
    tasks = train_tasks(plans, config)
    at = clock.now if start is None else start
    clients = [p.client for p in plans]
    streams = (
        fold is not None
        and arrives_late(deadline, 0.0) is not None
        and len(set(clients)) == len(clients)
    )
    decided: dict[int, tuple[Exchange, ClientUpdate, float | None, float | None]] = {}

    def on_arrival(index: int, exchange: Exchange) -> Exchange:
        assert fold is not None
        plan = plans[index]
        length_s = duration(clock, plan.client, exchange)
        gone_s = went_offline(clock, plan.client, at, length_s)
        if gone_s is not None:
            length_s = None
        update = judge(plan, exchange, limits, books, gone_s)
        if arrives_late(deadline, length_s):
            update = late_update(update)
        kept = without_delta(exchange)
        decided[index] = (kept, fold.add(update), length_s, gone_s)
        return kept

    exchanges = await courier.round_trip(
        [(p.client, t) for p, t in zip(plans, tasks, strict=True)],
        books.round,
        books.members,
        on_exchange=on_arrival if streams else None,
    )
    durations: dict[ClientId, float | None] = {}
    gone: dict[ClientId, float] = {}  # client → seconds into its task
    for index, (plan, exchange) in enumerate(zip(plans, exchanges, strict=True)):
        if streams:
            _, _, durations[plan.client], cut = decided[index]
        else:
            durations[plan.client] = duration(clock, plan.client, exchange)
            cut = went_offline(clock, plan.client, at, durations[plan.client])
        if cut is not None:
            gone[plan.client], durations[plan.client] = cut, None
    length, late = close_round(durations, deadline)
    updates = []
    updated: set[ClientId] = set()
    epsilon: dict[ClientId, float] = {}
    for index, (plan, exchange) in enumerate(zip(plans, exchanges, strict=True)):
        if streams:
            exchange, update, _, _ = decided[index]
        else:
            update = judge(plan, exchange, limits, books, gone.get(plan.client))
        trained = exchange.status == "ok"
        if plan.client in gone:
            exchange = offline_exchange(exchange, gone[plan.client])
        if update.ok and plan.client in updated:
            update = replace(
                update,
                status="rejected",
                reason=f"duplicate: a second update from client {plan.client}"
                f" in round {books.round}",
            )
        if plan.client in late:
            update = late_update(update)
        if update.ok:
            updated.add(plan.client)
        outcome = books.outcomes[plan.client]
        outcome.status = update.status
        outcome.train_loss = update.loss
        outcome.sim_s = durations[plan.client] or gone.get(plan.client, 0.0)
        reply = exchange.reply.payload if exchange.reply is not None else None
        # A late update was trained all the same: its ε is spent.
        if trained and isinstance(reply, UpdateReply) and reply.epsilon is not None:
            epsilon[plan.client] = reply.epsilon
        books.book(
            plan.client,
            replace(exchange, status=update.status, reason=update.reason),
        )
        updates.append(update)
    return updates, epsilon, length


def judge(
    plan: TaskPlan,
    exchange: Exchange,
    limits: UpdateLimits,
    books: RoundBooks,
    gone_s: float | None,
) -> ClientUpdate:
    """One update's verdict: failed if its client went offline `gone_s`
    into the task, else `judge_update`'s."""
    if gone_s is not None:
        exchange = offline_exchange(exchange, gone_s)
    declared = books.members.get(plan.client)
    return judge_update(plan, exchange, limits, declared.n_train if declared else None)


def late_update(update: ClientUpdate) -> ClientUpdate:
    """An accepted update that came after the deadline is late."""
    if update.ok:
        return replace(update, status="late", reason="after the deadline")
    return update


def went_offline(
    clock: SimClock, client: ClientId, start: float, length_s: float | None
) -> float | None:
    """Seconds into a task started at `start` at which its client goes
    offline, if that is before its reply of `length_s` is back."""
    if length_s is None:
        return None
    cut = clock.availability.offline_at(client, start, start + length_s)
    return None if cut is None else cut - start


def offline_exchange(exchange: Exchange, after_s: float) -> Exchange:
    """The exchange of a client that went offline `after_s` into its task:
    failed, its upload never made."""
    return replace(
        exchange,
        status="failed",
        reason=f"went offline {after_s:.4g} s into its task (availability)",
        bytes_up=0,
    )


@dataclass(frozen=True)
class UpdateLimits:
    """What an update must fit: the model's size and the norm bound."""

    n_weights: int
    max_update_norm: float | None = None


def judge_update(
    plan: TaskPlan,
    exchange: Exchange,
    limits: UpdateLimits,
    n_train: int | None = None,
) -> ClientUpdate:
    """The update as the strategy sees it: accepted, or why not. `n_train`:
    what the client declared at join, the most samples it can have used."""
    first = next(iter(plan.models))
    if exchange.status != "ok" or exchange.reply is None:
        return ClientUpdate(plan.client, first, exchange.status, reason=exchange.reason)
    reply = exchange.reply.payload
    problem = check_update(
        reply, plan, limits.n_weights, limits.max_update_norm, n_train
    )
    if problem is not None or not isinstance(reply, UpdateReply):
        return ClientUpdate(plan.client, first, "rejected", reason=problem)
    cluster = ClusterId(reply.cluster)
    return ClientUpdate(
        client=plan.client,
        cluster=cluster,
        status="ok",
        base=plan.models[cluster],
        delta=reply.delta,
        n_samples=reply.n_samples,
        loss=reply.loss,
    )


async def probe(
    courier: Courier,
    clock: SimClock,
    books: RoundBooks,
    plans: Sequence[ProbePlan],
    updates: Sequence[ClientUpdate],
) -> tuple[list[ClientUpdate], float]:
    """Send the probe plans; the scores go onto the owners' updates as
    `peer_scores`. Returns the updates and the phase's length (the slowest
    probe: the server waits for every answer)."""
    exchanges = await courier.round_trip(
        [(p.client, t) for p, t in zip(plans, probe_tasks(plans), strict=True)],
        books.round,
        books.members,
    )
    scores: dict[ClientId, dict[ClientId, PeerScore]] = {}
    durations = []
    for plan, exchange in zip(plans, exchanges, strict=True):
        if exchange.status == "ok" and exchange.reply is not None:
            reply = exchange.reply.payload
            problem = check_probe(reply, plan)
            if problem is None and isinstance(reply, ProbeReply):
                for score in reply.scores:
                    scores.setdefault(ClientId(score.owner), {})[plan.client] = (
                        PeerScore(score.accuracy, score.loss, reply.n_samples)
                    )
            else:
                exchange = replace(exchange, status="rejected", reason=problem)
        exchange = _prefixed(exchange, "probe")
        books.book(plan.client, exchange)
        durations.append(duration(clock, plan.client, exchange))
    scored = [
        replace(u, peer_scores=scores[u.client]) if u.client in scores else u
        for u in updates
    ]
    return scored, _slowest(durations)


async def evaluate(
    courier: Courier,
    books: RoundBooks,
    models: Mapping[ClientId, tuple[ClusterId, np.ndarray]],
) -> None:
    """Each client scores the model it is evaluated with on its held-out split."""
    tasks: dict[tuple[int, int], EvaluateTask] = {}
    requests: list[tuple[ClientId, Message]] = []
    for client, (cluster, weights) in models.items():
        key = (cluster, id(weights))
        if key not in tasks:
            tasks[key] = EvaluateTask(
                model=ClusterModel(cluster=cluster, weights=weights)
            )
        requests.append((client, tasks[key]))
    exchanges = await courier.round_trip(requests, books.round, books.members)
    for (client, task), exchange in zip(requests, exchanges, strict=True):
        reply = exchange.reply.payload if exchange.reply else None
        if exchange.status == "ok":
            assert isinstance(task, EvaluateTask)
            problem = (
                check_evaluation(reply, task.model.cluster)
                if reply is not None
                else "expected an evaluate_reply, got nothing"
            )
            if problem is not None:
                exchange = replace(exchange, status="rejected", reason=problem)
        books.book(client, exchange)
        if isinstance(reply, EvaluateReply) and exchange.status == "ok":
            outcome = books.outcomes[client]
            outcome.acc, outcome.loss = reply.accuracy, reply.loss
