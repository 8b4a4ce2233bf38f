"""The plots of a run, drawn from its per-round rows (matplotlib, no screen).

Each figure is written as PNG (150 dpi) and PDF (vector) beside it, at a
size that reads on a slide or a paper column. Rounds are integers on every
axis; the rounds where events fired (joins, drifts, stragglers, crashes…)
are marked on the time axis, and the clients a drift moved are drawn in
colour in the accuracy plot. Each plot draws all clients in one call: a
run's plots cost a fraction of a second, whatever its size.

Accuracy is drawn against simulated time too (`accuracy_time`, and a panel
of `plots_runs.plot_runs`): asynchronous runs have no rounds, and a synchronous round
lasts as long as its slowest client.

`plots_runs.plot_runs` draws several runs (or a compare folder) side by
side: `clusterfed plot DIR [DIR…]`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.colors import BoundaryNorm, ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from .folders import note

Row = dict[str, Any]
FORMATS = ("png", "pdf")
# Events worth a mark on the time axis, with their colour.
EVENT_COLOURS = {
    "join": "tab:green",
    "leave": "tab:olive",
    "drift": "tab:red",
    "straggle": "tab:orange",
    "crash": "tab:purple",
    "recover": "tab:cyan",
    "network": "tab:brown",
}
# Distinct colours for cluster ids; past these, a colour bar instead.
_PALETTE = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
    "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#000075", "#aaffc3",
]  # fmt: skip


def plot_run(
    out: Path, rows: Sequence[Row], title: str, target: float | None = None
) -> list[Path]:
    """Write accuracy (over rounds and over simulated time), clusters and
    clustering (.png and .pdf) into `out`; `target`: the accuracy whose
    time_to_accuracy the summary reports, marked on the time plot."""
    if not rows:
        return []
    rounds = np.array([r["round"] for r in rows])
    ids = sorted({c["id"] for r in rows for c in r["clients"]})
    accs = _grid(rows, ids, "acc")
    return [
        *_accuracy(out / "accuracy.png", rounds, accs, rows, ids, title),
        *_accuracy_time(out / "accuracy_time.png", rows, accs, title, target),
        *_clusters(out / "clusters.png", rounds, rows, ids, title),
        *_clustering(out / "clustering.png", rounds, rows, title),
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


def _events(rows: Sequence[Row]) -> list[tuple[int, str, list[int]]]:
    """(round, kind, clients) of every event applied, in order."""
    return [
        (row["round"], str(e.get("kind")), list(e.get("clients") or []))
        for row in rows
        for e in row.get("events") or []
        if isinstance(e, dict)
    ]


def _mark_events(ax: Any, rows: Sequence[Row]) -> list[Patch]:
    """Vertical marks at the rounds events fired (drawn before the round's
    training, so just left of its point); legend handles of the kinds."""
    kinds: dict[str, str] = {}
    for round, kind, _ in _events(rows):
        colour = EVENT_COLOURS.get(kind)
        if colour is None:
            continue
        ax.axvline(round - 0.5, color=colour, alpha=0.5, linewidth=1, zorder=0)
        kinds[kind] = colour
    return [Patch(color=c, alpha=0.5, label=k) for k, c in kinds.items()]


def _mark_events_over_time(ax: Any, rows: Sequence[Row]) -> list[Patch]:
    """`_mark_events` against simulated time: an event fires as its round
    starts, when the round before it ended (0 s for the first)."""
    kinds: dict[str, str] = {}
    ends = {row["round"]: float(row["sim_time"]) for row in rows}
    for round, kind, _ in _events(rows):
        colour = EVENT_COLOURS.get(kind)
        if colour is None:
            continue
        ax.axvline(ends.get(round - 1, 0.0), color=colour, alpha=0.5, linewidth=1)
        kinds[kind] = colour
    return [Patch(color=c, alpha=0.5, label=k) for k, c in kinds.items()]


def _accuracy(
    path: Path,
    rounds: np.ndarray,
    accs: np.ndarray,
    rows: Sequence[Row],
    ids: list[int],
    title: str,
) -> list[Path]:
    """Per-client accuracy in grey, the mean in black (DCFL Fig. 4); clients
    that drifted in colour."""
    fig, ax = new_figure(figsize=(6.4, 4))
    ax.plot(rounds, accs.T, color="0.75", linewidth=0.8)
    drifted = sorted(
        {c for _, kind, cs in _events(rows) if kind == "drift" for c in cs}
    )
    index = {cid: i for i, cid in enumerate(ids)}
    for n, cid in enumerate(d for d in drifted if d in index):
        ax.plot(
            rounds,
            accs[index[cid]],
            color=_PALETTE[n % len(_PALETTE)],
            linewidth=1,
            label=f"client {cid} (drifted)" if n < 6 else None,
        )
    ax.plot(rounds, _mean_of(accs), color="black", linewidth=2, label="mean")
    marks = _mark_events(ax, rows)
    ax.set(xlabel="round", ylabel="client accuracy", ylim=(0, 1), title=title)
    _integer_rounds(ax)
    handles, _ = ax.get_legend_handles_labels()
    ax.legend(handles=[*handles, *marks], loc="lower right", fontsize="small")
    return _save(fig, path)


def _mean_of(accs: np.ndarray) -> np.ndarray:
    """The mean over clients of each round, NaN where none has a value."""
    counted = np.isfinite(accs).sum(axis=0)
    return np.where(
        counted > 0, np.nansum(accs, axis=0) / np.maximum(counted, 1), np.nan
    )


def _accuracy_time(
    path: Path,
    rows: Sequence[Row],
    accs: np.ndarray,
    title: str,
    target: float | None,
) -> list[Path]:
    """Per-client accuracy in grey and the mean in black against simulated
    time (a row is plotted at its end); the target accuracy dashed, and the
    time the mean first reached it marked."""
    times = np.array([float(r["sim_time"]) for r in rows])
    mean = _mean_of(accs)
    fig, ax = new_figure(figsize=(6.4, 4))
    ax.plot(times, accs.T, color="0.75", linewidth=0.8)
    ax.plot(times, mean, color="black", linewidth=2, label="mean")
    if target is not None:
        ax.axhline(target, color="tab:blue", linestyle="--", linewidth=1)
        reached = np.flatnonzero(np.nan_to_num(mean, nan=-1.0) >= target)
        label = f"target {target:g}"
        if reached.size:
            when = times[reached[0]]
            ax.axvline(when, color="tab:blue", linewidth=1, alpha=0.6)
            label += f", reached at {when:.4g} s"
        else:
            label += ", not reached"
        ax.plot([], [], color="tab:blue", linestyle="--", label=label)
    marks = _mark_events_over_time(ax, rows)
    ax.set(
        xlabel="simulated time (s)",
        ylabel="client accuracy",
        ylim=(0, 1),
        xlim=(0, max(float(times[-1]), 1e-9) * 1.02),
        title=f"{title}: over simulated time",
    )
    handles, _ = ax.get_legend_handles_labels()
    ax.legend(handles=[*handles, *marks], loc="lower right", fontsize="small")
    return _save(fig, path)


def _clusters(
    path: Path, rounds: np.ndarray, rows: Sequence[Row], ids: list[int], title: str
) -> list[Path]:
    """Each client's cluster per round (blank where it had none), with the
    ground-truth group of each client (its last) in a strip beside it."""
    clusters = _grid(rows, ids, "cluster")
    groups = _grid(rows, ids, "group")
    truth = np.array([_last(g) for g in groups])
    fig, (strip, ax) = new_figure(
        1,
        2,
        figsize=(7, 4.2),
        sharey=True,
        gridspec_kw={"width_ratios": [1, 14], "wspace": 0.04},
    )
    found = sorted({int(v) for v in clusters[np.isfinite(clusters)]})
    extent = (rounds[0] - 0.5, rounds[-1] + 0.5, len(ids) - 0.5, -0.5)
    if len(found) <= len(_PALETTE):
        # One distinct colour per cluster id, named in a legend.
        code = {cid: i for i, cid in enumerate(found)}
        shown = np.full(clusters.shape, np.nan)
        for cid, i in code.items():
            shown[clusters == cid] = i
        cmap = ListedColormap(_PALETTE[: max(len(found), 1)])
        norm = BoundaryNorm(np.arange(-0.5, max(len(found), 1)), cmap.N)
        ax.imshow(
            shown,
            aspect="auto",
            interpolation="nearest",
            cmap=cmap,
            norm=norm,
            extent=extent,
        )
        ax.legend(
            handles=[Patch(color=_PALETTE[i], label=str(c)) for c, i in code.items()],
            title="cluster",
            loc="upper left",
            bbox_to_anchor=(1.01, 1),
            fontsize="small",
        )
    else:
        image = ax.imshow(
            clusters,
            aspect="auto",
            interpolation="nearest",
            cmap="viridis",
            extent=extent,
        )
        fig.colorbar(image, ax=ax, label="cluster id")
    strip.imshow(
        truth[:, None],
        aspect="auto",
        interpolation="nearest",
        cmap="Greys",
        extent=(-0.5, 0.5, len(ids) - 0.5, -0.5),
    )
    strip.set_xticks([0], ["truth"])
    strip.set_ylabel("client")
    strip.yaxis.set_major_locator(integer_ticks())
    _mark_events(ax, rows)
    ax.set(xlabel="round", title=f"{title}: clusters")
    _integer_rounds(ax)
    fig.subplots_adjust(left=0.09, right=0.86, top=0.9, bottom=0.13)
    return _save(fig, path, margins=False)


def _last(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(finite[-1]) if finite.size else np.nan


def _clustering(
    path: Path, rounds: np.ndarray, rows: Sequence[Row], title: str
) -> list[Path]:
    """Purity (thick, behind) and ARI (dashed, in front): both show when equal."""
    fig, ax = new_figure(figsize=(6.4, 3.6))
    styles: dict[str, dict[str, Any]] = {
        "purity": {"linewidth": 3, "alpha": 0.6},
        "ari": {"linewidth": 1.5, "linestyle": "--"},
    }
    for key, style in styles.items():
        values = [np.nan if r[key] is None else r[key] for r in rows]
        ax.plot(rounds, values, label=key, **style)
    marks = _mark_events(ax, rows)
    ax.set(
        xlabel="round",
        ylabel="score against the ground truth",
        ylim=(-0.05, 1.05),
        title=f"{title}: clustering quality",
    )
    _integer_rounds(ax)
    handles, _ = ax.get_legend_handles_labels()
    ax.legend(handles=[*handles, *marks], loc="lower right", fontsize="small")
    return _save(fig, path)


def _integer_rounds(ax: Any) -> None:
    ax.xaxis.set_major_locator(integer_ticks())


def integer_ticks() -> MaxNLocator:
    """Integer ticks even where the view holds one integer (a count that never
    changes: matplotlib's default falls back to 0.945 … 1.050 there)."""
    return MaxNLocator(integer=True, min_n_ticks=1)


def integer_counts(ax: Any) -> None:
    """A y axis of counts: integer ticks, and at least one unit either side
    of a count that never changes."""
    ax.yaxis.set_major_locator(integer_ticks())
    low, high = ax.get_ylim()
    if high - low < 2:
        middle = round((low + high) / 2)
        ax.set_ylim(middle - 1, middle + 1)


def _save(fig: Any, path: Path, *, margins: bool = True) -> list[Path]:
    """`path` (PNG) and the same figure in the other FORMATS beside it."""
    if margins:
        fig.tight_layout()
    written = []
    for fmt in FORMATS:
        target = path.with_suffix(f".{fmt}")
        # Listed in a run folder's marker first, so --overwrite replaces it.
        note(target.parent, target.name)
        fig.savefig(target, dpi=150)
        written.append(target)
    return written


def new_figure(*grid: int, figsize: tuple[float, float], **options: Any) -> Any:
    """A figure and its axes, as `pyplot.subplots` gives them, drawn without
    pyplot: a run never touches the backend or the figures of its caller (a
    notebook's inline plots)."""
    fig = Figure(figsize=figsize)
    return fig, fig.subplots(*grid, **options)
