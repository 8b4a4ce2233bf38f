"""docs/BYZANTINE.md from the recorded outcomes: the attack × defence table
(final accuracy, mean over the seeds with its 95 % interval, FLANDERS'
best-round figures beside), the clustered section, what is missing, and the cost."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from reproduce.page import accuracy_words
from reproduce.runner import Outcome, SeedValue, summary_value
from reproduce.sitting import shown
from scipy.stats import norm

from clusterfed.actors.attacks import z_max
from clusterfed.actors.faults import FaultPlan
from clusterfed.seeds import interval

from . import (
    ATTACKS,
    BEST_DEFENCE,
    CLUSTERED,
    CLUSTERED_ATTACKS,
    DATASET,
    DEFENCES,
    FLANDERS,
    FULL,
    TRIGGER_BASELINE,
    experiments,
    key,
)

SEEDS = 3
"""The seeds every cell grows to; a cell with fewer says how many."""
COUNTS = ("n_clusters_final", "unassigned")
ACCURACIES = ("final_mean_acc", "honest_acc")
"""Measures every run has unless every honest client's last evaluation
failed (a diverged model): a seed without one is shown, never averaged
away. The split measures are None by design (no attacker, or no honest
client, among the assigned), and global_acc_best is absent from records
made before it existed."""


def _cell(outcome: Outcome | None, algorithm: str, metric: str, digits: int = 3) -> str:
    if outcome is None or algorithm not in outcome.seed_summaries:
        return "—"
    if metric in ACCURACIES:
        runs = outcome.seed_summaries[algorithm]
        failed = [s for s, summary in runs.items() if summary.get(metric) is None]
        if failed:
            return f"none in {len(failed)} of {len(runs)} seeds"
    return _shown(outcome, algorithm, summary_value(metric), digits)


def _shown(outcome: Outcome, algorithm: str, value: SeedValue, digits: int = 3) -> str:
    """`value` over the seeds of `algorithm`'s runs: its mean and the 95 %
    half-width, with the seed count where it is short of SEEDS."""
    values = list(outcome.per_seed(algorithm, value).values())
    if not values:
        return "n/a"
    found = interval(values)
    if found.half_width is None:
        return f"{found.mean:.{digits}f} (1 seed)"
    text = f"{found.mean:.{digits}f} ± {found.half_width:.{digits}f}"
    return text if len(values) >= SEEDS else f"{text} ({len(values)} seeds)"


def _plan(attack: str) -> FaultPlan:
    """The attack as the table runs it: its cell's scenario, resolved."""
    (experiment,) = [e for e in experiments() if e.key == key(attack, "mean")]
    return experiment.resolved(DATASET).faulty[0].plan()


def _parameters() -> str:
    """The attacks' and rules' settings the table runs, read from the
    resolved scenarios of its cells."""
    flip, ipm, gauss, backdoor = (
        _plan(a) for a in ("sign_flip", "ipm", "gaussian", "backdoor")
    )
    (trimmed,) = [e for e in experiments() if e.key == key("alie", "trimmed_mean")]
    rule = trimmed.resolved(DATASET).aggregator
    n, f = FULL[0], len(FULL[1])
    return (
        f"Settings: sign flip sends its honest delta × −{flip.scale:g}; IPM −ε"
        f" × the mean of its coalition's honest updates, ε = {ipm.epsilon:g};"
        " ALIE the coalition's mean + z·σ with Baruch et al.'s"
        f" z = {z_max(n, f):.2f} for n = {n}, f = {f}; MinMax, MinSum and Fang"
        " from the coalition's honest updates (partial knowledge); Gaussian"
        f" N(0, {gauss.sigma:g}²) per coordinate; the backdoor stamps a"
        f" {backdoor.trigger}-pixel square on {backdoor.poison_share * 100:g} %"
        f" of an attacker's images, labelled {backdoor.target}; trimmed mean"
        f" cuts β = {getattr(rule, 'beta', '?')} of the rows at each end."
    )


def _trigger_baseline(outcome: Outcome | None) -> str:
    """The backdoor success row's baseline: its trigger on a clean model."""
    (experiment,) = [e for e in experiments() if e.key == TRIGGER_BASELINE]
    probe = experiment.resolved(DATASET).backdoor_probe
    assert probe is not None
    rate = (
        "(not recorded yet)"
        if outcome is None
        else _cell(outcome, "fedavg", "backdoor_success_final")
    )
    return (
        "The backdoor success row's baseline: with no attacker, the plain"
        f" mean's final model calls {rate} of the triggered test images"
        f" {probe.target} (the backdoor's {probe.trigger}-pixel trigger"
        f" measured on a clean run by `backdoor_probe`, `{TRIGGER_BASELINE}`)."
    )


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
        " the seeds ± the half-width of its 95 % Student t interval. The last"
        " row is the backdoor's success rate: the share of triggered test"
        " images of other labels the final model calls the target. *none in"
        " k of n seeds*: k seeds ended with no honest client's accuracy (every"
        " client's last evaluation failed, as when the model has"
        " diverged), which no mean over the other seeds may hide. "
        + accuracy_words(outcomes),
        "",
        _parameters(),
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
            cells.append(_cell(outcome, "fedavg", "final_mean_acc"))
        lines.append(f"| `{attack}` | " + " | ".join(cells) + " |")
    backdoor = [
        _cell(by_key.get(key("backdoor", d)), "fedavg", "backdoor_success_final")
        for d in DEFENCES
    ]
    lines.append("| *backdoor success* | " + " | ".join(backdoor) + " |")
    baseline = by_key.get(TRIGGER_BASELINE)
    if baseline is None:
        missing.append(TRIGGER_BASELINE)
    lines += ["", _trigger_baseline(baseline)]
    lines += ["", *_beside_flanders(by_key), "", *_clustered(by_key, missing)]
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


def _beside_flanders(by_key: dict[str, Outcome]) -> list[str]:
    """FLANDERS' figures beside ours, in their measure and in the table's."""
    lines = [
        "## Beside FLANDERS' figures",
        "",
        "FLANDERS' figures (Flower's baselines/flanders README, its tables for"
        " b = 20 and b = 0) are the best accuracy of the global model on the"
        " server's uniform test set over rounds 3–50 of one run: a maximum,"
        " not a final accuracy, with their training, not ours (a reference,"
        " not a replication). *best global*: ours in that measure (the global"
        " model on Fashion-MNIST's test split, the best of rounds 3–50); *final"
        " global*: its last round; *table*: the cell above (the honest"
        " clients' final mean accuracy, measured as the top of the page says).",
        "",
        "| attack | defence | FLANDERS | best global | final global | table |",
        "|---|---|---|---|---|---|",
    ]
    for (attack, defence), figure in FLANDERS.items():
        outcome = by_key.get(key(attack, defence))
        lines.append(
            f"| `{attack}` | `{defence}` | {figure:.2f}"
            f" | {_cell(outcome, 'fedavg', 'global_acc_best')}"
            f" | {_cell(outcome, 'fedavg', 'global_acc_final')}"
            f" | {_cell(outcome, 'fedavg', 'final_mean_acc')} |"
        )
    return [*lines, "", _flanders_lie()]


def _honest_without_accuracy(outcome: Outcome) -> SeedValue:
    """The share of honest clients with no accuracy in a seed's final row
    (their last evaluation failed: here, their cluster's model diverged),
    which `honest_acc`, a mean over those with one, cannot show. Read from
    the record's final row, whose clients keep their id and accuracy, and the
    experiment's attackers, so records made before this measure show it."""
    attackers = {i for f in outcome.experiment.resolved(DATASET).faulty for i in f.ids}

    def share(_: dict[str, Any], rows: list[dict[str, Any]]) -> float | None:
        clients = rows[-1].get("clients", []) if rows else []
        honest = [c for c in clients if c["id"] not in attackers]
        if not honest:
            return None
        return sum(c.get("acc") is None for c in honest) / len(honest)

    return share


def _clustered(by_key: dict[str, Outcome], missing: list[str]) -> list[str]:
    """Do the clustered algorithms put the attackers in clusters of their
    own? Appends what is not recorded to `missing`."""
    lines = [
        "## Clustering as a defence",
        "",
        "20 % attackers (ALIE, IPM, sign flip) against the clustered algorithms"
        " (IFCA told 2 clusters; CFL's thresholds relative to its warm-up;"
        " FL+HC's one clustering of the updates at its defaults, after 10"
        f" rounds), and FedAvg with `{BEST_DEFENCE}` (the table's cell; the"
        " rule was fixed before any cell had run, so not picked from these"
        " results). The clustered algorithms average each cluster's updates"
        " with the plain mean, as their papers do: no robust rule protects"
        " them before they cluster (FL+HC's 10 rounds of FedAvg, CFL's"
        " warm-up), and CFL's relative thresholds come from a warm-up the"
        " attackers take part in. IFCA's attackers choose their cluster"
        " honestly, by their model's loss on their own data (only their update"
        " is forged), so IFCA cannot isolate them by construction. The"
        " `none` rows run the same algorithms without attackers: clustering"
        " also personalises on Dirichlet 0.5, so an attacked row's honest"
        " accuracy is read against its algorithm's `none` row, not against"
        " FedAvg's (the split measures are n/a there: no attacker to split).",
        "",
        "*ARI*: the final clustering against the attacker/honest split; it is"
        " 1 only for two clusters, the attackers' and the honest clients', so"
        " an honest side split in several clusters scores less even with every"
        " attacker isolated (FedAvg's one cluster: 0). *alone*: the share of"
        " attackers in clusters without an honest member; *exposed*: the"
        " share of honest clients whose cluster holds an attacker; *clusters*:"
        " how many the final round has; *unassigned*: clients the final round"
        " left without a cluster, out of ARI, *alone* and *exposed*; *honest"
        " acc*: the honest clients' final mean accuracy, over those with one;"
        " *no acc*: the share of honest clients without one (their last"
        " evaluation failed, as when their cluster's model diverged), whom"
        " *honest acc* leaves out.",
        "",
        "| attack | algorithm | ARI | alone | exposed | clusters | unassigned"
        " | honest acc | no acc |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    metrics = (
        "attacker_ari",
        "attackers_alone",
        "honest_with_attackers",
        "n_clusters_final",
        "unassigned",
        "honest_acc",
    )
    for attack in CLUSTERED_ATTACKS:
        clustered = by_key.get(f"clustered__{attack}")
        fedavg = by_key.get(key(attack, BEST_DEFENCE))
        for algorithm, outcome in [
            *((a, clustered) for a in CLUSTERED),
            ("fedavg", fedavg),
        ]:
            if outcome is None and algorithm != "fedavg":  # the table's cell
                missing.append(f"clustered__{attack} ({algorithm})")
            name = algorithm if algorithm != "fedavg" else f"fedavg + {BEST_DEFENCE}"
            cells = [
                _cell(outcome, algorithm, m, 1 if m in COUNTS else 3) for m in metrics
            ]
            cells.append(
                _shown(outcome, algorithm, _honest_without_accuracy(outcome))
                if outcome is not None and algorithm in outcome.seed_summaries
                else "—"
            )
            lines.append(f"| `{attack}` | {name} | " + " | ".join(cells) + " |")
    return lines
