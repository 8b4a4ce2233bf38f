"""The public entry points: `run` one scenario into a results folder, and
`resume` a run that stopped, from its last checkpoint."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from clusterfed.actors.compute import ComputeSpec, check_device, start_method
from clusterfed.actors.runtimes import Runtime, local_runtime
from clusterfed.actors.trace import TRACE_MODES, TraceMode
from clusterfed.errors import ConfigError
from clusterfed.scenarios import Scenario, load_scenario, validate, with_overrides
from clusterfed.scenarios.spec import check_workers

from .checkpoint import Checkpoint, read_checkpoint
from .driving import (
    OnRound,
    RunInterrupted,
    RunsRounds,
    canonical,
    drive,
    run_to_end,
)
from .federation import Federation
from .folders import claim, default_folder, point_latest
from .provenance import run_provenance
from .results import Row, RunResult
from .tracking import ScalarLog, parse_logs

__all__ = [
    "RUNTIMES",
    "RunResult",
    "default_out",
    "make_runtime",
    "resume",
    "run",
]

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
    gpus_per_host: float | None = None,
    progress: bool = False,
    checkpoint_every: int | None = None,
    on_round: OnRound | None = None,
    overwrite: bool = False,
    command: Sequence[str] | None = None,
    trace: str | None = None,
    log: str | Sequence[str] | None = None,
    mlflow_uri: str | None = None,
) -> RunResult:
    """Run `scenario` and write its results folder.

    Args:
        scenario: a `Scenario`, a built-in name, or a path to a .toml/.py file.
        out: results folder, which must be empty or missing (see
            `overwrite`); default a new folder
            `runs/<scenario>-<algorithm>-seed<seed>-<hash>-<time>`, where
            `hash` is six hex digits of the resolved scenario, and
            `runs/latest` is pointed at it.
        runtime: "local" (one process, asyncio, worker processes), "ray", or
            a runtime object built by hand (e.g. a configured `RayRuntime`).
        algorithm, rounds, clients, seed: replace the scenario's own values.
        overrides: `key.path=value` assignments, as `--set` on the command line.
        workers: worker processes of the local runtime (default: one per core).
        ray_address: a running Ray cluster ("auto", "HOST:PORT"); None starts
            a local Ray for the run and stops it afterwards.
        clients_per_host: logical clients per Ray host actor.
        gpus_per_host: GPUs each Ray host actor asks for (a fraction shares
            one GPU among hosts); for runs on a CUDA device.
        progress: show a progress bar per round.
        checkpoint_every: write a checkpoint into the results folder after
            every N-th round, from which `resume` continues a stopped run.
        on_round: called with each round's row (as rounds.jsonl has it) as
            soon as the round is recorded.
        overwrite: replace the results in a non-empty `out` (a folder that
            holds no clusterfed results is never emptied).
        command: the command line config.json records (default `sys.argv`).
        trace: "full" records every envelope into trace.msgpack in the
            folder, "headers" every envelope's header (see docs/protocol.md).
        log: per-round scalars for trackers, any of "csv", "tensorboard",
            "mlflow", "wandb" (a list or "csv,mlflow"); see docs/results.md.
        mlflow_uri: the MLflow tracking URI for `log` "mlflow" (default
            MLFLOW_TRACKING_URI, else a file store in the run folder).

    Raises:
        ScenarioError: the scenario or an override is invalid (nothing has run).
        ConfigError: an unknown runtime, workers outside 1..256, a device
            this machine does not have (`compute.device`),
            checkpoint_every below 1, or `out` is not empty and `overwrite`
            is off (nothing has run).
        RunInterrupted: Ctrl-C (SIGINT); the rounds that finished are in the
            folder with their summary.json and plots.
    """
    if checkpoint_every is not None and checkpoint_every < 1:
        raise ConfigError(f"checkpoint_every must be >= 1, got {checkpoint_every}")
    # The mode as its Literal type: found among the modes, not asserted.
    mode = next((m for m in TRACE_MODES if m == trace), None)
    if trace is not None and mode is None:
        raise ConfigError(
            f"trace must be one of {', '.join(TRACE_MODES)}, got {trace!r}"
        )
    logs = parse_logs(log)
    resolved = with_overrides(
        load_scenario(scenario),
        overrides,
        algorithm=algorithm,
        rounds=rounds,
        clients=clients,
        seed=seed,
    )
    host = make_runtime(
        runtime,
        workers=workers,
        address=ray_address,
        clients_per_host=clients_per_host,
        compute=resolved.compute,
        gpus_per_host=gpus_per_host,
    )
    if out is not None:
        folder = claim(Path(out), overwrite=overwrite)
    else:
        folder = claim(default_out(resolved))
        point_latest(folder)
    return run_to_end(
        _run(
            resolved,
            folder,
            host,
            progress,
            checkpoint_every=checkpoint_every,
            on_round=on_round,
            provenance=run_provenance(command),
            trace=mode,
            logs=logs,
            mlflow_uri=mlflow_uri,
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
    gpus_per_host: float | None = None,
) -> RunResult:
    """Continue the run in results folder `out` from its last checkpoint.

    The scenario and runtime come from its config.json; rounds.jsonl is cut
    back to the checkpointed rounds, and the rounds after them run again, as
    the uninterrupted run would have run them. It goes on writing checkpoints
    as the run did.

    Args:
        out: the results folder of a run started with `checkpoint_every`.
        runtime: replaces the run's runtime ("local", "ray" or an object).
        workers, ray_address, clients_per_host, progress, gpus_per_host: as
            for `run`.

    Raises:
        ConfigError: the folder holds no run, no checkpoint, a checkpoint of
            another scenario, or a finished run.
    """
    folder = Path(out)
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{folder}: no run to resume: {exc}") from exc
    if _finished(folder):
        raise ConfigError(f"{folder}: the run finished (summary.json): nothing to do")
    checkpoint = checkpoint_of(folder, config)
    scenario = validate(checkpoint.scenario, source=str(folder / "config.json"))
    # An interrupted run's summary covers the rounds before the interrupt.
    (folder / "summary.json").unlink(missing_ok=True)
    host = make_runtime(
        runtime if runtime is not None else config.get("runtime", "local"),
        workers=workers,
        address=ray_address,
        clients_per_host=clients_per_host,
        compute=scenario.compute,
        gpus_per_host=gpus_per_host,
    )
    return run_to_end(
        _run(
            scenario,
            folder,
            host,
            progress,
            checkpoint_every=config.get("checkpoint_every"),
            start=checkpoint,
            logs=parse_logs(config.get("log")),
        )
    )


def checkpoint_of(folder: Path, config: dict[str, Any]) -> Checkpoint:
    """The checkpoint of the run in `folder`, whose config.json holds
    `config`.

    Raises:
        ConfigError: what `read_checkpoint` refuses, or a checkpoint of
            another scenario than config.json's.
    """
    checkpoint = read_checkpoint(folder)
    if canonical(checkpoint.scenario) != canonical(config.get("scenario")):
        raise ConfigError(
            f"{folder}: the checkpoint belongs to another scenario than config.json"
        )
    return checkpoint


def _finished(folder: Path) -> bool:
    """Whether the run in `folder` ran to its end (an interrupted run
    writes a summary too, marked `interrupted`)."""
    try:
        summary = json.loads((folder / "summary.json").read_text())
    except (OSError, ValueError):
        return False
    return not summary.get("interrupted", False)


def make_runtime(
    runtime: str | Runtime,
    *,
    workers: int | None = None,
    address: str | None = None,
    clients_per_host: int | None = None,
    compute: ComputeSpec | None = None,
    gpus_per_host: float | None = None,
) -> Runtime:
    """A runtime by name ("local", "ray"), or `runtime` itself if it is one,
    for clients computing as `compute` says (default: on CPU).

    Raises:
        ConfigError: the device is not on this machine (`check_device`), an
            unknown runtime, bad workers or GPUs per host.
    """
    device = "cpu" if compute is None else compute.device
    check_device(device)
    if gpus_per_host is not None and (runtime != "ray" or device == "cpu"):
        raise ConfigError(
            f"gpus_per_host ({gpus_per_host}) is for the ray runtime on a GPU"
            " device (--runtime ray --device cuda)"
        )
    if not isinstance(runtime, str):
        return runtime
    if runtime == "local":
        check_workers(workers)
        return local_runtime(workers, start_method(device))
    if runtime == "ray":
        from clusterfed.actors.runtimes.ray import RayRuntime

        try:
            return RayRuntime(
                address=address,
                clients_per_host=clients_per_host,
                gpus_per_host=gpus_per_host,
            )
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
    raise ConfigError(f"unknown runtime {runtime!r}; known: {', '.join(RUNTIMES)}")


def default_out(scenario: Scenario) -> Path:
    """A new folder under runs/ named after what makes this run different."""
    return default_folder(
        scenario.name,
        scenario.algorithm,
        scenario.seed,
        scenario.model_dump(mode="json"),
    )


async def _run(
    scenario: Scenario,
    out: Path,
    runtime: Runtime,
    progress: bool,
    *,
    checkpoint_every: int | None = None,
    start: Checkpoint | None = None,
    on_round: OnRound | None = None,
    provenance: dict[str, Any] | None = None,
    trace: TraceMode | None = None,
    logs: Sequence[str] = (),
    mlflow_uri: str | None = None,
) -> RunResult:
    """Run the rounds of `scenario`, from the first or from checkpoint `start`;
    under Ray the federation runs in a Ray actor and this loop only streams."""
    config = {
        "scenario": scenario.model_dump(mode="json"),
        "seed": scenario.seed,
        "runtime": runtime.name,
        "checkpoint_every": checkpoint_every,
        "log": list(logs),
        **(provenance or {}),
    }
    kind: Callable[..., RunsRounds] = Federation
    if runtime.name == "ray":
        # Imported here: Ray is heavy, and a local run never needs it.
        from clusterfed.actors.runtimes.ray import RayRuntime

        from .remote import RemoteFederation

        if not isinstance(runtime, RayRuntime):
            raise ConfigError(
                f"a runtime named 'ray' must be a RayRuntime, got {type(runtime)}"
            )
        kind = RemoteFederation
    federation = kind(
        scenario,
        runtime,
        out,
        config=config,
        checkpoint_every=checkpoint_every,
        resume=start,
        trace=trace,
    )
    if not logs:
        return await drive(federation, progress=progress, on_round=on_round)
    scalars = ScalarLog(out, logs, config=config, mlflow_uri=mlflow_uri)

    def record(row: Row) -> None:
        scalars(row)
        if on_round is not None:
            on_round(row)

    try:
        result = await drive(federation, progress=progress, on_round=record)
    except RunInterrupted:
        scalars.close("interrupted")
        raise
    except BaseException:
        scalars.close("failed")
        raise
    scalars.close("finished")
    return result
