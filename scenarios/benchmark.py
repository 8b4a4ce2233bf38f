"""The clustered-FL benchmark's four settings (bench/benchmark.py, issue 36).

Every clustered algorithm, FedAvg and FedProx run on the same four
Fashion-MNIST settings with the same clients, rounds and training budget:
40 clients (about 1,500 training images each), 40 rounds, 1 local epoch of
SGD (lr 0.05, momentum 0.9, batch 32), the MLP 512-128, every client in
every round. Algorithms that are told how many clusters to find are told
the planted number (4; 2 in the drift setting, where there are two
concepts after the drift; 4 without planted groups, an arbitrary choice).
FedEM keeps its code's M = 3 on every setting: its components are the
parts of a mixture every client holds, not clusters to find.
"""

from __future__ import annotations

from typing import Any

from clusterfed.protocol import TrainConfig

from .events import Drift
from .partitions import ClassTablePartition, DirichletPartition, IIDPartition
from .spec import DatasetSpec, ModelSpec, Scenario
from .transforms import RotationTransform

CLIENTS = 40
ROUNDS = 40
TRAIN = TrainConfig(lr=0.05, momentum=0.9, batch_size=32, epochs=1)
# The number-of-clusters parameter of each algorithm that takes one, and the
# settings an algorithm gets on every setting (CFL's thresholds relative to
# its warm-up update norm, as on the paper-scale page).
_K_PARAMETERS = {
    "ifca": "clusters",
    "fesem": "clusters",
    "gradloss": "clusters",
    "fedsoft": "clusters",
}
# PACFL's angle threshold for 28x28 images: its digits default (7 degrees)
# merges Fashion-MNIST's groups; 2.5 degrees is what pacfl-labels-fmnist
# measured between its planted groups (within under 2.1, across over 2.9).
_FIXED: dict[str, dict[str, Any]] = {
    "cfl": {"thresholds": "relative"},
    "pacfl": {"threshold": 2.5},
}
# Label-skew groups: each group of clients holds 2-3 classes of its own.
LABEL_GROUPS = ((0, 1, 2), (3, 4, 5), (6, 7), (8, 9))
# The drift setting's concept change: every label y is read as y XOR 1
# (0<->1, 2<->3, ...), for a third of the clients from round DRIFT_ROUND on.
DRIFT_ROUND = 20
DRIFTED = tuple(range(0, CLIENTS, 3))  # 14 of the 40 clients
SWAP = [y ^ 1 for y in range(10)]


def _params(k: int) -> dict[str, dict[str, Any]]:
    params = {name: {key: k} for name, key in _K_PARAMETERS.items()}
    return {**params, **_FIXED}


def _setting(name: str, what: str, k: int, **changes: Any) -> Scenario:
    return Scenario(
        name=name,
        description=(
            f"Clustered-FL benchmark, {what}. 40 Fashion-MNIST clients, 40 rounds,"
            " 1 local epoch (lr 0.05, momentum 0.9, batch 32), the MLP 512-128,"
            f" every client every round; algorithms that take a number of clusters"
            f" are told {k}. Run every algorithm on it with bench/benchmark.py."
        ),
        dataset=DatasetSpec(name="fashion_mnist"),
        model=ModelSpec(name="mlp", hidden=[512, 128]),
        algorithm="fedavg",
        algorithm_params=_params(k),
        train=TRAIN,
        clients=CLIENTS,
        rounds=ROUNDS,
        **changes,
    )


def rotations() -> Scenario:
    """Benchmark: four planted rotations (0/90/180/270) of IID images."""
    return _setting(
        "bench-rotations-fmnist",
        "planted rotations: IID images, each client's rotated by its group's"
        " angle (0/90/180/270), 10 clients a group",
        4,
        partition=IIDPartition(),
        transform=RotationTransform(angles=[0.0, 90.0, 180.0, 270.0]),
    )


def label_groups() -> Scenario:
    """Benchmark: four planted label-skew groups of 2-3 classes each."""
    table = [[1.0 if c in group else 0.0 for c in range(10)] for group in LABEL_GROUPS]
    return _setting(
        "bench-label-groups-fmnist",
        "label-skew groups: 4 planted groups of 10 clients; the clients of a"
        " group hold the same 2-3 classes (0-2, 3-5, 6-7, 8-9)",
        4,
        partition=ClassTablePartition(table=table),
    )


def dirichlet() -> Scenario:
    """Benchmark: Dirichlet(0.1) label skew, no planted groups."""
    return _setting(
        "bench-dirichlet-fmnist",
        "Dirichlet(0.1) label skew without planted groups (no ARI or purity:"
        " there is no ground truth)",
        4,
        partition=DirichletPartition(alpha=0.1),
    )


def drift() -> Scenario:
    """Benchmark: concept drift, a label swap for a third of the clients at round 20."""
    return _setting(
        "bench-drift-fmnist",
        "concept drift: IID images; from round 20 a third of the clients (14 of"
        " 40) read every label y as y XOR 1 (0<->1, 2<->3, ...), a second"
        " concept for the same images",
        2,
        partition=IIDPartition(),
        events=[Drift(start=DRIFT_ROUND, target=list(DRIFTED), label_permutation=SWAP)],
    )


# Setting → its scenario (builtin.py names each too, by the scenario's name).
SETTINGS = {
    "rotations": rotations,
    "label-groups": label_groups,
    "dirichlet": dirichlet,
    "drift": drift,
}
