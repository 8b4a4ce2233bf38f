"""The public entry points: `run` one scenario into a results folder, and
`resume` a run that stopped, from its last checkpoint."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from clusterfed.actors.runtimes import Runtime, local_runtime
from clusterfed.errors import ConfigError
from clusterfed.scenarios import Scenario, load_scenario, validate, with_overrides

from .checkpoint import Checkpoint, read_checkpoint
from .federation import Federation, OnRound, RunResult, canonical, drive

RUNTIMES = ("local", "ray")


def run(
    scenario: Scenario | str | Path,
    *,
    out: str | Path | None = None,
    runtime: str | Runtime = "local",
    algorithm: str | None = None,
    rounds: int | None = None,
    clients: int | None = None,
    seed: int | None = None,
    overrides: Sequence[str] = (),
    workers: int | None = None,
    ray_address: str | None = None,
    clients_per_host: int | None = None,
    progress: bool = False,
    checkpoint_every: int | None = None,
    on_round: OnRound | None = None,
) -> RunResult:
    """Run `scenario` and write its results folder.

    Args:
        scenario: a `Scenario`, a built-in name, or a path to a .toml/.py file.
        out: results folder; default `runs/<scenario>-<algorithm>-seed<seed>`.
        runtime: "local" (one process, asyncio, worker processes), "ray", or
            a runtime object built by hand (e.g. a configured `RayRuntime`).
        algorithm, rounds, clients, seed: replace the scenario's own values.
        overrides: `key.path=value` assignments, as `--set` on the command line.
        workers: worker processes of the local runtime (default: one per core).
        ray_address: a running Ray cluster ("auto", "HOST:PORT"); None starts
            a local Ray for the run and stops it afterwards.
        clients_per_host: logical clients per Ray host actor.
        progress: show a progress bar per round.
        checkpoint_every: write a checkpoint into the results folder after
            every N-th round, from which `resume` continues a stopped run.
        on_round: called with each round's row (as rounds.jsonl has it) as
            soon as the round is recorded.

    Raises:
        ScenarioError: the scenario or an override is invalid (nothing has run).
        ConfigError: an unknown runtime, or checkpoint_every below 1.
    """
    if checkpoint_every is not None and checkpoint_every < 1:
        raise ConfigError(f"checkpoint_every must be >= 1, got {checkpoint_every}")
    resolved = with_overrides(
        load_scenario(scenario),
        overrides,
        algorithm=algorithm,
        rounds=rounds,
        clients=clients,
        seed=seed,
    )
    folder = Path(out) if out is not None else default_out(resolved)
    host = make_runtime(
        runtime, workers=workers, address=ray_address, clients_per_host=clients_per_host
    )
    return asyncio.run(
        _run(
            resolved,
            folder,
            host,
            progress,
            checkpoint_every=checkpoint_every,
            on_round=on_round,
        )
    )


def resume(
    out: str | Path,
    *,
    runtime: str | Runtime | None = None,
    workers: int | None = None,
    ray_address: str | None = None,
    clients_per_host: int | None = None,
    progress: bool = False,
) -> RunResult:
    """Continue the run in results folder `out` from its last checkpoint.

    The scenario and runtime come from its config.json; rounds.jsonl is cut
    back to the checkpointed rounds, and the rounds after them run again, as
    the uninterrupted run would have run them. It goes on writing checkpoints
    as the run did.

    Args:
        out: the results folder of a run started with `checkpoint_every`.
        runtime: replaces the run's runtime ("local", "ray" or an object).
        workers, ray_address, clients_per_host, progress: as for `run`.

    Raises:
        ConfigError: the folder holds no run, no checkpoint, a checkpoint of
            another scenario, or a finished run.
    """
    folder = Path(out)
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{folder}: no run to resume: {exc}") from exc
    if (folder / "summary.json").exists():
        raise ConfigError(f"{folder}: the run finished (summary.json): nothing to do")
    checkpoint = read_checkpoint(folder)
    if canonical(checkpoint.scenario) != canonical(config.get("scenario")):
        raise ConfigError(
            f"{folder}: the checkpoint belongs to another scenario than config.json"
        )
    scenario = validate(checkpoint.scenario, source=str(folder / "config.json"))
    host = make_runtime(
        runtime if runtime is not None else config.get("runtime", "local"),
        workers=workers,
        address=ray_address,
        clients_per_host=clients_per_host,
    )
    return asyncio.run(
        _run(
            scenario,
            folder,
            host,
            progress,
            checkpoint_every=config.get("checkpoint_every"),
            start=checkpoint,
        )
    )


def make_runtime(
    runtime: str | Runtime,
    *,
    workers: int | None = None,
    address: str | None = None,
    clients_per_host: int | None = None,
) -> Runtime:
    """A runtime by name ("local", "ray"), or `runtime` itself if it is one."""
    if not isinstance(runtime, str):
        return runtime
    if runtime == "local":
        return local_runtime(workers)
    if runtime == "ray":
        from clusterfed.actors.runtimes.ray import RayRuntime

        return RayRuntime(address=address, clients_per_host=clients_per_host)
    raise ConfigError(f"unknown runtime {runtime!r}; known: {', '.join(RUNTIMES)}")


def default_out(scenario: Scenario) -> Path:
    return Path("runs") / f"{scenario.name}-{scenario.algorithm}-seed{scenario.seed}"


async def _run(
    scenario: Scenario,
    out: Path,
    runtime: Runtime,
    progress: bool,
    *,
    checkpoint_every: int | None = None,
    start: Checkpoint | None = None,
    on_round: OnRound | None = None,
) -> RunResult:
    """Run the rounds of `scenario`, from the first or from checkpoint `start`;
    under Ray the federation runs in a Ray actor and this loop only streams."""
    config = {
        "scenario": scenario.model_dump(mode="json"),
        "seed": scenario.seed,
        "runtime": runtime.name,
        "checkpoint_every": checkpoint_every,
    }
    options: dict[str, Any] = dict(
        config=config, checkpoint_every=checkpoint_every, resume=start
    )
    federation: Any
    if runtime.name == "ray":
        from .remote import RemoteFederation

        federation = RemoteFederation(scenario, runtime, out, **options)  # type: ignore[arg-type]
    else:
        federation = Federation(scenario, runtime, out, **options)
    return await drive(federation, progress=progress, on_round=on_round)
