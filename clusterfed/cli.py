"""The `clusterfed` command line (DESIGN §9)."""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from clusterfed import __version__
from clusterfed.errors import ClusterfedError, ConfigError, ScenarioWarning
from clusterfed.protocol.codec import printable

if TYPE_CHECKING:
    from clusterfed.api import RunResult

# Ctrl-C ends a command with this status (128 + SIGINT), as shells do.
INTERRUPTED = 130


def main(argv: Sequence[str] | None = None) -> int:
    warnings.showwarning = _show_warning
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return int(args.command(args) or 0)
    except ClusterfedError as exc:
        # Errors may quote files from anyone (a trace, a config): no raw
        # terminal escapes reach the terminal.
        lines = map(printable, str(exc).splitlines())
        print("clusterfed: error: " + "\n".join(lines), file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        # A run says where its finished rounds are (RunInterrupted).
        print(f"clusterfed: {exc or 'interrupted'}", file=sys.stderr)
        return INTERRUPTED


_python_show_warning = warnings.showwarning


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    # A scenario's warning is said to its author, not to a source line.
    if issubclass(category, ScenarioWarning):
        print(f"clusterfed: warning: {message}", file=sys.stderr)
    else:
        _python_show_warning(message, category, filename, lineno, file, line)


def _list(args: argparse.Namespace) -> int:
    # From the sources, not the modules: those import torch (seconds).
    from importlib.metadata import entry_points

    from clusterfed import catalogue

    print("scenarios:")
    described = catalogue.scenarios()
    width = max(map(len, described)) + 1
    for name, line in described.items():
        print(f"  {name:<{width}} {line}")
    print("algorithms:")
    for name, params in catalogue.algorithms().items():
        shown = ", ".join(f"{k}={v}" for k, v in params.items())
        print(f"  {name:<20} {shown}")
    for point in entry_points(group="clusterfed.algorithms"):
        print(f"  {point.name:<20} plug-in {point.value}")
    print("datasets:")
    for name in catalogue.datasets():
        print(f"  {name}")
    print("models:")
    for name in catalogue.models():
        print(f"  {name}")
    return 0


def _run(args: argparse.Namespace) -> int:
    from clusterfed.api import run

    result = run(
        args.scenario,
        out=args.out,
        runtime=args.runtime,
        algorithm=args.algorithm,
        rounds=args.rounds,
        clients=args.clients,
        seed=args.seed,
        overrides=_overrides(args),
        workers=_workers(args.workers),
        ray_address=args.ray_address,
        clients_per_host=args.clients_per_host,
        progress=_progress(args),
        checkpoint_every=args.checkpoint_every,
        overwrite=args.overwrite,
        trace=args.trace,
        log=args.log,
    )
    _report(result)
    return 0


def _trace(args: argparse.Namespace) -> int:
    from clusterfed.trace_report import report

    try:
        print(
            report(
                args.folder,
                clients=args.client,
                rounds=args.round,
                kinds=args.kind,
                json_output=args.json,
            )
        )
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{args.folder}: no readable trace: {exc}") from exc
    return 0


def _replay(args: argparse.Namespace) -> int:
    from clusterfed.replay import replay

    found = replay(args.folder, trust=args.trust)
    print(f"replayed {len(found.rows)} rounds, {found.requests} requests")
    if found.same:
        print("the same requests and the same rounds.jsonl (but wall time)")
        return 0
    if found.request_difference is not None:
        print(f"first differing request: {found.request_difference}")
    if found.row_difference is not None:
        print(f"first differing row field: {found.row_difference}")
    return 1


def _schema(args: argparse.Namespace) -> int:
    import json

    from clusterfed.protocol.schema import json_schema

    text = json.dumps(json_schema(), indent=2) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def _progress(args: argparse.Namespace) -> bool:
    """A progress bar only on a terminal: piped logs get no frames."""
    return not args.quiet and sys.stderr.isatty()


def _resume(args: argparse.Namespace) -> int:
    from clusterfed.api import resume

    result = resume(
        args.folder,
        runtime=args.runtime,
        workers=_workers(args.workers),
        ray_address=args.ray_address,
        clients_per_host=args.clients_per_host,
        progress=_progress(args),
    )
    _report(result)
    return 0


def _workers(workers: int | None) -> int | None:
    """`--workers`, refused outside its bounds before anything runs (and
    before resume touches the folder)."""
    from clusterfed.scenarios.spec import check_workers

    check_workers(workers)
    return workers


def _report(result: RunResult) -> None:
    s = result.summary
    test = s.get("global_acc_final")
    on_test = f", global model on the test split {test:.4f}" if test is not None else ""
    # A run whose every evaluation failed (timed out, or a model gone to
    # NaN) still finished: its accuracy is unknown, not an error.
    print(
        f"{s['scenario']} · {s['algorithm']}: {s['rounds']} rounds,"
        f" final mean accuracy {_number(s['final_mean_acc'], '.4f')}"
        f" ± {_number(s['final_std_acc'], '.4f')}"
        f"{on_test}, clusters {s['n_clusters_final']}, late {s['late_updates']},"
        f" failed {s['failed_updates']}, rejected {s['rejected_messages']},"
        f" {_number(s['wall_s'], '.1f')} s"
    )
    print(f"results: {result.out}")
    if (result.out.parent / "latest").resolve() == result.out.resolve():
        print(f"         {result.out.parent / 'latest'}")


def _number(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def _compare(args: argparse.Namespace) -> int:
    from clusterfed.comparison import compare, seeds_table, table
    from clusterfed.seeds import parse_seeds

    result = compare(
        args.scenario,
        [a.strip() for a in args.algorithms.split(",") if a.strip()],
        out=args.out,
        rounds=args.rounds,
        clients=args.clients,
        seed=args.seed,
        seeds=None if args.seeds is None else parse_seeds(args.seeds),
        overrides=_overrides(args),
        runtime=args.runtime,
        workers=_workers(args.workers),
        ray_address=args.ray_address,
        clients_per_host=args.clients_per_host,
        progress=_progress(args),
        overwrite=args.overwrite,
        resume=args.resume,
    )
    if result.seeds is None:
        print(table(result.summaries))
    else:
        print(seeds_table(result.seed_summaries))
    print(f"results: {result.out}")
    return 0


def _plot(args: argparse.Namespace) -> int:
    from pathlib import Path

    from clusterfed.plots import plot_runs

    folders = [Path(f) for f in args.folders]
    if args.out is not None:
        out = Path(args.out)
    elif len(folders) == 1:
        out = folders[0] / "runs.png"
    else:
        out = Path("runs.png")
    try:
        written = plot_runs(folders, out)
    except (OSError, ValueError) as exc:
        raise ClusterfedError(str(exc)) from exc
    print("\n".join(str(p) for p in written))
    return 0


def _overrides(args: argparse.Namespace) -> list[str]:
    extra = [] if args.dp_epsilon is None else [f"dp.epsilon={args.dp_epsilon}"]
    return [*extra, *args.set]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="clusterfed", description="Simulate clustered federated learning."
    )
    parser.add_argument(
        "--version", action="version", version=f"clusterfed {__version__}"
    )
    sub = parser.add_subparsers(required=True, metavar="COMMAND")
    listing = sub.add_parser(
        "list", help="built-in scenarios, algorithms, datasets, models"
    )
    listing.set_defaults(command=_list)

    run = sub.add_parser("run", help="run a scenario into a results folder")
    run.add_argument(
        "--algorithm",
        help="replace the scenario's algorithm: a name (see `clusterfed list`)"
        " or package.module:Class of your own",
    )
    _common(
        run,
        "results folder, empty or new (default: a new"
        " runs/<scenario>-<algorithm>-seed<seed>-<hash>-<time>; runs/latest"
        " points at it)",
    )
    run.add_argument(
        "--checkpoint-every",
        type=int,
        metavar="N",
        help="write a checkpoint after every N-th round (see `clusterfed resume`)",
    )
    run.add_argument(
        "--trace",
        nargs="?",
        const="full",
        choices=["full", "headers"],
        help="record every envelope into trace.msgpack (see `clusterfed trace`"
        " and `clusterfed replay`); --trace=headers leaves out the bytes",
    )
    run.add_argument(
        "--log",
        metavar="KINDS",
        help="per-round scalars for trackers: csv (scalars.csv), tensorboard"
        " (tensorboard/), or csv,tensorboard",
    )
    run.set_defaults(command=_run)

    trace = sub.add_parser("trace", help="what a run's trace holds, per round")
    trace.add_argument("folder", help="a results folder of a run with --trace")
    trace.add_argument("--client", type=int, action="append", default=[])
    trace.add_argument("--round", type=int, action="append", default=[])
    trace.add_argument("--kind", action="append", default=[], help="e.g. train_task")
    trace.add_argument("--json", action="store_true", help="the records, as JSON")
    trace.set_defaults(command=_trace)

    again_from = sub.add_parser(
        "replay",
        help="re-drive a fresh server from a run's trace; report the first"
        " difference (exit 1)",
    )
    again_from.add_argument("folder", help="a results folder of a run with --trace")
    again_from.add_argument(
        "--trust",
        action="store_true",
        help="let a package.module:Class algorithm be imported from the current"
        " folder (by default only an installed one: the folder may be anyone's)",
    )
    again_from.set_defaults(command=_replay)

    schema = sub.add_parser("schema", help="the protocol's JSON Schema (draft 2020-12)")
    schema.add_argument("--out", help="write it to this file (default: stdout)")
    schema.set_defaults(command=_schema)

    again = sub.add_parser(
        "resume", help="continue a stopped run from its last checkpoint"
    )
    again.add_argument("folder", help="the results folder of the stopped run")
    again.add_argument(
        "--runtime", choices=["local", "ray"], help="default: the run's own"
    )
    again.add_argument(
        "--ray-address", help="join a running Ray cluster: auto or HOST:PORT"
    )
    again.add_argument(
        "--clients-per-host", type=int, help="logical clients per Ray host actor"
    )
    again.add_argument(
        "--workers", type=int, help="worker processes (default: one per core)"
    )
    again.add_argument("--quiet", action="store_true", help="no progress bar")
    again.set_defaults(command=_resume)

    compare = sub.add_parser(
        "compare",
        help="run several algorithms on one scenario and seed (or seeds), side by side",
    )
    compare.add_argument(
        "--algorithms", required=True, help="comma-separated, e.g. dcfl,cfl,fedavg"
    )
    _common(
        compare,
        "folder of the runs, empty or new (default: a new"
        " runs/<scenario>-compare-seed<seed>-<hash>-<time>)",
    )
    compare.add_argument(
        "--seeds",
        metavar="N|S,S,...",
        help="run every algorithm on several seeds and report the mean and 95%%"
        " interval over them: a single number is a count (3: seeds 0,1,2), a"
        " comma-separated list names the seeds (0,1,2); each seed's comparison"
        " goes into OUT/seed<s>/ (runs OUT/seed<s>/<algorithm>/), the intervals"
        " into OUT/seeds.json. Not with --seed",
    )
    compare.add_argument(
        "--resume",
        action="store_true",
        help="go on with the comparison in --out (one stopped midway, or more"
        " seeds for one that finished): runs that finished there with the same"
        " settings are read back, the others run afresh",
    )
    compare.set_defaults(command=_compare)

    plot = sub.add_parser(
        "plot",
        help="accuracy, clusters and ARI of several runs (or a compare folder)"
        " side by side",
    )
    plot.add_argument("folders", nargs="+", metavar="DIR", help="results folders")
    plot.add_argument(
        "--out",
        help="figure path, .png and .pdf are written (default DIR/runs.png for"
        " one folder, ./runs.png for several)",
    )
    plot.set_defaults(command=_plot)
    return parser


def _common(parser: argparse.ArgumentParser, out_help: str) -> None:
    parser.add_argument(
        "scenario", help="a built-in name or a .toml / .py scenario file"
    )
    parser.add_argument("--runtime", default="local", choices=["local", "ray"])
    parser.add_argument(
        "--ray-address", help="join a running Ray cluster: auto or HOST:PORT"
    )
    parser.add_argument(
        "--clients-per-host", type=int, help="logical clients per Ray host actor"
    )
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--clients", type=int)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--out", help=out_help)
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the results in a non-empty --out (never other files)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a scenario field (partition.alpha=0.1) or an algorithm"
        " parameter (distance=cosine)",
    )
    parser.add_argument(
        "--workers", type=int, help="worker processes (default: one per core)"
    )
    parser.add_argument(
        "--dp-epsilon",
        type=float,
        help="local DP budget per client (same as --set dp.epsilon=E)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


if __name__ == "__main__":
    sys.exit(main())
