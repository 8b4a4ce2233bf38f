"""Cross-device scale: N registered clients × K a round, local runtime.

Runs `cross-device` (FedAvg on Synthetic(1, 1), diurnal availability) or
`cross-device-clustered` with `population.registered` = N and
`population.per_round` = K, and prints for each pair:

- start-up: from the scenario to the first round's start (the federation
  built, the workers started: nothing is built per registered client);
- s/round: the median wall time of a round after the first (the first
  also warms each worker: imports, the scratch model);
- peak memory: the sum of the proportional set size (PSS) of this process
  and all its descendants, sampled every 0.2 s (bench/scale.py's sampler),
  so memory the workers share with their parent counts once;
- built: the client specs the run built (one per distinct participant).

    python bench/population.py --registered 1000 10000 100000 1000000 \\
        --per-round 100 1000 --rounds 4
    python bench/population.py --scenario cross-device-clustered \\
        --registered 1000000 --per-round 1000 --rounds 20

A benchmark, not a test: it asserts nothing about time.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from clusterfed.api import make_runtime
from clusterfed.federation import Federation
from clusterfed.scenarios import BUILTIN, with_overrides

sys.path.insert(0, str(Path(__file__).parent))
from scale import GIB, PeakMemory  # noqa: E402  (bench/ is no package)


async def measure(
    scenario_name: str, n: int, k: int, rounds: int, workers: int, limit: int
) -> dict[str, float]:
    scenario = with_overrides(
        BUILTIN[scenario_name](),
        [f"population.registered={n}", f"population.per_round={k}"],
        rounds=rounds,
    )
    with tempfile.TemporaryDirectory() as out, PeakMemory(limit) as memory:
        began = time.perf_counter()
        runtime = make_runtime("local", workers=workers)
        federation = Federation(
            scenario, runtime, Path(out), config={"scenario": scenario.name}
        )
        try:
            await federation.start()
            startup = time.perf_counter() - began
            walls, aris = [], []
            for r in range(rounds):
                t = time.perf_counter()
                row = await federation.step(r)
                walls.append(time.perf_counter() - t)
                aris.append(row["ari"])
            summary, _ = await federation.finish()
        finally:
            await federation.close()
    people = federation.population
    assert people is not None
    return {
        "startup": startup,
        "per_round": statistics.median(walls[1:] or walls),
        "first": walls[0],
        "pss": memory.peaks.total_pss / GIB,
        "built": float(people.built),
        "acc": float(summary["final_mean_acc"] or 0.0),
        "ari": float("nan") if aris[-1] is None else float(aris[-1]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="cross-device")
    parser.add_argument(
        "--registered", type=int, nargs="+", default=[1000, 10000, 100000, 1000000]
    )
    parser.add_argument("--per-round", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--limit-gib", type=float, default=12.0)
    args = parser.parse_args()
    print(
        f"{'N':>9} {'K':>5} {'start s':>8} {'round 0 s':>9} {'s/round':>8}"
        f" {'PSS GiB':>8} {'built':>6} {'acc':>6} {'ARI':>6}",
        flush=True,
    )
    for k in args.per_round:
        for n in args.registered:
            if k > n:
                continue
            got = asyncio.run(
                measure(
                    args.scenario,
                    n,
                    k,
                    args.rounds,
                    args.workers,
                    int(args.limit_gib * GIB),
                )
            )
            print(
                f"{n:>9} {k:>5} {got['startup']:>8.2f} {got['first']:>9.2f}"
                f" {got['per_round']:>8.2f} {got['pss']:>8.2f}"
                f" {int(got['built']):>6} {got['acc']:>6.3f} {got['ari']:>6.3f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
