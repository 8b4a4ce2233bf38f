"""What each robust rule costs the server in one round of byzantine-fmnist.

One round's updates: 100 rows of the Fashion-MNIST MLP's 468,874 weights
(float32, as they arrive), the first 20 of them one update repeated (mimic's
copies, the rules' hardest case for distances), folded by every defence of
bench/byzantine.py's table with f = 20, as `robust_mean` folds a cluster.
The rules are numpy on one thread; the figure is the thread's CPU time
(the time slices other processes take on this shared machine left out),
the median of `--repeats`, the rules taken in turn.

    python bench/robust_rules.py                 # 100 clients, 3 repeats
    python bench/robust_rules.py --clients 20 --repeats 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before numpy loads its BLAS
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from byzantine import DEFENCES, SCENARIO  # noqa: E402

from clusterfed.algorithms.robust import AggregatorRule, robust_mean  # noqa: E402
from clusterfed.models import build_model  # noqa: E402
from clusterfed.scenarios import load_scenario  # noqa: E402
from clusterfed.scenarios.loader import with_overrides  # noqa: E402


def rule(settings: tuple[str, ...], clients: int, f: int) -> AggregatorRule:
    """A defence as bench/byzantine.py sets it, through the scenario loader
    (`--set aggregator=...`) on the table's layout at `clients`, f of them
    attackers: parsed and its assumption checked as a run's would be."""
    attackers = list(range(4, clients, 5))[:f]
    sets = [f"clients={clients}", f"faulty.clients={attackers}"]
    sets += [s.format(f=f, m=clients - f) for s in settings]
    return with_overrides(load_scenario(SCENARIO), sets).aggregator


def updates(clients: int, copies: int, seed: int = 0) -> list[np.ndarray]:
    """Update-sized float32 vectors around a common step, `copies` of them
    one repeated update."""
    model = build_model("mlp", (1, 28, 28), 10, seed=0)
    width = sum(p.numel() for p in model.parameters())
    rng = np.random.default_rng(seed)
    step = rng.normal(0.0, 0.01, width)
    rows = [
        (step + rng.normal(0.0, 0.01, width)).astype(np.float32) for _ in range(clients)
    ]
    return [rows[copies]] * copies + rows[copies:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    f = args.clients // 5
    vectors = updates(args.clients, f)
    weights = [1.0] * len(vectors)
    rules = {
        name: rule(settings, args.clients, f) for name, settings in DEFENCES.items()
    }
    print(f"{len(vectors)} updates of {vectors[0].size} weights, f = {f}")
    seconds: dict[str, list[float]] = {name: [] for name in rules}
    failed: dict[str, str] = {}
    for _ in range(args.repeats):
        for name, aggregator in rules.items():
            if name in failed:
                continue
            start = time.thread_time()
            try:
                robust_mean(vectors, weights, aggregator)
            except MemoryError as exc:  # what an older rule did at this size
                failed[name] = f"{type(exc).__name__}: {exc}"
                continue
            seconds[name].append(time.thread_time() - start)
    print("| rule | CPU s (median) |\n|---|---|")
    for name, taken in seconds.items():
        print(f"| {name} | {failed.get(name) or f'{statistics.median(taken):.3f}'} |")


if __name__ == "__main__":
    main()
