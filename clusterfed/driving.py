"""Driving a federation: its rounds from where it starts to the scenario's
last, with a progress bar and a callback per row, and what Ctrl-C leaves
(`RunInterrupted`). The same for a `Federation` in this process and a
`RemoteFederation` that runs one in a Ray actor.

Ctrl-C during a round lets that round finish, writes a checkpoint of it and
stops, so `clusterfed resume` can always go on; a second Ctrl-C (or one
while the clients are still joining) stops at once, keeping only the rounds
already recorded."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol, TypeVar

from tqdm.auto import tqdm

from clusterfed.scenarios import Scenario

from .checkpoint import CHECKPOINT
from .results import Row, RunResult
from .summary import mean_std

OnRound = Callable[[Row], None]
T = TypeVar("T")


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

    async def checkpoint(self) -> Path: ...

    async def close(self) -> None: ...


class _CtrlC:
    """What Ctrl-C has asked of a run so far."""

    def __init__(self, task: asyncio.Task[Any] | None, say: Callable[[str], None]):
        self.task = task
        self.say = say
        self.in_round: int | None = None
        self.stop_after_round = False

    def __call__(self) -> None:
        if self.in_round is None or self.stop_after_round:
            if self.task is not None:
                self.task.cancel()
            return
        self.stop_after_round = True
        self.say(
            f"clusterfed: Ctrl-C: stopping after round {self.in_round + 1} finishes"
            " (a checkpoint keeps it); Ctrl-C again to stop now"
        )


@contextmanager
def _ctrl_c(handler: _CtrlC) -> Iterator[None]:
    """`handler` answers SIGINT while the run's loop runs; where the loop
    cannot take signals (not the main thread, no Unix), asyncio's own
    cancel-at-once stays."""
    loop = asyncio.get_running_loop()
    previous = signal.getsignal(signal.SIGINT)
    try:
        loop.add_signal_handler(signal.SIGINT, handler)
    except (NotImplementedError, RuntimeError, ValueError):
        yield
        return
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        signal.signal(signal.SIGINT, previous)


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
        RunInterrupted: Ctrl-C (the round in flight finished and was
            checkpointed), or the run was cancelled; summary.json and the
            plots of the finished rounds are written.
    """
    scenario: Scenario = federation.scenario
    bar = tqdm(
        total=scenario.rounds, desc=scenario.name, disable=not progress, unit="round"
    )
    ctrl_c = _CtrlC(
        asyncio.current_task(), lambda line: bar.write(line, file=sys.stderr)
    )
    try:
        with _ctrl_c(ctrl_c):
            first = await federation.start()
            bar.update(first)
            for round in range(first, scenario.rounds):
                ctrl_c.in_round = round
                row = await federation.step(round)
                ctrl_c.in_round = None
                _progressed(bar, row, round, on_round)
                if ctrl_c.stop_after_round and round + 1 < scenario.rounds:
                    await federation.checkpoint()
                    _, recorded = await federation.finish(interrupted=True)
                    raise RunInterrupted(federation.out, len(recorded))
        summary, rows = await federation.finish()
    except asyncio.CancelledError:
        # (Under Ray the actor may have recorded a round the driver never saw.)
        _, recorded = await federation.finish(interrupted=True)
        raise RunInterrupted(federation.out, len(recorded)) from None
    finally:
        bar.close()
        await federation.close()
    return RunResult(federation.out, summary, rows)


def _progressed(bar: Any, row: Row, round: int, on_round: OnRound | None) -> None:
    """Hand a recorded round to the callback and the progress bar."""
    if on_round is not None:
        on_round(row)
    accs = mean_std(row)
    bar.set_postfix(
        round=round, acc=f"{accs[0]:.3f}" if accs else "-", clusters=row["n_clusters"]
    )
    bar.update()


def run_to_end(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(main)`, also where this thread already runs an event loop
    (a Jupyter kernel's): there `main` runs on a thread of its own, where
    Ctrl-C cannot reach it (the kernel's interrupt stops the wait, not the
    run)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main)
    with ThreadPoolExecutor(1, thread_name_prefix="clusterfed-run") as pool:
        return pool.submit(asyncio.run, main).result()


def canonical(data: Any) -> str:
    return json.dumps(data, sort_keys=True)
