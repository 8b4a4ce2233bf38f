"""Clients that misbehave on purpose: a scenario's `faulty` entries."""

from __future__ import annotations

from pydantic import Field, field_validator

from clusterfed.actors.faults import FaultPlan

from ._base import _Spec


class Faulty(FaultPlan):
    """Clients that misbehave on purpose, for tests and fault studies.

    In the rounds of the schedule (`start`, then every `every` rounds, every
    round by default, up to `until` inclusive) each of `clients` answers its
    train task with `behaviour`: "nan" (a NaN delta), "garbage" (bytes that
    are no message), "wrong_shape" (a delta one weight short), "replay" (its
    last honest update again) or "hang" (no reply; needs `task_timeout_s`);
    or, Byzantine, "lie_samples" (2**63 − 1 samples claimed), "huge_delta"
    (3.0e38 everywhere), "sign_flip" (its honest delta × −`scale`, kept
    under `max_update_norm`), "forge_leave" (a leave in client id + 1's
    name), "squat_ids" (a join for an unused id, in its name) or "flood" (a
    1 MB histogram of a million empty maps); or the attacks of the
    literature, forged by the simulator from what the attackers know (their
    coalition's honest updates, or with `knowledge = "all"` every client's):
    "alie" (mean + `z` std of the coalition's honest updates), "ipm"
    (−`epsilon` × their mean), "minmax" / "minsum" (Shejwalkar & Houmansadr;
    `deviation`), "fang" (Fang et al., against the aggregator in use;
    partial knowledge, or full with `knowledge = "all"`),
    "mimic" (an honest client's update), "gaussian" (N(0, `sigma`²)), or
    "label_flip" (trains on labels C − 1 − y, the whole run) or "backdoor"
    (a pixel trigger on `poison_share` of its images, labelled `target`; the
    run reports `backdoor_success`). See
    `actors/faults.py` and `actors/adversary.py`.
    """

    clients: int | list[int] = Field(description="the faulty clients' ids")

    @field_validator("clients")
    @classmethod
    def _ids(cls, value: int | list[int]) -> int | list[int]:
        ids = [value] if isinstance(value, int) else value
        if not ids:
            raise ValueError("lists no client")
        if any(i < 0 for i in ids):
            raise ValueError(f"client ids are >= 0, got {value}")
        return value

    @property
    def ids(self) -> list[int]:
        return [self.clients] if isinstance(self.clients, int) else list(self.clients)

    def plan(self, under_norm: float | None = None) -> FaultPlan:
        """The misbehaviour each of its clients carries; a sign flip stays
        under `under_norm` (the scenario's bound) unless it names its own."""
        fields = self.model_dump(exclude={"clients"})
        if self.under_norm is None:
            fields["under_norm"] = under_norm
        return FaultPlan(**fields)


class BackdoorProbe(_Spec):
    """A backdoor's trigger, measured on a run that has no backdoor client.

    The run reports `backdoor_success` for it as a backdoor's run does: the
    share of triggered test images of other labels that its one model calls
    `target`. On a clean run that is the rate the trigger gets without any
    poisoning, the baseline a backdoor's success rate is read against.
    """

    target: int = Field(0, ge=0, description="the label the trigger would mean")
    trigger: int = Field(3, ge=1, description="the side in pixels of its square")
