"""Dealing a scenario's partition: which parts of the split the first clients
hold and which parts each join event hands out, the class-table rows of
joiners included (a joiner without a row is dealt to the rows in turn).
`plan_run` (build.py) deals once, from the partition stream of the seed.
"""

from __future__ import annotations

import numpy as np

from clusterfed.data import Dataset, Partition
from clusterfed.data import partition as partitioners
from clusterfed.errors import ScenarioError

from .events import Join
from .partitions import (
    ClassTablePartition,
    DirichletPartition,
    IIDMixPartition,
    IIDPartition,
    ShardsPartition,
)
from .spec import Scenario


def joiner_partition_groups(scenario: Scenario) -> dict[int, list[int | None]]:
    """For each join event, the class-table row of each client it will add."""
    groups: dict[int, list[int | None]] = {}
    for index, n in scenario.joins():
        event = scenario.events[index]
        assert isinstance(event, Join)
        groups[index] = [event.partition_group] * n
    return groups


def deal_parts(
    scenario: Scenario,
    data: Dataset,
    joiner_groups: dict[int, list[int | None]],
    rng: np.random.Generator,
) -> tuple[Partition, list[int], dict[int, list[int]]]:
    """The partition over everyone, which parts the first clients hold, and
    which parts each join event hands out."""
    spec, labels, n = scenario.partition, data.labels, scenario.clients
    n_joiners = sum(len(g) for g in joiner_groups.values())
    total = n + n_joiners
    if isinstance(spec, ClassTablePartition):
        return _class_table(spec, labels, n, joiner_groups, rng)
    match spec:
        case IIDPartition():
            partition = partitioners.iid(labels, total, rng)
        case DirichletPartition(alpha=alpha, min_samples=min_samples):
            partition = partitioners.dirichlet(
                labels, total, alpha, rng, min_samples=min_samples
            )
        case ShardsPartition(labels_per_client=k):
            partition = partitioners.shards(labels, total, k, rng)
        case IIDMixPartition(iid_fraction=share):
            partition = partitioners.iid_mix(
                labels,
                total,
                round(share * total),
                spec.classes_per_client(data.n_classes),
                rng,
                consecutive=spec.consecutive_classes,
            )
        case _:
            raise ScenarioError(f"partition: unknown kind {spec!r}")
    parts = iter(range(n, total))
    joiners = {
        index: [next(parts) for _ in groups] for index, groups in joiner_groups.items()
    }
    return partition, list(range(n)), joiners


def _class_table(
    spec: ClassTablePartition,
    labels: np.ndarray,
    n: int,
    joiner_groups: dict[int, list[int | None]],
    rng: np.random.Generator,
) -> tuple[Partition, list[int], dict[int, list[int]]]:
    rows = len(spec.table)
    initial = (
        spec.clients_per_group
        if spec.clients_per_group is not None
        else _spread(n, rows)
    )
    per_group = [initial] * rows if isinstance(initial, int) else list(initial)
    if len(per_group) != rows:
        raise ScenarioError(
            f"partition.clients_per_group lists {len(per_group)} groups,"
            f" the table has {rows}"
        )
    if sum(per_group) != n:
        raise ScenarioError(
            f"partition.clients_per_group gives {sum(per_group)} clients,"
            f" scenario has {n}"
        )
    # Joiners without a row are dealt to the rows in turn.
    dealt = iter(range(10**9))
    rows_of = {
        index: [g if g is not None else next(dealt) % rows for g in groups]
        for index, groups in joiner_groups.items()
    }
    for index, groups in rows_of.items():
        if any(g >= rows for g in groups):
            raise ScenarioError(f"events[{index}]: partition_group must be < {rows}")
    extra = [
        sum(g == row for gs in rows_of.values() for g in gs) for row in range(rows)
    ]
    sizes = [a + b for a, b in zip(per_group, extra, strict=True)]
    partition = partitioners.class_table(labels, spec.table, sizes, rng)
    # The partitioner lists each row's parts together; the first ones of a row
    # go to the initial clients, the rest to that row's joiners in order.
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(int)
    initial_parts = [
        int(starts[r]) + i for r in range(rows) for i in range(per_group[r])
    ]
    next_part = [int(starts[r]) + per_group[r] for r in range(rows)]
    joiners: dict[int, list[int]] = {}
    for index, groups in rows_of.items():
        joiners[index] = []
        for row in groups:
            joiners[index].append(next_part[row])
            next_part[row] += 1
    return partition, initial_parts, joiners


def _spread(n: int, groups: int) -> list[int]:
    return [n // groups + (g < n % groups) for g in range(groups)]
