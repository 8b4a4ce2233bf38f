"""The command line of bench/dp_study.py: run what the records lack, then
write docs/DP-STUDY.md from every recorded outcome."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from reproduce.runner import ROOT
from reproduce.sitting import outcomes_folder, sit, sitting_parser

from . import experiments, screens
from .page import write_page

DATASET = "fashion_mnist"
RECORDS = ROOT / "docs" / "records" / "dp-study"


def main() -> None:
    parser = sitting_parser(
        "The DP utility study on DCFL's Table I setting; writes docs/DP-STUDY.md.",
        quick="every cell with FedAvg alone, 2 rounds (a smoke test; its page"
        " goes beside the runs, not into docs/)",
        out="runs/dp-study",
        records_folder=RECORDS,
        only="experiments (sample-b64-c1-run, its companion"
        " sample-b64-c1-run-cfl-fedavg, client-c1-adaptive, ...; default: every"
        " cell's screen)",
    )
    args = parser.parse_args()
    if not args.only:  # the companions run when the selection names them
        args.only = [e.key for e in screens()]
    outcomes = sit(parser, args, experiments(), DATASET)
    out = Path(args.out).resolve()
    page = out / "DP-STUDY.md" if args.quick else ROOT / "docs" / "DP-STUDY.md"
    page.parent.mkdir(parents=True, exist_ok=True)
    command = shlex.join(["python", "bench/dp_study.py", *sys.argv[1:]])
    write_page(outcomes, command, page, outcomes_folder(parser, args))
    print(f"wrote {page}")
