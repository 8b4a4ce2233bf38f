"""Partitioners: who holds which samples, and the ground-truth group of each.

Each partitioner returns a `Partition`: one index array per client plus the
client's ground-truth group (used only for ARI and purity, never by an
algorithm). `holdout` then splits every client's indices into a train and a
held-out part for its own evaluation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from clusterfed.errors import ConfigError


@dataclass(frozen=True)
class Partition:
    indices: list[np.ndarray]
    groups: list[int]

    def __post_init__(self) -> None:
        if len(self.indices) != len(self.groups):
            raise ValueError("one group per client is required")


@dataclass(frozen=True)
class ClientSplit:
    train: np.ndarray
    test: np.ndarray
    group: int


def iid(labels: np.ndarray, n_clients: int, rng: np.random.Generator) -> Partition:
    """Shuffle and deal out evenly; everyone is in group 0."""
    _check_clients(n_clients, len(labels))
    parts = np.array_split(rng.permutation(len(labels)), n_clients)
    return Partition([np.sort(p) for p in parts], [0] * n_clients)


def dirichlet(
    labels: np.ndarray,
    n_clients: int,
    alpha: float,
    rng: np.random.Generator,
    *,
    min_samples: int = 10,
    max_tries: int = 1000,
) -> Partition:
    """Label skew: each class is split over clients by Dirichlet(alpha) shares.

    Draws again until every client holds at least `min_samples` samples, as the
    usual implementations do. Everyone is in group 0: the skew is continuous,
    with no planted clusters.
    """
    if alpha <= 0:
        raise ConfigError(f"dirichlet alpha must be > 0, got {alpha}")
    _check_clients(n_clients, len(labels))
    if min_samples * n_clients > len(labels):
        raise ConfigError(
            f"partition: {n_clients} clients × {min_samples} samples each exceeds"
            f" the {len(labels)} samples; lower clients or partition.min_samples"
        )
    by_class = [np.flatnonzero(labels == c) for c in np.unique(labels)]
    for _ in range(max_tries):
        parts: list[list[np.ndarray]] = [[] for _ in range(n_clients)]
        for members in by_class:
            shares = rng.dirichlet(np.full(n_clients, alpha))
            cuts = (np.cumsum(shares)[:-1] * len(members)).astype(int)
            for client, chunk in enumerate(np.split(rng.permutation(members), cuts)):
                parts[client].append(chunk)
        indices = [np.sort(np.concatenate(p)) for p in parts]
        if min(len(i) for i in indices) >= min_samples:
            return Partition(indices, [0] * n_clients)
    raise ConfigError(
        f"partition: dirichlet(alpha={alpha}) left a client with fewer than"
        f" {min_samples} samples in {max_tries} draws of {n_clients} clients;"
        " raise partition.alpha, or lower partition.min_samples or clients"
    )


def shards(
    labels: np.ndarray,
    n_clients: int,
    labels_per_client: int,
    rng: np.random.Generator,
) -> Partition:
    """McMahan's shards: sort by label, cut into n×k shards, deal k to each.

    The ground-truth group is the set of majority labels of a client's shards:
    clients holding the same labels share a group.
    """
    if labels_per_client < 1:
        raise ConfigError(f"labels_per_client must be >= 1, got {labels_per_client}")
    n_shards = n_clients * labels_per_client
    _check_clients(n_shards, len(labels))
    order = np.argsort(labels, kind="stable")
    cut = np.array_split(order, n_shards)
    dealt = rng.permutation(n_shards).reshape(n_clients, labels_per_client)
    indices, keys = [], []
    for row in dealt:
        indices.append(np.sort(np.concatenate([cut[s] for s in row])))
        keys.append(
            tuple(sorted({int(np.bincount(labels[cut[s]]).argmax()) for s in row}))
        )
    return Partition(indices, _enumerate_keys(keys))


def class_table(
    labels: np.ndarray,
    table: Sequence[Sequence[float]],
    clients_per_group: int | Sequence[int],
    rng: np.random.Generator,
) -> Partition:
    """Planted groups from a group × class table of counts or weights.

    Class c is split over the groups in proportion to column c of `table`
    (so a table written for a 60,000-image dataset scales to any size), then
    each group's pool is dealt evenly to its clients.
    """
    weights = np.asarray(table, dtype=np.float64)
    classes = np.unique(labels)
    if weights.ndim != 2 or weights.shape[1] != len(classes):
        raise ConfigError(
            f"class table must be groups × {len(classes)} classes, got {weights.shape}"
        )
    if (weights < 0).any():
        raise ConfigError("class table entries must be >= 0")
    n_groups = weights.shape[0]
    per_group = (
        [clients_per_group] * n_groups
        if isinstance(clients_per_group, int)
        else list(clients_per_group)
    )
    if len(per_group) != n_groups or min(per_group) < 1:
        raise ConfigError(
            f"clients_per_group must give >= 1 client for each of {n_groups} groups"
        )
    pools: list[list[np.ndarray]] = [[] for _ in range(n_groups)]
    for column, c in enumerate(classes):
        total = weights[:, column].sum()
        if total == 0:
            continue
        members = rng.permutation(np.flatnonzero(labels == c))
        cuts = (np.cumsum(weights[:, column] / total)[:-1] * len(members)).astype(int)
        for group, chunk in enumerate(np.split(members, cuts)):
            pools[group].append(chunk)
    indices: list[np.ndarray] = []
    groups: list[int] = []
    for group, pool in enumerate(pools):
        merged = rng.permutation(np.concatenate(pool)) if pool else np.array([], int)
        _check_clients(per_group[group], len(merged))
        for part in np.array_split(merged, per_group[group]):
            indices.append(np.sort(part))
            groups.append(group)
    return Partition(indices, groups)


def iid_mix(
    labels: np.ndarray,
    n_clients: int,
    iid_clients: int,
    classes_per_client: tuple[int, int],
    rng: np.random.Generator,
    *,
    consecutive: bool = True,
) -> Partition:
    """IID clients beside clients that hold a few classes (Zhang et al., §IV).

    `iid_clients` clients, at seeded random positions, deal out evenly a random
    sample of their share (iid_clients / n_clients) of the dataset, so each
    holds the dataset's class mix up to sampling noise: ground-truth group 0.
    Every other client holds k classes, k drawn uniformly from
    `classes_per_client` (inclusive): k consecutive classes (modulo C) from a
    random first one, as the authors' code deals them, or with `consecutive`
    false any k classes. Each class left over is split among the clients
    holding it in proportion to C / k, so that a client holds about as many
    samples whatever its k (a class nobody holds stays unused). Clients
    holding the same set of classes share a group, numbered from 1 in order of
    first appearance.
    """
    classes = np.unique(labels)
    n_classes = len(classes)
    low, high = classes_per_client
    if not 1 <= low <= high <= n_classes:
        raise ConfigError(
            f"classes per non-IID client must satisfy 1 <= min <= max <="
            f" {n_classes}, got {low}..{high}"
        )
    if not 0 <= iid_clients <= n_clients:
        raise ConfigError(f"iid_clients must be in 0..{n_clients}, got {iid_clients}")
    _check_clients(n_clients, len(labels))
    is_iid = np.zeros(n_clients, dtype=bool)
    is_iid[rng.choice(n_clients, size=iid_clients, replace=False)] = True
    order = rng.permutation(len(labels))
    n_iid_samples = round(len(labels) * iid_clients / n_clients)
    iid_parts = iter(np.array_split(order[:n_iid_samples], max(1, iid_clients)))
    rest = order[n_iid_samples:]
    others = [c for c in range(n_clients) if not is_iid[c]]
    held = []
    weights = np.zeros((len(others), n_classes))
    for row in range(len(others)):
        k = int(rng.integers(low, high + 1))
        if consecutive:
            chosen = np.sort((int(rng.integers(n_classes)) + np.arange(k)) % n_classes)
        else:
            chosen = np.sort(rng.choice(n_classes, size=k, replace=False))
        held.append(tuple(int(classes[c]) for c in chosen))
        weights[row, chosen] = n_classes / k
    pieces: list[list[np.ndarray]] = [[] for _ in others]
    for column, c in enumerate(classes):
        # Only the holders share the class: the last of them takes what the
        # rounding leaves, so nobody else gets a stray sample.
        holders = np.flatnonzero(weights[:, column])
        if not len(holders):
            continue
        members = rest[labels[rest] == c]  # already in random order
        share = np.cumsum(weights[holders, column])
        cuts = (share[:-1] / share[-1] * len(members)).astype(int)
        for holder, chunk in zip(holders, np.split(members, cuts), strict=True):
            pieces[int(holder)].append(chunk)
    indices: list[np.ndarray] = []
    groups: list[int] = []
    keys: dict[tuple[int, ...], int] = {}
    non_iid = iter(range(len(others)))
    for client in range(n_clients):
        if is_iid[client]:
            indices.append(np.sort(next(iid_parts)))
            groups.append(0)
            continue
        row = next(non_iid)
        indices.append(np.sort(np.concatenate(pieces[row])))
        groups.append(keys.setdefault(held[row], len(keys) + 1))
    return Partition(indices, groups)


def holdout(
    partition: Partition, test_fraction: float, rng: np.random.Generator
) -> list[ClientSplit]:
    """Split each client's samples into train and held-out (at least one each)."""
    if not 0 < test_fraction < 1:
        raise ConfigError(f"test_fraction must be in (0, 1), got {test_fraction}")
    splits = []
    for indices, group in zip(partition.indices, partition.groups, strict=True):
        if len(indices) < 2:
            raise ConfigError(
                f"a client holds {len(indices)} samples; at least 2 needed"
            )
        shuffled = rng.permutation(indices)
        n_test = min(len(indices) - 1, max(1, round(test_fraction * len(indices))))
        splits.append(
            ClientSplit(np.sort(shuffled[n_test:]), np.sort(shuffled[:n_test]), group)
        )
    return splits


def _check_clients(n_parts: int, n_samples: int) -> None:
    if n_parts < 1:
        raise ConfigError(f"need at least one client, got {n_parts}")
    if n_parts > n_samples:
        raise ConfigError(f"cannot split {n_samples} samples into {n_parts} parts")


def _enumerate_keys(keys: list[tuple[int, ...]]) -> list[int]:
    ids: dict[tuple[int, ...], int] = {}
    return [ids.setdefault(key, len(ids)) for key in keys]
