"""What the Fashion-MNIST reproductions cost: wall seconds per round of each
paper scenario and algorithm, and the projected time of the full page.

    python bench/paper_scale_cost.py [--rounds 3] [--seeds 3] [--only gradloss ifca]
        [--scenarios flhc fesem]

Runs `--rounds` rounds of every (scenario, algorithm, settings) the paper-scale
reproduction runs, once, and prints round 0 and the median of the later
rounds (wall time from rounds.jsonl), then rounds × algorithms × seeds
projected from them. Needs dataset-fashion-mnist.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import clusterfed
from clusterfed.scenarios import load_scenario
from clusterfed.scenarios.papers_fmnist import WITHOUT_DP

# (scenario, algorithm, overrides, runs of the page that cost as much): the
# DCFL page runs Table I with and without DP, Table II's three other
# distances with and without DP and Fig. 5's three other settings (two with
# DP); the other papers run every scenario of a family, which cost about the
# same.
RUNS: list[tuple[str, str, tuple[str, ...], int]] = [
    ("dcfl-fmnist", "dcfl", (), 6),
    ("dcfl-fmnist", "cfl", (), 3),
    ("dcfl-fmnist", "fedavg", (), 3),
    ("dcfl-fmnist", "dcfl", WITHOUT_DP, 5),
    ("dcfl-fmnist", "cfl", WITHOUT_DP, 2),
    ("dcfl-fmnist", "fedavg", WITHOUT_DP, 2),
    ("dcfl-fmnist4", "dcfl", (), 2),
    ("ocfl-noniid2-fmnist", "ocfl", (), 3),
    ("ocfl-noniid2-fmnist", "fedavg", (), 3),
    ("fedac-2clusters-fmnist", "fedac", (), 4),
    ("fedac-2clusters-fmnist", "fedacp", (), 4),
    ("fedac-2clusters-fmnist", "fedavg", (), 4),
    ("gradloss-fig2-fmnist", "gradloss", (), 1),
    ("gradloss-fig2-fmnist", "ifca", (), 1),
    ("cafa-mix-fmnist", "cafa", (), 2),
    ("cafa-mix-fmnist", "fedavg", (), 2),
    ("cafa-mix-fmnist", "fedprox", (), 2),
    # The clustered baselines' own experiments (bench/reproduce/baselines.py).
    ("flhc-swap-fmnist", "flhc", (), 1),
    ("flhc-swap-fmnist", "fedavg", (), 1),
    ("fesem-rotated-fmnist", "fesem", (), 1),
    ("fesem-rotated-fmnist", "fedavg", (), 1),
    ("fesem-rotated-fmnist", "ifca", (), 1),
    ("pacfl-labels-fmnist", "pacfl", (), 1),
    ("pacfl-labels-fmnist", "fedavg", (), 1),
    ("pacfl-labels-fmnist", "ifca", (), 1),
    ("fedsoft-rotated-fmnist", "fedsoft", (), 1),
    ("fedsoft-rotated-fmnist", "ifca", (), 1),
    ("fedsoft-rotated-fmnist", "fedavg", (), 1),
    ("fedem-dirichlet-fmnist", "fedem", (), 1),
    ("fedem-dirichlet-fmnist", "fedavg", (), 1),
    ("fedem-dirichlet-fmnist", "fedprox", (), 1),
    ("feddrift-swap-fmnist", "feddrift", (), 1),
    ("feddrift-swap-fmnist", "feddrift-eager", (), 1),
    ("feddrift-swap-fmnist", "fedavg", (), 1),
    ("feddrift-swap-fmnist", "ifca", (), 1),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument(
        "--only", nargs="*", default=[], help="these algorithms only (default: all)"
    )
    parser.add_argument(
        "--scenarios",
        nargs="*",
        default=[],
        help="scenarios whose name starts with one of these (default: all)",
    )
    args = parser.parse_args()
    total = 0.0
    print(f"{'scenario':24} {'algorithm':9} {'sets':10} round0  later  runs  projected")
    for scenario, algorithm, sets, share in RUNS:
        if args.only and algorithm not in args.only:
            continue
        if args.scenarios and not scenario.startswith(tuple(args.scenarios)):
            continue
        with tempfile.TemporaryDirectory() as tmp:
            result = clusterfed.run(
                scenario,
                algorithm=algorithm,
                rounds=args.rounds,
                overrides=sets,
                out=Path(tmp) / "run",
            )
        walls = [r["wall_time"] for r in result.rows]
        steps = [b - a for a, b in zip(walls, walls[1:], strict=False)]
        later = statistics.median(steps) if steps else walls[0]
        rounds = load_scenario(scenario).rounds
        projected = (walls[0] + later * (rounds - 1)) * args.seeds * share
        total += projected
        print(
            f"{scenario:24} {algorithm:9} {','.join(sets) or '-':10}"
            f" {walls[0]:6.2f} {later:6.2f} {share:4}×{args.seeds}"
            f" {projected / 60:7.1f} min",
            flush=True,
        )
    print(f"projected full page, {args.seeds} seeds: {total / 60:.0f} min")


if __name__ == "__main__":
    main()
