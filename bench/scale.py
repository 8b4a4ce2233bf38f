"""Scale: N clients of `quickstart` for a few rounds, in both runtimes.

Prints the wall time per round (median of the rounds after the first, which
builds every client's trainer) and the peak memory, sampled every 0.2 s: the
resident set (RSS) of this process, which runs the server, the summed RSS of
its descendants (the local workers, or every Ray process), and the sum of
the proportional set size (PSS) of all of them, where memory they share (a
forked dataset, Ray's object store) counts once.

Digits cannot give 1,000 clients two samples each, so the clients hold
Fashion-MNIST (the Debian package dataset-fashion-mnist) unless told
otherwise. Its 60,000 training images give 1,000 clients Dirichlet(0.5)
label skew with at least 4 samples each (quickstart's partition), but not
10,000: a Dirichlet draw over 10,000 clients always leaves some with fewer
than 2. `--partition auto` (the default) keeps the Dirichlet partition while
there are at least 20 samples a client and deals IID shares beyond (6 each
at 10,000 clients: 5 to train on, 1 held out).

    python bench/scale.py --clients 100 1000 --rounds 5 --runtimes local ray
    python bench/scale.py --clients 10000 --rounds 3 --runtimes local --probe

`--probe` also prints this process's RSS at the steps of each round (before
and after the train phase, around the strategy's `aggregate`) with the
number and bytes of the deltas handed to `aggregate` (or, when the round is
streamed, how many updates at most waited in the fold for an earlier
client); `--tracemalloc`
prints the allocation sites that hold the most memory just before the first
`aggregate` (slow: use it with few rounds). Past `--limit-gib` (total PSS)
the run is stopped: its workers are killed and this process exits.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import statistics
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psutil

import clusterfed
from clusterfed.actors import phases
from clusterfed.actors.courier import Courier
from clusterfed.actors.folding import RoundFold
from clusterfed.actors.server import ParameterServer
from clusterfed.algorithms.fedavg import FedAvg
from clusterfed.scenarios.spec import DATASET_SIZES

GIB = 2**30


@dataclass
class Peaks:
    main_rss: int = 0
    workers_rss: int = 0
    total_pss: int = 0


class PeakMemory:
    """Peaks of this process's RSS, its descendants' summed RSS and the PSS
    of all of them; stops the run (kills the descendants, exits) when the
    total PSS passes `limit` bytes."""

    def __init__(self, limit: int, every_s: float = 0.2) -> None:
        self.limit = limit
        self.every_s = every_s
        self.peaks = Peaks()
        self.started = time.perf_counter()
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
            workers_rss = total_pss = 0
            main_rss = me.memory_info().rss
            children = me.children(recursive=True)
            for process in [me, *children]:
                with contextlib.suppress(psutil.Error):  # it may have just exited
                    info = process.memory_full_info()
                    total_pss += info.pss
                    if process.pid != me.pid:
                        workers_rss += info.rss
            peaks = self.peaks
            peaks.main_rss = max(peaks.main_rss, main_rss)
            peaks.workers_rss = max(peaks.workers_rss, workers_rss)
            peaks.total_pss = max(peaks.total_pss, total_pss)
            if total_pss > self.limit:
                self._abort(children, total_pss)
            self._stop.wait(self.every_s)

    def _abort(self, children: Sequence[psutil.Process], total_pss: int) -> None:
        took = time.perf_counter() - self.started
        print(
            f"stopped: {total_pss / GIB:.2f} GiB (PSS, all processes) past the"
            f" {self.limit / GIB:.1f} GiB limit after {took:.0f} s;"
            f" peaks: this process {self.peaks.main_rss / GIB:.2f} GiB RSS,"
            f" workers {self.peaks.workers_rss / GIB:.2f} GiB RSS",
            flush=True,
        )
        for child in children:
            with contextlib.suppress(psutil.Error):
                child.kill()
        os._exit(3)


def rss_gib() -> float:
    return psutil.Process().memory_info().rss / GIB


def install_probe(log: Callable[[str], None], trace: bool, every: int) -> None:
    """Log this process's RSS around the train phase and FedAvg.aggregate,
    and after every `every` replies; with `trace`, the top allocation sites
    before the first aggregate."""
    train = phases.train

    @functools.wraps(train)
    async def probed_train(*args: Any, **kwargs: Any) -> Any:
        log(f"train phase starts: {rss_gib():.2f} GiB")
        result = await train(*args, **kwargs)
        log(f"train phase done (every reply decoded and judged): {rss_gib():.2f} GiB")
        return result

    aggregate, aggregate_sums = FedAvg.aggregate, FedAvg.aggregate_sums
    traced = [False]
    folds: list[RoundFold] = []
    fold_init = RoundFold.__init__

    def kept_fold(self: RoundFold, *args: Any, **kwargs: Any) -> None:
        fold_init(self, *args, **kwargs)
        folds[:] = [self]

    def probed_aggregate_sums(
        self: FedAvg, state: Any, round: int, updates: Any, sums: Any, rng: Any
    ) -> Any:
        held = sum(u.delta is not None for u in updates)
        waited = folds[0].most_waiting if folds else 0
        log(
            f"aggregate_sums gets {held} deltas (streamed; at most {waited}"
            f" waited for an earlier client): {rss_gib():.2f} GiB"
        )
        return aggregate_sums(self, state, round, updates, sums, rng)

    def probed_aggregate(
        self: FedAvg, state: Any, round: int, updates: Any, rng: Any
    ) -> Any:
        held = [u.delta for u in updates if u.delta is not None]
        size = sum(d.nbytes for d in held)
        log(
            f"aggregate gets {len(held)} deltas, {size / GIB:.2f} GiB of them:"
            f" {rss_gib():.2f} GiB"
        )
        if trace and not traced[0]:
            traced[0] = True
            snapshot = tracemalloc.take_snapshot()
            total = sum(s.size for s in snapshot.statistics("filename"))
            log(f"tracemalloc: {total / GIB:.2f} GiB traced; the largest sites:")
            for stat in snapshot.statistics("lineno")[:8]:
                frame = stat.traceback[0]
                log(
                    f"  {stat.size / GIB:6.2f} GiB {stat.count:>7} blocks"
                    f"  {frame.filename}:{frame.lineno}"
                )
        result = aggregate(self, state, round, updates, rng)
        log(f"aggregate done: {rss_gib():.2f} GiB")
        return result

    exchange = Courier._exchange
    replies = [0]

    @functools.wraps(exchange)
    async def counted_exchange(self: Courier, *args: Any, **kwargs: Any) -> Any:
        result = await exchange(self, *args, **kwargs)
        replies[0] += 1
        if replies[0] % every == 0:
            log(f"{replies[0]} replies in: {rss_gib():.2f} GiB")
        return result

    Courier._exchange = counted_exchange  # type: ignore[method-assign]
    phases.train = probed_train  # type: ignore[assignment]
    FedAvg.aggregate = probed_aggregate  # type: ignore[method-assign]
    FedAvg.aggregate_sums = probed_aggregate_sums  # type: ignore[method-assign]
    RoundFold.__init__ = kept_fold  # type: ignore[method-assign]


def partition_kind(kind: str, clients: int, dataset: str) -> str:
    """`kind`, or for "auto": Dirichlet while there are 20 samples a client."""
    if kind != "auto":
        return kind
    return "dirichlet" if clients * 20 <= DATASET_SIZES.get(dataset, 0) else "iid"


def measure(
    runtime: str,
    clients: int,
    rounds: int,
    dataset: str,
    partition: str,
    limit: int,
    log: Callable[[str], None],
) -> tuple[float, float, Peaks]:
    overrides = [f"dataset.name={dataset}"]
    if partition == "iid":
        overrides.append("partition.kind=iid")
    else:  # quickstart's Dirichlet(0.5), at least 4 samples a client
        overrides.append("partition.min_samples=4")
    with tempfile.TemporaryDirectory() as out, PeakMemory(limit) as memory:
        start = time.perf_counter()
        result = clusterfed.run(
            "quickstart",
            out=out,
            runtime=runtime,
            clients=clients,
            rounds=rounds,
            overrides=overrides,
            on_round=lambda row: log(
                f"round {row['round']} recorded after"
                f" {time.perf_counter() - start:.1f} s: {rss_gib():.2f} GiB"
            ),
        )
        total = time.perf_counter() - start
    walls = [r["wall_time"] for r in result.rows]
    per_round = [b - a for a, b in zip(walls, walls[1:], strict=False)]
    return statistics.median(per_round or [total]), total, memory.peaks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runtimes", nargs="+", default=["local", "ray"])
    parser.add_argument("--dataset", default="fashion_mnist")
    parser.add_argument(
        "--partition", choices=["auto", "dirichlet", "iid"], default="auto"
    )
    parser.add_argument("--limit-gib", type=float, default=12.0)
    parser.add_argument("--probe", action="store_true")
    parser.add_argument("--tracemalloc", action="store_true")
    parser.add_argument(
        "--max-in-flight",
        type=int,
        default=None,
        help="the server's requests outstanding at once (default: the server's)",
    )
    args = parser.parse_args()
    if args.max_in_flight is not None:
        defaults = ParameterServer.__init__.__kwdefaults__
        assert defaults is not None and "max_in_flight" in defaults
        defaults["max_in_flight"] = args.max_in_flight

    def log(line: str) -> None:
        if args.probe or args.tracemalloc:
            print(f"  [{time.strftime('%H:%M:%S')}] {line}", flush=True)

    if args.probe or args.tracemalloc:
        install_probe(log, args.tracemalloc, max(100, max(args.clients) // 10))
    if args.tracemalloc:
        tracemalloc.start()
    header = (
        f"{'s/round':>8} {'total s':>8} {'main RSS':>8} {'workers':>8} {'PSS all':>8}"
    )
    print(f"{'runtime':<8} {'clients':>7} {'partition':<9} {header}  (GiB)")
    for clients in args.clients:
        for runtime in args.runtimes:
            kind = partition_kind(args.partition, clients, args.dataset)
            per_round, total, peaks = measure(
                runtime,
                clients,
                args.rounds,
                args.dataset,
                kind,
                int(args.limit_gib * GIB),
                log,
            )
            figures = (
                f"{per_round:>8.2f} {total:>8.1f} {peaks.main_rss / GIB:>8.2f}"
                f" {peaks.workers_rss / GIB:>8.2f} {peaks.total_pss / GIB:>8.2f}"
            )
            print(f"{runtime:<8} {clients:>7} {kind:<9} {figures}", flush=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
