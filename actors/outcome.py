"""What one round produced: each exchange judged, each client's books, the round's.

The results file (`clusterfed.results`) writes these; every planned train task
ends in exactly one of accepted (`trained`), late, failed or rejected.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from clusterfed.protocol import Envelope
from clusterfed.types import ClientId, ClusterId

Status = Literal["ok", "late", "failed", "rejected"]


@dataclass(frozen=True)
class Exchange:
    """One request/reply with a client, judged."""

    status: Status
    reply: Envelope | None = None
    reason: str | None = None
    bytes_down: int = 0
    bytes_up: int = 0


@dataclass
class ClientOutcome:
    """One client's round, as the results file records it."""

    id: ClientId
    cluster: ClusterId | None = None
    trained: bool = False
    acc: float | None = None
    loss: float | None = None
    train_loss: float | None = None
    late: bool = False
    failed: bool = False
    rejected: bool = False
    reason: str | None = None
    bytes_up: int = 0
    bytes_down: int = 0
    sim_s: float = 0.0
    epsilon: float | None = None  # local DP: the ε it last reported spending
    planned: bool = False  # it was sent a train task this round


@dataclass
class RoundOutcome:
    round: int
    sim_duration: float
    clients: list[ClientOutcome]
    n_clusters: int
    rejections: list[str] = field(default_factory=list)
    epsilon_max: float | None = None  # the most ε any client has spent so far
    diagnostics: dict[str, Any] = field(default_factory=dict)  # the strategy's

    @property
    def bytes_up(self) -> int:
        return sum(c.bytes_up for c in self.clients)

    @property
    def bytes_down(self) -> int:
        return sum(c.bytes_down for c in self.clients)

    @property
    def failed_updates(self) -> int:
        return sum(c.failed for c in self.clients)

    @property
    def late_updates(self) -> int:
        return sum(c.late for c in self.clients)

    @property
    def rejected_messages(self) -> int:
        return len(self.rejections)

    @property
    def planned_updates(self) -> int:
        """Train tasks sent: each ends accepted, late, failed or rejected."""
        return sum(c.planned for c in self.clients)
