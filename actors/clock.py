"""Simulated time: the clock, device profiles, what a task costs on them, and
when a round ends.

`SimClock` owns simulated now and every client's device profile (from the
client specs, kept current by the federation as events change them). A
task's simulated duration is its download, its compute time on the client's
device (as the client reports it: its samples times any straggler slowdown
over its throughput) and its upload, so a 30 s straggler costs no real 30 s.
The clock also holds the availability schedule: who is online when.
A deadline policy decides when the server stops waiting: replies that arrive
after that are late.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Literal

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
    """Simulated seconds to process `samples_seen` training samples."""
    return samples_seen / profile.samples_per_s * slowdown


class SimClock:
    """Simulated now, the devices, what a message exchange costs on them,
    and when each client is online (`availability`, see availability.py)."""

    def __init__(self, now: float = 0.0, availability: Schedule | None = None) -> None:
        self.now = now
        self.profiles: dict[ClientId, DeviceProfile] = {}
        self.availability: Schedule = availability or Always()

    def profile(self, client: ClientId) -> DeviceProfile:
        return self.profiles.get(client, DeviceProfile())

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
