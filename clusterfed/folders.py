"""Results folders that never lose a run.

A run writes into a folder of its own: a new run into a folder that already
holds something is refused, unless the caller asks to replace a previous
run's results (`overwrite`). The default name says what makes the run
different: scenario, algorithm, seed, a short hash of the resolved scenario
and a time stamp; `runs/latest` points at the newest default folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from clusterfed.errors import ConfigError

RUNS = Path("runs")
# What a folder written by clusterfed holds at least one of.
MARKERS = ("config.json", "comparison.json", "rounds.jsonl", "summary.json")


def scenario_hash(resolved: Any) -> str:
    """Six hex digits of the resolved scenario (as JSON): equal settings,
    equal hash; any change of a field, another hash."""
    text = json.dumps(resolved, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:6]


def safe_name(algorithm: str) -> str:
    """`algorithm` as a folder name: `pkg.mod:Class` becomes `pkg.mod.Class`."""
    return algorithm.replace(":", ".").replace(os.sep, "_")


def default_folder(
    scenario: str, label: str, seed: int | str, resolved: Any, *, root: Path = RUNS
) -> Path:
    """`runs/<scenario>-<label>-seed<seed>-<hash>-<yymmdd-HHMMSS>`, with `-2`,
    `-3`… added when two runs start within the same second. A str `seed`
    names several (`s0to2` gives `seeds0to2`)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = f"{scenario}-{safe_name(label)}-seed{seed}-{scenario_hash(resolved)}-{stamp}"
    folder = root / base
    n = 2
    while folder.exists():
        folder = root / f"{base}-{n}"
        n += 1
    return folder


def claim(folder: Path, *, overwrite: bool = False) -> Path:
    """Make `folder` ready for a new run: created if missing, left alone if
    empty; a folder that holds anything is refused, or with `overwrite`
    emptied first, when it is a clusterfed results folder.

    Raises:
        ConfigError: the folder holds files and `overwrite` is off; or
            `overwrite` is on and the folder holds no clusterfed results (it
            is never emptied then); or the path is a file.
    """
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"--out {folder}: is a file, not a folder")
    entries = sorted(p.name for p in folder.iterdir()) if folder.exists() else []
    if entries and not overwrite:
        shown = ", ".join(entries[:4]) + (", …" if len(entries) > 4 else "")
        raise ConfigError(
            f"--out {folder}: the folder is not empty ({shown}); nothing was"
            " written. Choose another --out, leave it out for a new folder,"
            " or pass --overwrite to replace the results in it"
        )
    if entries:
        if not any(name in entries for name in MARKERS):
            raise ConfigError(
                f"--out {folder}: --overwrite only replaces a clusterfed results"
                f" folder, and this one holds none ({', '.join(entries[:4])});"
                " nothing was removed"
            )
        for child in folder.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def point_latest(folder: Path, *, root: Path = RUNS) -> None:
    """Point `root/latest` at `folder` (a relative link), where links exist."""
    if folder.parent.resolve() != root.resolve():
        return
    link = root / "latest"
    tmp = root / f".latest-{os.getpid()}"
    try:
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(folder.name)
        os.replace(tmp, link)
    except OSError:
        tmp.unlink(missing_ok=True)
