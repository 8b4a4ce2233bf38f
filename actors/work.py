"""The work of a client task, as plain functions of the client's trainer.

Nothing here keeps state: the client actor owns its trainer (and with it its
privacy accountant) and hands it in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from clusterfed.algorithms import (
    Candidate,
    IdentityPolicy,
    ImportancePolicy,
    LossReportingPolicy,
    MixturePolicy,
    heaviest,
    lowest,
    make_policy,
)
from clusterfed.algorithms.policy import mixture_weights
from clusterfed.errors import ClusterfedError
from clusterfed.protocol import MAX_LOSS, IdentityRule, TrainConfig, TrainTask
from clusterfed.types import ModelKey, model_key

from .client_dp import clip
from .trainer import Anchor, LocalTrainer, TrainResult


class Diverged(ClusterfedError):
    """Training left numbers no reply can carry: a loss that is not finite or
    above the protocol's bound, or weights that are not finite."""


def train(
    trainer: LocalTrainer,
    candidates: Sequence[Candidate],
    identity: IdentityRule | None,
    config: TrainConfig,
    round: int,
    mixture: Sequence[float] | None = None,
) -> tuple[ModelKey, TrainResult]:
    """Pick a candidate (by the identity policy, if several) and train it.

    An importance policy (FedSoft's) weighs every candidate, even a single
    one: the client trains from the one it weighs most, pulled toward each by
    the policy's proximal coefficients, and the weights go back with the
    result. A loss-reporting policy (FedDrift's) scores every candidate, even
    a single one, trains the lowest, and the scores go back with the result.
    A mixture policy (FedEM's) trains every candidate from the task's
    `mixture` weights (`train_mixture`).

    Raises:
        ClusterfedError: a mixture policy without the task's weights, or
            weights for any other task.
    """
    trainer.check_budget(config)  # refuse before probing, not only before training
    policy = make_policy(identity.name, identity.params) if identity else None
    if isinstance(policy, MixturePolicy):
        if mixture is None:
            raise ClusterfedError(f"the {policy.name} rule needs the task's mixture")
        probe = _Probe(trainer, config.batch_size)
        return train_mixture(trainer, policy, probe, candidates, mixture, config, round)
    if mixture is not None:
        raise ClusterfedError("mixture weights for a task whose rule is no mixture")
    plan = plan_training(trainer, candidates, policy, config, round)
    result = trainer.train(plan.chosen.weights, config, round, plan.anchors)
    return finish_training(plan, result, config)


@dataclass(frozen=True)
class TrainPlan:
    """What a client trains in a task, decided before training: the model it
    starts from, its proximal anchors, its importance weights (FedSoft), its
    candidates' losses (FedDrift) and the samples its probes read. A cohort
    (`cohort.py`) trains many plans."""

    chosen: Candidate
    anchors: tuple[Anchor, ...]
    importance: tuple[float, ...] | None
    probed: int
    losses: tuple[float, ...] | None = None


def plan_training(
    trainer: LocalTrainer,
    candidates: Sequence[Candidate],
    policy: IdentityPolicy | None,
    config: TrainConfig,
    round: int,
) -> TrainPlan:
    """Probe as the identity policy asks and decide what to train (not a
    mixture policy's task: `train_mixture`)."""
    chosen = candidates[0]
    probe = _Probe(trainer, config.batch_size)
    importance: tuple[float, ...] | None = None
    losses: tuple[float, ...] | None = None
    anchors: list[Anchor] = []
    if isinstance(policy, ImportancePolicy):
        importance = policy.importance(probe, candidates)
        chosen = candidates[heaviest(importance)]
        pulls = policy.proximal(importance)
        anchors = [(c.weights, k) for c, k in zip(candidates, pulls, strict=True)]
    elif isinstance(policy, LossReportingPolicy):
        losses = policy.losses(probe, candidates)
        for loss in losses:
            check_loss(loss, "a candidate's probe")
        chosen = candidates[lowest(losses)]
    elif policy is not None and len(candidates) > 1:
        cluster = policy.choose(probe, candidates, round)
        chosen = next(c for c in candidates if c.cluster == cluster)
    return TrainPlan(chosen, tuple(anchors), importance, probe.samples, losses)


def plan_cohort_task(
    trainer: LocalTrainer, task: TrainTask, round: int
) -> TrainPlan | None:
    """`plan_training` for a task a cohort may train: its candidates probed as
    `train` probes them; None for a mixture policy's task (it trains alone)."""
    trainer.check_budget(task.config)
    identity = task.identity
    policy = make_policy(identity.name, identity.params) if identity else None
    if isinstance(policy, MixturePolicy) or task.mixture is not None:
        return None
    return plan_training(trainer, candidates_of(task), policy, task.config, round)


def candidates_of(task: TrainTask) -> list[Candidate]:
    """The models a train task offers, as an identity policy sees them."""
    return [
        Candidate(model_key(m.cluster), m.weights, m.last_update) for m in task.models
    ]


def finish_training(
    plan: TrainPlan, result: TrainResult, config: TrainConfig
) -> tuple[ModelKey, TrainResult]:
    """The trained model's key and result, checked; probing costs simulated
    compute too, so its samples count like training's."""
    _check_result(result, config)
    if config.clip_norm is not None:  # client-level DP (actors/client_dp.py)
        result = replace(result, delta=clip(result.delta, config.clip_norm))
    return plan.chosen.cluster, replace(
        result,
        samples_seen=result.samples_seen + plan.probed,
        importance=plan.importance,
        losses=plan.losses,
    )


def train_mixture(
    trainer: LocalTrainer,
    policy: MixturePolicy,
    probe: _Probe,
    candidates: Sequence[Candidate],
    mixture: Sequence[float],
    config: TrainConfig,
    round: int,
) -> tuple[ModelKey, TrainResult]:
    """FedEM's local update: the E-step (each sample's responsibilities), the
    new mixture weights (their means), then every candidate trained on its
    responsibility-weighted loss, each from the round's same batch order.
    The result's delta is the heaviest candidate's, `components` the others'
    in task order; its loss is Σ_m of the components' weighted losses."""
    q = policy.responsibilities(probe, candidates, mixture)
    shares = mixture_weights(q)
    results = [
        trainer.train(c.weights, config, round, sample_weights=q[m])
        for m, c in enumerate(candidates)
    ]
    for result in results:
        _check_result(result, config)
    first = heaviest(shares)
    others = tuple(r.delta for m, r in enumerate(results) if m != first)
    result = replace(
        results[first],
        loss=check_loss(math.fsum(r.loss for r in results), "training"),
        samples_seen=sum(r.samples_seen for r in results) + probe.samples,
        importance=shares,
        components=others or None,
    )
    return candidates[first].cluster, result


def _check_result(result: TrainResult, config: TrainConfig) -> None:
    check_loss(result.loss, "training")
    if not np.isfinite(result.delta).all():
        raise Diverged(
            f"training diverged: the update holds non-finite values (lr {config.lr})"
        )


def check_loss(loss: float, what: str) -> float:
    """`loss` if a reply may carry it; else `Diverged`, naming the value."""
    if not (math.isfinite(loss) and 0 <= loss <= MAX_LOSS):
        raise Diverged(
            f"{what} diverged: mean loss {loss:.3g} is outside [0, {MAX_LOSS:g}]"
        )
    return loss


def class_histogram(trainer: LocalTrainer, n_classes: int) -> list[int]:
    """Training samples per class, as the client reads its labels (after any
    label permutation): the one description of its data a client may send."""
    labels = trainer.y_train.cpu().numpy()
    return [int(n) for n in np.bincount(labels, minlength=n_classes)]


def data_subspace(trainer: LocalTrainer, n_basis: int, per_class: bool) -> np.ndarray:
    """The first `n_basis` left singular vectors of the client's training data
    (one flattened sample per column, as it trains on them: after any
    rotation, not centred), of each class it holds in its labels' order, the
    blocks side by side, or of all of it: float32, d × k. A class of fewer
    samples gives as many vectors. The description PACFL asks for; it sends
    directions, never a sample."""
    x = trainer.x_train.reshape(trainer.n_train, -1).cpu().numpy().astype(np.float64)
    labels = trainer.y_train.cpu().numpy()
    parts = [x[labels == c] for c in np.unique(labels)] if per_class else [x]
    blocks = [np.linalg.svd(p.T, full_matrices=False)[0][:, :n_basis] for p in parts]
    return np.hstack(blocks).astype(np.float32)


class _Probe:
    """The client's data as an identity policy may see it (a `ClientProbe`)."""

    def __init__(self, trainer: LocalTrainer, batch_size: int) -> None:
        self.trainer = trainer
        self.batch_size = batch_size
        self.samples = 0

    def loss(self, weights: np.ndarray) -> float:
        self.samples += self.trainer.n_train
        return self.trainer.loss(weights)

    def sample_losses(self, weights: np.ndarray) -> np.ndarray:
        self.samples += self.trainer.n_train
        return self.trainer.sample_losses(weights)

    def batch_loss_and_gradient(
        self, weights: np.ndarray, round: int
    ) -> tuple[float, np.ndarray]:
        self.samples += min(self.batch_size, self.trainer.n_train)
        return self.trainer.batch_loss_and_gradient(weights, self.batch_size, round)
