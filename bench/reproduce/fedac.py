"""FedAC (Hsu et al.): no split when the clients are IID, a split into the
class groups otherwise (Figs. 3-7)."""

from __future__ import annotations

from pathlib import Path

from .claims import Claim, Claims, comparison, seed_costs
from .figures import per_round
from .page import CLAIMS, pm, provenance, table
from .runner import ByKey, Experiment, summary_value

SCENARIOS = ("fedac-iid", "fedac-2clusters", "fedac-3clusters", "fedac-4clusters")

# --quick keeps the splits (rounds 32-44 at full length) and leaves FedACP out;
# at paper scale 15 rounds of the IID and 2-cluster cases only.
EXPERIMENTS = [
    Experiment(
        s,
        s,
        ("fedac", "fedacp", "fedavg"),
        (),
        45,
        ("fedac", "fedavg"),
        paper_scale=f"{s}-fmnist",
        paper_quick_rounds=15 if s in ("fedac-iid", "fedac-2clusters") else None,
    )
    for s in SCENARIOS
]


NAMES = {"fedac": "FedAC", "fedacp": "FedACP"}


def section(by_key: ByKey, dataset: str, figures: Path, claims: Claims) -> list[str]:
    found = [(s, o) for s in SCENARIOS if (o := by_key.get((dataset, s))) is not None]
    if not found:
        return []
    lines = [
        "### FedAC (Hsu et al.): split behaviour",
        "",
        "The paper (Figs. 3–7): in the IID case FedAC never splits and matches"
        " FedAvg; with 2, 3 and 4 class-group clusters it splits into them and"
        " beats FedAvg; FedACP, “while not consistently accurate in clustering”,"
        " also improves on FedAvg's accuracy. clusterfed: clusters at the end,"
        " purity against the class groups, final mean accuracy.",
        "",
    ]
    lines += table(
        ["scenario", "algorithm", "clusters", "purity", "final acc", "avg acc"],
        [
            [
                s,
                a,
                *(
                    pm(stats[m], digits)
                    for m, digits in (
                        ("n_clusters_final", 1),
                        ("purity_final", 2),
                        ("final_mean_acc", 3),
                        ("avg_mean_acc", 3),
                    )
                ),
            ]
            for s, o in found
            for a, stats in o.statistics.items()
        ],
    )
    lines += ["", CLAIMS, ""]
    final = summary_value("final_mean_acc")
    for s, o in found:
        clusters = o.per_seed("fedac", summary_value("n_clusters_final"))
        purity = o.per_seed("fedac", summary_value("purity_final"))
        if s == "fedac-iid":
            claim = Claim(
                f"{s}:no-split",
                "FedAC",
                "Fig. 3",
                "fedac-iid: FedAC never splits (one cluster at the end)",
                passed=tuple(clusters[seed] == 1 for seed in sorted(clusters)),
                seed_costs=seed_costs((o, "fedac")),
            )
            lines.append(claims.say(claim))
            continue
        # The group count is in the name: fedac-2clusters has 2.
        wanted = int(s.split("-")[1][0])
        claim = Claim(
            f"{s}:groups",
            "FedAC",
            "Figs. 4–7",
            f"{s}: FedAC ends with the {wanted} groups (that many clusters,"
            " purity ≥ 0.9)",
            passed=tuple(
                clusters[seed] == wanted and purity.get(seed, 0) >= 0.9
                for seed in sorted(clusters)
            ),
            seed_costs=seed_costs((o, "fedac")),
        )
        lines.append(claims.say(claim))
        for method in ("fedac", "fedacp"):
            if method not in o.seed_summaries:
                continue
            claim = comparison(
                f"{s}:{method}-fedavg",
                "FedAC",
                "Figs. 4–7",
                f"{s}: {NAMES[method]}'s final mean accuracy above FedAvg's",
                o.per_seed(method, final),
                o.per_seed("fedavg", final),
                runs=([(o, method)], [(o, "fedavg")]),
            )
            lines.append(claims.say(claim))
    fig = per_round(
        found, "n_clusters", "clusters", figures / f"fedac-clusters-{dataset}.png"
    )
    lines += ["", f"![Clusters per round on {dataset}](figures/{fig.name})"]
    lines += provenance(*(o for _, o in found))
    return lines
