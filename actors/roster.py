"""The roster: who is in the run, who has left, and what the server knows of each.

One registry of membership, kept by the server (`Membership`) and read by
everything that needs to know who a client is: the round's books, the
reply checks (a reply from a client that left is told apart from one from
a stranger), the privacy ledger, the evaluation. A join, a leave and a
checkpoint's restore change it in one place.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from dataclasses import dataclass, field

from clusterfed.algorithms import ClientInfo
from clusterfed.types import ClientId


@dataclass
class Roster:
    """The clients of a run and what the server holds about each.

    Attributes:
        members: the registered clients, by id (what they declared at join).
        departed: clients that were members and left (their late replies
            are refused as a leaver's, not a stranger's).
        described: members that answered the strategy's describe task (or
            whose answer was refused): they are not asked again.
        faulty: members the scenario made faulty: what they report of
            themselves (accuracy, ε) is marked and kept out of the run's
            metrics, as no check can verify it.
        epsilon: the privacy ledger, the ε each client (present or gone)
            last reported spending.
        leaving: members that announced a leave during a round; they go
            when it ends (its books still hold them).
    """

    members: dict[ClientId, ClientInfo] = field(default_factory=dict)
    departed: set[ClientId] = field(default_factory=set)
    described: set[ClientId] = field(default_factory=set)
    faulty: set[ClientId] = field(default_factory=set)
    epsilon: dict[ClientId, float] = field(default_factory=dict)
    leaving: list[ClientId] = field(default_factory=list)

    def __contains__(self, client: object) -> bool:
        return client in self.members

    def __iter__(self) -> Iterator[ClientId]:
        return iter(self.members)

    def __len__(self) -> int:
        return len(self.members)

    def in_order(self) -> list[ClientInfo]:
        """The members by id."""
        return [self.members[c] for c in sorted(self.members)]

    def admit(self, client: ClientInfo) -> bool:
        """Register `client`; False when it is a member already (one back
        from a restart keeps its place and what it declared)."""
        if client.id in self.members:
            return False
        self.members[client.id] = client
        self.departed.discard(client.id)
        return True

    def remove(self, client: ClientId) -> bool:
        """Take `client` off the roster; False when it was not on it. Its
        ε stays in the ledger: what it spent is spent."""
        if self.members.pop(client, None) is None:
            return False
        self.departed.add(client)
        self.described.discard(client)
        return True

    def epsilon_max(self) -> float | None:
        """The largest ε a client that is not faulty reported; None: none did."""
        trusted = [e for c, e in self.epsilon.items() if c not in self.faulty]
        return max(trusted, default=None)

    def copy(self) -> Roster:
        """A copy that shares nothing mutable with this roster (a checkpoint's)."""
        return copy.deepcopy(self)

    def problem(self) -> str | None:
        """Why this roster (from a checkpoint, which is unpickled: any
        field may hold anything) is damaged, or None."""
        if not isinstance(self.members, dict) or not all(
            isinstance(info, ClientInfo) and info.id == cid and info.n_train >= 0
            for cid, info in self.members.items()
        ):
            return "the client registry is not one of client ids to their ClientInfo"
        if not isinstance(self.epsilon, dict) or not all(
            isinstance(e, float | int) and math.isfinite(e) and e >= 0
            for e in self.epsilon.values()
        ):
            return "the privacy books (epsilon) hold a value that is not a finite ε"
        for name in ("departed", "described", "faulty"):
            if not isinstance(getattr(self, name), set):
                return f"the roster's {name} is not a set of client ids"
        both = sorted(self.departed & set(self.members))
        if both:
            return f"clients {both} are both members and departed"
        if self.leaving:
            return "the roster holds leaves of a round that did not end"
        return None
