"""The command line of bench/reproduce.py: run the experiments, write the page
and reproduce.json beside the runs."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

from clusterfed.data.datasets import available
from clusterfed.errors import ConfigError
from clusterfed.seeds import parse_seeds

from . import EXPERIMENTS, PAPERS, dcfl, records
from .page import Section, write_page
from .runner import ROOT, run_all

# The --help text the single-file script had (its docstring's first line).
DESCRIPTION = "Reproduce every paper experiment and write docs/REPRODUCTION.md."


def seeds_argument(text: str) -> list[int]:
    """`--seeds`: a count or a list (`parse_seeds`), as argparse wants it."""
    try:
        return parse_seeds(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


class QuickRuns(argparse.Action):
    """`--quick`, which also moves --out, where it is left at its default, to
    `<default>-quick`: a smoke test's short runs are not the full runs a
    later --resume keeps (it refuses a finished run of other rounds)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=False, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, True)
        # An --out given after --quick replaces this.
        if not getattr(namespace, "out_named", False):
            namespace.out = f"{parser.get_default('out')}-quick"


class OutFolder(argparse.Action):
    """`--out`, remembering that it was named: --quick keeps a folder named
    before it, even the default one."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, values)
        namespace.out_named = True


def default_page(quick: bool, datasets: list[str], out: str) -> Path:
    """Where the page goes without --page: a smoke test's beside its runs,
    never over a committed page; else the dataset's page in docs/."""
    if quick:
        return Path(out) / "REPRODUCTION.md"
    name = (
        "REPRODUCTION-fmnist.md" if datasets == ["fashion_mnist"] else "REPRODUCTION.md"
    )
    return ROOT / "docs" / name


def dp_study_lines(folder: Path, quick: bool) -> dict[str, list[str]]:
    """The DP study's lines for the Fashion-MNIST page, from its records in
    `folder` (bench/dp_study: issue 35; its cells run DCFL's Table I)."""
    # Imported here: bench/dp_study imports this package's modules, and
    # reproduce.sitting imports this one.
    import dp_study
    from dp_study.page import paper_page_lines

    found = records.load(folder, dp_study.experiments(), ["fashion_mnist"], quick)
    return {"fashion_mnist": paper_page_lines(found)}


def main() -> None:
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument(
        "--quick",
        action=QuickRuns,
        help="fewer rounds (digits only by default), into runs/reproduce-quick"
        " unless --out is given",
    )
    parser.add_argument(
        "--out", action=OutFolder, default="runs/reproduce", help="folder of the runs"
    )
    parser.add_argument(
        "--page",
        default=None,
        help="the page (default: docs/REPRODUCTION.md, or docs/REPRODUCTION-fmnist.md"
        " for --datasets fashion_mnist alone; with --quick, REPRODUCTION.md in --out)",
    )
    parser.add_argument(
        "--only",
        nargs="*",
        default=[],
        help="experiment keys (a whole key picks that one alone; else a prefix)",
    )
    parser.add_argument(
        "--datasets",
        default=None,
        help="comma-separated (default: digits, and fashion_mnist when its files"
        " are there and not --quick)",
    )
    parser.add_argument(
        "--seeds",
        type=seeds_argument,
        default=None,
        help="a count (3: seeds 0, 1, 2) or the seeds (0,1) of every experiment"
        " (default: 3 with fashion_mnist unless --quick, else 1)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the runs in --out that finished with the same settings"
        " (compare --resume) and run the rest: a page built over several"
        " sittings; its times are then the runs' own wall times, summed",
    )
    parser.add_argument(
        "--records",
        default=None,
        help="folder of kept outcomes (see records.py): every experiment run"
        " now is written there, beside the runs recorded earlier, and those"
        " kept there from other sittings or machines join the page; with"
        " --resume, runs recorded there are not run again",
    )
    parser.add_argument(
        "--no-run",
        action="store_true",
        help="run nothing: write the page from --records alone",
    )
    args = parser.parse_args()
    if args.no_run and not args.records:
        parser.error("--no-run writes the page from --records; name that folder")
    if args.datasets:
        datasets = args.datasets.split(",")
    elif args.quick or not available("fashion_mnist"):
        datasets = ["digits"]
    else:
        datasets = ["digits", "fashion_mnist"]
    seeds = args.seeds or list(
        range(3 if "fashion_mnist" in datasets and not args.quick else 1)
    )
    page = (
        Path(args.page) if args.page else default_page(args.quick, datasets, args.out)
    )
    recorded = (
        records.recorded(Path(args.records), args.quick)
        if args.records and args.resume
        else None
    )
    folder = Path(args.records) if args.records else None
    start = time.perf_counter()
    outcomes = (
        []
        if args.no_run
        else run_all(
            EXPERIMENTS,
            args.quick,
            Path(args.out).resolve(),
            args.only,
            datasets,
            seeds,
            resume=args.resume,
            recorded=recorded,
            # Each experiment is recorded as soon as it has run.
            on_outcome=None
            if folder is None
            else partial(records.save, records=folder),
            claim=None if folder is None else records.claims(folder, args.quick),
        )
    )
    elapsed = time.perf_counter() - start
    if folder is not None:
        # What ran joins its record's other seeds: the page shows the record.
        outcomes = records.load(folder, EXPERIMENTS, datasets, args.quick)
    several_sittings = args.resume or args.records is not None
    sections: list[Section] = [paper.section for paper in PAPERS]
    if args.records and "fashion_mnist" in datasets:
        study = dp_study_lines(Path(args.records) / "dp-study", args.quick)
        sections[sections.index(dcfl.section)] = partial(dcfl.section, study=study)
    write_page(
        outcomes,
        shlex.join(["python", "bench/reproduce.py", *sys.argv[1:]]),
        page,
        sum(o.seconds for o in outcomes) if several_sittings else elapsed,
        sections,
        resumed=several_sittings,
        pending=[]
        if folder is None
        else [
            line
            for dataset in datasets
            for line in records.pending(
                folder, EXPERIMENTS, dataset, args.quick, len(seeds)
            )
        ],
    )
    if not args.no_run:  # reproduce.json goes beside the runs
        # (a sitting whose records held every seed ran nothing: no folder yet)
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "reproduce.json").write_text(
            json.dumps(
                {
                    f"{o.dataset}/{o.experiment.key}": {
                        "seeds": list(o.seeds),
                        "summaries": o.seed_summaries,
                        "statistics": {
                            name: {m: i.as_json() for m, i in stats.items()}
                            for name, stats in o.statistics.items()
                        },
                    }
                    for o in outcomes
                },
                indent=2,
            )
        )
    print(f"wrote {page} in {time.perf_counter() - start:.0f} s")
