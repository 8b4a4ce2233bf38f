"""The `clusterfed` command line (DESIGN §9)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from clusterfed.errors import ClusterfedError


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return int(args.command(args) or 0)
    except ClusterfedError as exc:
        print(f"clusterfed: error: {exc}", file=sys.stderr)
        return 2


def _list(args: argparse.Namespace) -> int:
    from clusterfed.algorithms import algorithms, parameters
    from clusterfed.data import DATASETS
    from clusterfed.models import MODELS
    from clusterfed.scenarios import BUILTIN

    print("scenarios:")
    for name, build in BUILTIN.items():
        print(f"  {name:<20} {(build.__doc__ or '').strip().splitlines()[0]}")
    print("algorithms:")
    for name in algorithms():
        params = ", ".join(f"{k}={v!r}" for k, v in parameters(name).items())
        print(f"  {name:<20} {params}")
    print("datasets:")
    for name in DATASETS:
        print(f"  {name}")
    print("models:")
    for name in MODELS:
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
        overrides=args.set,
        workers=args.workers,
        progress=not args.quiet,
    )
    s = result.summary
    print(
        f"{s['scenario']} · {s['algorithm']}: {s['rounds']} rounds,"
        f" final mean accuracy {s['final_mean_acc']:.4f} ± {s['final_std_acc']:.4f},"
        f" clusters {s['n_clusters_final']}, rejected {s['rejected_messages']},"
        f" failed {s['failed_updates']}, {s['wall_s']:.1f} s"
    )
    print(f"results: {result.out}")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="clusterfed", description="Simulate clustered federated learning."
    )
    sub = parser.add_subparsers(required=True, metavar="COMMAND")
    listing = sub.add_parser(
        "list", help="built-in scenarios, algorithms, datasets, models"
    )
    listing.set_defaults(command=_list)

    run = sub.add_parser("run", help="run a scenario into a results folder")
    run.add_argument("scenario", help="a built-in name or a .toml / .py scenario file")
    run.add_argument("--algorithm", help="replace the scenario's algorithm")
    run.add_argument("--runtime", default="local", choices=["local"])
    run.add_argument("--rounds", type=int)
    run.add_argument("--clients", type=int)
    run.add_argument("--seed", type=int)
    run.add_argument(
        "--out", help="results folder (default runs/<scenario>-<algorithm>-seed<seed>)"
    )
    run.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a scenario field, e.g. --set partition.alpha=0.1",
    )
    run.add_argument(
        "--workers", type=int, help="training threads (default: one per core)"
    )
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.set_defaults(command=_run)
    return parser


if __name__ == "__main__":
    sys.exit(main())
