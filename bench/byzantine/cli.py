"""The command line of bench/byzantine.py: run what the records lack, then
write docs/BYZANTINE.md from every recorded outcome."""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

from reproduce import records
from reproduce.cli import seeds_argument
from reproduce.runner import ROOT, Outcome, run_all
from sklearn.metrics import adjusted_rand_score

from clusterfed.data.datasets import available as dataset_available

from . import experiments
from .page import write_page

DATASET = "fashion_mnist"
RECORDS = ROOT / "docs" / "records" / "byzantine"


def attacker_split(rows: list[dict]) -> tuple[float | None, float | None]:
    """The final round's ARI of the clusters against the attacker/honest
    split (None: no attacker, or one cluster and one side), and the honest
    clients' mean accuracy."""
    if not rows:
        return None, None
    clients = rows[-1]["clients"]
    honest = [c["acc"] for c in clients if not c.get("faulty") and c["acc"] is not None]
    accuracy = sum(honest) / len(honest) if honest else None
    truth = [int(bool(c.get("faulty"))) for c in clients]
    if len(set(truth)) < 2:
        return None, accuracy
    found = [-1 if c["cluster"] is None else int(c["cluster"]) for c in clients]
    return float(adjusted_rand_score(truth, found)), accuracy


def add_split(outcome: Outcome) -> None:
    """Each seed's summary gains `attacker_ari` and `honest_acc` (from its
    rows, before the record keeps only a few of their fields)."""
    for name, by_seed in outcome.seed_rows.items():
        for seed, rows in by_seed.items():
            ari, accuracy = attacker_split(rows)
            summary = outcome.seed_summaries.get(name, {}).get(seed)
            if summary is not None:
                summary["attacker_ari"], summary["honest_acc"] = ari, accuracy


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Every attack against every defence on FLANDERS' layout,"
        " and the clustered section; writes docs/BYZANTINE.md."
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a few cells on 20 clients, 3 rounds (a smoke test; its page goes"
        " beside the runs, not into docs/)",
    )
    parser.add_argument("--out", default="runs/byzantine", help="folder of the runs")
    parser.add_argument("--records", default=str(RECORDS), help="kept outcomes")
    parser.add_argument("--only", nargs="*", default=[], help="cells (alie__median)")
    parser.add_argument(
        "--seeds", type=seeds_argument, default=None, help="a count or a list"
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
    chosen = experiments(args.quick)
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
            add_split(outcome)
            records.save(outcome, folder)
    outcomes = records.load(folder, chosen, [DATASET], args.quick)
    page = out / "BYZANTINE.md" if args.quick else ROOT / "docs" / "BYZANTINE.md"
    page.parent.mkdir(parents=True, exist_ok=True)
    command = shlex.join(["python", "bench/byzantine.py", *sys.argv[1:]])
    write_page(outcomes, command, page, args.quick)
    print(f"wrote {page}")
