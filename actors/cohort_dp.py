"""DP-SGD for a cohort: each client's private training, stacked.

The private counterpart of `cohort.train_cohort`, for clients with local DP
(`LocalTrainer._train_private` trains one of them). Per
client, as Opacus does it there:

- Poisson sampling: each step draws `rand(n) < q` from the client's sampling
  stream, q = 1 / ⌈n / batch size⌉, ⌈n / batch size⌉ steps an epoch, after
  the one draw PyTorch's DataLoader takes from the stream as each epoch's
  iterator starts (its worker base seed): the same batches as Opacus' loader.
- Per-sample clipping: each sample's gradient (`vmap` over the samples of
  `grad`) scaled by min(1, C / (‖g‖ + 1e-6)), ‖g‖ the norm of the per-layer
  norms, summed.
- Gaussian noise: N(0, σ²C²) per parameter, in the model's parameter order,
  drawn on the device from the client's noise stream, as Opacus'
  `_generate_noise` draws it (none when σ = 0); then divided by the expected
  batch size ⌊n·q⌋.
- The accountant: one `step(noise_multiplier=σ, sample_rate=q)` per step on
  the client's own accountant (Opacus' optimizer hook), so the books and the
  ε reported are Opacus'.

What differs from the one-at-a-time path is the rounding: book-keeping
(`bookkeeping.py`) sums the clipped gradients as one product per layer of
its inputs and clipped output gradients, this module sums the per-sample
gradients it computed, sample by sample, in exactly rounded element-wise
operations. With σ = 0 the deltas agree with
Opacus' to float32 rounding (tests/test_cohort_dp.py); with noise they agree
as closely, since the noise is the same draws. A Poisson batch is padded
to the largest of the step's cohort with samples of weight 0, which add
exact zeros, so a client's numbers do not depend on its cohort.

Per-sample gradients are materialized: a step holds clients × largest
Poisson batch × weights floats (20 clients of the Fashion-MNIST MLP, batch
16: about 0.6 GB), so the cohort size bounds the memory.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch.func import functional_call, grad, vmap
from torch.nn import functional as F

from clusterfed.protocol import TrainConfig
from clusterfed.seeding import derive_seed

from .cohort import CohortTask, Layout, StackedWeights
from .privacy import PrivateTraining, poisson_steps
from .trainer import DP_NOISE_KEY, DP_SAMPLING_KEY, TrainResult


def train_private_cohort(tasks: Sequence[CohortTask]) -> list[TrainResult]:
    """Train private tasks (one model, one config) as one cohort; the
    results in the order of `tasks`. Each task's budget must have been
    checked (`LocalTrainer.check_budget`)."""
    config = tasks[0].config
    privacies = [_privacy(t) for t in tasks]
    stack = StackedWeights(tasks)
    device, layout, total_dtype = stack.device, stack.layout, stack.total_dtype
    schedules = [_poisson_batches(t, config) for t in tasks]
    noise = [
        torch.Generator(device).manual_seed(
            derive_seed(t.trainer.seed, t.round, DP_NOISE_KEY)
        )
        for t in tasks
    ]
    # Opacus' sampling rate as its accountant and `scale_grad` read it.
    rates = [poisson_steps(t.trainer.n_train, config.batch_size)[0] for t in tasks]
    expected = [int(t.trainer.n_train * r) for t, r in zip(tasks, rates, strict=True)]
    # Loss sums stay on the device (no sync a step).
    totals = [torch.zeros((), dtype=total_dtype, device=device) for _ in tasks]
    seen = [0] * len(tasks)
    per_sample = _per_sample_grads(layout)
    for step in range(max(len(s) for s in schedules)):
        rows = [c for c, schedule in enumerate(schedules) if step < len(schedule)]
        index, flat = stack.select(rows)
        clipped = _clipped_sums(tasks, rows, schedules, step, flat, layout, per_sample)
        summed, losses = clipped
        for r, c in enumerate(rows):
            size = len(schedules[c][step])
            if size:  # an empty Poisson batch: noise only, no loss
                totals[c] = totals[c] + losses[r].to(total_dtype) * size
                seen[c] += size
        noisy = torch.stack(
            [
                _noisy(summed[r], layout, privacies[c], noise[c]) / expected[c]
                for r, c in enumerate(rows)
            ]
        )
        for c in rows:
            privacies[c].engine.accountant.step(
                noise_multiplier=privacies[c].noise_multiplier, sample_rate=rates[c]
            )
        stack.step(index, flat, noisy)
    deltas = stack.deltas()
    results = []
    for c, task in enumerate(tasks):
        # Every batch empty (a tiny client, bad luck): the received model's
        # training loss, as `LocalTrainer` reports it.
        if seen[c]:
            loss = totals[c].item() / seen[c]
        else:
            loss = task.trainer.loss(task.weights)
        results.append(
            TrainResult(
                deltas[c].astype(np.float32, copy=True),
                loss,
                task.trainer.n_train,
                seen[c],
                privacies[c].spent(),
            )
        )
    return results


def _privacy(task: CohortTask) -> PrivateTraining:
    privacy = task.trainer.privacy
    if privacy is None:
        raise ValueError("a private cohort takes private tasks only")
    return privacy


def _poisson_batches(task: CohortTask, config: TrainConfig) -> list[torch.Tensor]:
    """The client's Poisson batches of the round: those Opacus' DPDataLoader
    draws from the client's sampling stream (see the module docstring)."""
    n = task.trainer.n_train
    generator = torch.Generator().manual_seed(
        derive_seed(task.trainer.seed, task.round, DP_SAMPLING_KEY)
    )
    rate = 1 / math.ceil(n / config.batch_size)
    steps = int(1 / rate)
    batches = []
    for _ in range(config.epochs):
        # DataLoader's iterator draws its workers' base seed first.
        torch.empty((), dtype=torch.int64).random_(generator=generator)
        for _ in range(steps):
            mask = torch.rand(n, generator=generator) < rate
            batches.append(mask.nonzero(as_tuple=False).reshape(-1))
    return batches


def _per_sample_grads(
    layout: Layout,
) -> Callable[..., tuple[dict[str, torch.Tensor], torch.Tensor]]:
    """Per client (vmapped over rows) and per sample: each sample's gradient
    of its own cross-entropy, and that loss."""

    def one(
        params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        logits = functional_call(
            layout.template, (params, layout.buffers), (x.unsqueeze(0),)
        )
        loss = F.cross_entropy(logits, y.unsqueeze(0))
        return loss, loss.detach()

    each = grad(one, has_aux=True)
    return vmap(vmap(each, in_dims=(None, 0, 0)))


def _clipped_sums(
    tasks: Sequence[CohortTask],
    rows: list[int],
    schedules: list[list[torch.Tensor]],
    step: int,
    flat: torch.Tensor,
    layout: Layout,
    per_sample: Callable[..., tuple[dict[str, torch.Tensor], torch.Tensor]],
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Each row's sum of clipped per-sample gradients ([rows, weights]) and
    its mean batch loss, on the device (0 for an empty batch)."""
    device = flat.device
    size = max(1, max(len(schedules[c][step]) for c in rows))
    xs, ys, weights = [], [], []
    for c in rows:
        batch = schedules[c][step]
        take = batch if len(batch) else torch.zeros(1, dtype=torch.long)
        pad = size - len(batch)
        picks = torch.cat([take, take[:1].expand(pad)]) if pad else take
        picks = picks[:size]
        x, y = tasks[c].trainer.batch(picks)
        xs.append(x)
        ys.append(y)
        w = torch.zeros(size)
        w[: len(batch)] = 1.0
        weights.append(w)
    mask = torch.stack(weights).to(device)
    params = {k: v.detach() for k, v in layout.views(flat).items()}
    grads, losses = per_sample(params, torch.stack(xs), torch.stack(ys))
    per_param = [grads[name].reshape(len(rows), size, -1) for name in layout.names]
    norms = torch.stack([g.norm(2, dim=-1) for g in per_param], dim=2).norm(2, dim=2)
    bound = torch.tensor(
        [_privacy(tasks[c]).max_grad_norm for c in rows], device=device
    )[:, None]
    factor = (bound / (norms + 1e-6)).clamp(max=1.0) * mask
    g = torch.cat(per_param, dim=2)
    summed = torch.zeros(len(rows), g.shape[2], device=device)
    for i in range(size):  # sample by sample: padding adds exact zeros
        summed = summed + factor[:, i, None] * g[:, i]
    # Each row's mean over its own samples only, as Opacus takes it: a sum
    # over the padded width would round by the cohort's largest batch.
    means = []
    for r, c in enumerate(rows):
        real = len(schedules[c][step])
        means.append(losses[r, :real].mean() if real else losses.new_zeros(()))
    return summed, means


def _noisy(
    summed: torch.Tensor,
    layout: Layout,
    privacy: PrivateTraining,
    generator: torch.Generator,
) -> torch.Tensor:
    """One client's clipped sum plus Opacus' noise, drawn per parameter in
    the model's order (`_generate_noise`: nothing drawn when σ = 0)."""
    std = privacy.noise_multiplier * privacy.max_grad_norm
    if std == 0:
        return summed
    pieces = []
    for _, a, b, shape in layout.slots:
        noise = torch.normal(
            mean=0, std=std, size=shape, device=summed.device, generator=generator
        )
        pieces.append(summed[a:b] + noise.reshape(-1))
    return torch.cat(pieces)
