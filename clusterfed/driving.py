"""Driving a federation: its rounds from where it starts to the scenario's
last, with a progress bar and a callback per row, and what Ctrl-C leaves
(`RunInterrupted`). The same for a `Federation` in this process and a
`RemoteFederation` that runs one in a Ray actor."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from tqdm.auto import tqdm

from clusterfed.scenarios import Scenario

from .checkpoint import CHECKPOINT
from .results import Row, RunResult
from .summary import mean_std

OnRound = Callable[[Row], None]


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) stopped a run; the rounds that finished are in `out`
    with their summary.json (`"interrupted": true`) and plots."""

    def __init__(self, out: Path, rounds_done: int) -> None:
        self.out = out
        self.rounds_done = rounds_done
        self.checkpoint = (out / CHECKPOINT).exists()
        resume = f"; resume with: clusterfed resume {out}" if self.checkpoint else ""
        when = (
            f"after round {rounds_done}"
            if rounds_done
            else "before its first round finished"
        )
        super().__init__(f"interrupted {when}; results in {out}{resume}")


class RunsRounds(Protocol):
    """What `drive` runs: a `Federation`, or a `RemoteFederation` that runs
    one in a Ray actor (which imports Ray, so it is not named here)."""

    scenario: Scenario
    out: Path

    async def start(self) -> int: ...

    async def step(self, round: int) -> Row: ...

    async def finish(
        self, *, interrupted: bool = False
    ) -> tuple[dict[str, Any], list[Row]]: ...

    async def close(self) -> None: ...


async def drive(
    federation: RunsRounds,
    *,
    progress: bool = False,
    on_round: OnRound | None = None,
) -> RunResult:
    """Run a federation's rounds (a `Federation`, or a `RemoteFederation` that
    runs one in a Ray actor) from where it starts to the scenario's last, then
    write its summary; it is closed whatever happens.

    Raises:
        RunInterrupted: the run was cancelled (Ctrl-C under `asyncio.run`);
            summary.json and the plots of the finished rounds are written.
    """
    scenario: Scenario = federation.scenario
    bar = tqdm(
        total=scenario.rounds, desc=scenario.name, disable=not progress, unit="round"
    )
    try:
        first = await federation.start()
        bar.update(first)
        for round in range(first, scenario.rounds):
            row = await federation.step(round)
            if on_round is not None:
                on_round(row)
            accs = mean_std(row)
            bar.set_postfix(
                round=round,
                acc=f"{accs[0]:.3f}" if accs else "-",
                clusters=row["n_clusters"],
            )
            bar.update()
        summary, rows = await federation.finish()
    except asyncio.CancelledError:
        # (Under Ray the actor may have recorded a round the driver never saw.)
        _, recorded = await federation.finish(interrupted=True)
        raise RunInterrupted(federation.out, len(recorded)) from None
    finally:
        bar.close()
        await federation.close()
    return RunResult(federation.out, summary, rows)


def canonical(data: Any) -> str:
    return json.dumps(data, sort_keys=True)
