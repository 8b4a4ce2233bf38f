"""The `clusterfed` command line (DESIGN §9)."""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from clusterfed import cli_net
from clusterfed.cli_parser import build_parser
from clusterfed.errors import ClusterfedError, ConfigError, ScenarioWarning
from clusterfed.protocol.codec import printable

if TYPE_CHECKING:
    from clusterfed.api import RunResult

# Ctrl-C ends a command with this status (128 + SIGINT), as shells do.
INTERRUPTED = 130


def main(argv: Sequence[str] | None = None) -> int:
    warnings.showwarning = _show_warning
    args = build_parser().parse_args(argv)
    try:
        return int(COMMANDS[args.command](args) or 0)
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
    for name, words in catalogue.datasets().items():
        print(f"  {name:<26} {words}".rstrip())
    print("models:")
    for name in catalogue.models():
        print(f"  {name}")
    return 0


def _run(args: argparse.Namespace) -> int:
    _loading(args, args.scenario)
    from clusterfed.api import run

    result = run(
        args.scenario,
        out=args.out,
        algorithm=args.algorithm,
        seed=args.seed,
        **_scenario_options(args),
        **_runtime_options(args),
        checkpoint_every=args.checkpoint_every,
        overwrite=args.overwrite,
        trace=args.trace,
        log=args.log,
        mlflow_uri=args.mlflow_uri,
    )
    _report(result)
    return 0


def _trace(args: argparse.Namespace) -> int:
    from clusterfed.trace_report import report

    try:
        text = report(
            args.folder,
            clients=args.client,
            rounds=args.round,
            kinds=args.kind,
            json_output=args.json,
        )
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{args.folder}: no readable trace: {exc}") from exc
    return _print_to_pipe(text)


def _print_to_pipe(text: str) -> int:
    """Print `text`; a reader that stops early (`| head`) ends it quietly."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        # Python would report the pipe again when it flushes stdout at exit:
        # point stdout at /dev/null first (the recipe of Python's docs).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
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


def _loading(args: argparse.Namespace, what: str) -> None:
    """Say at once, on a terminal, what the seconds of imports are for
    (torch alone takes seconds) before the progress bar can."""
    if _progress(args):
        print(f"clusterfed: {what}: loading torch and the scenario…", file=sys.stderr)


def _progress(args: argparse.Namespace) -> bool:
    """A progress bar only on a terminal: piped logs get no frames."""
    return not args.quiet and sys.stderr.isatty()


def _resume(args: argparse.Namespace) -> int:
    _loading(args, args.folder)
    from clusterfed.api import resume

    result = resume(args.folder, **_runtime_options(args))
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
    _loading(args, args.scenario)
    from clusterfed.comparison import compare
    from clusterfed.seeds import parse_seeds
    from clusterfed.tables import seeds_table, table

    result = compare(
        args.scenario,
        [a.strip() for a in args.algorithms.split(",") if a.strip()],
        out=args.out,
        seed=args.seed,
        seeds=None if args.seeds is None else parse_seeds(args.seeds),
        **_scenario_options(args),
        **_runtime_options(args),
        overwrite=args.overwrite,
        resume=args.resume,
        checkpoint_every=args.checkpoint_every,
    )
    if result.seeds is None:
        print(table(result.summaries))
    else:
        print(seeds_table(result.seed_summaries))
    print(f"results: {result.out}")
    return 0


def _sweep(args: argparse.Namespace) -> int:
    if args.out is None:
        raise ConfigError("a sweep needs --out: the folder that holds every cell")
    if args.overwrite:
        raise ConfigError("--overwrite is not for a sweep: use --resume or a new --out")
    _loading(args, args.scenario)
    from clusterfed.seeds import parse_seeds
    from clusterfed.sweeps import parse_grid, sweep, sweep_table

    if args.seed is not None:
        raise ConfigError("a sweep takes --seeds (a count or a list), not --seed")
    result = sweep(
        args.scenario,
        parse_grid(args.grid),
        out=args.out,
        seeds=parse_seeds(args.seeds),
        resume=args.resume,
        **_scenario_options(args),
        **_runtime_options(args),
    )
    print(sweep_table(result))
    print(f"results: {result.out}")
    return 0


def _plot(args: argparse.Namespace) -> int:
    from pathlib import Path

    from clusterfed.plots_runs import plot_runs

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


def _scenario_options(args: argparse.Namespace) -> dict[str, Any]:
    """The scenario's values that `run`, `serve`, `compare` and `sweep` all
    replace from their options (`cli_parser._common`): --rounds, --clients and
    the overrides (--set and its shorthands). --seed and --algorithm are not
    here: a sweep refuses --seed, and compare and sweep take algorithms."""
    return {
        "rounds": args.rounds,
        "clients": args.clients,
        "overrides": _overrides(args),
    }


def _runtime_options(args: argparse.Namespace) -> dict[str, Any]:
    """Where and how `run`, `resume`, `compare` and `sweep` run: one list, so
    that a runtime option reaches every command that parses it."""
    return {
        "runtime": args.runtime,
        "workers": _workers(args.workers),
        "ray_address": args.ray_address,
        "clients_per_host": args.clients_per_host,
        "gpus_per_host": args.gpus_per_host,
        "progress": _progress(args),
    }


def _overrides(args: argparse.Namespace) -> list[str]:
    extra = [] if args.dp_epsilon is None else [f"dp.epsilon={args.dp_epsilon}"]
    if args.device is not None:
        extra.append(f"compute.device={args.device}")
    if args.cohort is not None:
        extra.append(f"compute.cohort={args.cohort}")
    if getattr(args, "rows", None) is not None:  # `run` has it
        extra.append(f"rows={args.rows}")
    return [*extra, *args.set]


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "list": _list,
    "run": _run,
    "trace": _trace,
    "replay": _replay,
    "schema": _schema,
    "resume": _resume,
    "compare": _compare,
    "sweep": _sweep,
    "plot": _plot,
    **cli_net.COMMANDS,
}


if __name__ == "__main__":
    sys.exit(main())
