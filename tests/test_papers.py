"""The built-in papers' scenarios: what each description says of the paper's
setting (and of what it changed) holds in the scenario it describes."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from torch import nn

from clusterfed.algorithms import make
from clusterfed.models import build_model
from clusterfed.scenarios import (
    BUILTIN,
    ClassTablePartition,
    Drift,
    IIDPartition,
    Join,
    Scenario,
    ShardsPartition,
    with_overrides,
)
from clusterfed.scenarios.papers_fmnist import WITHOUT_DP
from clusterfed.scenarios.spec import DATASET_SIZES, IIDMixPartition

Check = Callable[[Scenario], object]


def test_every_built_in_is_named_as_it_is_listed() -> None:
    for name, build in BUILTIN.items():
        assert build().name == name


def test_every_algorithm_a_built_in_compares_gets_valid_settings() -> None:
    # the tables of the algorithms it is compared with, not only its own
    for name, build in BUILTIN.items():
        for algorithm, params in build().algorithm_params.items():
            assert make(algorithm, **params).name == algorithm, (name, algorithm)


def hidden_widths(scenario: Scenario) -> list[int]:
    """The MLP's hidden layer widths on the scenario's dataset (28×28 or 8×8)."""
    side = 28 if scenario.dataset.name == "fashion_mnist" else 8
    net = build_model(
        scenario.model.name, (1, side, side), 10, seed=0, **scenario.model.params
    )
    return [m.out_features for m in net.modules() if isinstance(m, nn.Linear)][:-1]


def classes_by_group(scenario: Scenario) -> list[int]:
    assert isinstance(scenario.partition, ClassTablePartition)
    return [int(np.count_nonzero(row)) for row in scenario.partition.table]


def disjoint_and_whole(scenario: Scenario) -> bool:
    """Each class in exactly one group's row."""
    assert isinstance(scenario.partition, ClassTablePartition)
    table = np.asarray(scenario.partition.table)
    return bool(((table > 0).sum(axis=0) == 1).all())


def per_round(scenario: Scenario, algorithm: str) -> float:
    return scenario.clients * scenario.params_of(algorithm)["fraction"]


def train(lr: float, momentum: float, batch: int, epochs: int) -> Check:
    def check(s: Scenario) -> bool:
        t = s.train
        return (t.lr, t.momentum, t.batch_size, t.epochs) == (
            lr,
            momentum,
            batch,
            epochs,
        )

    return check


def dcfl_events(s: Scenario) -> bool:
    return s.events == [
        Join(start=10, every=10),
        Drift(start=5, every=10, target="random", to_group="other"),
    ]


def dp_10(s: Scenario) -> bool:
    return (
        s.dp is not None
        and (s.dp.epsilon, s.dp.delta, s.dp.horizon) == (10.0, 1e-5, "run")
        and with_overrides(s, ["dp=off"]).dp is None
    )


def dirichlet_1(s: Scenario) -> bool:
    return s.partition.kind == "dirichlet" and s.partition.alpha == 1.0


def rotations(jitter: float) -> Check:
    def check(s: Scenario) -> bool:
        t = s.transform
        return (
            t is not None
            and t.kind == "rotation"
            and t.angles == [0.0, 90.0, 180.0, 270.0]
            and t.jitter == jitter
        )

    return check


DCFL: list[tuple[str, Check]] = [
    ("Augello et al. (DCFL)", lambda s: s.algorithm == "dcfl"),
    ("Dirichlet(alpha=1) label skew", dirichlet_1),
    ("a new client every 10 rounds", dcfl_events),
    ("from round 5, every 10 rounds a random client drifts", dcfl_events),
    ("60 rounds", lambda s: s.rounds == 60),
    ("(--set dp=off turns it off)", dp_10),
]


DCFL_FMNIST: list[tuple[str, Check]] = [
    (
        "every 10 rounds a random client drifts to another rotation; 1 local",
        train(0.05, 0.9, 256, 1),
    ),
    (
        "20 clients (about 2,400 training images each)",
        lambda s: (
            DATASET_SIZES["fashion_mnist"] * (1 - s.test_fraction) / s.clients == 2400
        ),
    ),
    (
        "the MLP 512-128, lr 0.05 with momentum 0.9;",
        lambda s: hidden_widths(s) == [512, 128] and train(0.05, 0.9, 256, 1)(s),
    ),
    (
        "CFL splits on thresholds relative to its",
        lambda s: s.params_of("cfl") == {"thresholds": "relative"},
    ),
    ("delta = 1e-5 over the whole run", dp_10),
    (
        "batch 256 and per-sample bound C = 10, chosen by",
        lambda s: (
            s.train.batch_size == 256
            and s.dp is not None
            and (s.dp.mechanism, s.dp.max_grad_norm) == ("sample", 10.0)
        ),
    ),
    (
        "(dp.mechanism = client, DP-FedAvg) clips updates to 0.1,",
        lambda s: s.dp is not None and s.dp.clip_norm == 0.1,
    ),
    (
        "without DP set batch 16, as before the study",
        lambda s: (
            with_overrides(s, list(WITHOUT_DP)).train.batch_size == 16
            and with_overrides(s, list(WITHOUT_DP)).dp is None
        ),
    ),
]


def ocfl(skew: str, partition: Check, xi: float, noise: str) -> list[tuple[str, Check]]:
    def settings(s: Scenario) -> bool:
        params = s.params_of("ocfl")
        return (
            params["min_samples"] == 2
            and params["xi"] == xi
            and params["assign_noise"] == noise
            and params["cluster_epochs"] == 1
            and per_round(s, "ocfl") == per_round(s, "fedavg") == 10
        )

    return [
        ("Lu et al. (OCFL) Sec. 4.1: 100 clients", lambda s: s.clients == 100),
        (f"100 clients, {skew}", partition),
        ("(1 local epoch, OPTICS min_samples=2", settings),
        (f"xi={xi} as in the paper's", settings),
        ("with 10 % of its clients per round", settings),
        ("per round; batch 10", lambda s: s.algorithm == "ocfl"),
    ]


OCFL_NEAREST = [
    (
        "A digits client holds about 18 images",
        lambda s: round(DATASET_SIZES["digits"] / s.clients) == 18,
    ),
    (
        "noise points join the nearest cluster (assign_noise=nearest)",
        lambda s: s.params_of("ocfl")["assign_noise"] == "nearest",
    ),
    ("replaced by 0.05 with", train(0.05, 0.9, 10, 1)),
    (" momentum for 50 rounds on digits.", lambda s: s.rounds == 50),
]
OCFL_SINGLETON = [
    (
        "noise points are clusters of their own",
        lambda s: s.params_of("ocfl")["assign_noise"] == "singleton",
    ),
]
OCFL_TABLE2 = OCFL_SINGLETON + [
    ("batch 10, plain SGD.", train(0.001, 0.0, 10, 1)),
    (
        "Table 2's settings: lr 0.001, 100 rounds.",
        lambda s: s.rounds == 100 and "target_clusters" not in s.params_of("ocfl"),
    ),
]
OCFL_TABLE3 = OCFL_SINGLETON + [
    (
        "Table 3's settings (its Fig. 5): lr 5e-6, 500 rounds, the",
        lambda s: train(5e-6, 0.0, 10, 1)(s) and s.rounds == 500,
    ),
    (
        "clusters OPTICS finds merged into 3 by the cosine similarity",
        lambda s: s.params_of("ocfl")["target_clusters"] == 3,
    ),
]


def iid(s: Scenario) -> bool:
    return s.partition == IIDPartition()


def shards(k: int) -> Check:
    return lambda s: s.partition == ShardsPartition(labels_per_client=k)


def fedac(skew: str, partition: Check, fmnist: bool) -> list[tuple[str, Check]]:
    clients, fraction, beta = (100, 0.1, 90.0) if fmnist else (40, 0.25, 110.0)

    def settings(s: Scenario) -> bool:
        return (
            s.algorithm == "fedac"
            and s.clients == clients
            and all(
                s.params_of(a)["fraction"] == fraction
                for a in ("fedac", "fedacp", "fedavg")
            )
            and s.params_of("fedac")["beta"] == s.params_of("fedacp")["beta"] == beta
        )

    claims: list[tuple[str, Check]] = [
        (f"Hsu et al. (FedAC) Sec. 4: {skew};", partition),
        ("5 local epochs, batch 32, momentum 0.9", train(0.05, 0.9, 32, 5)),
        (f"beta = {beta:g} degrees", settings),
        ("lr 0.05 over 60 rounds", lambda s: s.rounds == 60),
    ]
    if fmnist:
        return claims + [
            (
                "100 clients, 10 of them per round",
                lambda s: settings(s) and per_round(s, "fedac") == 10,
            ),
            (
                "the MLP 512-128 for the paper's CNN",
                lambda s: hidden_widths(s) == [512, 128],
            ),
        ]
    return claims + [
        (
            "Adapted to digits: 40 clients (45",
            lambda s: settings(s) and round(DATASET_SIZES["digits"] / s.clients) == 45,
        ),
        ("and 25 % per round", lambda s: per_round(s, "fedac") == 10),
        ("alpha on the mean training loss instead", settings),
    ]


def groups_of(*sizes: int) -> Check:
    return lambda s: classes_by_group(s) == list(sizes) and disjoint_and_whole(s)


FEDAC_SKEWS = {
    "fedac-iid": ("IID clients", iid),
    "fedac-2clusters": ("two clusters of 5 classes", groups_of(5, 5)),
    "fedac-3clusters": ("clusters of 3, 3, 4 classes", groups_of(3, 3, 4)),
    "fedac-4clusters": ("clusters of 2, 2, 3, 3 classes", groups_of(2, 2, 3, 3)),
}


def fig2(s: Scenario) -> bool:
    """Lin et al.'s Fig. 2: 8 of 10 classes a cluster, and all 6,000 MNIST
    images of every class dealt to the four clusters."""
    assert isinstance(s.partition, ClassTablePartition)
    table = np.asarray(s.partition.table)
    return (
        classes_by_group(s) == [8, 8, 8, 8]
        and (table.sum(axis=0) == 6000).all()
        and s.partition.clients_per_group == 20
        and s.clients == 80
    )


GRADLOSS: list[tuple[str, Check]] = [
    ("four clusters of 20 clients, each cluster holding", fig2),
    (" 8 of the 10 classes in the proportions of Fig. 2", fig2),
    ("the MLP 512-128 of Fig. 3", lambda s: hidden_widths(s) == [512, 128]),
    ("K = 4 cluster models, lambda", lambda s: s.params_of("ifca") == {"clusters": 4}),
    (
        " 0.2; purity against the four clusters.",
        lambda s: (
            s.algorithm == "gradloss"
            and s.params_of("gradloss") == {"clusters": 4, "lam": 0.2}
        ),
    ),
]


def cafa(share: int) -> list[tuple[str, Check]]:
    def mix(s: Scenario) -> bool:
        p = s.partition
        return (
            isinstance(p, IIDMixPartition)
            and round(100 * p.iid_fraction) == share
            and p.classes_per_client(10) == (2, 4)
            and p.consecutive_classes
        )

    def k6(s: Scenario) -> bool:
        return (
            s.params_of("cafa") == {"selected": 6}
            and per_round(s, "fedavg") == per_round(s, "fedprox") == 6
        )

    return [
        (
            f"Zhang et al. (CAFA) Sec. IV: 20 clients, {share} % of them IID",
            lambda s: mix(s) and s.clients == 20 and s.algorithm == "cafa",
        ),
        ("the others each holding 20-40 % of the", mix),
        ("classes (2-4 consecutive digits, as the authors' code deals them);", mix),
        (" 20 % of each client's samples held out", lambda s: s.test_fraction == 0.2),
        ("K = 6 clients per round for every algorithm", k6),
        (
            " code's num_selected), 5 local epochs as in that code.",
            train(0.05, 0.9, 16, 5),
        ),
        ("MLP 512-128", lambda s: hidden_widths(s) == [512, 128]),
    ]


CAFA_DIGITS: list[tuple[str, Check]] = [
    (
        "VGG19 on CIFAR-10 for 150 rounds is replaced by the MLP 512-128 on",
        lambda s: s.rounds == 50,
    ),
    (
        " digits for 50 rounds, and its lr 0.1 by 0.05 with momentum 0.9.",
        train(0.05, 0.9, 16, 5),
    ),
]
CAFA_FMNIST: list[tuple[str, Check]] = [
    ("Departures: the MLP 512-128 for the paper's VGG19", lambda s: s.rounds == 50),
    ("over 50 rounds instead of 150", lambda s: s.rounds == 50),
    # the digits' departures are left behind
    (
        "lr 0.05 with momentum 0.9 instead of 0.1.",
        lambda s: "on digits" not in s.description,
    ),
]

STAND_IN = "Fashion-MNIST stands in for {0} (not installable here)."

CLAIMS: dict[str, list[tuple[str, Check]]] = {
    "dcfl-dynamic": DCFL
    + [
        ("by its group's angle (0/90/180/270; set", rotations(0.0)),
        (
            "a digits client holds about 60, so 1 epoch is 4 steps",
            lambda s: s.train.batch_size == 16,
        ),
        (
            " clients here train 5 local epochs (about 20 steps).",
            train(0.05, 0.9, 16, 5),
        ),
    ],
    "dcfl-fmnist": DCFL
    + DCFL_FMNIST
    + [("rotated by its own random angle (the paper's", rotations(45.0))],
    "dcfl-fmnist4": DCFL
    + DCFL_FMNIST
    + [("(0/90/180/270, four planted groups, so that ARI has", rotations(0.0))],
    "ocfl-iid": ocfl("IID data", iid, 0.2, "nearest") + OCFL_NEAREST,
    "ocfl-noniid": ocfl("about 2 labels each", shards(2), 0.2, "nearest")
    + OCFL_NEAREST,
    "ocfl-noniid2": ocfl("about 1 label each", shards(1), 0.2, "nearest")
    + OCFL_NEAREST,
    "ocfl-iid-fmnist": ocfl("IID data", iid, 0.1, "singleton") + OCFL_TABLE2,
    "ocfl-noniid-fmnist": ocfl("about 2 labels each", shards(2), 0.1, "singleton")
    + OCFL_TABLE2,
    "ocfl-noniid2-fmnist": ocfl("about 1 label each", shards(1), 0.1, "singleton")
    + OCFL_TABLE2,
    "ocfl-merge-fmnist": ocfl("about 1 label each", shards(1), 0.1, "singleton")
    + OCFL_TABLE3,
    **{name: fedac(*FEDAC_SKEWS[name], False) for name in FEDAC_SKEWS},
    **{f"{name}-fmnist": fedac(*FEDAC_SKEWS[name], True) for name in FEDAC_SKEWS},
    "gradloss-fig2": GRADLOSS
    + [("Lin et al. Sec. III:", lambda s: train(0.05, 0.9, 16, 1)(s))],
    "gradloss-fig2-fmnist": GRADLOSS
    + [
        (
            "Fig. 2's counts fit its 6,000 images per class as they",
            lambda s: fig2(s) and DATASET_SIZES["fashion_mnist"] == 60000,
        ),
        (
            "lr 0.05 with momentum 0.9, 1 local epoch, as on the digits.",
            train(0.05, 0.9, 16, 1),
        ),
    ],
    "cafa-mix": cafa(25) + CAFA_DIGITS,
    "cafa-mix50": cafa(50) + CAFA_DIGITS,
    "cafa-mix-fmnist": cafa(25) + CAFA_FMNIST,
    "cafa-mix50-fmnist": cafa(50) + CAFA_FMNIST,
}
STANDS_IN_FOR = {
    "dcfl": "EMNIST",
    "ocfl": "MNIST",
    "fedac": "CIFAR-10",
    "cafa": "CIFAR-10",
}


def test_every_paper_s_scenario_has_its_claims_listed() -> None:
    papers = set(BUILTIN) - {"quickstart", "byzantine", "async-stragglers"}
    # The clustered baselines' scenarios (issue 36) are checked in their tests,
    # the benchmark's settings (nobody's paper) in tests/test_benchmark.py,
    # the Byzantine benchmark's layout in tests/test_byzantine_bench.py,
    # the cross-device scenarios (issue 40) in tests/test_population.py.
    papers -= {
        n
        for n, f in BUILTIN.items()
        if f.__module__.endswith(
            (".baselines", ".benchmark", ".flanders", ".cross_device")
        )
    }
    assert set(CLAIMS) == papers


@pytest.mark.parametrize("name", sorted(CLAIMS))
def test_what_the_description_says_holds_in_the_scenario(name: str) -> None:
    scenario = BUILTIN[name]()
    for phrase, holds in CLAIMS[name]:
        assert phrase in scenario.description, phrase
        assert holds(scenario), phrase
    if name.endswith("fmnist") or name.startswith("dcfl-fmnist"):
        assert scenario.dataset.name == "fashion_mnist"
        family = name.split("-")[0]
        if family in STANDS_IN_FOR:
            assert STAND_IN.format(STANDS_IN_FOR[family]) in scenario.description
        # one paper, one description: no part of the digits' left in
        assert scenario.description.count("Sec.") == 1
        assert "on digits" not in scenario.description
        assert "digits client" not in scenario.description
    else:
        assert scenario.dataset.name == "digits"
