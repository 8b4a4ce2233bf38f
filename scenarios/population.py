"""Registered clients as a lazy population: a cross-device federation.

A scenario with a `population` registers `registered` clients (up to
millions) of a procedural dataset (`synthetic`: each client's rows come from
its seed) and runs K of them a round. Nothing is built per registered
client at start: a client is an id until it is sampled. Each round

    sample K ids (O(K): `actors/sampling.py`, online ones only under a
    diurnal or trace availability) → their specs (built on demand, kept in
    a bounded LRU cache) → they join, the round runs as any other (the
    server, the strategy and the runtime see K members) → each one's cluster
    and last round go into two compact arrays → they leave.

So a round costs what K clients cost whatever N is, the results hold rows
for participants only, and the ARI of a round is over its participants.
What a strategy keeps per client across rounds is the population's arrays
(`cluster`, int16; `last_round`, int32: 6 bytes a registered client), not
Python objects; strategies whose clients choose their cluster each round
(FedAvg, FedProx, IFCA) run on it unchanged. Strategies that keep a client's
history on the server (DCFL's newcomer step, FeSEM's distances, CFL's
splits) would treat every sampled client as a newcomer and are refused.

Planted groups are the scenario's `transform` (label permutations, Synthetic
has no images to rotate), dealt by id (client c is in group c mod groups),
so a client's group is known without dealing anyone else.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypedDict

import numpy as np
from pydantic import Field, model_validator

from clusterfed.actors import ClientSpec, SimClock
from clusterfed.actors.availability import Always, Schedule, TraceAvailability
from clusterfed.actors.sampling import round_size, sample_online, sample_uniform
from clusterfed.data.synthetic import (
    COUNT_MIN,
    MAX_CLIENTS,
    parse_name,
)
from clusterfed.data.synthetic import sample_count as synthetic_count
from clusterfed.errors import ConfigError
from clusterfed.seeding import derive_seed, numpy_rng
from clusterfed.types import ClientId

from ._base import _Spec
from .transforms import PermutationTransform

if TYPE_CHECKING:
    from .build import RunPlan
    from .spec import Scenario

# The random stream of each round's sample under the scenario seed (the
# streams of build.py end at 8).
POPULATION_STREAM = 9
# Strategies whose per-client server state is the current round's choice.
POPULATION_STRATEGIES = ("fedavg", "fedprox", "ifca")


class Members(Protocol):
    """What lets clients in and out (the federation)."""

    async def add_clients(self, specs: Sequence[ClientSpec]) -> None: ...

    async def remove_client(self, client: int, reason: str) -> None: ...


class PopulationSpec(_Spec):
    """`registered` clients, `per_round` (K) or `fraction` of them a round."""

    registered: int = Field(ge=1, le=MAX_CLIENTS, description="clients registered (N)")
    per_round: int | None = Field(None, ge=1, description="K sampled a round")
    fraction: float | None = Field(None, gt=0, le=1, description="or K = fraction·N")
    max_samples: int | None = Field(
        None,
        ge=COUNT_MIN,
        description="cap on a client's sample count (None: the dataset's own)",
    )
    cached_specs: int = Field(
        4096, ge=1, description="client specs the server keeps built (LRU)"
    )

    @model_validator(mode="after")
    def _one_size(self) -> PopulationSpec:
        try:
            round_size(
                self.registered, per_round=self.per_round, fraction=self.fraction
            )
        except ConfigError as exc:
            raise ValueError(f"population: {exc}") from exc
        return self

    @property
    def k(self) -> int:
        """Clients sampled a round."""
        return round_size(
            self.registered, per_round=self.per_round, fraction=self.fraction
        )


def check_population(scenario: Scenario) -> None:
    """Refuse what a lazy population cannot run, naming the field.

    Raises:
        ValueError: the scenario's validator reports it as a field error.
    """
    spec = scenario.population
    if spec is None:
        return
    try:
        params = parse_name(scenario.dataset.name)
    except ConfigError as exc:
        raise ValueError(f"population: {exc}") from exc
    if params is None:
        raise ValueError(
            f"population: dataset {scenario.dataset.name!r} is not procedural;"
            " a population needs dataset synthetic[_<alpha>_<beta>]"
        )
    refused = {
        "events": bool(scenario.events),
        "faulty": bool(scenario.faulty),
        "dp": scenario.dp is not None,
        "devices": bool(scenario.devices),
        'mode = "async"': scenario.mode == "async",
    }
    for name, present in refused.items():
        if present:
            raise ValueError(
                f"population: {name} is not supported with a population yet"
                " (sampled clients join for their round only)"
            )
    if scenario.algorithm not in POPULATION_STRATEGIES:
        raise ValueError(
            f"population: algorithm {scenario.algorithm!r} keeps client history"
            f" on the server; a population runs {', '.join(POPULATION_STRATEGIES)}"
        )
    fraction = scenario.params_of(scenario.algorithm).get("fraction", 1.0)
    if fraction != 1.0:
        raise ValueError(
            "population: the population samples the round (population.per_round"
            f" or population.fraction); algorithm_params fraction = {fraction}"
            " would sample again"
        )
    if scenario.transform is not None and not isinstance(
        scenario.transform, PermutationTransform
    ):
        raise ValueError(
            "population: synthetic features are no images to rotate; use"
            ' transform.kind = "label_permutation"'
        )
    if isinstance(scenario.availability, TraceAvailability):
        late = [w.client for w in scenario.availability.windows]
        if late and max(late) >= spec.registered:
            raise ValueError(
                f"availability: the trace names client {max(late)}, which is"
                f" not registered (clients are 0..{spec.registered - 1})"
            )


class PopulationSnapshot(TypedDict):
    """The population's arrays between two rounds (`Population.snapshot`);
    its specs are rebuilt from the seed and each round's sample comes from
    the round's own stream, so nothing else is kept."""

    cluster: np.ndarray  # int16, one per registered client
    last_round: np.ndarray  # int32, one per registered client


def population_snapshot_problem(snapshot: PopulationSnapshot) -> str | None:
    """Why `snapshot`'s arrays are not a population's, or None: one of each
    dtype, of one length, every value -1 (never sampled) or more."""
    arrays = (
        ("cluster", snapshot["cluster"], np.int16),
        ("last_round", snapshot["last_round"], np.int32),
    )
    for name, array, dtype in arrays:
        if not isinstance(array, np.ndarray) or array.dtype != dtype:
            return f"its {name} is not an array of {np.dtype(dtype).name}"
        if array.ndim != 1 or not 1 <= len(array) <= MAX_CLIENTS:
            return f"its {name} has shape {array.shape}, not one per client"
        if len(array) and int(array.min()) < -1:
            return f"its {name} holds {int(array.min())} (-1 is the least)"
    if len(snapshot["cluster"]) != len(snapshot["last_round"]):
        return "its cluster and last_round arrays differ in length"
    return None


class Population:
    """The registered clients of a run: ids, on-demand specs, compact state.

    Attributes:
        cluster: each registered client's cluster when it last took part
            (-1: never sampled), int16.
        last_round: the last round each took part in (-1: never), int32.
        participants: the clients of the round running now (sorted).
    """

    def __init__(self, plan: RunPlan) -> None:
        scenario = plan.scenario
        spec = scenario.population
        if spec is None:
            raise ConfigError("the scenario has no population")
        params = parse_name(scenario.dataset.name)
        assert params is not None  # check_population refused other datasets
        self.plan = plan
        self.spec = spec
        self.params = dataclasses.replace(params, max_samples=spec.max_samples)
        self.n, self.k = spec.registered, spec.k
        self.cluster = np.full(self.n, -1, dtype=np.int16)
        self.last_round = np.full(self.n, -1, dtype=np.int32)
        self.participants: list[int] = []
        self._specs: OrderedDict[int, ClientSpec] = OrderedDict()
        self.built = 0  # specs built (a cache miss each)

    def sample(self, round: int, schedule: Schedule, now: float) -> list[int]:
        """Round `round`'s clients: K uniform ids, or K online at `now`;
        from the round's own stream, so any round samples alike alone."""
        rng = numpy_rng(self.plan.scenario.seed, POPULATION_STREAM, round)
        if isinstance(schedule, Always):
            ids = sample_uniform(self.n, self.k, rng)
        else:
            ids = sample_online(self.n, self.k, rng, lambda c: schedule.online(c, now))
        return [int(c) for c in ids]

    def client_seed(self, client: int) -> int:
        """The client's seed: its training and its rows come from it."""
        from .build import CLIENT_STREAM  # build.py imports this module

        return derive_seed(self.plan.scenario.seed, CLIENT_STREAM, client)

    def group(self, client: int) -> int:
        """The client's planted group (its label permutation), by id."""
        return client % self.plan.transforms.n_groups

    def client_spec(self, client: int) -> ClientSpec:
        """The spec of a registered client, built on first use and kept in
        the LRU cache of `cached_specs`."""
        found = self._specs.get(client)
        if found is not None:
            self._specs.move_to_end(client)
            return found
        if not 0 <= client < self.n:
            raise ConfigError(f"client {client} is not registered (0..{self.n - 1})")
        s = self.plan.scenario
        seed = self.client_seed(client)
        n = synthetic_count(seed, client, self.params)
        # The client's own hold-out, at least one sample each side.
        n_test = min(n - 1, max(1, round(s.test_fraction * n)))
        group = self.group(client)
        extra: dict[str, Any] = {}
        if not s.compute.is_default:
            extra["compute"] = s.compute
        built = ClientSpec(
            id=client,
            group=self.plan.transforms.truth(0, group),
            dataset=s.dataset.name,
            model=s.model.name,
            model_params=s.model.params,
            train=list(range(n - n_test)),
            test=list(range(n - n_test, n)),
            seed=seed,
            **self.plan.transforms.fields(group),
            **extra,
        )
        self.built += 1
        self._specs[client] = built
        if len(self._specs) > self.spec.cached_specs:
            self._specs.popitem(last=False)
        return built

    def groups(self) -> dict[int, int]:
        """Ground-truth group of this round's participants."""
        return {
            c: self.plan.transforms.truth(0, self.group(c)) for c in self.participants
        }

    async def enter(self, members: Members, round: int, clock: SimClock) -> None:
        """Sample round `round`'s clients; they join, on the scenario's device."""
        self.participants = self.sample(round, clock.availability, clock.now)
        specs = [self.client_spec(c) for c in self.participants]
        for c in self.participants:
            clock.profiles[ClientId(c)] = self.plan.scenario.device
        await members.add_clients(specs)

    async def leave(
        self,
        members: Members,
        assignment: dict[ClientId, Any],
        round: int,
        clock: SimClock,
    ) -> None:
        """The round is over: its clients' state goes into the arrays, they leave."""
        self.remember(assignment, round)
        for c in self.participants:
            await members.remove_client(c, "its round is over")
            clock.forget(ClientId(c))
        self.participants = []

    def snapshot(self) -> PopulationSnapshot:
        """The arrays, between two rounds (copies)."""
        return {"cluster": self.cluster.copy(), "last_round": self.last_round.copy()}

    def restore(self, snapshot: PopulationSnapshot, rounds_done: int) -> None:
        """Take back a checkpoint's arrays.

        Raises:
            ConfigError: they are not this population's (another count of
                registered clients) or name a round not yet run.
        """
        problem = population_snapshot_problem(snapshot)
        if problem is None and len(snapshot["cluster"]) != self.n:
            problem = (
                f"it registers {len(snapshot['cluster'])} clients, the scenario"
                f" {self.n}"
            )
        if problem is None and int(snapshot["last_round"].max()) >= rounds_done:
            problem = (
                f"a client's last round is {int(snapshot['last_round'].max())},"
                f" after the {rounds_done} rounds done"
            )
        if problem is not None:
            raise ConfigError(f"checkpoint refused: the population: {problem}")
        self.cluster = snapshot["cluster"].copy()
        self.last_round = snapshot["last_round"].copy()

    def remember(self, assignment: dict[ClientId, Any], round: int) -> None:
        """Keep each participant's cluster and round in the compact arrays."""
        for c in self.participants:
            cluster = assignment.get(ClientId(c))
            self.cluster[c] = -1 if cluster is None else cluster
            self.last_round[c] = round
