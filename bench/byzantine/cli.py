"""The command line of bench/byzantine.py: run what the records lack, then
write docs/BYZANTINE.md from every recorded outcome."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from reproduce.runner import ROOT, Outcome
from reproduce.sitting import outcomes_folder, sit, sitting_parser
from sklearn.metrics import adjusted_rand_score

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
    parser = sitting_parser(
        "Every attack against every defence on FLANDERS' layout,"
        " and the clustered section; writes docs/BYZANTINE.md.",
        quick="a few cells on 20 clients, 3 rounds (a smoke test; its page goes"
        " beside the runs, not into docs/)",
        out="runs/byzantine",
        records_folder=RECORDS,
        only="cells (alie__median)",
    )
    args = parser.parse_args()
    outcomes = sit(
        parser, args, experiments(args.quick), DATASET, before_saving=add_split
    )
    out = Path(args.out).resolve()
    page = out / "BYZANTINE.md" if args.quick else ROOT / "docs" / "BYZANTINE.md"
    page.parent.mkdir(parents=True, exist_ok=True)
    command = shlex.join(["python", "bench/byzantine.py", *sys.argv[1:]])
    write_page(outcomes, command, page, args.quick, outcomes_folder(parser, args))
    print(f"wrote {page}")
