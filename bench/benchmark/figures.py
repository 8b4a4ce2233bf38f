"""The benchmark's figures: accuracy per round for every algorithm of a
setting with its 95 % band over the seeds, and accuracy against ARI."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display where the page is written; before pyplot
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402
from reproduce.runner import Outcome, mean_acc  # noqa: E402

from clusterfed.seeds import interval  # noqa: E402

# 16 algorithms: tab20's pairs are hard to tell apart, so colour and line style.
_STYLES = ("-", "--", ":", "-.")


def accuracy_per_round(outcome: Outcome, path: Path) -> Path:
    """Mean client accuracy per round of every algorithm: the mean over the
    seeds, and a band of its 95 % Student t interval (none with one seed)."""
    fig, ax = plt.subplots(figsize=(8, 4.8))
    colours = plt.get_cmap("tab10")
    for n, (name, by_seed) in enumerate(outcome.seed_rows.items()):
        length = min(len(rows) for rows in by_seed.values())
        rounds = [r["round"] for r in next(iter(by_seed.values()))[:length]]
        per_round = [
            interval(
                [v for rows in by_seed.values() if (v := mean_acc(rows[i])) is not None]
            )
            for i in range(length)
        ]
        mean = np.array([np.nan if i.mean is None else i.mean for i in per_round])
        colour = colours(n % 10)
        ax.plot(rounds, mean, _STYLES[n // 10 % 4], color=colour, label=name)
        if all(i.low is not None for i in per_round):
            low = [i.low for i in per_round]
            high = [i.high for i in per_round]
            ax.fill_between(rounds, low, high, color=colour, alpha=0.15)
    ax.set(xlabel="round", ylabel="mean client accuracy", ylim=(0, 1))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(outcome.experiment.key)
    ax.legend(fontsize="x-small", ncol=2, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


def accuracy_against_ari(outcomes: Sequence[Outcome], path: Path) -> Path:
    """Final mean client accuracy against final ARI: one point per algorithm
    and setting (the seeds' means), a marker per setting."""
    fig, ax = plt.subplots(figsize=(7, 5))
    markers = "osD^v<>"
    for k, outcome in enumerate(outcomes):
        for name, by_seed in outcome.seed_summaries.items():
            aris = [
                s["ari_final"]
                for s in by_seed.values()
                if s.get("ari_final") is not None
            ]
            accs = [
                s["final_mean_acc"]
                for s in by_seed.values()
                if s.get("final_mean_acc") is not None
            ]
            if not aris or not accs:
                continue
            x, y = float(np.mean(aris)), float(np.mean(accs))
            ax.scatter(x, y, marker=markers[k % len(markers)], color="0.3")
            ax.annotate(
                name, (x, y), fontsize=6, xytext=(3, 2), textcoords="offset points"
            )
        ax.scatter(
            [],
            [],
            marker=markers[k % len(markers)],
            color="0.3",
            label=outcome.experiment.key,
        )
    ax.set(xlabel="final ARI", ylabel="final mean client accuracy")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path
