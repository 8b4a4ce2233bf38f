"""The command line of bench/benchmark.py: run what the records lack, then
write docs/BENCHMARK.md from every recorded outcome."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from reproduce.runner import ROOT
from reproduce.sitting import outcomes_folder, sit, sitting_parser

from . import experiments, missing
from .page import write_page

DATASET = "fashion_mnist"
RECORDS = ROOT / "docs" / "records" / "benchmark"


def main() -> None:
    parser = sitting_parser(
        "Every clustered algorithm on the benchmark's four settings;"
        " writes docs/BENCHMARK.md.",
        quick="every algorithm once on one setting, 3 rounds (a smoke test; its"
        " page goes beside the runs, not into docs/)",
        out="runs/benchmark",
        records_folder=RECORDS,
        only="settings (rotations, label-groups, ...)",
    )
    args = parser.parse_args()
    chosen = experiments()
    outcomes = sit(parser, args, chosen, DATASET)
    out = Path(args.out).resolve()
    page = out / "BENCHMARK.md" if args.quick else ROOT / "docs" / "BENCHMARK.md"
    figure_folder = out / "figures" if args.quick else ROOT / "docs" / "figures"
    page.parent.mkdir(parents=True, exist_ok=True)
    command = shlex.join(["python", "bench/benchmark.py", *sys.argv[1:]])
    records = outcomes_folder(parser, args)
    write_page(outcomes, command, page, missing(), figure_folder, args.quick, records)
    print(f"wrote {page}")
