"""Synchronous FedAvg against FedAsync and FedBuff on `async-stragglers`
(quickstart, 4 of 20 clients 10× slower), on the simulated clock.

    python bench/async_stragglers.py [--out runs/async-stragglers]

Prints, for each run, the simulated time to a mean client accuracy of 0.8
(time_to_accuracy), the accuracy reached by 25, 50 and 100 simulated seconds,
and the final one; draws accuracy against simulated time into
docs/figures/async-stragglers.png. Never asserts.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import clusterfed  # noqa: E402

RUNS = {
    "fedavg, wait_all": dict(algorithm="fedavg", rounds=30),
    "fedavg, deadline 2 s": dict(
        algorithm="fedavg",
        rounds=60,
        overrides=["deadline.policy=deadline", "deadline.seconds=2"],
    ),
    "fedasync (α 0.6, polynomial)": dict(
        algorithm="fedasync", rounds=600, overrides=["mode=async"]
    ),
    "fedbuff (K 10)": dict(
        algorithm="fedbuff",
        rounds=80,
        overrides=["mode=async", "buffer_size=10"],
    ),
}
CHECKPOINTS = (25.0, 50.0, 100.0)
FIGURE = Path(__file__).resolve().parent.parent / "docs" / "figures"


def accuracy_at(times: list[float], accs: list[float], t: float) -> float | None:
    """The mean accuracy of the last row recorded by simulated time `t`."""
    before = [a for s, a in zip(times, accs, strict=True) if s <= t]
    return before[-1] if before else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="keep the run folders here")
    args = parser.parse_args()
    base = Path(args.out) if args.out else Path(tempfile.mkdtemp())
    fig, ax = plt.subplots(figsize=(7, 4))
    print(
        f"{'run':<30} {'rows':>5} {'sim s':>7} {'to 0.8 (s)':>10}"
        + "".join(f" {'acc@' + str(int(t)) + 's':>9}" for t in CHECKPOINTS)
        + f" {'final':>6}"
    )
    for label, options in RUNS.items():
        folder = base / label.split(",")[0].split(" ")[0] / label.replace(" ", "_")
        result = clusterfed.run(
            "async-stragglers",
            out=folder,
            overwrite=True,
            **options,  # type: ignore[arg-type]
        )
        times = [r["sim_time"] for r in result.rows]
        accs = [float(np.mean([c["acc"] for c in r["clients"]])) for r in result.rows]
        ax.plot(times, accs, label=label)
        reached = result.summary["time_to_accuracy"]
        at = [accuracy_at(times, accs, t) for t in CHECKPOINTS]
        print(
            f"{label:<30} {len(result.rows):>5} {times[-1]:>7.1f}"
            f" {reached if reached is None else round(reached, 1)!s:>10}"
            + "".join(f" {'-' if a is None else f'{a:.3f}':>9}" for a in at)
            + f" {accs[-1]:>6.3f}"
        )
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("mean client accuracy")
    ax.set_xlim(0, 150)
    ax.axhline(0.8, color="grey", lw=0.8, ls=":")
    ax.legend(loc="lower right")
    ax.set_title("async-stragglers: 4 of 20 clients 10× slower")
    fig.tight_layout()
    FIGURE.mkdir(parents=True, exist_ok=True)
    fig.savefig(FIGURE / "async-stragglers.png", dpi=120)
    print(f"figure: {FIGURE / 'async-stragglers.png'}")


if __name__ == "__main__":
    main()
