"""One sitting of a page built from records over many (bench/benchmark.py,
bench/byzantine.py): the options they share, and running what the records
lack on one dataset before the page is written from every recorded outcome."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from clusterfed.data.datasets import available as dataset_available

from . import records
from .cli import OutFolder, QuickRuns, seeds_argument
from .runner import ROOT, Experiment, Outcome, run_all


def sitting_parser(
    description: str, *, quick: str, out: str, records_folder: Path, only: str
) -> argparse.ArgumentParser:
    """The options of a sitting: --quick (help `quick`; its runs go to
    `<out>-quick` unless --out is given), --out (default `out`), --records
    (default `records_folder`; with --quick, the folder `records` in --out),
    --only (help `only`), --seeds, --resume, --no-run."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action=QuickRuns, help=quick)
    parser.add_argument(
        "--out", action=OutFolder, default=out, help="folder of the runs"
    )
    parser.add_argument(
        "--records",
        default=str(records_folder),
        help="kept outcomes (with --quick: the folder records in --out)",
    )
    parser.add_argument("--only", nargs="*", default=[], help=only)
    parser.add_argument(
        "--seeds",
        type=seeds_argument,
        default=None,
        help="a count or a list (default 3; 1 with --quick)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep finished runs in --out and runs already in --records",
    )
    parser.add_argument(
        "--no-run", action="store_true", help="write the page from --records alone"
    )
    return parser


def sit(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    chosen: Sequence[Experiment],
    dataset: str,
    *,
    before_saving: Callable[[Outcome], None] | None = None,
) -> list[Outcome]:
    """Run what `--records` lacks of `chosen` on `dataset` (unless --no-run),
    save each outcome as soon as its experiment has run (after
    `before_saving`, which may add to its summaries), and return every
    recorded outcome."""
    if not args.no_run and not dataset_available(dataset):
        parser.error(
            "Fashion-MNIST is not installed: apt-get install -y dataset-fashion-mnist"
            if dataset == "fashion_mnist"
            else f"dataset {dataset} is not available here"
        )
    seeds = args.seeds or ([0] if args.quick else [0, 1, 2])
    folder = outcomes_folder(parser, args)
    if not args.no_run:
        recorded = records.recorded(folder, args.quick) if args.resume else None

        def keep(outcome: Outcome) -> None:
            if before_saving is not None:
                before_saving(outcome)
            records.save(outcome, folder)

        start = time.perf_counter()
        run_all(
            chosen,
            args.quick,
            Path(args.out).resolve(),
            args.only,
            [dataset],
            seeds,
            resume=args.resume,
            recorded=recorded,
            on_outcome=keep,
            claim=records.claims(folder, args.quick),
        )
        print(f"ran in {time.perf_counter() - start:.0f} s")
    return records.load(folder, chosen, [dataset], args.quick)


def outcomes_folder(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Path:
    """Where the sitting keeps its outcomes: --records, except that a smoke
    test (--quick) left at the default keeps them beside its runs, out of
    docs/records."""
    if args.quick and args.records == parser.get_default("records"):
        return Path(args.out) / "records"
    return Path(args.records)


def shown(folder: Path) -> str:
    """`folder` relative to the repository when it is inside it."""
    folder = folder.resolve()
    return str(folder.relative_to(ROOT) if folder.is_relative_to(ROOT) else folder)
