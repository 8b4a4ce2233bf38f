"""`compare`: several algorithms on one scenario, side by side, on one seed
or on several (mean and confidence interval over the seeds).

The layout (DESIGN §8): on one seed `<out>/<algorithm>/` per run and
`<out>/comparison.json` (algorithm → summary). Over seeds, `<out>/seed<s>/`
is that one-seed folder for each seed, `<out>/comparison.json` maps every
run's folder (`seed<s>/<algorithm>`) to its summary, and `<out>/seeds.json`
holds the intervals over the seeds (`seeds.seeds_json`).

(The module is not named `compare`, so that `clusterfed.compare` stays the
function.)
"""

from __future__ import annotations

import contextlib
import json
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from clusterfed.actors.compute import check_device
from clusterfed.errors import ConfigError
from clusterfed.scenarios import Scenario, load_scenario, with_overrides

from .api import RunResult, checkpoint_of, resume, run
from .checkpoint import CHECKPOINT
from .diff import differences
from .folders import claim, default_folder, note, point_latest, safe_name
from .results import load
from .seeds import (
    Interval,
    resolve_seeds,
    seed_statistics,
    seeds_json,
    seeds_label,
)

Summary = dict[str, Any]
COMPARISON = "comparison.json"
SEEDS = "seeds.json"
FIGURE = "runs.png"  # every run drawn, as `clusterfed plot DIR` draws it


def seed_folder(out: Path, seed: int) -> Path:
    """The one-seed compare folder of `seed` in a comparison over seeds."""
    return out / f"seed{seed}"


def run_folder(out: Path, algorithm: str, seed: int | None = None) -> Path:
    """Where a comparison in `out` writes `algorithm`'s run: `<algorithm>/`
    on one seed (`seed` None), `seed<s>/<algorithm>/` over seeds."""
    base = out if seed is None else seed_folder(out, seed)
    return base / safe_name(algorithm)


@dataclass(frozen=True)
class CompareResult:
    """The runs of a comparison: algorithm → seed → run (`by_seed`).

    `seeds` is None for a comparison on one seed (`<out>/<algorithm>/`), the
    seeds asked for otherwise (`<out>/seed<s>/<algorithm>/`).
    """

    out: Path
    by_seed: dict[str, dict[int, RunResult]]
    seeds: tuple[int, ...] | None = None

    @property
    def runs(self) -> dict[str, RunResult]:
        """algorithm → its run, for a comparison on one seed.

        Raises:
            ValueError: the comparison ran several seeds (read `by_seed`).
        """
        if self.seeds is not None:
            raise ValueError("a comparison over seeds: read by_seed or statistics")
        return {name: next(iter(runs.values())) for name, runs in self.by_seed.items()}

    @property
    def summaries(self) -> dict[str, Summary]:
        """algorithm → summary, for a comparison on one seed (see `runs`)."""
        return {name: r.summary for name, r in self.runs.items()}

    @property
    def seed_summaries(self) -> dict[str, dict[int, Summary]]:
        """algorithm → seed → summary."""
        return {
            name: {seed: r.summary for seed, r in runs.items()}
            for name, runs in self.by_seed.items()
        }

    @property
    def statistics(self) -> dict[str, dict[str, Interval]]:
        """algorithm → metric → mean and 95 % Student t interval over seeds."""
        return {
            name: seed_statistics(summaries)
            for name, summaries in self.seed_summaries.items()
        }


def compare(
    scenario: Scenario | str | Path,
    algorithms: Sequence[str],
    *,
    out: str | Path | None = None,
    rounds: int | None = None,
    clients: int | None = None,
    seed: int | None = None,
    seeds: int | Sequence[int] | None = None,
    overrides: Sequence[str] = (),
    overwrite: bool = False,
    resume: bool = False,
    **run_options: Any,
) -> CompareResult:
    """Run each of `algorithms` on the same scenario and seed, or seeds.

    Writes `<out>/<algorithm>/` for each run and `<out>/comparison.json`
    (algorithm → summary); a `pkg.mod:Class` algorithm's folder and key is
    `pkg.mod.Class`. A plain `--set key=value` that names a parameter of
    some of the algorithms applies to those (e.g. `distance=cosine` for dcfl).
    `out` must be empty or missing unless `overwrite` (as for `run`); the
    default is a new folder `runs/<scenario>-compare-seed<seed>-<hash>-<time>`.
    Other keyword arguments go to `run`.

    With `seeds` (a count: 3 runs seeds 0, 1, 2; or a list of seeds) each
    seed gets a one-seed comparison of its own, `<out>/seed<s>/` (its runs
    `<out>/seed<s>/<algorithm>/` and its comparison.json); `<out>/comparison.json`
    maps each run's folder, `seed<s>/<algorithm>`, to its summary, and
    `<out>/seeds.json` holds per algorithm and metric the mean and 95 %
    Student t interval over the seeds and the paired differences with the
    first algorithm (`seeds.seeds_json`). Both are written again after each
    seed, so a comparison stopped midway is a whole one over the seeds that
    finished. The default folder is
    `runs/<scenario>-compare-seeds<seeds>-<hash>-<time>`.

    With `resume` the comparison goes on in `out`, which may hold one
    already: a run that finished there with the very settings it would be
    given now is read back, not run again; a run of those settings that
    stopped after a checkpoint (`checkpoint_every`) goes on from it, to the
    rows of a run never stopped (see `clusterfed.resume`); any other run is
    run afresh.

    Raises:
        ConfigError: no algorithms or one twice; `seed` with `seeds`; `out`
            not empty (without `overwrite` or `resume`); `resume` without
            `out` or with `overwrite`; with `resume`, a finished run in `out`
            of other settings (nothing has run then).
    """
    if not algorithms:
        raise ConfigError("compare needs at least one algorithm")
    if len(set(algorithms)) != len(algorithms):
        raise ConfigError(f"algorithms are listed twice: {', '.join(algorithms)}")
    if resume and (out is None or overwrite):
        raise ConfigError(
            "--resume goes on with the comparison in --out: name that folder,"
            " and leave out --overwrite (which would empty it)"
        )
    if seeds is not None and seed is not None:
        raise ConfigError(
            "seed= (--seed) and seeds= (--seeds) together: give one seed or"
            " several, not both"
        )
    chosen = None if seeds is None else resolve_seeds(seeds)
    # Validated with the first algorithm, not the scenario's own: `--set
    # mode=async` must hold for the algorithms compared, not for one left out.
    base = with_overrides(
        load_scenario(scenario),
        overrides,
        algorithms=algorithms,
        rounds=rounds,
        clients=clients,
        seed=seed,
        algorithm=algorithms[0],
    )
    # Validate every algorithm's parameters before the first run starts.
    variants = {name: with_overrides(base, algorithm=name) for name in algorithms}
    check_device(base.compute.device)  # before a folder is made
    if out is not None and resume:
        folder = Path(out)
        _check_finished(folder, variants, chosen)
    elif out is not None:
        folder = claim(Path(out), overwrite=overwrite)
    else:
        folder = claim(default_compare_out(base, chosen))
        point_latest(folder)
    if chosen is None:
        result = _compare_one(folder, variants, resume, **run_options)
        _figure(folder)
        return result
    by_seed: dict[str, dict[int, RunResult]] = {
        safe_name(name): {} for name in variants
    }
    done: list[int] = []
    # Seed by seed, so that a comparison stopped midway has whole seeds.
    for s in chosen:
        one_seed = seed_folder(folder, s)
        if not (resume and one_seed.exists()):
            # Marked as the comparison's, so --overwrite can tell it apart.
            claim(one_seed)
        one = _compare_one(
            one_seed,
            {name: with_overrides(v, seed=s) for name, v in variants.items()},
            resume,
            **run_options,
        )
        for name, runs in one.by_seed.items():
            by_seed[name][s] = runs[s]
        done.append(s)
        so_far = CompareResult(folder, by_seed, tuple(done))
        _write(folder / COMPARISON, comparison_json(so_far))
        _write(folder / SEEDS, seeds_json(so_far.seed_summaries))
    _figure(folder)
    return CompareResult(folder, by_seed, tuple(chosen))


def _figure(folder: Path) -> None:
    """`folder/runs.png` (and .pdf): every run of the comparison, drawn again
    whenever the comparison (a resumed one too) finishes."""
    from clusterfed.plots_runs import plot_runs  # matplotlib: only once drawn

    plot_runs([folder], folder / FIGURE)


def _compare_one(
    folder: Path, variants: dict[str, Scenario], resume: bool, **run_options: Any
) -> CompareResult:
    """Every variant (one seed) into `folder/<algorithm>/`, then
    `folder/comparison.json`; with `resume`, a run finished there is kept."""
    by_seed: dict[str, dict[int, RunResult]] = {}
    for name, variant in variants.items():
        out = run_folder(folder, name)
        done = _finished(out, variant) if resume else None
        if done is None and resume:
            done = _resumed(out, variant, run_options)
        if done is None:
            done = run(variant, out=out, overwrite=resume, **run_options)
        by_seed[safe_name(name)] = {variant.seed: done}
    result = CompareResult(folder, by_seed)
    _write(folder / COMPARISON, comparison_json(result))
    return result


def _finished(folder: Path, scenario: Scenario) -> RunResult | None:
    """The run in `folder` if it ran all of `scenario`'s rounds with exactly
    its settings; None if there is none or it stopped early.

    Raises:
        ConfigError: the finished run there had other settings, its number
            of rounds among them (it is kept, never run over).
    """
    summary = folder / "summary.json"
    if not summary.is_file() or not (folder / "config.json").is_file():
        return None
    done = load(folder)
    if done.summary.get("interrupted"):
        return None
    changed = _changed(scenario, done.config.get("scenario"))
    if changed:
        shown = ", ".join(c.lstrip(".") for c in changed[:4])
        raise ConfigError(
            f"--resume: {folder} holds a finished run of other settings"
            f" ({shown}{', …' if len(changed) > 4 else ''}); nothing was run."
            " Give the settings it was run with, or another --out"
        )
    # Its settings, but not all of their rounds in its rows: stopped early.
    return done if done.summary.get("rounds") == scenario.rounds else None


def _changed(scenario: Scenario, stored: Any) -> list[str]:
    """Where a run's stored scenario (its config.json's) differs from
    `scenario`: the fields' paths."""
    want = scenario.model_dump(mode="json")
    # As this version reads it: a field added since gets its default (one it
    # cannot read is compared as written, so every difference is named).
    with contextlib.suppress(ValidationError):
        stored = Scenario.model_validate(stored).model_dump(mode="json")
    return [w for w, _, _ in differences(want, stored)]


# What `resume` takes of `run`'s options (the rest are in the run's config.json).
_RESUME_OPTIONS = (
    "runtime",
    "workers",
    "ray_address",
    "clients_per_host",
    "progress",
    "gpus_per_host",
)


def _resumed(
    folder: Path, scenario: Scenario, run_options: dict[str, Any]
) -> RunResult | None:
    """The stopped run in `folder` continued from its checkpoint, if it has
    one and was of `scenario`'s very settings; None otherwise (it is then
    run afresh). A run given an option `resume` cannot carry on (a trace, a
    tracker, a callback) starts again too, and so does one whose checkpoint
    cannot be read (damaged, of another format, or of another scenario
    than its config.json), said in a warning."""
    if not (folder / CHECKPOINT).is_file():
        return None
    unsupported = [
        k
        for k, v in run_options.items()
        if v is not None and k not in (*_RESUME_OPTIONS, "checkpoint_every")
    ]
    if unsupported:
        return None
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if _changed(scenario, config.get("scenario")):
        return None
    try:
        checkpoint_of(folder, config)
    except ConfigError as exc:
        warnings.warn(
            f"{folder}: not resumed ({exc}); it runs again from the start",
            stacklevel=3,
        )
        return None
    options = {k: v for k, v in run_options.items() if k in _RESUME_OPTIONS}
    return resume(folder, **options)


def _check_finished(
    folder: Path, variants: dict[str, Scenario], seeds: Sequence[int] | None
) -> None:
    """Refuse a resume before anything runs if a finished run in `folder`
    had other settings (see `_finished`)."""
    for name, variant in variants.items():
        for s in [None] if seeds is None else seeds:
            one = variant if s is None else with_overrides(variant, seed=s)
            _finished(run_folder(folder, name, s), one)


def _write(path: Path, data: Any) -> None:
    note(path.parent, path.name)
    path.write_text(json.dumps(data, indent=2) + "\n")


def comparison_json(result: CompareResult) -> dict[str, Summary]:
    """What comparison.json holds: each run's folder, relative to the
    comparison's, → the run's summary. On one seed the folder is the
    algorithm (algorithm → summary, DESIGN §8); over seeds it is
    `seed<s>/<algorithm>`, seed by seed in the order they ran."""
    if result.seeds is None:
        return result.summaries
    return {
        run_folder(Path(), name, s).as_posix(): runs[s].summary
        for s in result.seeds
        for name, runs in result.by_seed.items()
    }


def default_compare_out(scenario: Scenario, seeds: Sequence[int] | None = None) -> Path:
    """A new folder under runs/ named after what makes the comparison
    different (the hash covers every algorithm's parameters and the seeds)."""
    resolved = scenario.model_dump(mode="json")
    if seeds is None:
        return default_folder(scenario.name, "compare", scenario.seed, resolved)
    # default_folder writes `seed<label>`: `seeds0to2` names the seeds.
    return default_folder(
        scenario.name,
        "compare",
        f"s{seeds_label(seeds)}",
        {**resolved, "seed": list(seeds)},
    )
