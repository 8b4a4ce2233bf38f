"""Differential privacy: a scenario's `dp` table."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from clusterfed.actors.client_dp import ClientDPPlan
from clusterfed.actors.privacy import plan_noise_multiplier
from clusterfed.actors.spec import Accountant
from clusterfed.errors import ScenarioError

from ._base import _Spec

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
    NeurIPS 2021), the server averages the clipped updates of each cluster
    with equal weights and adds Gaussian noise to each cluster's sum. One ε
    covers every client: Opacus' accountant over the rounds at the
    algorithm's client sampling rate (docs/privacy.md), "rdp" or "prv".
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
        " unclipped updates; none: the clients per round / 20 (Andrew et al.)",
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


def client_dp_plan(
    dp: DPSpec | None, rate: float, clients: int, rounds: int, seed: int
) -> ClientDPPlan | None:
    """A run's client-level DP (`dp.mechanism = "client"`): the noise
    multiplier Opacus plans for one step a round over `rounds` at the
    client sampling `rate` (the strategy's `fraction`), `clients` at the
    start.

    Raises:
        ScenarioError: no noise multiplier meets the budget, or the count's
            noise is too small for it (adaptive clipping).
    """
    if dp is None or dp.mechanism != "client":
        return None
    per_round = max(1, round(rate * clients))
    count_noise = dp.count_noise if dp.count_noise is not None else per_round / 20
    try:
        sigma = plan_noise_multiplier(
            epsilon=dp.epsilon,
            delta=dp.delta,
            sample_rate=rate,
            steps=rounds,
            accountant=dp.accountant,
        )
        plan = ClientDPPlan(
            epsilon=dp.epsilon,
            delta=dp.delta,
            noise_multiplier=sigma,
            sample_rate=rate,
            rounds=rounds,
            clip_norm=dp.clip_norm,
            adaptive=dp.clipping == "adaptive",
            target_quantile=dp.target_quantile,
            clip_lr=dp.clip_lr,
            count_noise=count_noise,
            seed=seed,
            accountant=dp.accountant,
        )
        plan.update_noise_multiplier  # noqa: B018 (refuses a count noise too small)
    except ValueError as exc:
        raise ScenarioError(
            f"dp.epsilon = {dp.epsilon:g} (δ = {dp.delta:g}), client-level: {exc}"
        ) from exc
    return plan
