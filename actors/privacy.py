"""Local differential privacy of a client, through Opacus.

A client's `PrivateTraining` holds its budget, the noise multiplier planned
to spend it, and Opacus' `PrivacyEngine` with its accountant; the trainer runs
DP-SGD through that engine. The budget covers the whole run (horizon "run":
every round the client takes part in spends from one ε) or each round alone
(horizon "round": one round's local training spends at most ε; the books
still count every step, so the ε reported is the total spent). The helpers
plan the noise (Opacus' `get_noise_multiplier`), read the books (Opacus'
accountants) and check a model (Opacus' `ModuleValidator`, then the
clipping path of each layer, `bookkeeping.py`). Nothing here clips, noises
or accounts by hand.

Opacus is imported where it is used: it adds more than a second to start-up,
which runs without DP should not pay.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import TYPE_CHECKING, Literal

import numpy as np
from torch import nn

from clusterfed.models import n_parameters
from clusterfed.protocol import ClusterfedError

from .bookkeeping import describe, layer_paths

if TYPE_CHECKING:
    from opacus import PrivacyEngine

log = logging.getLogger(__name__)

ACCOUNTANTS = ("rdp", "prv", "gdp")

Horizon = Literal["run", "round"]
"""What one budget ε covers: the whole run, or one round's local training."""
HORIZONS: tuple[Horizon, ...] = ("run", "round")

# What Opacus warns about that clusterfed does on purpose, by how the
# warning starts.
_EXPECTED_WARNINGS = (
    "Secure RNG turned off",  # a simulation must be reproducible: seeded noise
    "GDP accounting is experimental",  # the user chose "gdp"
    "Optimal order is the",  # a planning probe far from the budget; bound valid
    # After a drift a client's data is a new tensor of the same client, whose
    # budget its one accountant keeps counting.
    "PrivacyEngine detected new dataset",
    # Torch, about Opacus' hooks: the first layer's input needs no gradient.
    "Full backward hook is firing",
)


@contextmanager
def quiet_opacus() -> Iterator[None]:
    """Silence the warnings of `_EXPECTED_WARNINGS`, and only those (and
    numpy's division by zero, below)."""
    # Opacus' PRV accountant takes log(1 − q), −inf at q = 1 (client-level
    # DP without sampling), which its np.where then discards.
    with warnings.catch_warnings(), np.errstate(divide="ignore"):
        for start in _EXPECTED_WARNINGS:
            warnings.filterwarnings("ignore", message=start)
        yield


class PrivacyBudgetError(ClusterfedError):
    """A client refuses to train: the task would take it past its budget."""


@lru_cache(maxsize=4096)
def _rdp_per_step(noise_multiplier: float, sample_rate: float) -> np.ndarray:
    """One step's Rényi DP at every order of Opacus' default list (its
    `compute_rdp` at steps = 1), read-only.

    Opacus' `RDPAccountant.get_privacy_spent` sums `compute_rdp(steps=n)`
    over the history, which is this vector times n; caching it per (σ, rate)
    leaves every ε bit for bit what Opacus computes, for a fraction of the
    cost (a history's ε is then a few vector operations, where the
    accountant evaluates every order of every entry again)."""
    from opacus.accountants import RDPAccountant
    from opacus.accountants.analysis.rdp import compute_rdp

    rdp = np.asarray(
        compute_rdp(
            q=sample_rate,
            noise_multiplier=noise_multiplier,
            steps=1,
            orders=RDPAccountant.DEFAULT_ALPHAS,
        )
    )
    rdp.setflags(write=False)
    return rdp


class PrivateTraining:
    """A client's local DP: its budget, its noise, and its Opacus accountant.

    One object per client for the whole run (it outlives a rebuilt trainer),
    so the accountant counts every step the client ever took.

    Args:
        epsilon, delta: the budget; the client never trains past ε at δ.
        max_grad_norm: the per-sample gradient clipping bound.
        noise_multiplier: σ, noise std over the clipping bound (see
            `plan_noise_multiplier`).
        accountant: "rdp", "prv" or "gdp", Opacus' accounting mechanisms.
        horizon: "run" (all its rounds spend at most ε together) or "round"
            (each round's training spends at most ε on its own).
    """

    def __init__(
        self,
        *,
        epsilon: float,
        delta: float,
        max_grad_norm: float,
        noise_multiplier: float,
        accountant: str = "rdp",
        horizon: Horizon = "run",
    ) -> None:
        if accountant not in ACCOUNTANTS:
            raise ValueError(
                f"accountant must be one of {', '.join(ACCOUNTANTS)},"
                f" got {accountant!r}"
            )
        if horizon not in HORIZONS:
            raise ValueError(f"horizon must be 'run' or 'round', got {horizon!r}")
        self.horizon: Horizon = horizon
        self.epsilon = epsilon
        self.delta = delta
        self.max_grad_norm = max_grad_norm
        self.noise_multiplier = noise_multiplier
        from opacus import PrivacyEngine

        with quiet_opacus():
            self.engine: PrivacyEngine = PrivacyEngine(accountant=accountant)

    @property
    def accountant(self) -> str:
        return str(self.engine.accountant.mechanism())

    def spent(self) -> float:
        """The ε spent so far, every round together, at the budget's δ (0
        before the first step); with horizon "round" it may exceed ε."""
        history = self.engine.accountant.history
        if not history:
            return 0.0
        return epsilon_of(self.accountant, tuple(history), self.delta)

    def check(self, sample_rate: float, steps: int) -> float:
        """The ε spent in all after `steps` more steps at `sample_rate`;
        refuse past the budget.

        The client refuses a round that WOULD take it past ε (horizon "run":
        its total; "round": this round's steps alone), so it never exceeds its
        budget (the round is not trained). The future history is built by
        Opacus' own accountant, stepped on a copy.
        """
        after = epsilon_of(
            self.accountant, self._future(sample_rate, steps, past=True), self.delta
        )
        if self.horizon == "run" and after > self.epsilon:
            raise PrivacyBudgetError(
                f"privacy budget spent: ε = {self.spent():.2f} of {self.epsilon:g}"
                f" (δ = {self.delta:g}); this round would take it to {after:.2f}"
            )
        if self.horizon == "round":
            alone = epsilon_of(
                self.accountant,
                self._future(sample_rate, steps, past=False),
                self.delta,
            )
            if alone > self.epsilon:
                raise PrivacyBudgetError(
                    f"privacy budget per round: this round would spend ε ="
                    f" {alone:.2f} of {self.epsilon:g} (δ = {self.delta:g})"
                )
        return after

    def _future(
        self, sample_rate: float, steps: int, *, past: bool
    ) -> tuple[tuple[float, float, int], ...]:
        """The accountant's history after `steps` more steps, from the books
        (`past`) or from none (one round alone)."""
        from opacus.accountants import create_accountant

        with quiet_opacus():
            future = create_accountant(self.accountant)
        if past:
            future.load_state_dict(self.engine.accountant.state_dict())
        try:
            for _ in range(steps):
                future.step(
                    noise_multiplier=self.noise_multiplier, sample_rate=sample_rate
                )
        except ValueError as exc:  # gdp: σ and the rate must stay constant
            raise PrivacyBudgetError(
                f"privacy budget cannot be accounted: {exc}"
            ) from exc
        return tuple(future.history)


def poisson_steps(n_train: int, batch_size: int) -> tuple[float, int]:
    """Sampling rate and steps per epoch of Opacus' Poisson loader.

    As `PrivacyEngine.make_private` derives them from a `DataLoader` of
    `batch_size` over `n_train` samples: rate ≈ batch_size / n_train (exactly
    1 / number of batches), that many steps per epoch, each sample in each
    batch with probability rate. The accountant records exactly this rate.
    """
    batches = math.ceil(n_train / batch_size)  # len(DataLoader)
    steps = int(1 / (1 / batches))  # len(DPDataLoader)
    return 1 / steps, steps


@lru_cache(maxsize=512)
def plan_noise_multiplier(
    *,
    epsilon: float,
    delta: float,
    sample_rate: float,
    steps: int,
    accountant: str = "rdp",
) -> float:
    """The smallest σ (to Opacus' tolerance) that spends at most ε at δ
    over `steps` steps at `sample_rate`.

    Raises:
        ValueError: no σ up to Opacus' limit meets the budget.
    """
    from opacus.accountants.utils import get_noise_multiplier

    with quiet_opacus():
        return float(
            get_noise_multiplier(
                target_epsilon=epsilon,
                target_delta=delta,
                sample_rate=sample_rate,
                steps=steps,
                accountant=accountant,
            )
        )


@lru_cache(maxsize=4096)
def epsilon_of(
    accountant: str, history: tuple[tuple[float, float, int], ...], delta: float
) -> float:
    """ε at δ of an Opacus accountant with `history`, at Opacus' default
    Rényi orders for "rdp" (cached: clients with the same sampling rate share
    their books' values)."""
    if accountant == "rdp":
        from opacus.accountants import RDPAccountant
        from opacus.accountants.analysis.rdp import get_privacy_spent

        rdp = sum(
            [_rdp_per_step(sigma, rate) * steps for sigma, rate, steps in history]
        )
        epsilon, _ = get_privacy_spent(
            orders=RDPAccountant.DEFAULT_ALPHAS, rdp=rdp, delta=delta
        )
        return float(epsilon)
    from opacus.accountants import create_accountant

    with quiet_opacus():
        books = create_accountant(accountant)
        books.history = list(history)
        return float(books.get_epsilon(delta))


def private_model(model: nn.Module) -> nn.Module:
    """`model` as Opacus can train it: as it is, or fixed by `ModuleValidator`
    (e.g. batch norm becomes group norm), with the same weight layout.

    Raises:
        ValueError: what Opacus cannot handle, or a fix that changes the
            number of weights.
    """
    from opacus.grad_sample import GradSampleModule
    from opacus.validators import ModuleValidator

    model.train()
    fixed = model
    if not ModuleValidator.is_valid(model):
        fixed = ModuleValidator.fix(model)
    problems = [
        *ModuleValidator.validate(fixed, strict=False),
        *GradSampleModule.validate(fixed, strict=False),
    ]
    if problems:
        raise ValueError(
            "Opacus cannot train it privately: "
            + "; ".join(str(p).strip() for p in problems)
        )
    if n_parameters(fixed) != n_parameters(model):
        raise ValueError(
            f"Opacus' fix changes its weights from {n_parameters(model)}"
            f" to {n_parameters(fixed)}"
        )
    # The clipping path of each layer (refuses a layer without a rule).
    log.info("DP-SGD clipping per layer: %s", describe(layer_paths(fixed)))
    return fixed
