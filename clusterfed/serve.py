"""`clusterfed serve`: a run whose external clients connect over TCP.

The scenario runs as `clusterfed run` would run it, in the local runtime,
except for the `external` client ids: those are played by processes that
connect (`clusterfed client`, examples/numpy_client.py, examples/js-client,
anything that speaks docs/protocol.md). Each external client gets a token,
written to `tokens.json` in the results folder (mode 0600) unless the user
names a tokens file of their own.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from clusterfed.actors.runtimes.net_io import parse_address
from clusterfed.actors.runtimes.network import NetworkRuntime
from clusterfed.errors import ConfigError
from clusterfed.scenarios import Scenario, load_scenario, with_overrides

from .api import default_out, make_runtime, run
from .results import RunResult

TOKENS_FILE = "tokens.json"


def parse_ids(text: str) -> list[int]:
    """`0,3,7` as [0, 3, 7]; ConfigError naming what is not an id."""
    ids = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        if not part.isdigit():
            raise ConfigError(f"--external: {part!r} is not a client id")
        ids.append(int(part))
    if len(set(ids)) != len(ids):
        raise ConfigError(f"--external: {text!r} names a client twice")
    return sorted(ids)


def draw_tokens(clients: Sequence[int]) -> dict[int, str]:
    """One fresh token (32 hex digits) per client."""
    return {c: secrets.token_hex(16) for c in clients}


def read_tokens(path: Path) -> dict[int, str]:
    """Tokens from a JSON file `{"id": "token", …}`; ConfigError naming the
    problem."""
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot read tokens: {exc}") from exc
    if not isinstance(raw, dict) or not all(
        isinstance(k, str) and k.isdigit() and isinstance(v, str) and v
        for k, v in raw.items()
    ):
        raise ConfigError(f'{path}: expected {{"client id": "token", ...}}')
    return {int(k): v for k, v in raw.items()}


def write_tokens(path: Path, tokens: Mapping[int, str]) -> None:
    """The tokens as JSON, readable by the owner only."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump({str(c): t for c, t in sorted(tokens.items())}, handle, indent=1)


def serve(
    scenario: Scenario | str | Path,
    *,
    external: Sequence[int],
    listen: str = "127.0.0.1:0",
    out: str | Path | None = None,
    tokens_file: str | Path | None = None,
    on_listen: Callable[[str, int, Path], None] | None = None,
    workers: int | None = None,
    join_timeout_s: float = 300.0,
    frame_timeout_s: float = 10.0,
    algorithm: str | None = None,
    rounds: int | None = None,
    clients: int | None = None,
    seed: int | None = None,
    overrides: Sequence[str] = (),
    overwrite: bool = False,
    trace: str | None = None,
    **options: Any,
) -> RunResult:
    """Run `scenario` with the `external` clients connected over TCP.

    Args:
        external: the client ids played by connected processes.
        listen: HOST:PORT to listen on; port 0 picks a free one.
        tokens_file: a JSON file of each external client's token (default:
            fresh tokens, written to `tokens.json` in the results folder).
        on_listen: called with (host, port, tokens file) once listening.
        join_timeout_s: how long the run waits for an external client's
            first connection.
        frame_timeout_s: how long a frame's body may take after its header,
            and each step of the handshake.
        Others: as `clusterfed.run`.

    Raises:
        ConfigError: a bad address, or tokens that do not cover `external`.
    """
    try:
        host, port = parse_address(listen)
    except ValueError as exc:
        raise ConfigError(f"--listen: {exc}") from exc
    resolved = with_overrides(
        load_scenario(scenario),
        overrides,
        algorithm=algorithm,
        rounds=rounds,
        clients=clients,
        seed=seed,
    )
    folder = Path(out) if out is not None else default_out(resolved)
    if tokens_file is not None:
        tokens_path = Path(tokens_file)
        keys = read_tokens(tokens_path)
    else:
        tokens_path, keys = folder / TOKENS_FILE, draw_tokens(external)
    missing = sorted(set(external) - set(keys))
    if missing:
        raise ConfigError(f"{tokens_path}: no token for external clients {missing}")

    def listening(bound_host: str, bound_port: int) -> None:
        if tokens_file is None:
            write_tokens(tokens_path, keys)
        if on_listen is not None:
            on_listen(bound_host, bound_port, tokens_path)

    inner = make_runtime("local", workers=workers, compute=resolved.compute)
    runtime = NetworkRuntime(
        inner,
        external,
        keys,
        host=host,
        port=port,
        on_listen=listening,
        join_timeout_s=join_timeout_s,
        frame_timeout_s=frame_timeout_s,
        handshake_timeout_s=frame_timeout_s,
    )
    return run(
        resolved, out=folder, runtime=runtime, overwrite=overwrite, trace=trace,
        **options,
    )  # fmt: skip


def announce(host: str, port: int, tokens_path: Path) -> None:
    """What `clusterfed serve` prints once listening: the address first, on
    a line of its own, for scripts that start clients."""
    print(f"listening on {host}:{port}", flush=True)
    print(f"tokens: {tokens_path}", file=sys.stderr, flush=True)
