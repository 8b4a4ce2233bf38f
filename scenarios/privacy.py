"""Local differential privacy: a scenario's `dp` table."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from clusterfed.actors.spec import Accountant

from ._base import _Spec


class DPSpec(_Spec):
    """Local differential privacy: every client trains with DP-SGD (Opacus).

    Each client's noise multiplier is chosen by Opacus so that the rounds it
    plans to take part in (all rounds from the one it joins; see README)
    spend at most `epsilon` at `delta` (`horizon = "run"`), or so that one
    round's local training does (`horizon = "round"`: the budget applies per
    round, and the ε reported is still the total spent); a client that would
    go past it refuses to train.
    """

    epsilon: float = Field(gt=0, allow_inf_nan=False, description="the budget ε")
    delta: float = Field(1e-5, gt=0, lt=1, description="the budget δ")
    max_grad_norm: float = Field(
        1.0, gt=0, allow_inf_nan=False, description="per-sample clipping bound"
    )
    accountant: Accountant = Field("rdp", description="Opacus' accountant")
    horizon: Literal["run", "round"] = Field(
        "run", description="what ε covers: the whole run or each round alone"
    )
