"""docs/DP-STUDY.md from the study's records: each cell's final accuracy per
algorithm beside DCFL's Table I (its screen's, and its companion's where the
selection ran it), how far it is from the paper's, whether the paper's
ordering (DCFL > CFL > FedAvg) holds there, and where issue 35's selection
rule stands (selection.py)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from reproduce.runner import Outcome
from reproduce.sitting import shown

from clusterfed.scenarios import BUILTIN
from clusterfed.seeds import interval

from . import (
    ALGORITHMS,
    CLIENT_ALGORITHMS,
    PAPER_FINAL,
    SCENARIO,
    companion_key,
    sample_key,
    screens,
)
from .selection import CLIENT, SAMPLE, describe, finals, select


@dataclass(frozen=True)
class Cell:
    """A cell's records: its screen's and its companion's, and the two as
    one outcome (`both`: every algorithm's seeds, which `paired` pairs)."""

    screen: Outcome
    companion: Outcome | None

    @property
    def both(self) -> Outcome:
        if self.companion is None:
            return self.screen
        return replace(
            self.screen,
            seed_summaries={
                **self.screen.seed_summaries,
                **self.companion.seed_summaries,
            },
            seed_rows={**self.screen.seed_rows, **self.companion.seed_rows},
            seeds=tuple(sorted({*self.screen.seeds, *self.companion.seeds})),
        )

    @property
    def seeds(self) -> str:
        """The screen's seeds, and the companion's after a slash."""
        found = str(len(self.screen.seeds))
        if self.companion is not None:
            found += f" / {len(self.companion.seeds)}"
        return found


def cells(outcomes: Sequence[Outcome], prefix: str) -> list[Cell]:
    """The recorded cells whose keys start with `prefix`, in the study's
    order (a companion without its screen is left out)."""
    by_key = {o.experiment.key: o for o in outcomes}
    return [
        Cell(by_key[s.key], by_key.get(companion_key(s.key)))
        for s in screens()
        if s.key.startswith(prefix) and s.key in by_key
    ]


def _finals(outcome: Outcome, algorithm: str) -> list[float]:
    """The seeds' final accuracies, none of them missing: nothing where a
    seed ran without one (`_cell` says so), which no mean may hide."""
    found = finals(outcome, algorithm)
    return [] if None in found else [v for v in found if v is not None]


def _cell(outcome: Outcome, algorithm: str) -> str:
    found = finals(outcome, algorithm)
    if not found:
        return "—"
    if None in found:
        return f"none in {found.count(None)} of {len(found)} seeds"
    result = interval([v for v in found if v is not None])
    if result.half_width is None:
        return f"{result.mean:.3f}"
    return f"{result.mean:.3f} ± {result.half_width:.3f}"


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _ordering(outcome: Outcome) -> str:
    """The paper's DCFL > CFL > FedAvg at this cell: from the seed-by-seed
    differences' intervals where there are seeds to decide it, else the
    point estimates, said so."""
    pairs = [("dcfl", "cfl"), ("cfl", "fedavg")]
    if any(None in finals(outcome, a) for a in ALGORITHMS):
        return "— (a run without a final accuracy)"
    if min(len(outcome.seed_summaries.get(a, {})) for a in ALGORITHMS) < 2:
        found = [_mean(_finals(outcome, a)) for a in ALGORITHMS]
        means = [m for m in found if m is not None]
        if len(means) < len(found):
            return "—"
        holds = all(a > b for a, b in zip(means, means[1:], strict=False))
        return f"{'yes' if holds else 'no'} (points, 1 seed)"
    verdicts = []
    for a, b in pairs:
        gap = outcome.paired(a, b)
        if gap.low is not None and gap.low > 0:
            verdicts.append("holds")
        elif gap.high is not None and gap.high < 0:
            verdicts.append("contradicted")
        else:
            verdicts.append("undecided")
    return " / ".join(verdicts)


def _distance(outcome: Outcome) -> float | None:
    """Mean absolute gap of the three final accuracies to the paper's."""
    gaps = []
    for algorithm, paper in PAPER_FINAL.items():
        mean = _mean(_finals(outcome, algorithm))
        if mean is None:
            return None
        gaps.append(abs(mean - paper))
    return sum(gaps) / len(gaps)


def _scenario_key() -> str:
    """The study's cell that the scenario runs today (its batch, C, horizon)."""
    scenario = BUILTIN[SCENARIO]()
    dp = scenario.dp
    assert dp is not None  # the study's setting is DCFL's private one
    return sample_key(scenario.train.batch_size, dp.max_grad_norm, dp.horizon)


def _setting_words(outcome: Outcome) -> str:
    sets = dict(s.split("=", 1) for s in outcome.experiment.sets)
    return (
        f"batch {sets['train.batch_size']}, C = {sets['dp.max_grad_norm']},"
        f" ε over the {sets['dp.horizon']}"
    )


def _paper_numbers() -> str:
    return " / ".join(f"{v:.2f}" for v in PAPER_FINAL.values())


def _at(cell: Cell) -> str:
    outcome = cell.both
    distance = _distance(outcome)
    gap = "—" if distance is None else f"{distance:.3f}"
    seeds = len(cell.screen.seeds)
    said = (
        f"`{outcome.experiment.key}` ({_setting_words(outcome)}): DCFL / CFL /"
        " FedAvg "
        + " / ".join(_cell(outcome, a) for a in ALGORITHMS)
        + f" against the paper's {_paper_numbers()}"
    )
    if cell.companion is None:
        return (
            f"{said}, DCFL at {seeds} seed{'s' if seeds != 1 else ''}; CFL and"
            " FedAvg not run there yet, so the paper's ordering is not known"
        )
    return (
        f"{said}, gap {gap} at {cell.seeds} seeds; the paper's ordering there:"
        f" {_ordering(outcome)}"
    )


def _dcfl_gap(cell: Cell) -> float:
    first = finals(cell.screen, "dcfl")[0]
    return math.inf if first is None else abs(first - PAPER_FINAL["dcfl"])


def nearest_lines(outcomes: Sequence[Outcome]) -> list[str]:
    """Which local-DP cell brings DCFL nearest the paper's Table I (its
    final accuracy's distance to the paper's at the first seed, as the
    selection measures it; the first listed of equals), and the scenario's
    own cell, each with the paper's ordering there where CFL and FedAvg
    have run."""
    sample = [c for c in cells(outcomes, "sample-") if _dcfl_gap(c) < math.inf]
    if not sample:
        return ["Nearest the paper: no cell has DCFL recorded yet."]
    nearest = min(sample, key=_dcfl_gap)
    lines = [
        f"- DCFL nearest the paper's {PAPER_FINAL['dcfl']:.2f} (at its first"
        f" seed): {_at(nearest)}."
    ]
    own = next((c for c in sample if c.screen.experiment.key == _scenario_key()), None)
    if own is None:
        lines.append(
            f"- The scenario's own setting (`{_scenario_key()}`) is not recorded yet."
        )
    elif own is not nearest:
        lines.append(f"- The scenario's own setting: {_at(own)}.")
    else:
        lines.append("- That is the scenario's own setting.")
    return lines


def study_lines(outcomes: Sequence[Outcome]) -> list[str]:
    """Both tables of the study with where the selection rule stands."""
    lines = [
        '**Local DP-SGD** (`dp.mechanism = "sample"`); *seeds*: DCFL\'s, and'
        " CFL's and FedAvg's after the slash where the selection ran them",
        "",
        "| batch | C | horizon | seeds | dcfl | cfl | fedavg | gap | ordering |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    for cell in cells(outcomes, "sample-"):
        outcome = cell.both
        sets = dict(s.split("=", 1) for s in outcome.experiment.sets)
        distance = _distance(outcome)
        lines.append(
            f"| {sets['train.batch_size']} | {sets['dp.max_grad_norm']}"
            f" | {sets['dp.horizon']} | {cell.seeds}"
            + "".join(f" | {_cell(outcome, a)}" for a in ALGORITHMS)
            + f" | {'—' if distance is None else f'{distance:.3f}'}"
            f" | {_ordering(outcome)} |"
        )
    keys = [e.key for e in screens()]
    lines += ["", *describe(select(keys, outcomes, SAMPLE))]
    lines += [
        "",
        '**DP-FedAvg** (`dp.mechanism = "client"`): client-level DP adds the'
        " server's noise to each cluster's sum of clipped updates: of DCFL's"
        " three algorithms only FedAvg aggregates so (DCFL and CFL are refused"
        " at validation), so IFCA stands in for a clustered one. *seeds*:"
        " FedAvg's, and IFCA's after the slash where the selection ran it.",
        "",
        "| bound | clipping | seeds | " + " | ".join(CLIENT_ALGORITHMS) + " |",
        "|---:|---|---:|" + "---:|" * len(CLIENT_ALGORITHMS),
    ]
    for cell in cells(outcomes, "client-"):
        outcome = cell.both
        sets = dict(s.split("=", 1) for s in outcome.experiment.sets)
        lines.append(
            f"| {sets['dp.clip_norm']} | {sets['dp.clipping']} | {cell.seeds}"
            + "".join(f" | {_cell(outcome, a)}" for a in CLIENT_ALGORITHMS)
            + " |"
        )
    return lines + ["", *describe(select(keys, outcomes, CLIENT))]


def setting_words() -> str:
    """What the study varies, in one paragraph's words."""
    paper = " / ".join(f"{a} {v:.2f}" for a, v in PAPER_FINAL.items())
    scenario = BUILTIN[SCENARIO]()
    dp = scenario.dp
    assert dp is not None  # the study's setting is DCFL's private one
    return (
        f"DCFL's Table I setting (`{SCENARIO}`: Fashion-MNIST, ε ="
        f" {dp.epsilon:g}, δ = {dp.delta:g}, {scenario.rounds} rounds) under"
        " each choice the paper leaves open: the batch size, the per-sample"
        " clipping bound C and what ε covers (the whole run or each round)."
        " Each cell is the final mean client accuracy, the mean over the"
        " cell's seeds ± the half-width of its 95 % Student t interval (one"
        " seed: the value alone). Every cell runs DCFL (DP-FedAvg's: FedAvg)"
        " at one seed first; CFL and FedAvg (IFCA) run beside it, at 3 seeds,"
        " only in the cells the selection below picks, where the paper's"
        f" ordering is asked. The paper: {paper}. *gap*: the mean"
        " absolute difference of the three to the paper's; *ordering*: the"
        " paper's DCFL > CFL > FedAvg, from the seed-by-seed differences'"
        " intervals where a cell has seeds, else the point estimates (which"
        " decide nothing); *none in k of n seeds*: k seeds ended with no"
        " client accuracy (every client's last evaluation failed, the model"
        " having diverged), which no mean over the rest may hide."
    )


def paper_page_lines(outcomes: Sequence[Outcome]) -> list[str]:
    """The study beside Table I on the paper-scale page."""
    lines = [
        "#### Table I's DP settings: the study (issue 35)",
        "",
        "The paper gives ε, δ and “norm clipping”, not the batch size, the"
        f" clipping bound or what ε covers; the table above runs the scenario's"
        f" (`{_scenario_key()}`). docs/DP-STUDY.md (`python bench/dp_study.py`)"
        " runs every combination. " + setting_words(),
        "",
    ]
    if not outcomes:
        return lines + [
            "No cell is recorded yet (`python bench/dp_study.py --resume --seeds 1`).",
            "",
        ]
    return lines + [*nearest_lines(outcomes), "", *study_lines(outcomes), ""]


def write_page(
    outcomes: Sequence[Outcome], command: str, page: Path, records: Path
) -> None:
    lines = [
        "# The DP utility study (issue 35)",
        "",
        f"Written by `{command}` from the records in `{shown(records)}`"
        " (each cell's seeds, run over sittings).",
        "",
        setting_words(),
        "",
        *nearest_lines(outcomes),
        "",
        *study_lines(outcomes),
    ]
    page.write_text("\n".join(lines) + "\n")
