"""Whether a scenario fits the assumption of its robust aggregator.

Each rule of `algorithms/robust.py` says what it assumes of the `n` updates
it folds and how many of them are Byzantine (`Rule.breaks`). Here the
scenario supplies both, before anything runs:

- `n`: in synchronous mode the updates a round folds: the clients the run
  starts with (a population's K a round), as many as the strategy samples
  of them (`fraction`, `sample_size`), and of those ⌈share·n⌉ under a
  `fraction` deadline (a clustered algorithm's smaller clusters, and a
  round that availability or faults thin, are checked again at each
  aggregation, with a warning); in asynchronous mode a buffer's
  `buffer_size`, the updates each step folds;
- `byzantine`: the clients that send accepted lies (`POISONING` in
  `actors/faults.py`: sign flips and the colluding attacks), at most `n`:
  a sampled round may draw every one of them (the check is for the worst
  round, not the expected one); in a buffer, their share of the clients
  times `buffer_size`, rounded up (a buffer samples arrivals; a run whose
  buffers are all Byzantine is no study of a rule).

The refusal names the rule, the numbers and the fix.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from clusterfed.actors.attacks import z_max
from clusterfed.actors.clock import Fraction
from clusterfed.actors.faults import POISONING, SIMULATED
from clusterfed.algorithms import make
from clusterfed.algorithms._buffers import Buffered
from clusterfed.algorithms.fedavg import sample_size
from clusterfed.algorithms.registry import resolve

if TYPE_CHECKING:
    from .spec import Scenario

# The attacks that shift by a standard deviation of the coalition's updates.
SHIFTED = ("alie", "minmax", "minsum")


def byzantine_clients(scenario: Scenario) -> int:
    """How many distinct clients the scenario makes send accepted lies."""
    return len({c for f in scenario.faulty if f.behaviour in POISONING for c in f.ids})


def check_aggregator(scenario: Scenario) -> None:
    """Refuse a rule that the scenario's mode, strategy or sizes break.

    Raises:
        ValueError: the reason, starting with `aggregator:`.
    """
    rule = scenario.aggregator
    if rule.is_mean:
        return
    cls = resolve(scenario.algorithm)
    if scenario.mode == "async":
        if not cls.honours_aggregator_async:
            raise ValueError(
                f'aggregator: {scenario.algorithm!r} in mode = "async" folds'
                f' each update alone and would ignore aggregator = "{rule.name}";'
                " use a buffered strategy (fedbuff, ifca, dcfl) or"
                ' aggregator = "mean"'
            )
        strategy = make(scenario.algorithm, **scenario.params_of(scenario.algorithm))
        assert isinstance(strategy, Buffered)  # declared by honours_aggregator_async
        n = strategy.buffering.buffer_size
        share = byzantine_clients(scenario) / scenario.clients
        byzantine = min(math.ceil(share * n - 1e-9), n)
        where = f"a buffer of buffer_size = {n} updates"
    else:
        n, where = _round_size(scenario)
        byzantine = min(byzantine_clients(scenario), n)
    reason = rule.breaks(n, byzantine)
    if reason is not None:
        raise ValueError(f"aggregator: {reason} ({where})")


def _round_size(scenario: Scenario) -> tuple[int, str]:
    """The most updates a synchronous round folds, and the words for it: the
    strategy's sample (`sample_size`) of the clients a round may reach,
    cut to ⌈share·sample⌉ by a fraction deadline."""
    strategy = make(scenario.algorithm, **scenario.params_of(scenario.algorithm))
    pool, whose = scenario.clients, "the run's"
    if scenario.population is not None:
        pool, whose = scenario.population.k, "a population round's"
    n = sample_size(strategy.fraction, pool)
    cuts = [f"fraction = {strategy.fraction}"] if n < pool else []
    if isinstance(scenario.deadline, Fraction):
        n = math.ceil(scenario.deadline.fraction * n)
        cuts.append(f"deadline.fraction = {scenario.deadline.fraction}")
    if not cuts:
        return n, f"{whose} {n} clients"
    return n, (
        f"a round of {n} of {whose} {pool} clients, {' and '.join(cuts)};"
        " every Byzantine client may be in one round"
    )


def check_attacks(scenario: Scenario) -> None:
    """Refuse an attack the scenario cannot stage.

    The simulator forges `SIMULATED` attacks at the close of a synchronous
    round (`actors/adversary.py`); ALIE, MinMax and MinSum take a standard
    deviation of the coalition's honest updates, so they need two attackers
    of the same behaviour (or one with `knowledge = "all"` and an honest
    client beside it); so does Fang's partial-knowledge attack (the
    coalition's own updates stand for the benign ones), while its
    full-knowledge one (`knowledge = "all"`) and mimic read honest clients'
    updates, so one must exist.
    ALIE's own z (`z_max`, when `z` is unset) is defined for a coalition that
    needs honest supporters, s = ⌊n/2 + 1⌋ − f > 0, with n the run's starting
    clients (a round of the whole federation; a sampled round is checked again
    when forged, and left honest with a warning) and f the coalition.

    Raises:
        ValueError: the reason, naming the `faulty` entry.
    """
    faulty_ids = {c for f in scenario.faulty for c in f.ids}
    for i, faulty in enumerate(scenario.faulty):
        where = f"faulty[{i}] ({faulty.behaviour})"
        if faulty.behaviour not in SIMULATED:
            continue
        if scenario.mode == "async":
            raise ValueError(
                f"{where}: the simulator forges this attack when a synchronous"
                ' round closes; use mode = "sync"'
            )
        coalition = {
            c for f in scenario.faulty if f.behaviour == faulty.behaviour for c in f.ids
        }
        honest = scenario.clients - len(faulty_ids)
        seen = len(coalition) + (honest if faulty.knowledge == "all" else 0)
        if faulty.behaviour == "fang":
            if faulty.knowledge == "all" and honest < 1:
                raise ValueError(
                    f'{where}: with knowledge = "all" it attacks from the honest'
                    " clients' updates; none is left"
                )
            if faulty.knowledge == "coalition" and len(coalition) < 2:
                raise ValueError(
                    f"{where}: a coalition of {len(coalition)} client(s) cannot"
                    " estimate the benign updates' spread (Fang et al.'s partial"
                    ' knowledge); list at least 2 clients or set knowledge = "all"'
                )
        if faulty.behaviour in SHIFTED and seen < 2:
            raise ValueError(
                f"{where}: a coalition of {len(coalition)} client(s) has no"
                " standard deviation to shift by; list at least 2 clients"
                + ("" if faulty.knowledge == "all" else ' or set knowledge = "all"')
            )
        if faulty.behaviour == "alie" and faulty.z is None:
            try:
                z_max(scenario.clients, len(coalition))
            except ValueError as exc:
                raise ValueError(
                    f"{where}: {exc}; list fewer attackers or set z"
                ) from exc
        if faulty.behaviour == "mimic" and honest < 1:
            raise ValueError(f"{where}: mimic copies an honest client; none is left")
