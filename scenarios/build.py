"""Turn a scenario into the specs the runtimes build actors from.

Everything random here (the split, the initial model, the transforms) comes
from the scenario seed, each from its own stream. Data for clients that join
later is set aside now, so their partition is as planned as everyone else's.

With local DP each client gets a `PrivacyPlan`: Opacus' noise multiplier for
the DP-SGD steps of every round from the one it joins to the last (horizon
"run"), or of one round (horizon "round"), at its own sampling rate. Planning
over every remaining round is conservative for clients that are not sampled
every round: they end the run below their budget rather than run out of it
before the end.
"""

from __future__ import annotations

import math
import uuid
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from clusterfed.actors import ClientSpec, DeviceProfile, SimClock
from clusterfed.actors.availability import Schedule
from clusterfed.actors.bookkeeping import layer_paths
from clusterfed.actors.client_dp import ClientDPPlan
from clusterfed.actors.faults import FaultyClientSpec
from clusterfed.actors.privacy import (
    plan_noise_multiplier,
    poisson_steps,
    private_model,
)
from clusterfed.actors.spec import PrivacyPlan
from clusterfed.algorithms import Strategy, make
from clusterfed.data import (
    ClientSplit,
    Dataset,
    Partition,
    class_shares,
    draw_test_set,
    holdout,
    load_dataset,
)
from clusterfed.data.datasets import load_test_split
from clusterfed.errors import ClusterfedError, ConfigError, ScenarioError
from clusterfed.models import build_model, get_flat
from clusterfed.protocol import TrainConfig
from clusterfed.seeding import derive_seed, numpy_rng
from clusterfed.types import ClientId

from .dealing import deal_parts, joiner_partition_groups
from .faults import BackdoorProbe, Faulty
from .privacy import client_dp_plan
from .spec import Scenario
from .transforms import GroupTransforms

# Keys of the independent random streams under the scenario seed.
STRATEGY_STREAM = 1
MODEL_STREAM = 2
PARTITION_STREAM = 3
CLIENT_STREAM = 4
TRANSFORM_STREAM = 5
EVENT_STREAM = 6
AVAILABILITY_STREAM = 7
# Each client's test set: (TEST_SET_STREAM, client) when it is planned,
# (TEST_SET_STREAM, client, round, event) when a class_mix drift redraws it.
TEST_SET_STREAM = 8


@dataclass(frozen=True)
class Reserved:
    """Data set aside for a client that joins later."""

    split: ClientSplit
    partition_group: int


@dataclass
class RunPlan:
    """What a run starts from: the strategy (built once, here), its initial
    models, the first clients, and the data set aside for the rest."""

    scenario: Scenario
    dataset: Dataset
    strategy: Strategy[Any]
    initial_models: list[np.ndarray]
    clients: list[ClientSpec]
    partition_groups: dict[int, int]
    transform_groups: dict[int, int]
    transforms: GroupTransforms
    # The training settings as the strategy runs them (`Strategy.train_config`
    # applied once, here): what every train task carries and config.json records.
    train_config: TrainConfig
    # Client-level DP's plan (`dp.mechanism = "client"`); None otherwise.
    client_dp: ClientDPPlan | None = None
    # Local DP's clipping path of each trainable layer (`bookkeeping.py`),
    # as config.json records it; None without it.
    dp_layers: list[dict[str, str]] | None = None
    reserved: dict[int, deque[Reserved]] = field(default_factory=dict)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    @property
    def initial(self) -> np.ndarray:
        """The run's initial model (the first of `initial_models`)."""
        return self.initial_models[0]

    @property
    def groups(self) -> dict[int, int]:
        return {c.id: c.group for c in self.clients}

    def device(self, client_id: int) -> DeviceProfile:
        """The device the scenario gives a client (`devices`, else `device`):
        what the run's clock starts it on."""
        return self.scenario.devices.get(client_id, self.scenario.device)

    def clock(self, availability: Schedule | None = None) -> SimClock:
        """A fresh simulated clock, the first clients on their devices: the
        one holder of devices and slowdowns, which the engine then keeps
        current."""
        clock = SimClock(availability=availability)
        for spec in self.clients:
            clock.profiles[ClientId(spec.id)] = self.device(spec.id)
        return clock

    def client_spec(
        self,
        client_id: int,
        split: ClientSplit,
        partition_group: int,
        transform_group: int,
        first_round: int = 0,
    ) -> ClientSpec:
        """The spec of a client holding `split`, seen through its transform,
        that takes part from `first_round` on."""
        s = self.scenario
        faults = s.faults_of(client_id)
        kind = FaultyClientSpec if faults else ClientSpec
        extra: dict[str, Any] = {"faults": faults} if faults else {}
        if not s.compute.is_default:
            extra["compute"] = s.compute
        return kind(
            id=client_id,
            group=self.transforms.truth(partition_group, transform_group),
            dataset=s.dataset.name,
            dataset_root=s.dataset.root,
            model=s.model.name,
            model_params=s.model.params,
            train=split.train.tolist(),
            test=split.test.tolist(),
            test_set=self.test_set(
                class_shares(self.dataset.labels[split.train], self.dataset.n_classes),
                len(split.test),
                client_id,
            ),
            seed=derive_seed(s.seed, CLIENT_STREAM, client_id),
            privacy=self.privacy_plan(
                len(split.train), first_round, f"client {client_id}"
            ),
            **self.transforms.fields(transform_group),
            **extra,
        )

    def test_set(self, shares: np.ndarray, size: int, *keys: int) -> list[int] | None:
        """A client's test set: `size` images of the dataset's own test split
        with class `shares`, from its stream (TEST_SET_STREAM, *keys); None
        where the dataset has no test split (digits: its hold-out is used).

        Its size is the client's hold-out's, so its accuracy is as precise as
        the hold-out's was and evaluation costs what it did.
        """
        s = self.scenario
        split = load_test_split(s.dataset.name, s.dataset.root)
        if split is None:
            return None
        rng = numpy_rng(s.seed, TEST_SET_STREAM, *keys)
        try:
            return draw_test_set(split.labels, shares, size, rng).tolist()
        except ConfigError as exc:
            raise ScenarioError(
                f"dataset {s.dataset.name}: no test set for client {keys[0]}: {exc}"
            ) from exc

    def privacy_plan(
        self, n_train: int, first_round: int, who: str
    ) -> PrivacyPlan | None:
        """Local DP of a client with `n_train` samples from `first_round` on.

        Its noise multiplier spends the budget over every round left (horizon
        "run") or over one round ("round"): rounds × local epochs × its
        Poisson steps per epoch (sampling rate about batch_size / n_train).

        Raises:
            ScenarioError: no noise multiplier meets the budget.
        """
        dp = self.scenario.dp
        if dp is None or dp.mechanism != "sample":
            return None
        config = self.train_config
        left = max(1, self.scenario.rounds - first_round)
        rounds = left if dp.horizon == "run" else 1
        rate, per_epoch = poisson_steps(n_train, config.batch_size)
        steps = rounds * config.epochs * per_epoch
        try:
            sigma = plan_noise_multiplier(
                epsilon=dp.epsilon,
                delta=dp.delta,
                sample_rate=rate,
                steps=steps,
                accountant=dp.accountant,
            )
        except ValueError as exc:  # also Opacus' gdp when σ must be small
            raise ScenarioError(
                f"dp.epsilon = {dp.epsilon:g} (δ = {dp.delta:g}) with dp.accountant"
                f" = {dp.accountant!r}: Opacus finds no noise multiplier for {who}"
                f" ({steps} steps at sampling rate {rate:.3g}): {exc}"
            ) from exc
        return PrivacyPlan(
            epsilon=dp.epsilon,
            delta=dp.delta,
            max_grad_norm=dp.max_grad_norm,
            accountant=dp.accountant,
            noise_multiplier=sigma,
            horizon=dp.horizon,
            rounds=rounds,
            sample_rate=rate,
            steps=steps,
            run_id=self.run_id,
        )


def check_backdoors(scenario: Scenario, data: Dataset) -> None:
    """Refuse a backdoor (or backdoor probe) that does not fit the dataset:
    a target outside its labels would read a success rate of 0 every round,
    and a trigger as large as its images would stamp all of every image.

    Raises:
        ScenarioError: naming the entry, its value and the dataset's bound.
    """
    plans: list[tuple[str, Faulty | BackdoorProbe]] = [
        (f"faulty[{i}]", f)
        for i, f in enumerate(scenario.faulty)
        if f.behaviour == "backdoor"
    ]
    if scenario.backdoor_probe is not None:
        plans.append(("backdoor_probe", scenario.backdoor_probe))
    shape = data.input_shape
    # The trigger is a square in an image's corner (H×W or C×H×W), or its
    # last trigger² features in a flat row (actors/backdoor.py `stamp`); a
    # square as tall as a wide image still leaves its left part.
    flat = len(shape) < 2
    if flat:
        side = math.isqrt(shape[-1] - 1)
    else:
        height, width = shape[-2:]
        side = min(height, width) - (height == width)
    images = f"{shape[-1]} features" if flat else f"{shape[-2]}×{shape[-1]} images"
    for where, plan in plans:
        if plan.target >= data.n_classes:
            raise ScenarioError(
                f"{where}.target = {plan.target}: {scenario.dataset.name} has"
                f" labels 0 to {data.n_classes - 1}"
            )
        if plan.trigger > side:
            raise ScenarioError(
                f"{where}.trigger = {plan.trigger}: {scenario.dataset.name} has"
                f" {images}; a trigger must leave part of each uncovered"
                f" (at most {side})"
            )


def plan_run(scenario: Scenario) -> RunPlan:
    """Data split, initial model and actor specs of `scenario`, all from its seed."""
    try:
        data = load_dataset(scenario.dataset.name, scenario.dataset.root)
        rng = numpy_rng(scenario.seed, PARTITION_STREAM)
        joiner_groups = joiner_partition_groups(scenario)
        if scenario.population is None:
            partition, initial, joiners = deal_parts(scenario, data, joiner_groups, rng)
        else:  # its clients hold their own rows (population.py)
            partition, initial, joiners = Partition([], []), [], {}
        splits = holdout(partition, scenario.test_fraction, rng)
        strategy = make(scenario.algorithm, **scenario.params_of(scenario.algorithm))
        strategy.aggregator = scenario.aggregator
        nets = [
            build_model(
                scenario.model.name,
                data.input_shape,
                data.n_classes,
                seed=derive_seed(scenario.seed, MODEL_STREAM, *([k] if k else [])),
                **scenario.model.params,
            )
            for k in range(strategy.initial_models)
        ]
    except ScenarioError:
        raise
    except ClusterfedError as exc:
        raise ScenarioError(f"scenario {scenario.name!r}: {exc}") from exc
    check_backdoors(scenario, data)
    dp_layers = None
    if scenario.dp is not None and scenario.dp.mechanism == "sample":
        # Refused here, before anything runs; the clients apply the same fix.
        try:
            nets = [private_model(net) for net in nets]
        except ValueError as exc:
            raise ScenarioError(
                f"model: {scenario.model.name!r} cannot be trained with dp: {exc}"
            ) from exc
        dp_layers = [asdict(p) for p in layer_paths(nets[0])]
    models = [get_flat(net) for net in nets]
    transforms = GroupTransforms(
        scenario.transform,
        data.n_classes,
        max(partition.groups, default=0) + 1,
        numpy_rng(scenario.seed, TRANSFORM_STREAM),
    )
    plan = RunPlan(
        scenario,
        data,
        strategy,
        models,
        [],
        {},
        {},
        transforms,
        strategy.train_config(scenario.train),
        client_dp=client_dp_plan(scenario, strategy),
        dp_layers=dp_layers,
    )
    for client_id, part in enumerate(initial):
        group = partition.groups[part]
        transform_group = transforms.deal(client_id)
        plan.clients.append(
            plan.client_spec(client_id, splits[part], group, transform_group)
        )
        plan.partition_groups[client_id] = group
        plan.transform_groups[client_id] = transform_group
    for event_index, parts in joiners.items():
        plan.reserved[event_index] = deque(
            Reserved(splits[p], partition.groups[p]) for p in parts
        )
        for p in parts:
            # A joiner plans over fewer rounds, which needs less noise: if
            # the whole run is in reach, so is its share of it.
            plan.privacy_plan(
                len(splits[p].train), 0, f"a client of events[{event_index}]"
            )
    return plan
