"""The page's figures, drawn from the runs' per-round rows."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

# No display on the machines that write the page; must precede pyplot.
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .runner import Outcome  # noqa: E402


def fig4(outcome: Outcome, path: Path) -> Path:
    """DCFL Fig. 4: per-client accuracy in grey, the mean in black, per algorithm."""
    return client_accuracies(list(outcome.rows.items()), path)


def client_accuracies(
    panels: Sequence[tuple[str, list[dict[str, Any]]]], path: Path
) -> Path:
    """One panel per (title, rows): each client's accuracy per round in grey,
    the mean in black (the style of DCFL's Figs. 4 and 6)."""
    fig, axes = plt.subplots(
        1, len(panels), figsize=(4 * len(panels), 3.2), sharey=True
    )
    for ax, (name, rows) in zip(np.atleast_1d(axes), panels, strict=True):
        ids = sorted({c["id"] for r in rows for c in r["clients"]})
        grid = np.full((len(ids), len(rows)), np.nan)
        for j, r in enumerate(rows):
            for c in r["clients"]:
                if c["acc"] is not None:
                    grid[ids.index(c["id"]), j] = c["acc"]
        rounds = [r["round"] for r in rows]
        ax.plot(rounds, grid.T, color="0.75", linewidth=0.7)
        ax.plot(rounds, np.nanmean(grid, axis=0), color="black", linewidth=2)
        ax.set(title=name, xlabel="round", ylim=(0, 1))
    np.atleast_1d(axes)[0].set_ylabel("client accuracy")
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.16, top=0.88, wspace=0.08)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def per_round(
    panels: Sequence[tuple[str, Outcome]], field: str, label: str, path: Path
) -> Path:
    """One panel per outcome: `field` of rounds.jsonl per round, per algorithm."""
    fig, axes = plt.subplots(
        1, len(panels), figsize=(3.6 * len(panels), 3.0), squeeze=False
    )
    for ax, (title, outcome) in zip(axes[0], panels, strict=True):
        for name, rows in outcome.rows.items():
            ax.plot([r["round"] for r in rows], [r[field] for r in rows], label=name)
        ax.set(title=title, xlabel="round")
    axes[0][0].set_ylabel(label)
    axes[0][0].legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
