"""How far honest updates stay from the `max_update_ratio` guard.

Runs a few built-in scenarios (digits) with a spy on the server's update
check and prints, per scenario, the largest and the median ‖δ‖ / max(‖w‖, 1)
of the accepted updates (δ the delta, w the model it was trained from), the
quantity `max_update_ratio` bounds.

    python bench/update_ratio.py
"""

from __future__ import annotations

import tempfile
from typing import Any

import numpy as np

import clusterfed
import clusterfed.actors.round as settling
from clusterfed.actors.validation import check_update

CASES: list[tuple[str, int, list[str]]] = [
    ("quickstart", 10, []),
    ("dcfl-dynamic", 8, []),
    ("dcfl-dynamic", 4, ["dp=off"]),
    ("cafa-mix", 6, []),
    ("ocfl-noniid2", 3, []),
    ("gradloss-fig2", 4, []),
]


def main() -> None:
    seen: list[float] = []

    def spy(payload: Any, plan: Any, *args: Any) -> str | None:
        problem = check_update(payload, plan, *args)
        if problem is None:
            base = plan.models[payload.cluster].astype(np.float64)
            delta = payload.delta.astype(np.float64)
            seen.append(float(np.linalg.norm(delta) / max(np.linalg.norm(base), 1.0)))
        return problem

    settling.check_update = spy  # type: ignore[assignment]
    print("| scenario | rounds | updates | largest ratio | median |")
    print("|---|---|---|---|---|")
    for name, rounds, overrides in CASES:
        seen.clear()
        with tempfile.TemporaryDirectory() as out:
            clusterfed.run(
                name, out=f"{out}/run", rounds=rounds, workers=1, overrides=overrides
            )
        label = f"{name}, {' '.join(overrides)}" if overrides else name
        print(
            f"| {label} | {rounds} | {len(seen)} | {max(seen):.3f}"
            f" | {float(np.median(seen)):.3f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
