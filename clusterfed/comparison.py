"""`compare`: several algorithms on one scenario and seed, side by side."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusterfed.errors import ConfigError
from clusterfed.scenarios import Scenario, load_scenario, with_overrides

from .api import RunResult, run


@dataclass(frozen=True)
class CompareResult:
    out: Path
    runs: dict[str, RunResult]

    @property
    def summaries(self) -> dict[str, dict[str, Any]]:
        return {name: r.summary for name, r in self.runs.items()}


def compare(
    scenario: Scenario | str | Path,
    algorithms: Sequence[str],
    *,
    out: str | Path | None = None,
    rounds: int | None = None,
    clients: int | None = None,
    seed: int | None = None,
    overrides: Sequence[str] = (),
    **run_options: Any,
) -> CompareResult:
    """Run each of `algorithms` on the same scenario and seed.

    Writes `<out>/<algorithm>/` for each run and `<out>/comparison.json`
    (algorithm → summary). A plain `--set key=value` that names a parameter of
    some of the algorithms applies to those (e.g. `distance=cosine` for dcfl).
    """
    if not algorithms:
        raise ConfigError("compare needs at least one algorithm")
    if len(set(algorithms)) != len(algorithms):
        raise ConfigError(f"algorithms are listed twice: {', '.join(algorithms)}")
    base = with_overrides(
        load_scenario(scenario),
        overrides,
        algorithms=algorithms,
        rounds=rounds,
        clients=clients,
        seed=seed,
    )
    # Validate every algorithm's parameters before the first run starts.
    variants = {name: with_overrides(base, algorithm=name) for name in algorithms}
    folder = Path(out) if out is not None else default_compare_out(base)
    runs = {
        name: run(variant, out=folder / name, **run_options)
        for name, variant in variants.items()
    }
    result = CompareResult(folder, runs)
    (folder / "comparison.json").write_text(
        json.dumps(result.summaries, indent=2) + "\n"
    )
    return result


def default_compare_out(scenario: Scenario) -> Path:
    return Path("runs") / f"{scenario.name}-compare-seed{scenario.seed}"


def table(summaries: dict[str, dict[str, Any]]) -> str:
    """The comparison in the layout of DCFL's Table I, plus clustering columns."""
    header = (
        f"{'algorithm':<10} {'final acc':>10} {'± std':>7} {'avg acc':>9} {'± std':>7}"
        f" {'clusters':>8} {'ARI':>6} {'purity':>6} {'→p90':>5}"
    )
    lines = [header, "-" * len(header)]
    for name, s in summaries.items():
        lines.append(
            f"{name:<10} {_num(s['final_mean_acc']):>10} {_num(s['final_std_acc']):>7}"
            f" {_num(s['avg_mean_acc']):>9} {_num(s['avg_std_acc']):>7}"
            f" {s['n_clusters_final']!s:>8} {_num(s['ari_final'], 2):>6}"
            f" {_num(s['purity_final'], 2):>6} {s['rounds_to_purity90']!s:>5}"
        )
    return "\n".join(lines)


def _num(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"
