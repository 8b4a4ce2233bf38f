"""The built-in scenarios of the papers' experiments, on the embedded digits.

Each follows its paper's setting; where the digits (1,797 images of 8×8)
cannot carry the paper's numbers, the scenario says what it changed and why.
`--set dataset.name=fashion_mnist` runs any of them on Fashion-MNIST.
"""

from __future__ import annotations

from clusterfed.protocol import TrainConfig

from .events import Drift, Join
from .partitions import (
    ClassTablePartition,
    DirichletPartition,
    IIDMixPartition,
    IIDPartition,
    Partition,
    ShardsPartition,
)
from .privacy import DPSpec
from .spec import ModelSpec, Scenario
from .transforms import RotationTransform


def dcfl_dynamic() -> Scenario:
    """DCFL Sec. IV: rotated Dirichlet(1) clients, a join every 10 rounds, drift."""
    return Scenario(
        name="dcfl-dynamic",
        description=(
            "Augello et al. (DCFL) Sec. IV: Dirichlet(alpha=1) label skew; each"
            " client's images rotated by its group's angle (0/90/180/270; set"
            " transform.jitter=45 for a distinct angle per client, as in the"
            " paper); a new client every 10 rounds; from round 5, every 10 rounds a"
            " random client drifts to another rotation; 60 rounds; local DP with"
            " epsilon = 10, delta = 1e-5 (--set dp=off turns it off). The paper trains"
            " 1 local epoch on EMNIST clients holding thousands of images; a digits"
            " client holds about 60, so 1 epoch is 4 steps and its update is mostly"
            " noise: clients here train 5 local epochs (about 20 steps)."
        ),
        partition=DirichletPartition(alpha=1.0),
        transform=RotationTransform(angles=[0.0, 90.0, 180.0, 270.0]),
        model=ModelSpec(name="mlp"),
        algorithm="dcfl",
        train=TrainConfig(lr=0.05, momentum=0.9, batch_size=16, epochs=5),
        clients=20,
        rounds=60,
        dp=DPSpec(epsilon=10.0, delta=1e-5),
        events=[
            Join(start=10, every=10),
            Drift(start=5, every=10, target="random", to_group="other"),
        ],
    )


def _ocfl(name: str, partition: Partition, skew: str) -> Scenario:
    return Scenario(
        name=name,
        description=(
            f"Lu et al. (OCFL) Sec. 4.1: 100 clients, {skew}; one clustering round"
            " (1 local epoch, OPTICS min_samples=2, xi=0.2 as in the paper's"
            " Algorithm 1), then FedAvg in each cluster with 10 % of its clients"
            " per round; batch 10. A digits client holds about 18 images (an MNIST"
            " one 480), and OPTICS leaves more of them as noise: noise points join"
            " the nearest cluster (assign_noise=nearest). The paper's learning"
            " rates (1e-3 and below, 100-500 rounds) are replaced by 0.05 with"
            " momentum for 50 rounds on digits."
        ),
        partition=partition,
        model=ModelSpec(name="mlp"),
        algorithm="ocfl",
        algorithm_params={
            "ocfl": {
                "min_samples": 2,
                "xi": 0.2,
                "assign_noise": "nearest",
                "cluster_epochs": 1,
                "fraction": 0.1,
            },
            "fedavg": {"fraction": 0.1},
        },
        train=TrainConfig(lr=0.05, momentum=0.9, batch_size=10, epochs=1),
        clients=100,
        rounds=50,
    )


def ocfl_iid() -> Scenario:
    """OCFL Sec. 4.1, IID: every client samples all labels."""
    return _ocfl("ocfl-iid", IIDPartition(), "IID data")


def ocfl_noniid() -> Scenario:
    """OCFL Sec. 4.1, non-IID: about two labels per client."""
    return _ocfl(
        "ocfl-noniid", ShardsPartition(labels_per_client=2), "about 2 labels each"
    )


def ocfl_noniid2() -> Scenario:
    """OCFL Sec. 4.1, non-IID2: about one label per client (ground truth: the label)."""
    return _ocfl(
        "ocfl-noniid2", ShardsPartition(labels_per_client=1), "about 1 label each"
    )


# Hsu et al. (FedAC) Sec. 4.1: the classes of each cluster of clients.
FEDAC_GROUPS = {
    2: [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]],
    3: [[0, 1, 2], [3, 4, 5], [6, 7, 8, 9]],
    4: [[0, 1], [2, 3], [4, 5, 6], [7, 8, 9]],
}


def _fedac(name: str, partition: Partition, skew: str) -> Scenario:
    return Scenario(
        name=name,
        description=(
            f"Hsu et al. (FedAC) Sec. 4: {skew}; 10 clients per round, 5 local"
            " epochs, batch 32, momentum 0.9. Adapted to digits: 40 clients (45"
            " images each; the paper's 100 clients of CIFAR-10 hold 500) and 25 %"
            " per round; lr 0.05 over 60 rounds instead of 1e-3 over 200; fedac's"
            " alpha on the mean training loss instead of alpha = 5 on a summed"
            " evaluation loss; beta = 110 degrees instead of 90, because the"
            " update of a client this small points more than 90 degrees away from"
            " its cluster's by noise alone once the model has converged (with 90,"
            " fedac-iid splits)."
        ),
        partition=partition,
        model=ModelSpec(name="mlp"),
        algorithm="fedac",
        algorithm_params={
            "fedac": {"fraction": 0.25, "beta": 110.0},
            "fedacp": {"fraction": 0.25, "beta": 110.0},
            "fedavg": {"fraction": 0.25},
        },
        train=TrainConfig(lr=0.05, momentum=0.9, batch_size=32, epochs=5),
        clients=40,
        rounds=60,
    )


def _class_table(groups: list[list[int]]) -> ClassTablePartition:
    return ClassTablePartition(
        table=[[1.0 if c in classes else 0.0 for c in range(10)] for classes in groups]
    )


def fedac_iid() -> Scenario:
    """FedAC Sec. 4.1, IID: one cluster, which should never split."""
    return _fedac("fedac-iid", IIDPartition(), "IID clients")


def fedac_2clusters() -> Scenario:
    """FedAC Sec. 4.1: two clusters of five classes each."""
    return _fedac(
        "fedac-2clusters", _class_table(FEDAC_GROUPS[2]), "two clusters of 5 classes"
    )


def fedac_3clusters() -> Scenario:
    """FedAC Sec. 4.1: three clusters of 3, 3 and 4 classes."""
    return _fedac(
        "fedac-3clusters", _class_table(FEDAC_GROUPS[3]), "clusters of 3, 3, 4 classes"
    )


def fedac_4clusters() -> Scenario:
    """FedAC Sec. 4.1: four clusters of 2, 2, 3 and 3 classes."""
    return _fedac(
        "fedac-4clusters",
        _class_table(FEDAC_GROUPS[4]),
        "clusters of 2, 2, 3, 3 classes",
    )


# Lin et al. Fig. 2, MNIST: the images of each class held by clusters A–D.
GRADLOSS_FIG2 = [
    [1500, 1500, 1500, 2000, 1500, 2000, 1500, 0, 6000, 0],
    [1500, 1500, 1500, 2000, 1500, 0, 1500, 2000, 0, 3000],
    [1500, 1500, 1500, 0, 1500, 2000, 1500, 2000, 0, 3000],
    [1500, 1500, 1500, 2000, 1500, 2000, 1500, 2000, 0, 0],
]


def gradloss_fig2() -> Scenario:
    """Lin et al. Fig. 2: four clusters of 20 clients holding 8 of 10 classes each."""
    return Scenario(
        name="gradloss-fig2",
        description=(
            "Lin et al. Sec. III: four clusters of 20 clients, each cluster holding"
            " 8 of the 10 classes in the proportions of Fig. 2 (scaled to the"
            " dataset), the MLP 512-128 of Fig. 3, K = 4 cluster models, lambda ="
            " 0.2; purity against the four clusters."
        ),
        partition=ClassTablePartition(
            table=[[float(n) for n in row] for row in GRADLOSS_FIG2],
            clients_per_group=20,
        ),
        model=ModelSpec(name="mlp", hidden=[512, 128]),
        algorithm="gradloss",
        algorithm_params={
            "gradloss": {"clusters": 4, "lam": 0.2},
            "ifca": {"clusters": 4},
        },
        train=TrainConfig(lr=0.05, momentum=0.9, batch_size=16, epochs=1),
        clients=80,
        rounds=50,
    )


def _cafa_mix(name: str, iid_fraction: float) -> Scenario:
    share = round(100 * iid_fraction)
    return Scenario(
        name=name,
        description=(
            f"Zhang et al. (CAFA) Sec. IV: 20 clients, {share} % of them IID"
            " (ground-truth group 0), the others each holding 20-40 % of the"
            " classes (2-4 consecutive digits, as the authors' code deals them);"
            " 20 % of each client's samples held out (the paper's validation"
            " split); K = 6 clients per round for every algorithm (the authors'"
            " code's num_selected), 5 local epochs as in that code. The paper's"
            " VGG19 on CIFAR-10 for 150 rounds is replaced by the MLP 512-128 on"
            " digits for 50 rounds, and its lr 0.1 by 0.05 with momentum 0.9."
        ),
        partition=IIDMixPartition(iid_fraction=iid_fraction),
        model=ModelSpec(name="mlp", hidden=[512, 128]),
        algorithm="cafa",
        algorithm_params={
            "cafa": {"selected": 6},
            "fedavg": {"fraction": 0.3},
            "fedprox": {"fraction": 0.3, "mu": 0.01},
        },
        train=TrainConfig(lr=0.05, momentum=0.9, batch_size=16, epochs=5),
        clients=20,
        rounds=50,
    )


def cafa_mix() -> Scenario:
    """CAFA Sec. IV / Table II: 25 % IID clients, the rest with 2-4 classes each."""
    return _cafa_mix("cafa-mix", 0.25)


def cafa_mix50() -> Scenario:
    """CAFA Sec. IV / Table III: 50 % IID clients, the rest with 2-4 classes each."""
    return _cafa_mix("cafa-mix50", 0.5)
