"""CAFA (Zhang et al.): CBCC telling the IID clients apart (Tables II-III) and
the best accuracy against FedAvg and FedProx (Table V)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .page import provenance, table, verdict
from .runner import ByKey, Experiment

# --quick keeps CBCC (round 0) and a few rounds after it; at paper scale only
# for cafa-mix (a round of the three there takes ~11 s).
EXPERIMENTS = [
    Experiment(
        s,
        s,
        ("cafa", "fedavg", "fedprox"),
        (),
        10,
        paper_scale=f"{s}-fmnist",
        paper_quick_rounds=5 if s == "cafa-mix" else None,
    )
    for s in ("cafa-mix", "cafa-mix50")
]

# -- the paper's own numbers ---------------------------------------------------

# Tables II-III, case 1 (20 clients): k, acc, precision, recall, F1
CBCC = {
    "cafa-mix": (9, 0.95, 0.83, 1.00, 0.91),
    "cafa-mix50": (7, 0.95, 0.91, 1.00, 0.95),
}
BEST = {"fedavg": 0.821, "fedprox": 0.8042, "cafa": 0.8345}  # Table V


def _best_mean(rows: list[dict[str, Any]]) -> float:
    """Table V's measure: the best round's mean client accuracy."""
    means = [
        np.mean([c["acc"] for c in r["clients"] if c["acc"] is not None])
        for r in rows
        if any(c["acc"] is not None for c in r["clients"])
    ]
    return float(max(means))


def section(by_key: ByKey, dataset: str, figures: Path) -> list[str]:
    found = [(s, by_key.get((dataset, s))) for s in CBCC]
    found = [(s, o) for s, o in found if o is not None]
    if not found:
        return []
    lines = [
        "### CAFA (Zhang et al.): Tables II–III (CBCC) and V (best accuracy)",
        "",
    ]
    rows = []
    for s, o in found:
        cbcc = o.summaries["cafa"].get("cbcc") or {}
        paper = CBCC[s]
        rows.append(
            [
                s,
                *paper,
                cbcc.get("k"),
                cbcc.get("accuracy"),
                cbcc.get("precision"),
                cbcc.get("recall"),
                cbcc.get("f1"),
            ]
        )
    lines += table(
        [
            "scenario",
            "paper k",
            "acc",
            "precision",
            "recall",
            "F1",
            "clusterfed k",
            "acc",
            "precision",
            "recall",
            "F1",
        ],
        rows,
    )
    lines += [
        "",
        "Best mean client accuracy over the rounds (paper: CIFAR-10, VGG19):",
        "",
    ]
    rows = []
    for s, o in found:
        for a in o.summaries:
            rows.append(
                [
                    s,
                    a,
                    BEST[a],
                    _best_mean(o.rows[a]),
                    o.summaries[a]["avg_mean_acc"],
                ]
            )
    lines += table(
        ["scenario", "algorithm", "paper best", "clusterfed best", "clusterfed avg"],
        rows,
    )
    lines.append("")
    for s, o in found:
        cbcc = o.summaries["cafa"].get("cbcc") or {}
        best = {a: _best_mean(o.rows[a]) for a in o.summaries}
        lines.append(
            verdict(
                (cbcc.get("recall") or 0) >= 0.9 and (cbcc.get("accuracy") or 0) >= 0.9,
                f"- {s}: CBCC tells the IID clients apart (recall and accuracy ≥"
                " 0.9), as in the paper.",
                f"- {s}: CBCC does NOT reach recall and accuracy 0.9 here.",
            )
            + " "
            + verdict(
                best["cafa"] == max(best.values()),
                "CAFA has the best accuracy, as in the paper's Table V.",
                "CAFA does NOT have the best accuracy here, unlike the paper's"
                " Table V: on digits every algorithm comes within a few points of"
                " the ceiling, and the paper's margins (under 3 points) are"
                " smaller than the spread between rounds.",
            )
        )
    lines += provenance(*(o for _, o in found))
    return lines
