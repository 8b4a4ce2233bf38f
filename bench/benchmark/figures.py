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


def ring_sizes(
    points: Sequence[tuple[float, float]], near: float = 0.02
) -> list[float]:
    """A marker area for each point so that points drawn at (nearly) one place
    stay visible: hollow markers, each a ring larger than every earlier one
    within `near` of it (in each axis; give coordinates scaled to the axes'
    spans)."""
    rings: list[int] = []
    for i, (x, y) in enumerate(points):
        below = [
            rings[j]
            for j, (px, py) in enumerate(points[:i])
            if abs(x - px) <= near and abs(y - py) <= near
        ]
        rings.append(1 + max(below, default=-1))
    return [(6.0 + 3.5 * ring) ** 2 for ring in rings]  # the diameter grows


def _means(outcome: Outcome) -> list[tuple[str, float, float]]:
    """Each algorithm's mean final ARI and accuracy over its seeds (those
    with both)."""
    placed = []
    for name, by_seed in outcome.seed_summaries.items():
        aris = [
            s["ari_final"] for s in by_seed.values() if s.get("ari_final") is not None
        ]
        accs = [
            s["final_mean_acc"]
            for s in by_seed.values()
            if s.get("final_mean_acc") is not None
        ]
        if aris and accs:
            placed.append((name, float(np.mean(aris)), float(np.mean(accs))))
    return placed


def accuracy_against_ari(outcomes: Sequence[Outcome], path: Path) -> Path:
    """Final mean client accuracy against final ARI (the seeds' means): a
    panel per setting, one point per algorithm, told apart by colour and
    marker. Points are hollow and grow where algorithms agree, so that each
    one stays visible as a ring around the others."""
    names = list(dict.fromkeys(n for o in outcomes for n in o.seed_summaries))
    panels = [_means(o) for o in outcomes]
    accuracies = [y for placed in panels for _, _, y in placed] or [0.0, 1.0]
    # Rings are sized in the axes' spans: ARI's 0-1, the accuracy the panels share.
    low, span = min(accuracies), max(max(accuracies) - min(accuracies), 0.05)
    colours = plt.get_cmap("tab10")
    markers = "osD^v<>"
    fig, axes = plt.subplots(
        1,
        max(len(outcomes), 1),
        figsize=(3.2 * max(len(outcomes), 1) + 1.6, 3.6),
        sharey=True,
        squeeze=False,
    )
    for ax, outcome, placed in zip(axes[0], outcomes, panels, strict=False):
        sizes = ring_sizes([(x, (y - low) / span) for _, x, y in placed])
        for (name, x, y), size in zip(placed, sizes, strict=True):
            n = names.index(name)
            ax.scatter(
                x,
                y,
                s=size,
                marker=markers[n // 10 % len(markers)],
                facecolors="none",
                edgecolors=colours(n % 10),
                linewidths=1.2,
                clip_on=False,
            )
        ax.set(xlabel="final ARI", xlim=(-0.08, 1.08), title=outcome.experiment.key)
    axes[0][0].set_ylabel("final mean client accuracy")
    handles = [
        plt.Line2D(
            [],
            [],
            linestyle="",
            marker=markers[n // 10 % len(markers)],
            markerfacecolor="none",
            markeredgecolor=colours(n % 10),
            markeredgewidth=1.2,
            label=name,
        )
        for n, name in enumerate(names)
    ]
    fig.legend(handles=handles, fontsize="x-small", loc="center right")
    fig.tight_layout(rect=(0, 0, 1 - 1.25 / fig.get_figwidth(), 1))
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path
