"""The command line of bench/byzantine.py: run what the records lack, then
write docs/BYZANTINE.md from every recorded outcome."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

from reproduce.runner import ROOT, Outcome
from reproduce.sitting import outcomes_folder, sit, sitting_parser
from sklearn.metrics import adjusted_rand_score

from . import DATASET, experiments
from .page import write_page

RECORDS = ROOT / "docs" / "records" / "byzantine"


# FLANDERS' figures are the best centralised accuracy over rounds 3-50,
# counted from 1 (Flower's round 0 is the model before any training); our
# rows count from 0, so its round 3 is our row 2.
FLANDERS_FIRST_ROW = 2


def attacker_split(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """How the final round's clusters split the attackers from the honest:

    - `attacker_ari`: ARI against the attacker/honest split; 1 only for
      exactly two clusters, the attackers' and the honest clients' (an
      honest side split in several clusters scores less even when every
      attacker is isolated; hence the two shares below);
    - `attackers_alone`: the share of attackers in clusters without an
      honest member;
    - `honest_with_attackers`: the share of honest clients whose cluster
      holds an attacker;
    - `unassigned`: clients the final round left without a cluster (out of
      the three above);
    - `honest_acc`: the honest clients' mean accuracy (every honest client
      with one).

    The three split measures are None without attackers (or without
    honest clients) among the assigned."""
    found: dict[str, float | None] = dict.fromkeys(
        (
            "attacker_ari",
            "attackers_alone",
            "honest_with_attackers",
            "unassigned",
            "honest_acc",
        )
    )
    if not rows:
        return found
    clients = rows[-1]["clients"]
    honest = [c["acc"] for c in clients if not c.get("faulty") and c["acc"] is not None]
    found["honest_acc"] = sum(honest) / len(honest) if honest else None
    assigned = [c for c in clients if c["cluster"] is not None]
    found["unassigned"] = float(len(clients) - len(assigned))
    attackers = [c for c in assigned if c.get("faulty")]
    innocent = [c for c in assigned if not c.get("faulty")]
    if not attackers or not innocent:
        return found
    truth = [int(bool(c.get("faulty"))) for c in assigned]
    found["attacker_ari"] = float(
        adjusted_rand_score(truth, [int(c["cluster"]) for c in assigned])
    )
    honest_clusters = {int(c["cluster"]) for c in innocent}
    attacked_clusters = {int(c["cluster"]) for c in attackers}
    found["attackers_alone"] = sum(
        int(c["cluster"]) not in honest_clusters for c in attackers
    ) / len(attackers)
    found["honest_with_attackers"] = sum(
        int(c["cluster"]) in attacked_clusters for c in innocent
    ) / len(innocent)
    return found


def best_global_accuracy(rows: list[dict[str, Any]]) -> float | None:
    """The global model's best accuracy on the test split over FLANDERS'
    rounds (3 to the last, counted from 1): the measure of their figures."""
    values = [
        r["global_acc"]
        for r in rows
        if r["round"] >= FLANDERS_FIRST_ROW and r.get("global_acc") is not None
    ]
    return max(values) if values else None


def add_split(outcome: Outcome) -> None:
    """Each seed's summary gains `attacker_split`'s measures and
    `global_acc_best` (from its rows, before the record keeps only a few of
    their fields)."""
    for name, by_seed in outcome.seed_rows.items():
        for seed, rows in by_seed.items():
            summary = outcome.seed_summaries.get(name, {}).get(seed)
            if summary is not None:
                summary.update(attacker_split(rows))
                summary["global_acc_best"] = best_global_accuracy(rows)


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
