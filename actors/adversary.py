"""The simulator's adversary: it forges the updates of the attacks that need
more than one client's knowledge.

An attacker of `alie`, `ipm`, `minmax`, `minsum`, `mimic` or `gaussian`
(`faults.SIMULATED`) is an ordinary client actor that trains and answers
honestly; the attack happens between its reply and the server's checks, in
the simulator, never in the protocol: no message carries one client's update
to another. In a synchronous round the adversary sees every reply as it
arrives (`observe`), holds the attackers' replies back from streaming
aggregation, and once the round's replies are in replaces each attacker's
delta by its attack's vector (`forge`); the server then judges and books the
forged reply like any other (its norm bound applies).

What each attack knows:

- the colluding ones (`alie`, `ipm`, `minmax`, `minsum`): by default
  (`knowledge = "coalition"`) the honest updates of the round's attackers
  of the same behaviour (the coalition): they see each other's honest
  updates; with `knowledge = "all"` every honest client's update of the
  round too (the attacker who knows the benign updates: IPM's paper,
  Shejwalkar & Houmansadr's full-knowledge setting; the coalition's size,
  not the updates seen, is ALIE's f);
- `mimic`: the update of the honest client of the lowest id that replied
  (an honest update is what it copies);
- `fang`: the rule in use (Fang et al. define one attack per rule: Krum's
  for `krum` and `bulyan`, the trimmed mean's for every other rule) and, as
  the paper's two settings, by default its coalition's honest updates
  (partial knowledge: the benign updates estimated from its own) or, with
  `knowledge = "all"`, every honest client's update of the round (full
  knowledge: the benign updates themselves, not the coalition's own);
- `gaussian`: nothing; each attacker draws its own vector from its seed.

Everything is taken in client order, so the forged vectors are the same in
every runtime, whatever order the replies came in. An attack that cannot be
computed (its coalition's other members failed) leaves the reply honest and
says so (`AttackWarning`).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from clusterfed.algorithms.robust import MEAN, AggregatorRule, Bulyan, Krum
from clusterfed.protocol import UpdateReply
from clusterfed.seeding import numpy_rng
from clusterfed.types import ClientId

from . import attacks
from .faults import COLLUDING, SIMULATED, FaultPlan
from .outcome import Exchange

GAUSSIAN_KEY = 11  # the random stream of a gaussian attacker's vectors
FANG_KEY = 13  # the random stream of a fang coalition's values


class AttackWarning(RuntimeWarning):
    """An attack the adversary could not compute this round."""


class Adversary:
    """Every faulty client's plans, and the round's replies it forges."""

    def __init__(self, aggregator: AggregatorRule = MEAN) -> None:
        self.aggregator = aggregator  # the rule `fang` attacks
        self.plans: dict[ClientId, tuple[FaultPlan, ...]] = {}
        self.seeds: dict[ClientId, int] = {}
        self._seen: dict[ClientId, np.ndarray] = {}

    def enlist(self, client: ClientId, plans: Sequence[FaultPlan], seed: int) -> None:
        """Know a faulty client (any behaviour: it is not honest)."""
        self.plans[client] = tuple(plans)
        self.seeds[client] = seed

    def forging(self, round: int) -> dict[ClientId, FaultPlan]:
        """The clients whose reply the adversary forges this round, and how."""
        due: dict[ClientId, FaultPlan] = {}
        for client, plans in self.plans.items():
            active = next((p for p in plans if p.active(round)), None)
            if active is not None and active.behaviour in SIMULATED:
                due[client] = active
        return due

    def observe(self, client: ClientId, exchange: Exchange) -> None:
        """Keep a reply's delta (honest, as it came) until the round's forge."""
        reply = exchange.reply.payload if exchange.reply is not None else None
        if exchange.status == "ok" and isinstance(reply, UpdateReply):
            self._seen[client] = np.asarray(reply.delta, dtype=np.float64)

    def forge(
        self, round: int, exchanges: Sequence[tuple[ClientId, Exchange]]
    ) -> list[Exchange]:
        """The round's exchanges with each attacker's delta replaced by its
        attack's vector (the others as they were). `exchanges` are the
        round's, one per planned task."""
        due = self.forging(round)
        seen, self._seen = self._seen, {}
        if not due:
            return [e for _, e in exchanges]
        coalitions: dict[str, list[ClientId]] = defaultdict(list)
        for client in sorted(due):
            if client in seen:
                coalitions[due[client].behaviour].append(client)
        honest = [c for c in sorted(seen) if c not in self.plans]
        vectors: dict[ClientId, np.ndarray] = {}
        for behaviour, members in coalitions.items():
            plan = due[members[0]]
            sources = members + (honest if plan.knowledge == "all" else [])
            known = np.stack([seen[c] for c in sources])
            try:
                if behaviour == "gaussian":
                    for c in members:
                        rng = numpy_rng(self.seeds[c], GAUSSIAN_KEY, round)
                        vectors[c] = attacks.gaussian(known.shape[1], plan.sigma, rng)
                    continue
                if behaviour == "fang":
                    benign = honest if plan.knowledge == "all" else members
                    if not benign:
                        raise ValueError("fang needs an honest update, none came")
                    known = np.stack([seen[c] for c in benign])
                    vectors.update(self._fang(plan, members, known, len(seen), round))
                    continue
                if behaviour == "mimic":
                    if not honest:
                        raise ValueError("mimic needs an honest update, none came")
                    vector = attacks.mimic(np.stack([seen[honest[0]]]))
                else:
                    vector = self._colluding(
                        behaviour, plan, known, len(seen), len(members)
                    )
            except ValueError as exc:
                warnings.warn(
                    f"round {round}: {behaviour} left {members} honest: {exc}",
                    AttackWarning,
                    stacklevel=2,
                )
                continue
            vectors.update({c: vector for c in members})
        return [_with_delta(e, vectors[c]) if c in vectors else e for c, e in exchanges]

    def _fang(
        self,
        plan: FaultPlan,
        members: list[ClientId],
        benign: np.ndarray,
        updates: int,
        round: int,
    ) -> dict[ClientId, np.ndarray]:
        """Fang et al.'s attack on the rule in use: Krum's (Krum, Bulyan) or
        the trimmed mean's (every other rule, the median's included), from
        the `benign` updates the coalition knows, of the round's `updates`."""
        rule, c = self.aggregator, len(members)
        if isinstance(rule, Krum | Bulyan):
            vector = attacks.fang_krum(benign, c, rule.f, updates)
            return {member: vector for member in members}
        rng = numpy_rng(self.seeds[members[0]], FANG_KEY, round)
        if plan.knowledge == "all":
            rows = attacks.fang_trimmed_full(benign, c, rng)
        else:
            rows = attacks.fang_trimmed_partial(benign, c, rng)
        return {member: rows[i] for i, member in enumerate(members)}

    @staticmethod
    def _colluding(
        behaviour: str,
        plan: FaultPlan,
        known: np.ndarray,
        updates: int,
        attackers: int,
    ) -> np.ndarray:
        """The colluding attack's one vector. `updates`, ALIE's n, counts the
        round's updates that came (the sampled clients' that replied, the
        attackers' among them): the ones the rule will fold."""
        assert behaviour in COLLUDING
        if behaviour == "ipm":
            return attacks.ipm(known, plan.epsilon)
        if behaviour == "alie":
            z = plan.z
            if z is None:  # a majority this round: z_max says why, and
                z = attacks.z_max(updates, attackers)  # the replies stay honest
            return attacks.alie(known, z)
        if behaviour == "minmax":
            return attacks.minmax(known, plan.deviation)
        return attacks.minsum(known, plan.deviation)


def _with_delta(exchange: Exchange, vector: np.ndarray) -> Exchange:
    """The exchange with its update's delta replaced (the envelope as sent)."""
    assert exchange.reply is not None
    reply = exchange.reply.payload
    assert isinstance(reply, UpdateReply)
    forged = reply.model_copy(update={"delta": vector.astype(np.float32)})
    envelope = exchange.reply.model_copy(update={"payload": forged})
    return dataclasses.replace(exchange, reply=envelope)
