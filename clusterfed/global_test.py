"""The server's one model on the dataset's own test split (`global_acc`).

Clients score the model they hold on their own held-out samples (`acc`).
Where the server holds a single model (FedAvg, FedProx, FedAsync, FedBuff,
CAFA; CFL and FedAC until they split), the papers also report that model's
accuracy on the dataset's test split; so does every row here, for datasets
that have one. The test images are as the dataset ships them: no client's
transform (rotation, label permutation) is applied.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import nn

from clusterfed.actors.backdoor import BackdoorTest, held_out
from clusterfed.actors.privacy import private_model
from clusterfed.actors.spec import ClientSpec
from clusterfed.data.datasets import Dataset, load_test_split
from clusterfed.models import build_model, set_flat
from clusterfed.scenarios import Scenario
from clusterfed.types import ClusterId

_BATCH = 4096  # images per forward pass: bounded memory for any test split


class GlobalTest:
    """Scores a run's single model on its dataset's test split."""

    def __init__(self, scenario: Scenario, data: Dataset) -> None:
        self.test = load_test_split(scenario.dataset.name, scenario.dataset.root)
        self.net: torch.nn.Module | None = None
        if self.test is None:
            return
        if self.test.input_shape != data.input_shape:
            raise ValueError(
                f"{scenario.dataset.name}: test images {self.test.input_shape}"
                f" differ from training images {data.input_shape}"
            )
        net = build_model(
            scenario.model.name,
            data.input_shape,
            data.n_classes,
            **scenario.model.params,
        )
        self.net = as_clients_train(net, scenario)

    def accuracy(self, models: Mapping[ClusterId, np.ndarray]) -> float | None:
        """Accuracy of the one model in `models`; None when there are several
        (clusters) or the dataset has no test split."""
        if self.net is None or self.test is None or len(models) != 1:
            return None
        (weights,) = models.values()
        set_flat(self.net, weights)
        self.net.eval()
        correct = 0
        with torch.no_grad():
            for start in range(0, len(self.test), _BATCH):
                x = self.test.x[start : start + _BATCH]
                y = self.test.y[start : start + _BATCH]
                correct += int((self.net(x).argmax(dim=1) == y).sum())
        return correct / len(self.test)


def backdoor_test(
    scenario: Scenario, data: Dataset, specs: Sequence[ClientSpec]
) -> BackdoorTest | None:
    """The run's backdoor measure (`actors/backdoor.py`), where a `faulty`
    entry is a backdoor or the scenario has a `backdoor_probe`: on the
    dataset's test split, or where it has none on the held-out samples of
    the clients that are not faulty."""
    backdoors = (f for f in scenario.faulty if f.behaviour == "backdoor")
    plan = next(backdoors, scenario.backdoor_probe)
    if plan is None:
        return None
    test = load_test_split(scenario.dataset.name, scenario.dataset.root)
    if test is not None:
        images, labels = test.x, test.y
    else:
        faulty = {c for f in scenario.faulty for c in f.ids}
        indices = [i for s in specs if s.id not in faulty for i in s.test]
        images, labels = held_out(data.x, data.y, indices)
    net = build_model(
        scenario.model.name, data.input_shape, data.n_classes, **scenario.model.params
    )
    net = as_clients_train(net, scenario)
    return BackdoorTest(net, images, labels, plan.target, plan.trigger)


def as_clients_train(net: nn.Module, scenario: Scenario) -> nn.Module:
    """`net` with the modules the clients train: DP-SGD (`dp.mechanism =
    "sample"`) fixes some, in the same weight layout; other runs none."""
    private = scenario.dp is not None and scenario.dp.mechanism == "sample"
    return private_model(net) if private else net
