"""The command line of bench/benchmark.py: run what the records lack, then
write docs/BENCHMARK.md from every recorded outcome."""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

from reproduce import records
from reproduce.cli import seeds_argument
from reproduce.runner import ROOT, run_all

from clusterfed.data.datasets import available as dataset_available

from . import experiments, missing
from .page import write_page

DATASET = "fashion_mnist"
RECORDS = ROOT / "docs" / "records" / "benchmark"


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Every clustered algorithm on the benchmark's four settings;"
        " writes docs/BENCHMARK.md."
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="every algorithm once on one setting, 3 rounds (a smoke test; its"
        " page goes beside the runs, not into docs/)",
    )
    parser.add_argument("--out", default="runs/benchmark", help="folder of the runs")
    parser.add_argument("--records", default=str(RECORDS), help="kept outcomes")
    parser.add_argument(
        "--only", nargs="*", default=[], help="settings (rotations, label-groups, ...)"
    )
    parser.add_argument(
        "--seeds",
        type=seeds_argument,
        default=None,
        help="a count or a list (default 3)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep finished runs in --out and seeds already in --records",
    )
    parser.add_argument(
        "--no-run", action="store_true", help="write the page from --records alone"
    )
    args = parser.parse_args()
    if not args.no_run and not dataset_available(DATASET):
        parser.error(
            "Fashion-MNIST is not installed: apt-get install -y dataset-fashion-mnist"
        )
    seeds = args.seeds or ([0] if args.quick else [0, 1, 2])
    out = Path(args.out).resolve()
    folder = Path(args.records)
    chosen = experiments()
    if not args.no_run:
        recorded = records.recorded(folder, args.quick) if args.resume else None
        start = time.perf_counter()
        outcomes = run_all(
            chosen,
            args.quick,
            out,
            args.only,
            [DATASET],
            seeds,
            resume=args.resume,
            recorded=recorded,
        )
        print(f"ran in {time.perf_counter() - start:.0f} s")
        for outcome in outcomes:
            records.save(outcome, folder)
    outcomes = records.load(folder, chosen, [DATASET], args.quick)
    page = out / "BENCHMARK.md" if args.quick else ROOT / "docs" / "BENCHMARK.md"
    figure_folder = out / "figures" if args.quick else ROOT / "docs" / "figures"
    page.parent.mkdir(parents=True, exist_ok=True)
    command = shlex.join(["python", "bench/benchmark.py", *sys.argv[1:]])
    write_page(outcomes, command, page, missing(), figure_folder, args.quick, folder)
    print(f"wrote {page}")
