"""Many clients' SGD steps one at a time against one stacked computation.

A cohort's MLP written by hand: every layer's weights stacked along a
client axis ([clients, in, out]) and applied with `torch.baddbmm`, one
autograd graph and one optimizer for all clients, against the same clients
trained one after another as `nn.Sequential` models (what a clusterfed
worker does). Both with momentum 0.9, batch 16 (`--batch`), random data; each at 1 and
at 2 torch threads. Medians of `--repeats` after a warm-up, alternating.

On a CUDA device (`--device cuda`) the threads are left as they are, and a
third way runs: the stacked step captured once as a CUDA graph
(`torch.cuda.graph`: forward, backward and the optimizer's step) and
replayed for every step, so a step is one launch instead of one per kernel.
It bounds what capturing a cohort's step would save; clusterfed's cohort
does not do it.

    python bench/stacked_step.py                # quickstart's MLP, 64-512-128-10
    python bench/stacked_step.py --inputs 784   # the Fashion-MNIST MLP
    python bench/stacked_step.py --inputs 784 --device cuda --batch 256
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


def _finished(device: torch.device) -> float:
    """The time once every queued kernel of `device` has run."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


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
        ).to(x.device)
        for _ in range(clients)
    ]
    start = _finished(x.device)
    for c, model in enumerate(models):
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        for s in range(steps):
            opt.zero_grad()
            F.cross_entropy(model(x[c, s]), y[c, s]).backward()
            opt.step()
    return _finished(x.device) - start


Stack = tuple[list[torch.Tensor], torch.optim.Optimizer]


def _stack(x: torch.Tensor, clients: int) -> Stack:
    dims = (x.shape[-1], *HIDDEN, CLASSES)
    weights = [
        (torch.randn(clients, n_in, n_out, device=x.device) / n_in**0.5)
        for n_in, n_out in zip(dims, dims[1:], strict=False)
    ]
    biases = [torch.zeros(clients, 1, n_out, device=x.device) for n_out in dims[1:]]
    params = [p.requires_grad_() for p in weights + biases]
    opt = torch.optim.SGD(params, lr=0.05, momentum=0.9, foreach=True)
    return params, opt


def _stacked_step(params: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> None:
    layers = len(params) // 2
    h = x
    for layer, (w, b) in enumerate(zip(params[:layers], params[layers:], strict=True)):
        h = torch.baddbmm(b, h, w)
        if layer < layers - 1:
            h = torch.relu(h)
    # Summed over clients, each client's mean over its batch: every
    # client's gradient is the one it would get alone.
    loss = F.cross_entropy(h.reshape(-1, CLASSES), y.reshape(-1), reduction="sum")
    (loss / y.shape[-1]).backward()


def stacked(x: torch.Tensor, y: torch.Tensor) -> float:
    clients, steps = y.shape[:2]
    params, opt = _stack(x, clients)
    start = _finished(x.device)
    for s in range(steps):
        opt.zero_grad()
        _stacked_step(params, x[:, s], y[:, s])
        opt.step()
    return _finished(x.device) - start


def stacked_graph(x: torch.Tensor, y: torch.Tensor) -> float:
    """`stacked`, its step captured once as a CUDA graph and replayed."""
    clients, steps = y.shape[:2]
    params, opt = _stack(x, clients)
    static_x, static_y = x[:, 0].clone(), y[:, 0].clone()
    # Warm up on a side stream (PyTorch's recipe for whole-step capture):
    # the optimizer's momentum buffers exist before the capture.
    side = torch.cuda.Stream(x.device)
    side.wait_stream(torch.cuda.current_stream(x.device))
    with torch.cuda.stream(side):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            _stacked_step(params, static_x, static_y)
            opt.step()
    torch.cuda.current_stream(x.device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        _stacked_step(params, static_x, static_y)
        opt.step()
    start = _finished(x.device)
    for s in range(steps):
        static_x.copy_(x[:, s])
        static_y.copy_(y[:, s])
        graph.replay()
    return _finished(x.device) - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=64)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    shape = (args.clients, args.steps, args.batch)
    x = torch.randn(*shape, args.inputs, device=device)
    y = torch.randint(0, CLASSES, shape, device=device)
    ways: dict[str, Callable[[torch.Tensor, torch.Tensor], float]] = {
        "one at a time": one_at_a_time,
        "stacked": stacked,
    }
    if device.type == "cuda":
        ways["stacked, graph"] = stacked_graph
    thread_counts = (1, 2) if device.type == "cpu" else (torch.get_num_threads(),)
    times: dict[tuple[str, int], list[float]] = {}
    for threads in thread_counts:
        torch.set_num_threads(threads)
        for way in ways.values():
            way(x, y)  # warm-up
        for _ in range(args.repeats):
            for name, way in ways.items():
                times.setdefault((name, threads), []).append(way(x, y))
    base_key = ("one at a time", thread_counts[0])
    base = statistics.median(times[base_key])
    print(
        f"MLP {args.inputs}-{'-'.join(map(str, HIDDEN))}-{CLASSES} on {device}, "
        f"{args.clients} clients × {args.steps} steps of batch {args.batch}"
    )
    for (name, threads), runs in times.items():
        median = statistics.median(runs)
        print(
            f"{name:<14} {threads} thread{'s' if threads > 1 else ' '}  "
            f"median {median:.3f} s  ({median / base:.2f}× one at a time on"
            f" {base_key[1]} thread{'s' if base_key[1] > 1 else ''})"
        )


if __name__ == "__main__":
    main()
