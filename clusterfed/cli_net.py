"""The command line's network commands: `serve`, `client`, `conformance`
(docs/usage.md, *Clients over TCP*). `cli_parser` adds their parsers,
`cli.COMMANDS` takes their handlers."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from clusterfed.errors import ConfigError


def add_parsers(
    sub: Any, common: Callable[[argparse.ArgumentParser, str], None]
) -> None:
    """Add `serve`, `client` and `conformance` to the sub-parsers `sub`."""
    serve = sub.add_parser(
        "serve", help="run a scenario whose --external clients connect over TCP"
    )
    common(serve, "results folder (tokens.json is written there)")
    serve.add_argument(
        "--listen",
        default="127.0.0.1:0",
        metavar="HOST:PORT",
        help="where to listen (default 127.0.0.1:0: a free port, printed)",
    )
    serve.add_argument(
        "--external",
        required=True,
        metavar="IDS",
        help="client ids played by connected processes: 0,3,7",
    )
    serve.add_argument(
        "--tokens",
        metavar="FILE",
        help='the clients\' tokens as JSON {"id": "token"} (default: fresh ones'
        " in the results folder's tokens.json)",
    )
    serve.add_argument(
        "--join-timeout",
        type=float,
        default=300.0,
        metavar="S",
        help="how long to wait for an external client's first connection",
    )
    serve.add_argument(
        "--frame-timeout",
        type=float,
        default=10.0,
        metavar="S",
        help="how long a frame may take: each step of the handshake, and a"
        " frame's body once its length is in (default 10)",
    )
    serve.add_argument("--algorithm", help="replace the scenario's algorithm")
    serve.add_argument("--trace", nargs="?", const="full", choices=["full", "headers"])
    serve.set_defaults(command="serve")

    client = sub.add_parser("client", help="the Python reference client over TCP")
    client.add_argument("--connect", required=True, metavar="HOST:PORT")
    client.add_argument("--id", required=True, type=int, dest="client_id")
    client.add_argument("--token", required=True)
    client.add_argument(
        "--retry",
        type=float,
        default=30.0,
        metavar="S",
        help="keep trying to (re)connect for S seconds",
    )
    client.set_defaults(command="client")

    suite = sub.add_parser(
        "conformance",
        help="play a scripted server against a client: -- CMD with {address},"
        " {id} and {token} in it",
    )
    suite.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        metavar="S",
        help="how long the client may take to answer one request",
    )
    suite.add_argument(
        "client_command",
        nargs=argparse.REMAINDER,
        metavar="-- CMD",
        help="starts the client under test, e.g. -- node client.js --connect"
        " {address} --id {id} --token {token}",
    )
    suite.set_defaults(command="conformance")


def _serve(args: argparse.Namespace) -> int:
    from clusterfed.cli import _progress, _report, _scenario_options, _workers
    from clusterfed.serve import announce, parse_ids, serve

    if args.runtime != "local":
        raise ConfigError("serve hosts its simulated clients in the local runtime")
    result = serve(
        args.scenario,
        external=parse_ids(args.external),
        listen=args.listen,
        out=args.out,
        tokens_file=args.tokens,
        on_listen=announce,
        workers=_workers(args.workers),
        join_timeout_s=args.join_timeout,
        frame_timeout_s=args.frame_timeout,
        algorithm=args.algorithm,
        seed=args.seed,
        **_scenario_options(args),
        overwrite=args.overwrite,
        trace=args.trace,
        progress=_progress(args),
    )
    _report(result)
    return 0


def _client(args: argparse.Namespace) -> int:
    from clusterfed.net_client import NotAdmitted, connect

    try:
        ended = connect(args.connect, args.client_id, args.token, args.retry)
    except ValueError as exc:
        raise ConfigError(f"--connect: {exc}") from exc
    except NotAdmitted as exc:
        print(f"clusterfed: refused: {exc}", file=sys.stderr)
        return 2
    except ConnectionError as exc:
        print(f"clusterfed: {exc}", file=sys.stderr)
        return 1
    print(f"client {args.client_id}: {ended}")
    return 0


def _conformance(args: argparse.Namespace) -> int:
    from clusterfed.client_conformance import check, parse_command, report

    words = list(args.client_command)
    if words[:1] == ["--"]:
        words = words[1:]
    if not words:
        raise ConfigError("conformance: give the client's command after --")
    verdicts = check(parse_command(words), timeout_s=args.timeout)
    print(report(verdicts))
    return 0 if all(v.passed for v in verdicts) else 1


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "serve": _serve,
    "client": _client,
    "conformance": _conformance,
}
