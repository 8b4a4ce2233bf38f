"""OCFL (Lu et al.): FedAvg's fall from IID to non-IID (Table 2) and the
one-shot OPTICS clustering round (Fig. 4)."""

from __future__ import annotations

from pathlib import Path

from clusterfed.seeds import interval

from .claims import Claim, Claims, comparison
from .page import CLAIMS, pm, provenance, table
from .runner import ByKey, Experiment, first_round, summary_value

SCENARIOS = ("ocfl-iid", "ocfl-noniid", "ocfl-noniid2")

# --quick keeps the clustering round (0) and 20 rounds of FedAvg at a 10 %
# client fraction (6 at paper scale, where round 0 alone takes ~20 s).
EXPERIMENTS = [
    Experiment(
        s,
        s,
        ("ocfl", "fedavg"),
        (),
        20,
        paper_scale=f"{s}-fmnist",
        paper_quick_rounds=6,
    )
    for s in SCENARIOS
]

# The paper's own numbers: Table 2, MNIST, MLP, FedAvg after 100 rounds.
TABLE2_MLP = {
    "ocfl-iid": 0.9152,
    "ocfl-noniid": 0.8797,
    "ocfl-noniid2": 0.8069,
}


# The scenario whose ARI the paper reports (Fig. 4: 1.0 after one local
# epoch); the others' ARI is our measurement.
CLAIMED_ARI = "ocfl-noniid2"


def section(by_key: ByKey, dataset: str, figures: Path, claims: Claims) -> list[str]:
    found = [(s, o) for s in TABLE2_MLP if (o := by_key.get((dataset, s))) is not None]
    if not found:
        return []
    lines = [
        "### OCFL (Lu et al.): Table 2 and the clustering round",
        "",
        "The paper's Table 2: FedAvg's test accuracy with an MLP on MNIST after"
        " 100 rounds for IID, non-IID (≈2 labels per client) and non-IID2 (≈1 label);"
        " Fig. 4: ARI of the OPTICS clustering of the non-IID2 clients after one"
        " local epoch is 1.0 (10 clusters, which it then merges into 3 by cosine"
        " similarity; the merge is not reproduced here); Table 3 and Fig. 5:"
        " on non-IID2, OCFL's accuracy is above FedAvg's in every cluster.",
        "",
    ]
    ari = {s: o.per_seed("ocfl", first_round("ari")) for s, o in found}
    aris = {s: interval(list(values.values())) for s, values in ari.items()}
    lines += table(
        [
            "scenario",
            "paper FedAvg",
            "clusterfed FedAvg",
            "clusterfed OCFL",
            "ARI after clustering round",
            "clusters",
        ],
        [
            [
                s,
                TABLE2_MLP[s],
                pm(o.statistics["fedavg"]["final_mean_acc"]),
                pm(o.statistics["ocfl"]["final_mean_acc"]),
                pm(aris[s]),
                pm(o.statistics["ocfl"]["n_clusters_final"], 1),
            ]
            for s, o in found
        ],
    )
    lines += ["", CLAIMS, ""]
    for s, values in ari.items():
        claim = Claim(
            f"{s}:ari",
            "OCFL",
            "Fig. 4" if s == CLAIMED_ARI else "beyond the paper",
            f"{s}: OCFL's clustering round recovers the planted groups (ARI above"
            " 0.9; the paper reports 1.0 for non-IID2 only)",
            tuple(v - 0.9 for v in values.values()),
            measure="ARI − 0.9:",
            own=s == CLAIMED_ARI,
            note=f"ARI {pm(aris[s])}",
        )
        lines.append(claims.say(claim))
    final = summary_value("final_mean_acc")
    fedavg = {s: o.per_seed("fedavg", final) for s, o in found}
    outcome = dict(found)
    for better, worse in zip(SCENARIOS, SCENARIOS[1:], strict=False):
        if better in fedavg and worse in fedavg:
            claim = comparison(
                f"{better}-{worse}:fedavg",
                "OCFL",
                "Table 2",
                f"FedAvg's final accuracy falls from {better} to {worse}",
                fedavg[better],
                fedavg[worse],
                runs=([(outcome[better], "fedavg")], [(outcome[worse], "fedavg")]),
            )
            lines.append(claims.say(claim))
    if CLAIMED_ARI in outcome:
        o = outcome[CLAIMED_ARI]
        claim = comparison(
            f"{CLAIMED_ARI}:ocfl-fedavg",
            "OCFL",
            "Table 3",
            f"{CLAIMED_ARI}: OCFL's final mean accuracy above FedAvg's (the paper's"
            " is per merged cluster)",
            o.per_seed("ocfl", final),
            o.per_seed("fedavg", final),
            runs=([(o, "ocfl")], [(o, "fedavg")]),
        )
        lines.append(claims.say(claim))
    lines += provenance(*(o for _, o in found))
    return lines
