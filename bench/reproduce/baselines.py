"""The clustered baselines' own experiments (issue 36): FL+HC, FeSEM, PACFL,
FedSoft, FedEM and FedDrift, each against the baselines its paper compares
with.

Each paper's claim is its headline comparison, in the words the section
quotes; a comparison with an algorithm its paper does not run is shown as
our measurement, without a verdict (claims.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusterfed.seeds import interval

from .claims import Claims, comparison
from .figures import client_accuracies
from .page import CLAIMS, pm, provenance, table
from .runner import ByKey, Experiment, Row, SeedValue, plants_groups, summary_value


@dataclass(frozen=True)
class Baseline:
    """One paper's experiment and what the section says of it.

    Attributes:
        scenario: the digits scenario (its `-fmnist` variant at paper scale).
        paper: the paper's short name.
        title: the section's title.
        quote: what the paper claims, in words.
        method: the paper's algorithm.
        against: the algorithms its paper compares with (a verdict each).
        measured: others run beside it (our measurement, no verdict).
        metric: what the claims compare: final mean accuracy, or the share of
            clients at or above the scenario's target accuracy.
    """

    scenario: str
    paper: str
    title: str
    quote: str
    method: str
    against: tuple[str, ...]
    measured: tuple[str, ...] = ()
    metric: str = "final_mean_acc"
    quick_rounds: int = 10
    paper_quick_rounds: int = 5

    @property
    def algorithms(self) -> tuple[str, ...]:
        return (self.method, *self.against, *self.measured)


BASELINES = (
    Baseline(
        "flhc-swap",
        "FL+HC",
        "FL+HC (Briggs et al.): clustering the updates once",
        "the abstract: FL+HC lets a greater share of the clients reach a target"
        " accuracy than FL without clustering (FedAvg)",
        "flhc",
        ("fedavg",),
        metric="share_at_target",
        quick_rounds=12,
        paper_quick_rounds=12,  # the clustering is in round 10
    ),
    Baseline(
        "fesem-rotated",
        "FeSEM",
        "FeSEM (Long, Xie et al.): multi-center FL",
        "the experiments: FeSEM's personalised accuracy is above FedAvg's",
        "fesem",
        ("fedavg",),
        ("ifca",),
    ),
    Baseline(
        "pacfl-labels",
        "PACFL",
        "PACFL (Vahidian et al.): clusters from the data's principal angles",
        "the label-skew experiments: PACFL's accuracy is above FedAvg's and IFCA's",
        "pacfl",
        ("fedavg", "ifca"),
        quick_rounds=15,
        paper_quick_rounds=10,
    ),
    Baseline(
        "fedsoft-rotated",
        "FedSoft",
        "FedSoft (Ruan & Joe-Wong): soft clusters",
        "the experiments: FedSoft's accuracy is above IFCA's (hard clusters)",
        "fedsoft",
        ("ifca",),
        ("fedavg",),
        quick_rounds=5,
        paper_quick_rounds=3,
    ),
    Baseline(
        "fedem-dirichlet",
        "FedEM",
        "FedEM (Marfoq et al.): a mixture of shared components",
        "Table 2: FedEM's accuracy is above FedAvg's and FedProx's",
        "fedem",
        ("fedavg", "fedprox"),
    ),
    Baseline(
        "feddrift-swap",
        "FedDrift",
        "FedDrift (Jothimurugesan et al.): new models for drifted clients",
        "the experiments: under drift FedDrift's accuracy is above FedAvg's"
        " (one model, oblivious to drift) and IFCA's",
        "feddrift",
        ("fedavg", "ifca"),
        ("feddrift-eager",),
        quick_rounds=15,  # the change points fall every 5 rounds
        paper_quick_rounds=10,
    ),
)

EXPERIMENTS = [
    Experiment(
        b.scenario,
        b.scenario,
        b.algorithms,
        (),
        b.quick_rounds,
        paper_scale=f"{b.scenario}-fmnist",
        paper_quick_rounds=b.paper_quick_rounds,
    )
    for b in BASELINES
]


def share_at_target(target: float) -> SeedValue:
    """A seed's share of clients whose final accuracy is at least `target`."""

    def value(summary: dict[str, Any], rows: list[Row]) -> float | None:
        clients = rows[-1].get("clients", []) if rows else []
        accs = [c["acc"] for c in clients if c.get("acc") is not None]
        return sum(a >= target for a in accs) / len(accs) if accs else None

    return value


def section(by_key: ByKey, dataset: str, figures: Path, claims: Claims) -> list[str]:
    lines: list[str] = []
    for b in BASELINES:
        o = by_key.get((dataset, b.scenario))
        if o is None:
            continue
        target = 0.8
        value = (
            share_at_target(target)
            if b.metric == "share_at_target"
            else summary_value(b.metric)
        )
        measure = (
            f"share of clients at accuracy ≥ {target}"
            if b.metric == "share_at_target"
            else "final mean accuracy"
        )
        lines += [
            f"### {b.title}",
            "",
            f"The paper, {b.quote}. clusterfed: {measure}, over the seeds.",
            "",
        ]
        shares = {a: o.per_seed(a, value) for a in o.seed_summaries}
        share = b.metric == "share_at_target"
        # No ARI where every client is in one ground-truth group (Dirichlet):
        # there it only counts the clusters.
        ari = plants_groups(b.scenario)
        lines += table(
            ["algorithm", "final acc", "avg acc", "clusters"]
            + ["ARI"] * ari
            + [measure] * share,
            [
                [
                    a,
                    pm(stats["final_mean_acc"]),
                    pm(stats["avg_mean_acc"]),
                    pm(stats["n_clusters_final"], 1),
                    *([pm(stats.get("ari_final"), 2)] if ari else []),
                    *([pm(interval(list(shares[a].values())), 2)] if share else []),
                ]
                for a, stats in o.statistics.items()
            ],
        )
        lines += ["", CLAIMS, ""]
        for other in (*b.against, *b.measured):
            if other not in shares:
                continue
            claim = comparison(
                f"{b.scenario}:{b.method}-{other}",
                b.paper,
                b.quote.split(":")[0],
                f"{b.scenario}: {b.method}'s {measure} above {other}'s",
                shares[b.method],
                shares[other],
                runs=([(o, b.method)], [(o, other)]),
                own=other in b.against,
            )
            lines.append(claims.say(claim))
        fig = client_accuracies(
            list(o.rows.items()), figures / f"{b.scenario}-accuracy-{dataset}.png"
        )
        lines += [
            "",
            f"![Each client's accuracy per round (grey), the mean (black), on"
            f" {dataset}, first seed](figures/{fig.name})",
        ]
        lines += provenance(o)
    return lines
