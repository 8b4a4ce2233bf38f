"""The Byzantine benchmark's layout (bench/byzantine.py, issue 37): the
FLANDERS baseline's in Flower's repository (adap/flower, baselines/flanders):
100 Fashion-MNIST clients, all of them every round, 50 rounds, Dirichlet(0.5)
label skew, an MLP, 20 % of the clients Byzantine.

The training recipe is the clustered benchmark's (scenarios/benchmark.py:
1 local epoch of SGD, lr 0.05, momentum 0.9, batch 32, the MLP 512-128), not
FLANDERS' own: its published figures stand beside ours on the page as a
reference, not as the same run.
"""

from __future__ import annotations

from clusterfed.protocol import TrainConfig

from .faults import Faulty
from .partitions import DirichletPartition
from .spec import DatasetSpec, ModelSpec, Scenario

CLIENTS = 100
ROUNDS = 50
# Every fifth client (4, 9, ..., 99): 20 % of them, spread over the
# Dirichlet draw rather than its first clients.
ATTACKERS = list(range(4, CLIENTS, 5))


def byzantine_fmnist() -> Scenario:
    """FLANDERS' layout on Fashion-MNIST: 100 clients all sampled, 50 rounds,
    Dirichlet(0.5), the MLP 512-128, 20 of the clients (every fifth) sign
    flippers; --set faulty=alie (ipm, minmax, ...) and --set aggregator=...
    choose the attack and the defence (bench/byzantine.py runs them all).
    Fashion-MNIST is one of the paper's own datasets (FLANDERS' table).
    Departures: the clustered benchmark's training recipe (1 local epoch of
    SGD at lr 0.05, momentum 0.9, batch 32), not FLANDERS' own."""
    return Scenario(
        name="byzantine-fmnist",
        description=byzantine_fmnist.__doc__ or "",
        dataset=DatasetSpec(name="fashion_mnist"),
        partition=DirichletPartition(alpha=0.5),
        model=ModelSpec(name="mlp", hidden=[512, 128]),
        algorithm="fedavg",
        train=TrainConfig(lr=0.05, momentum=0.9, batch_size=32, epochs=1),
        clients=CLIENTS,
        rounds=ROUNDS,
        faulty=[Faulty(clients=ATTACKERS, behaviour="sign_flip")],
    )
