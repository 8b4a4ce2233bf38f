"""Cohort training: a host's train tasks of one round as one computation.

Tasks whose clients share a model (the host's scratch model of one
architecture on one device) and a training configuration train together:
their parameters are the rows of one [clients, weights] tensor, and every
SGD step runs one forward and backward pass over the whole cohort
(`torch.func.vmap` over `functional_call`, one autograd graph), then one
optimizer update of every row. Each client keeps its own data, shuffling
stream (the stream of `LocalTrainer.train`), number of steps (a client with
fewer batches drops out of the steps after its last one), proximal pulls
(FedProx's toward its start, FedSoft's toward each center, each with its own
coefficient) and momentum.

The numbers of a client do not depend on who else is in its cohort: a
batched step computes each row with the same kernels whatever the rows
beside it, the optimizer and the pulls are written with exactly rounded
element-wise operations (no fused multiply-add, whose rounding could depend
on where a row falls in the vector lanes), and a short last batch is padded
to the batch size with the client's own samples at weight 0, so every step
batches equal shapes. On CPU this is tested: a client's delta is the same
bits alone, in two and in twenty (tests/test_cohort.py), so the packing of
clients into hosts, the worker count and the runtime change nothing. The
results differ from one-at-a-time training (`LocalTrainer.train`) in the
last bits of the floating-point results only. On a GPU the batched kernels
may pick other algorithms for other batch counts; docs/runtimes.md says what
is and is not bit-identical there.

Private (DP) tasks train as a private cohort (`cohort_dp.py`); FedEM's
mixture tasks do not come here: they train alone (see `host.py`).
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

from clusterfed.protocol import TrainConfig
from clusterfed.seeding import derive_seed

from .trainer import Anchor, LocalTrainer, TrainResult


@dataclass(frozen=True)
class CohortTask:
    """One client's training of one round: its trainer, start weights,
    settings and proximal anchors (beside FedProx's, which `config.mu` sets)."""

    trainer: LocalTrainer
    weights: np.ndarray
    config: TrainConfig
    round: int
    anchors: tuple[Anchor, ...] = ()


def cohort_key(task: CohortTask) -> tuple[Any, ...]:
    """Tasks with equal keys can train as one cohort: the same model object
    (one architecture on one device: the host's scratch model) and the same
    settings."""
    return (id(task.trainer.model), task.config.model_dump_json())


class Layout:
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

    @property
    def names(self) -> list[str]:
        return [name for name, *_ in self.slots]

    def views(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """Each parameter of every row of [rows, weights] `flat`, as views."""
        rows = flat.shape[0]
        return {
            name: flat[:, a:b].view(rows, *shape) for name, a, b, shape in self.slots
        }

    def leaves(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """Each parameter of every row of [rows, weights] `flat`, as leaves
        of a new autograd graph (one gradient each: a gradient through a
        slice of one flat leaf would write the whole vector per parameter)."""
        return {
            name: view.detach().requires_grad_(True)
            for name, view in self.views(flat.detach()).items()
        }

    def flat_grad(self, leaves: dict[str, torch.Tensor]) -> torch.Tensor:
        grads = []
        for name, *_ in self.slots:
            grad = leaves[name].grad
            if grad is None:  # every parameter takes part in the forward pass
                raise RuntimeError(f"no gradient on parameter {name}")
            grads.append(grad.reshape(grad.shape[0], -1))
        return torch.cat(grads, dim=1)


def train_cohort(tasks: Sequence[CohortTask]) -> list[TrainResult]:
    """Train every task as one cohort; the results in the order of `tasks`.

    Raises:
        ValueError: tasks of different `cohort_key`s, private (DP) tasks
            beside others, or a proximal coefficient that is not finite and
            >= 0.
    """
    if not tasks:
        return []
    config = tasks[0].config
    if any(cohort_key(t) != cohort_key(tasks[0]) for t in tasks):
        raise ValueError("a cohort needs one model architecture and one config")
    private = [t.trainer.privacy is not None for t in tasks]
    if any(private):
        if not all(private):
            raise ValueError("a cohort is private (DP) for every task or none")
        from .cohort_dp import train_private_cohort

        return train_private_cohort(tasks)
    stack = StackedWeights(tasks)
    device, layout, total_dtype = stack.device, stack.layout, stack.total_dtype
    schedules = [_batches(t, config) for t in tasks]
    totals = torch.zeros(len(tasks), dtype=total_dtype, device=device)
    seen = [0] * len(tasks)
    step_loss = _step_loss(layout)
    for step in range(max(len(s) for s in schedules)):
        rows = [c for c, schedule in enumerate(schedules) if step < len(schedule)]
        index, flat = stack.select(rows)
        picks = [_padded(schedules[c][step], config.batch_size) for c in rows]
        batches = [
            tasks[c].trainer.batch(i) for c, (i, _) in zip(rows, picks, strict=True)
        ]
        x = torch.stack([b[0] for b in batches])
        y = torch.stack([b[1] for b in batches])
        mask = torch.stack([w for _, w in picks]).to(device)
        params = layout.leaves(flat)
        ce = vmap(step_loss)(params, x, y, mask)
        torch.autograd.backward(ce.sum())
        grad = layout.flat_grad(params)
        counts = [len(schedules[c][step]) for c in rows]
        for c, n in zip(rows, counts, strict=True):
            seen[c] += n
        sizes = torch.tensor(counts, dtype=total_dtype, device=device)
        totals.index_add_(0, index, ce.detach().to(total_dtype) * sizes)
        stack.step(index, flat, grad)
    deltas = stack.deltas()
    losses = totals.cpu().tolist()
    return [
        TrainResult(
            deltas[c].astype(np.float32, copy=True),
            losses[c] / seen[c],
            task.trainer.n_train,
            seen[c],
        )
        for c, task in enumerate(tasks)
    ]


class StackedWeights:
    """A cohort's weights as the rows of one [clients, weights] tensor on the
    device, with each row's proximal pulls and momentum: what the plain
    (`train_cohort`) and the private (`cohort_dp`) cohort share. A step
    updates the rows of the clients that train in it; the others keep theirs.

    Attributes:
        layout: where each parameter lives in a row.
        start: the rows as received.
        weights: the rows as trained so far.
        total_dtype: the dtype of loss sums: float64 as `LocalTrainer` sums
            them (MPS has no float64).
    """

    def __init__(self, tasks: Sequence[CohortTask]) -> None:
        self.config = tasks[0].config
        self.device = tasks[0].trainer.device
        self.layout = Layout(tasks[0].trainer.model)
        start = torch.from_numpy(np.stack([np.asarray(t.weights) for t in tasks]))
        self.start = start.to(self.device)
        self.weights = self.start.clone()
        self.pulls = proximal_pulls(tasks, self.start, self.config.mu)
        # Every client steps in the first step, which starts the momentum.
        self.momentum: torch.Tensor | None = None
        mps = self.device.type == "mps"
        self.total_dtype = torch.float32 if mps else torch.float64

    def select(self, rows: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """The index of `rows` on the device and their weights (the weights
        themselves, not a copy, when every row is in `rows`)."""
        index = torch.tensor(rows, device=self.device)
        if len(rows) == len(self.weights):
            return index, self.weights
        return index, self.weights.index_select(0, index)

    def step(self, index: torch.Tensor, flat: torch.Tensor, grad: torch.Tensor) -> None:
        """One SGD step (`sgd_rows`) of the rows `index`, whose weights
        `select` gave as `flat`, with gradients `grad` plus the proximal
        pulls."""
        everyone = len(index) == len(self.weights)
        for anchor, coefficient in self.pulls:
            a = anchor if everyone else anchor.index_select(0, index)
            k = coefficient if everyone else coefficient.index_select(0, index)
            # grad + k·(w − a), each operation rounded on its own.
            grad = grad + k[:, None] * (flat - a)
        momentum = self.momentum
        if momentum is not None and not everyone:
            momentum = momentum.index_select(0, index)
        new, buf = sgd_rows(flat, grad, momentum, self.config)
        if everyone:
            self.weights, self.momentum = new, buf
        else:
            self.weights.index_copy_(0, index, new)
            if buf is not None and self.momentum is not None:
                self.momentum.index_copy_(0, index, buf)

    def deltas(self) -> np.ndarray:
        """Each row's trained weights minus its start, on the host."""
        return (self.weights - self.start).cpu().numpy()


def proximal_pulls(
    tasks: Sequence[CohortTask], start: torch.Tensor, mu: float
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The proximal pulls as (anchors [rows, weights], coefficients [rows]),
    in `LocalTrainer`'s order: FedProx's toward the start first, then each
    task's anchors; a task with fewer anchors pulls with coefficient 0."""
    rows, device = len(tasks), start.device
    pulls = []
    if mu > 0:
        pulls.append((start, torch.full((rows,), mu, device=device)))
    for k in range(max(len(t.anchors) for t in tasks)):
        anchors = start.clone()
        coefficients = torch.zeros(rows, device=device)
        for row, task in enumerate(tasks):
            if k >= len(task.anchors):
                continue
            flat, coefficient = task.anchors[k]
            if not (coefficient >= 0 and np.isfinite(coefficient)):
                raise ValueError(
                    f"a proximal coefficient must be finite and >= 0, got {coefficient}"
                )
            if flat.shape != (start.shape[1],):
                raise ValueError(
                    f"an anchor of shape {flat.shape}, the model has {start.shape[1]}"
                )
            anchors[row] = torch.from_numpy(np.array(flat, dtype=np.float32))
            coefficients[row] = float(coefficient)
        pulls.append((anchors, coefficients))
    return pulls


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
    layout: Layout,
) -> Callable[..., torch.Tensor]:
    """One client's mean mini-batch cross-entropy (padding weighs 0)."""

    def loss(
        params: dict[str, torch.Tensor],
        x: torch.Tensor,
        y: torch.Tensor,
        weight: torch.Tensor,
    ) -> torch.Tensor:
        logits = functional_call(layout.template, (params, layout.buffers), (x,))
        each = F.cross_entropy(logits, y, reduction="none")
        return (each * weight).sum() / weight.sum()

    return loss


def sgd_rows(
    weights: torch.Tensor,
    grad: torch.Tensor,
    momentum: torch.Tensor | None,
    config: TrainConfig,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """torch.optim.SGD's update (weight decay, momentum without dampening, a
    buffer that starts as the first gradient), row by row, in exactly rounded
    element-wise operations. Returns the new weights and momentum rows."""
    step = grad
    if config.weight_decay:
        step = step + weights * config.weight_decay
    buf = None
    if config.momentum:
        buf = step.clone() if momentum is None else momentum * config.momentum + step
        step = buf
    return weights - step * config.lr, buf
