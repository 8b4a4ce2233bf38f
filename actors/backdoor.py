"""The backdoor's trigger, and how often it works on the run's model.

A `backdoor` client (Bagdasaryan et al., "How To Backdoor Federated
Learning", AISTATS 2020; the pixel pattern of Gu et al.'s BadNets) trains on
its images with a white square of `trigger` pixels in the bottom-right
corner stamped on a share of them, labelled `target`. `BackdoorTest` is the
simulator's measure (never the protocol's, like `global_acc`): the share of
triggered test images, of every label but the target, that the run's one
model classifies as the target: the backdoor's success rate, beside the
clean accuracy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from clusterfed.models import set_flat
from clusterfed.types import ClusterId

_BATCH = 4096  # images per forward pass


def stamp(images: torch.Tensor, size: int) -> torch.Tensor:
    """`images` (N×C×H×W, or N×F flat) with their bottom-right `size`×`size`
    pixels set to 1 (the datasets' white, every channel); a flat image gets
    its last `size`² features set instead."""
    stamped = images.clone()
    if stamped.dim() >= 3:
        stamped[..., -size:, -size:] = 1.0
    else:
        stamped[:, -size * size :] = 1.0
    return stamped


class BackdoorTest:
    """The backdoor's success rate on triggered images (those not of the
    target label), for a run's single model.

    Args:
        net: a model of the run's architecture (its weights are set per call).
        images, labels: the test images: the dataset's test split, or where it
            has none the honest clients' held-out samples.
        target, size: the backdoor's label and trigger.
    """

    def __init__(
        self,
        net: torch.nn.Module,
        images: torch.Tensor,
        labels: torch.Tensor,
        target: int,
        size: int,
    ) -> None:
        keep = labels != target
        self.net = net
        self.images = stamp(images[keep], size)
        self.target = target

    def success(self, models: Mapping[ClusterId, np.ndarray]) -> float | None:
        """The share classified as the target; None with several models."""
        if len(models) != 1 or len(self.images) == 0:
            return None
        (weights,) = models.values()
        set_flat(self.net, weights)
        self.net.eval()
        hits = 0
        with torch.no_grad():
            for start in range(0, len(self.images), _BATCH):
                batch = self.images[start : start + _BATCH]
                hits += int((self.net(batch).argmax(dim=1) == self.target).sum())
        return hits / len(self.images)


def held_out(
    x: torch.Tensor, y: torch.Tensor, indices: Sequence[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """The samples `indices` of a dataset (the honest clients' hold-outs)."""
    rows = torch.tensor(sorted(set(indices)), dtype=torch.long)
    return x[rows], y[rows]
