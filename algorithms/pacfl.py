"""PACFL: clients clustered once by the principal angles between their data
subspaces, then FedAvg inside each cluster.

Vahidian, Morafah, Wang, Kungurtsev, Chen, Shah, Lin, "Efficient Distribution
Similarity Identification in Clustered Federated Learning via Principal Angles
Between Client Data Subspaces", AAAI 2023 (arXiv:2209.10526).

The algorithm, as the paper states it:

1. Before training, each client k takes the truncated SVD of its data matrix
   D_k (one flattened sample per column), D_k = U_k Σ_k V_kᵀ, and sends the
   first p left singular vectors U_k^p = [u₁, …, u_p], once. No sample and no
   model leaves the client.
2. The server builds the proximity matrix A[i, j] = Θ₁(U_i^p, U_j^p), the
   smallest principal angle between the two subspaces:
   cos Θ₁ = max over u ∈ span U_i, w ∈ span U_j of |uᵀw| / (‖u‖ ‖w‖),
   the largest singular value of Q_iᵀQ_j for orthonormal bases Q.
3. Hierarchical (agglomerative) clustering of A: the two nearest clusters
   merge while they are at most the threshold α apart.
4. FedAvg inside each cluster, every cluster from the same initial model:
   W_c ← W_c + Σ_{i∈c} nᵢ Δᵢ / Σ_{i∈c} nᵢ over the cluster's sampled
   clients.
5. A newcomer sends its U^p too and joins the cluster its angles place it in.

The authors' code (MMorafah/PACFL: `main_pacfl.py`,
`src/clustering/hierarchical_clustering.py`) is more specific, and its
choices are the defaults here:

- Per class: each client takes the SVD of each class's samples it holds (its
  own labels) and sends the first p vectors of every class, stacked: d × p·C
  for C classes (`per_class=True`; False: one SVD of all its data). p = 3
  (`n_basis`, the code's scripts). A class with fewer than p samples gives
  as many vectors as samples. The data are the client's training images as
  it trains on them (after its rotation, if any), flattened, not centred.
- Linkage: the code's "average" merges two rows into their mean, which is
  WPGMA (`linkage="weighted"`, the default); UPGMA (`"average"`),
  `"complete"` and `"single"` are options.
- Proximity: the code computes min over column pairs of arccos(uᵢ·wⱼ), in
  degrees, signs as SVD returned them (`measure="basis"`), an upper bound on
  Θ₁ that a vector's sign flip changes. The default is the paper's Θ₁
  (`measure="smallest"`), in degrees as the code's threshold is.
- Threshold: α in degrees. The code's scripts tune it per dataset (4.9 on
  CIFAR-10 with its measure). The default 7° was measured on `pacfl-labels`
  (digits, 5 planted label pairs of 4 clients, p = 3, seeds 0-2): Θ₁ within
  a pair stayed under 5.1°, across pairs over 9.5°. On Fashion-MNIST
  (`pacfl-labels-fmnist`, about 240 images per class and client) the same
  angles are under 2.1° and over 2.9°: its scenario sets 2.5°.
- Sampling: the code samples a fraction of all clients per round (10 %); so
  does `fraction` here (1.0 by default, as every clusterfed strategy).

Where both are silent, clusterfed decides:

- Clustering happens at the first round in which clients describe their
  data (the server asks before the round's plan), over those that answered.
  Every cluster starts from the one model then: the run's initial model, as
  in the code (the server describes clients before the first plan). Only
  if no client could be described yet does the one model train by FedAvg
  meanwhile.
- A client not described yet (its describe request failed, it joined later
  and was offline, or its answer was refused) is *pending*: it does not
  train (its cluster is unknown) and is evaluated with the largest cluster's
  model. When its subspace arrives it joins the cluster nearest by the
  linkage (mean angle to the members for weighted and average, the maximum
  for complete, the minimum for single; ties: the lowest id) if that is
  within α, else it starts a new cluster from the clusters' starting model, as the
  clustering would have left it apart. Newcomers of one round are placed in
  client order.
- A client that leaves takes its subspace with it; an emptied cluster keeps
  its model but attracts no newcomer.

Checked against: `scipy.linalg.subspace_angles` for Θ₁, scikit-learn's
`AgglomerativeClustering` (precomputed distances) for the average, complete
and single cuts, the authors' merge loop (restated in numpy) for the weighted
one, and planted label groups clustered as planted (tests/test_pacfl.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from clusterfed.types import ClientId, ClusterId

from ._aggregate import ClusterSums, move_clusters
from ._subspace import (
    LINKAGES,
    MEASURES,
    Linkage,
    Measure,
    angles_to,
    cluster,
    cluster_distance,
    proximity,
)
from .base import (
    ClientInfo,
    ClientUpdate,
    ServerState,
    Strategy,
    SubspaceRequest,
    TaskPlan,
    Want,
)
from .diagnostics import Diagnostics
from .fedavg import sample_clients


@dataclass(frozen=True)
class PACFLState(ServerState):
    """Cluster models and assignment, plus the clients' subspaces.

    Attributes:
        start: the model every cluster started from (None before the
            clustering): the one model of the clustering round.
        subspaces: each described client's basis as it sent it (d × k).
        pending: clients not placed yet (not described).
        clustered_in: the round of the clustering; None before it.
        placed: clients placed after the clustering, by their angles.
    """

    start: np.ndarray | None = None
    subspaces: Mapping[ClientId, np.ndarray] = field(default_factory=dict)
    pending: frozenset[ClientId] = frozenset()
    clustered_in: int | None = None
    placed: int = 0


class PACFLDiagnostics(Diagnostics):
    """PACFL's record, from its clustering round on.

    Attributes:
        clustered_in: the round whose described clients were clustered.
        sizes: placed members per cluster now, in id order.
        pending: clients waiting for their subspace.
        placed: clients placed after the clustering.
    """

    clustered_in: int
    sizes: dict[ClusterId, int]
    pending: int
    placed: int


class PACFL(Strategy[PACFLState]):
    """PACFL: one clustering by principal angles between data subspaces.

    Args:
        n_basis: p, the left singular vectors a client sends (per class with
            `per_class`), ≥ 1.
        per_class: one SVD per class the client holds (the authors' code) or
            one of all its data.
        threshold: α, in degrees: clusters at most this far apart merge (> 0).
        measure: "smallest" (the paper's Θ₁) or "basis" (the authors' code).
        linkage: "weighted" (the code's), "average", "complete" or "single".
        fraction: share of the placed online clients sampled per round, at
            least one.
    """

    name = "pacfl"
    state_type = PACFLState
    wants: ClassVar[tuple[Want, ...]] = ("data_subspace",)
    honours_aggregator = True
    folds = True

    def __init__(
        self,
        *,
        n_basis: int = 3,
        per_class: bool = True,
        threshold: float = 7.0,
        measure: Measure = "smallest",
        linkage: Linkage = "weighted",
        fraction: float = 1.0,
    ) -> None:
        if isinstance(n_basis, bool) or not isinstance(n_basis, int) or n_basis < 1:
            raise ValueError(f"n_basis must be an integer >= 1, got {n_basis!r}")
        if not isinstance(per_class, bool):
            raise ValueError(f"per_class must be true or false, got {per_class!r}")
        if not 0 < threshold < 180:
            raise ValueError(f"threshold must be in (0, 180) degrees, got {threshold}")
        if measure not in MEASURES:
            raise ValueError(f"measure must be one of {MEASURES}, got {measure!r}")
        if linkage not in LINKAGES:
            raise ValueError(f"linkage must be one of {LINKAGES}, got {linkage!r}")
        if not 0 < fraction <= 1:
            raise ValueError(f"fraction must be in (0, 1], got {fraction}")
        self.n_basis = n_basis
        self.per_class = per_class
        self.threshold = float(threshold)
        self.measure: Measure = measure
        self.linkage: Linkage = linkage
        self.fraction = fraction

    @property
    def subspace(self) -> SubspaceRequest:
        return SubspaceRequest(n_basis=self.n_basis, per_class=self.per_class)

    # -- hooks ----------------------------------------------------------------

    def init_state(self, models: Sequence[np.ndarray]) -> PACFLState:
        """Cluster 0 holds the initial model until the clustering."""
        self._check_initial_models(models)
        return PACFLState(models={ClusterId(0): models[0]}, assignment={})

    def on_join(self, state: PACFLState, client: ClientInfo) -> PACFLState:
        """A newcomer waits, pending, in the largest cluster until it is
        described."""
        assignment = {**state.assignment, client.id: state.largest_cluster()}
        return state.replace(assignment=assignment, pending=state.pending | {client.id})

    def on_leave(self, state: PACFLState, client: ClientId) -> PACFLState:
        state = super().on_leave(state, client)
        subspaces = {c: u for c, u in state.subspaces.items() if c != client}
        return state.replace(subspaces=subspaces, pending=state.pending - {client})

    def on_describe(
        self,
        state: PACFLState,
        round: int,
        histograms: Mapping[ClientId, np.ndarray],
        rng: np.random.Generator,
    ) -> PACFLState:
        """The first subspaces are clustered; later ones are placed."""
        arrived = {
            c: u
            for c, u in sorted(histograms.items())
            if c in state.assignment and c not in state.subspaces
        }
        if not arrived:
            return state
        if state.clustered_in is None:
            return self.clustering(state, round, arrived)
        for client, basis in arrived.items():
            state = self.place(state, client, basis)
        return state

    def plan_round(
        self,
        state: PACFLState,
        round: int,
        clients: Sequence[ClientInfo],
        rng: np.random.Generator,
    ) -> list[TaskPlan]:
        """A sample of the placed online clients trains its cluster's model
        (before the clustering, a sample of all: FedAvg)."""
        placed = [c for c in clients if not waits(state, c.id)]
        chosen = sample_clients(placed, self.fraction, rng)
        return [self.plan_for(state, c.id) for c in chosen]

    def aggregate(
        self,
        state: PACFLState,
        round: int,
        updates: Sequence[ClientUpdate],
        rng: np.random.Generator,
    ) -> PACFLState:
        """FedAvg in each cluster over its members' accepted updates."""
        counted = [u for u in updates if counts(state, u)]
        return move_clusters(state, counted, aggregator=self.aggregator)

    def fold_weight(self, state: PACFLState, update: ClientUpdate) -> float:
        return float(update.n_samples) if counts(state, update) else 0.0

    def aggregate_sums(
        self,
        state: PACFLState,
        round: int,
        updates: Sequence[ClientUpdate],
        sums: ClusterSums,
        rng: np.random.Generator,
    ) -> PACFLState:
        return state.replace(models=sums.step(state.models))

    def diagnostics(self, state: PACFLState) -> PACFLDiagnostics | None:
        if state.clustered_in is None:
            return None
        return PACFLDiagnostics(
            clustered_in=state.clustered_in,
            sizes=dict(sorted(member_counts(state).items())),
            pending=len(state.pending),
            placed=state.placed,
        )

    # -- the steps ------------------------------------------------------------

    def clustering(
        self, state: PACFLState, round: int, arrived: Mapping[ClientId, np.ndarray]
    ) -> PACFLState:
        """Cluster the first described clients; each cluster starts from the
        one model (the initial model, unless every client's describe failed
        in an earlier round and it trained by FedAvg since); the others stay
        pending in the largest."""
        clients = sorted(arrived)
        matrix = proximity([arrived[c] for c in clients], self.measure)
        labels = cluster(matrix, self.threshold, self.linkage)
        assignment = {
            c: ClusterId(int(k)) for c, k in zip(clients, labels, strict=True)
        }
        start = state.models[min(state.models)]
        models = {ClusterId(int(k)): start for k in sorted(set(labels))}
        state = state.replace(models=models, assignment=assignment)
        waiting = state.pending - set(clients)
        fallback = state.largest_cluster()
        return state.replace(
            assignment={**assignment, **{c: fallback for c in sorted(waiting)}},
            subspaces=dict(arrived),
            pending=waiting,
            start=start,
            clustered_in=round,
        )

    def place(
        self, state: PACFLState, client: ClientId, basis: np.ndarray
    ) -> PACFLState:
        """A newcomer joins the nearest cluster within α, or a new one."""
        members: dict[ClusterId, list[ClientId]] = {}
        for c, k in sorted(state.assignment.items()):
            if c in state.subspaces and c not in state.pending:
                members.setdefault(k, []).append(c)
        nearest: ClusterId | None = None
        if members:
            ids = sorted(members)
            angles = angles_to(
                basis,
                [state.subspaces[c] for k in ids for c in members[k]],
                self.measure,
            )
            distances, start = [], 0
            for k in ids:
                stop = start + len(members[k])
                distances.append(cluster_distance(angles[start:stop], self.linkage))
                start = stop
            best = int(np.argmin(distances))
            if distances[best] <= self.threshold:
                nearest = ids[best]
        models = dict(state.models)
        if nearest is None:
            nearest = ClusterId(max(models) + 1)
            models[nearest] = self._start(state)
        return state.replace(
            models=models,
            assignment={**state.assignment, client: nearest},
            subspaces={**state.subspaces, client: basis},
            pending=state.pending - {client},
            placed=state.placed + 1,
        )

    def _start(self, state: PACFLState) -> np.ndarray:
        if state.start is not None:
            return state.start
        return state.models[min(state.models)]


def counts(state: PACFLState, update: ClientUpdate) -> bool:
    """Whether an update moves its cluster: accepted, of at least one sample,
    from a placed client still in the cluster it trained."""
    return (
        update.ok
        and update.delta is not None
        and update.n_samples > 0
        and not waits(state, update.client)
        and state.assignment.get(update.client) == update.cluster
    )


def waits(state: PACFLState, client: ClientId) -> bool:
    """Whether a client sits out training: pending after the clustering."""
    return state.clustered_in is not None and client in state.pending


def member_counts(state: PACFLState) -> dict[ClusterId, int]:
    """Placed members per cluster, empty clusters included."""
    sizes = dict.fromkeys(state.models, 0)
    for client, k in state.assignment.items():
        if client not in state.pending:
            sizes[k] += 1
    return sizes
