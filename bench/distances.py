"""How long DCFL's pairwise update distances take, Gram route against pair loop.

The full n × n "complete" distance matrix (Augello et al., Eq. 2) through
`clusterfed.algorithms.distances.pairwise_distances` (two float64 Gram products
over column blocks) for n = 100 and n = 1,000 clients of d = 100,000 float32
parameters, each client with its own start model; then the per-pair reference
`naive_pairwise_distances` on a small case, with the largest difference between
the two routes. Prints medians; never asserts.

    python bench/distances.py [--repeats 3] [--dim 100000] [--naive-n 50]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from functools import partial

import numpy as np

from clusterfed.algorithms.distances import (
    naive_pairwise_distances,
    pairwise_distances,
)


def clients(n: int, dim: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Starts around a common offset (as trained weights are) and small updates."""
    rng = np.random.default_rng(seed)
    starts = (rng.standard_normal((n, dim), dtype=np.float32) * 0.1) + 3.0
    deltas = rng.standard_normal((n, dim), dtype=np.float32) * 0.01
    return starts, deltas


def timed(
    run: Callable[[], np.ndarray], repeats: int
) -> tuple[list[float], np.ndarray]:
    times, result = [], np.empty(0)
    for _ in range(repeats):
        start = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - start)
    return times, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dim", type=int, default=100_000)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--naive-n", type=int, default=50)
    args = parser.parse_args()

    print(f"complete distance, d = {args.dim:,} float32 parameters, per-client starts")
    print(f"{'route':<8} {'n':>6} {'pairs':>9} {'median s':>9}  runs (s)")
    for n in args.sizes:
        starts, deltas = clients(n, args.dim)
        times, _ = timed(partial(pairwise_distances, starts, deltas), args.repeats)
        pairs = n * (n - 1) // 2
        runs = ", ".join(f"{t:.3f}" for t in times)
        print(
            f"{'gram':<8} {n:>6} {pairs:>9,} {statistics.median(times):>9.3f}  {runs}"
        )

    n = args.naive_n
    starts, deltas = clients(n, args.dim, seed=1)
    gram_times, gram = timed(partial(pairwise_distances, starts, deltas), args.repeats)
    naive_times, naive = timed(
        partial(naive_pairwise_distances, starts, deltas), args.repeats
    )
    pairs = n * (n - 1) // 2
    for route, times in (("gram", gram_times), ("naive", naive_times)):
        runs = ", ".join(f"{t:.3f}" for t in times)
        print(f"{route:<8} {n:>6} {pairs:>9,} {statistics.median(times):>9.3f}  {runs}")
    diff = float(np.max(np.abs(gram - naive)))
    scale = float(np.max(np.abs(naive)))
    speedup = statistics.median(naive_times) / statistics.median(gram_times)
    print(
        f"n = {n}: max |gram − naive| = {diff:.3e} (largest distance {scale:.3e});"
        f" gram is {speedup:.0f}× faster"
    )


if __name__ == "__main__":
    main()
