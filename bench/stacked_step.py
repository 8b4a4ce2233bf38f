"""Many clients' SGD steps one at a time against one stacked computation.

A cohort's MLP written by hand: every layer's weights stacked along a
client axis ([clients, in, out]) and applied with `torch.baddbmm`, one
autograd graph and one optimizer for all clients, against the same clients
trained one after another as `nn.Sequential` models (what a clusterfed
worker does). Both with momentum 0.9, batch 16, random data; each at 1 and
at 2 torch threads. Medians of `--repeats` after a warm-up, alternating.

    python bench/stacked_step.py                # quickstart's MLP, 64-512-128-10
    python bench/stacked_step.py --inputs 784   # the Fashion-MNIST MLP
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F

HIDDEN = (512, 128)
CLASSES = 10
BATCH = 16


def one_at_a_time(x: torch.Tensor, y: torch.Tensor) -> float:
    clients, steps = y.shape[:2]
    dims = (x.shape[-1], *HIDDEN, CLASSES)
    models = [
        nn.Sequential(
            nn.Linear(dims[0], dims[1]),
            nn.ReLU(),
            nn.Linear(dims[1], dims[2]),
            nn.ReLU(),
            nn.Linear(dims[2], dims[3]),
        )
        for _ in range(clients)
    ]
    start = time.perf_counter()
    for c, model in enumerate(models):
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        for s in range(steps):
            opt.zero_grad()
            F.cross_entropy(model(x[c, s]), y[c, s]).backward()
            opt.step()
    return time.perf_counter() - start


def stacked(x: torch.Tensor, y: torch.Tensor) -> float:
    clients, steps = y.shape[:2]
    dims = (x.shape[-1], *HIDDEN, CLASSES)
    weights = [
        (torch.randn(clients, n_in, n_out) / n_in**0.5).requires_grad_()
        for n_in, n_out in zip(dims, dims[1:], strict=False)
    ]
    biases = [torch.zeros(clients, 1, n_out, requires_grad=True) for n_out in dims[1:]]
    opt = torch.optim.SGD(weights + biases, lr=0.05, momentum=0.9, foreach=True)
    start = time.perf_counter()
    for s in range(steps):
        opt.zero_grad()
        h = x[:, s]
        for layer, (w, b) in enumerate(zip(weights, biases, strict=True)):
            h = torch.baddbmm(b, h, w)
            if layer < len(weights) - 1:
                h = torch.relu(h)
        # Summed over clients, each client's mean over its batch: every
        # client's gradient is the one it would get alone.
        loss = F.cross_entropy(
            h.reshape(-1, CLASSES), y[:, s].reshape(-1), reduction="sum"
        )
        (loss / BATCH).backward()
        opt.step()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=64)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(0)
    x = torch.randn(args.clients, args.steps, BATCH, args.inputs)
    y = torch.randint(0, CLASSES, (args.clients, args.steps, BATCH))
    ways: dict[str, Callable[[torch.Tensor, torch.Tensor], float]] = {
        "one at a time": one_at_a_time,
        "stacked": stacked,
    }
    times: dict[tuple[str, int], list[float]] = {}
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for way in ways.values():
            way(x, y)  # warm-up
        for _ in range(args.repeats):
            for name, way in ways.items():
                times.setdefault((name, threads), []).append(way(x, y))
    base = statistics.median(times[("one at a time", 1)])
    print(
        f"MLP {args.inputs}-{'-'.join(map(str, HIDDEN))}-{CLASSES}, "
        f"{args.clients} clients × {args.steps} steps of batch {BATCH}"
    )
    for (name, threads), runs in times.items():
        median = statistics.median(runs)
        print(
            f"{name:<14} {threads} thread{'s' if threads > 1 else ' '}  "
            f"median {median:.3f} s  ({median / base:.2f}× one at a time on 1 thread)"
        )


if __name__ == "__main__":
    main()
