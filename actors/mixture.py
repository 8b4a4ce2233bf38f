"""How a client scores a mixture of models (FedEM's personalised model): the
prediction is Σ_m π_m softmax(h_m(x)), its loss the negative log of the
true class's probability under it.

The log-probability is computed as logsumexp over m of log π_m +
log_softmax(h_m(x)): the authors' code (`LearnersEnsemble.evaluate_iterator`)
sums the softmaxes and takes their log, which is the same number without the
underflow of a tiny probability to log 0.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from clusterfed.models import set_flat

from .trainer import EvalResult, LocalTrainer

Component = tuple[np.ndarray, float]
"""One model of a mixture (flat weights) and its weight π_m."""


@torch.no_grad()
def mixture_log_probs(
    model: nn.Module, x: torch.Tensor, components: Sequence[Component]
) -> torch.Tensor:
    """log Σ_m π_m softmax(h_m(x)), one row per sample (`model` is the
    architecture, loaded with each component's weights in turn). A component
    of weight 0 adds nothing.

    Raises:
        ValueError: no component, or a weight that is negative or not finite,
            or weights that do not sum to a positive number.
    """
    if not components:
        raise ValueError("a mixture needs at least one model")
    shares = np.array([share for _, share in components], dtype=np.float64)
    if not np.isfinite(shares).all() or (shares < 0).any() or not shares.sum() > 0:
        raise ValueError(f"mixture weights {tuple(shares)} are not a distribution")
    model.eval()
    parts = []
    for weights, share in components:
        if share == 0:
            continue
        set_flat(model, weights)
        parts.append(F.log_softmax(model(x), dim=1) + float(np.log(share)))
    return torch.logsumexp(torch.stack(parts), dim=0)


def scores(log_probs: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """Accuracy and mean negative log-likelihood of `log_probs` on labels `y`."""
    loss = F.nll_loss(log_probs, y).item()
    correct = (log_probs.argmax(dim=1) == y).sum().item()
    return correct / len(y), loss


def evaluate(
    trainer: LocalTrainer, components: Sequence[Component]
) -> tuple[EvalResult, EvalResult | None]:
    """A mixture's accuracy and mean loss on the client's held-out split, and
    on its test set where it has one (None otherwise)."""

    def result(x: torch.Tensor, y: torch.Tensor) -> EvalResult:
        accuracy, loss = scores(mixture_log_probs(trainer.model, x, components), y)
        return EvalResult(accuracy, loss, len(y))

    held_out = result(trainer.x_test, trainer.y_test)
    tested = trainer.test_set
    return held_out, None if tested is None else result(*tested)
