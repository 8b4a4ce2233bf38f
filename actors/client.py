"""The client actor: message handling around a `LocalTrainer`.

`handle` takes encoded bytes and returns encoded bytes: a reply, or an error
reply that says what was wrong. Nothing a peer sends can raise out of it. The
one exception is a faulty client (`faults.py`) that hangs: `handle` returns
None, and its host never delivers a reply.

Everything a client keeps lives on the client object, on its host: its
trainer (rebuilt when its data changes, e.g. after a drift) and with it its
privacy accountant, which outlives a rebuilt trainer, and a faulty client's
memory. The models its tasks run in belong to the host (`ScratchModels`).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, TypedDict

from clusterfed.data import load_dataset
from clusterfed.protocol import (
    ClassHistogram,
    ClusterfedError,
    DataSubspace,
    DescribeTask,
    Envelope,
    ErrorReply,
    EvaluateReply,
    EvaluateTask,
    JoinRequest,
    LeaveNotice,
    Message,
    ProbeReply,
    ProbeScore,
    ProbeTask,
    ProtocolError,
    Shutdown,
    TrainConfig,
    TrainTask,
    UpdateReply,
    decode,
    encode,
)
from clusterfed.types import ModelKey

from . import work
from .faults import FaultyBehaviour
from .mixture import evaluate as evaluate_mixture
from .privacy import PrivacyBudgetError
from .spec import ClientSpec, ScratchModels, build_trainer
from .trainer import LocalTrainer, TrainResult

log = logging.getLogger(__name__)


def client_address(client_id: int) -> str:
    return f"client/{client_id}"


@dataclass(frozen=True)
class TrainJob:
    """A train request a cohort trains (`Client.start_training`)."""

    request: Envelope
    config: TrainConfig
    plan: work.TrainPlan


def _update_reply(cluster: ModelKey, result: TrainResult) -> UpdateReply:
    return UpdateReply(
        cluster=cluster,
        delta=result.delta,
        n_samples=result.n_samples,
        loss=result.loss,
        samples_seen=result.samples_seen,
        epsilon=result.epsilon,
        importance=result.importance,
        losses=result.losses,
        components=result.components,
    )


class ClientState(TypedDict, total=False):
    """What a client keeps between rounds, for a checkpoint (`Client.state`);
    a key is there only when the client keeps it.

    Nothing of its trainer is in it: the optimizer is new every round and
    the trainer's random streams derive from the client's seed and the round
    (`trainer.py`), and its data and transform come from its spec (the
    engine's snapshot holds that).
    """

    privacy: list[tuple[float, float, int]]
    """Its privacy accountant's history, one (noise multiplier, sample rate,
    steps) per training call (Opacus' `accountant.history`); under local DP."""
    last_update: bytes
    """A faulty client's last encoded `UpdateReply`, the one it replays."""


CLIENT_STATE_KEYS = ClientState.__optional_keys__


def client_state_problem(state: object) -> str | None:
    """Why `state` (from a checkpoint) is not a `ClientState`, or None."""
    if not isinstance(state, dict):
        return f"is a {type(state).__name__}, not a client's state"
    unknown = sorted(map(str, set(state) - CLIENT_STATE_KEYS))
    if unknown:
        return f"holds {', '.join(unknown)}, which no client keeps"
    history = state.get("privacy", [])
    if not isinstance(history, list):
        return f"has a privacy history that is a {type(history).__name__}"
    for index, entry in enumerate(history):
        if not _accountant_step(entry):
            return (
                f"has privacy history entry {index} {entry!r}, expected"
                " (noise multiplier, sample rate, steps)"
            )
    if not isinstance(state.get("last_update", b""), bytes):
        return "has a last update that is not bytes"
    return None


def _accountant_step(entry: object) -> bool:
    """Whether `entry` is one (noise multiplier, sample rate, steps)."""
    if not isinstance(entry, tuple) or len(entry) != 3:
        return False
    noise, rate, steps = entry
    return (
        isinstance(noise, float)
        and isinstance(rate, float)
        and math.isfinite(noise)
        and noise >= 0
        and 0 <= rate <= 1
        and isinstance(steps, int)
        and not isinstance(steps, bool)
        and steps >= 0
    )


def keeps_state(spec: ClientSpec) -> bool:
    """Whether a client keeps anything between rounds that a checkpoint needs:
    a privacy accountant, or a faulty client's memory."""
    return spec.privacy is not None or bool(getattr(spec, "faults", ()))


class Client:
    """One federated client.

    Args:
        spec: its data, model and device; its id is also its address.
        models: the host's pool of models to train in (a fresh one by default).
    """

    def __init__(self, spec: ClientSpec, models: ScratchModels | None = None) -> None:
        self.spec = spec
        self.id = spec.id
        self.address = client_address(spec.id)
        self.models = models if models is not None else ScratchModels()
        self.stopped = False
        self.faults = FaultyBehaviour(spec)
        self._trainer: LocalTrainer | None = None
        self._trainer_key: dict[str, Any] | None = None

    @property
    def trainer(self) -> LocalTrainer:
        """The client's trainer, rebuilt only when its data changes.

        Under local DP the rebuilt trainer keeps the accountant of the old
        one when the privacy plan is the same (a drift within one run): its
        budget is the one it has been spending.
        """
        key = self.spec.data_key()
        if self._trainer is not None and key == self._trainer_key:
            return self._trainer
        trainer = build_trainer(self.spec, self.models)
        if (
            self._trainer is not None
            and self._trainer_key is not None
            and key["privacy"] is not None
            and self._trainer_key["privacy"] == key["privacy"]
        ):
            trainer.privacy = self._trainer.privacy
        self._trainer, self._trainer_key = trainer, key
        return trainer

    def update(self, spec: ClientSpec) -> None:
        """Take a new spec (a drift); the client keeps what it remembers."""
        if spec.id != self.id:
            raise ValueError(f"spec of client {spec.id} given to client {self.id}")
        self.spec = spec

    def state(self) -> ClientState | None:
        """What the client keeps between rounds, for a checkpoint: its privacy
        accountant's history and a faulty client's last update (None: nothing)."""
        state: ClientState = {}
        if self.spec.privacy is not None:
            privacy = self._trainer.privacy if self._trainer is not None else None
            history = privacy.engine.accountant.history if privacy is not None else []
            # Opacus keeps tuples (of numpy or Python numbers): plain ones go
            # into the checkpoint, as `restore` gives them back.
            state["privacy"] = [(float(s), float(q), int(n)) for s, q, n in history]
        if self.faults.last_update is not None:
            state["last_update"] = self.faults.last_update
        return state or None

    def restore(self, state: ClientState | None) -> None:
        """Take back what `state` returned (in a fresh process, on resume)."""
        state = state or {}
        history = state.get("privacy") or []
        if self.spec.privacy is not None and (history or self._trainer is not None):
            privacy = self.trainer.privacy
            if privacy is None:
                raise ValueError(f"client {self.id} has no privacy accountant")
            # Opacus keeps tuples; epsilon_of caches on them.
            privacy.engine.accountant.history = [
                (float(s), float(q), int(n)) for s, q, n in history
            ]
        self.faults.last_update = state.get("last_update")

    def join_request(self) -> bytes:
        request = JoinRequest(
            client_id=self.id, n_train=len(self.spec.train), n_test=len(self.spec.test)
        )
        return encode(
            self._envelope(
                request, msg_id=f"{self.address}:join", recipient="server", round=-1
            )
        )

    def leave_notice(self, reason: str = "") -> bytes:
        notice = LeaveNotice(client_id=self.id, reason=reason)
        return encode(
            self._envelope(
                notice, msg_id=f"{self.address}:leave", recipient="server", round=-1
            )
        )

    async def handle(self, data: bytes) -> bytes | None:
        """Serve one request; bad input becomes an error reply, never an exception.

        Returns None only for a faulty client that does not answer.
        """
        try:
            request = decode(data)
        except ProtocolError as exc:
            error = ErrorReply.of("bad_message", str(exc))
            return encode(
                self._envelope(
                    error, msg_id=f"{self.address}:error", recipient="server", round=-1
                )
            )
        behaviour = self.faults.due(request)
        if behaviour is not None:
            return await self.faults.forge(
                behaviour, request, self.spec, self._reply_to, self._serve
            )
        try:
            reply = await self._serve(request)
        except Exception as exc:  # a bug or a bad task must not kill the actor
            reply = self._error_reply(request, exc)
        return self._answer(request, reply)

    def start_training(self, data: bytes) -> TrainJob | bytes | None:
        """A train request this client can train in a cohort (`cohort.py`):
        decoded, probed and planned, as a `TrainJob`; the encoded error reply
        if planning failed (a spent privacy budget, say); None if `handle`
        must serve it alone (not a train task, a mixture task, a misbehaviour
        due, bytes that do not decode)."""
        try:
            request = decode(data)
        except ProtocolError:
            return None
        task = request.payload
        if (
            not isinstance(task, TrainTask)
            or task.mixture is not None
            or self.faults.due(request) is not None
        ):
            return None
        try:
            plan = work.plan_cohort_task(self.trainer, task, request.round)
        except Exception as exc:
            return self._answer(request, self._error_reply(request, exc))
        return None if plan is None else TrainJob(request, task.config, plan)

    def finish_training(self, job: TrainJob, outcome: TrainResult | Exception) -> bytes:
        """The encoded reply to `job` once its cohort trained it (`outcome`:
        its result, or what training raised)."""
        try:
            if isinstance(outcome, Exception):
                raise outcome
            cluster, result = work.finish_training(job.plan, outcome, job.config)
            reply: Message = _update_reply(cluster, result)
        except Exception as exc:
            reply = self._error_reply(job.request, exc)
        return self._answer(job.request, reply)

    def _error_reply(self, request: Envelope, exc: Exception) -> ErrorReply:
        """What a client answers when serving `request` raised `exc`."""
        if isinstance(exc, PrivacyBudgetError):
            return ErrorReply.of("budget_spent", str(exc))
        if isinstance(exc, work.Diverged):
            return ErrorReply.of("diverged", str(exc))
        if isinstance(exc, ClusterfedError):
            return ErrorReply.of("refused", str(exc))
        log.error(
            "client %s failed on %s",
            self.id,
            request.payload.kind,
            exc_info=(type(exc), exc, exc.__traceback__),
        )
        return ErrorReply.of("internal", f"{type(exc).__name__}: {exc}")

    def _answer(self, request: Envelope, reply: Message) -> bytes:
        encoded = encode(self._reply_to(request, reply))
        if isinstance(reply, UpdateReply):
            self.faults.remember(encoded)
        return encoded

    def _reply_to(self, request: Envelope, payload: Message) -> Envelope:
        # A reply's id derives from the request's, so it is unique and the same
        # whichever process served it.
        return self._envelope(
            payload,
            msg_id=f"{self.address}:re:{request.msg_id}"[:128],
            recipient=request.sender,
            round=request.round,
            in_reply_to=request.msg_id,
        )

    async def _serve(self, request: Envelope) -> Message:
        match request.payload:
            case TrainTask(config=config, identity=identity, mixture=mixture):
                candidates = work.candidates_of(request.payload)
                cluster, result = work.train(
                    self.trainer, candidates, identity, config, request.round, mixture
                )
                return _update_reply(cluster, result)
            case EvaluateTask(model=model, others=others, mixture=mixture):
                if others is not None and mixture is not None:
                    models = (model, *others)
                    held_out, tested = evaluate_mixture(
                        self.trainer,
                        [(m.weights, s) for m, s in zip(models, mixture, strict=True)],
                    )
                else:
                    held_out = self.trainer.evaluate(model.weights)
                    tested = self.trainer.evaluate_test_set(model.weights)
                # The reported accuracy is the test set's where the client
                # has one; the hold-out's goes beside it.
                scores = tested if tested is not None else held_out
                return EvaluateReply(
                    cluster=model.cluster,
                    accuracy=scores.accuracy,
                    loss=work.check_loss(scores.loss, "evaluation"),
                    n_samples=scores.n_samples,
                    val_accuracy=held_out.accuracy if tested is not None else None,
                )
            case ProbeTask(models=models):
                results = [self.trainer.evaluate(m.weights) for m in models]
                return ProbeReply(
                    scores=tuple(
                        ProbeScore(
                            owner=m.owner,
                            accuracy=r.accuracy,
                            loss=work.check_loss(r.loss, "probing"),
                        )
                        for m, r in zip(models, results, strict=True)
                    ),
                    n_samples=len(self.spec.test),
                )
            case DescribeTask(want="class_histogram"):
                n_classes = load_dataset(
                    self.spec.dataset, self.spec.dataset_root
                ).n_classes
                counts = work.class_histogram(self.trainer, n_classes)
                return ClassHistogram(client_id=self.id, counts=tuple(counts))
            case DescribeTask(
                want="data_subspace", n_basis=int(n_basis), per_class=bool(per_class)
            ):
                basis = work.data_subspace(self.trainer, n_basis, per_class)
                return DataSubspace(client_id=self.id, basis=basis)
            case Shutdown():
                self.stopped = True
                return Shutdown(reason="acknowledged")
            case other:
                return ErrorReply(
                    code="unexpected", message=f"a client does not serve {other.kind!r}"
                )

    def _envelope(
        self,
        payload: Message,
        *,
        msg_id: str,
        recipient: str,
        round: int,
        in_reply_to: str | None = None,
    ) -> Envelope:
        return Envelope(
            msg_id=msg_id,
            sender=self.address,
            recipient=recipient,
            round=round,
            in_reply_to=in_reply_to,
            payload=payload,
        )
