"""The page: its preamble, one part per dataset (its claims table first), and
the pieces every paper's section is built from (tables, the commands behind
them); the verdict sentences are claims (claims.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from clusterfed.seeds import Interval

from .claims import (
    ALPHA,
    CHANCE,
    COLLAPSED,
    FAILS,
    HOLDS,
    MEASURED,
    SIGN_TEST_SEEDS,
    Claims,
    seed_collapsed,
)
from .markdown import table
from .runner import HOLD_OUT, ROOT, TEST_SETS, ByKey, Outcome
from .undecided import undecided_lines

# A paper's part of the page for one dataset, its claims registered in the
# Claims given; [] when none of its runs is there.
Section = Callable[[ByKey, str, Path, Claims], list[str]]

# What every section's list of verdicts starts with.
CLAIMS = (
    "The paper's claims, seed by seed (95 % interval; our measurements beyond"
    " them without verdict):"
)
# What each dataset's runs use of it.
DATASET_WORDS = {
    "digits": "the embedded digits (8×8 images, 1,797 of them, shared out among"
    " the clients; the set has no test split)",
    "fashion_mnist": "Fashion-MNIST (28×28 images): the clients' training data"
    " are drawn from its 60,000 training images; its 10,000-image test split"
    " gives the clients' test sets in the runs that have them (below) and"
    " scores the global model (`global_acc` in rounds.jsonl, not shown here)",
}
TEST_SET_WORDS = (
    "a client's accuracy on its own test set, drawn from the dataset's test"
    " split to match the client's classes, rotation and drift (`acc` in"
    " rounds.jsonl), averaged over the clients; its 20 % hold-out of the"
    " training images (`val_acc`) serves only the algorithms' own decisions"
)
HOLD_OUT_WORDS = (
    "a client's accuracy on the 20 % of its own samples that it holds out from"
    " training (the scenarios' `test_fraction`), averaged over the clients"
)


def accuracy_words(outcomes: Sequence[Outcome]) -> str:
    """What the page's accuracies are measured on, from its outcomes: the
    same for all, or which experiments are on which (a page whose records
    were made before clients had test sets, and not yet re-run)."""
    held = sorted(f"{o.experiment.key}" for o in outcomes if o.accuracy == HOLD_OUT)
    tested = [o for o in outcomes if o.accuracy == TEST_SETS]
    if not tested:
        return (
            f"Every accuracy on this page is {HOLD_OUT_WORDS}; the papers"
            " report accuracy on a test set."
        )
    if not held:
        return f"Every accuracy on this page is {TEST_SET_WORDS}."
    return (
        f"Accuracies are {TEST_SET_WORDS}, except in the experiments recorded"
        f" before clients had test sets ({', '.join(held)}), where they are"
        f" {HOLD_OUT_WORDS}: until those are re-run, a claim that compares the"
        " two kinds compares different measures."
    )


def pm(found: Interval | None, digits: int = 3) -> str:
    """`mean ± half-width` of an interval over seeds (the mean alone for one)."""
    if found is None or found.mean is None:
        return "—"
    if found.half_width is None:
        return f"{found.mean:.{digits}f}"
    return f"{found.mean:.{digits}f} ± {found.half_width:.{digits}f}"


def provenance(*outcomes: Outcome) -> list[str]:
    """The commands behind a table, with seed, dataset, time and folder."""
    lines = ["", "Run by:", ""]
    for o in outcomes:
        where = o.out.relative_to(ROOT) if o.out.is_relative_to(ROOT) else o.out
        command = o.experiment.command(o.quick, o.dataset, o.seeds)
        seeds = ", ".join(map(str, o.seeds))
        lines.append(
            f"- `{command}` — seed{'s' * (len(o.seeds) > 1)} {seeds}, dataset"
            f" {o.dataset}, {o.seconds:.0f} s; results in `{where}`."
        )
    near_chance = [
        f"{o.experiment.key} {algorithm} seed {seed} ({_final(s)})"
        for o in outcomes
        for algorithm, by_seed in o.seed_summaries.items()
        for seed, s in sorted(by_seed.items())
        if seed_collapsed(s)
    ]
    if near_chance:
        lines.append(
            f"- Ended near chance (final mean accuracy under twice chance,"
            f" {2 * CHANCE:.2f}, or none: every client's last evaluation"
            f" failed): {', '.join(near_chance)}."
        )
    return [*lines, ""]


def _final(summary: dict[str, Any]) -> str:
    value = summary.get("final_mean_acc")
    return "none" if value is None else f"{value:.3f}"


def claims_summary(claims: Claims) -> list[str]:
    """The counts, the line on chance and the claims table that open a
    dataset's part of the page, all computed from `claims`."""
    papers = claims.papers()
    if not claims:
        return []
    tested = claims.tested()
    holm = claims.holm()
    plain = [c.verdict for c in papers]
    adjusted = [holm[c.key] for c in papers]
    measured = len(claims) - len(papers)
    undecided = len(papers) - plain.count(HOLDS) - plain.count(FAILS)
    collapsed = sum(v.endswith("collapsed") for v in plain)
    expected = len(tested) * ALPHA / 2
    lines = [
        f"**Claims.** The papers make {len(papers)} claims that this page tests:"
        f" {plain.count(HOLDS)} confirmed (holds), {plain.count(FAILS)}"
        f" contradicted (does not hold), {undecided} undecided"
        f" ({undecided - collapsed} cannot tell at this many seeds,"
        f" {collapsed} with a collapsed run). With Holm's adjustment:"
        f" {adjusted.count(HOLDS)} confirmed, {adjusted.count(FAILS)} contradicted,"
        f" {len(papers) - adjusted.count(HOLDS) - adjusted.count(FAILS)} undecided."
        + (
            f" {measured} more lines are our own measurements beyond the papers'"
            " claims, shown without a verdict."
            if measured
            else ""
        ),
        "",
        f"**Chance.** The page makes {len(tested)} verdicts at 95 % (the papers'"
        " claims with 2 seeds or more). A “holds” needs the whole two-sided 95 %"
        " interval above 0, which is a one-sided test at 2.5 % (for an event"
        " counted seed by seed, the one-sided sign test at 2.5 %:"
        f" {SIGN_TEST_SEEDS} of {SIGN_TEST_SEEDS} seeds at least). So if no"
        " claim were true (every true difference 0), each"
        " would read “holds” with probability 0.025, and about"
        f" {len(tested)} × 0.025 = {expected:.2f} of them would read “holds” by"
        " chance alone (and as many “does not hold”); fewer where a true"
        " difference is below 0. Were the verdicts independent, at least one"
        f" false “holds” would come with probability 1 − 0.975^{len(tested)} ="
        f" {1 - (1 - ALPHA / 2) ** len(tested):.2f}; claims that share runs are"
        " not, but the expected count stays the same. Holm's adjustment at"
        f" family-wise {ALPHA * 100:.0f} % (the last column) keeps the chance that any"
        f" of the {len(tested)} verdicts is a false “holds” or “does not hold”"
        f" under {ALPHA * 100:.0f} %: it tests twice the smaller one-sided p (the"
        " two-sided p), the i-th smallest of m against 0.05 / (m − i + 1). A"
        f" comparison with a run that collapsed (final mean accuracy under"
        f" {2 * CHANCE:.1f}, twice chance, or none, in any seed) never holds:"
        f" it reads “{COLLAPSED}”.",
        "",
        *table(
            [
                "claim",
                "seed by seed (95 % interval)",
                "p, one-sided (t test; sign test for an event)",
                "verdict",
                f"Holm verdict at family-wise {ALPHA * 100:.0f} %",
            ],
            [
                [
                    f"{c.paper}, {c.source}: {c.text}",
                    c.shown(),
                    _p(c.p_values()) if c.own else "—",
                    c.verdict,
                    holm.get(c.key, "—") if c.verdict != MEASURED else "—",
                ]
                for c in claims
            ],
        ),
        "",
    ]
    return lines


def _p(found: tuple[float, float] | None) -> str:
    if found is None:
        return "—"
    return "< 0.001" if found[0] < 0.001 else f"{found[0]:.3f}"


def write_page(
    outcomes: list[Outcome],
    command: str,
    page: Path,
    seconds: float,
    sections: Sequence[Section],
    *,
    resumed: bool = False,
    pending: Sequence[str] = (),
) -> None:
    """The page of `outcomes`; `pending`: lines on what its records still
    lack (records.pending), after what the runs took."""
    by_key = {(o.dataset, o.experiment.key): o for o in outcomes}
    datasets = tuple(sorted({o.dataset for o in outcomes}))
    counts = sorted({len(o.seeds) for o in outcomes}) or [1]
    seeds = max(counts)
    figures = page.parent / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    lines = [
        "# Reproducing the papers",
        "",
        f"Generated by `{command}`; do not edit by hand. Each section puts the"
        " paper's own table (quoted from the paper) beside clusterfed's, from"
        " runs on " + " and ".join(DATASET_WORDS.get(d, d) for d in datasets) + "."
        " The digits are not any paper's dataset; Fashion-MNIST is the"
        " gradient–loss paper's own (its Fig. 5) and stands in for EMNIST (DCFL),"
        " MNIST (OCFL) and CIFAR-10 (FedAC, CAFA), with each paper's own settings"
        " (scenarios `*-fmnist`, whose descriptions list what still departs)."
        " Numbers differ in scale; what should carry over is the ordering and the"
        " clustering behaviour. Where it does not, the section says so (each"
        " such sentence is computed from the numbers above it). "
        + accuracy_words(outcomes),
        "",
    ]
    if seeds > 1:
        lines += [
            f"Each experiment ran {_counted(counts)}: numbers are means over"
            " the seeds ± the half-width of their 95 % Student t interval, and a"
            " claim is decided from the interval of its difference taken seed by seed"
            " (holds: the whole interval is on the paper's side; does not hold:"
            " the whole interval is on the other; else cannot tell at this many"
            " seeds). Each dataset's part opens with every claim in one table.",
            "",
        ]
    took = (
        f"The runs took {seconds / 60:.1f} minutes of their own wall time,"
        " summed: the page was put together with --resume or --records, from"
        " runs that may come from several sittings."
        if resumed
        else f"All runs together took {seconds / 60:.1f} minutes on the machine"
        " that wrote this page."
    )
    lines += [took, ""]
    for line in pending:
        lines += [line, ""]
    for dataset in datasets:
        claims = Claims()
        body = [
            line
            for section in sections
            for line in section(by_key, dataset, figures, claims)
        ]
        lines += [
            f"## Dataset: {dataset}",
            "",
            *claims_summary(claims),
            *undecided_lines(claims),
            *body,
        ]
    page.write_text("\n".join(lines) + "\n")


def _counted(counts: Sequence[int]) -> str:
    """`3 seeds`, or `3 or 10 seeds (each section's “Run by” says which)`."""
    if len(counts) == 1:
        return f"{counts[0]} seeds"
    listed = ", ".join(map(str, counts[:-1])) + f" or {counts[-1]}"
    return f"{listed} seeds (each section's “Run by” says which)"
