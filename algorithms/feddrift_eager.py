"""FedDrift-Eager: the clients flagged in a time step share one new cluster,
and clusters never merge.

Jothimurugesan, Hsieh, Wang, Joshi, Gibbons, "Federated Learning under
Distributed Concept Drift", AISTATS 2023 (arXiv:2206.00799), the second of
its two algorithms; the authors' code runs it as `softcluster` + `mmacc_…`
(`SoftClusterState.cluster_mmacc2`).

Everything else is FedDrift's (`feddrift.py`): every client scores every
model at the start of a time step, takes its best, and a client whose best
loss rose by more than δ over its last time step's is flagged. Where
FedDrift gives each flagged client a cluster of its own and merges later,
the eager variant bets that the clients drifting together drifted to one
concept: one new cluster for all of them, whose model is the sample-weighted
mean of their local models of that round (the code starts it from the first
flagged client's best model and lets them all train it); it is not isolated,
and no merge ever runs, so `merge_delta` and `isolation` do nothing here.
"""

from __future__ import annotations

from collections.abc import Mapping

from clusterfed.types import ClientId, ClusterId

from .feddrift import FedDrift, FedDriftState


class FedDriftEager(FedDrift):
    """FedDrift-Eager: one shared new cluster per time step, no merging.

    Takes FedDrift's arguments; `merge_delta` and `isolation` are unused.
    """

    name = "feddrift-eager"
    eager = True

    def merge(
        self,
        state: FedDriftState,
        step: int,
        scores: Mapping[ClientId, Mapping[ClusterId, float]],
    ) -> FedDriftState:
        """No merging: the eager variant's clusters only grow."""
        return state
