"""What FedProx's proximal term costs a training step, two ways.

One SGD step (momentum 0.9, batch 16) of the Fashion-MNIST MLP
(784-512-128-10) on one torch thread: plain (FedAvg), with μ/2·‖w − w₀‖²
added to the loss and differentiated by autograd (clusterfed before this
script), and with its gradient μ(w − w₀) added after the backward pass
(what `LocalTrainer` does now, as its DP path did already). Medians of
15 × 50 steps, alternating.

    python bench/fedprox_step.py
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
from torch.nn import functional as F

from clusterfed.models import build_model

MU = 0.01


def main() -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = build_model("mlp", (1, 28, 28), 10, hidden=[512, 128])
    params = list(model.parameters())
    start = [p.detach().clone() for p in params]
    optimizer = torch.optim.SGD(params, lr=0.05, momentum=0.9)
    x, y = torch.rand(16, 1, 28, 28), torch.randint(0, 10, (16,))

    def plain() -> None:
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    def in_the_loss() -> None:
        loss = F.cross_entropy(model(x), y)
        distance = sum(((p - s) ** 2).sum() for p, s in zip(params, start, strict=True))
        loss = loss + MU / 2 * distance
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    def as_a_gradient() -> None:
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        with torch.no_grad():
            for p, s in zip(params, start, strict=True):
                p.grad.add_(p - s, alpha=MU)  # type: ignore[union-attr]
        optimizer.step()

    steps: dict[str, Callable[[], None]] = {
        "plain SGD (FedAvg)": plain,
        "FedProx, term in the loss": in_the_loss,
        "FedProx, term as a gradient": as_a_gradient,
    }
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(15):
        for name, step in steps.items():
            begin = time.perf_counter()
            for _ in range(50):
                step()
            times[name].append((time.perf_counter() - begin) / 50 * 1e3)
    base = statistics.median(times["plain SGD (FedAvg)"])
    for name, found in times.items():
        median = statistics.median(found)
        print(f"{name:<28} {median:6.3f} ms a step  ({median / base:.2f}× plain)")


if __name__ == "__main__":
    main()
