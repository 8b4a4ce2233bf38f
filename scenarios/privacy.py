"""Differential privacy: a scenario's `dp` table."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, model_validator

from clusterfed.actors.availability import AlwaysOnline
from clusterfed.actors.client_dp import ClientDPPlan, default_count_noise
from clusterfed.actors.privacy import plan_noise_multiplier
from clusterfed.actors.spec import Accountant
from clusterfed.algorithms import Strategy
from clusterfed.algorithms.fedavg import sample_size
from clusterfed.errors import ScenarioError

from ._base import _Spec
from .events import Leave, Target

if TYPE_CHECKING:  # spec imports this module
    from .spec import Scenario

CLIENT_ACCOUNTANTS = ("rdp", "prv")
"""Opacus' accountants that bound client-level DP's ε."""


class DPSpec(_Spec):
    """Differential privacy, of one of two kinds (`mechanism`).

    `"sample"` (the default), local DP: every client trains with DP-SGD
    (Opacus). Each client's noise multiplier is chosen by Opacus so that the
    rounds it plans to take part in (all rounds from the one it joins; see
    README) spend at most `epsilon` at `delta` (`horizon = "run"`), or so
    that one round's local training does (`horizon = "round"`: the budget
    applies per round, and the ε reported is still the total spent); a
    client that would go past it refuses to train.

    `"client"`, client-level DP (DP-FedAvg, McMahan et al., ICLR 2018): each
    client clips its update to an L2 norm (`clip_norm`, fixed, or adapted
    each round to the `target_quantile` of the updates' norms, Andrew et al.,
    NeurIPS 2021), the server sums the clipped updates of each cluster with
    equal weights, adds Gaussian noise to every cluster's sum and divides
    each by the round's sampled clients (public). One ε
    covers every client: Opacus' accountant ("rdp" or "prv") over the
    rounds at the largest client sampling rate a round can have
    (`largest_sample_rate`, docs/privacy.md).
    """

    epsilon: float = Field(gt=0, allow_inf_nan=False, description="the budget ε")
    delta: float = Field(1e-5, gt=0, lt=1, description="the budget δ")
    mechanism: Literal["sample", "client"] = Field(
        "sample",
        description='"sample": local DP-SGD on every client; "client": DP-FedAvg'
        " (clipped updates, the server's noise on each cluster's sum)",
    )
    max_grad_norm: float = Field(
        1.0,
        gt=0,
        allow_inf_nan=False,
        description='"sample": the per-sample gradient clipping bound',
    )
    accountant: Accountant = Field("rdp", description="Opacus' accountant")
    horizon: Literal["run", "round"] = Field(
        "run", description="what ε covers: the whole run or each round alone"
    )
    clipping: Literal["fixed", "adaptive"] = Field(
        "fixed",
        description='"client": the update clipping bound stays at clip_norm, or'
        " follows the target quantile of the updates' norms (Andrew et al.)",
    )
    clip_norm: float = Field(
        1.0,
        gt=0,
        allow_inf_nan=False,
        description='"client": the update clipping bound (its start, adaptive)',
    )
    target_quantile: float = Field(
        0.5,
        gt=0,
        lt=1,
        description='"client", adaptive: the share of updates left unclipped',
    )
    clip_lr: float = Field(
        0.2,
        gt=0,
        allow_inf_nan=False,
        description='"client", adaptive: η_C of C ← C·exp(−η_C(b̄ − γ))',
    )
    count_noise: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description='"client", adaptive: σ_b, the noise on the count of'
        " unclipped updates; none: the clients per round / 20 (Andrew et al.),"
        " or more where that would raise the updates' noise by over 10 %",
    )

    @model_validator(mode="after")
    def _fits_mechanism(self) -> DPSpec:
        if self.mechanism == "client":
            if self.horizon != "run":
                raise ValueError(
                    'horizon = "round" is local DP\'s: client-level DP accounts'
                    ' the whole run (horizon = "run")'
                )
            if self.accountant not in CLIENT_ACCOUNTANTS:
                # Opacus' GDP accountant is a central-limit approximation for
                # many steps at small rates, not a bound: tens of rounds at a
                # rate near 1 are neither.
                raise ValueError(
                    'client-level DP is accounted by Opacus\' "rdp" or "prv"'
                    f" accountant; got accountant = {self.accountant!r} (an"
                    " approximation for many steps at small sampling rates)"
                )
        elif self.clipping != "fixed":
            raise ValueError(
                'clipping = "adaptive" is client-level DP\'s: set mechanism = "client"'
            )
        return self


def client_dp_plan(scenario: Scenario, strategy: Strategy[Any]) -> ClientDPPlan | None:
    """A run's client-level DP (`dp.mechanism = "client"`): the noise
    multiplier Opacus plans for one step a round over the scenario's rounds
    at the largest client sampling rate the run can reach
    (`largest_sample_rate`).

    Raises:
        ScenarioError: no noise multiplier meets the budget, or the count's
            noise is too small for it (adaptive clipping).
    """
    dp = scenario.dp
    if dp is None or dp.mechanism != "client":
        return None
    # Strategies without sampling train every client: fraction 1.
    fraction = float(getattr(strategy, "fraction", 1.0))
    rate = largest_sample_rate(fraction, pool_sizes(scenario, strategy))
    try:
        sigma = plan_noise_multiplier(
            epsilon=dp.epsilon,
            delta=dp.delta,
            sample_rate=rate,
            steps=scenario.rounds,
            accountant=dp.accountant,
        )
        count_noise = dp.count_noise
        if count_noise is None:
            per_round = sample_size(fraction, scenario.clients)
            count_noise = default_count_noise(sigma, per_round)
        plan = ClientDPPlan(
            epsilon=dp.epsilon,
            delta=dp.delta,
            noise_multiplier=sigma,
            sample_rate=rate,
            rounds=scenario.rounds,
            clip_norm=dp.clip_norm,
            adaptive=dp.clipping == "adaptive",
            target_quantile=dp.target_quantile,
            clip_lr=dp.clip_lr,
            count_noise=count_noise,
            seed=scenario.seed,
            accountant=dp.accountant,
        )
        plan.update_noise_multiplier  # noqa: B018 (refuses a count noise too small)
    except ValueError as exc:
        raise ScenarioError(
            f"dp.epsilon = {dp.epsilon:g} (δ = {dp.delta:g}), client-level: {exc}"
        ) from exc
    return plan


def largest_sample_rate(fraction: float, sizes: range) -> float:
    """The largest share k/n of the clients a round samples, over every pool
    size n in `sizes` (k = `sample_size(fraction, n)`): what the accountant
    must assume, since k = max(1, round(fraction·n)) can exceed fraction·n
    (one of 10 clients at fraction 0.05 is a rate of 0.1)."""
    return max(sample_size(fraction, n) / n for n in sizes)


def pool_sizes(scenario: Scenario, strategy: Strategy[Any]) -> range:
    """Every size the pool a round samples from can take over the run: from
    the clients at the start less every client the leave events can take
    (at least 1) to the start plus every joiner.

    Any size from 1 where the pool is not the membership: with an
    availability schedule (the online clients only) or a strategy that asks
    its clients to describe their data (PACFL trains the described ones; a
    description that fails leaves a client out).
    """
    largest = scenario.clients + sum(n for _, n in scenario.joins())
    if not isinstance(scenario.availability, AlwaysOnline) or strategy.wants:
        return range(1, max(largest, 1) + 1)
    gone = most_leavers(scenario)
    smallest = 1 if gone is None else max(1, scenario.clients - gone)
    return range(smallest, max(largest, smallest) + 1)


def most_leavers(scenario: Scenario) -> int | None:
    """How many clients the leave events can take at most; None: any number
    (a group, everyone, or a time-keyed repeat without `until`)."""
    total = 0
    for event in scenario.events:
        if not isinstance(event, Leave):
            continue
        target = Target.parse(event.target)
        endless = event.clock == "time" and event.every is not None
        if (
            target.everyone
            or target.group is not None
            or (endless and event.until is None)
        ):
            return None
        horizon = scenario.rounds - 1 if event.clock == "round" else math.inf
        each = len(target.ids) if target.ids else target.random
        total += each * len(list(event.occurrences(horizon)))
    return total
