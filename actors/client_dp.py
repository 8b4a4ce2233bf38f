"""Client-level differential privacy on the server: DP-FedAvg.

McMahan, Ramage, Talwar, Zhang, "Learning Differentially Private Recurrent
Language Models", ICLR 2018: each client clips its update to an L2 norm C
(`TrainConfig.clip_norm`, applied by the client), the server sums the
clipped updates with equal weights, so that one client changes the sum by
at most C, adds Gaussian noise of standard deviation z·C to it and divides
by a fixed, public count (the paper's estimator divides by the expected
number of clients, never by the true one).

In clusterfed the release is the vector of every cluster model's sum: a
client's clipped update falls in one cluster's block, so the vector's L2
sensitivity is C, and one N(0, (z·C)²) draw on every coordinate of every
cluster (a cluster no update reached included: otherwise a cluster that
stays put shows that nobody chose it) is the Gaussian mechanism on it. Each
noisy sum is divided by the round's planned clients m, public (the
membership and the fraction fix it), for every cluster: the true count of
a cluster's contributors is data (which clients chose it, whose update
arrived) that the noise does not cover. The price: a cluster with a share s
of the round's clients steps s times its members' mean (small clusters move
slowly), with noise z·C/m on every cluster, small or large. Privatising the
counts instead (their own noise, composed into z as the adaptive count is)
would divide a small cluster's noisy sum by a noisy count near 0 or below
(clamped to 1), a step that the noise alone dominates.

Adaptive clipping (Andrew, Thakkar, McMahan, Ramaswamy, "Differentially
Private Learning with Adaptive Clipping", NeurIPS 2021, Algorithm 1): the
server counts the updates that were not clipped (b_k = 1 where ‖Δ_k‖ ≤ C),
adds Gaussian noise σ_b to the count, and moves the bound geometrically
toward the target quantile γ: C ← C·exp(−η_C (b̄ − γ)), b̄ = noisy count / m
(m the clients planned this round). The count's noise spends privacy too:
the updates' noise multiplier is z_Δ = (z⁻² − (2σ_b)⁻²)^(−1/2), so that the
two together are one Gaussian mechanism of multiplier z (the paper's
Theorem 1). The server reads b_k from the clipped update's norm (a clipped
update's norm is C, to rounding): a client sends nothing more.

What is private: one ε at δ covers each client's whole participation, from
Opacus' accountant (`dp.accountant`: "rdp" at its default orders, or "prv")
over the rounds at the largest client sampling rate a round can have (as
Poisson sampling: docs/privacy.md says what that assumes). Opacus ships the
accountant and the planner; it has no DP-FedAvg, so the clipping, the noise
and the bound's update are written here (tests/test_client_dp.py holds them
to the papers' formulas and the noise to its planned standard deviation).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypedDict

import numpy as np

from clusterfed.algorithms import ClientUpdate, ClusterSums
from clusterfed.protocol import TrainConfig
from clusterfed.seeding import derive_seed
from clusterfed.types import ClusterId

from .privacy import epsilon_of
from .round import UpdateLimits

NOISE_STREAM = 11
"""The server's noise stream of client-level DP: (seed, NOISE_STREAM, round)."""
COUNT_NOISE_COST = 1.1
"""The most the default count noise may raise the updates' multiplier:
z_Δ ≤ 1.1·z (`default_count_noise`)."""
CLIPPED_TOLERANCE = 1e-5
"""How far under C (relatively) a clipped update's norm may fall by float32
rounding and still count as clipped."""


@dataclass(frozen=True)
class ClientDPPlan:
    """What a run's client-level DP is planned at (`RunPlan.client_dp`).

    Attributes:
        epsilon, delta: the budget.
        noise_multiplier: z, the whole mechanism's (the updates' and, with
            adaptive clipping, the count's together).
        sample_rate: q, the largest share of the clients that trains a
            round, over every size the run's pool can take
            (scenarios/privacy.py).
        rounds: the rounds the budget covers.
        clip_norm: C, the bound (its start with adaptive clipping).
        adaptive: whether C follows the target quantile.
        target_quantile, clip_lr: γ and η_C of the bound's update.
        count_noise: σ_b, the count's noise (adaptive clipping).
        seed: the run's seed, whose stream the noise is drawn from.
        accountant: Opacus' accountant that planned z and keeps the books
            ("rdp" or "prv").
    """

    epsilon: float
    delta: float
    noise_multiplier: float
    sample_rate: float
    rounds: int
    clip_norm: float
    adaptive: bool = False
    target_quantile: float = 0.5
    clip_lr: float = 0.2
    count_noise: float = 1.0
    seed: int = 0
    accountant: str = "rdp"

    @property
    def update_noise_multiplier(self) -> float:
        """z_Δ: the updates' own multiplier, z less what the count spends."""
        if not self.adaptive:
            return self.noise_multiplier
        return update_multiplier(self.noise_multiplier, self.count_noise)


class ClientDPSnapshot(TypedDict):
    """What a resumed run needs of client-level DP."""

    clip_norm: float
    rounds_done: int


def default_count_noise(z: float, per_round: int) -> float:
    """σ_b when the scenario names none: Andrew et al.'s m/20 (m the clients
    a round), raised where that is too small for z to `COUNT_NOISE_COST`'s
    σ_b, so the updates' multiplier z_Δ stays within 10 % of z.

    m/20 gives the unclipped share b̄ a noise of std 0.05; at the paper's
    scale (hundreds of clients a round, z near 1) it costs the updates well
    under 10 % more noise. At 20 clients a round it is 1, and z_Δ has no
    value for z ≥ 2 (ε = 10 over 30 rounds without sampling plans z = 2.9).
    """
    return max(per_round / 20, count_noise_for(z, COUNT_NOISE_COST))


def count_noise_for(z: float, cost: float) -> float:
    """The σ_b at which z_Δ = `cost`·z: (2σ_b)⁻² = z⁻²(1 − cost⁻²)."""
    return z / (2 * math.sqrt(1 - cost**-2))


def update_multiplier(z: float, count_noise: float) -> float:
    """z_Δ = (z⁻² − (2σ_b)⁻²)^(−1/2) (Andrew et al., Theorem 1).

    Raises:
        ValueError: σ_b too small for z (2σ_b ≤ z): the count alone would
            spend more than the whole budget allows.
    """
    if not 2 * count_noise > z:
        raise ValueError(
            f"count noise σ_b = {count_noise:g} is too small for the noise"
            f" multiplier z = {z:.4g}: adaptive clipping needs 2σ_b > z"
        )
    return float((z**-2 - (2 * count_noise) ** -2) ** -0.5)


def clip(delta: np.ndarray, bound: float) -> np.ndarray:
    """`delta` scaled down to L2 norm `bound` if longer (float32)."""
    norm = float(np.linalg.norm(delta.astype(np.float64)))
    if norm <= bound:
        return delta
    return (delta * np.float32(bound / norm)).astype(np.float32)


def next_bound(
    bound: float, unclipped: float, planned: int, quantile: float, lr: float
) -> float:
    """C·exp(−η_C (b̄ − γ)) with b̄ = `unclipped` (the noisy count) / the
    clients `planned` (Andrew et al., Algorithm 1's geometric update)."""
    share = unclipped / max(planned, 1)
    return bound * math.exp(-lr * (share - quantile))


class ClientLevelDP:
    """The server's part of DP-FedAvg for one run: the bound, the noise, the
    books."""

    def __init__(self, plan: ClientDPPlan) -> None:
        self.plan = plan
        self.clip_norm = plan.clip_norm
        self.rounds_done = 0

    def bound(self) -> float:
        """The norm a delta may have this round (C, with float32 slack)."""
        return self.clip_norm * (1 + CLIPPED_TOLERANCE)

    def settings(
        self, config: TrainConfig, limits: UpdateLimits
    ) -> tuple[TrainConfig, UpdateLimits]:
        """This round's task settings (the clients clip to C) and update
        limits (a delta longer than C is refused, or than the scenario's
        `max_update_norm` where that is smaller)."""
        bound = self.bound()
        if limits.max_update_norm is not None:
            bound = min(bound, limits.max_update_norm)
        return (
            config.model_copy(update={"clip_norm": self.clip_norm}),
            replace(limits, max_update_norm=bound),
        )

    @staticmethod
    def equal_weights(
        weight: Callable[[ClientUpdate], float], norms: list[float]
    ) -> Callable[[ClientUpdate], float]:
        """A fold weight of 1 for each update `weight` counts (DP-FedAvg's
        equal weights, which bound one client's share of the sum by C), its
        norm noted in `norms`."""

        def equal(update: ClientUpdate) -> float:
            if weight(update) <= 0:  # not a member of its cluster's mean
                return 0.0
            assert update.delta is not None  # folded updates carry one
            norms.append(float(np.linalg.norm(update.delta.astype(np.float64))))
            return 1.0

        return equal

    def noise(
        self,
        sums: ClusterSums,
        models: Mapping[ClusterId, np.ndarray],
        planned: int,
        round: int,
    ) -> list[float]:
        """Release `sums`: N(0, (z_Δ·C)²) on every coordinate of every
        cluster model's sum, one a round's updates missed included, from the
        run's noise stream of `round`, each mean over the `planned` clients
        of the round (public), not its true count; returns each sum's noise
        std. A round that planned nobody releases nothing (no step)."""
        if planned == 0:
            return []
        rng = np.random.default_rng(derive_seed(self.plan.seed, NOISE_STREAM, round))
        std = self.plan.update_noise_multiplier * self.clip_norm
        drawn = {
            cluster: rng.normal(0.0, std, size=(models[cluster].shape[0],))
            for cluster in sorted(models)
        }
        sums.release(drawn, planned)
        return [std] * len(drawn)

    def close_round(self, norms: Sequence[float], planned: int, round: int) -> None:
        """Count the round in the books; with adaptive clipping, move C by
        the noisy count of the updates `norms` says were not clipped."""
        self.rounds_done += 1
        if not self.plan.adaptive:
            return
        unclipped = sum(n < self.clip_norm * (1 - CLIPPED_TOLERANCE) for n in norms)
        rng = np.random.default_rng(derive_seed(self.plan.seed, NOISE_STREAM, round, 1))
        noisy = unclipped + float(rng.normal(0.0, self.plan.count_noise))
        self.clip_norm = next_bound(
            self.clip_norm,
            noisy,
            planned,
            self.plan.target_quantile,
            self.plan.clip_lr,
        )

    def spent(self) -> float:
        """ε spent so far at the plan's δ: the plan's Opacus accountant, one
        step a round at the client sampling rate with multiplier z."""
        if self.rounds_done == 0:
            return 0.0
        history = (
            (self.plan.noise_multiplier, self.plan.sample_rate, self.rounds_done),
        )
        return epsilon_of(self.plan.accountant, history, self.plan.delta)

    def summary(self) -> dict[str, Any]:
        """summary.json's `privacy` of a client-level DP run: the plan and
        the books."""
        plan = self.plan
        return {
            "mechanism": "client",
            "epsilon": plan.epsilon,
            "delta": plan.delta,
            "accountant": plan.accountant,
            "noise_multiplier": plan.noise_multiplier,
            "update_noise_multiplier": plan.update_noise_multiplier,
            "sample_rate": plan.sample_rate,
            "planned_rounds": plan.rounds,
            "clipping": "adaptive" if plan.adaptive else "fixed",
            "clip_norm_start": plan.clip_norm,
            "clip_norm_end": self.clip_norm,
            "rounds": self.rounds_done,
            "epsilon_spent": self.spent(),
        }

    def snapshot(self) -> ClientDPSnapshot:
        return {"clip_norm": self.clip_norm, "rounds_done": self.rounds_done}

    def restore(self, snapshot: ClientDPSnapshot) -> None:
        self.clip_norm = float(snapshot["clip_norm"])
        self.rounds_done = int(snapshot["rounds_done"])
