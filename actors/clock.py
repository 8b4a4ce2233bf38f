"""Simulated time: device profiles and what a task costs on them.

A task's simulated duration is its compute time on the client's device plus
the transfer time of the bytes it moved, so a slow client costs no real time.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class DeviceProfile(BaseModel):
    """How fast a client computes and talks. Defaults: a modest phone on Wi-Fi."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    samples_per_s: float = Field(500.0, gt=0, description="training throughput")
    bandwidth_bps: float = Field(1.25e6, gt=0, description="bytes per second")
    latency_s: float = Field(0.05, ge=0, description="per message, one way")


def transfer_s(profile: DeviceProfile, n_bytes: int) -> float:
    """Simulated seconds to move `n_bytes` in one message."""
    return profile.latency_s + n_bytes / profile.bandwidth_bps


def compute_s(
    profile: DeviceProfile, samples_seen: int, slowdown: float = 1.0
) -> float:
    """Simulated seconds to process `samples_seen` training samples."""
    return samples_seen / profile.samples_per_s * slowdown
