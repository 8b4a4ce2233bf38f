"""Cohort training measured: one round of a scenario's clients trained one at a
time (`LocalTrainer.train`, clusterfed's default) against the same clients as
one vectorized cohort (`clusterfed.actors.cohort.train_cohort`, what
`--cohort N` runs: stacked parameters,
`torch.func.vmap` over `functional_call`, one autograd graph), one torch
thread each, alternating after a warm-up. Also checks that a client's
cohort-trained delta does not depend on who else is in its cohort, and how
far it is from the one-at-a-time delta.

    python bench/cohort.py                                   # quickstart
    python bench/cohort.py dcfl-dynamic dataset.name=fashion_mnist train.epochs=1 dp=off

Cohort training ships (`--cohort N`) but stays off by default: on this CPU it
is slower (see bench/RESULTS.md); it is meant for GPUs (bench/gpu.py).
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np
import torch

from clusterfed.actors import Client
from clusterfed.actors.cohort import CohortTask, train_cohort
from clusterfed.actors.spec import ScratchModels
from clusterfed.scenarios import load_scenario, plan_run, with_overrides


def main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 else "quickstart"
    torch.set_num_threads(1)
    plan = plan_run(with_overrides(load_scenario(name), sys.argv[2:]))
    pool = ScratchModels()
    clients = [Client(spec, pool) for spec in plan.clients]
    config, weights = plan.train_config, plan.initial
    tasks = [CohortTask(c.trainer, weights, config, 1) for c in clients]
    alone_times, cohort_times = [], []
    for _ in range(4):
        start = time.perf_counter()
        alone = [c.trainer.train(weights, config, 1) for c in clients]
        alone_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        together = train_cohort(tasks)
        cohort_times.append(time.perf_counter() - start)
    alone_s, cohort_s = (
        statistics.median(alone_times[1:]),
        statistics.median(cohort_times[1:]),
    )
    print(
        f"{name} {' '.join(sys.argv[2:])}: {len(tasks)} clients,"
        f" {weights.size} weights, batch {config.batch_size}, epochs {config.epochs}"
    )
    print(
        f"one round: one at a time {alone_s:.3f} s, as one cohort {cohort_s:.3f} s"
        " (medians of 3 after a warm-up);"
        f" cohort/one-at-a-time {cohort_s / alone_s:.2f}"
    )
    gap = max(
        float(np.abs(a.delta - b.delta).max())
        for a, b in zip(alone, together, strict=True)
    )
    print(f"largest |delta difference| against one at a time: {gap:.3g}")
    subset = train_cohort([tasks[i] for i in (2, 0)])
    single = train_cohort([tasks[0]])
    same = np.array_equal(subset[1].delta, together[0].delta) and np.array_equal(
        single[0].delta, together[0].delta
    )
    print(f"client 0's delta the same alone, in 2 and in {len(tasks)}: {same}")


if __name__ == "__main__":
    main()
