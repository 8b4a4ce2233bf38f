"""The `Strategy` interface: what a federated algorithm decides, and nothing else.

The server runs the loop (sending tasks, collecting replies, timing, faults);
a strategy only decides, through a handful of hooks, and never awaits, sleeps,
reads a clock or imports a runtime. Every clustered strategy keeps the same
state shape, `ServerState`: cluster models plus an assignment client → cluster.
A strategy that must remember more declares a frozen subclass with typed
fields (`DCFLState`, `CFLState`…) and names it as its `state_type`; hooks take
a state and return a new one, never mutating it.

A state holds no random stream. The server owns one `numpy.random.Generator`,
seeded from the scenario, and passes it to the hooks that may draw from it
(`plan_round`, `plan_probes`, `aggregate`, `on_describe`, as the last
argument), always in the same order, so a scenario and a seed fix every draw.

What the hooks exchange (`ClientInfo`, `TaskPlan`, `ClientUpdate`,
`ServerState`…) is in `records.py`; the policies a client actor runs when a
task offers several models (`IdentityPolicy`, `ImportancePolicy`,
`LossReportingPolicy`, `MixturePolicy`) in `policy.py`. Both are re-exported
here.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import (
    TYPE_CHECKING,
    Any,
    ClassVar,
    Generic,
    TypeVar,
)

import numpy as np

from clusterfed.protocol import TrainConfig
from clusterfed.types import ClientId, ClusterId, ModelKey

from .diagnostics import Diagnostics
from .policy import Candidate as Candidate
from .policy import ClientProbe as ClientProbe
from .policy import IdentityPolicy as IdentityPolicy
from .policy import ImportancePolicy as ImportancePolicy
from .policy import LossReportingPolicy as LossReportingPolicy
from .policy import MixturePolicy as MixturePolicy
from .policy import SampleLossProbe as SampleLossProbe
from .policy import heaviest as heaviest
from .policy import is_mixture as is_mixture
from .policy import lowest as lowest
from .policy import reports_importance as reports_importance
from .policy import reports_losses as reports_losses
from .records import ClientInfo as ClientInfo
from .records import ClientUpdate as ClientUpdate
from .records import PeerScore as PeerScore
from .records import ProbePlan as ProbePlan
from .records import ServerState as ServerState
from .records import SubspaceRequest as SubspaceRequest
from .records import TaskPlan as TaskPlan
from .records import Want as Want
from .robust import MEAN, AggregatorRule

if TYPE_CHECKING:  # _aggregate imports this module
    from ._aggregate import ClusterSums

S = TypeVar("S", bound=ServerState)
"""A strategy's own state type: `ServerState` or a frozen subclass of it."""


class Strategy(ABC, Generic[S]):
    """Base of every algorithm. Subclasses set `name` and `state_type` and
    implement `aggregate`.

    Hyperparameters are keyword-only `__init__` arguments with defaults; bad
    values raise `ValueError` naming the value.

    Every hook takes the state and returns a new one (or a plan); none mutates
    its arguments. The hooks that may draw random numbers (`plan_round`,
    `plan_probes`, `aggregate`, `on_describe`) take the server's generator as
    their last argument; `init_state`, `on_join`, `on_leave`, `train_config`,
    `diagnostics`, `model_for` and `plan_for` draw nothing.

    Optional hooks, all no-ops by default: `wants` + `on_describe` (clients
    describe their data once, only for a strategy that asks), `plan_probes`
    (model sharing between training and aggregation), `diagnostics` (what the
    strategy decided, for the results), `fold_weight` + `aggregate_sums`
    (streaming aggregation, for a round that needs only per-cluster sums of
    the deltas, declared by `folds`).

    Capabilities are declared as class attributes, never inferred from which
    methods a class defines: `folds`, `honours_aggregator`, `supports_async`
    and `async_only`. The scenario is checked against them before a run
    starts (`scenarios/spec.py`) and the server reads `folds` through
    `streams` alone.
    """

    name: ClassVar[str]
    state_type: type[S]
    """The strategy's state class: `ServerState` or a frozen dataclass
    subclass of it. The default `init_state` builds it from `models` and
    `assignment` alone, so its other fields need defaults unless the strategy
    overrides `init_state`."""
    wants: ClassVar[tuple[Want, ...]] = ()
    """Data descriptions the server asks every client for, once, before the
    client's first round; the answers reach `on_describe`. Empty: clients
    send nothing about their data. At most one (TypeError at class creation
    otherwise): `on_describe` gets one kind."""
    aggregator: AggregatorRule = MEAN
    """How each cluster folds its members' updates into one step
    (`robust.py`): the scenario's `aggregator`, set where the strategy is
    built. `mean`, the default, is the algorithm's own weighted mean."""
    fraction: float = 1.0
    """The share of the available clients (of each cluster's, where the
    strategy samples per cluster) that trains a round, as `sample_clients`
    draws it: a strategy that samples sets it from its `fraction` parameter.
    The scenario checks a robust rule's assumption at the round it gives
    (`scenarios/robustness.py`)."""
    supports_async: ClassVar[bool] = False
    """Whether the strategy has an asynchronous mode (`absorb`)."""
    supports_dp: ClassVar[bool] = True
    """Whether the strategy's client training has a local-DP path. FedEM's
    has none: it weighs each sample's loss, which Opacus' per-sample
    clipping of an unweighted loss does not; a scenario with `dp` and such a
    strategy is refused."""
    async_only: ClassVar[bool] = False
    """Whether the asynchronous mode is the strategy's only one (FedAsync,
    FedBuff: their synchronous rounds would be FedAvg's under another name).
    A scenario in `mode = "sync"` with such a strategy is refused. Needs
    `supports_async` (TypeError at class creation otherwise)."""
    folds: ClassVar[bool] = False
    """Whether a round's `aggregate` needs only each cluster's weighted sum
    of the accepted deltas. Then the server adds each delta to a running
    `ClusterSums` as its reply is decided (in client order, weighted by
    `fold_weight`), drops it, and calls `aggregate_sums` instead of
    `aggregate`: memory holds one sum per cluster, not every client's update.
    `aggregate_sums` must equal `aggregate` bit for bit (the conformance
    suite checks it). False (the default): the server keeps every update of
    the round until `aggregate` (DCFL's distances, CFL's and FedAC's splits,
    OCFL, CAFA need them all). Under a robust `aggregator` no round folds,
    whatever this says: the rule needs every update (`streams`).

    A subclass that defines `aggregate` but not `aggregate_sums` while
    inheriting `folds = True` is refused when the class is created
    (TypeError): its `aggregate` would never be called. Set `folds = False`,
    override `aggregate_sums` too, or declare `folds = True` in the same
    class to vouch that the inherited `aggregate_sums` still equals it.
    `folds = True` needs `fold_weight` and `aggregate_sums` (TypeError
    otherwise)."""
    honours_aggregator: ClassVar[bool] = False
    """Whether `aggregate` passes the scenario's `aggregator` on, so that
    `aggregator = "median"` (any rule but `mean`) changes how each cluster
    folds its members' updates. A scenario with a rule other than `mean` and
    a strategy that does not honour it is refused. False by default, and
    False on a class that defines `aggregate` without declaring it in the
    same class body: only the class that writes the aggregation can vouch
    for it. It speaks of the synchronous rounds; `honours_aggregator_async`
    of the asynchronous mode."""
    honours_aggregator_async: ClassVar[bool] = False
    """Whether `absorb` folds each cluster's buffer by the scenario's
    `aggregator` (`_buffers.py`). A scenario in `mode = "async"` with a rule
    other than `mean` and a strategy that does not is refused (FedAsync
    mixes each update alone: there is no set for a rule to fold)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Declarations are checked once, where the class is written, so a
        # broken one fails at import with its fix, never in a run.
        super().__init_subclass__(**kwargs)
        body = vars(cls)
        # Only the class that writes the `aggregate` in use can vouch for it
        # (a mixin's, too, when it comes first in the method order).
        writer = _owner(cls, "aggregate")
        if "honours_aggregator" not in body and (
            "aggregate" in body or "honours_aggregator" not in vars(writer)
        ):
            cls.honours_aggregator = False
        if len(cls.wants) > 1:
            raise TypeError(
                f"{cls.__qualname__} wants {cls.wants}: a strategy asks for one"
                " description at most"
            )
        if cls.async_only and not cls.supports_async:
            raise TypeError(
                f"{cls.__qualname__} declares async_only = True without"
                " supports_async = True: set both or neither"
            )
        if not cls.folds:
            return
        sums = _owner(cls, "aggregate_sums")
        vouched = "folds" in body or "folds" in vars(writer)
        if not vouched and not issubclass(sums, writer):
            how = (
                "overrides aggregate"
                if writer is cls
                else f"takes aggregate from {writer.__qualname__}"
            )
            raise TypeError(
                f"{cls.__qualname__} {how} but inherits folds = True, so"
                " aggregate would never be called: set folds = False or"
                " override aggregate_sums"
            )
        for hook in ("fold_weight", "aggregate_sums"):
            if getattr(cls, hook) is getattr(Strategy, hook):
                raise TypeError(
                    f"{cls.__qualname__} declares folds = True without {hook}:"
                    f" define {hook} or set folds = False"
                )

    @property
    def initial_models(self) -> int:
        """How many independently initialised models the strategy starts from."""
        return 1

    def init_state(self, models: Sequence[np.ndarray]) -> S:
        """The state before any client joins: one cluster holding `models[0]`.

        `models` holds `initial_models` independently initialised flat float32
        vectors, the first being the run's initial model; the default keeps
        only the first. Draws no random numbers.

        Raises:
            ValueError: `models` does not hold `initial_models` vectors.
        """
        self._check_initial_models(models)
        return self.state_type(models={ClusterId(0): models[0]}, assignment={})

    def _check_initial_models(self, models: Sequence[np.ndarray]) -> None:
        """ValueError unless `models` holds exactly `initial_models` vectors."""
        if len(models) != self.initial_models:
            raise ValueError(
                f"{self.name} needs {self.initial_models} initial models,"
                f" got {len(models)}"
            )

    def on_join(self, state: S, client: ClientInfo) -> S:
        """A client joined: by default it belongs to the lowest cluster id."""
        first = min(state.models)
        return state.replace(assignment={**state.assignment, client.id: first})

    def on_leave(self, state: S, client: ClientId) -> S:
        assignment = {k: v for k, v in state.assignment.items() if k != client}
        return state.replace(assignment=assignment)

    def train_config(self, base: TrainConfig) -> TrainConfig:
        """The training settings clients receive; variants add their extras."""
        return base

    def plan_round(
        self,
        state: S,
        round: int,
        clients: Sequence[ClientInfo],
        rng: np.random.Generator,
    ) -> list[TaskPlan]:
        """Who trains which model this round, among the available `clients`
        (`rng` for sampling). By default every one trains its cluster's model."""
        return [self.plan_for(state, c.id) for c in clients]

    @abstractmethod
    def aggregate(
        self,
        state: S,
        round: int,
        updates: Sequence[ClientUpdate],
        rng: np.random.Generator,
    ) -> S:
        """Fold this round's updates into new cluster models (and assignment)."""

    # -- streaming aggregation (optional) --------------------------------------

    def fold_weight(self, state: S, update: ClientUpdate) -> float:
        """Streaming aggregation: the weight of an accepted update of at
        least one sample in its cluster's sum (0: it does not count)."""
        raise NotImplementedError(f"{self.name} does not fold its updates")

    def aggregate_sums(
        self,
        state: S,
        round: int,
        updates: Sequence[ClientUpdate],
        sums: ClusterSums,
        rng: np.random.Generator,
    ) -> S:
        """Streaming aggregation: `aggregate` from the round's per-cluster
        sums. `updates` are the round's outcomes as for `aggregate`, but
        without their deltas. Must equal `aggregate` on the same round bit
        for bit (the conformance suite checks it)."""
        raise NotImplementedError(f"{self.name} does not fold its updates")

    def on_describe(
        self,
        state: S,
        round: int,
        histograms: Mapping[ClientId, np.ndarray],
        rng: np.random.Generator,
    ) -> S:
        """Clients described their data (only if `wants` asks): what the
        clients that answered at the start of `round` sent, in client order,
        of the kind `wants` names: class histograms (training samples per
        class, int64) or data subspaces (float32 d × k, unit columns; see
        `subspace`)."""
        return state

    @property
    def subspace(self) -> SubspaceRequest:
        """For a strategy that wants "data_subspace": what each client
        computes and sends (read by the server when it asks)."""
        return SubspaceRequest()

    def plan_probes(
        self,
        state: S,
        round: int,
        updates: Sequence[ClientUpdate],
        rng: np.random.Generator,
    ) -> list[ProbePlan]:
        """After training, before `aggregate`: which client scores which models
        on its held-out split. The scores reach `aggregate` on the updates'
        `peer_scores`. By default nobody probes."""
        return []

    def diagnostics(self, state: S) -> Diagnostics | Mapping[str, Any] | None:
        """What the strategy decided, recorded with each round (`strategy` in
        rounds.jsonl): a frozen `Diagnostics` subclass of the strategy's own
        whose fields the results read, or None when there is nothing to
        report. Never ground truth: a strategy does not know it.

        A plain mapping of JSON values is still accepted from a plug-in and
        recorded as it is (`diagnostics.as_diagnostics`); the built-ins
        return their typed subclass."""
        return None

    def model_for(self, state: S, client: ClientId) -> tuple[ModelKey, np.ndarray]:
        """The model a client is evaluated with: its cluster's."""
        cluster = state.assignment[client]
        return cluster, state.models[cluster]

    def mixture_for(
        self, state: S, client: ClientId
    ) -> Mapping[ClusterId, float] | None:
        """A mixture strategy's (FedEM's): the weight of each cluster model in
        the mixture a client is evaluated with (the prediction is the weighted
        mean of the models' softmaxes), `model_for`'s among them. None, the
        default: the client is evaluated with `model_for`'s model alone."""
        return None

    def absorb(
        self,
        state: S,
        update: ClientUpdate,
        staleness: int,
        rng: np.random.Generator,
    ) -> tuple[S, bool]:
        """Asynchronous mode: fold one update as it arrives, `staleness`
        server versions after its model was sent. Returns the new state and
        whether the model changed (a new version, recorded as one row).

        Raises:
            NotImplementedError: the strategy has no asynchronous mode.
        """
        raise NotImplementedError(f"{self.name} has no asynchronous mode")

    def plan_for(self, state: S, client: ClientId) -> TaskPlan:
        cluster, weights = self.model_for(state, client)
        return TaskPlan(client=client, models={cluster: weights})


def streams(strategy: Strategy[Any]) -> bool:
    """Whether the server folds `strategy`'s rounds: it declares `folds`
    and aggregates by the plain mean (a robust rule, or a pre-aggregator in
    front of the mean, needs every update)."""
    return strategy.folds and strategy.aggregator.is_mean


def _owner(cls: type, name: str) -> type:
    """The class whose body defines the `name` that `cls` resolves to."""
    return next(k for k in cls.__mro__ if name in vars(k))
