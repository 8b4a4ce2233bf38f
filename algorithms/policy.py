"""Client-side policies: what runs inside a client actor when a task offers
several models — an identity policy picks the one it trains (IFCA, the
gradient–loss rule), an importance policy weighs them all (FedSoft), a
loss-reporting policy picks one and sends every model's loss back
(FedDrift), a mixture policy trains them all (FedEM)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable

import numpy as np

from clusterfed.types import ModelKey


@dataclass(frozen=True)
class Candidate:
    """One model a client may pick: its cluster, weights and last change."""

    cluster: ModelKey
    weights: np.ndarray
    last_update: np.ndarray | None = None


class ClientProbe(Protocol):
    """What an identity policy may ask of the client's own data."""

    def loss(self, weights: np.ndarray) -> float:
        """Mean loss of `weights` over the client's training samples."""
        ...

    def batch_loss_and_gradient(
        self, weights: np.ndarray, round: int
    ) -> tuple[float, np.ndarray]:
        """Mean loss and its gradient (flat) on one mini-batch of the round."""
        ...


class IdentityPolicy(ABC):
    """A cluster-identity choice that runs inside the client actor.

    The server sends several candidate models and the policy's name; the
    client picks one with its own data and trains it. Subclasses set `name`;
    their keyword-only `__init__` arguments are the policy's parameters.
    """

    name: ClassVar[str]

    @abstractmethod
    def choose(
        self, probe: ClientProbe, candidates: Sequence[Candidate], round: int
    ) -> ModelKey:
        """The candidate (its `cluster`) whose model the client trains."""


@runtime_checkable
class SampleLossProbe(ClientProbe, Protocol):
    """What an importance policy asks of the client's data: a loss per sample."""

    def sample_losses(self, weights: np.ndarray) -> np.ndarray:
        """The loss of `weights` on each training sample, in sample order."""
        ...


class ImportancePolicy(IdentityPolicy):
    """A client policy that weighs every candidate instead of picking one
    (soft clustering: FedSoft's).

    The client trains from the candidate it weighs most (ties: the first),
    with a proximal term c/2·‖w − candidate‖² toward each candidate, c given
    by `proximal`, and returns the weights with its update
    (`UpdateReply.importance`, `ClientUpdate.importance`); the server refuses
    an update of such a task without them."""

    @abstractmethod
    def importance(
        self, probe: SampleLossProbe, candidates: Sequence[Candidate]
    ) -> tuple[float, ...]:
        """One weight per candidate, in candidate order, summing to 1."""

    @abstractmethod
    def proximal(self, importance: Sequence[float]) -> tuple[float, ...]:
        """The proximal coefficient toward each candidate."""

    def choose(
        self, probe: ClientProbe, candidates: Sequence[Candidate], round: int
    ) -> ModelKey:
        """The candidate weighed most (ties: the first)."""
        if not isinstance(probe, SampleLossProbe):
            raise TypeError(f"{self.name} needs a probe with sample_losses")
        weights = self.importance(probe, candidates)
        return candidates[heaviest(weights)].cluster


class LossReportingPolicy(IdentityPolicy):
    """A client policy that scores every candidate by its mean loss on the
    client's training samples, trains the lowest (ties: the first), and
    returns all the scores with its update (`UpdateReply.losses`,
    `ClientUpdate.losses`), even for a single candidate; the server refuses
    an update of such a task without them (FedDrift's drift detection and
    loss distances are computed from them)."""

    def losses(
        self, probe: ClientProbe, candidates: Sequence[Candidate]
    ) -> tuple[float, ...]:
        """The mean training loss of each candidate, in candidate order."""
        return tuple(float(probe.loss(c.weights)) for c in candidates)

    def choose(
        self, probe: ClientProbe, candidates: Sequence[Candidate], round: int
    ) -> ModelKey:
        """The candidate of the lowest loss (ties: the first)."""
        return candidates[lowest(self.losses(probe, candidates))].cluster


def lowest(losses: Sequence[float]) -> int:
    """The index of the smallest loss (ties: the first)."""
    return int(np.argmin(np.asarray(losses, dtype=np.float64)))


class MixturePolicy(IdentityPolicy):
    """A client policy that trains every candidate, each on its own share of
    every sample (a mixture of models: FedEM's).

    The task carries the client's mixture weights (`TrainTask.mixture`); the
    policy gives each sample's weight for each candidate (`responsibilities`,
    the E-step), the client trains every candidate on its weighted loss (the
    M-step) and returns every delta (`UpdateReply.components` beside
    `delta`) with its new mixture weights (`UpdateReply.importance`, the
    responsibilities' mean per candidate). `delta` and `cluster` are the
    candidate of most weight (ties: the first)."""

    @abstractmethod
    def responsibilities(
        self,
        probe: SampleLossProbe,
        candidates: Sequence[Candidate],
        mixture: Sequence[float],
    ) -> np.ndarray:
        """(candidates, samples): each training sample's weight in each
        candidate's loss, in sample order; each column sums to 1."""

    def choose(
        self, probe: ClientProbe, candidates: Sequence[Candidate], round: int
    ) -> ModelKey:
        """The candidate of most weight after one E-step from equal weights."""
        if not isinstance(probe, SampleLossProbe):
            raise TypeError(f"{self.name} needs a probe with sample_losses")
        equal = [1.0 / len(candidates)] * len(candidates)
        shares = mixture_weights(self.responsibilities(probe, candidates, equal))
        return candidates[heaviest(shares)].cluster


def mixture_weights(responsibilities: np.ndarray) -> tuple[float, ...]:
    """The new mixture weights: each candidate's mean responsibility over the
    samples (FedEM's M-step of π), normalised against rounding."""
    shares = responsibilities.mean(axis=1)
    return tuple(float(s) for s in shares / shares.sum())


def heaviest(importance: Sequence[float]) -> int:
    """The index of the largest weight (ties: the first)."""
    return int(np.argmax(np.asarray(importance, dtype=np.float64)))


def reports_importance(identity: str | None) -> bool:
    """Whether the identity rule `identity` names reports one weight per
    model sent: an importance policy, or a mixture policy (its new mixture
    weights)."""
    policy = _policy(identity)
    return policy is not None and issubclass(policy, ImportancePolicy | MixturePolicy)


def reports_losses(identity: str | None) -> bool:
    """Whether the identity rule `identity` names reports every model's loss."""
    policy = _policy(identity)
    return policy is not None and issubclass(policy, LossReportingPolicy)


def is_mixture(identity: str | None) -> bool:
    """Whether the identity rule `identity` names is a mixture policy: it
    trains every model sent and returns every delta."""
    policy = _policy(identity)
    return policy is not None and issubclass(policy, MixturePolicy)


def _policy(identity: str | None) -> type[IdentityPolicy] | None:
    from .registry import identity_policies  # the registry imports this module

    return identity_policies().get(identity) if identity else None
