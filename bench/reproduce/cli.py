"""The command line of bench/reproduce.py: run the experiments, write the page
and reproduce.json beside the runs."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

from clusterfed.data.datasets import available

from . import EXPERIMENTS, PAPERS
from .page import write_page
from .runner import ROOT, run_all

# The --help text the single-file script had (its docstring's first line).
DESCRIPTION = "Reproduce every paper experiment and write docs/REPRODUCTION.md."


def main() -> None:
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument(
        "--quick", action="store_true", help="fewer rounds (digits only by default)"
    )
    parser.add_argument("--out", default="runs/reproduce", help="folder of the runs")
    parser.add_argument("--page", default=str(ROOT / "docs" / "REPRODUCTION.md"))
    parser.add_argument(
        "--only", nargs="*", default=[], help="experiment keys (prefixes)"
    )
    parser.add_argument(
        "--datasets",
        default=None,
        help="comma-separated (default: digits, and fashion_mnist when its files"
        " are there and not --quick)",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        default=None,
        help="seeds per experiment (default: 3 with fashion_mnist unless"
        " --quick, else 1)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the runs in --out that finished with the same settings"
        " (compare --resume) and run the rest: a page built over several"
        " sittings; its times are then the runs' own wall times, summed",
    )
    args = parser.parse_args()
    if args.datasets:
        datasets = args.datasets.split(",")
    elif args.quick or not available("fashion_mnist"):
        datasets = ["digits"]
    else:
        datasets = ["digits", "fashion_mnist"]
    seeds = args.seeds or (3 if "fashion_mnist" in datasets and not args.quick else 1)
    start = time.perf_counter()
    outcomes = run_all(
        EXPERIMENTS,
        args.quick,
        Path(args.out).resolve(),
        args.only,
        datasets,
        seeds,
        resume=args.resume,
    )
    elapsed = time.perf_counter() - start
    write_page(
        outcomes,
        shlex.join(["python", "bench/reproduce.py", *sys.argv[1:]]),
        Path(args.page),
        sum(o.seconds for o in outcomes) if args.resume else elapsed,
        [paper.section for paper in PAPERS],
        resumed=args.resume,
    )
    (Path(args.out) / "reproduce.json").write_text(
        json.dumps(
            {
                f"{o.dataset}/{o.experiment.key}": {
                    "seeds": list(o.seeds),
                    "summaries": o.seed_summaries,
                    "statistics": {
                        name: {m: i.as_json() for m, i in stats.items()}
                        for name, stats in o.statistics.items()
                    },
                }
                for o in outcomes
            },
            indent=2,
        )
    )
    print(f"wrote {args.page} in {time.perf_counter() - start:.0f} s")
