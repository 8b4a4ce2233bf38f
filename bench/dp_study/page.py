"""docs/DP-STUDY.md from the study's records: each cell's final accuracy per
algorithm beside DCFL's Table I, how far it is from the paper's, whether
the paper's ordering (DCFL > CFL > FedAvg) holds there, and where issue
35's selection rule stands (selection.py)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from reproduce.runner import Outcome, summary_value
from reproduce.sitting import shown

from clusterfed.scenarios import BUILTIN
from clusterfed.seeds import interval

from . import (
    ALGORITHMS,
    CLIENT_ALGORITHMS,
    PAPER_FINAL,
    SCENARIO,
    experiments,
    sample_key,
)
from .selection import CLIENT, SAMPLE, describe, select

FINAL = summary_value("final_mean_acc")


def _finals(outcome: Outcome, algorithm: str) -> list[float]:
    if algorithm not in outcome.seed_summaries:
        return []
    return list(outcome.per_seed(algorithm, FINAL).values())


def _cell(values: list[float]) -> str:
    if not values:
        return "—"
    found = interval(values)
    if found.half_width is None:
        return f"{found.mean:.3f}"
    return f"{found.mean:.3f} ± {found.half_width:.3f}"


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _ordering(outcome: Outcome) -> str:
    """The paper's DCFL > CFL > FedAvg at this cell: from the seed-by-seed
    differences' intervals where there are seeds to decide it, else the
    point estimates, said so."""
    pairs = [("dcfl", "cfl"), ("cfl", "fedavg")]
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


def _at(outcome: Outcome) -> str:
    distance = _distance(outcome)
    gap = "—" if distance is None else f"{distance:.3f}"
    seeds = len(outcome.seeds)
    return (
        f"`{outcome.experiment.key}` ({_setting_words(outcome)}): DCFL / CFL /"
        " FedAvg "
        + " / ".join(_cell(_finals(outcome, a)) for a in ALGORITHMS)
        + f" against the paper's {_paper_numbers()},"
        f" gap {gap} at {seeds} seed{'s' if seeds != 1 else ''}; the paper's"
        f" ordering there: {_ordering(outcome)}"
    )


def nearest_lines(outcomes: Sequence[Outcome]) -> list[str]:
    """Which local-DP cell brings DCFL's three numbers nearest the paper's
    Table I (the smallest mean absolute gap; the first listed of equals),
    and the scenario's own cell, each with the paper's ordering there."""
    sample = [o for o in outcomes if o.experiment.key.startswith("sample-")]
    complete = [o for o in sample if _distance(o) is not None]
    if not complete:
        return ["Nearest the paper: no cell has DCFL, CFL and FedAvg recorded yet."]
    nearest = min(complete, key=lambda o: _distance(o) or 0.0)
    lines = [f"- Nearest the paper's Table I: {_at(nearest)}."]
    own = next((o for o in sample if o.experiment.key == _scenario_key()), None)
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
    sample = [o for o in outcomes if o.experiment.key.startswith("sample-")]
    client = [o for o in outcomes if o.experiment.key.startswith("client-")]
    lines = [
        '**Local DP-SGD** (`dp.mechanism = "sample"`)',
        "",
        "| batch | C | horizon | seeds | dcfl | cfl | fedavg | gap | ordering |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    for outcome in sample:
        sets = dict(s.split("=", 1) for s in outcome.experiment.sets)
        distance = _distance(outcome)
        lines.append(
            f"| {sets['train.batch_size']} | {sets['dp.max_grad_norm']}"
            f" | {sets['dp.horizon']} | {len(outcome.seeds)}"
            + "".join(f" | {_cell(_finals(outcome, a))}" for a in ALGORITHMS)
            + f" | {'—' if distance is None else f'{distance:.3f}'}"
            f" | {_ordering(outcome)} |"
        )
    cells = [e.key for e in experiments()]
    lines += ["", *describe(select(cells, outcomes, SAMPLE))]
    lines += [
        "",
        '**DP-FedAvg** (`dp.mechanism = "client"`): client-level DP adds the'
        " server's noise to each cluster's sum of clipped updates: of DCFL's"
        " three algorithms only FedAvg aggregates so (DCFL and CFL are refused"
        " at validation), so IFCA stands in for a clustered one.",
        "",
        "| bound | clipping | seeds | " + " | ".join(CLIENT_ALGORITHMS) + " |",
        "|---:|---|---:|" + "---:|" * len(CLIENT_ALGORITHMS),
    ]
    for outcome in client:
        sets = dict(s.split("=", 1) for s in outcome.experiment.sets)
        lines.append(
            f"| {sets['dp.clip_norm']} | {sets['dp.clipping']}"
            f" | {len(outcome.seeds)}"
            + "".join(f" | {_cell(_finals(outcome, a))}" for a in CLIENT_ALGORITHMS)
            + " |"
        )
    return lines + ["", *describe(select(cells, outcomes, CLIENT))]


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
        f" seed: the value alone). The paper: {paper}. *gap*: the mean"
        " absolute difference of the three to the paper's; *ordering*: the"
        " paper's DCFL > CFL > FedAvg, from the seed-by-seed differences'"
        " intervals where a cell has seeds, else the point estimates (which"
        " decide nothing)."
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
