"""When each client is online, on the simulated clock.

A scenario's `availability` says it: "always" (the default), a diurnal on/off
cycle, or a trace of online windows read from a CSV file. The `SimClock`
holds the schedule built from it; the drivers ask it three things: is a
client online now (an offline client is neither sampled nor started), when
does a client that is online now go offline (a task that outlives that has
failed), and when is an offline client next online (the asynchronous driver
wakes up then).

An online window is half-open, [online_from, online_to): a task whose upload
ends exactly at online_to arrives. This is about whole devices coming and
going over simulated time; `DeviceProfile.availability`, a chance of being
unreachable drawn each round, is independent of it and works as before.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from clusterfed.seeding import derive_seed

# Boundaries computed in floating point (a cycle's end) land a rounding
# error either side of the exact time; a position this close to a boundary
# counts as on it, so that the time returned as "next online" is online.
_SNAP = 1e-9


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AlwaysOnline(_Spec):
    """Every client is online all the time (the default)."""

    kind: Literal["always"] = "always"


class Diurnal(_Spec):
    """Each client is online for the first `online_fraction` of every
    `period_s`, shifted by a phase of its own drawn from `seed` (the
    scenario's seed if None), so clients come and go at different times."""

    kind: Literal["diurnal"] = "diurnal"
    period_s: float = Field(
        600.0, gt=0, allow_inf_nan=False, description="one on/off cycle, sim s"
    )
    online_fraction: float = Field(
        0.5, gt=0, le=1, description="share of each cycle a client is online"
    )
    seed: int | None = Field(
        None, ge=0, description="the phases' seed; None: the scenario's"
    )


class OnlineWindow(_Spec):
    """Client `client` is online from `online_from` to `online_to` (sim s;
    None, or inf in a file: to the end of the run)."""

    client: int = Field(ge=0)
    online_from: float = Field(ge=0, allow_inf_nan=False)
    online_to: float | None = Field(None, gt=0, allow_inf_nan=False)

    @field_validator("online_to", mode="before")
    @classmethod
    def _open_end(cls, value: Any) -> Any:
        # JSON has no infinity (config.json holds the windows): None it is.
        if isinstance(value, float) and value == math.inf:
            return None
        return value

    @model_validator(mode="after")
    def _ordered(self) -> OnlineWindow:
        if self.online_to is not None and not self.online_to > self.online_from:
            raise ValueError(
                f"client {self.client}: online_to {self.online_to:g} is not after"
                f" online_from {self.online_from:g}"
            )
        return self

    @property
    def end(self) -> float:
        return math.inf if self.online_to is None else self.online_to


class TraceAvailability(_Spec):
    """Online windows per client, from a CSV file (`path`: header
    `client,online_from,online_to`, one window a line, times in simulated
    seconds, `inf` for "to the end") or given as `windows`. A client the
    trace does not name is online throughout unless `unlisted = "offline"`."""

    kind: Literal["trace"] = "trace"
    path: str | None = Field(None, description="CSV: client,online_from,online_to")
    windows: list[OnlineWindow] = Field(default_factory=list)
    unlisted: Literal["online", "offline"] = "online"

    @model_validator(mode="before")
    @classmethod
    def _read(cls, data: Any) -> Any:
        # The file is read once, when the scenario is validated: its windows
        # travel with the scenario (config.json, a Ray actor, a resume).
        if not isinstance(data, dict):
            return data
        path, windows = data.get("path"), data.get("windows")
        if path is not None and not windows:
            read = read_trace(Path(path))
            return {**data, "windows": [w.model_dump() for w in read]}
        if path is None and not windows:
            raise ValueError("a trace needs a path (a CSV file) or windows")
        return data


Availability = Annotated[
    AlwaysOnline | Diurnal | TraceAvailability, Field(discriminator="kind")
]

TRACE_COLUMNS = ("client", "online_from", "online_to")


def read_trace(path: Path) -> list[OnlineWindow]:
    """The windows of a CSV trace; ValueError naming the file, the line and
    the bad value."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ValueError(f"path {str(path)!r}: cannot read it ({exc})") from exc
    windows = []
    for number, row in enumerate(csv.reader(text.splitlines()), start=1):
        cells = [cell.strip() for cell in row]
        if not cells or not any(cells) or cells[0].startswith("#"):
            continue
        where = f"path {str(path)!r} line {number}"
        if number == 1 and tuple(cells) == TRACE_COLUMNS:
            continue
        # The path may name any file (a scenario from anyone): what is wrong
        # is named, never the line itself.
        if len(cells) != 3:
            raise ValueError(
                f"{where}: expected 3 columns ({','.join(TRACE_COLUMNS)}),"
                f" got {len(cells)}"
            )
        try:
            client = int(cells[0])
        except ValueError as exc:
            raise ValueError(
                f"{where}: could not convert client to an integer"
            ) from exc
        times = []
        for column, cell in zip(TRACE_COLUMNS[1:], cells[1:], strict=True):
            try:
                times.append(float(cell))
            except ValueError as exc:
                raise ValueError(
                    f"{where}: could not convert {column} to a number"
                ) from exc
        start, end = times
        if client < 0:
            raise ValueError(f"{where}: client {client} is not an id (>= 0)")
        if not 0 <= start < math.inf:
            raise ValueError(f"{where}: online_from {start:g} is not a time >= 0")
        if not end > start:
            raise ValueError(
                f"{where}: online_to {end:g} is not after online_from {start:g}"
            )
        windows.append(OnlineWindow(client=client, online_from=start, online_to=end))
    if not windows:
        raise ValueError(f"path {str(path)!r}: no online window in it")
    return windows


class Schedule(Protocol):
    """When clients are online (all times in simulated seconds)."""

    def online(self, client: int, t: float) -> bool:
        """Whether `client` is online at `t`."""
        ...

    def offline_at(self, client: int, start: float, end: float) -> float | None:
        """The first time in [start, end) at which `client` is offline;
        None if it is online throughout."""
        ...

    def next_online(self, client: int, t: float) -> float | None:
        """The first time from `t` on at which `client` is online; None if
        it never is again."""
        ...


class Always:
    """Every client, always."""

    def online(self, client: int, t: float) -> bool:
        return True

    def offline_at(self, client: int, start: float, end: float) -> float | None:
        return None

    def next_online(self, client: int, t: float) -> float | None:
        return t


class DiurnalSchedule:
    """Online while (t + phaseₖ·period) mod period < online_fraction·period."""

    def __init__(self, spec: Diurnal, seed: int) -> None:
        self.period = spec.period_s
        self.on = spec.online_fraction * spec.period_s
        self.seed = seed
        self._phases: dict[int, float] = {}

    def phase(self, client: int) -> float:
        """The client's shift in seconds, from the seed and its id alone."""
        if client not in self._phases:
            draw = derive_seed(self.seed, client) / 2.0**63
            self._phases[client] = draw * self.period
        return self._phases[client]

    def _position(self, client: int, t: float) -> float:
        """Where in its cycle the client is at `t`, in [0, period)."""
        p = math.fmod(t + self.phase(client), self.period)
        eps = _SNAP * self.period
        if self.period - p <= eps:
            return 0.0
        if abs(p - self.on) <= eps:
            return self.on
        return p

    def online(self, client: int, t: float) -> bool:
        return self.on >= self.period or self._position(client, t) < self.on

    def offline_at(self, client: int, start: float, end: float) -> float | None:
        if self.on >= self.period:
            return None
        p = self._position(client, start)
        if p >= self.on:
            return start
        off = start + (self.on - p)
        return off if off < end else None

    def next_online(self, client: int, t: float) -> float | None:
        p = self._position(client, t)
        if self.on >= self.period or p < self.on:
            return t
        return t + (self.period - p)


class TraceSchedule:
    """Online within the trace's windows (merged where they touch)."""

    def __init__(self, spec: TraceAvailability) -> None:
        by_client: dict[int, list[tuple[float, float]]] = {}
        for w in spec.windows:
            by_client.setdefault(w.client, []).append((w.online_from, w.end))
        self.windows = {c: _merged(ws) for c, ws in by_client.items()}
        self.unlisted_online = spec.unlisted == "online"

    def _of(self, client: int) -> Sequence[tuple[float, float]] | None:
        return self.windows.get(client)

    def online(self, client: int, t: float) -> bool:
        windows = self._of(client)
        if windows is None:
            return self.unlisted_online
        return any(a <= t < b for a, b in windows)

    def offline_at(self, client: int, start: float, end: float) -> float | None:
        windows = self._of(client)
        if windows is None:
            return None if self.unlisted_online else start
        for a, b in windows:
            if a <= start < b:
                return b if b < end else None
        return start

    def next_online(self, client: int, t: float) -> float | None:
        windows = self._of(client)
        if windows is None:
            return t if self.unlisted_online else None
        for a, b in windows:
            if t < b:
                return max(a, t)
        return None


def _merged(windows: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Sorted windows, overlapping or touching ones joined."""
    out: list[tuple[float, float]] = []
    for a, b in sorted(windows):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def schedule(
    spec: AlwaysOnline | Diurnal | TraceAvailability, seed: int, stream: int
) -> Schedule:
    """The schedule of a scenario's `availability`: diurnal phases come from
    random `stream` of `seed` (the scenario's) or of the spec's own seed."""
    if isinstance(spec, Diurnal):
        own = spec.seed if spec.seed is not None else seed
        return DiurnalSchedule(spec, derive_seed(own, stream))
    if isinstance(spec, TraceAvailability):
        return TraceSchedule(spec)
    return Always()
