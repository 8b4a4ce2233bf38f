"""One DP-SGD step against a plain step and against drawing its noise.

The steps of the Fashion-MNIST MLP (784-512-128-10, 468,874 weights) at one
batch size, on one torch thread (what a worker process uses), taken in turn
so that the load of this shared machine hits each alike; medians. The images
are random: a step's time does not depend on the pixel values.

    python bench/dp_steps.py                  # batch 16, 300 rounds of steps
    python bench/dp_steps.py --batch 64 --repeats 100
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from clusterfed.actors.privacy import quiet_opacus
from clusterfed.models import build_model

Step = Callable[[], object]
SHAPE = (1, 28, 28)  # Fashion-MNIST
OPACUS_NOISE = "torch.normal per tensor (Opacus)"


def interleaved(steps: dict[str, Step], repeats: int) -> dict[str, float]:
    """Median seconds of each step, the steps taken in turn, after 5 of
    each as a warm-up."""
    for step in steps.values():
        for _ in range(5):
            step()
    walls: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            walls[name].append(time.perf_counter() - start)
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
    }


def _data(batch: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(batch, *SHAPE, generator=gen), torch.randint(
        0, 10, (batch,), generator=gen
    )


def _mlp(seed: int) -> nn.Module:
    return build_model("mlp", SHAPE, 10, seed=seed)


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


def opacus_step(batch: int, mode: str, seed: int = 0) -> Step:
    """One step of Opacus' DP-SGD (σ = 1, C = 1) through `make_private`
    with `grad_sample_mode` = `mode` ("ghost": fast gradient clipping, two
    backward passes; "hooks": per-sample gradients), on a fixed batch."""
    from opacus import PrivacyEngine

    x, y = _data(batch, seed)
    model = _mlp(seed)
    with quiet_opacus():
        engine = PrivacyEngine(accountant="rdp")
        loader = DataLoader(
            TensorDataset(x.repeat(100, 1, 1, 1), y.repeat(100)), batch_size=batch
        )
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        if mode == "ghost":
            module, dp_optimizer, criterion, _ = engine.make_private(
                module=model,
                optimizer=optimizer,
                criterion=nn.CrossEntropyLoss(),
                data_loader=loader,
                noise_multiplier=1.0,
                max_grad_norm=1.0,
                noise_generator=torch.Generator().manual_seed(seed),
                grad_sample_mode="ghost",
            )
        else:
            module, dp_optimizer, _ = engine.make_private(
                module=model,
                optimizer=optimizer,
                data_loader=loader,
                noise_multiplier=1.0,
                max_grad_norm=1.0,
                noise_generator=torch.Generator().manual_seed(seed),
                grad_sample_mode=mode,
            )
            criterion = nn.CrossEntropyLoss()

    def step() -> None:
        with quiet_opacus():
            dp_optimizer.zero_grad(set_to_none=True)
            criterion(module(x), y).backward()
            dp_optimizer.step()

    return step


def step_costs(batch: int, repeats: int, *, hooks: bool = False) -> dict[str, float]:
    steps: dict[str, Step] = {
        "plain SGD": plain_step(batch),
        "Opacus fast gradient clipping (ghost)": opacus_step(batch, "ghost"),
    }
    if hooks:  # 10× the others: it evicts their data from the caches
        steps["Opacus per-sample hooks"] = opacus_step(batch, "hooks")
    steps.update(noise_draws(_mlp(0)))
    return interleaved(steps, repeats)


def report(medians: dict[str, float], batch: int) -> None:
    plain, noise = medians["plain SGD"], medians[OPACUS_NOISE]
    print(f"Fashion-MNIST MLP, batch {batch}, 1 torch thread, medians:")
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
    args = parser.parse_args()
    torch.set_num_threads(1)
    report(step_costs(args.batch, args.repeats, hooks=args.hooks), args.batch)


if __name__ == "__main__":
    main()
