"""Turn a scenario into the specs the runtimes build actors from."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from clusterfed.actors import ClientSpec, ServerSpec
from clusterfed.data import Dataset, Partition, holdout, load_dataset
from clusterfed.data import partition as partitioners
from clusterfed.errors import ClusterfedError, ScenarioError
from clusterfed.models import build_model, get_flat
from clusterfed.seeding import derive_seed, numpy_rng

from .spec import (
    ClassTablePartition,
    DirichletPartition,
    IIDPartition,
    Scenario,
    ShardsPartition,
)

# Keys of the independent random streams under the scenario seed.
MODEL_STREAM = 2
PARTITION_STREAM = 3
CLIENT_STREAM = 4


@dataclass(frozen=True)
class RunPlan:
    server: ServerSpec
    clients: list[ClientSpec]

    @property
    def groups(self) -> dict[int, int]:
        return {c.id: c.group for c in self.clients}


def plan_run(scenario: Scenario) -> RunPlan:
    """Data split, initial model and actor specs of `scenario`, all from its seed."""
    try:
        data = load_dataset(scenario.dataset.name, scenario.dataset.root)
        rng = numpy_rng(scenario.seed, PARTITION_STREAM)
        splits = holdout(_partition(scenario, data, rng), scenario.test_fraction, rng)
        model = build_model(
            scenario.model.name,
            data.input_shape,
            data.n_classes,
            seed=derive_seed(scenario.seed, MODEL_STREAM),
            **scenario.model.params,
        )
    except ScenarioError:
        raise
    except ClusterfedError as exc:
        raise ScenarioError(f"scenario {scenario.name!r}: {exc}") from exc
    server = ServerSpec(
        algorithm=scenario.algorithm,
        algorithm_params=scenario.params_of(scenario.algorithm),
        initial=get_flat(model),
        train_config=scenario.train,
        seed=scenario.seed,
        task_timeout_s=scenario.task_timeout_s,
    )
    clients = [
        ClientSpec(
            id=i,
            group=split.group,
            dataset=scenario.dataset.name,
            dataset_root=scenario.dataset.root,
            model=scenario.model.name,
            model_params=scenario.model.params,
            train=split.train.tolist(),
            test=split.test.tolist(),
            seed=derive_seed(scenario.seed, CLIENT_STREAM, i),
            profile=scenario.device,
        )
        for i, split in enumerate(splits)
    ]
    return RunPlan(server, clients)


def _partition(
    scenario: Scenario, data: Dataset, rng: np.random.Generator
) -> Partition:
    spec, labels, n = scenario.partition, data.labels, scenario.clients
    match spec:
        case IIDPartition():
            return partitioners.iid(labels, n, rng)
        case DirichletPartition(alpha=alpha, min_samples=min_samples):
            return partitioners.dirichlet(
                labels, n, alpha, rng, min_samples=min_samples
            )
        case ShardsPartition(labels_per_client=k):
            return partitioners.shards(labels, n, k, rng)
        case ClassTablePartition(table=table, clients_per_group=per_group):
            if per_group is None:
                per_group = _spread(n, len(table))
            total = (
                per_group * len(table) if isinstance(per_group, int) else sum(per_group)
            )
            if total != n:
                raise ScenarioError(
                    f"partition.clients_per_group gives {total} clients,"
                    f" scenario has {n}"
                )
            return partitioners.class_table(labels, table, per_group, rng)
    raise ScenarioError(f"partition: unknown kind {spec!r}")


def _spread(n: int, groups: int) -> list[int]:
    return [n // groups + (g < n % groups) for g in range(groups)]
