"""How long DCFL's pairwise update distances take, and how exact float32 keeps them.

The full n × n "complete" distance matrix (Augello et al., Eq. 2) through
`clusterfed.algorithms.distances.pairwise_distances` for n = 100 and n = 1,000
clients of d = 100,000 float32 parameters, each client with its own start
model (the end-point route: E Eᵀ and Δ Eᵀ in float32 products), and for
n = 1,000 clients that start from 5 cluster models as DCFL's do (the
shared-start route); then the per-pair reference `naive_pairwise_distances` on
a small case. `--baseline FILE` times another copy of the module on the same
data, alternating with this one, e.g. the float64 products before issue 15:

    git show 58d677c:algorithms/distances.py > /tmp/distances_f64.py
    python bench/distances.py --baseline /tmp/distances_f64.py

Then the accuracy of float32 products: the largest relative error of d
against the same float32 inputs in float64, on update scales that DCFL meets.
Prints medians (wall and process CPU seconds); never asserts.

    python bench/distances.py [--repeats 3] [--dim 100000] [--naive-n 50]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import time
from collections.abc import Callable
from functools import partial
from types import ModuleType

import numpy as np

from clusterfed.algorithms import distances
from clusterfed.algorithms.distances import (
    naive_pairwise_distances,
    pairwise_distances,
)

Route = Callable[[np.ndarray, np.ndarray], np.ndarray]


def clients(n: int, dim: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Starts around a common offset (as trained weights are) and small updates."""
    rng = np.random.default_rng(seed)
    starts = (rng.standard_normal((n, dim), dtype=np.float32) * 0.1) + 3.0
    deltas = rng.standard_normal((n, dim), dtype=np.float32) * 0.01
    return starts, deltas


def clustered(
    n: int,
    dim: int,
    *,
    scale: float = 1e-2,
    apart: float = 3.0,
    spread: float = 1.0,
    k: int = 5,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """DCFL's case: n clients in k clusters, each starting from its cluster's
    model (weights ~0.05, the models `apart` updates from each other), updates
    of `scale` per parameter: a part common to the cluster and `spread` of it
    the client's own."""
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % k
    weights = rng.standard_normal(dim, dtype=np.float32) * 0.05
    models = weights + rng.standard_normal((k, dim), dtype=np.float32) * (scale * apart)
    deltas = rng.standard_normal((n, dim), dtype=np.float32) * (scale * spread)
    deltas += (rng.standard_normal((k, dim), dtype=np.float32) * scale)[labels]
    return models[labels], deltas


def timed(run: Callable[[], np.ndarray]) -> tuple[float, float, np.ndarray]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = run()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def load(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("baseline_distances", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def race(
    routes: dict[str, Route], starts: np.ndarray, deltas: np.ndarray, repeats: int
) -> dict[str, tuple[list[float], list[float]]]:
    """Each route `repeats` times, alternating: (walls, cpus) per route."""
    times: dict[str, tuple[list[float], list[float]]] = {
        name: ([], []) for name in routes
    }
    for _ in range(repeats):
        for name, route in routes.items():
            wall, cpu, _ = timed(partial(route, starts, deltas))
            times[name][0].append(wall)
            times[name][1].append(cpu)
    return times


def accuracy(name: str, starts: np.ndarray, deltas: np.ndarray) -> None:
    """Largest and median relative error of float32 d against float64."""
    exact = pairwise_distances(starts.astype(np.float64), deltas.astype(np.float64))
    got = pairwise_distances(starts, deltas)
    off = ~np.eye(len(deltas), dtype=bool)
    rel = np.abs(got - exact)[off] / np.where(exact[off] > 0, exact[off], 1.0)
    zeroed = int(np.count_nonzero((got[off] == 0) & (exact[off] > 0))) // 2
    print(
        f"{name:<34} {float(rel.max()):>9.1e} {float(np.median(rel)):>9.1e} {zeroed:>7}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dim", type=int, default=100_000)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--naive-n", type=int, default=50)
    parser.add_argument("--baseline", help="another copy of distances.py to time")
    parser.add_argument("--accuracy-n", type=int, default=200)
    args = parser.parse_args()

    routes: dict[str, Route] = {"this": pairwise_distances}
    if args.baseline:
        routes["baseline"] = load(args.baseline).pairwise_distances
    print(f"complete distance, d = {args.dim:,} float32 parameters")
    print(
        f"{'starts':<9} {'route':<9} {'n':>6} {'pairs':>9} {'median s':>9}"
        f" {'cpu s':>7}  runs (s)"
    )
    cases = [("own", n, clients(n, args.dim)) for n in args.sizes]
    cases.append(("5 models", 1000, clustered(1000, args.dim)))
    for label, n, (starts, deltas) in cases:
        times = race(routes, starts, deltas, args.repeats)
        for name, (walls, cpus) in times.items():
            runs = ", ".join(f"{t:.3f}" for t in walls)
            print(
                f"{label:<9} {name:<9} {n:>6} {n * (n - 1) // 2:>9,}"
                f" {statistics.median(walls):>9.3f} {statistics.median(cpus):>7.2f}"
                f"  {runs}"
            )
        if args.baseline:
            ratio = statistics.median(times["this"][0]) / statistics.median(
                times["baseline"][0]
            )
            print(f"{'':<9} this / baseline = {ratio:.2f} (medians of wall time)")
        del starts, deltas

    n = args.naive_n
    starts, deltas = clients(n, args.dim, seed=1)
    times = race(
        {"gram": pairwise_distances, "naive": naive_pairwise_distances},
        starts,
        deltas,
        args.repeats,
    )
    for route, (walls, cpus) in times.items():
        runs = ", ".join(f"{t:.3f}" for t in walls)
        print(
            f"{'own':<9} {route:<9} {n:>6} {n * (n - 1) // 2:>9,}"
            f" {statistics.median(walls):>9.3f} {statistics.median(cpus):>7.2f}"
            f"  {runs}"
        )
    gram, naive = (
        pairwise_distances(starts, deltas),
        naive_pairwise_distances(starts, deltas),
    )
    diff = float(np.max(np.abs(gram - naive)))
    scale = float(np.max(np.abs(naive)))
    speedup = statistics.median(times["naive"][0]) / statistics.median(times["gram"][0])
    print(
        f"n = {n}: max |gram − naive| = {diff:.3e} (largest distance {scale:.3e});"
        f" gram is {speedup:.0f}× faster"
    )

    n, dim = args.accuracy_n, args.dim
    print(
        f"\nfloat32 products against float64, n = {n}, d = {dim:,}"
        f" (same_end threshold {distances._SAME_END_32:g})"
    )
    print(f"{'case':<34} {'max rel':>9} {'median':>9} {'zeroed':>7}")
    accuracy("own starts (the timing case)", *clients(n, dim, seed=2))
    accuracy("5 models, updates 1e-2", *clustered(n, dim))
    accuracy("tiny updates 1e-6", *clustered(n, dim, scale=1e-6))
    accuracy("large updates 10", *clustered(n, dim, scale=10.0))
    accuracy("models 100 updates apart", *clustered(n, dim, apart=100.0))
    own, deltas = clustered(n, dim, apart=100.0)
    own += np.float32(1e-2) * np.arange(n, dtype=np.float32)[:, None]
    accuracy("  the same, own starts", own, deltas)
    accuracy("updates 1e-3 apart in a cluster", *clustered(n, dim, spread=1e-3))
    for apart in (1e-1, 1e-2, 1e-3):
        # clients 0 and 5 (one cluster) `apart` of their cluster's spread
        starts, deltas = clustered(n, dim)
        noise = np.random.default_rng(3).standard_normal(dim, dtype=np.float32)
        deltas[5] = deltas[0] + np.float32(apart * 1e-2) * noise
        accuracy(f"pair {apart:g} of cluster's spread", starts, deltas)


if __name__ == "__main__":
    main()
