"""Clustered algorithms in asynchronous mode on `dcfl-dynamic` (no DP),
against themselves in synchronous rounds, on the simulated clock.

    python bench/async_clusters.py [--out runs/async-clusters]

dcfl-dynamic's joins and drifts are keyed by rounds; an asynchronous row is
one aggregation, far shorter than a round, so here they are keyed by
simulated time instead, at the times a synchronous round r starts (r × one
round's 1.842 s): a client joins at round 10, 20 (18.4 s, 36.8 s) and a
random client drifts at round 5, 15, 25 (9.2 s, 27.6 s, 46.1 s); both modes
see the same events at the same simulated times.

Prints, for each run, the rows, the simulated time covered, the time to a
mean client accuracy of 0.8 (time_to_accuracy), the accuracy reached by
10, 20 and 40 simulated seconds, the last, the clusters and ARI at the end,
DCFL's re-clusterings and the staleness; draws accuracy against simulated time
into docs/figures/async-clusters.png. Never asserts.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

# The same reading of a curve at a simulated time as the stragglers' bench.
from async_stragglers import accuracy_at  # noqa: E402

import clusterfed  # noqa: E402
from clusterfed.scenarios import Drift, Join, load_scenario, with_overrides  # noqa: E402

ROUND_S = 1.842  # one synchronous round of dcfl-dynamic without DP, simulated
RUNS: dict[str, dict[str, Any]] = {
    "dcfl, sync": dict(algorithm="dcfl", rounds=30),
    "dcfl, async": dict(algorithm="dcfl", rounds=200, overrides=["mode=async"]),
    "ifca, sync": dict(algorithm="ifca", rounds=30),
    "ifca, async": dict(algorithm="ifca", rounds=120, overrides=["mode=async"]),
}
CHECKPOINTS = (10.0, 20.0, 40.0)
FIGURE = Path(__file__).resolve().parent.parent / "docs" / "figures"


def scenario() -> clusterfed.Scenario:
    """dcfl-dynamic without DP, its events on the simulated clock."""
    base = with_overrides(load_scenario("dcfl-dynamic"), ["dp=off"])
    return base.model_copy(
        update={
            "events": [
                Join(clock="time", start=10 * ROUND_S, every=10 * ROUND_S, until=40.0),
                Drift(
                    clock="time",
                    start=5 * ROUND_S,
                    every=10 * ROUND_S,
                    target="random",
                    to_group="other",
                ),
            ]
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="keep the run folders here")
    args = parser.parse_args()
    base = Path(args.out) if args.out else Path(tempfile.mkdtemp())
    fig, ax = plt.subplots(figsize=(7, 4))
    print(
        f"{'run':<12} {'rows':>5} {'sim s':>6} {'to 0.8':>7}"
        + "".join(f" {'acc@' + str(int(t)) + 's':>8}" for t in CHECKPOINTS)
        + f" {'last':>6} {'clusters':>8} {'ARI':>5} {'reclust':>7} {'τ mean':>6}"
        f" {'τ max':>5} {'wall s':>6}"
    )
    for label, options in RUNS.items():
        options = dict(options)
        chosen = with_overrides(
            scenario(), options.pop("overrides", []), algorithm=options["algorithm"]
        )
        result = clusterfed.run(
            chosen,
            out=base / label.replace(", ", "-"),
            overwrite=True,
            rounds=options["rounds"],
        )
        rows = result.rows
        times = [r["sim_time"] for r in rows]
        accs = [
            float(np.mean([c["acc"] for c in r["clients"] if c["acc"] is not None]))
            for r in rows
        ]
        ax.plot(times, accs, label=label)
        s = result.summary
        reached = s["time_to_accuracy"]
        at = [accuracy_at(times, accs, t) for t in CHECKPOINTS]
        recluster = sum(
            bool((r.get("strategy") or {}).get("reclustered")) for r in rows
        )
        tau = s.get("staleness") or {}
        ari = "-" if s["ari_final"] is None else f"{s['ari_final']:.2f}"
        tau_mean = "-" if not tau else f"{tau['mean']:.2f}"
        print(
            f"{label:<12} {len(rows):>5} {times[-1]:>6.1f}"
            f" {'-' if reached is None else f'{reached:.1f}':>7}"
            + "".join(f" {'-' if a is None else f'{a:.3f}':>8}" for a in at)
            + f" {accs[-1]:>6.3f} {s['n_clusters_final']!s:>8}"
            f" {ari:>5}"
            f" {recluster if label.startswith('dcfl') else '-'!s:>7}"
            f" {tau_mean:>6}"
            f" {tau.get('max', '-')!s:>5} {s['wall_s']:>6.1f}"
        )
    ax.axhline(0.8, color="0.5", linestyle=":", linewidth=1)
    ax.set(
        xlabel="simulated time (s)",
        ylabel="mean client accuracy",
        ylim=(0, 1),
        title="dcfl-dynamic (no DP), events on the simulated clock",
    )
    ax.legend(loc="lower right", fontsize="small")
    fig.tight_layout()
    FIGURE.mkdir(parents=True, exist_ok=True)
    fig.savefig(FIGURE / "async-clusters.png", dpi=150)
    print(f"figure: {FIGURE / 'async-clusters.png'}")


if __name__ == "__main__":
    main()
