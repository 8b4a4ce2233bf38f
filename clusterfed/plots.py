"""The plots of a run, drawn from its per-round rows (matplotlib, no screen)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

Row = dict[str, Any]


def plot_run(out: Path, rows: Sequence[Row], title: str) -> list[Path]:
    """Write accuracy.png, clusters.png and clustering.png into `out`."""
    if not rows:
        return []
    return [
        _accuracy(out / "accuracy.png", rows, title),
        _clusters(out / "clusters.png", rows, title),
        _clustering(out / "clustering.png", rows, title),
    ]


def _accuracy(path: Path, rows: Sequence[Row], title: str) -> Path:
    """Per-client accuracy in grey, the mean in black (DCFL Fig. 4)."""
    fig, ax = plt.subplots(figsize=(7, 4), layout="constrained")
    ids = sorted({c["id"] for r in rows for c in r["clients"]})
    rounds = [r["round"] for r in rows]
    for cid in ids:
        series = [_acc_of(r, cid) for r in rows]
        ax.plot(rounds, series, color="0.75", linewidth=0.8)
    means = [float(np.mean(accs)) if (accs := _accs(r)) else np.nan for r in rows]
    ax.plot(rounds, means, color="black", linewidth=2, label="mean")
    ax.set(xlabel="round", ylabel="client accuracy", ylim=(0, 1), title=title)
    ax.legend(loc="lower right")
    return _save(fig, path)


def _clusters(path: Path, rows: Sequence[Row], title: str) -> Path:
    """Each client's cluster per round (blank where it had none)."""
    ids = sorted({c["id"] for r in rows for c in r["clients"]})
    index = {cid: i for i, cid in enumerate(ids)}
    grid = np.full((len(ids), len(rows)), np.nan)
    for j, row in enumerate(rows):
        for c in row["clients"]:
            if c["cluster"] is not None:
                grid[index[c["id"]], j] = c["cluster"]
    fig, ax = plt.subplots(figsize=(7, max(2.5, len(ids) * 0.12)), layout="constrained")
    image = ax.imshow(grid, aspect="auto", interpolation="nearest", cmap="tab20")
    ax.set(xlabel="round", ylabel="client", title=f"{title}: cluster assignment")
    fig.colorbar(image, ax=ax, label="cluster")
    return _save(fig, path)


def _clustering(path: Path, rows: Sequence[Row], title: str) -> Path:
    fig, ax = plt.subplots(figsize=(7, 3.5), layout="constrained")
    rounds = [r["round"] for r in rows]
    for key in ("purity", "ari"):
        ax.plot(rounds, [np.nan if r[key] is None else r[key] for r in rows], label=key)
    ax.set(xlabel="round", ylim=(-0.05, 1.05), title=f"{title}: clustering quality")
    ax.legend(loc="lower right")
    return _save(fig, path)


def _acc_of(row: Row, cid: int) -> float:
    for c in row["clients"]:
        if c["id"] == cid and c["acc"] is not None:
            return float(c["acc"])
    return float("nan")


def _accs(row: Row) -> list[float]:
    return [c["acc"] for c in row["clients"] if c["acc"] is not None]


def _save(fig: Any, path: Path) -> Path:
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
