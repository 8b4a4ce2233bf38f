"""Applies a scenario's timeline to a running federation, round by round.

The engine owns what the simulation knows and the server must not: every
client's spec (data, transform), its ground-truth group, who has left,
crashed or dropped out. Before each round it fires the due events through the
federation's `Membership`; random choices come from the scenario's event
stream. Devices are the run's `SimClock`'s: the engine puts each client on
the device the scenario gives it and changes the clock, not the client, when
a straggler slows down or a link changes. `snapshot` and
`restore` carry its position across a checkpoint.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypedDict

import numpy as np

from clusterfed.actors import ClientSpec, SimClock
from clusterfed.errors import ConfigError
from clusterfed.seeding import numpy_rng
from clusterfed.types import ClientId

from .build import EVENT_STREAM, RunPlan
from .events import Crash, Drift, Dropout, Join, Leave, Network, Straggle, Target
from .timeline import Occurrence, Timeline

Applied = dict[str, Any]


class EngineSnapshot(TypedDict):
    """The engine's position between rounds, for a checkpoint (`snapshot`)."""

    fired: dict[int, int]  # occurrences handed out, by event index
    rng: np.random.Generator  # the event stream
    specs: dict[int, ClientSpec]  # the clients taking part, as they are now
    partition_groups: dict[int, int]
    transform_groups: dict[int, int]
    next_id: int
    crashed: dict[int, int | None]  # client → round it recovers
    straggling: dict[int, int]  # client → first round back to normal
    reserved_taken: dict[int, int]  # join event → clients it has taken


def _counts(value: object, *, none: bool = False) -> bool:
    """Whether `value` maps counts to counts (to None too, with `none`)."""
    return isinstance(value, dict) and all(
        _count(k) and (_count(v) or (none and v is None)) for k, v in value.items()
    )


def _count(value: object) -> bool:
    # Groups are dealt from numpy arrays: a numpy integer is a count too.
    return (
        isinstance(value, int | np.integer)
        and not isinstance(value, bool)
        and bool(value >= 0)
    )


class Membership(Protocol):
    """What the engine changes in a running federation: who takes part, with
    what spec, and who is reachable this round (the `Federation` does it)."""

    async def add_clients(self, specs: Sequence[ClientSpec]) -> None: ...

    async def remove_client(self, client: int, reason: str) -> None: ...

    async def update_client(self, spec: ClientSpec) -> None: ...

    def set_unreachable(self, clients: Mapping[int, str]) -> None: ...


class ScenarioEngine:
    """The timeline of `plan`, fired round by round.

    Args:
        plan: the run's plan.
        clock: the run's clock, whose devices the engine keeps current;
            `plan.clock()` by default.
    """

    def __init__(self, plan: RunPlan, clock: SimClock | None = None) -> None:
        self.plan = plan
        self.clock = clock if clock is not None else plan.clock()
        self.timeline = Timeline(plan.scenario.events)
        self.rng = numpy_rng(plan.scenario.seed, EVENT_STREAM)
        self.specs: dict[int, ClientSpec] = {c.id: c for c in plan.clients}
        self.partition_groups = dict(plan.partition_groups)
        self.transform_groups = dict(plan.transform_groups)
        self.next_id = len(plan.clients)
        self.crashed: dict[int, int | None] = {}  # client → round it recovers
        self.straggling: dict[int, int] = {}  # client → first round back to normal
        # Data set aside for each join event, to count what joins have taken.
        self._reserved = {i: len(q) for i, q in plan.reserved.items()}

    def snapshot(self) -> EngineSnapshot:
        """The engine's position between rounds, for a checkpoint (picklable)."""
        snapshot: EngineSnapshot = {
            "fired": self.timeline.fired,
            "rng": self.rng,
            "specs": self.specs,
            "partition_groups": self.partition_groups,
            "transform_groups": self.transform_groups,
            "next_id": self.next_id,
            "crashed": self.crashed,
            "straggling": self.straggling,
            "reserved_taken": {
                i: n - len(self.plan.reserved[i]) for i, n in self._reserved.items()
            },
        }
        return copy.deepcopy(snapshot)

    def snapshot_problem(self, snapshot: EngineSnapshot) -> str | None:
        """Why `snapshot` (from a checkpoint) cannot be this engine's
        position, or None: its values are checked, its keys are the
        checkpoint's to check."""
        if not isinstance(snapshot["rng"], np.random.Generator):
            return "random stream is not a numpy Generator"
        specs = snapshot["specs"]
        if not isinstance(specs, dict) or not all(
            isinstance(spec, ClientSpec) and spec.id == cid
            for cid, spec in specs.items()
        ):
            return "clients are not one of client ids to their ClientSpec"
        if not _count(snapshot["next_id"]) or any(
            cid >= snapshot["next_id"] for cid in specs
        ):
            return f"next_id is {snapshot['next_id']!r}, not past every client's id"
        groups = {
            "partition_groups": snapshot["partition_groups"],
            "transform_groups": snapshot["transform_groups"],
            "straggling": snapshot["straggling"],
        }
        for key, value in groups.items():
            if not _counts(value):
                return f"{key} is not one of counts to counts"
        if not _counts(snapshot["crashed"], none=True):
            return "crashed is not one of clients to the round they recover"
        n_events = len(self.plan.scenario.events)
        fired = snapshot["fired"]
        if not _counts(fired) or any(index >= n_events for index in fired):
            return f"fired counts events the scenario has not ({n_events} events)"
        taken = snapshot["reserved_taken"]
        if not _counts(taken) or any(
            index not in self._reserved or n > self._reserved[index]
            for index, n in taken.items()
        ):
            return "reserved_taken counts more joins than the scenario sets aside"
        return None

    def restore(self, snapshot: EngineSnapshot) -> None:
        """Go back to where `snapshot` was taken, on a fresh plan of the same
        scenario (before the runtime starts: `specs` are the clients to host).

        Raises:
            ConfigError: the snapshot cannot be this scenario's engine (see
                `snapshot_problem`).
        """
        problem = self.snapshot_problem(snapshot)
        if problem is not None:
            raise ConfigError(f"checkpoint refused: the engine's {problem}")
        self.timeline = Timeline(self.plan.scenario.events, snapshot["fired"])
        self.rng = copy.deepcopy(snapshot["rng"])
        # The books of a client's privacy belong to one run (`run_id`): the
        # resumed clients take this run's, and their history from the checkpoint.
        self.specs = {
            cid: (
                spec
                if spec.privacy is None
                else spec.model_copy(
                    update={
                        "privacy": spec.privacy.model_copy(
                            update={"run_id": self.plan.run_id}
                        )
                    }
                )
            )
            for cid, spec in snapshot["specs"].items()
        }
        self.partition_groups = dict(snapshot["partition_groups"])
        self.transform_groups = dict(snapshot["transform_groups"])
        self.next_id = snapshot["next_id"]
        self.crashed = dict(snapshot["crashed"])
        self.straggling = dict(snapshot["straggling"])
        for index, taken in snapshot["reserved_taken"].items():
            for _ in range(taken):
                self.plan.reserved[index].popleft()

    @property
    def groups(self) -> dict[int, int]:
        """Ground-truth group of every client taking part now."""
        return {cid: spec.group for cid, spec in self.specs.items()}

    async def begin_round(
        self, members: Membership, round: int, sim_time: float
    ) -> list[Applied]:
        """Fire what is due before `round`; return what was applied."""
        applied: list[Applied] = []
        for cid, back in sorted(self.crashed.items()):
            if back is not None and back <= round:
                del self.crashed[cid]
                applied.append({"kind": "recover", "clients": [cid]})
        for cid, back in sorted(self.straggling.items()):
            if back <= round and cid in self.specs:
                del self.straggling[cid]
                self.clock.straggle(ClientId(cid), 1.0)
        dropped: dict[int, str] = {}
        for occurrence in self.timeline.due(round, sim_time):
            record = await self._apply(members, occurrence, round, dropped)
            if record is not None:
                applied.append(record)
        for cid in sorted(self.specs):
            availability = self.clock.profile(ClientId(cid)).availability
            if availability < 1 and self.rng.random() > availability:
                dropped.setdefault(cid, "unavailable this round")
        down = {cid: "crashed" for cid in self.crashed if cid in self.specs}
        members.set_unreachable({**dropped, **down})
        return applied

    async def _apply(
        self,
        members: Membership,
        occurrence: Occurrence,
        round: int,
        dropped: dict[int, str],
    ) -> Applied | None:
        event = occurrence.event
        if isinstance(event, Join):
            return await self._join(members, occurrence.index, event, round)
        targets = self._targets(event.target)
        if not targets:
            return {"kind": event.kind, "clients": [], "note": "no client matched"}
        record: Applied = {"kind": event.kind, "clients": targets}
        match event:
            case Leave():
                for cid in targets:
                    del self.specs[cid]
                    self.crashed.pop(cid, None)
                    self.straggling.pop(cid, None)
                    await members.remove_client(cid, "scheduled leave")
                    self.clock.forget(ClientId(cid))
            case Crash(recover_after=after):
                for cid in targets:
                    self.crashed[cid] = None if after is None else round + after
            case Straggle(factor=factor, rounds=rounds):
                for cid in targets:
                    self.straggling[cid] = round + rounds
                    self.clock.straggle(ClientId(cid), factor)
                record["factor"] = factor
            case Dropout(p=p):
                hit = [cid for cid in targets if self.rng.random() < p]
                for cid in hit:
                    dropped[cid] = "dropped out"
                record["clients"] = hit
            case Network(latency_s=latency, bandwidth_bps=bandwidth):
                changes = {
                    k: v
                    for k, v in (
                        ("latency_s", latency),
                        ("bandwidth_bps", bandwidth),
                    )
                    if v is not None
                }
                for cid in targets:
                    profile = self.clock.profile(ClientId(cid))
                    self.clock.profiles[ClientId(cid)] = profile.model_copy(
                        update=changes
                    )
            case Drift():
                record["groups"] = [
                    await self._drift(members, cid, event, (round, occurrence.index))
                    for cid in targets
                ]
        return record

    async def _join(
        self, members: Membership, index: int, event: Join, round: int
    ) -> Applied:
        reserved = self.plan.reserved.get(index)
        specs = []
        for _ in range(event.count):
            if not reserved:
                break
            taken = reserved.popleft()
            cid = self.next_id
            self.next_id += 1
            transform_group = (
                event.transform_group
                if event.transform_group is not None
                else int(self.rng.integers(self.plan.transforms.n_groups))
            )
            # A joiner plans its privacy over the rounds left from this one.
            spec = self.plan.client_spec(
                cid, taken.split, taken.partition_group, transform_group, round
            )
            self.specs[cid] = spec
            self.partition_groups[cid] = taken.partition_group
            self.transform_groups[cid] = transform_group
            self.clock.profiles[ClientId(cid)] = self.plan.device(cid)
            specs.append(spec)
        await members.add_clients(specs)
        return {"kind": "join", "clients": [s.id for s in specs]}

    async def _drift(
        self, members: Membership, cid: int, event: Drift, when: tuple[int, int]
    ) -> int:
        """Apply `event` to client `cid`; `when` (round, event index) keys the
        stream its test set is redrawn from."""
        spec = self.specs[cid]
        transforms = self.plan.transforms
        part = self.partition_groups[cid]
        changes: dict[str, Any] = {}
        if event.to_group is not None:
            group = event.to_group
            if group == "other":
                others = [
                    g
                    for g in range(transforms.n_groups)
                    if g != self.transform_groups[cid]
                ]
                group = (
                    int(self.rng.choice(others))
                    if others
                    else self.transform_groups[cid]
                )
            self.transform_groups[cid] = group
            changes = {
                **transforms.fields(group),
                "group": transforms.truth(part, group),
            }
        elif event.rotation is not None:
            changes = {
                "rotation": event.rotation,
                "group": transforms.group_of_rotation(part, event.rotation),
            }
        elif event.label_permutation is not None:
            changes = {
                "label_permutation": event.label_permutation,
                "group": transforms.group_of_permutation(part, event.label_permutation),
            }
        elif event.class_mix is not None:
            changes = self._redraw(spec, event.class_mix, when)
        new = spec.model_copy(update=changes)
        await self._update(members, new)
        return new.group

    def _redraw(
        self, spec: ClientSpec, weights: list[float], when: tuple[int, int]
    ) -> dict[str, Any]:
        """New samples for `spec` with class shares `weights`, same sizes; its
        test set (if it has one) redrawn with the same weights, from its own
        stream, so the event stream draws what it drew before."""
        labels = self.plan.dataset.labels
        n_classes = self.plan.dataset.n_classes
        if len(weights) != n_classes:
            raise ValueError(f"class_mix needs {n_classes} weights, got {len(weights)}")
        p = np.asarray(weights, dtype=np.float64) / sum(weights)
        n_train, n = len(spec.train), len(spec.train) + len(spec.test)
        counts = self.rng.multinomial(n, p)
        chosen = np.concatenate(
            [
                self.rng.choice(np.flatnonzero(labels == c), size=k, replace=False)
                for c, k in enumerate(counts)
                if k
            ]
        )
        chosen = self.rng.permutation(chosen)
        key = ("class_mix", self.partition_groups[spec.id], tuple(weights))
        changes: dict[str, Any] = {
            "train": sorted(chosen[:n_train].tolist()),
            "test": sorted(chosen[n_train:].tolist()),
            "group": self.plan.transforms.fresh(key),
        }
        if spec.test_set is not None:
            changes["test_set"] = self.plan.test_set(
                p, len(spec.test_set), spec.id, *when
            )
        return changes

    def _targets(self, raw: int | list[int] | str) -> list[int]:
        target = Target.parse(raw)
        active = sorted(self.specs)
        if target.everyone:
            return active
        if target.group is not None:
            return [c for c in active if self.specs[c].group == target.group]
        if target.random:
            k = min(target.random, len(active))
            return sorted(
                int(c) for c in self.rng.choice(active, size=k, replace=False)
            )
        return [c for c in target.ids if c in self.specs]

    async def _update(self, members: Membership, spec: ClientSpec) -> None:
        self.specs[spec.id] = spec
        await members.update_client(spec)
