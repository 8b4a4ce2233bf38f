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

A faulty client does not train in a faulty round (it spends no privacy
budget). Every other request (evaluate, probe, describe, shutdown) it
answers honestly.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from clusterfed.protocol import Envelope, Message, TrainTask, UpdateReply, encode
from clusterfed.seeding import numpy_rng

from .clock import compute_s
from .spec import ClientSpec

Behaviour = Literal["nan", "garbage", "wrong_shape", "replay", "hang"]
BEHAVIOURS: tuple[Behaviour, ...] = ("nan", "garbage", "wrong_shape", "replay", "hang")
GARBAGE_KEY = 7  # the random stream of a client's garbage bytes, under its seed


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

    @model_validator(mode="after")
    def _ordered(self) -> FaultPlan:
        if self.until is not None and self.until < self.start:
            raise ValueError(f"until ({self.until}) is before start ({self.start})")
        return self

    def active(self, round: int) -> bool:
        if round < self.start or (self.until is not None and round > self.until):
            return False
        return (round - self.start) % self.every == 0


class FaultyClientSpec(ClientSpec):
    """A client spec with the faults its actor injects."""

    faults: tuple[FaultPlan, ...] = Field(default=(), description="its misbehaviours")

    def data_key(self) -> dict[str, Any]:
        """As an honest client's: faults change no tensor."""
        key = super().data_key()
        key.pop("faults", None)
        return key


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
                if plan.behaviour == "replay" and self.last_update is None:
                    return None  # nothing to replay yet
                return plan.behaviour
        return None

    def remember(self, update: bytes) -> None:
        """Keep an honest update, to replay it later."""
        if self.plans:
            self.last_update = update

    def forge(
        self,
        behaviour: Behaviour,
        request: Envelope,
        spec: ClientSpec,
        reply_to: Callable[[Envelope, Message], Envelope],
    ) -> bytes | None:
        """The bytes a faulty client sends instead of its update (None: none).

        `reply_to(request, payload)` is the envelope of an honest reply.
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
        n = int(task.models[0].weights.shape[0])
        delta = (
            np.full(n, np.nan, dtype=np.float32)
            if behaviour == "nan"
            else np.zeros(max(1, n - 1), dtype=np.float32)
        )
        # Built without validation: a NaN delta is exactly what validation
        # refuses, and this one must reach the wire to be refused there.
        update = UpdateReply.model_construct(
            cluster=task.models[0].cluster,
            delta=delta,
            n_samples=len(spec.train),
            loss=0.0,
            compute_s=compute_s(
                spec.profile, len(spec.train) * task.config.epochs, spec.slowdown
            ),
            epsilon=None,
        )
        return encode(reply_to(request, update))
