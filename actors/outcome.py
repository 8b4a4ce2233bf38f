"""What one round produced: each exchange judged, each client's books, the round's.

Every planned train task ends in exactly one `Status`: accepted ("ok"),
"late", "failed" or "rejected". The results file (`clusterfed.results`)
writes a client's row from the typed fields here (`ClientOutcome.row`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import JsonValue

from clusterfed.algorithms.diagnostics import Diagnostics
from clusterfed.protocol import Envelope
from clusterfed.types import ClientId, ClusterId, Status


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
    """One client's round, as the results file records it.

    `status` is how its train task ended; None if it was sent none.
    """

    id: ClientId
    status: Status | None = None
    cluster: ClusterId | None = None
    acc: float | None = None
    loss: float | None = None
    # Its hold-out's accuracy where `acc` is its test set's (a dataset with a
    # test split); None, and absent from its row, otherwise.
    val_acc: float | None = None
    train_loss: float | None = None
    reason: str | None = None
    bytes_up: int = 0
    bytes_down: int = 0
    sim_s: float = 0.0
    epsilon: float | None = None  # local DP: the ε it last reported spending
    staleness: int | None = None  # async: server versions since its model was sent
    # The scenario made it faulty: its self-reports (accuracy, ε) are in its
    # row but never in the run's metrics (see ParameterServer.faulty).
    faulty: bool = False

    @property
    def planned(self) -> bool:
        return self.status is not None

    @property
    def trained(self) -> bool:
        return self.status == "ok"

    @property
    def late(self) -> bool:
        return self.status == "late"

    @property
    def failed(self) -> bool:
        return self.status == "failed"

    @property
    def rejected(self) -> bool:
        return self.status == "rejected"

    def row(self, group: int | None) -> dict[str, Any]:
        """The client's entry in rounds.jsonl (DESIGN §8); `group` is its
        ground-truth group, which only the scenario knows."""
        return {
            "id": self.id,
            "group": group,
            "cluster": self.cluster,
            "acc": self.acc,
            "loss": self.loss,
            "late": self.late,
            "failed": self.failed,
            "rejected": self.rejected,
            "trained": self.trained,
            "train_loss": self.train_loss,
            "bytes_up": self.bytes_up,
            "bytes_down": self.bytes_down,
            "sim_s": self.sim_s,
            "epsilon": self.epsilon,
            "reason": self.reason,
            **({} if self.val_acc is None else {"val_acc": self.val_acc}),
            **({} if self.staleness is None else {"staleness": self.staleness}),
            **({"faulty": True} if self.faulty else {}),
        }


@dataclass
class RoundOutcome:
    round: int
    sim_duration: float
    clients: list[ClientOutcome]
    n_clusters: int
    rejections: list[str] = field(default_factory=list)
    epsilon_max: float | None = None  # the most ε any client has spent so far
    diagnostics: Diagnostics | None = None  # the strategy's, after the round
    driver: Diagnostics | None = None  # the asynchronous driver's versions

    def strategy_record(self) -> dict[str, JsonValue]:
        """The row's `strategy` in rounds.jsonl: the strategy's diagnostics,
        then the driver's (a key of both is the driver's)."""
        record = {} if self.diagnostics is None else self.diagnostics.record()
        if self.driver is not None:
            record.update(self.driver.record())
        return record

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
