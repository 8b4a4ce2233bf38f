"""The public entry point: `run` one scenario into a results folder."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
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
    with_overrides,
)

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

    Raises:
        ScenarioError: the scenario or an override is invalid (nothing has run).
        ConfigError: an unknown runtime.
    """
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
    return asyncio.run(_run(resolved, folder, host, progress))


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


async def _run(
    scenario: Scenario, out: Path, runtime: Runtime, progress: bool
) -> RunResult:
    plan = plan_run(scenario)
    config = {
        "scenario": scenario.model_dump(mode="json"),
        "seed": scenario.seed,
        "runtime": runtime.name,
    }
    recorder = RunRecorder(out, config)
    engine = ScenarioEngine(plan)
    bar = tqdm(
        total=scenario.rounds, desc=scenario.name, disable=not progress, unit="round"
    )
    await runtime.start(plan.server, plan.clients)
    try:
        for round in range(scenario.rounds):
            events = await engine.begin_round(runtime, round, recorder.sim_time)
            outcome = await runtime.run_round(round)
            row = recorder.record(outcome, groups=engine.groups, events=events)
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
