"""Scale: N clients of `quickstart` for a few rounds, in both runtimes.

Prints the wall time per round (median of the rounds after the first, which
builds every client's trainer) and the peak memory (PSS) of all processes of
the run (this one, the local workers or every Ray process), sampled every
0.2 s.

Digits cannot give 1,000 clients two samples each, so the clients hold
Fashion-MNIST (the Debian package dataset-fashion-mnist) unless told
otherwise:

    python bench/scale.py --clients 100 1000 --rounds 5 --runtimes local ray
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import threading
import time

import psutil

import clusterfed


class PeakMemory:
    """Sum of the proportional set size (PSS) of this process and its
    descendants: memory shared between them (a forked dataset, Ray's object
    store) counts once, not once per process."""

    def __init__(self, every_s: float = 0.2) -> None:
        self.every_s = every_s
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            total = 0
            for process in [me, *me.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):  # it may have just exited
                    total += process.memory_full_info().pss
            self.peak = max(self.peak, total)
            self._stop.wait(self.every_s)


def measure(
    runtime: str, clients: int, rounds: int, dataset: str
) -> tuple[float, float, float]:
    with tempfile.TemporaryDirectory() as out, PeakMemory() as memory:
        start = time.perf_counter()
        result = clusterfed.run(
            "quickstart",
            out=out,
            runtime=runtime,
            clients=clients,
            rounds=rounds,
            overrides=[f"dataset.name={dataset}", "partition.min_samples=4"],
        )
        total = time.perf_counter() - start
    walls = [r["wall_time"] for r in result.rows]
    per_round = [b - a for a, b in zip(walls, walls[1:], strict=False)]
    return statistics.median(per_round), total, memory.peak / 2**30


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runtimes", nargs="+", default=["local", "ray"])
    parser.add_argument("--dataset", default="fashion_mnist")
    args = parser.parse_args()
    print(
        f"{'runtime':<8} {'clients':>7} {'s/round':>8} {'total s':>8} {'peak GiB':>8}"
    )
    for clients in args.clients:
        for runtime in args.runtimes:
            per_round, total, peak = measure(
                runtime, clients, args.rounds, args.dataset
            )
            figures = f"{per_round:>8.2f} {total:>8.1f} {peak:>8.2f}"
            print(f"{runtime:<8} {clients:>7} {figures}")


if __name__ == "__main__":
    main()
