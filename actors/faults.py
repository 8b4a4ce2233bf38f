"""Fault injection: clients that misbehave on purpose, for tests and studies.

A faulty client is an ordinary client actor whose spec carries `FaultPlan`s.
In the rounds of a plan's schedule it answers its train task badly, inside
the actor, so what reaches the server went through the real runtime and
codec:

- `nan`: an update whose delta is all NaN (the codec refuses it);
- `garbage`: bytes that are no message at all;
- `wrong_shape`: a well-formed update whose delta is one weight short;
- `replay`: the client's last honest update, re-sent byte for byte (its
  envelope names the round it answered, which is over); before it has sent
  one, it answers honestly;
- `hang`: no reply at all. The host keeps serving its other clients; the
  server's wall-clock `task_timeout_s` ends the task as failed.

and the Byzantine ones, clients that lie inside well-formed messages (the
attacks of the literature, `alie`, `ipm`, `minmax`, `minsum`, `fang`,
`mimic`, `gaussian`, are forged by the simulator from the honest updates the
coalition knows, `adversary.py`; `label_flip` trains on labels C − 1 − y):

- `lie_samples`: its honest update, claiming 2**63 − 1 training samples (the
  codec refuses a count over its bound; a smaller lie above the `n_train` the
  client declared at join is refused by the server);
- `huge_delta`: a delta of 3.0e38 everywhere (finite float32; the server
  refuses it: the model it would make is not finite);
- `sign_flip`: its honest delta scaled by −`scale`, and shrunk to just under
  the scenario's `max_update_norm` when it would be above it: accepted, it
  pulls the model the wrong way (robust aggregators are the defence);
- `forge_leave`: a leave notice for client id + 1, in that client's name;
- `squat_ids`: a join request for an id nobody has (2**20 + its id), in that
  id's name;
- `flood`: a class histogram of a million empty maps (1 MB), refused by the
  codec before it builds them.

Identity is the transport's, so forged names are refused and counted.

A faulty client does not train in a faulty round (it spends no privacy
budget), except `lie_samples` and `sign_flip`, which start from the honest
update. Every other request (evaluate, probe, describe, shutdown) it
answers honestly.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Awaitable, Callable
from typing import Any, Literal, get_args

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from clusterfed.protocol import (
    ClassHistogram,
    Envelope,
    ErrorReply,
    JoinRequest,
    LeaveNotice,
    Message,
    TrainTask,
    UpdateReply,
    encode,
)
from clusterfed.seeding import numpy_rng

from .backdoor import stamp
from .rows import Rows
from .spec import ClientSpec

Behaviour = Literal[
    "nan",
    "garbage",
    "wrong_shape",
    "replay",
    "hang",
    "lie_samples",
    "huge_delta",
    "sign_flip",
    "forge_leave",
    "squat_ids",
    "flood",
    "alie",
    "ipm",
    "minmax",
    "minsum",
    "mimic",
    "gaussian",
    "label_flip",
    "fang",
    "backdoor",
]
BEHAVIOURS: tuple[Behaviour, ...] = get_args(Behaviour)  # derived, not rewritten
BYZANTINE: tuple[Behaviour, ...] = BEHAVIOURS[5:]
SIMULATED: tuple[Behaviour, ...] = (
    "alie",
    "ipm",
    "minmax",
    "minsum",
    "mimic",
    "gaussian",
    "fang",
)
"""The attacks the simulator forges (`adversary.py`): the client trains and
answers honestly, and its coalition's vector replaces its delta on the way."""
COLLUDING: tuple[Behaviour, ...] = ("alie", "ipm", "minmax", "minsum", "fang")
"""The attacks computed from the coalition's honest updates of the round."""
INFORMED: tuple[Behaviour, ...] = ("alie", "ipm", "minmax", "minsum", "fang")
"""The colluding attacks that can see every honest update (`knowledge`);
Fang's are then the paper's full-knowledge ones, its partial-knowledge ones
without."""
DATA_POISONING: tuple[Behaviour, ...] = ("label_flip", "backdoor")
"""The attacks on a client's own data, for the whole run (`poisoned_data`)."""
POISONING: tuple[Behaviour, ...] = ("sign_flip", *SIMULATED, *DATA_POISONING)
"""The behaviours whose lies are accepted (well-formed, under every bound):
the ones a robust aggregator must outvote, counted against its assumption."""
GARBAGE_KEY = 7  # the random stream of a client's garbage bytes, under its seed
BACKDOOR_KEY = 17  # the samples a backdoor client stamps
HUGE = 3.0e38  # finite in float32, ruinous in a model
LIED_SAMPLES = 2**63 - 1
SQUAT_OFFSET = 2**20
FLOOD_ITEMS = 1_000_000
Serve = Callable[[Envelope], Awaitable[Message]]


class FaultPlan(BaseModel):
    """One misbehaviour and the rounds it happens in.

    The client misbehaves in round `start`, then every `every` rounds (every
    round by default) up to `until` (inclusive; the run's end without it).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    behaviour: Behaviour
    start: int = Field(0, ge=0, description="the first faulty round")
    every: int = Field(1, ge=1, description="repeat period in rounds")
    until: int | None = Field(None, ge=0, description="the last faulty round")
    scale: float = Field(
        10.0, gt=0, allow_inf_nan=False, description="sign_flip: the delta × −scale"
    )
    under_norm: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="sign_flip: stay under this norm (the scenario's bound)",
    )

    epsilon: float = Field(
        0.5, gt=0, allow_inf_nan=False, description="ipm: the update is −ε × mean"
    )
    z: float | None = Field(
        None,
        allow_inf_nan=False,
        description="alie: standard deviations added to the mean (None: Baruch"
        " et al.'s z_max for the round's clients and attackers)",
    )
    deviation: Literal["std", "unit_vec", "sign"] = Field(
        "std", description="minmax, minsum: the direction moved against"
    )
    knowledge: Literal["coalition", "all"] = Field(
        "coalition",
        description="alie, ipm, minmax, minsum, fang: the honest updates the"
        " attack is computed from: its coalition's own, or every client's of"
        " the round (the attacker who knows the benign updates: IPM's paper,"
        " Shejwalkar & Houmansadr's and Fang et al.'s full-knowledge setting)",
    )
    sigma: float = Field(
        1.0, gt=0, allow_inf_nan=False, description="gaussian: each coordinate's σ"
    )
    target: int = Field(0, ge=0, description="backdoor: the label a trigger means")
    trigger: int = Field(
        3, ge=1, description="backdoor: the side in pixels of the trigger square"
    )
    poison_share: float = Field(
        0.5, gt=0, le=1, description="backdoor: share of its samples it stamps"
    )

    @model_validator(mode="after")
    def _ordered(self) -> FaultPlan:
        if self.until is not None and self.until < self.start:
            raise ValueError(f"until ({self.until}) is before start ({self.start})")
        if self.knowledge != "coalition" and self.behaviour not in INFORMED:
            raise ValueError(
                f"knowledge = {self.knowledge!r} is for {', '.join(INFORMED)},"
                f" not {self.behaviour}"
            )
        if self.behaviour == "label_flip" and (self.start, self.every, self.until) != (
            0,
            1,
            None,
        ):
            raise ValueError(
                "label_flip poisons the client's data for the whole run: it"
                " takes no start, every or until"
            )
        return self

    def active(self, round: int) -> bool:
        if round < self.start or (self.until is not None and round > self.until):
            return False
        return (round - self.start) % self.every == 0


class FaultyClientSpec(ClientSpec):
    """A client spec with the faults its actor injects."""

    faults: tuple[FaultPlan, ...] = Field(default=(), description="its misbehaviours")

    def data_key(self) -> dict[str, Any]:
        """As an honest client's: faults change no tensor, but label_flip's."""
        key = super().data_key()
        key.pop("faults", None)
        poisons = [p.model_dump() for p in self.faults if p.behaviour in DATA_POISONING]
        if poisons:
            key["poisons"] = poisons
        return key


def poisoned_data(
    spec: ClientSpec, x: Rows, y: torch.Tensor, n_classes: int
) -> tuple[Rows, torch.Tensor]:
    """A client's training images and labels as it trains on them: a
    label_flip client reads y → C − 1 − y (ByzFL's and Blades' flip); a
    backdoor client stamps its trigger on a `poison_share` of its images
    (drawn from its seed; its own copy of them) and labels those `target`.
    Others' as they are."""
    for plan in getattr(spec, "faults", ()):
        if plan.behaviour == "label_flip":
            y = n_classes - 1 - y
        elif plan.behaviour == "backdoor":
            count = max(1, int(plan.poison_share * len(y)))
            rng = numpy_rng(spec.seed, BACKDOOR_KEY)
            rows = torch.from_numpy(np.sort(rng.permutation(len(y))[:count]))
            images, y = x.gather().clone(), y.clone()
            images[rows] = stamp(images[rows], plan.trigger)
            y[rows] = plan.target
            x = Rows(images)
    return x, y


def load_spec(data: bytes | str) -> ClientSpec:
    """A spec from its JSON, faulty if it names faults."""
    raw = json.loads(data)
    if "faults" in raw:
        return FaultyClientSpec.model_validate(raw)
    return ClientSpec.model_validate(raw)


class FaultyBehaviour:
    """The misbehaving half of a client actor: when it strikes, and how.

    It keeps the client's last honest update (for `replay`); that memory is
    part of the client's state in a checkpoint.
    """

    def __init__(self, spec: ClientSpec) -> None:
        self.plans: tuple[FaultPlan, ...] = getattr(spec, "faults", ())
        self.last_update: bytes | None = None

    def due(self, request: Envelope) -> Behaviour | None:
        """The behaviour that answers `request`; None: answer honestly."""
        if not self.plans or not isinstance(request.payload, TrainTask):
            return None
        for plan in self.plans:
            if plan.active(request.round):
                if plan.behaviour in (*SIMULATED, *DATA_POISONING):
                    return None  # honest here: forged by the simulator, or its data
                if plan.behaviour == "replay" and self.last_update is None:
                    return None  # nothing to replay yet
                return plan.behaviour
        return None

    def remember(self, update: bytes) -> None:
        """Keep an honest update, to replay it later."""
        if self.plans:
            self.last_update = update

    async def forge(
        self,
        behaviour: Behaviour,
        request: Envelope,
        spec: ClientSpec,
        reply_to: Callable[[Envelope, Message], Envelope],
        serve: Serve | None = None,
    ) -> bytes | None:
        """The bytes a faulty client sends instead of its update (None: none).

        `reply_to(request, payload)` is the envelope of an honest reply, and
        `serve(request)` the honest answer (for the lies that start from it).
        """
        task = request.payload
        assert isinstance(task, TrainTask)
        if behaviour == "hang":
            return None
        if behaviour == "replay":
            return self.last_update
        if behaviour == "garbage":
            noise = numpy_rng(spec.seed, GARBAGE_KEY, request.round).bytes(64)
            return b"\xc1" + noise  # 0xc1 is never valid msgpack
        if behaviour in ("lie_samples", "sign_flip"):
            return await self._lie(behaviour, request, reply_to, serve)
        if behaviour in ("forge_leave", "squat_ids", "flood"):
            return _impostor(behaviour, request, spec)
        n = int(task.models[0].weights.shape[0])
        if behaviour == "nan":
            delta = np.full(n, np.nan, dtype=np.float32)
        elif behaviour == "huge_delta":
            delta = np.full(n, HUGE, dtype=np.float32)
        else:  # wrong_shape
            delta = np.zeros(max(1, n - 1), dtype=np.float32)
        # Built without validation: a NaN delta is exactly what validation
        # refuses, and this one must reach the wire to be refused there.
        update = UpdateReply.model_construct(
            cluster=task.models[0].cluster,
            delta=delta,
            n_samples=len(spec.train),
            loss=0.0,
            samples_seen=len(spec.train) * task.config.epochs,
            epsilon=None,
        )
        return encode(reply_to(request, update))

    async def _lie(
        self,
        behaviour: Behaviour,
        request: Envelope,
        reply_to: Callable[[Envelope, Message], Envelope],
        serve: Serve | None,
    ) -> bytes:
        """The honest update, with its sample count or its delta a lie."""
        if serve is None:
            raise ValueError(f"{behaviour} needs the client's honest answer")
        try:
            honest = await serve(request)
        except Exception as exc:  # as an honest client, it says why
            honest = ErrorReply.of("internal", f"{type(exc).__name__}")
        if not isinstance(honest, UpdateReply):
            return encode(reply_to(request, honest))
        if behaviour == "lie_samples":
            lie = honest.model_construct(**{**dict(honest), "n_samples": LIED_SAMPLES})
            return encode(reply_to(request, lie))
        due = request.round
        plan = next(p for p in self.plans if p.active(due) and p.behaviour == behaviour)
        flipped = honest.delta.astype(np.float64) * -plan.scale
        norm = float(np.sqrt(np.square(flipped).sum()))
        bound = plan.under_norm
        if bound is not None and norm > bound:
            flipped *= 0.99 * bound / norm  # just under the bound: accepted
        return encode(
            reply_to(
                request,
                honest.model_copy(update={"delta": flipped.astype(np.float32)}),
            )
        )


def _impostor(behaviour: Behaviour, request: Envelope, spec: ClientSpec) -> bytes:
    """A message in another client's name, or a decode bomb, as the reply."""
    other = spec.id + 1 if behaviour == "forge_leave" else SQUAT_OFFSET + spec.id
    payload: Message
    if behaviour == "forge_leave":
        payload = LeaveNotice(client_id=other, reason="forged")
    elif behaviour == "squat_ids":
        payload = JoinRequest(client_id=other, n_train=len(spec.train), n_test=0)
    else:  # flood: one count, then its array grown to a million empty maps
        payload = ClassHistogram(client_id=spec.id, counts=(0,))
    envelope = Envelope(
        msg_id=f"client/{other if behaviour != 'flood' else spec.id}:x",
        sender=f"client/{other if behaviour != 'flood' else spec.id}",
        recipient=request.sender,
        round=request.round,
        in_reply_to=request.msg_id,
        payload=payload,
    )
    data = encode(envelope)
    if behaviour != "flood":
        return data
    # msgpack: "counts" (fixstr 6), then fixarray(1) [0] becomes array32(N) of
    # empty fixmaps. Spliced here: only the codec module speaks msgpack.
    one = b"\xa6counts\x91\x00"
    many = b"\xa6counts\xdd" + struct.pack(">I", FLOOD_ITEMS) + b"\x80" * FLOOD_ITEMS
    assert data.count(one) == 1
    return data.replace(one, many)
