"""The parameter server: client registry, round loop, and the books.

The server owns the strategy's state and runs every round the same way: plan,
send tasks, collect and check replies, aggregate, evaluate. Whatever a client
sends back is checked before it can reach a model; what fails a check is
refused, counted with its reason, and the round goes on without it.

Two phases run only for a strategy that asks for them. Before planning, the
clients not yet described answer a describe task (`Strategy.wants`, e.g.
CAFA's class histogram), once each. Between training and aggregation, the
strategy's probe plans (`Strategy.plan_probes`, e.g. CAFA's model sharing)
send peers' models to clients that score them on their held-out splits; the
scores reach `aggregate` on the updates. Both phases are messages like any
other: their bytes are counted per client and their time adds to the round's.

The checks themselves live in `validation.py`. Between rounds, `snapshot`
returns everything the server holds that a resumed run needs, and `restore`
puts it back (a checkpoint; see `clusterfed.checkpoint`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from clusterfed.algorithms import (
    ClientInfo,
    ClientUpdate,
    PeerScore,
    ProbePlan,
    Strategy,
    TaskPlan,
    make,
)
from clusterfed.protocol import (
    MAX_MESSAGE_BYTES,
    ClassHistogram,
    ClusterModel,
    DescribeTask,
    Encoder,
    Envelope,
    ErrorReply,
    EvaluateReply,
    EvaluateTask,
    IdentityRule,
    JoinRequest,
    LeaveNotice,
    Message,
    PeerModel,
    ProbeReply,
    ProbeTask,
    ProtocolError,
    Shutdown,
    TrainConfig,
    TrainTask,
    UpdateReply,
    Welcome,
    decode,
    encode,
)
from clusterfed.seeding import numpy_rng
from clusterfed.types import ClientId, ClusterId

from .client import client_address
from .clock import DeadlinePolicy, DeviceProfile, WaitAll, close_round, transfer_s
from .outcome import ClientOutcome, Exchange, RoundOutcome
from .spec import ServerSpec
from .transport import Transport
from .validation import (
    REPLY_KINDS,
    ReplyBooks,
    check_histogram,
    check_probe,
    check_update,
)

SERVER_ADDRESS = "server"
STRATEGY_STREAM = 1  # key of the strategy's random stream under the scenario seed


class ParameterServer:
    """Runs the rounds of one federated run.

    Args:
        strategy: the algorithm deciding plans and aggregation.
        initial: the initial model as a flat float32 vector.
        train_config: base training settings (the strategy may extend them).
        transport: delivers requests to clients.
        seed: the scenario seed; the strategy's random stream derives from it.
        profiles: simulated devices by client (default profile otherwise).
        deadline: when a round stops waiting for replies (simulated time).
        task_timeout_s: wall-clock limit on one request; None waits forever
            (a client that never answers then holds the run).
        max_message_bytes: replies larger than this are refused.
        max_update_norm: updates whose delta has a larger L2 norm are
            refused; None: no bound.
        max_in_flight: requests outstanding at once (bounds the memory of
            encoded models in flight; enough to keep every worker busy).
    """

    def __init__(
        self,
        *,
        strategy: Strategy,
        initial: np.ndarray,
        train_config: TrainConfig,
        transport: Transport,
        seed: int,
        profiles: Mapping[ClientId, DeviceProfile] | None = None,
        deadline: DeadlinePolicy | None = None,
        task_timeout_s: float | None = None,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        max_update_norm: float | None = None,
        max_in_flight: int = 64,
    ) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        self.max_in_flight = max_in_flight
        self.strategy = strategy
        self.state = strategy.init_state(
            np.asarray(initial, dtype=np.float32), numpy_rng(seed, STRATEGY_STREAM)
        )
        self.n_weights = int(initial.shape[0])
        self.train_config = strategy.train_config(train_config)
        self.transport = transport
        self.profiles = dict(profiles or {})
        self.deadline = deadline or WaitAll()
        self.task_timeout_s = task_timeout_s
        self.max_message_bytes = max_message_bytes
        self.max_update_norm = max_update_norm
        self.clients: dict[ClientId, ClientInfo] = {}
        self.round = 0
        self.books = ReplyBooks()
        self._next_id = 0  # message ids: server:0, server:1, ...
        self._rejections: list[str] = []  # drained into each round's outcome
        # Local DP: the ε each client (present or gone) last reported spending.
        self.epsilon: dict[ClientId, float] = {}
        # Clients that answered the strategy's describe task (or were refused).
        self.described: set[ClientId] = set()
        self._n_classes: int | None = None  # the length of the first histogram

    # -- inbound messages (joins) ---------------------------------------------

    async def handle(self, data: bytes) -> bytes:
        """Serve a message a client sent on its own (a join request)."""
        try:
            request = decode(data, max_bytes=self.max_message_bytes)
        except ProtocolError as exc:
            self._rejections.append(f"inbound: {exc}")
            return self._encode(
                ErrorReply(code="bad_message", message=str(exc)), "unknown", -1
            )
        match request.payload:
            case JoinRequest(client_id=cid) if request.sender == client_address(cid):
                cluster = self.join(
                    ClientInfo(ClientId(cid), request.payload.n_train, self.round)
                )
                reply: Message = Welcome(client_id=cid, cluster=cluster)
            case LeaveNotice(client_id=cid) if request.sender == client_address(cid):
                self.leave(ClientId(cid))
                reply = Shutdown(reason="leave acknowledged")
            case other if other.kind in REPLY_KINDS:
                reason = self.books.check_inbound(request, self.clients)
                self._rejections.append(reason)
                reply = ErrorReply(code="refused", message=reason)
            case other:
                reason = (
                    f"inbound {other.kind!r} from {request.sender!r} is not accepted"
                )
                self._rejections.append(reason)
                reply = ErrorReply(code="refused", message=reason)
        return self._encode(reply, request.sender, request.round, request.msg_id)

    def join(self, client: ClientInfo) -> ClusterId | None:
        """Register a client; one that joins again (back from a restart)
        keeps its place and its cluster."""
        if client.id not in self.clients:
            self.clients[client.id] = client
            self.books.departed.discard(client.id)
            self.state = self.strategy.on_join(self.state, client)
        return self.state.assignment.get(client.id)

    def leave(self, client: ClientId) -> None:
        if self.clients.pop(client, None) is not None:
            self.books.departed.add(client)
            self.described.discard(client)
            self.state = self.strategy.on_leave(self.state, client)

    # -- the round ------------------------------------------------------------

    async def run_round(self, round: int) -> RoundOutcome:
        """Plan, train, aggregate and evaluate one round."""
        self.round = round
        self.books.begin_round(round)
        active = [self.clients[c] for c in sorted(self.clients)]
        outcomes = {c.id: ClientOutcome(c.id) for c in active}
        describing = await self._describe(active, outcomes, round)
        plans = self.strategy.plan_round(self.state, round, active)
        tasks = self._tasks(plans)
        exchanges = await self._round_trip(
            [(p.client, t) for p, t in zip(plans, tasks, strict=True)], round
        )
        durations = {
            p.client: self._duration(p.client, e)
            for p, e in zip(plans, exchanges, strict=True)
        }
        length, late = close_round(durations, self.deadline)
        updates = []
        updated: set[ClientId] = set()
        for plan, exchange in zip(plans, exchanges, strict=True):
            update = self._judge_update(plan, exchange)
            if update.ok and plan.client in updated:
                update = replace(
                    update,
                    status="rejected",
                    reason=f"duplicate: a second update from client {plan.client}"
                    f" in round {round}",
                )
            if update.ok and plan.client in late:
                update = replace(update, status="late", reason="after the deadline")
            if update.ok:
                updated.add(plan.client)
            outcome = outcomes[plan.client]
            outcome.planned = True
            outcome.trained = update.ok
            outcome.late = update.status == "late"
            outcome.failed = update.status == "failed"
            outcome.rejected = update.status == "rejected"
            outcome.train_loss = update.loss
            outcome.sim_s = durations[plan.client] or 0.0
            self._note_epsilon(plan.client, exchange)
            self._book(
                outcome, replace(exchange, status=update.status, reason=update.reason)
            )
            updates.append(update)
        updates, probing = await self._probe(updates, outcomes, round)
        self.state = self.strategy.aggregate(self.state, round, updates)
        await self._evaluate(active, outcomes, round)
        for outcome in outcomes.values():
            outcome.cluster = self.state.assignment.get(outcome.id)
            outcome.epsilon = self.epsilon.get(outcome.id)
        rejections, self._rejections = self._rejections, []
        return RoundOutcome(
            round=round,
            sim_duration=describing + length + probing,
            clients=list(outcomes.values()),
            n_clusters=self.state.n_clusters,
            rejections=rejections,
            epsilon_max=max(self.epsilon.values(), default=None),
            diagnostics=self.strategy.diagnostics(self.state),
        )

    def snapshot(self) -> dict[str, Any]:
        """Everything a resumed run needs of this server, between two rounds:
        the strategy's state (cluster models, assignment, its rng, its extras),
        the client registry, the books, the next message id. Picklable."""
        return {
            "round": self.round,
            "state": self.state,
            "clients": dict(self.clients),
            "next_id": self._next_id,
            "epsilon": dict(self.epsilon),
            "described": set(self.described),
            "n_classes": self._n_classes,
            "departed": set(self.books.departed),
            "rejections": list(self._rejections),
        }

    def restore(self, snapshot: Mapping[str, Any]) -> None:
        """Take back what `snapshot` returned (after the clients rejoined)."""
        self.round = snapshot["round"]
        self.state = snapshot["state"]
        self.clients = dict(snapshot["clients"])
        self._next_id = snapshot["next_id"]
        self.epsilon = dict(snapshot["epsilon"])
        self.described = set(snapshot["described"])
        self._n_classes = snapshot["n_classes"]
        self.books = ReplyBooks()
        self.books.round = self.round
        self.books.departed = set(snapshot["departed"])
        self._rejections = list(snapshot["rejections"])

    async def shutdown(self) -> None:
        """Tell every client the run is over; a client that cannot hear is skipped."""
        bye = Shutdown(reason="run finished")
        await self._round_trip([(c, bye) for c in self.clients], -1)

    async def _describe(
        self,
        active: Sequence[ClientInfo],
        outcomes: dict[ClientId, ClientOutcome],
        round: int,
    ) -> float:
        """Ask the clients not yet described for what the strategy wants; hand
        the accepted histograms to the strategy. Returns the phase's length.

        Only a strategy whose `wants` names a description gets one: for any
        other, no client is asked and none sends anything about its data. A
        client that does not answer is asked again next round; one whose
        answer is refused is not.
        """
        if "class_histogram" not in self.strategy.wants:
            return 0.0
        todo = [c.id for c in active if c.id not in self.described]
        if not todo:
            return 0.0
        task = DescribeTask(want="class_histogram")
        exchanges = await self._round_trip([(c, task) for c in todo], round)
        histograms: dict[ClientId, np.ndarray] = {}
        durations = []
        for client, exchange in zip(todo, exchanges, strict=True):
            if exchange.status == "ok":
                reply = exchange.reply.payload  # type: ignore[union-attr]
                problem = check_histogram(reply, client, self._n_classes)
                if problem is None:
                    assert isinstance(reply, ClassHistogram)
                    histograms[client] = np.asarray(reply.counts, dtype=np.int64)
                    self._n_classes = len(reply.counts)
                else:
                    exchange = replace(exchange, status="rejected", reason=problem)
            if exchange.status != "ok" and exchange.reason is not None:
                exchange = replace(exchange, reason=f"describe: {exchange.reason}")
            self._book(outcomes[client], exchange)
            if exchange.status != "failed":
                self.described.add(client)
            durations.append(self._duration(client, exchange))
        if histograms:
            self.state = self.strategy.on_describe(self.state, round, histograms)
        return max((d for d in durations if d is not None), default=0.0)

    async def _probe(
        self,
        updates: list[ClientUpdate],
        outcomes: dict[ClientId, ClientOutcome],
        round: int,
    ) -> tuple[list[ClientUpdate], float]:
        """Run the strategy's probe plans; the scores go onto the owners'
        updates as `peer_scores`. Returns the updates and the phase's length
        (the slowest probe: the server waits for every answer)."""
        plans = [
            p
            for p in self.strategy.plan_probes(self.state, round, updates)
            if p.client in outcomes and p.models
        ]
        if not plans:
            return updates, 0.0
        exchanges = await self._round_trip(
            [
                (p.client, t)
                for p, t in zip(plans, self._probe_tasks(plans), strict=True)
            ],
            round,
        )
        scores: dict[ClientId, dict[ClientId, PeerScore]] = {}
        durations = []
        for plan, exchange in zip(plans, exchanges, strict=True):
            if exchange.status == "ok":
                reply = exchange.reply.payload  # type: ignore[union-attr]
                problem = check_probe(reply, plan)
                if problem is None:
                    assert isinstance(reply, ProbeReply)
                    for score in reply.scores:
                        scores.setdefault(ClientId(score.owner), {})[plan.client] = (
                            PeerScore(score.accuracy, score.loss, reply.n_samples)
                        )
                else:
                    exchange = replace(exchange, status="rejected", reason=problem)
            if exchange.status != "ok" and exchange.reason is not None:
                exchange = replace(exchange, reason=f"probe: {exchange.reason}")
            self._book(outcomes[plan.client], exchange)
            durations.append(self._duration(plan.client, exchange))
        scored = [
            replace(u, peer_scores=scores[u.client]) if u.client in scores else u
            for u in updates
        ]
        return scored, max((d for d in durations if d is not None), default=0.0)

    def _probe_tasks(self, plans: Sequence[ProbePlan]) -> list[ProbeTask]:
        """One probe task per plan; a model sent to several clients is built once."""
        models: dict[tuple[int, int], PeerModel] = {}
        tasks = []
        for plan in plans:
            sent = []
            for owner in sorted(plan.models):
                weights = plan.models[owner]
                key = (owner, id(weights))
                if key not in models:
                    models[key] = PeerModel(owner=owner, weights=weights)
                sent.append(models[key])
            tasks.append(ProbeTask(models=tuple(sent)))
        return tasks

    def _tasks(self, plans: Sequence[TaskPlan]) -> list[TrainTask]:
        """One task per plan; plans that send the same models share one object,
        so the codec packs each model once per round."""
        models: dict[tuple[int, int, int], ClusterModel] = {}
        configs: dict[tuple[Any, ...], TrainConfig] = {(): self.train_config}
        tasks: dict[tuple[Any, ...], TrainTask] = {}
        result = []
        for plan in plans:
            changes = tuple(sorted(plan.overrides.items()))
            if changes not in configs:
                configs[changes] = TrainConfig.model_validate(
                    {**self.train_config.model_dump(), **plan.overrides}
                )
            sent = []
            for k, weights in plan.models.items():
                last = plan.last_updates.get(k)
                key = (k, id(weights), id(last))
                if key not in models:
                    models[key] = ClusterModel(
                        cluster=k, weights=weights, last_update=last
                    )
                sent.append(models[key])
            identity = (
                IdentityRule(name=plan.identity, params=dict(plan.identity_params))
                if plan.identity is not None
                else None
            )
            task_key = (
                changes,
                tuple(id(m) for m in sent),
                plan.identity,
                tuple(sorted(plan.identity_params.items())),
            )
            if task_key not in tasks:
                tasks[task_key] = TrainTask(
                    models=tuple(sent), config=configs[changes], identity=identity
                )
            result.append(tasks[task_key])
        return result

    def _judge_update(self, plan: TaskPlan, exchange: Exchange) -> ClientUpdate:
        first = next(iter(plan.models))
        if exchange.status != "ok":
            return ClientUpdate(
                plan.client, first, exchange.status, reason=exchange.reason
            )
        reply = exchange.reply.payload  # type: ignore[union-attr]
        problem = check_update(reply, plan, self.n_weights, self.max_update_norm)
        if problem is not None:
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

    def _note_epsilon(self, client: ClientId, exchange: Exchange) -> None:
        """Keep the ε a client reports; a late update was trained all the same."""
        reply = exchange.reply.payload if exchange.reply is not None else None
        if (
            exchange.status == "ok"
            and isinstance(reply, UpdateReply)
            and reply.epsilon is not None
        ):
            self.epsilon[client] = reply.epsilon

    async def _evaluate(
        self,
        active: Sequence[ClientInfo],
        outcomes: dict[ClientId, ClientOutcome],
        round: int,
    ) -> None:
        tasks: dict[tuple[int, int], EvaluateTask] = {}
        requests: list[tuple[ClientId, Message]] = []
        for client in active:
            cluster, weights = self.strategy.model_for(self.state, client.id)
            key = (cluster, id(weights))
            if key not in tasks:
                tasks[key] = EvaluateTask(
                    model=ClusterModel(cluster=cluster, weights=weights)
                )
            requests.append((client.id, tasks[key]))
        exchanges = await self._round_trip(requests, round)
        for client, exchange in zip(active, exchanges, strict=True):
            outcome = outcomes[client.id]
            reply = exchange.reply.payload if exchange.reply else None
            if exchange.status == "ok" and not isinstance(reply, EvaluateReply):
                problem = f"expected an evaluate_reply, got {reply.kind!r}"  # type: ignore[union-attr]
                exchange = replace(exchange, status="rejected", reason=problem)
            self._book(outcome, exchange)
            if isinstance(reply, EvaluateReply) and exchange.status == "ok":
                outcome.acc, outcome.loss = reply.accuracy, reply.loss

    async def _round_trip(
        self, requests: Sequence[tuple[ClientId, Message]], round: int
    ) -> list[Exchange]:
        """Send the requests, at most `max_in_flight` at a time, and judge
        every reply. A message is encoded only when it is sent, so memory holds
        a bounded number of encoded models, however many clients there are."""
        envelopes = [self._envelope(p, client_address(c), round) for c, p in requests]
        encoder = Encoder()
        slots = asyncio.Semaphore(self.max_in_flight)

        async def one(client: ClientId, envelope: Envelope) -> Exchange:
            async with slots:
                return await self._exchange(client, envelope, encoder.encode(envelope))

        return list(
            await asyncio.gather(
                *(
                    one(client, envelope)
                    for (client, _), envelope in zip(requests, envelopes, strict=True)
                )
            )
        )

    async def _exchange(
        self, client: ClientId, request: Envelope, data: bytes
    ) -> Exchange:
        try:
            raw = await asyncio.wait_for(
                self.transport.request(client, data), timeout=self.task_timeout_s
            )
        except TimeoutError:
            return Exchange(
                "failed", None, f"no reply within {self.task_timeout_s} s", len(data)
            )
        except Exception as exc:  # the runtime's own failure types (dead actor, ...)
            return Exchange("failed", None, f"{type(exc).__name__}: {exc}", len(data))
        try:
            reply = decode(raw, max_bytes=self.max_message_bytes)
        except ProtocolError as exc:
            return Exchange("rejected", None, str(exc), len(data), len(raw))
        problem = self.books.check_reply(reply, request, self.clients)
        if problem is not None:
            return Exchange("rejected", None, problem, len(data), len(raw))
        self.books.accept(reply, request)
        if isinstance(reply.payload, ErrorReply):
            problem = f"{reply.payload.code}: {reply.payload.message}"
            return Exchange("failed", reply, problem, len(data), len(raw))
        return Exchange("ok", reply, None, len(data), len(raw))

    def _book(self, outcome: ClientOutcome, exchange: Exchange) -> None:
        """Count an exchange's bytes and, unless it went well, its reason."""
        outcome.bytes_down += exchange.bytes_down
        outcome.bytes_up += exchange.bytes_up
        if exchange.status == "rejected":
            self._rejections.append(f"client {outcome.id}: {exchange.reason}")
        if exchange.status != "ok":
            outcome.reason = exchange.reason

    def _duration(self, client: ClientId, exchange: Exchange) -> float | None:
        """Simulated time until the reply arrived; None if it never does."""
        if exchange.status == "failed" or exchange.reply is None:
            return None
        payload = exchange.reply.payload
        compute = (
            payload.compute_s if isinstance(payload, UpdateReply | ProbeReply) else 0.0
        )
        profile = self.profiles.get(client, DeviceProfile())
        return (
            transfer_s(profile, exchange.bytes_down)
            + compute
            + transfer_s(profile, exchange.bytes_up)
        )

    def _envelope(
        self,
        payload: Message,
        recipient: str,
        round: int,
        in_reply_to: str | None = None,
    ) -> Envelope:
        msg_id = f"{SERVER_ADDRESS}:{self._next_id}"
        self._next_id += 1
        return Envelope(
            msg_id=msg_id,
            sender=SERVER_ADDRESS,
            recipient=recipient,
            round=round,
            in_reply_to=in_reply_to,
            payload=payload,
        )

    def _encode(
        self,
        payload: Message,
        recipient: str,
        round: int,
        in_reply_to: str | None = None,
    ) -> bytes:
        return encode(self._envelope(payload, recipient, round, in_reply_to))


def build_server(
    spec: ServerSpec, transport: Transport, profiles: Mapping[ClientId, DeviceProfile]
) -> ParameterServer:
    server = ParameterServer(
        strategy=make(spec.algorithm, **spec.algorithm_params),
        initial=spec.initial,
        train_config=spec.train_config,
        transport=transport,
        seed=spec.seed,
        profiles=profiles,
        deadline=spec.deadline,
        task_timeout_s=spec.task_timeout_s,
        max_message_bytes=spec.max_message_bytes,
        max_update_norm=spec.max_update_norm,
    )
    if spec.more_initial:
        models = [spec.initial, *spec.more_initial]
        server.state = server.strategy.with_initial_models(server.state, models)
    return server
