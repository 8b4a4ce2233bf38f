"""DCFL's Fig. 5: the paper's claim that DCFL "always match[es] if not
outperform[s] the alternative algorithms" in every setting of new clients,
drift and DP, decided seed by seed on the final mean accuracy."""

from __future__ import annotations

from typing import Any

from clusterfed.scenarios.papers_fmnist import WITHOUT_DP

from .claims import Claim, Claims, comparison
from .page import provenance, table
from .runner import ByKey, Outcome, summary_value

# The paper's Fig. 5 settings besides Table I's (joins, drift, DP) and its
# no-DP twin, which --quick also runs.
SETTINGS = {
    "no joins, no drift, no DP": ("events=[]", *WITHOUT_DP),
    "joins, no drift, DP": ('events=[{kind = "join", start = 10, every = 10}]',),
    "no joins, drift, DP": (
        'events=[{kind = "drift", start = 5, every = 10, target = "random",'
        ' to_group = "other"}]',
    ),
}

NAMES = {"dcfl": "DCFL", "cfl": "CFL", "fedavg": "FedAvg"}


def fig5(
    by_key: ByKey, dataset: str, claims: Claims, main: Outcome | None, nodp: Outcome
) -> list[str]:
    """The Fig. 5 table: each setting's final accuracies and DCFL's claim
    over each other algorithm; `main` and `nodp` are Table I's runs with and
    without DP, whose rows are Table I's claims (registered first); `main`
    None while its runs wait for a sitting."""
    settings = [
        (label, by_key.get((dataset, f"dcfl-fig5-{i}")))
        for i, label in enumerate(SETTINGS)
    ]
    ran = [(label, o) for label, o in settings if o is not None]
    if not ran:
        return []
    tables = [("joins, drift, DP (Table I)", main), ("joins, drift, no DP", nodp)]
    found = ran + [(label, o) for label, o in tables if o is not None]
    others = [a for a in nodp.summaries if a != "dcfl"]
    lines = [
        "### DCFL: Fig. 5 settings — with and without new clients, drift and DP",
        "",
        "Final mean client accuracy (training average in brackets). The paper"
        " plots these and states that DCFL always matches or beats the others."
        " The last columns decide it seed by seed: DCFL's final accuracy minus"
        " the other's (95 % interval); “holds” when DCFL is above, “does not"
        " hold” when below, “cannot tell” when the interval spans 0 (which is"
        " also what a match looks like). The rows of Table I's settings are"
        " Table I's claims above, counted once.",
        "",
    ]
    lines += table(
        ["setting", *nodp.summaries, *(f"DCFL − {a}" for a in others)],
        [
            [
                label,
                *(_final_and_avg(o.summaries[a]) for a in o.summaries),
                *(_above(claims.add(_final_above(o, a, label))) for a in others),
            ]
            for label, o in found
        ],
    )
    lines += provenance(*(o for _, o in ran))  # Table I's are listed above
    return lines


def _final_above(o: Outcome, other: str, setting: str) -> Claim:
    """DCFL's final mean accuracy above `other`'s in `o`'s setting (Fig. 5's
    claim; keyed like Table I's, so that Table I's rows count once)."""
    final = summary_value("final_mean_acc")
    return comparison(
        f"{o.experiment.key}:final_mean_acc:dcfl-{other}",
        "DCFL",
        f"Fig. 5, {setting}",
        f"DCFL's final mean accuracy above {NAMES[other]}'s",
        o.per_seed("dcfl", final),
        o.per_seed(other, final),
        runs=([(o, "dcfl")], [(o, other)]),
    )


def _above(claim: Claim) -> str:
    return f"{claim.shown().removeprefix('Δ ')}: {claim.verdict}"


def _final_and_avg(summary: dict[str, Any]) -> str:
    return f"{summary['final_mean_acc']:.3f} ({summary['avg_mean_acc']:.3f})"
