"""The server's checks on what clients send, before anything reaches a model.

The codec has already refused what is not a well-formed message (garbage,
truncated bytes, a wrong protocol version, NaN or Inf in a tensor). Whether a reply
answers its request, and who may send it, is the reply books'
(`reply_books.py`). What is left are payloads that are well-formed but wrong
here:

- a payload of the wrong kind, an update for a cluster that was not sent, a
  delta of the wrong shape or dtype, one whose norm is above the bound or
  that would make its model non-finite, a sample count outside [1, the
  `n_train` the client declared when it joined], more samples processed
  (`samples_seen`) than the task could take (`max_samples_seen`), an
  evaluation of a model that was not asked, a histogram of another length
  than the dataset's class count or another total than the client's
  `n_train`, importance weights or losses that do not fit the task's rule.

Each check returns the reason a person reads in `rounds.jsonl`, or None.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from clusterfed.algorithms import (
    ProbePlan,
    TaskPlan,
    is_mixture,
    lowest,
    reports_importance,
    reports_losses,
)
from clusterfed.protocol import (
    ClassHistogram,
    DataSubspace,
    EvaluateReply,
    Message,
    ProbeReply,
    UpdateReply,
)
from clusterfed.types import ClientId, ClusterId, ModelKey, model_key

FLOAT32_MAX = float(np.finfo(np.float32).max)
IMPORTANCE_TOLERANCE = 1e-6
"""How far from 1 a client's importance weights may sum (float rounding)."""

SAMPLES_SEEN_SLACK = 4
"""How many times its n_train × epochs a client may have trained on.

Without DP a client sees exactly n_train samples an epoch. Under DP, Opacus'
Poisson sampling draws each sample into each of an epoch's s = ⌈n/batch⌉
steps with probability 1/s: an epoch sees Binomial(n·s, 1/s) samples, n on
average. Measured with the trainer (400 private rounds each): at most 2.0 ×
n at n = 4, batch 1 and 1.45 × n at n = 20, batch 16. By that binomial, the
chance that an honest client sees more than 4 × n × epochs is at most
1.2e-11 over every n ≤ 5,000, batch size 1 to 64 and 1, 2 or 5 epochs (it is
3.8e-6 for 3 ×, 8e-3 for 2 ×, both at n = 4, batch 1)."""


def max_samples_seen(n_train: int, epochs: int, n_models: int, trained: int = 1) -> int:
    """The most samples an honest client processes for a train task of
    `epochs` epochs that sent `n_models` models and trains `trained` of them
    (all of them for a mixture rule, FedEM's; else one): its training (see
    `SAMPLES_SEEN_SLACK`) and, with several models, the identity rule's
    probes, at most its training set once per model (IFCA's scores each
    model on all of it, GradLoss on one batch)."""
    return n_train * (SAMPLES_SEEN_SLACK * epochs * trained + n_models)


def models_trained(plan: TaskPlan) -> int:
    """How many of the task's models the client trains: all of them under a
    mixture rule (FedEM's), else one."""
    return len(plan.models) if is_mixture(plan.identity) else 1


def check_update(
    payload: Message,
    plan: TaskPlan,
    n_weights: int,
    max_norm: float | None,
    n_train: int | None = None,
    max_ratio: float | None = None,
    epochs: int = 1,
) -> str | None:
    """Why an update may not touch a model, or None.

    `n_train` is what the client declared when it joined: it cannot have
    trained on more samples (nor on none), nor processed more than
    `max_samples_seen` for a task of `epochs` epochs. `max_ratio`: the most
    the delta's norm may be, in multiples of the norm of the model it was
    trained from (at least 1).
    """
    if not isinstance(payload, UpdateReply):
        return f"expected an update_reply, got {payload.kind!r}"
    if payload.cluster not in plan.models:
        return f"update for {_model(payload.cluster)}, which was not sent"
    if payload.delta.shape != (n_weights,):
        return (
            f"delta has shape {payload.delta.shape}, the model has {n_weights} weights"
        )
    if (problem := importance_problem(payload, plan)) is not None:
        return problem
    if (problem := losses_problem(payload, plan)) is not None:
        return problem
    if (problem := components_problem(payload, plan, n_weights)) is not None:
        return problem
    if payload.delta.dtype != np.float32:
        return f"delta dtype {payload.delta.dtype}, expected float32"
    if n_train is not None and not 1 <= payload.n_samples <= n_train:
        return (
            f"n_samples {payload.n_samples} is outside [1, {n_train}],"
            f" the client's n_train at join"
        )
    if n_train is not None:
        trained = models_trained(plan)
        most = max_samples_seen(n_train, epochs, len(plan.models), trained)
        if payload.samples_seen > most:
            return (
                f"samples_seen {payload.samples_seen} is over {most}, the most"
                f" a task of {epochs} epoch(s) and {len(plan.models)} model(s)"
                f" takes at n_train {n_train}"
            )
    for key, delta in deltas_of(payload, plan).items():
        problem = _delta_problem(delta, plan.models[key], key, max_norm, max_ratio)
        if problem is not None:
            return problem
    return None


def _delta_problem(
    delta: np.ndarray,
    base: np.ndarray,
    key: int | str,
    max_norm: float | None,
    max_ratio: float | None,
) -> str | None:
    """Why `delta` may not be added to `base` (model `key`'s), or None."""
    n_weights = delta.size
    if max_norm is not None and (norm := _norm(delta)) > max_norm:
        return f"delta norm {norm:.4g} is above max_update_norm = {max_norm:g}"
    # Cheap bound first (‖δ‖ ≤ √n·max|δᵢ|, and the model's norm counts as at
    # least 1): the exact norms of the delta and the model cost the server
    # more than folding the update does.
    if max_ratio is not None and _peak(delta) * np.sqrt(n_weights) > max_ratio:
        norm, scale = _norm(delta), max(1.0, _norm(base))
        if not norm <= max_ratio * scale:
            return (
                f"delta norm {norm:.4g} is over {max_ratio:g} × the norm of"
                f" the model it was trained from ({scale:.4g});"
                " max_update_ratio bounds it"
            )
    # A float32 model whose norm overflows float32 is as good as Inf: its
    # next forward pass is. Checked on a cheap bound first, as above.
    if (_peak(delta) + _peak(base)) * np.sqrt(n_weights) > FLOAT32_MAX:
        end = np.add(base, delta, dtype=np.float64)
        end_norm = float(np.sqrt(np.square(end).sum()))
        if not end_norm <= FLOAT32_MAX:
            return (
                f"delta of norm {_norm(delta):.4g} would make"
                f" {_model(key)}'s model non-finite"
            )
    return None


def deltas_of(payload: UpdateReply, plan: TaskPlan) -> dict[ModelKey, np.ndarray]:
    """Every model's delta an update carries, by model: `delta` for the one
    it names and, for a mixture task (FedEM's), `components` for the others
    in the task's order. Call after `components_problem` found none."""
    named = model_key(payload.cluster)
    deltas = {named: payload.delta}
    others = [k for k in plan.models if k != named]
    for key, delta in zip(others, payload.components or (), strict=False):
        deltas[key] = delta
    return deltas


def components_problem(
    payload: UpdateReply, plan: TaskPlan, n_weights: int
) -> str | None:
    """Why an update's other deltas (`components`) do not fit its task, or
    None: a mixture task (FedEM's) is answered with one for every model sent
    but `cluster`, of the model's shape and float32; any other with none."""
    wanted = len(plan.models) - 1 if is_mixture(plan.identity) else 0
    got = payload.components or ()
    if len(got) != wanted:
        return f"{len(got)} other deltas (components) for a task that takes {wanted}"
    for delta in got:
        if delta.shape != (n_weights,):
            return (
                f"a component delta has shape {delta.shape}, the model has"
                f" {n_weights} weights"
            )
        if delta.dtype != np.float32:
            return f"a component delta of dtype {delta.dtype}, expected float32"
    return None


def importance_problem(payload: UpdateReply, plan: TaskPlan) -> str | None:
    """Why an update's importance weights do not fit its task, or None.

    A task whose identity rule is an importance policy (FedSoft's) is
    answered with one weight per model sent, summing to 1; any other task
    with none."""
    wanted = reports_importance(plan.identity)
    weights = payload.importance
    if weights is None:
        if wanted:
            return f"no importance weights, which the {plan.identity} rule reports"
        return None
    if not wanted:
        return "importance weights for a task that asked for none"
    if len(weights) != len(plan.models):
        return (
            f"{len(weights)} importance weights for the {len(plan.models)} models sent"
        )
    total = math.fsum(weights)
    if not abs(total - 1) <= IMPORTANCE_TOLERANCE:
        return (
            f"importance weights sum to {total:.9g}, not 1"
            f" (within {IMPORTANCE_TOLERANCE:g})"
        )
    return None


def losses_problem(payload: UpdateReply, plan: TaskPlan) -> str | None:
    """Why an update's reported losses do not fit its task, or None.

    A task whose identity rule reports losses (FedDrift's) is answered with
    one loss per model sent, and the model trained is the one of the lowest
    (ties: the first), as the rule trains; any other task with none. The
    codec has already bounded each loss to [0, MAX_LOSS]."""
    wanted = reports_losses(plan.identity)
    losses = payload.losses
    if losses is None:
        if wanted:
            return f"no losses, which the {plan.identity} rule reports"
        return None
    if not wanted:
        return "losses for a task that asked for none"
    if len(losses) != len(plan.models):
        return f"{len(losses)} losses for the {len(plan.models)} models sent"
    keys = list(plan.models)
    best = keys[lowest(losses)]
    if model_key(payload.cluster) != best:
        return (
            f"update for {_model(payload.cluster)}, but the lowest loss"
            f" reported is {_model(best)}'s"
        )
    return None


def _model(name: int | str) -> str:
    """A model as a reason names it: "cluster 3", or "the global model"."""
    return f"cluster {name}" if isinstance(name, int) else f"the {name} model"


def _norm(vector: np.ndarray) -> float:
    return float(np.sqrt(np.square(vector, dtype=np.float64).sum()))


def _peak(vector: np.ndarray) -> float:
    """max |vᵢ| (0 for an empty vector), without an |v| temporary."""
    if vector.size == 0:
        return 0.0
    return max(float(vector.max()), -float(vector.min()))


def check_histogram(
    payload: Message,
    client: ClientId,
    n_classes: int | None,
    n_train: int | None = None,
) -> str | None:
    """Why a class histogram is refused: `n_classes` is the dataset's class
    count (from the scenario), `n_train` what the client declared at join."""
    if not isinstance(payload, ClassHistogram):
        return f"expected a class_histogram, got {payload.kind!r}"
    if payload.client_id != client:
        return f"histogram of client {payload.client_id}, asked client {client}"
    if n_classes is not None and len(payload.counts) != n_classes:
        return (
            f"class histogram of {len(payload.counts)} classes,"
            f" the dataset has {n_classes}"
        )
    total = sum(payload.counts)
    if total == 0:
        return "class histogram counts no sample"
    if n_train is not None and total != n_train:
        return (
            f"class histogram counts {total} samples, the client's n_train is {n_train}"
        )
    return None


UNIT_TOLERANCE = 1e-3
"""How far from 1 the norm of a data subspace's vector may be (float32 SVD
vectors are unit to about 1e-6)."""


def check_subspace(
    payload: Message, client: ClientId, n_features: int | None, max_vectors: int
) -> str | None:
    """Why a data subspace is refused: `n_features` is the model's input
    size, `max_vectors` the most vectors the task asked for (n_basis for each
    class of the dataset, or n_basis)."""
    if not isinstance(payload, DataSubspace):
        return f"expected a data_subspace, got {payload.kind!r}"
    if payload.client_id != client:
        return f"data subspace of client {payload.client_id}, asked client {client}"
    rows, columns = payload.basis.shape
    if n_features is not None and rows != n_features:
        return f"data subspace of {rows} features, the model's input has {n_features}"
    if columns > max_vectors:
        return (
            f"data subspace of {columns} vectors, the task asked at most {max_vectors}"
        )
    norms = np.sqrt(np.square(payload.basis, dtype=np.float64).sum(axis=0))
    worst = int(np.argmax(np.abs(norms - 1)))
    if abs(norms[worst] - 1) > UNIT_TOLERANCE:
        return f"data subspace vector {worst} has norm {norms[worst]:.4g}, not 1"
    return None


def check_evaluation(payload: Message, cluster: int | str) -> str | None:
    """Why an evaluate reply is refused: it is not one, or scores another
    model than the one asked (`cluster`: its id, or "global")."""
    if not isinstance(payload, EvaluateReply):
        return f"expected an evaluate_reply, got {payload.kind!r}"
    if payload.cluster != cluster:
        return f"evaluation of {_model(payload.cluster)}, asked {_model(cluster)}"
    return None


def check_probe(payload: Message, plan: ProbePlan) -> str | None:
    if not isinstance(payload, ProbeReply):
        return f"expected a probe_reply, got {payload.kind!r}"
    owners = [s.owner for s in payload.scores]
    if sorted(owners) != sorted(plan.models):
        return (
            f"probe scores for models {sorted(owners)},"
            f" the task sent {sorted(plan.models)}"
        )
    return None


def check_models(models: Mapping[ClusterId, np.ndarray]) -> str | None:
    """Why cluster models may not be kept: a weight, or the norm, not finite
    in float32."""
    for cluster, model in models.items():
        norm = float(np.sqrt(np.square(model, dtype=np.float64).sum()))
        if not norm <= FLOAT32_MAX:  # NaN fails too
            return f"cluster {cluster}'s model would not be finite"
    return None
