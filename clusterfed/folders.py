"""Results folders that never lose a run, nor the user's files.

A run writes into a folder of its own: a new run into a folder that already
holds something is refused, unless the caller asks to replace a previous
run's results (`overwrite`). The default name says what makes the run
different: scenario, algorithm, seed, a short hash of the resolved scenario
and a time stamp; `runs/latest` points at the newest default folder.

Every folder a run claims gets a marker, `.clusterfed-run.json`, that lists
what clusterfed wrote there (files, sub-folders, relative paths). The list
grows as the run writes: a name goes in before its file is written where the
name is known in advance, and every recorded round adds what appeared since,
so a run killed at any moment leaves a list good enough for `overwrite`.
`overwrite` removes exactly the listed entries and refuses, before it removes
anything, a folder without a marker, an entry the marker does not list (a
file the user added), a listed entry that is now a symbolic link, and an
`--out` that is a symbolic link.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from clusterfed.errors import ConfigError

RUNS = Path("runs")
MARKER = ".clusterfed-run.json"
# Atomic writes (the marker's, config.json's, the checkpoint's) go through
# `<name>` + TMP; one left by a kill belongs to whoever owns `<name>`.
TMP = ".clusterfed-tmp"  # a name no user file takes by chance


class RunMarker(BaseModel):
    """What `.clusterfed-run.json` holds: the entries clusterfed wrote."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    written_by: Literal["clusterfed"] = "clusterfed"
    format: Literal[1] = 1
    wrote: tuple[str, ...] = ()

    @field_validator("wrote")
    @classmethod
    def _stay_inside(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        # The list decides what gets deleted: nothing outside the folder.
        for name in names:
            if not _inside(name):
                raise ValueError(f"{name!r} is not a path inside the folder")
        return tuple(sorted(set(names)))


def _inside(name: str) -> bool:
    """Whether `name` is a relative path that stays inside its folder (on
    every system: a backslash is a separator on Windows)."""
    path = PurePosixPath(name)
    return (
        bool(name)
        and not path.is_absolute()
        and ".." not in path.parts
        and "\\" not in name
    )


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
    """Make `folder` ready for a new run and mark it as the run's: created if
    missing, left alone if empty; a folder that holds anything is refused,
    or with `overwrite` rid of what a previous run listed in its marker.
    A parent folder with a marker of its own (a comparison's) lists it.

    Raises:
        ConfigError: `folder` is a symbolic link or a file, or cannot be
            created; it holds files and `overwrite` is off; or `overwrite` is
            on and it holds something no run's marker lists, a listed entry
            that is now a symbolic link, or an unreadable marker (nothing is
            removed then).
    """
    if folder.is_symlink():
        target = os.readlink(folder)
        gone = "" if folder.exists() else ", which does not exist"
        raise ConfigError(
            f"--out {folder}: a symbolic link (to {target}{gone}); clusterfed"
            " writes only into a real folder, nothing was written. Give the"
            " folder's own path"
        )
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"--out {folder}: is a file, not a folder")
    try:
        entries = _entries(folder)
    except OSError as exc:
        raise ConfigError(f"--out {folder}: cannot read it: {exc.strerror}") from exc
    if entries and not overwrite:
        raise ConfigError(
            f"--out {folder}: the folder is not empty ({_shown(entries)}); nothing"
            " was written. Choose another --out, leave it out for a new folder,"
            " or pass --overwrite to replace the results in it"
        )
    try:
        if entries:
            _remove(_survey(folder))
        if folder.name not in ("", ".", ".."):
            note(folder.parent, folder.name)
        folder.mkdir(parents=True, exist_ok=True)
        _write_marker(folder, RunMarker())
    except OSError as exc:
        raise ConfigError(
            f"--out {folder}: cannot use the folder: {exc.strerror} ({exc.filename})"
        ) from exc
    return folder


def note(folder: Path, *names: str) -> None:
    """List `names` (relative to `folder`) in its marker, before they are
    written; a folder without a marker (not a run's) is left alone."""
    marker = _read_marker(folder, strict=False)
    if marker is None or not names:
        return
    # A name the marker cannot hold stays unlisted: overwrite then refuses.
    wanted = RunMarker(wrote=(*marker.wrote, *filter(_inside, names)))
    if wanted != marker:
        _write_marker(folder, wanted)


def note_new(
    folder: Path, outputs: Collection[str], *, ignore: Collection[str] = ()
) -> None:
    """List in `folder`'s marker the entries among `outputs` (names clusterfed
    writes there whose time it does not know in advance: a trace, a tracker's
    log; a folder with everything below it) that have appeared, but those in
    `ignore` (what the user put there before a resume). Nothing else: a file
    the user adds while the run goes on stays unlisted, so `overwrite` refuses
    rather than deletes it."""
    if _read_marker(folder, strict=False) is None:
        return
    try:
        seen = [
            rel
            for rel, path in _walk(folder, "")
            if rel.split("/")[0] in outputs
            and rel not in ignore
            and not path.is_symlink()
        ]
    except OSError:
        # Bookkeeping never stops a run: what goes unlisted makes a later
        # `overwrite` refuse, which loses nothing.
        return
    note(folder, *seen)


def strangers(folder: Path) -> list[str]:
    """What `folder` holds that its marker does not list (relative paths);
    empty for a folder without a marker."""
    marker = _read_marker(folder, strict=False)
    if marker is None:
        return []
    listed = set(marker.wrote)
    return [rel for rel, _ in _walk(folder, "") if not _owned(rel, listed)]


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


# -- the marker and what it covers ------------------------------------------------


@dataclass
class _Survey:
    """A folder sorted for `overwrite`: what goes, and what stops it."""

    folder: Path
    files: list[Path] = field(default_factory=list)
    dirs: list[Path] = field(default_factory=list)  # children before parents
    strangers: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)


def _survey(folder: Path, into: _Survey | None = None, prefix: str = "") -> _Survey:
    """Sort `folder` by its marker; a listed sub-folder with a marker of its
    own (a run of a comparison) is sorted by that one.

    Raises:
        ConfigError: `folder` has no marker, or one that cannot be read.
    """
    survey = into if into is not None else _Survey(folder)
    marker = _read_marker(folder, strict=True)
    if marker is None:
        raise ConfigError(
            f"--out {survey.folder}: --overwrite replaces only a clusterfed run's"
            f" folder, and this one has no {MARKER} to say what a run wrote; it"
            f" holds {_shown(_entries(folder))}, which clusterfed did not write;"
            " nothing was removed"
        )
    listed = set(marker.wrote)

    def visit(directory: Path, rel: str) -> None:
        for entry in sorted(directory.iterdir()):
            name = f"{rel}{entry.name}"
            if not _owned(name, listed):
                survey.strangers.append(prefix + name)
            elif entry.is_symlink():
                survey.links.append(prefix + name)
            elif entry.is_dir():
                if (entry / MARKER).is_file():
                    _survey(entry, survey, f"{prefix}{name}/")
                else:
                    visit(entry, f"{name}/")
                survey.dirs.append(entry)
            else:
                survey.files.append(entry)

    visit(folder, "")
    return survey


def _remove(survey: _Survey) -> None:
    """Remove what `survey` found the runs wrote, once nothing stops it.

    Raises:
        ConfigError: the folder holds what no marker lists, or a listed
            entry is a symbolic link; nothing is removed then.
    """
    folder = survey.folder
    if survey.strangers:
        raise ConfigError(
            f"--out {folder}: holds {_shown(survey.strangers)}, which the run"
            " there did not write; nothing was removed. Move them out of the"
            " folder, or choose another --out"
        )
    if survey.links:
        raise ConfigError(
            f"--out {folder}: {_shown(survey.links)}: a symbolic link where the"
            " run wrote a file or folder; nothing was removed. Remove the link"
            " by hand, or choose another --out"
        )
    # Markers last: a removal cut short leaves the rest still listed.
    files = sorted(survey.files, key=lambda p: p.name == MARKER)
    try:
        for path in files:
            path.unlink(missing_ok=True)
        for path in survey.dirs:
            path.rmdir()
    except OSError as exc:
        raise ConfigError(
            f"--out {folder}: could not remove {exc.filename}: {exc.strerror};"
            " the run's other files that remain are still listed"
        ) from exc


ATOMIC = ("config.json", "summary.json", "checkpoint.pkl", MARKER)
"""What clusterfed writes as `<name>` + `TMP`, then renames: a leftover of an
interrupted write is the run's; any other name is the user's."""


def _owned(rel: str, listed: set[str]) -> bool:
    """Whether `rel` is the run's: listed, the marker, or the leftover of an
    atomic write of a listed file or of the marker."""
    if rel in listed or rel == MARKER:
        return True
    stem = rel.removesuffix(TMP)
    return stem != rel and stem in ATOMIC and (stem in listed or stem == MARKER)


def _walk(folder: Path, rel: str) -> Iterator[tuple[str, Path]]:
    """Every entry under `folder` as (relative path, path), the marker
    aside; symbolic links are not followed, and a sub-folder with a marker
    of its own is one entry (its marker lists what is in it)."""
    for entry in sorted(folder.iterdir()):
        name = f"{rel}{entry.name}"
        if name.removesuffix(TMP) == MARKER:
            continue
        yield name, entry
        if entry.is_dir() and not entry.is_symlink() and not (entry / MARKER).exists():
            yield from _walk(entry, f"{name}/")


def _entries(folder: Path) -> list[str]:
    """The names in `folder` but its marker: what makes it not empty."""
    if not folder.is_dir():
        return []
    return sorted(
        p.name for p in folder.iterdir() if p.name.removesuffix(TMP) != MARKER
    )


def _shown(names: list[str]) -> str:
    more = f", … ({len(names)} in all)" if len(names) > 4 else ""
    return ", ".join(names[:4]) + more


def _read_marker(folder: Path, *, strict: bool) -> RunMarker | None:
    """`folder`'s marker, None if it has none.

    Raises:
        ConfigError: (`strict`) the marker cannot be read; without `strict`
            it counts as none: a run goes on, a later `overwrite` refuses.
    """
    path = folder / MARKER
    if not path.is_file():
        return None
    try:
        return RunMarker.model_validate_json(path.read_bytes())
    except (OSError, ValidationError) as exc:
        if not strict:
            return None
        reason = exc.strerror if isinstance(exc, OSError) else _first_error(exc)
        raise ConfigError(
            f"{path}: not a clusterfed run marker ({reason}); nothing was removed"
        ) from exc


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(p) for p in error["loc"])
    return f"{where}: {error['msg']}" if where else error["msg"]


def _write_marker(folder: Path, marker: RunMarker) -> None:
    # Write then rename: a kill never leaves half a list.
    path = folder / MARKER
    tmp = folder / (MARKER + TMP)
    tmp.write_text(marker.model_dump_json(indent=2) + "\n")
    os.replace(tmp, path)
