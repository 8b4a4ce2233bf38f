"""The built-in scenarios, by name: `quickstart` and the papers' experiments."""

from __future__ import annotations

from collections.abc import Callable

from clusterfed.actors.clock import DeviceProfile
from clusterfed.protocol import TrainConfig

from . import baselines, benchmark, cross_device, flanders, papers, papers_fmnist
from .faults import Faulty
from .partitions import DirichletPartition
from .spec import DatasetSpec, ModelSpec, Scenario


def quickstart() -> Scenario:
    """FedAvg on the embedded digits: 20 clients with Dirichlet(0.5) label skew."""
    return Scenario(
        name="quickstart",
        description=quickstart.__doc__ or "",
        dataset=DatasetSpec(name="digits"),
        partition=DirichletPartition(alpha=0.5),
        test_fraction=0.2,
        model=ModelSpec(name="mlp", hidden=[512, 128]),
        algorithm="fedavg",
        train=TrainConfig(lr=0.05, momentum=0.9, batch_size=16, epochs=1),
        clients=20,
        rounds=30,
        seed=0,
    )


def byzantine() -> Scenario:
    """quickstart with 4 of its 20 clients (20 %) Byzantine: every round each
    sends its honest delta × −10, kept just under max_update_norm = 5 (honest
    deltas are below 1.5), so every update is accepted. Compare aggregators:
    --set aggregator=NAME, any of robust.AGGREGATORS (median, krum, geomed,
    centered_clip, bulyan…; docs/scenarios.md gives each one's parameters),
    pre-aggregators in front (nnm+krum, bucketing+median)."""
    return Scenario(
        **{
            **dict(quickstart()),
            "name": "byzantine",
            "description": byzantine.__doc__ or "",
            "max_update_norm": 5.0,
            "faulty": [Faulty(clients=[1, 6, 11, 16], behaviour="sign_flip")],
        }
    )


def async_stragglers() -> Scenario:
    """quickstart with a heavy-tailed fleet: 4 of its 20 clients (20 %) compute
    and talk 10 times slower. Compare synchronous FedAvg (wait_all, or
    --set deadline.policy=deadline --set deadline.seconds=2) with --algorithm
    fedasync or fedbuff --set mode=async (bench/async_stragglers.py)."""
    slow = DeviceProfile(samples_per_s=50.0, bandwidth_bps=1.25e5)
    return Scenario(
        **{
            **dict(quickstart()),
            "name": "async-stragglers",
            "description": async_stragglers.__doc__ or "",
            "devices": {c: slow for c in (0, 5, 10, 15)},
        }
    )


BUILTIN: dict[str, Callable[[], Scenario]] = {
    "quickstart": quickstart,
    "byzantine": byzantine,
    "byzantine-fmnist": flanders.byzantine_fmnist,
    "async-stragglers": async_stragglers,
    "dcfl-dynamic": papers.dcfl_dynamic,
    "ocfl-iid": papers.ocfl_iid,
    "ocfl-noniid": papers.ocfl_noniid,
    "ocfl-noniid2": papers.ocfl_noniid2,
    "fedac-iid": papers.fedac_iid,
    "fedac-2clusters": papers.fedac_2clusters,
    "fedac-3clusters": papers.fedac_3clusters,
    "fedac-4clusters": papers.fedac_4clusters,
    "gradloss-fig2": papers.gradloss_fig2,
    "cafa-mix": papers.cafa_mix,
    "cafa-mix50": papers.cafa_mix50,
    # The same papers at their own scale (needs dataset-fashion-mnist).
    "dcfl-fmnist": papers_fmnist.dcfl_fmnist,
    "dcfl-fmnist4": papers_fmnist.dcfl_fmnist4,
    "ocfl-iid-fmnist": papers_fmnist.ocfl_iid_fmnist,
    "ocfl-noniid-fmnist": papers_fmnist.ocfl_noniid_fmnist,
    "ocfl-noniid2-fmnist": papers_fmnist.ocfl_noniid2_fmnist,
    "ocfl-merge-fmnist": papers_fmnist.ocfl_merge_fmnist,
    "fedac-iid-fmnist": papers_fmnist.fedac_iid_fmnist,
    "fedac-2clusters-fmnist": papers_fmnist.fedac_2clusters_fmnist,
    "fedac-3clusters-fmnist": papers_fmnist.fedac_3clusters_fmnist,
    "fedac-4clusters-fmnist": papers_fmnist.fedac_4clusters_fmnist,
    "gradloss-fig2-fmnist": papers_fmnist.gradloss_fig2_fmnist,
    "cafa-mix-fmnist": papers_fmnist.cafa_mix_fmnist,
    "cafa-mix50-fmnist": papers_fmnist.cafa_mix50_fmnist,
    # The clustered baselines' own experiments (issue 36), digits and at scale.
    "flhc-swap": baselines.flhc_swap,
    "flhc-swap-fmnist": baselines.flhc_swap_fmnist,
    "fesem-rotated": baselines.fesem_rotated,
    "fesem-rotated-fmnist": baselines.fesem_rotated_fmnist,
    "pacfl-labels": baselines.pacfl_labels,
    "pacfl-labels-fmnist": baselines.pacfl_labels_fmnist,
    "fedsoft-rotated": baselines.fedsoft_rotated,
    "fedsoft-rotated-fmnist": baselines.fedsoft_rotated_fmnist,
    "feddrift-swap": baselines.feddrift_swap,
    "feddrift-swap-fmnist": baselines.feddrift_swap_fmnist,
    "fedem-dirichlet": baselines.fedem_dirichlet,
    "fedem-dirichlet-fmnist": baselines.fedem_dirichlet_fmnist,
    # The clustered-FL benchmark's settings (bench/benchmark.py; Fashion-MNIST).
    "bench-rotations-fmnist": benchmark.rotations,
    "bench-label-groups-fmnist": benchmark.label_groups,
    "bench-dirichlet-fmnist": benchmark.dirichlet,
    "bench-drift-fmnist": benchmark.drift,
    # Cross-device scale (issue 40): a lazy population of 10⁶ Synthetic clients.
    "cross-device": cross_device.cross_device,
    "cross-device-clustered": cross_device.cross_device_clustered,
}
