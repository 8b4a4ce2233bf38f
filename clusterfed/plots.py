"""The plots of a run, drawn from its per-round rows (matplotlib, no screen).

Each plot draws all clients in one call and uses fixed margins: a run's plots
cost a fraction of a second, whatever its size.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

Row = dict[str, Any]
_MARGINS = {"left": 0.1, "right": 0.97, "top": 0.9, "bottom": 0.13}


def plot_run(out: Path, rows: Sequence[Row], title: str) -> list[Path]:
    """Write accuracy.png, clusters.png and clustering.png into `out`."""
    if not rows:
        return []
    rounds = np.array([r["round"] for r in rows])
    ids = sorted({c["id"] for r in rows for c in r["clients"]})
    return [
        _accuracy(out / "accuracy.png", rounds, _grid(rows, ids, "acc"), title),
        _clusters(out / "clusters.png", _grid(rows, ids, "cluster"), title),
        _clustering(out / "clustering.png", rounds, rows, title),
    ]


def _grid(rows: Sequence[Row], ids: list[int], key: str) -> np.ndarray:
    """clients × rounds of `key`, NaN where a client has no value."""
    index = {cid: i for i, cid in enumerate(ids)}
    grid = np.full((len(ids), len(rows)), np.nan)
    for j, row in enumerate(rows):
        for c in row["clients"]:
            if c[key] is not None:
                grid[index[c["id"]], j] = c[key]
    return grid


def _accuracy(path: Path, rounds: np.ndarray, accs: np.ndarray, title: str) -> Path:
    """Per-client accuracy in grey, the mean in black (DCFL Fig. 4)."""
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(rounds, accs.T, color="0.75", linewidth=0.8)
    counted = np.isfinite(accs).sum(axis=0)
    mean = np.where(
        counted > 0, np.nansum(accs, axis=0) / np.maximum(counted, 1), np.nan
    )
    ax.plot(rounds, mean, color="black", linewidth=2, label="mean")
    ax.set(xlabel="round", ylabel="client accuracy", ylim=(0, 1), title=title)
    ax.legend(loc="lower right")
    return _save(fig, path)


def _clusters(path: Path, clusters: np.ndarray, title: str) -> Path:
    """Each client's cluster per round, one colour per cluster id (ids past 20
    reuse colours); blank where a client had none."""
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.imshow(
        np.mod(clusters, 20),
        aspect="auto",
        interpolation="nearest",
        cmap="tab20",
        vmin=0,
        vmax=19,
    )
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(xlabel="round", ylabel="client", title=f"{title}: clusters (colour = id)")
    return _save(fig, path)


def _clustering(
    path: Path, rounds: np.ndarray, rows: Sequence[Row], title: str
) -> Path:
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for key in ("purity", "ari"):
        ax.plot(rounds, [np.nan if r[key] is None else r[key] for r in rows], label=key)
    ax.set(xlabel="round", ylim=(-0.05, 1.05), title=f"{title}: clustering quality")
    ax.legend(loc="lower right")
    return _save(fig, path)


def _save(fig: Any, path: Path) -> Path:
    fig.subplots_adjust(**_MARGINS)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
