"""One DP-SGD step against a plain step and against drawing its noise.

The steps of a Fashion-MNIST model (the MLP 784-512-128-10, 468,874 weights,
or the CNN) at one batch size, on one torch thread (what a worker process
uses), taken in turn so that the load of this shared machine hits each
alike; medians. The images are random: a step's time does not depend on the
pixel values. Then the two routes to a convolution's per-sample norms
(`bookkeeping.ghost_norm_is_cheaper` picks one by counting products).

    python bench/dp_steps.py                  # MLP, batch 16, 300 rounds of steps
    python bench/dp_steps.py --model cnn --repeats 50
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch
from opacus import PrivacyEngine
from opacus.optimizers import DPOptimizer
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from clusterfed.actors.bookkeeping import (
    BookKeeping,
    _sequence,
    add_noise,
    ghost_norm_is_cheaper,
)
from clusterfed.actors.privacy import quiet_opacus
from clusterfed.models import build_model

Step = Callable[[], object]
Loss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
SHAPE = (1, 28, 28)  # Fashion-MNIST
OPACUS_NOISE = "torch.normal per tensor (Opacus)"


CLOCK = time.thread_time  # --clock: "cpu" (this thread's CPU time) or "wall"


def interleaved(steps: dict[str, Step], repeats: int) -> dict[str, float]:
    """Median seconds of each step, the steps taken in turn, after 5 of
    each as a warm-up, on `CLOCK`: by default the thread's CPU time, which
    leaves out the time slices other processes take on this shared machine
    (with one torch thread every step runs on the calling thread)."""
    for step in steps.values():
        for _ in range(5):
            step()
    walls: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            start = CLOCK()
            step()
            walls[name].append(CLOCK() - start)
    return {name: statistics.median(w) for name, w in walls.items()}


def noise_draws(model: nn.Module, seed: int = 0) -> dict[str, Step]:
    """Ways to draw N(0, 1) for every weight of `model` from one seeded CPU
    stream. The first is Opacus' `_generate_noise` (one `torch.normal` per
    parameter tensor); the flat draws give other numbers from the same seed
    (CPU `normal_` fills blocks of 16 by Box-Muller, so a draw split by
    tensors is not the flat draw cut up)."""
    params = [p.detach() for p in model.parameters()]
    n = sum(p.numel() for p in params)
    gen = torch.Generator().manual_seed(seed)
    flat = torch.empty(n)
    rng = np.random.default_rng(seed)
    flat_np = np.empty(n, dtype=np.float32)
    kept = [torch.empty_like(p) for p in params]
    return {
        OPACUS_NOISE: lambda: [
            torch.normal(0, 1.0, size=p.shape, generator=gen, dtype=p.dtype)
            for p in params
        ],
        "normal_ per tensor, kept buffers": lambda: [
            k.normal_(0, 1.0, generator=gen) for k in kept
        ],
        "randn over the flat vector": lambda: torch.randn(n, generator=gen),
        "normal_ into a kept flat buffer": lambda: flat.normal_(0, 1.0, generator=gen),
        # numpy's ziggurat, for comparison: another stream, on CPU only.
        "numpy PCG64 standard_normal, float32": lambda: rng.standard_normal(
            dtype=np.float32, out=flat_np
        ),
    }


def _data(batch: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(batch, *SHAPE, generator=gen), torch.randint(
        0, 10, (batch,), generator=gen
    )


MODEL = "mlp"  # the model the steps train (--model)


def _mlp(seed: int) -> nn.Module:
    return build_model(MODEL, SHAPE, 10, seed=seed)


def plain_step(batch: int, seed: int = 0) -> Step:
    """SGD with momentum, as `LocalTrainer.train` steps without DP."""
    x, y = _data(batch, seed)
    model = _mlp(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        torch.autograd.backward(F.cross_entropy(model(x), y))
        optimizer.step()

    return step


def make_private(
    engine: PrivacyEngine,
    mode: str,
    *,
    module: nn.Module,
    optimizer: torch.optim.Optimizer,
    data_loader: DataLoader,
    noise_multiplier: float,
    max_grad_norm: float,
    noise_generator: torch.Generator,
) -> tuple[nn.Module, DPOptimizer, Loss, DataLoader]:
    """Opacus' `make_private` with Poisson sampling and `grad_sample_mode` =
    `mode` ("ghost": fast gradient clipping, two backward passes; "hooks":
    per-sample gradients), one shape of result for either mode: the private
    module, optimizer, the loss to backpropagate (the ghost mode's two-pass
    loss, or cross-entropy) and the Poisson loader."""
    made = engine.make_private(
        module=module,
        optimizer=optimizer,
        criterion=nn.CrossEntropyLoss(),
        data_loader=data_loader,
        noise_multiplier=noise_multiplier,
        max_grad_norm=max_grad_norm,
        poisson_sampling=True,
        noise_generator=noise_generator,
        grad_sample_mode=mode,
    )
    if mode == "ghost":
        private, dp_optimizer, criterion, loader = made
    else:
        private, dp_optimizer, loader = made
        criterion = nn.CrossEntropyLoss()
    return private, dp_optimizer, criterion, loader


def opacus_step(batch: int, mode: str, seed: int = 0) -> Step:
    """One step of Opacus' DP-SGD (σ = 1, C = 1) through `make_private`
    with `grad_sample_mode` = `mode`, on a fixed batch."""
    x, y = _data(batch, seed)
    model = _mlp(seed)
    with quiet_opacus():
        loader = DataLoader(
            TensorDataset(x.repeat(100, 1, 1, 1), y.repeat(100)), batch_size=batch
        )
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        module, dp_optimizer, criterion, _ = make_private(
            PrivacyEngine(accountant="rdp"),
            mode,
            module=model,
            optimizer=optimizer,
            data_loader=loader,
            noise_multiplier=1.0,
            max_grad_norm=1.0,
            noise_generator=torch.Generator().manual_seed(seed),
        )

    def step() -> None:
        with quiet_opacus():
            dp_optimizer.zero_grad(set_to_none=True)
            criterion(module(x), y).backward()
            dp_optimizer.step()

    return step


def bookkeeping_step(batch: int, seed: int = 0) -> Step:
    """One step of clusterfed's DP-SGD (σ = 1, C = 1): book-keeping
    clipping in one backward pass, Opacus' noise, as `LocalTrainer` steps."""
    x, y = _data(batch, seed)
    model = _mlp(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    keeper = BookKeeping(model, 1.0)
    scratch = [torch.empty_like(p) for p in keeper.params]
    gen = torch.Generator().manual_seed(seed)

    def step() -> None:
        _, sums = keeper.clipped_sum(x, y)
        grads = add_noise(
            sums, std=1.0, expected_batch_size=batch, generator=gen, scratch=scratch
        )
        for param, grad in zip(keeper.params, grads, strict=True):
            param.grad = grad
        optimizer.step()

    return step


def _conv_route(
    conv: nn.Conv2d, a: torch.Tensor, g: torch.Tensor, c: torch.Tensor, ghost: bool
) -> Step:
    assert conv.bias is not None
    buffers = {conv.weight: torch.empty_like(conv.weight)}
    buffers[conv.bias] = torch.empty_like(conv.bias)

    def step() -> None:
        _, summed = _sequence(conv.weight, conv.bias, a, g, ghost=ghost)
        summed(c, buffers)

    return step


def conv_routes(batch: int, repeats: int) -> None:
    """Per-sample norms and clipped sum of each convolution of the
    Fashion-MNIST CNN, by the ghost norm and by the materialized gradient."""
    model = build_model("cnn", SHAPE, 10, seed=0)
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    x = torch.randn(batch, *SHAPE)
    c = torch.rand(batch)
    print(f"Fashion-MNIST CNN convolutions, batch {batch}, medians:")
    for conv in convs:
        with torch.no_grad():
            out = conv(x)
        a = F.unfold(x, conv.kernel_size).transpose(1, 2)  # (N, T, d)
        g = torch.randn_like(out).reshape(batch, out.shape[1], -1).transpose(1, 2)
        t, d, p = a.shape[1], a.shape[2], g.shape[2]

        times = interleaved(
            {
                route: _conv_route(conv, a, g, c, route == "ghost")
                for route in ("ghost", "materialized")
            },
            repeats,
        )
        pick = "ghost" if ghost_norm_is_cheaper(t, d, p) else "materialized"
        print(
            f"  conv {conv.in_channels}→{conv.out_channels} (T={t}, d={d}, p={p}):"
            f" ghost norm {times['ghost'] * 1e3:.3f} ms,"
            f" materialized {times['materialized'] * 1e3:.3f} ms; picked: {pick}"
        )
        x = F.relu(out)


def step_costs(batch: int, repeats: int, *, hooks: bool = False) -> dict[str, float]:
    steps: dict[str, Step] = {
        "plain SGD": plain_step(batch),
        "book-keeping (clusterfed)": bookkeeping_step(batch),
        "Opacus fast gradient clipping (ghost)": opacus_step(batch, "ghost"),
    }
    if hooks:  # 10× the others: it evicts their data from the caches
        steps["Opacus per-sample hooks"] = opacus_step(batch, "hooks")
    steps.update(noise_draws(_mlp(0)))
    return interleaved(steps, repeats)


def report(medians: dict[str, float], batch: int) -> None:
    plain, noise = medians["plain SGD"], medians[OPACUS_NOISE]
    clock = "CPU" if CLOCK is time.thread_time else "wall"
    print(f"Fashion-MNIST {MODEL}, batch {batch}, 1 torch thread, {clock} medians:")
    for name, seconds in medians.items():
        print(
            f"  {name:<40} {seconds * 1e3:8.3f} ms"
            f"  {seconds / plain:5.2f}× plain  {seconds / (plain + noise):5.2f}×"
            " (plain + noise draw)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=300)
    parser.add_argument("--hooks", action="store_true", help="Opacus' hooks too")
    parser.add_argument("--model", choices=("mlp", "cnn"), default="mlp")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    args = parser.parse_args()
    global MODEL, CLOCK
    MODEL = args.model
    CLOCK = time.thread_time if args.clock == "cpu" else time.perf_counter
    torch.set_num_threads(1)
    report(step_costs(args.batch, args.repeats, hooks=args.hooks), args.batch)
    conv_routes(args.batch, max(10, args.repeats // 10))


if __name__ == "__main__":
    main()
