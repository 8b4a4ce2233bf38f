"""Simulated time: the clock, device profiles, what a task costs on them, and
when a round ends.

`SimClock` owns simulated now, every client's device profile and straggler
slowdown: the one place they are held (the scenario engine sets them as the
timeline changes them; a client's spec holds none, so a straggler or a new
link changes no hosted client). A task's simulated duration is its download,
its compute time on the client's device and its upload, so a 30 s straggler
costs no real 30 s. The compute time is the server's to work out: the samples
the task had the client process (an update reports how many; a probe's are
known) over its device's throughput, times its slowdown. A client never says
how long it took. The clock also holds the availability schedule: who is
online when. A deadline policy decides when the server stops waiting: replies
that arrive after that are late.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Literal, TypedDict

from pydantic import BaseModel, ConfigDict, Field

from clusterfed.types import ClientId

from .availability import Always, Schedule


class DeviceProfile(BaseModel):
    """How fast a client computes and talks. Defaults: a modest phone on Wi-Fi."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    samples_per_s: float = Field(500.0, gt=0, description="training throughput")
    bandwidth_bps: float = Field(1.25e6, gt=0, description="bytes per second")
    latency_s: float = Field(0.05, ge=0, description="per message, one way")
    availability: float = Field(
        1.0, gt=0, le=1, description="chance of being reachable in a round"
    )


def transfer_s(profile: DeviceProfile, n_bytes: int) -> float:
    """Simulated seconds to move `n_bytes` in one message."""
    return profile.latency_s + n_bytes / profile.bandwidth_bps


def compute_s(
    profile: DeviceProfile, samples_seen: int, slowdown: float = 1.0
) -> float:
    """Simulated seconds to process `samples_seen` samples."""
    return samples_seen / profile.samples_per_s * slowdown


class ClockDevices(TypedDict):
    """The clock's devices, as a checkpoint keeps them (`SimClock.devices`)."""

    profiles: dict[ClientId, DeviceProfile]
    slowdowns: dict[ClientId, float]  # the clients that straggle now


def devices_problem(devices: Mapping[str, object]) -> str | None:
    """Why `devices` (from a checkpoint) are not a `ClockDevices`, or None."""
    profiles, slowdowns = devices.get("profiles"), devices.get("slowdowns")
    if not isinstance(profiles, dict) or not all(
        _client_id(c) and isinstance(p, DeviceProfile) for c, p in profiles.items()
    ):
        return "profiles are not one of client ids to their DeviceProfile"
    if not isinstance(slowdowns, dict) or not all(
        _client_id(c) and isinstance(f, float) and f > 0 for c, f in slowdowns.items()
    ):
        return "slowdowns are not one of client ids to a positive factor"
    return None


def _client_id(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class SimClock:
    """Simulated now, the devices and their straggler slowdowns, what a
    message exchange costs on them, and when each client is online
    (`availability`, see availability.py)."""

    def __init__(self, now: float = 0.0, availability: Schedule | None = None) -> None:
        self.now = now
        self.profiles: dict[ClientId, DeviceProfile] = {}
        # A straggling client's factor on its compute time; absent: 1.
        self.slowdowns: dict[ClientId, float] = {}
        self.availability: Schedule = availability or Always()

    def profile(self, client: ClientId) -> DeviceProfile:
        return self.profiles.get(client, DeviceProfile())

    def slowdown(self, client: ClientId) -> float:
        """The client's straggler factor on compute time (1: none)."""
        return self.slowdowns.get(client, 1.0)

    def straggle(self, client: ClientId, factor: float) -> None:
        """Slow the client's compute down by `factor` (1: back to normal).

        Raises:
            ValueError: `factor` is not positive (a `Straggle` event's is).
        """
        if not factor > 0:  # NaN too
            raise ValueError(f"a slowdown must be positive, got {factor}")
        if factor == 1.0:
            self.slowdowns.pop(client, None)
        else:
            self.slowdowns[client] = float(factor)

    def forget(self, client: ClientId) -> None:
        """Drop a client that left: its device and slowdown."""
        self.profiles.pop(client, None)
        self.slowdowns.pop(client, None)

    def compute_s(self, client: ClientId, samples: int) -> float:
        """Simulated seconds the client computes to process `samples`
        samples, on its device and at its slowdown now."""
        return compute_s(self.profile(client), samples, self.slowdown(client))

    def devices(self) -> ClockDevices:
        """The profiles and slowdowns, for a checkpoint (copies)."""
        return {"profiles": dict(self.profiles), "slowdowns": dict(self.slowdowns)}

    def restore_devices(self, devices: ClockDevices) -> None:
        """Take back what `devices` returned.

        Raises:
            ValueError: they are not a `ClockDevices` (`devices_problem`).
        """
        problem = devices_problem(devices)
        if problem is not None:
            raise ValueError(problem)
        self.profiles = dict(devices["profiles"])
        self.slowdowns = dict(devices["slowdowns"])

    def exchange_s(
        self, client: ClientId, bytes_down: int, compute: float, bytes_up: int
    ) -> float:
        """Simulated seconds from sending a request to receiving its reply."""
        profile = self.profile(client)
        return transfer_s(profile, bytes_down) + compute + transfer_s(profile, bytes_up)

    def advance(self, seconds: float) -> float:
        """Move now on by `seconds` (a round's length); returns the new now."""
        self.now += seconds
        return self.now


class _Policy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WaitAll(_Policy):
    """The round ends when every reply that will come has come."""

    policy: Literal["wait_all"] = "wait_all"


class Fraction(_Policy):
    """The round ends when a share `fraction` of the planned clients replied."""

    policy: Literal["fraction"] = "fraction"
    fraction: float = Field(gt=0, le=1)


class Deadline(_Policy):
    """The round ends `seconds` after it started, or earlier if all replied."""

    policy: Literal["deadline"] = "deadline"
    seconds: float = Field(gt=0)


DeadlinePolicy = Annotated[WaitAll | Fraction | Deadline, Field(discriminator="policy")]


def close_round(
    durations: Mapping[ClientId, float | None], policy: WaitAll | Fraction | Deadline
) -> tuple[float, set[ClientId]]:
    """The round's simulated length and the clients whose replies came too late.

    Args:
        durations: each planned client's reply time; None for a reply that
            never comes (the client failed).
        policy: when the server stops waiting.
    """
    arrived = sorted((d, c) for c, d in durations.items() if d is not None)
    slowest = arrived[-1][0] if arrived else 0.0
    match policy:
        case WaitAll():
            return slowest, set()
        case Fraction(fraction=fraction):
            needed = math.ceil(fraction * len(durations))
            if len(arrived) < needed:
                return slowest, set()
            cutoff = arrived[needed - 1][0]
            return cutoff, {c for d, c in arrived if d > cutoff}
        case Deadline(seconds=seconds):
            late = {c for d, c in arrived if arrives_late(policy, d)}
            missing = len(arrived) < len(durations)
            return (seconds if late or missing else slowest), late
    raise TypeError(f"unknown deadline policy {policy!r}")


def arrives_late(
    policy: WaitAll | Fraction | Deadline, duration_s: float | None
) -> bool | None:
    """Whether a reply `duration_s` into the round is late, decided by that
    reply alone; None for `Fraction`, which ranks every reply first. A
    reply that never comes (None) is not late."""
    match policy:
        case WaitAll():
            return False
        case Fraction():
            return None
        case Deadline(seconds=seconds):
            return duration_s is not None and duration_s > seconds
    raise TypeError(f"unknown deadline policy {policy!r}")
