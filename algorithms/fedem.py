"""FedEM: M shared component models; every client is a mixture of them, with
mixture weights of its own, fitted by federated EM.

Marfoq, Neglia, Bellet, Kameni, Vidal, "Federated Multi-Task Learning under a
Mixture of Distributions", NeurIPS 2021 (arXiv:2108.10252). Client t's data
is a mixture of M underlying distributions, D_t = Σ_m π*_{tm} D̃_m, and
component m's model h_{θ_m} serves D̃_m. Each round (the paper's
Algorithm 1, with Algorithm 2 as the client's local update):

- on the client, the E-step: each training sample's responsibility of each
  component, q(zᵢ = m) ∝ π_{tm} exp(−ℓ(h_{θ_m}(xᵢ), yᵢ)), and the M-step of
  the weights, π_{tm} = the mean of q(zᵢ = m) over the client's samples
  (`FedEMPolicy` in `fedem_client.py`);
- on the client, the M-step of the components: every θ_m trained from the
  received model on the q(zᵢ = m)-weighted loss, Σᵢ q(zᵢ = m)·ℓᵢ / batch
  size per batch, for the run's local epochs;
- on the server: θ_m = Σ_t n_t θ_m^t / Σ_t n_t over the clients that
  trained, for every m.

A client is evaluated with its mixture, the prediction Σ_m π_{tm}
softmax(h_{θ_m}(x)) (`mixture_for`; the client computes it in
`actors/mixture.py`); its cluster (ARI, purity) is its component of most
weight (ties: the lowest id), which is also the model its reply names.

The authors' code (omarfoq/FedEM: `client.py`, `learners/learner.py`,
`learners/learners_ensemble.py`, `aggregator.py`) settles what the paper
leaves open, and tests/test_fedem.py checks the E-step against a
brute-force computation of the formula on the losses, the weighted loss's
gradient against torch autograd of the written objective, the mixture's
prediction against the code's sum of softmaxes, and the aggregation against a
hand computation. What clusterfed does:

- The E-step runs on the client's training samples (the code's
  `val_iterator` is the training set without shuffling), once per task,
  before the components train; the weights are its mean, as the code's
  `update_learners_weights`.
- Every component trains on the same batch order of the round (the code's
  learners each iterate the shuffled loader in turn).
- Mixture weights live on the server between rounds: a task carries the
  client's weights (`TrainTask.mixture`) and the reply its new ones
  (`UpdateReply.importance`, checked by the server: one per component,
  summing to 1); the code keeps them in the client object, which
  clusterfed's clients, keeping nothing between rounds, do not. They start
  uniform (1/M), as the code's `learners_weights`.
- The server averages each component's deltas weighted by the trainers'
  sample counts, n_t / Σ n over the clients that trained. The code's
  `CentralizedAggregator.mix` averages over every client, n_t / Σ_all n,
  the clients not sampled counting with the model they were sent (a zero
  step), so with sampling its step is shorter by Σ_trained n / Σ_all n;
  the two agree when every client trains (the default, and every built-in
  scenario). clusterfed normalises over the trainers, as its FedAvg does.
- Defaults are the code's: M = 3 (`n_learners`) and every client each round
  (`sampling_rate` 1). The components start from M independent
  initialisations. The code's optimiser settings are the run's `train`.

Training weighs each sample's loss, which Opacus' per-sample clipping of an
unweighted loss does not: a scenario with local DP is refused
(`supports_dp` is False), and a client refuses a weighted task under DP.
The components are means of models, not of deltas, so the scenario's robust
`aggregator` rules do not apply (`honours_aggregator` is False).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from clusterfed.types import ClientId, ClusterId, ModelKey

from ._aggregate import counts_in_mean, weighted_mean
from .base import (
    ClientInfo,
    ClientUpdate,
    ServerState,
    Strategy,
    TaskPlan,
    heaviest,
)
from .diagnostics import Diagnostics
from .fedavg import sample_clients
from .fedem_client import FedEMPolicy as FedEMPolicy
from .fedem_client import responsibilities as responsibilities


@dataclass(frozen=True)
class FedEMState(ServerState):
    """The M components, each client's dominant component, and its weights.

    Attributes:
        mixture: each member's mixture weights π_t, one per component in id
            order (uniform until its first update).
    """

    mixture: Mapping[ClientId, tuple[float, ...]] = field(default_factory=dict)


class FedEMDiagnostics(Diagnostics):
    """What FedEM holds after the last round.

    Attributes:
        sizes: members per component by their component of most weight.
        mass: Σ_t π_{tm} per component over the members: the soft sizes.
    """

    sizes: dict[ClusterId, int]
    mass: dict[ClusterId, float]


class FedEM(Strategy[FedEMState]):
    """Federated EM over a mixture of M shared component models.

    Args:
        components: M, the number of component models (≥ 1; the code's 3).
        fraction: the share of members that train each round, in (0, 1]
            (the code's `sampling_rate`, 1).
    """

    name = "fedem"
    state_type = FedEMState
    supports_dp = False

    def __init__(self, *, components: int = 3, fraction: float = 1.0) -> None:
        if (
            isinstance(components, bool)
            or not isinstance(components, int)
            or components < 1
        ):
            raise ValueError(f"components must be an integer >= 1, got {components!r}")
        if isinstance(fraction, bool) or not 0 < fraction <= 1:
            raise ValueError(f"fraction must be in (0, 1], got {fraction!r}")
        self.components = components
        self.fraction = float(fraction)

    @property
    def initial_models(self) -> int:
        return self.components

    def init_state(self, models: Sequence[np.ndarray]) -> FedEMState:
        """M components, component m starting from `models[m]`."""
        self._check_initial_models(models)
        return FedEMState(
            models={ClusterId(m): w for m, w in enumerate(models)}, assignment={}
        )

    # -- hooks ----------------------------------------------------------------

    def on_join(self, state: FedEMState, client: ClientInfo) -> FedEMState:
        """The newcomer's weights start uniform: it counts at component 0."""
        ids = sorted(state.models)
        uniform = (1.0 / len(ids),) * len(ids)
        return state.replace(
            assignment={**state.assignment, client.id: ids[heaviest(uniform)]},
            mixture={**state.mixture, client.id: uniform},
        )

    def on_leave(self, state: FedEMState, client: ClientId) -> FedEMState:
        """The client and its weights go; the components keep their models."""
        return state.replace(
            assignment={c: k for c, k in state.assignment.items() if c != client},
            mixture={c: w for c, w in state.mixture.items() if c != client},
        )

    def plan_round(
        self,
        state: FedEMState,
        round: int,
        clients: Sequence[ClientInfo],
        rng: np.random.Generator,
    ) -> list[TaskPlan]:
        """Every component, with the client's weights, to each sampled client."""
        ids = sorted(state.models)
        components: dict[ModelKey, np.ndarray] = {k: state.models[k] for k in ids}
        return [
            TaskPlan(
                c.id,
                dict(components),
                identity=FedEMPolicy.name,
                mixture=weights_of(state, c.id, len(ids)),
            )
            for c in sample_clients(clients, self.fraction, rng)
        ]

    def aggregate(
        self,
        state: FedEMState,
        round: int,
        updates: Sequence[ClientUpdate],
        rng: np.random.Generator,
    ) -> FedEMState:
        """Each component moved by its trainers' sample-weighted mean delta;
        each trainer's new weights kept, its cluster their heaviest."""
        ids = sorted(state.models)
        usable = sorted(
            (u for u in updates if fits(u, ids, state.assignment)),
            key=lambda u: u.client,
        )
        mixture = dict(state.mixture)
        assignment = dict(state.assignment)
        for u in usable:
            assert u.importance is not None  # checked by `fits`
            mixture[u.client] = tuple(u.importance)
            assignment[u.client] = ids[heaviest(u.importance)]
        models = dict(state.models)
        if usable:
            sizes = [float(u.n_samples) for u in usable]
            for k in ids:
                moves = [u.deltas[k] for u in usable if u.deltas is not None]
                step = weighted_mean(moves, sizes)
                models[k] = (state.models[k].astype(np.float64) + step).astype(
                    np.float32
                )
        return state.replace(models=models, assignment=assignment, mixture=mixture)

    def model_for(
        self, state: FedEMState, client: ClientId
    ) -> tuple[ModelKey, np.ndarray]:
        """The client's component of most weight: the mixture's first model."""
        cluster = state.assignment[client]
        return cluster, state.models[cluster]

    def mixture_for(
        self, state: FedEMState, client: ClientId
    ) -> Mapping[ClusterId, float]:
        """The client's mixture weights over the components."""
        ids = sorted(state.models)
        weights = weights_of(state, client, len(ids))
        return dict(zip(ids, weights, strict=True))

    def diagnostics(self, state: FedEMState) -> FedEMDiagnostics | None:
        """Members and weight mass per component; None before any client joins."""
        if not state.assignment:
            return None
        ids = sorted(state.models)
        sizes = dict.fromkeys(ids, 0)
        for cluster in state.assignment.values():
            sizes[cluster] += 1
        mass = dict.fromkeys(ids, 0.0)
        for client in sorted(state.assignment):
            for k, share in zip(ids, weights_of(state, client, len(ids)), strict=True):
                mass[k] += share
        return FedEMDiagnostics(sizes=sizes, mass=mass)


# -- named steps, testable alone ----------------------------------------------


def weights_of(state: FedEMState, client: ClientId, n: int) -> tuple[float, ...]:
    """A client's mixture weights; uniform before its first update."""
    return state.mixture.get(client, (1.0 / n,) * n)


def fits(
    update: ClientUpdate, ids: Sequence[ClusterId], members: Mapping[ClientId, object]
) -> bool:
    """Whether an update can move the components: accepted, of a member,
    with a delta for every component and one weight per component."""
    return (
        counts_in_mean(update)
        and update.client in members
        and update.deltas is not None
        and set(update.deltas) == set(ids)
        and update.importance is not None
        and len(update.importance) == len(ids)
    )
