"""FedSoft: S cluster centers; each client weighs every center by the share of
its samples the center fits best, and trains with a proximal term toward all
of them, each pulled by its weight.

Ruan, Joe-Wong, "FedSoft: Soft Clustered Federated Learning with Proximal
Local Updating", AAAI 2022 (arXiv:2112.06053).

A client k's data is a mixture of S distributions; the center c_s serves the
s-th. Each round (the paper's Algorithm 1):

- importance estimation, on the client: for each of its samples i the center
  with the lowest loss, j = argmin_s ℓ(xᵢ; c_s) (ties: the lowest id), counted
  n_{kj} += 1; u_{ks} = max(n_{ks}/n_k, σ), the smoother σ keeping every
  weight positive;
- proximal local update, on the client: w_k = argmin_w f_k(w) +
  λ/2 Σ_s u_{ks} ‖w − c_s‖², by the run's local SGD (the trainer adds the
  term's gradient λ Σ_s u_{ks}(w − c_s) to every step);
- aggregation, on the server: v_{sk} = u_{ks} n_k / Σ_{k'} u_{k's} n_{k'}
  and c_s = Σ_k v_{sk} w_k over the clients that trained; or, with client
  selection, K clients drawn for each center with probabilities v_{sk} and
  c_s the plain mean of its K local models (an unbiased estimate of the
  former).

The authors' code (ycruan/FedSoft: `clients.py`, `servers.py`, `solvers.py`)
settles what the paper leaves open; tests/test_fedsoft.py checks the
importance estimate against a brute-force count, the center update against a
hand computation and the proximal gradient against torch autograd of the
written loss. What clusterfed does:

- Importance travels: the client estimates u_k at the start of every
  training task, on its training samples, against the centers it received
  (the `fedsoft` client policy, `FedSoftPolicy` in `fedsoft_client.py`), and
  returns it with its update (`UpdateReply.importance`, checked by the
  server: one share per center sent, summing to 1). The code smooths only a
  zero count (to σ) and leaves the sum at 1 + (zero counts)·σ; here u_k is
  max(n_{ks}/n_k, σ) normalised to sum to 1 (a change of at most S·σ, 2·10⁻⁴
  at the defaults).
- The code estimates every client's weights each τ rounds in a phase of its
  own; here only the clients that train estimate theirs, in their task
  (τ = 1 for them, the code's `ServerSolver` default), and the server keeps
  each client's last estimate (uniform 1/S before its first).
- Local start: clusterfed's clients keep no model between rounds, so a
  client starts its local solve from the center it weighs most (ties: the
  lowest id), which names its update's `cluster`; the code continues the
  client's own model of its last round. Its cluster (ARI, purity, and the
  model it is evaluated with) is that center.
- Selection (`selection` = K): the code's `do_selection`, K clients per
  center drawn without replacement with probabilities v_{sk} from the last
  estimates, the union trains; the draw for round t + 1 is made at the end
  of round t, from the estimates that round returned. Round 0, before any
  estimate, trains every client and aggregates by the weights v_{sk}, as do
  all rounds with `selection = None`. That default is clusterfed's, not the
  code's: its `ServerSolver` defaults to `do_selection=True` with K = 30 (its
  `main.py` runs K = 15), but K must be well below the number of clients,
  or every center becomes the same plain mean, and our scenarios have 20 to
  40 clients; `do_selection=False`, the weighted aggregation, is the code's
  other mode. A selected client that did not
  report is left out of its center's mean; a center with no update keeps
  its model.
- Defaults are the code's MNIST solver's (`MnistClientSolver`): λ = 0.1,
  σ = 10⁻⁴; S = 2, the paper's MNIST / rotated-MNIST mixture. The centers
  start from S independent initialisations, as the code's `model_fn()`.
  The code's Adam optimiser is the run's `train` settings here.

The centers are means of models, not of deltas from one model, so the
scenario's robust `aggregator` rules do not apply (`honours_aggregator` is
False).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

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
from .fedsoft_client import FedSoftPolicy as FedSoftPolicy
from .fedsoft_client import check_lam as check_lam
from .fedsoft_client import check_smoother as check_smoother
from .fedsoft_client import importance_weights as importance_weights

# -- the server's part ----------------------------------------------------------


@dataclass(frozen=True)
class FedSoftState(ServerState):
    """Centers, each client's dominant center, and what FedSoft remembers.

    Attributes:
        importance: each client's last reported weights u_k, one per center
            in id order (a client not yet estimated is absent: uniform).
        sizes: each member's declared training samples n_k.
        selected: the clients drawn for each center for the next round;
            None: every client trains (no selection, or no estimate yet).
    """

    importance: Mapping[ClientId, tuple[float, ...]] = field(default_factory=dict)
    sizes: Mapping[ClientId, int] = field(default_factory=dict)
    selected: Mapping[ClusterId, tuple[ClientId, ...]] | None = None


class FedSoftDiagnostics(Diagnostics):
    """What FedSoft decided in the last round.

    Attributes:
        sizes: members per center by dominant center (empty ones too).
        mass: Σ_k u_{ks} per center over the members: the soft sizes.
        selected: the clients drawn for each center for the next round;
            left out without selection.
    """

    omit_when_none: ClassVar[frozenset[str]] = frozenset({"selected"})

    sizes: dict[ClusterId, int]
    mass: dict[ClusterId, float]
    selected: dict[ClusterId, list[ClientId]] | None = None


class FedSoft(Strategy[FedSoftState]):
    """Soft clustered FL: importance-weighted centers, proximal local updates.

    Args:
        clusters: S, the number of centers (≥ 1).
        lam: λ, the proximal coefficient (≥ 0; the code's 0.1).
        smoother: σ, the least importance weight (in [0, 1/S]; the code's
            10⁻⁴).
        selection: K, the clients drawn per center each round with
            probabilities v_{sk} (≥ 1); None: every client trains and each
            center is the v-weighted mean of all.
    """

    name = "fedsoft"
    state_type = FedSoftState

    def __init__(
        self,
        *,
        clusters: int = 2,
        lam: float = 0.1,
        smoother: float = 1e-4,
        selection: int | None = None,
    ) -> None:
        if isinstance(clusters, bool) or not isinstance(clusters, int) or clusters < 1:
            raise ValueError(f"clusters must be an integer >= 1, got {clusters!r}")
        self.clusters = clusters
        self.lam = check_lam(lam)
        self.smoother = check_smoother(smoother)
        if self.smoother > 1 / clusters:
            raise ValueError(
                f"smoother must be at most 1/clusters = {1 / clusters:g},"
                f" got {smoother}"
            )
        if selection is not None and (
            isinstance(selection, bool)
            or not isinstance(selection, int)
            or selection < 1
        ):
            raise ValueError(f"selection must be an integer >= 1, got {selection!r}")
        self.selection = selection

    @property
    def initial_models(self) -> int:
        return self.clusters

    def init_state(self, models: Sequence[np.ndarray]) -> FedSoftState:
        """S centers, center s starting from `models[s]`."""
        self._check_initial_models(models)
        return FedSoftState(
            models={ClusterId(s): m for s, m in enumerate(models)}, assignment={}
        )

    # -- hooks ----------------------------------------------------------------

    def on_join(self, state: FedSoftState, client: ClientInfo) -> FedSoftState:
        """The newcomer, not yet estimated, counts at the largest center."""
        return state.replace(
            assignment={**state.assignment, client.id: state.largest_cluster()},
            sizes={**state.sizes, client.id: client.n_train},
        )

    def on_leave(self, state: FedSoftState, client: ClientId) -> FedSoftState:
        """The client and its weights go; the centers keep their models."""

        def without(mapping: Mapping[ClientId, object]) -> dict[ClientId, object]:
            return {c: v for c, v in mapping.items() if c != client}

        return state.replace(
            assignment=without(state.assignment),
            importance=without(state.importance),
            sizes=without(state.sizes),
        )

    def plan_round(
        self,
        state: FedSoftState,
        round: int,
        clients: Sequence[ClientInfo],
        rng: np.random.Generator,
    ) -> list[TaskPlan]:
        """Every center to each client that trains: the selected ones, or all."""
        chosen = list(clients)
        if state.selected is not None:
            drawn = {c for members in state.selected.values() for c in members}
            chosen = [c for c in clients if c.id in drawn]
        centers: dict[ModelKey, np.ndarray] = {
            k: state.models[k] for k in sorted(state.models)
        }
        params = {"smoother": self.smoother, "lam": self.lam}
        return [
            TaskPlan(
                c.id,
                dict(centers),
                identity=FedSoftPolicy.name,
                identity_params=params,
            )
            for c in chosen
        ]

    def aggregate(
        self,
        state: FedSoftState,
        round: int,
        updates: Sequence[ClientUpdate],
        rng: np.random.Generator,
    ) -> FedSoftState:
        """The reported weights kept, the centers re-estimated, and (with
        selection) the next round's clients drawn."""
        ids = sorted(state.models)
        usable = sorted(
            (
                u
                for u in updates
                if counts_in_mean(u)
                and u.client in state.assignment
                and u.importance is not None
                and len(u.importance) == len(ids)
            ),
            key=lambda u: u.client,
        )
        importance = dict(state.importance)
        assignment = dict(state.assignment)
        for u in usable:
            assert u.importance is not None  # filtered above
            importance[u.client] = tuple(u.importance)
            assignment[u.client] = ids[heaviest(u.importance)]
        centers = [state.models[k] for k in ids]
        points = [local_model(u) for u in usable]
        if state.selected is None:
            weights = np.array([u.importance for u in usable], dtype=np.float64)
            sizes = [float(u.n_samples) for u in usable]
            new = soft_centers(points, weights, sizes, centers)
        else:
            new = selected_centers(
                points, [u.client for u in usable], state.selected, ids, centers
            )
        selected = None
        if self.selection is not None:
            selected = draw_selection(
                importance, state.sizes, sorted(assignment), ids, self.selection, rng
            )
        return state.replace(
            models={k: new[i] for i, k in enumerate(ids)},
            assignment=assignment,
            importance=importance,
            selected=selected,
        )

    def diagnostics(self, state: FedSoftState) -> FedSoftDiagnostics | None:
        """Each center's clients, importance mass and selection; None while
        no client has joined (nothing decided yet)."""
        if not state.assignment:
            return None
        ids = sorted(state.models)
        sizes = dict.fromkeys(ids, 0)
        for cluster in state.assignment.values():
            sizes[cluster] += 1
        mass = dict.fromkeys(ids, 0.0)
        for client in state.assignment:
            for k, u in zip(ids, weights_of(state, client, len(ids)), strict=True):
                mass[k] += u
        selected = None
        if state.selected is not None:
            selected = {k: list(state.selected.get(k, ())) for k in ids}
        return FedSoftDiagnostics(sizes=sizes, mass=mass, selected=selected)


# -- named steps, testable alone ----------------------------------------------


def weights_of(state: FedSoftState, client: ClientId, n_centers: int) -> np.ndarray:
    """A client's last weights u_k; uniform before its first estimate."""
    known = state.importance.get(client)
    if known is None:
        return np.full(n_centers, 1.0 / n_centers)
    return np.asarray(known, dtype=np.float64)


def local_model(update: ClientUpdate) -> np.ndarray:
    """w_k: where the client's training ended, base + delta (float64)."""
    if update.base is None or update.delta is None:
        raise ValueError(f"the update of client {update.client} carries no model")
    return update.base.astype(np.float64) + update.delta.astype(np.float64)


def soft_centers(
    points: Sequence[np.ndarray],
    importance: np.ndarray,
    sizes: Sequence[float],
    centers: Sequence[np.ndarray],
) -> list[np.ndarray]:
    """c_s = Σ_k v_{sk} w_k with v_{sk} = u_{ks} n_k / Σ_{k'} u_{k's} n_{k'},
    as float32; a center no client weighs keeps its model.

    `importance` holds one row u_k per point, one column per center."""
    new = []
    for s, center in enumerate(centers):
        weights = [float(importance[k, s]) * n for k, n in enumerate(sizes)]
        if not points or sum(weights) <= 0:
            new.append(np.asarray(center, dtype=np.float32))
            continue
        new.append(weighted_mean(list(points), weights).astype(np.float32))
    return new


def selected_centers(
    points: Sequence[np.ndarray],
    clients: Sequence[ClientId],
    selected: Mapping[ClusterId, tuple[ClientId, ...]],
    ids: Sequence[ClusterId],
    centers: Sequence[np.ndarray],
) -> list[np.ndarray]:
    """c_s = the plain mean of the local models of the clients drawn for s
    that reported, as float32; a center with none keeps its model."""
    where = {c: i for i, c in enumerate(clients)}
    new = []
    for k, center in zip(ids, centers, strict=True):
        members = [where[c] for c in selected.get(k, ()) if c in where]
        if not members:
            new.append(np.asarray(center, dtype=np.float32))
            continue
        mean = weighted_mean([points[i] for i in members], [1.0] * len(members))
        new.append(mean.astype(np.float32))
    return new


def draw_selection(
    importance: Mapping[ClientId, tuple[float, ...]],
    sizes: Mapping[ClientId, int],
    clients: Sequence[ClientId],
    ids: Sequence[ClusterId],
    k: int,
    rng: np.random.Generator,
) -> dict[ClusterId, tuple[ClientId, ...]]:
    """For each center s, min(k, clients) of `clients` drawn without
    replacement with probabilities v_{sk} ∝ u_{ks} n_k (a client not yet
    estimated weighs 1/S), in client order."""
    if not clients:
        return {s: () for s in ids}
    u = np.array(
        [importance.get(c, (1.0 / len(ids),) * len(ids)) for c in clients],
        dtype=np.float64,
    )
    n = np.array([max(sizes.get(c, 1), 1) for c in clients], dtype=np.float64)
    drawn: dict[ClusterId, tuple[ClientId, ...]] = {}
    for s, cluster in enumerate(ids):
        mass = u[:, s] * n
        positive = int(np.count_nonzero(mass))
        size = min(k, positive)
        if size == 0:
            drawn[cluster] = ()
            continue
        picks = rng.choice(len(clients), size=size, replace=False, p=mass / mass.sum())
        drawn[cluster] = tuple(clients[int(i)] for i in sorted(picks))
    return drawn
