"""`compare`: several algorithms on one scenario and seed, side by side.

(The module is not named `compare`, so that `clusterfed.compare` stays the
function.)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusterfed.errors import ConfigError
from clusterfed.scenarios import Scenario, load_scenario, with_overrides

from .api import RunResult, run
from .folders import claim, default_folder, point_latest, safe_name


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
    overwrite: bool = False,
    **run_options: Any,
) -> CompareResult:
    """Run each of `algorithms` on the same scenario and seed.

    Writes `<out>/<algorithm>/` for each run and `<out>/comparison.json`
    (algorithm → summary); a `pkg.mod:Class` algorithm's folder and key is
    `pkg.mod.Class`. A plain `--set key=value` that names a parameter of
    some of the algorithms applies to those (e.g. `distance=cosine` for dcfl).
    `out` must be empty or missing unless `overwrite` (as for `run`); the
    default is a new folder `runs/<scenario>-compare-seed<seed>-<hash>-<time>`.
    Other keyword arguments go to `run`.
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
    if out is not None:
        folder = claim(Path(out), overwrite=overwrite)
    else:
        folder = claim(default_compare_out(base))
        point_latest(folder)
    runs = {
        safe_name(name): run(variant, out=folder / safe_name(name), **run_options)
        for name, variant in variants.items()
    }
    result = CompareResult(folder, runs)
    (folder / "comparison.json").write_text(
        json.dumps(result.summaries, indent=2) + "\n"
    )
    return result


def default_compare_out(scenario: Scenario) -> Path:
    """A new folder under runs/ named after what makes the comparison
    different (the hash covers every algorithm's parameters)."""
    return default_folder(
        scenario.name, "compare", scenario.seed, scenario.model_dump(mode="json")
    )


def table(summaries: dict[str, dict[str, Any]]) -> str:
    """The comparison in the layout of DCFL's Table I, plus clustering columns.

    Accuracies have four decimals, and `Δ final` is each final mean accuracy
    minus the first algorithm's, so that near-equal runs can be told apart
    (`=` where they are exactly equal).
    """
    width = max([9, *(len(name) for name in summaries)])
    header = (
        f"{'algorithm':<{width}} {'final acc':>10} {'± std':>7} {'Δ final':>8}"
        f" {'avg acc':>9} {'± std':>7} {'clusters':>8} {'ARI':>6} {'purity':>6}"
        f" {'→p90':>5}"
    )
    lines = [header, "-" * len(header)]
    first = next(iter(summaries.values()), {}).get("final_mean_acc")
    for name, s in summaries.items():
        lines.append(
            f"{name:<{width}} {_num(s['final_mean_acc']):>10}"
            f" {_num(s['final_std_acc']):>7}"
            f" {_delta(s['final_mean_acc'], first):>8}"
            f" {_num(s['avg_mean_acc']):>9} {_num(s['avg_std_acc']):>7}"
            f" {s['n_clusters_final']!s:>8} {_num(s['ari_final'], 2):>6}"
            f" {_num(s['purity_final'], 2):>6} {s['rounds_to_purity90']!s:>5}"
        )
    return "\n".join(lines)


def _num(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _delta(value: float | None, first: float | None) -> str:
    if value is None or first is None:
        return "-"
    if value == first:
        return "="
    return f"{value - first:+.4f}"
