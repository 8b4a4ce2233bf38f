"""The public entry points: `run` one scenario into a results folder, and
`resume` a run that stopped, from its last checkpoint."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tqdm.auto import tqdm

from clusterfed.actors import ClientSpec, LocalRuntime, RoundOutcome, ServerSpec
from clusterfed.errors import ConfigError
from clusterfed.scenarios import (
    Scenario,
    ScenarioEngine,
    ScenarioRuntime,
    load_scenario,
    plan_run,
    validate,
    with_overrides,
)

from .checkpoint import Checkpoint, read_checkpoint, write_checkpoint
from .results import RunRecorder, cbcc_scores, mean_std

RUNTIMES = ("local", "ray")


@dataclass(frozen=True)
class RunResult:
    """Where a run wrote its results, its summary, and its per-round rows."""

    out: Path
    summary: dict[str, Any]
    rows: list[dict[str, Any]]


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
        _run(resolved, folder, host, progress, checkpoint_every=checkpoint_every)
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
    if _canonical(checkpoint.scenario) != _canonical(config.get("scenario")):
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
        return LocalRuntime(workers=workers)
    if runtime == "ray":
        from clusterfed.actors.ray_runtime import RayRuntime

        return RayRuntime(address=address, clients_per_host=clients_per_host)
    raise ConfigError(f"unknown runtime {runtime!r}; known: {', '.join(RUNTIMES)}")


def _canonical(data: Any) -> str:
    return json.dumps(data, sort_keys=True)


def default_out(scenario: Scenario) -> Path:
    return Path("runs") / f"{scenario.name}-{scenario.algorithm}-seed{scenario.seed}"


class Runtime(ScenarioRuntime, Protocol):
    """What a run needs of a runtime (local and Ray provide it)."""

    name: str

    async def start(
        self, server: ServerSpec, clients: Sequence[ClientSpec]
    ) -> None: ...

    async def run_round(self, round: int) -> RoundOutcome: ...

    async def close(self) -> None: ...

    # Checkpoints: the server's state and what clients keep between rounds.
    async def snapshot(self) -> dict[str, Any]: ...

    async def restore(self, snapshot: Mapping[str, Any]) -> None: ...

    async def client_states(self) -> dict[int, Any]: ...

    async def restore_client_states(self, states: Mapping[int, Any]) -> None: ...


async def _run(
    scenario: Scenario,
    out: Path,
    runtime: Runtime,
    progress: bool,
    *,
    checkpoint_every: int | None = None,
    start: Checkpoint | None = None,
) -> RunResult:
    """Run the rounds of `scenario`, from the first or from checkpoint `start`."""
    plan = plan_run(scenario)
    config = {
        "scenario": scenario.model_dump(mode="json"),
        "seed": scenario.seed,
        "runtime": runtime.name,
        "checkpoint_every": checkpoint_every,
    }
    engine = ScenarioEngine(plan)
    first, clients = 0, plan.clients
    if start is None:
        recorder = RunRecorder(out, config)
    else:
        # The same plan (all from the seed), then the checkpoint's position.
        engine.restore(start.engine)
        recorder = RunRecorder(out, config, resume=start.recorder)
        first, clients = (
            start.rounds_done,
            [engine.specs[c] for c in sorted(engine.specs)],
        )
    bar = tqdm(
        total=scenario.rounds,
        initial=first,
        desc=scenario.name,
        disable=not progress,
        unit="round",
    )
    await runtime.start(plan.server, clients)
    try:
        if start is not None:
            await runtime.restore(start.server)
            await runtime.restore_client_states(start.clients)
        for round in range(first, scenario.rounds):
            events = await engine.begin_round(runtime, round, recorder.sim_time)
            outcome = await runtime.run_round(round)
            row = recorder.record(outcome, groups=engine.groups, events=events)
            done = round + 1
            if (
                checkpoint_every
                and done % checkpoint_every == 0
                and done < scenario.rounds
            ):
                await _checkpoint(out, config, runtime, engine, recorder)
            accs = mean_std(row)
            bar.set_postfix(
                round=round,
                acc=f"{accs[0]:.3f}" if accs else "-",
                clusters=row["n_clusters"],
            )
            bar.update()
    finally:
        bar.close()
        await runtime.close()
    summary = recorder.finish(
        algorithm=scenario.algorithm,
        scenario=scenario.name,
        extra=_strategy_summary(scenario, engine, recorder.rows),
    )
    return RunResult(out, summary, recorder.rows)


async def _checkpoint(
    out: Path,
    config: Mapping[str, Any],
    runtime: Runtime,
    engine: ScenarioEngine,
    recorder: RunRecorder,
) -> None:
    """Write the run's state after its last recorded round (see `checkpoint`)."""
    write_checkpoint(
        out,
        Checkpoint(
            rounds_done=len(recorder.rows),
            scenario=config["scenario"],
            server=await runtime.snapshot(),
            engine=engine.snapshot(),
            recorder=recorder.snapshot(),
            clients=await runtime.client_states(),
        ),
    )


def _strategy_summary(
    scenario: Scenario, engine: ScenarioEngine, rows: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """Summary keys scored from the strategy's last diagnostics against the
    ground truth, which only the scenario knows: `cbcc` for CAFA."""
    if not rows:
        return {}
    iid = scenario.partition.iid_groups()
    truth = (
        {
            cid: engine.partition_groups[cid] in iid
            for cid in engine.specs
            if cid in engine.partition_groups
        }
        if iid is not None
        else None
    )
    cbcc = cbcc_scores(rows[-1].get("strategy") or {}, truth)
    return {} if cbcc is None else {"cbcc": cbcc}
