"""What clusterfed costs over a plain PyTorch FedAvg loop on `quickstart`.

Both sides use the same data split, initial weights, optimizer, shuffling seeds
and rounds; the plain loop has no actors, no messages, no results files. The
two alternate in one process (after a warm-up) and the medians are compared.

    python bench/overhead.py [--repeats 3] [--rounds 30]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
import time

import numpy as np
import torch
from torch.nn import functional as F

import clusterfed
from clusterfed.data import load_dataset
from clusterfed.models import build_model, get_flat, set_flat
from clusterfed.scenarios import load_scenario, plan_run, with_overrides
from clusterfed.seeding import derive_seed


def plain_fedavg(rounds: int) -> tuple[float, list[float]]:
    """FedAvg written directly in PyTorch; returns the final client accuracies."""
    scenario = with_overrides(load_scenario("quickstart"), rounds=rounds)
    plan = plan_run(scenario)
    data = load_dataset(scenario.dataset.name)
    cfg = scenario.train
    model = build_model(
        scenario.model.name, data.input_shape, data.n_classes, **scenario.model.params
    )
    clients = [
        (data.x[c.train], data.y[c.train], data.x[c.test], data.y[c.test], c.seed)
        for c in plan.clients
    ]
    weights = plan.initial.copy()
    accs: list[float] = []
    for rnd in range(rounds):
        total = np.zeros_like(weights, dtype=np.float64)
        n_total = 0
        for x, y, _, _, seed in clients:
            set_flat(model, weights)
            opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum)
            gen = torch.Generator().manual_seed(derive_seed(seed, rnd))
            order = torch.randperm(len(y), generator=gen)
            for first in range(0, len(y), cfg.batch_size):
                batch = order[first : first + cfg.batch_size]
                loss = F.cross_entropy(model(x[batch]), y[batch])
                opt.zero_grad()
                loss.backward()
                opt.step()
            total += len(y) * (get_flat(model) - weights)
            n_total += len(y)
        weights = (weights + total / n_total).astype(np.float32)
        set_flat(model, weights)
        with torch.no_grad():
            accs = [
                (model(xt).argmax(1) == yt).float().mean().item()
                for _, _, xt, yt, _ in clients
            ]
    return float(np.mean(accs)), accs


def clusterfed_fedavg(rounds: int, out: str) -> tuple[float, list[float]]:
    result = clusterfed.run("quickstart", rounds=rounds, out=out, overwrite=True)
    last = result.rows[-1]["clients"]
    return result.summary["final_mean_acc"], [c["acc"] for c in last]


def timed(fn, *args):  # type: ignore[no-untyped-def]
    wall0, cpu0 = time.perf_counter(), time.process_time()
    value = fn(*args)
    wall = time.perf_counter() - wall0
    return wall, (time.process_time() - cpu0) / wall, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        plain_fedavg(1)  # warm-up: torch's first backward and optimizer step are slow
        clusterfed_fedavg(1, tmp)
        plain, ours = [], []
        for _ in range(args.repeats):
            plain.append(timed(plain_fedavg, args.rounds))
            ours.append(timed(clusterfed_fedavg, args.rounds, tmp))
    for label, runs in (("plain PyTorch", plain), ("clusterfed", ours)):
        walls = ", ".join(f"{w:.2f}" for w, _, _ in runs)
        cpu = statistics.median(c for _, c, _ in runs)
        median = statistics.median(w for w, _, _ in runs)
        print(
            f"{label:<14} wall s: {walls}  median {median:.2f}"
            f"  cpu/wall {cpu:.2f}  final mean acc {runs[-1][2][0]:.4f}"
        )
    ratio = statistics.median(w for w, _, _ in ours) / statistics.median(
        w for w, _, _ in plain
    )
    same = np.allclose(plain[-1][2][1], ours[-1][2][1])
    print(f"ratio clusterfed/plain (medians): {ratio:.3f}")
    print(f"same final per-client accuracies: {same}")
    print(
        f"peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB"
    )


if __name__ == "__main__":
    main()
