"""Runtimes host client actors: inline, in worker processes, in Ray actors.

`Runtime` is what the federation needs of one; `local_runtime` picks the
local default (inline for one worker, forked worker processes otherwise).
`RayRuntime` is imported from `clusterfed.actors.runtimes.ray` (it imports
Ray, which a local run should not pay for).
"""

from __future__ import annotations

import os

from .base import Runtime
from .inline import InlineRuntime
from .processes import ProcessRuntime, StartMethod, WorkerDied


def local_runtime(
    workers: int | None = None, start_method: StartMethod = "fork"
) -> InlineRuntime | ProcessRuntime:
    """The local runtime: `workers` processes (default: one per core) started
    by `start_method`; with one worker, every client in this process."""
    n = workers or os.cpu_count() or 1
    return InlineRuntime() if n == 1 else ProcessRuntime(n, start_method)


__all__ = [
    "InlineRuntime",
    "ProcessRuntime",
    "Runtime",
    "WorkerDied",
    "local_runtime",
]
