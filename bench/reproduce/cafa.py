"""CAFA (Zhang et al.): CBCC telling the IID clients apart (Tables II-III) and
the best accuracy against FedAvg and FedProx (Table V)."""

from __future__ import annotations

from pathlib import Path

from clusterfed.seeds import interval

from .page import CLAIMS, decided, pm, provenance, table
from .runner import ByKey, Experiment, SeedValue, best_mean_acc, differences

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


CBCC_FIELDS = ("k", "accuracy", "precision", "recall", "f1")


def _cbcc(field: str) -> SeedValue:
    """A seed's CBCC `field` (CAFA's round-0 clustering, in its summary)."""
    return lambda summary, _: (summary.get("cbcc") or {}).get(field)


def section(by_key: ByKey, dataset: str, figures: Path) -> list[str]:
    found = [(s, by_key.get((dataset, s))) for s in CBCC]
    found = [(s, o) for s, o in found if o is not None]
    if not found:
        return []
    lines = [
        "### CAFA (Zhang et al.): Tables II–III (CBCC) and V (best accuracy)",
        "",
    ]
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
        [
            [
                s,
                *CBCC[s],
                *(
                    pm(
                        interval(list(o.per_seed("cafa", _cbcc(f)).values())),
                        1 if f == "k" else 2,
                    )
                    for f in CBCC_FIELDS
                ),
            ]
            for s, o in found
        ],
    )
    lines += [
        "",
        "Best mean client accuracy over the rounds (paper: CIFAR-10, VGG19):",
        "",
    ]
    best = {
        s: {a: o.per_seed(a, best_mean_acc) for a in o.seed_summaries} for s, o in found
    }
    lines += table(
        ["scenario", "algorithm", "paper best", "clusterfed best", "clusterfed avg"],
        [
            [
                s,
                a,
                BEST[a],
                pm(interval(list(best[s][a].values()))),
                pm(o.statistics[a]["avg_mean_acc"]),
            ]
            for s, o in found
            for a in o.seed_summaries
        ],
    )
    lines += ["", CLAIMS, ""]
    for s, o in found:
        recall = o.per_seed("cafa", _cbcc("recall"))
        accuracy = o.per_seed("cafa", _cbcc("accuracy"))
        apart = sum(
            recall[seed] >= 0.9 and accuracy.get(seed, 0) >= 0.9 for seed in recall
        )
        lines.append(
            f"- {s}: CBCC tells the IID clients apart (recall and accuracy ≥ 0.9), as"
            f" in the paper: in {apart} of {len(recall)} seeds."
        )
        for other in best[s]:
            if other == "cafa":
                continue
            above = differences(best[s]["cafa"], best[s][other])
            lines.append(
                f"- {s}: CAFA's best accuracy above {other}'s, as in the paper's"
                f" Table V: {decided(above)} (Δ {pm(above)}; the paper's margin"
                f" {BEST['cafa'] - BEST[other]:.3f})."
            )
    lines += provenance(*(o for _, o in found))
    return lines
