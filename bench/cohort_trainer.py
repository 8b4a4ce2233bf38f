"""A prototype of cohort training, measured by bench/cohort.py (not in the
package: on a 2-core CPU it is slower than training clients one at a time).

Cohort training: the clients a host trains in one round, as one computation.

Clients whose models share an architecture and whose tasks share a training
configuration are trained together: their parameters are the rows of one
[clients, weights] tensor, and every SGD step runs one forward and backward
pass over the whole cohort (`torch.func.vmap` over `functional_call`, one
autograd graph), then one optimizer update of every row. Each client keeps
its own data, shuffling stream, number of steps (a client with fewer batches
drops out of the steps after its last one), FedProx anchor and momentum.

The numbers of a client do not depend on who else is in its cohort: a
batched step computes each row with the same kernels whatever the rows
beside it, the optimizer is written with exactly rounded element-wise
operations (no fused multiply-add, whose rounding would depend on where a
row falls in the vector lanes), and a step only batches clients whose
mini-batches have the same size. So cohort training gives the same results
whatever the runtime, the packing of clients into hosts or the cohort size;
they differ from training one client at a time (`LocalTrainer.train`) only in
the last bits of the floating-point results. A cohort of one client takes
this same path.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, vmap
from torch.nn import functional as F

from clusterfed.actors.trainer import LocalTrainer, TrainResult
from clusterfed.protocol import TrainConfig
from clusterfed.seeding import derive_seed


@dataclass(frozen=True)
class CohortTask:
    """One client's training of one round: its data, start weights, settings."""

    trainer: LocalTrainer
    weights: np.ndarray
    config: TrainConfig
    round: int


def cohort_key(task: CohortTask) -> tuple[Any, ...]:
    """Tasks with equal keys can train as one cohort: the same model
    architecture (the host's scratch model object) and the same settings."""
    return (id(task.trainer.model), task.config.model_dump_json())


class _Layout:
    """Where each parameter of the model lives in a flat weight vector (the
    order of `get_flat`)."""

    def __init__(self, model: nn.Module) -> None:
        self.template = copy.deepcopy(model).to("meta")
        self.slots: list[tuple[str, int, int, torch.Size]] = []
        offset = 0
        for name, param in model.named_parameters():
            self.slots.append((name, offset, offset + param.numel(), param.shape))
            offset += param.numel()
        self.buffers = dict(model.named_buffers())
        self.size = offset

    def views(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """Each parameter of every row of [rows, weights] `flat`, as views."""
        rows = flat.shape[0]
        return {
            name: flat[:, a:b].view(rows, *shape) for name, a, b, shape in self.slots
        }

    def leaves(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """`views` as leaves of a new autograd graph (one gradient each: a
        gradient through a slice of one flat leaf would write the whole flat
        vector once per parameter)."""
        return {
            name: view.detach().requires_grad_(True)
            for name, view in self.views(flat.detach()).items()
        }

    def flat_grad(self, leaves: dict[str, torch.Tensor]) -> torch.Tensor:
        grads = []
        for name, *_ in self.slots:
            grad = leaves[name].grad
            assert grad is not None
            grads.append(grad.reshape(grad.shape[0], -1))
        return torch.cat(grads, dim=1)


def train_cohort(tasks: Sequence[CohortTask]) -> list[TrainResult]:
    """Train every task as one cohort; the results in the order of `tasks`.

    All tasks must have the same `cohort_key` (one model, one config).
    """
    if not tasks:
        return []
    config = tasks[0].config
    if any(cohort_key(t) != cohort_key(tasks[0]) for t in tasks):
        raise ValueError("a cohort needs one model architecture and one config")
    layout = _Layout(tasks[0].trainer.model)
    start = torch.from_numpy(np.stack([np.asarray(t.weights) for t in tasks]))
    weights = start.clone()
    anchor = start if config.mu > 0 else None
    momentum: torch.Tensor | None = None  # every client steps in the first step
    schedules = [_batches(t, config) for t in tasks]
    losses = [0.0] * len(tasks)
    seen = [0] * len(tasks)
    step_loss = _step_loss(layout, config.mu)
    size = config.batch_size
    for step in range(max(len(s) for s in schedules)):
        rows = [c for c, schedule in enumerate(schedules) if step < len(schedule)]
        index = torch.tensor(rows)
        everyone = len(rows) == len(tasks)
        # A short last batch is padded to the batch size with samples that
        # weigh nothing: the padding is the client's own, so its numbers do
        # not depend on the cohort.
        picks, weight = zip(
            *(_padded(schedules[c][step], size) for c in rows), strict=True
        )
        x = torch.stack(
            [tasks[c].trainer.x_train[i] for c, i in zip(rows, picks, strict=True)]
        )
        y = torch.stack(
            [tasks[c].trainer.y_train[i] for c, i in zip(rows, picks, strict=True)]
        )
        mask = torch.stack(weight)
        flat = weights if everyone else weights.index_select(0, index)
        params = layout.leaves(flat)
        ref = (
            params
            if anchor is None
            else layout.views(anchor if everyone else anchor.index_select(0, index))
        )
        ce, total = vmap(step_loss)(params, x, y, mask, ref)
        total.sum().backward()
        grad = layout.flat_grad(params)
        for c, value, n in zip(rows, ce.tolist(), mask.sum(1).tolist(), strict=True):
            losses[c] += value * n
            seen[c] += int(n)
        rows_momentum = None
        if momentum is not None:
            rows_momentum = momentum if everyone else momentum.index_select(0, index)
        new, buf = _sgd(flat, grad, rows_momentum, config)
        if everyone:
            weights, momentum = new, buf
        else:
            weights.index_copy_(0, index, new)
            if buf is not None and momentum is not None:
                momentum.index_copy_(0, index, buf)
    deltas = (weights - start).numpy()
    return [
        TrainResult(
            deltas[c].astype(np.float32, copy=True),
            losses[c] / seen[c],
            task.trainer.n_train,
            seen[c],
        )
        for c, task in enumerate(tasks)
    ]


def _batches(task: CohortTask, config: TrainConfig) -> list[torch.Tensor]:
    """The client's mini-batches of the round, from its own shuffling stream
    (the stream of `LocalTrainer.train`: one permutation per epoch)."""
    n = task.trainer.n_train
    generator = torch.Generator().manual_seed(
        derive_seed(task.trainer.seed, task.round)
    )
    batches = []
    for _ in range(config.epochs):
        order = torch.randperm(n, generator=generator)
        batches += [
            order[first : first + config.batch_size]
            for first in range(0, n, config.batch_size)
        ]
    return batches


def _padded(batch: torch.Tensor, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch's indices padded to `size` (repeating its first sample) and the
    weight of each (1 for its own samples, 0 for the padding)."""
    pad = size - len(batch)
    weight = torch.ones(size)
    if pad:
        batch = torch.cat([batch, batch[:1].expand(pad)])
        weight[size - pad :] = 0.0
    return batch, weight


def _step_loss(
    layout: _Layout, mu: float
) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """One client's mini-batch loss, and the loss it descends (with FedProx's
    proximal term μ/2‖w − w_start‖² when μ > 0)."""

    def loss(
        params: dict[str, torch.Tensor],
        x: torch.Tensor,
        y: torch.Tensor,
        weight: torch.Tensor,
        anchor: dict[str, torch.Tensor],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        logits = functional_call(layout.template, (params, layout.buffers), (x,))
        each = F.cross_entropy(logits, y, reduction="none")
        ce = (each * weight).sum() / weight.sum()
        if mu <= 0:
            return ce, ce
        gap = sum(((params[k] - anchor[k]) ** 2).sum() for k in params)
        return ce, ce + (mu / 2) * gap

    return loss


def _sgd(
    weights: torch.Tensor,
    grad: torch.Tensor,
    momentum: torch.Tensor | None,
    config: TrainConfig,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """torch.optim.SGD's update (weight decay, momentum without dampening, a
    buffer that starts as the first gradient), row by row, in exactly rounded
    element-wise operations, in place on `grad` and `momentum`. Returns the
    new weights and momentum rows."""
    step = grad
    if config.weight_decay:
        step.add_(weights * config.weight_decay)
    buf = None
    if config.momentum:
        if momentum is None:
            buf = step.clone()
        else:
            buf = momentum.mul_(config.momentum).add_(step)
        step = buf
    return weights - step * config.lr, buf
