"""What config.json says about how a run came to be: the command line, where
and when it ran, the code it ran (versions, git commit), and the algorithm as
it was built (every parameter, the train config its clients were sent)."""

from __future__ import annotations

import inspect
import json
import os
import platform
import subprocess
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from clusterfed.algorithms import Strategy
from clusterfed.protocol import TrainConfig


def now() -> str:
    """The current time, ISO 8601 with its UTC offset (local time)."""
    return datetime.now(UTC).astimezone().isoformat(timespec="seconds")


def run_provenance(command: Sequence[str] | None = None) -> dict[str, Any]:
    """The command line (default: this process's), working folder, host,
    start time and git commit of a run."""
    return {
        "command": list(sys.argv if command is None else command),
        "cwd": os.getcwd(),
        "host": platform.node(),
        "platform": platform.platform(),
        "started_at": now(),
        "git": git_state(),
    }


def git_state(where: Path | None = None) -> dict[str, Any] | None:
    """The commit of the checkout clusterfed runs from, and whether tracked
    files differ from it; None when it is not run from a git checkout."""
    root = where or Path(__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return None
    try:
        commit = _git(root, "rev-parse", "HEAD")
        changed = _git(root, "status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "dirty": bool(changed)}


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(root), *args],
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
    )
    return done.stdout.strip()


def algorithm_record(
    name: str, strategy: Strategy[Any], train_config: TrainConfig
) -> dict[str, Any]:
    """The algorithm as built: its name, class, every keyword parameter with
    the value the strategy holds (defaults included), and `train_config`,
    what its clients are sent (the strategy's `train_config` applied, e.g.
    FedProx's `mu`: `RunPlan.train_config`)."""
    cls = type(strategy)
    params = {}
    for p in inspect.signature(cls.__init__).parameters.values():
        if p.kind is inspect.Parameter.KEYWORD_ONLY:
            default = None if p.default is p.empty else p.default
            params[p.name] = _jsonable(getattr(strategy, p.name, default))
    return {
        "name": name,
        "class": f"{cls.__module__}:{cls.__qualname__}",
        "params": params,
        "train_config": train_config.model_dump(mode="json"),
    }


def _jsonable(value: Any) -> Any:
    """`value` if JSON can hold it, else its repr."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return repr(value)
    return value
