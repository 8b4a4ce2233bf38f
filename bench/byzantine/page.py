"""docs/BYZANTINE.md from the recorded outcomes: the attack × defence table
(final accuracy, mean over the seeds with its 95 % interval, FLANDERS'
best-round figures beside), the clustered section, what is missing, and the cost."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from reproduce.runner import Outcome, summary_value
from reproduce.sitting import shown
from scipy.stats import norm

from clusterfed.actors.attacks import z_max
from clusterfed.seeds import interval

from . import (
    ATTACKS,
    BEST_DEFENCE,
    CLUSTERED,
    CLUSTERED_ATTACKS,
    DEFENCES,
    FLANDERS,
    FULL,
    key,
)


def _cell(outcome: Outcome | None, algorithm: str, metric: str) -> str:
    if outcome is None or algorithm not in outcome.seed_summaries:
        return "—"
    values = list(outcome.per_seed(algorithm, summary_value(metric)).values())
    if not values:
        return "n/a"
    found = interval(values)
    if found.half_width is None:
        return f"{found.mean:.3f} (1 seed)"
    return f"{found.mean:.3f} ± {found.half_width:.3f}"


def _flanders_lie() -> str:
    """Why FLANDERS' LIE figure is of another attack than our `alie`."""
    n, f = FULL[0], len(FULL[1])
    s = math.floor(n / 2 + 1) - f
    theirs = float(norm.cdf((n - f - s) / (n - f)))
    return (
        "**FLANDERS' LIE is a stronger attack than `alie`.** Its code"
        " (baselines/flanders/flanders/attacks.py, `lie_attack`) takes the"
        " per-coordinate mean and standard deviation σ over every client's"
        " model, the honest clients' included (its `omniscent=False` branch"
        " filters the models only after those are taken), and sends the mean"
        f" − z·√σ with z = Φ({n - f - s}/{n - f}) = {theirs:.2f}. Baruch et"
        " al.'s z is a quantile, not a probability: Φ⁻¹((n − s)/n) ="
        f" {z_max(n, f):.2f} here (s = ⌊n/2 + 1⌋ − f = {s}), times σ. For σ"
        " below 1, √σ exceeds σ (σ = 10⁻³: 32 times). Our `alie` takes the"
        " paper's z·σ over what its coalition sees, its own members'"
        f" honest updates: the mean + {z_max(n, f):.2f}·σ (`--set"
        " faulty.knowledge=all` lets it see every honest update too, still"
        " z·σ). The FLANDERS figures in the `alie` row are therefore of a"
        " much larger shift."
    )


def write_page(
    outcomes: Sequence[Outcome],
    command: str,
    page: Path,
    quick: bool,
    records: Path,
) -> None:
    by_key = {o.experiment.key: o for o in outcomes}
    lines = [
        "# Byzantine robustness: attacks × defences",
        "",
        f"Written by `{command}` from the records in `{shown(records)}`"
        " (each cell's seeds, run over sittings).",
        "",
        "The layout is FLANDERS' (Flower's baselines/flanders): Fashion-MNIST,"
        " 100 clients all sampled every round, 50 rounds, Dirichlet(0.5), an MLP"
        " (ours: 512-128, the clustered benchmark's training recipe), 20 % of"
        " the clients Byzantine (every fifth). Rules that take the number of"
        " attackers are told it (f = 20; multi-Krum averages m = 80). Each cell"
        " is FedAvg's final mean accuracy over the honest clients, the mean of"
        " the seeds ± the half-width of its 95 % Student t interval;"
        " *FLANDERS* is the published figure of that cell (Flower's"
        " baselines/flanders README, its tables for b = 20 and b = 0: the"
        " best centralised test accuracy over rounds 3–50 of one run, a"
        " maximum, not a final accuracy; their training, not ours: a"
        " reference, not a replication). The last row is the backdoor's"
        " success rate: the share of triggered test images of other labels the"
        " final model calls the target.",
        "",
        _flanders_lie(),
        "",
    ]
    if quick:
        lines += [
            "**--quick**: a smoke test on 20 clients (4 attackers), 3 rounds, a"
            " few cells: it checks the machinery, not the figures.",
            "",
        ]
    header = "| attack | " + " | ".join(f"`{d}`" for d in DEFENCES) + " |"
    lines += [header, "|---" * (len(DEFENCES) + 1) + "|"]
    missing = []
    for attack in ATTACKS:
        cells = []
        for defence in DEFENCES:
            outcome = by_key.get(key(attack, defence))
            if outcome is None:
                missing.append(key(attack, defence))
            text = _cell(outcome, "fedavg", "final_mean_acc")
            if (attack, defence) in FLANDERS:
                text += f" *({FLANDERS[attack, defence]:.2f})*"
            cells.append(text)
        lines.append(f"| `{attack}` | " + " | ".join(cells) + " |")
    backdoor = [
        _cell(by_key.get(key("backdoor", d)), "fedavg", "backdoor_success_final")
        for d in DEFENCES
    ]
    lines.append("| *backdoor success* | " + " | ".join(backdoor) + " |")
    lines += [
        "",
        "## Clustering as a defence",
        "",
        "20 % attackers (ALIE, IPM, sign flip) against the clustered algorithms"
        " (IFCA told 2 clusters; CFL's thresholds relative to its warm-up;"
        " FL+HC's one clustering of the updates at its defaults, after 10"
        " rounds), and"
        f" FedAvg with `{BEST_DEFENCE}`. *ARI*: the final clustering against"
        " the attacker/honest split (1: the attackers in clusters of their own;"
        " FedAvg's one cluster: 0); *honest acc*: the honest clients' final"
        " mean accuracy.",
        "",
        "| attack | algorithm | ARI | honest acc |",
        "|---|---|---|---|",
    ]
    for attack in CLUSTERED_ATTACKS:
        clustered = by_key.get(f"clustered__{attack}")
        fedavg = by_key.get(f"clustered__{attack}__fedavg")
        for algorithm, outcome in [
            *((a, clustered) for a in CLUSTERED),
            ("fedavg", fedavg),
        ]:
            if outcome is None:
                missing.append(f"clustered__{attack} ({algorithm})")
            name = algorithm if algorithm != "fedavg" else f"fedavg + {BEST_DEFENCE}"
            lines.append(
                f"| `{attack}` | {name} | {_cell(outcome, algorithm, 'attacker_ari')}"
                f" | {_cell(outcome, algorithm, 'honest_acc')} |"
            )
    seconds = sum(o.seconds for o in outcomes)
    lines += [
        "",
        "## What the records hold",
        "",
        f"{len(outcomes)} experiments recorded, {seconds / 3600:.2f} h of runs.",
    ]
    if missing:
        lines += [
            "",
            f"Not recorded yet ({len(missing)}): "
            + ", ".join(f"`{m}`" for m in sorted(set(missing))),
        ]
    page.write_text("\n".join(lines) + "\n")
