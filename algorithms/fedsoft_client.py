"""FedSoft's client policy (`fedsoft.py` is the server's part): the
importance weights u_{ks} from which center fits each of the client's
samples best, and the proximal coefficients λ·u_{ks} its local solve pulls
toward each center with.

Ruan, Joe-Wong, "FedSoft: Soft Clustered Federated Learning with Proximal
Local Updating", AAAI 2022 (arXiv:2112.06053), Algorithm 1.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .base import Candidate, ImportancePolicy, SampleLossProbe


class FedSoftPolicy(ImportancePolicy):
    """FedSoft's client: u_{ks} from which center fits each sample best, and
    the proximal coefficients λ·u_{ks}.

    Args:
        smoother: σ, the least weight a center gets (the code's
            `count_smoother`, 10⁻⁴), in [0, 1/S] for S candidates.
        lam: λ, the proximal coefficient (the code's `reg_weight`, 0.1).
    """

    name = "fedsoft"

    def __init__(self, *, smoother: float = 1e-4, lam: float = 0.1) -> None:
        self.smoother = check_smoother(smoother)
        self.lam = check_lam(lam)

    def importance(
        self, probe: SampleLossProbe, candidates: Sequence[Candidate]
    ) -> tuple[float, ...]:
        losses = np.stack([probe.sample_losses(c.weights) for c in candidates])
        return importance_weights(losses, self.smoother)

    def proximal(self, importance: Sequence[float]) -> tuple[float, ...]:
        return tuple(self.lam * u for u in importance)


def importance_weights(losses: np.ndarray, smoother: float) -> tuple[float, ...]:
    """u_s = max(n_s / n, σ), normalised to sum to 1, where n_s counts the
    samples (columns of `losses`, one row per center) whose lowest loss is
    center s's (ties: the lowest row).

    Raises:
        ValueError: `losses` is not a non-empty (centers, samples) array of
            finite values, or σ is outside [0, 1/S].
    """
    if losses.ndim != 2 or 0 in losses.shape:
        raise ValueError(f"losses must be (centers, samples), got {losses.shape}")
    if not np.isfinite(losses).all():
        raise ValueError("losses hold non-finite values")
    n_centers, n_samples = losses.shape
    if not 0 <= smoother <= 1 / n_centers:
        raise ValueError(f"smoother must be in [0, 1/{n_centers}], got {smoother}")
    counts = np.bincount(np.argmin(losses, axis=0), minlength=n_centers)
    shares = np.maximum(counts / n_samples, smoother)
    return tuple(float(u) for u in shares / shares.sum())


def check_smoother(smoother: float) -> float:
    if isinstance(smoother, bool) or not 0 <= smoother < 1:
        raise ValueError(f"smoother must be in [0, 1), got {smoother!r}")
    return float(smoother)


def check_lam(lam: float) -> float:
    if isinstance(lam, bool) or not (0 <= lam < float("inf")):
        raise ValueError(f"lam must be a finite number >= 0, got {lam!r}")
    return float(lam)
