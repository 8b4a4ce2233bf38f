"""FedEM's client policy (`fedem.py` is the server's part): the E-step that
gives each training sample its weight in each component's loss, from the
client's mixture weights and the components' losses on the sample.

Marfoq, Neglia, Bellet, Kameni, Vidal, "Federated Multi-Task Learning under a
Mixture of Distributions", NeurIPS 2021 (arXiv:2108.10252), Algorithm 2
(the local update): q(zᵢ = m) ∝ π_m · exp(−ℓ(h_{θ_m}(xᵢ), yᵢ)), then
π_m = mean over i of q(zᵢ = m), then each component trained on its
q-weighted loss.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.special import softmax

from .base import Candidate, MixturePolicy, SampleLossProbe


class FedEMPolicy(MixturePolicy):
    """FedEM's client: the E-step's responsibilities of every component for
    every training sample. It has no parameters: the mixture weights come
    with each task."""

    name = "fedem"

    def responsibilities(
        self,
        probe: SampleLossProbe,
        candidates: Sequence[Candidate],
        mixture: Sequence[float],
    ) -> np.ndarray:
        losses = np.stack([probe.sample_losses(c.weights) for c in candidates])
        return responsibilities(losses, mixture)


def responsibilities(losses: np.ndarray, mixture: Sequence[float]) -> np.ndarray:
    """q[m, i] = π_m e^{−ℓ[m, i]} / Σ_j π_j e^{−ℓ[j, i]}: the softmax over the
    components of log π_m − ℓ[m, i], as the authors' code computes it
    (`MixtureClient.update_sample_weights`). A component of weight 0 gets
    weight 0 on every sample.

    Raises:
        ValueError: `losses` is not a non-empty (components, samples) array
            of finite values, or `mixture` is not one weight ≥ 0 per
            component with a positive sum.
    """
    if losses.ndim != 2 or 0 in losses.shape:
        raise ValueError(f"losses must be (components, samples), got {losses.shape}")
    if not np.isfinite(losses).all():
        raise ValueError("losses hold non-finite values")
    pi = np.asarray(mixture, dtype=np.float64)
    if pi.shape != (losses.shape[0],) or (pi < 0).any() or not pi.sum() > 0:
        raise ValueError(
            f"mixture weights {tuple(mixture)} do not fit {losses.shape[0]} components"
        )
    with np.errstate(divide="ignore"):  # log 0 = −inf: that component's q is 0
        log_pi = np.log(pi)
    q: np.ndarray = softmax(log_pi[:, None] - losses, axis=0)
    return q
