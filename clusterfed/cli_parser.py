"""The `clusterfed` command line's arguments: one parser, a sub-parser per
command. `command` on the parsed arguments names the handler in
`clusterfed.cli.COMMANDS`."""

from __future__ import annotations

import argparse

from clusterfed import __version__, cli_net


def build_parser() -> argparse.ArgumentParser:
    """The command line's parser; `command` names the handler (`cli.COMMANDS`)."""
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
    listing.set_defaults(command="list")

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
        "--rows",
        choices=["full", "summary"],
        help="rounds.jsonl's per-client detail (the scenario's `rows`): summary"
        " writes each round's participants as a digest",
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
        help="per-round scalars for trackers, comma-separated: csv (scalars.csv),"
        " tensorboard (tensorboard/), mlflow (a file store in mlruns/ unless"
        " --mlflow-uri), wandb (offline in wandb/ unless WANDB_MODE=online)",
    )
    run.add_argument(
        "--mlflow-uri",
        metavar="URI",
        help="the MLflow tracking server or store for --log mlflow",
    )
    run.set_defaults(command="run")

    trace = sub.add_parser("trace", help="what a run's trace holds, per round")
    trace.add_argument("folder", help="a results folder of a run with --trace")
    trace.add_argument("--client", type=int, action="append", default=[])
    trace.add_argument("--round", type=int, action="append", default=[])
    trace.add_argument("--kind", action="append", default=[], help="e.g. train_task")
    trace.add_argument("--json", action="store_true", help="the records, as JSON")
    trace.set_defaults(command="trace")

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
    again_from.set_defaults(command="replay")

    schema = sub.add_parser("schema", help="the protocol's JSON Schema (draft 2020-12)")
    schema.add_argument("--out", help="write it to this file (default: stdout)")
    schema.set_defaults(command="schema")

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
    _gpus_per_host(again)
    again.add_argument("--quiet", action="store_true", help="no progress bar")
    again.set_defaults(command="resume")

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
        "--checkpoint-every",
        type=int,
        metavar="N",
        help="each run writes a checkpoint after every N-th round; --resume goes"
        " on from it",
    )
    compare.add_argument(
        "--resume",
        action="store_true",
        help="go on with the comparison in --out (one stopped midway, or more"
        " seeds for one that finished): runs that finished there with the same"
        " settings are read back, runs of those settings stopped after a"
        " checkpoint go on from it, the others run afresh",
    )
    compare.set_defaults(command="compare")

    grid = sub.add_parser(
        "sweep",
        help="run a scenario over a grid of settings x algorithms x seeds, one"
        " folder, resumable",
    )
    grid.add_argument(
        "--grid",
        action="append",
        default=[],
        required=True,
        metavar="KEY=V1,V2,...",
        help="a grid axis: a scenario field or algorithm parameter as --set"
        " takes it (train.lr=0.01,0.05), or algorithm=dcfl,cfl; repeat for more",
    )
    _common(grid, "folder of the sweep, empty or new (each cell in OUT/<cell>/)")
    grid.add_argument(
        "--seeds",
        default="1",
        metavar="N|S,S,...",
        help="seeds of every cell: a count (3: seeds 0,1,2) or a list (default 1)",
    )
    grid.add_argument(
        "--resume",
        action="store_true",
        help="go on with the sweep in --out: runs that finished there with the"
        " same settings are read back, the missing ones run",
    )
    grid.set_defaults(command="sweep")

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
    plot.set_defaults(command="plot")
    cli_net.add_parsers(sub, _common)
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
    parser.add_argument(
        "--device",
        help="where clients train, evaluate and probe: cpu (default), cuda,"
        " cuda:N or mps (same as --set compute.device=D); a device this machine"
        " lacks is refused before anything runs",
    )
    parser.add_argument(
        "--cohort",
        type=int,
        metavar="N",
        help="train up to N train tasks of one host as one stacked computation"
        " (same as --set compute.cohort=N; default 1: one at a time)",
    )
    _gpus_per_host(parser)
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def _gpus_per_host(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--gpus-per-host",
        type=float,
        metavar="F",
        help="GPUs each Ray host actor asks for (0.25: four hosts share a GPU);"
        " --runtime ray with a GPU device",
    )
