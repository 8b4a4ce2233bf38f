"""Scenario events: what happens to whom, and when.

Every event is keyed by round (`clock = "round"`, the default) or by simulated
seconds (`clock = "time"`): it fires first at `start` and, with `every`, again
each `every` rounds or seconds up to `until` (inclusive; the run's end without
it). A time-keyed occurrence fires at the first round that starts at or after
it. Events are a `kind`-tagged union, validated like the rest of a scenario.

Targets name who is affected: a client id, a list of ids, "all", "random"
(one active client, drawn from the scenario's seed), "random:K" (K distinct),
or "group:G" (every active client whose ground-truth group is G).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

_TARGET = re.compile(r"^(all|random|random:(\d+)|group:(\d+))$")


def _check_target(value: int | list[int] | str) -> int | list[int] | str:
    if isinstance(value, str) and not _TARGET.match(value):
        raise ValueError(
            f"target {value!r} is not a client id, a list of ids, 'all', 'random',"
            " 'random:K' or 'group:G'"
        )
    if isinstance(value, list) and not value:
        raise ValueError("target lists no client")
    ids = (
        [value] if isinstance(value, int) else value if isinstance(value, list) else []
    )
    if any(i < 0 for i in ids):
        raise ValueError(f"client ids are >= 0, got {value}")
    return value


TargetField = Annotated[int | list[int] | str, AfterValidator(_check_target)]


@dataclass(frozen=True)
class Target:
    """A parsed target."""

    ids: tuple[int, ...] = ()
    everyone: bool = False
    random: int = 0
    group: int | None = None

    @classmethod
    def parse(cls, value: int | list[int] | str) -> Target:
        if isinstance(value, int):
            return cls(ids=(value,))
        if isinstance(value, list):
            return cls(ids=tuple(value))
        match = _TARGET.match(value)
        assert match is not None  # checked at validation
        if value == "all":
            return cls(everyone=True)
        if value == "random":
            return cls(random=1)
        if match.group(2):
            return cls(random=int(match.group(2)))
        return cls(group=int(match.group(3)))


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    clock: Literal["round", "time"] = "round"
    start: float = Field(0, ge=0, description="first round, or first simulated second")
    every: float | None = Field(None, gt=0, description="repeat period")
    until: float | None = Field(None, ge=0, description="last occurrence, inclusive")

    @model_validator(mode="after")
    def _check_schedule(self) -> _Event:
        if self.clock == "round":
            for name in ("start", "every", "until"):
                value = getattr(self, name)
                if value is not None and value != int(value):
                    raise ValueError(f"{name} counts rounds here: {value} is not whole")
        if self.until is not None and self.until < self.start:
            raise ValueError(f"until ({self.until}) is before start ({self.start})")
        return self

    def occurrences(self, horizon: float) -> Iterator[float]:
        """Keys (rounds or seconds) at which the event fires, up to `horizon`."""
        last = horizon if self.until is None else min(self.until, horizon)
        if self.every is None:
            if self.start <= last:
                yield self.start
            return
        for i in itertools.count():
            key = self.start + i * self.every
            if key > last + 1e-9:
                return
            yield key


class _Targeted(_Event):
    target: TargetField


class Join(_Event):
    """New clients join, each with its own share of the data and a transform.

    Their data is set aside when the scenario is built, so a join must be
    countable: a time-keyed join that repeats needs `until`.
    """

    kind: Literal["join"] = "join"
    count: int = Field(1, ge=1, description="clients per occurrence")
    transform_group: int | None = Field(
        None, ge=0, description="their transform group; random (seeded) if unset"
    )
    partition_group: int | None = Field(
        None, ge=0, description="their class-table row (class_table partitions)"
    )

    @model_validator(mode="after")
    def _countable(self) -> Join:
        if self.clock == "time" and self.every is not None and self.until is None:
            raise ValueError("a join that repeats on the time clock needs `until`")
        return self


class Leave(_Targeted):
    """The targets leave for good: they announce it and are dropped."""

    kind: Literal["leave"] = "leave"


class Drift(_Targeted):
    """The targets' data changes from this round on. Give exactly one of:

    `to_group` (another transform group, or "other" for a random other one),
    `rotation` (degrees), `label_permutation`, `class_mix` (class weights: the
    client's samples are redrawn from the whole dataset with these weights, so
    they may overlap other clients' samples).
    """

    kind: Literal["drift"] = "drift"
    to_group: int | Literal["other"] | None = None
    rotation: float | None = None
    label_permutation: list[int] | None = None
    class_mix: list[float] | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Drift:
        given = [
            name
            for name in ("to_group", "rotation", "label_permutation", "class_mix")
            if getattr(self, name) is not None
        ]
        if len(given) != 1:
            raise ValueError(
                "a drift takes exactly one of to_group, rotation, label_permutation,"
                f" class_mix; got {given or 'none'}"
            )
        if isinstance(self.to_group, int) and self.to_group < 0:
            raise ValueError(f"to_group must be >= 0, got {self.to_group}")
        if self.class_mix is not None and (
            min(self.class_mix) < 0 or sum(self.class_mix) <= 0
        ):
            raise ValueError("class_mix weights must be >= 0 with a positive sum")
        return self


class Straggle(_Targeted):
    """The targets compute `factor` times slower for `rounds` rounds."""

    kind: Literal["straggle"] = "straggle"
    factor: float = Field(gt=0)
    rounds: int = Field(1, ge=1)


class Crash(_Targeted):
    """The targets stop answering; with `recover_after`, they come back."""

    kind: Literal["crash"] = "crash"
    recover_after: int | None = Field(None, ge=1, description="rounds until recovery")


class Dropout(_Targeted):
    """Each target is unreachable with probability `p`, in each round it fires."""

    kind: Literal["dropout"] = "dropout"
    p: float = Field(ge=0, le=1)


class Network(_Targeted):
    """The targets' link changes from now on."""

    kind: Literal["network"] = "network"
    latency_s: float | None = Field(None, ge=0)
    bandwidth_bps: float | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _something(self) -> Network:
        if self.latency_s is None and self.bandwidth_bps is None:
            raise ValueError("a network event sets latency_s, bandwidth_bps or both")
        return self


Event = Annotated[
    Join | Leave | Drift | Straggle | Crash | Dropout | Network,
    Field(discriminator="kind"),
]

# Same-time events apply in this order, then in the order they were written.
PRIORITY = {
    "leave": 0,
    "crash": 1,
    "join": 2,
    "drift": 3,
    "network": 4,
    "straggle": 5,
    "dropout": 6,
}
