"""One round's books, and the one place where an update is settled.

A synchronous round (`phases.train`) and an asynchronous aggregation
(`asynchronous.py`) differ only in *when* tasks go out and *when* the round
or its buffer closes. Whatever the schedule, every train reply goes through
`Round.settle` — the exchange judged against the plan and the limits (the
sample count against the `n_train` its client declared at join), a second
update of one client refused, the schedule's lateness verdict applied, the
update folded into the round's sums (streaming aggregation) or kept — and
then through `Round.record`, which books it: the client's outcome (status,
loss, simulated seconds, staleness), its bytes and reason, the ε it
reported. A decision written in two places drifts (async once accepted a
sample count that sync refused); here it is written once.

`settle` and `record` are apart because a synchronous round settles a reply
as soon as it arrives (the fold drops its delta) but books the round in plan
order, so the refusals read the same in every runtime, whatever order the
replies came in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from clusterfed.algorithms import ClientUpdate, TaskPlan, is_mixture
from clusterfed.protocol import UpdateReply
from clusterfed.types import ClientId, model_key

from .adversary import Adversary
from .folding import RoundFold, without_delta
from .outcome import ClientOutcome, Exchange
from .roster import Roster
from .validation import check_update, deltas_of, max_samples_seen, models_trained

Lateness = Callable[[ClientUpdate], tuple[str | None, int | None]]
"""The schedule's lateness rule for a judged update: why it counts as late
(None: it does not), and its staleness in server versions (None: the
schedule counts none)."""


def on_time(update: ClientUpdate) -> tuple[str | None, int | None]:
    """Lateness rule of a reply that came in time."""
    return None, None


def after_deadline(update: ClientUpdate) -> tuple[str | None, int | None]:
    """Lateness rule of a reply that came after the round's deadline."""
    return "after the deadline", None


@dataclass(frozen=True)
class UpdateLimits:
    """What an update must fit.

    Attributes:
        n_weights: the model's size.
        max_update_norm: refuse a delta of a larger L2 norm (None: no bound).
        max_update_ratio: refuse a delta whose norm is over this many times
            the norm of the model it was trained from (at least 1): no honest
            step of SGD comes near, and an absurd one (1e30 everywhere, one
            coordinate at 3e38) would otherwise ruin or freeze the model.
            None: no such bound.
        max_weight_ratio: a client's sample count weighs at most this many
            times the median count the registered clients declared at join,
            so no client owns a weighted mean by declaring 2³¹ − 1 samples.
            None: no cap.
        epochs: the local epochs of a task that does not override them (the
            run's `TrainConfig`): with the client's n_train, they bound the
            samples it may say it processed (`max_samples_seen`).
    """

    n_weights: int
    max_update_norm: float | None = None
    max_update_ratio: float | None = None
    max_weight_ratio: float | None = None
    epochs: int = 1

    def epochs_of(self, plan: TaskPlan) -> int:
        """The local epochs of `plan`'s task."""
        return int(plan.overrides.get("epochs", self.epochs))


@dataclass(frozen=True)
class Settled:
    """A settled train reply: the update as the strategy sees it, the
    exchange as kept (without its delta once folded), and its timing."""

    plan: TaskPlan
    update: ClientUpdate
    exchange: Exchange
    sim_s: float
    trained: bool  # it replied (even late, or before it went offline)
    staleness: int | None = None


@dataclass
class Round:
    """A round's books — each member's outcome and every refusal — and the
    settling of its train replies (see the module docstring).

    Args:
        number: the round.
        roster: the server's roster: its members as they declared
            themselves, its privacy ledger (client → ε it last reported).
        outcomes: each member's outcome, filled as the round goes.
        rejections: the run's refusals, in the order they happen.
        limits: what an update must fit.
        fold: the round's running sums, for a strategy that folds.
        adversary: forges the simulated attacks' replies (`adversary.py`);
            None: no attacker.
        once_per_client: a second accepted update of one client is refused
            (a synchronous round: one task each); False in asynchronous mode,
            where a fast client may send several before the next aggregation.
    """

    number: int
    roster: Roster
    outcomes: dict[ClientId, ClientOutcome]
    rejections: list[str]
    limits: UpdateLimits
    fold: RoundFold | None = None
    once_per_client: bool = True
    adversary: Adversary | None = None
    # Told every exchange's verdict as it is booked (a trace records them).
    on_book: Callable[[ClientId, Exchange], None] | None = None
    # Derived, never passed: who has an accepted update, and the weight cap.
    _updated: set[ClientId] = field(default_factory=set, init=False)
    _weight_cap: float | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        ratio = self.limits.max_weight_ratio
        if ratio is not None and self.roster:
            declared = [info.n_train for info in self.roster.members.values()]
            self._weight_cap = ratio * max(1.0, float(np.median(declared)))

    def book(self, client: ClientId, exchange: Exchange) -> None:
        """Count an exchange's bytes and, unless it went well, its reason."""
        outcome = self.outcomes[client]
        outcome.bytes_down += exchange.bytes_down
        outcome.bytes_up += exchange.bytes_up
        if exchange.status == "rejected":
            self.rejections.append(f"client {client}: {exchange.reason}")
        if exchange.status != "ok":
            outcome.reason = exchange.reason
        if self.on_book is not None:
            self.on_book(client, exchange)

    def samples_to_time(self, plan: TaskPlan, exchange: Exchange) -> int:
        """The samples a train reply is timed by (`phases.duration`): the
        `samples_seen` it reports, at most `max_samples_seen` for its task,
        so a claim the checks refuse stretches the round no further than an
        honest reply could; 0 for any other reply."""
        reply = exchange.reply.payload if exchange.reply is not None else None
        if not isinstance(reply, UpdateReply):
            return 0
        declared = self.roster.members.get(plan.client)
        if declared is None:
            return reply.samples_seen
        most = max_samples_seen(
            declared.n_train,
            self.limits.epochs_of(plan),
            len(plan.models),
            models_trained(plan),
        )
        return min(reply.samples_seen, most)

    def settle(
        self,
        plan: TaskPlan,
        exchange: Exchange,
        *,
        length_s: float | None,
        gone_s: float | None = None,
        lateness: Lateness = on_time,
    ) -> Settled:
        """Judge one train reply and fold or keep its update.

        Args:
            plan: the task the reply answers.
            exchange: the reply as the courier judged it.
            length_s: simulated seconds until it arrived (None: never).
            gone_s: the client went offline this far into its task, before
                its reply was back: the update failed (its training happened).
            lateness: the schedule's verdict on the judged update.
        """
        trained = exchange.status == "ok"
        if gone_s is not None:
            exchange = offline_exchange(exchange, gone_s)
        update = self._judge(plan, exchange)
        if update.ok and self.once_per_client and plan.client in self._updated:
            update = replace(
                update,
                status="rejected",
                reason=f"duplicate: a second update from client {plan.client}"
                f" in round {self.number}",
            )
        late, staleness = lateness(update)
        if update.ok and late is not None:
            update = replace(update, status="late", reason=late)
        if update.ok:
            self._updated.add(plan.client)
        if self.fold is not None:
            update = self.fold.add(update)
            exchange = without_delta(exchange)
        sim_s = gone_s if gone_s is not None else (length_s or 0.0)
        return Settled(plan, update, exchange, sim_s, trained, staleness)

    def record(self, settled: Settled) -> ClientUpdate:
        """Book a settled update: its client's outcome, bytes, reason and ε.
        Returns the update."""
        update, client = settled.update, settled.plan.client
        outcome = self.outcomes[client]
        outcome.status = update.status
        outcome.train_loss = update.loss
        outcome.sim_s = settled.sim_s
        if settled.staleness is not None:
            outcome.staleness = settled.staleness
        reply = settled.exchange.reply
        payload = reply.payload if reply is not None else None
        # A late (or refused) update was trained all the same: its ε is spent.
        if (
            settled.trained
            and isinstance(payload, UpdateReply)
            and payload.epsilon is not None
        ):
            self.roster.epsilon[client] = payload.epsilon
        if (
            update.status in ("ok", "late")
            and isinstance(payload, UpdateReply)
            and payload.n_samples > update.n_samples
        ):
            outcome.reason = (
                f"n_samples {payload.n_samples} weighed as {update.n_samples}"
                " (max_weight_ratio × the median declared n_train)"
            )
        self.book(
            client,
            replace(settled.exchange, status=update.status, reason=update.reason),
        )
        return update

    def _judge(self, plan: TaskPlan, exchange: Exchange) -> ClientUpdate:
        """The update as the strategy sees it: accepted, or why not."""
        first = next(iter(plan.models))
        if exchange.status != "ok" or exchange.reply is None:
            return ClientUpdate(
                plan.client, first, exchange.status, reason=exchange.reason
            )
        reply = exchange.reply.payload
        declared = self.roster.members.get(plan.client)
        problem = check_update(
            reply,
            plan,
            self.limits.n_weights,
            self.limits.max_update_norm,
            declared.n_train if declared is not None else None,
            self.limits.max_update_ratio,
            self.limits.epochs_of(plan),
        )
        if problem is not None or not isinstance(reply, UpdateReply):
            return ClientUpdate(plan.client, first, "rejected", reason=problem)
        cluster = model_key(reply.cluster)
        n_samples = reply.n_samples
        if self._weight_cap is not None and n_samples > self._weight_cap:
            n_samples = int(self._weight_cap)
        return ClientUpdate(
            client=plan.client,
            cluster=cluster,
            status="ok",
            base=plan.models[cluster],
            delta=reply.delta,
            n_samples=n_samples,
            loss=reply.loss,
            importance=reply.importance,
            losses=reply.losses,
            deltas=deltas_of(reply, plan) if is_mixture(plan.identity) else None,
        )


def offline_exchange(exchange: Exchange, after_s: float) -> Exchange:
    """The exchange of a client that went offline `after_s` into its task:
    failed, its upload never made."""
    return replace(
        exchange,
        status="failed",
        reason=f"went offline {after_s:.4g} s into its task (availability)",
        bytes_up=0,
    )
