"""The phases of a round: describe, train, probe, evaluate.

Each phase builds its tasks, sends them through the courier, and judges every
reply into the client's `ClientOutcome` (bytes, reason, status); the server
hands what was accepted to the strategy. A phase's simulated length is its
slowest reply that arrived (on the server's `SimClock`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from clusterfed.algorithms import (
    ClientInfo,
    ClientUpdate,
    PeerScore,
    ProbePlan,
    ServerState,
    Strategy,
    TaskPlan,
    Want,
)
from clusterfed.algorithms.base import SubspaceRequest
from clusterfed.protocol import (
    MAX_BASIS,
    ClassHistogram,
    ClusterModel,
    DataSubspace,
    DescribeTask,
    EvaluateReply,
    EvaluateTask,
    Message,
    ProbeReply,
    TrainConfig,
)
from clusterfed.types import ClientId, ModelKey

from .clock import DeadlinePolicy, SimClock, arrives_late, close_round
from .courier import Courier
from .outcome import Exchange
from .round import Round, Settled, after_deadline, on_time
from .tasks import probe_tasks, train_tasks
from .validation import (
    check_evaluation,
    check_histogram,
    check_probe,
    check_subspace,
)


def duration(
    clock: SimClock, client: ClientId, exchange: Exchange, samples: int = 0
) -> float | None:
    """Simulated time until the reply arrived; None if it never does.

    `samples` is the work the task had the client do; the server's clock
    times it on the client's device at its slowdown now (a client reports
    samples, never seconds)."""
    if exchange.status == "failed" or exchange.reply is None:
        return None
    compute = clock.compute_s(client, samples)
    return clock.exchange_s(client, exchange.bytes_down, compute, exchange.bytes_up)


def _slowest(durations: Sequence[float | None]) -> float:
    return max((d for d in durations if d is not None), default=0.0)


def _prefixed(exchange: Exchange, phase: str) -> Exchange:
    if exchange.status != "ok" and exchange.reason is not None:
        return replace(exchange, reason=f"{phase}: {exchange.reason}")
    return exchange


def describe_task(want: Want, subspace: SubspaceRequest) -> DescribeTask:
    """The task that asks a client for `want` (a data subspace as `subspace`
    says)."""
    if want == "data_subspace":
        return DescribeTask(
            want="data_subspace",
            n_basis=subspace.n_basis,
            per_class=subspace.per_class,
        )
    return DescribeTask(want="class_histogram")


async def describe(
    courier: Courier,
    clock: SimClock,
    round: Round,
    todo: Sequence[ClientId],
    task: DescribeTask,
    n_classes: int | None,
    n_features: int | None = None,
) -> tuple[dict[ClientId, np.ndarray], set[ClientId], float]:
    """Ask `todo` for the description `task` wants. Returns the accepted ones
    (class histograms as int64 counts, data subspaces as float32 d × k), the
    clients that count as described (answered, or refused: not asked again),
    and the phase's length."""
    exchanges = await courier.round_trip(
        [(c, task) for c in todo], round.number, round.roster
    )
    descriptions: dict[ClientId, np.ndarray] = {}
    described: set[ClientId] = set()
    durations = []
    for client, exchange in zip(todo, exchanges, strict=True):
        if exchange.status == "ok" and exchange.reply is not None:
            reply = exchange.reply.payload
            declared = round.roster.members.get(client)
            found = _description(
                reply,
                client,
                task,
                n_classes,
                n_features,
                declared.n_train if declared else None,
            )
            if isinstance(found, str):
                exchange = replace(exchange, status="rejected", reason=found)
            else:
                descriptions[client] = found
                if task.want == "class_histogram":
                    n_classes = len(found)  # when the scenario did not say
        exchange = _prefixed(exchange, "describe")
        round.book(client, exchange)
        if exchange.status != "failed":
            described.add(client)
        durations.append(duration(clock, client, exchange))
    return descriptions, described, _slowest(durations)


def _description(
    reply: Message,
    client: ClientId,
    task: DescribeTask,
    n_classes: int | None,
    n_features: int | None,
    n_train: int | None,
) -> np.ndarray | str:
    """What an answer to `task` describes, or why it is refused."""
    if task.want == "data_subspace":
        n_basis = task.n_basis or 1
        if not task.per_class:
            most = n_basis
        elif n_classes is not None:
            most = n_basis * n_classes
        else:
            most = MAX_BASIS
        problem = check_subspace(reply, client, n_features, most)
        if problem is None and isinstance(reply, DataSubspace):
            return np.array(reply.basis, dtype=np.float32)  # not a view of the bytes
    else:
        problem = check_histogram(reply, client, n_classes, n_train)
        if problem is None and isinstance(reply, ClassHistogram):
            return np.asarray(reply.counts, dtype=np.int64)
    return problem or f"unexpected {reply.kind!r}"


async def train(
    courier: Courier,
    clock: SimClock,
    round: Round,
    plans: Sequence[TaskPlan],
    config: TrainConfig,
    deadline: DeadlinePolicy,
    start: float | None = None,
) -> tuple[list[ClientUpdate], float]:
    """Send the planned train tasks; every reply is settled by `round`
    (`Round.settle`) and booked in plan order. Returns the updates (one per
    plan) and the phase's length.

    The tasks start at simulated `start` (default: now); a client that goes
    offline before its update is back (`clock.availability`) has failed,
    though it trained (its ε is spent, as a late update's).

    When the round folds (`Round.fold`: the strategy folds, lateness is
    decided reply by reply, no client is planned twice) each reply is
    settled as soon as it arrives and its delta dropped; otherwise every
    reply is settled in plan order once all are in."""
    tasks = train_tasks(plans, config)
    at = clock.now if start is None else start
    lengths: dict[ClientId, float | None] = {}
    gone: dict[ClientId, float] = {}  # client → seconds into its task
    settled: dict[int, Settled] = {}

    def timing(plan: TaskPlan, exchange: Exchange) -> None:
        samples = round.samples_to_time(plan, exchange)
        length_s = duration(clock, plan.client, exchange, samples)
        cut = went_offline(clock, plan.client, at, length_s)
        if cut is not None:
            gone[plan.client], length_s = cut, None
        lengths[plan.client] = length_s

    def settle(index: int, exchange: Exchange, late: bool) -> Settled:
        plan = plans[index]
        return round.settle(
            plan,
            exchange,
            length_s=lengths[plan.client],
            gone_s=gone.get(plan.client),
            lateness=after_deadline if late else on_time,
        )

    adversary = round.adversary
    forged = adversary.forging(round.number) if adversary is not None else {}
    held: dict[int, bool] = {}  # an attacker's reply, kept for the forge: late?

    def on_arrival(index: int, exchange: Exchange) -> Exchange:
        if forged:
            assert adversary is not None
            adversary.observe(plans[index].client, exchange)
        if round.fold is None:  # timed and settled in plan order, below
            return exchange
        timing(plans[index], exchange)
        late = bool(arrives_late(deadline, lengths[plans[index].client]))
        if plans[index].client in forged:  # settled once forged, below
            held[index] = late
            return exchange
        settled[index] = settle(index, exchange, late)
        return settled[index].exchange

    exchanges = await courier.round_trip(
        [(p.client, t) for p, t in zip(plans, tasks, strict=True)],
        round.number,
        round.roster,
        on_exchange=on_arrival,
    )
    if forged:  # the simulator's attack, before the server judges the reply
        assert adversary is not None
        exchanges = adversary.forge(
            round.number, [(p.client, e) for p, e in zip(plans, exchanges, strict=True)]
        )
    if round.fold is None:
        # In plan order: with a client planned twice, its later plan's timing
        # counts, whatever order the replies came back in.
        for plan, exchange in zip(plans, exchanges, strict=True):
            timing(plan, exchange)
    length, late = close_round(lengths, deadline)
    updates = []
    for index, (plan, exchange) in enumerate(zip(plans, exchanges, strict=True)):
        if index in held:
            settled[index] = settle(index, exchange, held[index])
        elif index not in settled:
            settled[index] = settle(index, exchange, plan.client in late)
        updates.append(round.record(settled[index]))
    return updates, length


def went_offline(
    clock: SimClock, client: ClientId, start: float, length_s: float | None
) -> float | None:
    """Seconds into a task started at `start` at which its client goes
    offline, if that is before its reply of `length_s` is back."""
    if length_s is None:
        return None
    cut = clock.availability.offline_at(client, start, start + length_s)
    return None if cut is None else cut - start


async def probe(
    courier: Courier,
    clock: SimClock,
    round: Round,
    plans: Sequence[ProbePlan],
    updates: Sequence[ClientUpdate],
) -> tuple[list[ClientUpdate], float]:
    """Send the probe plans; the scores go onto the owners' updates as
    `peer_scores`. Returns the updates and the phase's length (the slowest
    probe: the server waits for every answer)."""
    exchanges = await courier.round_trip(
        [(p.client, t) for p, t in zip(plans, probe_tasks(plans), strict=True)],
        round.number,
        round.roster,
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
        round.book(plan.client, exchange)
        # The client scores each model on its whole held-out split.
        declared = round.roster.members.get(plan.client)
        samples = (declared.n_test if declared else 0) * len(plan.models)
        durations.append(duration(clock, plan.client, exchange, samples))
    scored = [
        replace(u, peer_scores=scores[u.client]) if u.client in scores else u
        for u in updates
    ]
    return scored, _slowest(durations)


Mixture = Sequence[tuple[ModelKey, np.ndarray, float]]
"""A client's evaluation mixture (FedEM's): each model with its weight."""


def mixtures(
    strategy: Strategy[Any], state: ServerState, members: Sequence[ClientInfo]
) -> dict[ClientId, Mixture]:
    """The mixture each member is evaluated with, for those the strategy
    evaluates with one (`Strategy.mixture_for`), models in id order."""
    found: dict[ClientId, Mixture] = {}
    for client in members:
        weights = strategy.mixture_for(state, client.id)
        if weights is not None:
            found[client.id] = [
                (k, state.models[k], float(weights[k])) for k in sorted(weights)
            ]
    return found


def mixture_task(
    shared: dict[tuple[ModelKey, int], ClusterModel],
    first: ModelKey,
    mixture: Mixture,
) -> EvaluateTask:
    """The evaluate task of a mixture: `first` (the model the client is
    evaluated as, which its reply names) as `model`, the rest as `others`,
    each model object shared with every task that sends it."""

    def model(key: ModelKey, weights: np.ndarray) -> ClusterModel:
        if (key, id(weights)) not in shared:
            shared[(key, id(weights))] = ClusterModel(cluster=key, weights=weights)
        return shared[(key, id(weights))]

    ordered = sorted(mixture, key=lambda part: part[0] != first)
    if len(ordered) == 1:  # a mixture of one model is that model
        return EvaluateTask(model=model(ordered[0][0], ordered[0][1]))
    return EvaluateTask(
        model=model(ordered[0][0], ordered[0][1]),
        others=tuple(model(k, w) for k, w, _ in ordered[1:]),
        mixture=tuple(share for _, _, share in ordered),
    )


async def evaluate(
    courier: Courier,
    round: Round,
    models: Mapping[ClientId, tuple[ModelKey, np.ndarray]],
    mixtures: Mapping[ClientId, Mixture] | None = None,
) -> None:
    """Each client scores the model it is evaluated with on its test set (its
    held-out split where the dataset has no test split): its model in
    `models`, or, for a client in `mixtures` (FedEM's), the mixture of that
    model and the others, each with its weight."""
    tasks: dict[tuple[ModelKey, int], EvaluateTask] = {}
    shared: dict[tuple[ModelKey, int], ClusterModel] = {}
    requests: list[tuple[ClientId, Message]] = []
    mixtures = mixtures or {}
    for client, (cluster, weights) in models.items():
        key = (cluster, id(weights))
        if key not in shared:
            shared[key] = ClusterModel(cluster=cluster, weights=weights)
        if client in mixtures:
            requests.append((client, mixture_task(shared, cluster, mixtures[client])))
            continue
        if key not in tasks:
            tasks[key] = EvaluateTask(model=shared[key])
        requests.append((client, tasks[key]))
    exchanges = await courier.round_trip(requests, round.number, round.roster)
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
        round.book(client, exchange)
        if isinstance(reply, EvaluateReply) and exchange.status == "ok":
            outcome = round.outcomes[client]
            outcome.acc, outcome.loss = reply.accuracy, reply.loss
            outcome.val_acc = reply.val_accuracy
