"""Reproduce every paper experiment and write docs/REPRODUCTION.md.

Runs each built-in paper scenario with the algorithms its paper compares, on
the embedded digits (and on Fashion-MNIST where the Debian package's files are
present, unless --quick), then writes the page: for each paper its own table
(quoted from the paper) beside clusterfed's, the command and seed of every
run, and the figures. Every clusterfed number on the page comes from a run
this script performs.

    python bench/reproduce.py            # the papers' rounds (about an hour)
    python bench/reproduce.py --quick    # fewer rounds, digits only (< 10 min)
"""

from __future__ import annotations

import argparse
import json
import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from clusterfed.compare import compare  # noqa: E402
from clusterfed.data.datasets import available  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Experiment:
    """One `clusterfed compare`: a scenario, its algorithms, its overrides."""

    key: str
    scenario: str
    algorithms: tuple[str, ...]
    sets: tuple[str, ...] = ()
    quick_rounds: int | None = None  # rounds in --quick mode (None: skip there)
    quick_algorithms: tuple[str, ...] | None = None  # --quick runs only these

    def algorithms_for(self, quick: bool) -> tuple[str, ...]:
        return (self.quick_algorithms or self.algorithms) if quick else self.algorithms

    def command(self, quick: bool, dataset: str) -> str:
        parts = [
            "clusterfed",
            "compare",
            self.scenario,
            "--algorithms",
            ",".join(self.algorithms_for(quick)),
        ]
        if quick and self.quick_rounds is not None:
            parts += ["--rounds", str(self.quick_rounds)]
        for assignment in self.overrides(dataset):
            parts += ["--set", assignment]
        return shlex.join(parts)

    def overrides(self, dataset: str) -> list[str]:
        on = [] if dataset == "digits" else [f"dataset.name={dataset}"]
        return [*self.sets, *on]


@dataclass
class Outcome:
    experiment: Experiment
    dataset: str
    seconds: float
    summaries: dict[str, dict[str, Any]]
    rows: dict[str, list[dict[str, Any]]]
    out: Path
    quick: bool


# The paper's Fig. 5 settings besides Table I's (joins, drift, DP) and its
# no-DP twin, which --quick also runs.
DCFL_SETTINGS = {
    "no joins, no drift, no DP": ("events=[]", "dp=off"),
    "joins, no drift, DP": ('events=[{kind = "join", start = 10, every = 10}]',),
    "no joins, drift, DP": (
        'events=[{kind = "drift", start = 5, every = 10, target = "random",'
        ' to_group = "other"}]',
    ),
}

# --quick keeps the rounds where each paper's effect shows on digits: DCFL's
# first drift (round 5) and join (round 10); OCFL's clustering round (0) and
# 20 rounds of FedAvg at a 10 % client fraction; the
# FedAC splits (rounds 32-44 at full length); gradloss reaching purity 0.9
# (round 11); CAFA's CBCC (round 0).
EXPERIMENTS = [
    Experiment("dcfl-table1", "dcfl-dynamic", ("dcfl", "cfl", "fedavg"), (), 12),
    Experiment(
        "dcfl-table1-nodp", "dcfl-dynamic", ("dcfl", "cfl", "fedavg"), ("dp=off",), 12
    ),
    *(
        Experiment(
            f"dcfl-fig5-{i}", "dcfl-dynamic", ("dcfl", "cfl", "fedavg"), sets, None
        )
        for i, sets in enumerate(DCFL_SETTINGS.values())
    ),
    *(
        Experiment(
            f"dcfl-table2-{d}",
            "dcfl-dynamic",
            ("dcfl",),
            (f"distance={d}", "dp=off"),
            12,
        )
        for d in ("divergence", "cosine", "euclidean")
    ),
    *(
        Experiment(s, s, ("ocfl", "fedavg"), (), 20)
        for s in ("ocfl-iid", "ocfl-noniid", "ocfl-noniid2")
    ),
    *(
        Experiment(s, s, ("fedac", "fedacp", "fedavg"), (), 45, ("fedac", "fedavg"))
        for s in ("fedac-iid", "fedac-2clusters", "fedac-3clusters", "fedac-4clusters")
    ),
    Experiment("gradloss-fig2", "gradloss-fig2", ("gradloss", "ifca"), (), 15),
    *(
        Experiment(s, s, ("cafa", "fedavg", "fedprox"), (), 10)
        for s in ("cafa-mix", "cafa-mix50")
    ),
]


def run_all(
    quick: bool, out: Path, only: Sequence[str], datasets: Sequence[str]
) -> list[Outcome]:
    outcomes = []
    for dataset in datasets:
        for exp in EXPERIMENTS:
            if only and not any(exp.key.startswith(o) for o in only):
                continue
            if quick and exp.quick_rounds is None:
                continue
            folder = out / dataset / exp.key
            start = time.perf_counter()
            result = compare(
                exp.scenario,
                list(exp.algorithms_for(quick)),
                out=folder,
                rounds=exp.quick_rounds if quick else None,
                overrides=exp.overrides(dataset),
            )
            seconds = time.perf_counter() - start
            rows = {name: r.rows for name, r in result.runs.items()}
            outcomes.append(
                Outcome(exp, dataset, seconds, result.summaries, rows, folder, quick)
            )
            print(f"{dataset:<14} {exp.key:<22} {seconds:7.1f} s", flush=True)
    return outcomes


# -- the papers' own numbers, quoted from ../shared/papers --------------------

DCFL_TABLE1 = {  # Augello et al., Table I: final avg/std, training average avg/std
    "dcfl": (0.72, 0.04, 0.61, 0.08),
    "cfl": (0.64, 0.08, 0.50, 0.12),
    "fedavg": (0.54, 0.12, 0.44, 0.13),
}
DCFL_TABLE2 = {
    "complete": (0.72, 0.04, 0.61, 0.08),
    "divergence": (0.61, 0.09, 0.51, 0.12),
    "cosine": (0.60, 0.07, 0.56, 0.09),
    "euclidean": (0.56, 0.12, 0.52, 0.14),
}
OCFL_TABLE2_MLP = {  # Lu et al., Table 2, MNIST, MLP, FedAvg after 100 rounds
    "ocfl-iid": 0.9152,
    "ocfl-noniid": 0.8797,
    "ocfl-noniid2": 0.8069,
}
# Zhang et al., Tables II-III, case 1 (20 clients): k, acc, precision, recall, F1
CAFA_CBCC = {
    "cafa-mix": (9, 0.95, 0.83, 1.00, 0.91),
    "cafa-mix50": (7, 0.95, 0.91, 1.00, 0.95),
}
CAFA_BEST = {"fedavg": 0.821, "fedprox": 0.8042, "cafa": 0.8345}  # Table V


def _f(value: Any, digits: int = 3) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_f(v) for v in row) + " |" for row in rows]
    return lines


def _best_mean(rows: list[dict[str, Any]]) -> float:
    means = [
        np.mean([c["acc"] for c in r["clients"] if c["acc"] is not None])
        for r in rows
        if any(c["acc"] is not None for c in r["clients"])
    ]
    return float(max(means))


def _provenance(*outcomes: Outcome) -> list[str]:
    """The commands behind a table, with seed, dataset, time and folder."""
    lines = ["", "Run by:", ""]
    for o in outcomes:
        where = o.out.relative_to(ROOT) if o.out.is_relative_to(ROOT) else o.out
        command = o.experiment.command(o.quick, o.dataset)
        lines.append(
            f"- `{command}` — seed 0, dataset {o.dataset}, {o.seconds:.0f} s;"
            f" results in `{where}`."
        )
    return [*lines, ""]


def _fig4(outcome: Outcome, path: Path) -> Path:
    """DCFL Fig. 4: per-client accuracy in grey, the mean in black, per algorithm."""
    names = list(outcome.rows)
    fig, axes = plt.subplots(1, len(names), figsize=(4 * len(names), 3.2), sharey=True)
    for ax, name in zip(np.atleast_1d(axes), names, strict=True):
        rows = outcome.rows[name]
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


DATASET_WORDS = {
    "digits": "the embedded digits (8×8 images, 1,797 of them)",
    "fashion_mnist": "Fashion-MNIST (28×28 images, 70,000 of them)",
}


def write_page(
    outcomes: list[Outcome], quick: bool, page: Path, seconds: float
) -> None:
    by_key = {(o.dataset, o.experiment.key): o for o in outcomes}
    datasets = tuple(sorted({o.dataset for o in outcomes}))
    figures = page.parent / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    mode = "fewer rounds, digits only" if quick else "the papers' rounds"
    lines = [
        "# Reproducing the papers",
        "",
        "Generated by `python bench/reproduce.py"
        + (" --quick" if quick else "")
        + f"` ({mode}); do not edit by hand. Each section puts the paper's own"
        " table (quoted from the paper) beside clusterfed's, from runs on "
        + " and ".join(DATASET_WORDS.get(d, d) for d in datasets)
        + " — not the paper's dataset"
        " — so numbers differ in scale; what should carry over is the ordering"
        " and the clustering behaviour. Where it does not, the section says so"
        " (each such sentence is computed from the numbers above it).",
        "",
        f"All runs together took {seconds / 60:.1f} minutes on the machine that"
        " wrote this page.",
        "",
    ]
    for dataset in datasets:
        lines += [f"## Dataset: {dataset}", ""]
        lines += _dcfl(by_key, dataset, figures)
        lines += _ocfl(by_key, dataset)
        lines += _fedac(by_key, dataset, figures)
        lines += _gradloss(by_key, dataset, figures)
        lines += _cafa(by_key, dataset)
    page.write_text("\n".join(lines) + "\n")


TABLE1_HEADER = [
    "algorithm",
    "paper final",
    "± std",
    "paper avg",
    "± std",
    "clusterfed final",
    "± std",
    "clusterfed avg",
    "± std",
]


def _table1_rows(
    paper: dict[str, tuple[float, ...]], ours: dict[str, dict[str, Any]]
) -> list[list[Any]]:
    return [
        [
            name,
            *paper[name],
            s["final_mean_acc"],
            s["final_std_acc"],
            s["avg_mean_acc"],
            s["avg_std_acc"],
        ]
        for name, s in ours.items()
    ]


def _dcfl(by_key: dict[Any, Outcome], dataset: str, figures: Path) -> list[str]:
    main = by_key.get((dataset, "dcfl-table1"))
    if main is None:
        return []
    lines = [
        "### DCFL (Augello et al.): Table I — dynamic setting with DP",
        "",
        "Rotated Dirichlet(1) clients, a join every 10 rounds, drift from round 5"
        " every 10 rounds, local DP ε = 10, δ = 1e-5. Final and training-average"
        " mean ± std of client accuracy.",
        "",
        *_table(TABLE1_HEADER, _table1_rows(DCFL_TABLE1, main.summaries)),
        "",
        *_dcfl_verdict(main),
    ]
    lines += _provenance(main)
    fig = _fig4(main, figures / f"dcfl-fig4-{dataset}.png")
    lines += [f"![DCFL Fig. 4 on {dataset}](figures/{fig.name})", ""]
    nodp = by_key.get((dataset, "dcfl-table1-nodp"))
    if nodp is not None:
        lines += [
            "### DCFL: Table I without DP",
            "",
            "The same scenario with `dp=off` (the paper's numbers are still its"
            " DP ones, for reference).",
            "",
            *_table(TABLE1_HEADER, _table1_rows(DCFL_TABLE1, nodp.summaries)),
            "",
            *_dcfl_verdict(nodp),
        ]
        lines += _provenance(nodp)
        fig = _fig4(nodp, figures / f"dcfl-fig4-nodp-{dataset}.png")
        lines += [f"![DCFL Fig. 4 without DP on {dataset}](figures/{fig.name})", ""]
    if nodp is None:
        return lines
    ablation = {"complete": nodp.summaries["dcfl"]} | {
        d: by_key[(dataset, f"dcfl-table2-{d}")].summaries["dcfl"]
        for d in ("divergence", "cosine", "euclidean")
        if (dataset, f"dcfl-table2-{d}") in by_key
    }
    lines += [
        "### DCFL: Table II — distance ablation (without DP)",
        "",
        "Without DP, where the distances have a signal to tell apart (with DP on"
        " digits every variant is near the floor of Table I); the paper's numbers"
        " are its DP ones.",
        "",
        *_table(["distance", *TABLE1_HEADER[1:]], _table1_rows(DCFL_TABLE2, ablation)),
    ]
    lines += _provenance(
        *(
            by_key[(dataset, f"dcfl-table2-{d}")]
            for d in ("divergence", "cosine", "euclidean")
            if (dataset, f"dcfl-table2-{d}") in by_key
        )
    )
    settings = [
        (label, by_key.get((dataset, f"dcfl-fig5-{i}")))
        for i, label in enumerate(DCFL_SETTINGS)
    ]
    settings = [(label, o) for label, o in settings if o is not None]
    if settings:
        settings += [
            ("joins, drift, DP (Table I)", main),
            ("joins, drift, no DP", nodp),
        ]
        lines += [
            "### DCFL: Fig. 5 settings — with and without new clients, drift and DP",
            "",
            "Final mean client accuracy (training average in brackets). The paper"
            " plots these and states that DCFL always matches or beats the others.",
            "",
        ]
        lines += _table(
            ["setting", *main.summaries],
            [
                [label, *(_final_and_avg(o.summaries[a]) for a in o.summaries)]
                for label, o in settings
            ],
        )
        lines += _provenance(*(o for _, o in settings[: len(DCFL_SETTINGS)]))
    return lines


def _final_and_avg(summary: dict[str, Any]) -> str:
    return f"{summary['final_mean_acc']:.3f} ({summary['avg_mean_acc']:.3f})"


def _dcfl_verdict(main: Outcome) -> list[str]:
    s = main.summaries
    final = {a: s[a]["final_mean_acc"] for a in s}
    std = {a: s[a]["final_std_acc"] for a in s}
    holds = (
        final["dcfl"] > final["fedavg"]
        and final["dcfl"] >= final["cfl"]
        and std["dcfl"] == min(std.values())
    )
    text = (
        "The paper's ordering holds here: DCFL's final mean is above FedAvg's and"
        " not below CFL's, with the lowest spread."
        if holds
        else "The paper's ordering (DCFL above FedAvg and not below CFL, lowest"
        " spread) does NOT hold in this run; bench/RESULTS.md (DCFL section) says"
        " what we found about why."
    )
    return [text, ""]


def _ocfl(by_key: dict[Any, Outcome], dataset: str) -> list[str]:
    found = [(s, by_key.get((dataset, s))) for s in OCFL_TABLE2_MLP]
    found = [(s, o) for s, o in found if o is not None]
    if not found:
        return []
    lines = [
        "### OCFL (Lu et al.): Table 2 and the clustering round",
        "",
        "The paper's Table 2: FedAvg's test accuracy with an MLP on MNIST after"
        " 100 rounds for IID, non-IID (≈2 labels per client) and non-IID2 (≈1 label);"
        " Fig. 4: ARI of the OPTICS clustering after one local epoch is 1.0.",
        "",
    ]
    rows = []
    for s, o in found:
        ari0 = o.rows["ocfl"][0]["ari"]
        rows.append(
            [
                s,
                OCFL_TABLE2_MLP[s],
                o.summaries["fedavg"]["final_mean_acc"],
                o.summaries["ocfl"]["final_mean_acc"],
                ari0,
                o.summaries["ocfl"]["n_clusters_final"],
            ]
        )
    lines += _table(
        [
            "scenario",
            "paper FedAvg",
            "clusterfed FedAvg",
            "clusterfed OCFL",
            "ARI after clustering round",
            "clusters",
        ],
        rows,
    )
    noniid2 = by_key.get((dataset, "ocfl-noniid2"))
    if noniid2 is not None:
        ari0 = noniid2.rows["ocfl"][0]["ari"]
        lines += [
            "",
            _verdict(
                ari0 >= 0.9,
                f"OCFL's clustering round recovers the one-label groups of"
                f" ocfl-noniid2 (ARI {ari0:.3f} ≥ 0.9; the paper reports 1.0).",
                f"OCFL's clustering round does NOT recover the one-label groups of"
                f" ocfl-noniid2 here (ARI {ari0:.3f} < 0.9; the paper reports 1.0).",
            ),
        ]
    fedavg = [o.summaries["fedavg"]["final_mean_acc"] for _, o in found]
    if len(found) == 3:
        lines += [
            "",
            _verdict(
                fedavg[0] > fedavg[1] > fedavg[2],
                "FedAvg loses accuracy from IID to non-IID to non-IID2, as in the"
                " paper's Table 2.",
                "FedAvg's accuracy does NOT fall from IID to non-IID to non-IID2 here"
                " as in the paper's Table 2 (digits, not MNIST, and fewer rounds"
                " than the paper's 100).",
            ),
        ]
    lines += _provenance(*(o for _, o in found))
    return lines


def _verdict(holds: bool, yes: str, no: str) -> str:
    return yes if holds else no


def _per_round(
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


def _fedac(by_key: dict[Any, Outcome], dataset: str, figures: Path) -> list[str]:
    names = ("fedac-iid", "fedac-2clusters", "fedac-3clusters", "fedac-4clusters")
    found = [(s, by_key.get((dataset, s))) for s in names]
    found = [(s, o) for s, o in found if o is not None]
    if not found:
        return []
    lines = [
        "### FedAC (Hsu et al.): split behaviour",
        "",
        "The paper (Figs. 3–7): in the IID case FedAC never splits and matches"
        " FedAvg; with 2, 3 and 4 class-group clusters it splits into them and"
        " beats FedAvg, FedACP less consistently. clusterfed: clusters at the end,"
        " purity against the class groups, final mean accuracy.",
        "",
    ]
    rows = []
    for s, o in found:
        for a in o.summaries:
            x = o.summaries[a]
            rows.append(
                [
                    s,
                    a,
                    x["n_clusters_final"],
                    x["purity_final"],
                    x["final_mean_acc"],
                    x["avg_mean_acc"],
                ]
            )
    lines += _table(
        ["scenario", "algorithm", "clusters", "purity", "final acc", "avg acc"], rows
    )
    lines.append("")
    for s, o in found:
        x = o.summaries["fedac"]
        if s == "fedac-iid":
            lines.append(
                _verdict(
                    x["n_clusters_final"] == 1,
                    "- fedac-iid: FedAC never splits, as in the paper.",
                    f"- fedac-iid: FedAC splits into {x['n_clusters_final']} clusters;"
                    " the paper's does not.",
                )
            )
        else:
            wanted = int(s.split("-")[1][0])
            found_all = x["n_clusters_final"] == wanted and x["purity_final"] >= 0.9
            above = x["final_mean_acc"] > o.summaries["fedavg"]["final_mean_acc"]
            lines.append(
                f"- {s}: FedAC ends with {x['n_clusters_final']} clusters for"
                f" {wanted} groups (purity {_f(x['purity_final'], 2)}): "
                + _verdict(
                    found_all,
                    "it finds the groups, as in the paper;",
                    "it does NOT find all the groups the paper's finds;",
                )
                + _verdict(
                    above,
                    " it ends above FedAvg, as in the paper.",
                    " it does NOT end above FedAvg here.",
                )
            )
    fig = _per_round(
        found, "n_clusters", "clusters", figures / f"fedac-clusters-{dataset}.png"
    )
    lines += ["", f"![Clusters per round on {dataset}](figures/{fig.name})"]
    lines += _provenance(*(o for _, o in found))
    return lines


def _gradloss(by_key: dict[Any, Outcome], dataset: str, figures: Path) -> list[str]:
    o = by_key.get((dataset, "gradloss-fig2"))
    if o is None:
        return []
    lines = [
        "### Joint gradient–loss clustering (Lin et al.): rounds to purity 0.9",
        "",
        "The paper (Fig. 4a, MNIST, MLP, λ = 0.2): gradloss reaches purity 0.9 in"
        " 99 % fewer iterations than IFCA. clusterfed (— means never within the run):",
        "",
    ]
    lines += _table(
        ["algorithm", "rounds to purity 0.9", "final purity", "final acc"],
        [
            [
                a,
                o.summaries[a]["rounds_to_purity90"],
                o.summaries[a]["purity_final"],
                o.summaries[a]["final_mean_acc"],
            ]
            for a in o.summaries
        ],
    )
    ours = o.summaries["gradloss"]["rounds_to_purity90"]
    ifca = o.summaries["ifca"]["rounds_to_purity90"]
    lines += [
        "",
        _verdict(
            ours is not None and (ifca is None or ours < ifca),
            "gradloss reaches purity 0.9 before IFCA, as in the paper.",
            "gradloss does NOT reach purity 0.9 before IFCA in this run.",
        ),
    ]
    fig = _per_round(
        [("gradloss-fig2", o)],
        "purity",
        "cluster purity",
        figures / f"gradloss-purity-{dataset}.png",
    )
    lines += ["", f"![Purity per round on {dataset}](figures/{fig.name})"]
    return lines + _provenance(o)


def _cafa(by_key: dict[Any, Outcome], dataset: str) -> list[str]:
    found = [(s, by_key.get((dataset, s))) for s in CAFA_CBCC]
    found = [(s, o) for s, o in found if o is not None]
    if not found:
        return []
    lines = [
        "### CAFA (Zhang et al.): Tables II–III (CBCC) and V (best accuracy)",
        "",
    ]
    rows = []
    for s, o in found:
        cbcc = o.summaries["cafa"].get("cbcc") or {}
        paper = CAFA_CBCC[s]
        rows.append(
            [
                s,
                *paper,
                cbcc.get("k"),
                cbcc.get("accuracy"),
                cbcc.get("precision"),
                cbcc.get("recall"),
                cbcc.get("f1"),
            ]
        )
    lines += _table(
        [
            "scenario",
            "paper k",
            "acc",
            "precision",
            "recall",
            "F1",
            "clusterfed k",
            "acc",
            "precision",
            "recall",
            "F1",
        ],
        rows,
    )
    lines += [
        "",
        "Best mean client accuracy over the rounds (paper: CIFAR-10, VGG19):",
        "",
    ]
    rows = []
    for s, o in found:
        for a in o.summaries:
            rows.append(
                [
                    s,
                    a,
                    CAFA_BEST[a],
                    _best_mean(o.rows[a]),
                    o.summaries[a]["avg_mean_acc"],
                ]
            )
    lines += _table(
        ["scenario", "algorithm", "paper best", "clusterfed best", "clusterfed avg"],
        rows,
    )
    lines.append("")
    for s, o in found:
        cbcc = o.summaries["cafa"].get("cbcc") or {}
        best = {a: _best_mean(o.rows[a]) for a in o.summaries}
        lines.append(
            _verdict(
                (cbcc.get("recall") or 0) >= 0.9 and (cbcc.get("accuracy") or 0) >= 0.9,
                f"- {s}: CBCC tells the IID clients apart (recall and accuracy ≥"
                " 0.9), as in the paper.",
                f"- {s}: CBCC does NOT reach recall and accuracy 0.9 here.",
            )
            + " "
            + _verdict(
                best["cafa"] == max(best.values()),
                "CAFA has the best accuracy, as in the paper's Table V.",
                "CAFA does NOT have the best accuracy here, unlike the paper's"
                " Table V: on digits every algorithm comes within a few points of"
                " the ceiling, and the paper's margins (under 3 points) are"
                " smaller than the spread between rounds.",
            )
        )
    lines += _provenance(*(o for _, o in found))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="fewer rounds, digits only"
    )
    parser.add_argument("--out", default="runs/reproduce", help="folder of the runs")
    parser.add_argument("--page", default=str(ROOT / "docs" / "REPRODUCTION.md"))
    parser.add_argument(
        "--only", nargs="*", default=[], help="experiment keys (prefixes)"
    )
    parser.add_argument(
        "--datasets",
        default=None,
        help="comma-separated (default: digits, and fashion_mnist when its files"
        " are there and not --quick)",
    )
    args = parser.parse_args()
    if args.datasets:
        datasets = args.datasets.split(",")
    elif args.quick or not available("fashion_mnist"):
        datasets = ["digits"]
    else:
        datasets = ["digits", "fashion_mnist"]
    start = time.perf_counter()
    outcomes = run_all(args.quick, Path(args.out).resolve(), args.only, datasets)
    write_page(outcomes, args.quick, Path(args.page), time.perf_counter() - start)
    (Path(args.out) / "reproduce.json").write_text(
        json.dumps(
            {f"{o.dataset}/{o.experiment.key}": o.summaries for o in outcomes}, indent=2
        )
    )
    print(f"wrote {args.page} in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
