"""FedDrift's client policy (`feddrift.py` is the server's part): score every
model the task offers by its mean loss on the client's current training
data, train the lowest, and send all the scores back.

Jothimurugesan, Hsieh, Wang, Joshi, Gibbons, "Federated Learning under
Distributed Concept Drift", AISTATS 2023 (arXiv:2206.00799).

The scores are what the server detects drift from (the client's loss on the
best model against its loss one time step before) and what it measures the
loss distance between clusters with (each cluster's loss under every other
cluster's model, from its members' scores).
"""

from __future__ import annotations

from .base import LossReportingPolicy


class FedDriftPolicy(LossReportingPolicy):
    """FedDrift's client: every offered model's mean training loss, measured
    before training and reported (`UpdateReply.losses`); it trains the model
    of the lowest (ties: the first), even when only one is offered."""

    name = "feddrift"
