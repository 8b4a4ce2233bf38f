"""What the strategy conformance suite (`conformance.py`) feeds a strategy:
small models, joined clients, updates for its plans, class histograms and
data subspaces for its descriptions, and helpers to check what it did with
them."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from clusterfed.algorithms import (
    ClientInfo,
    ClientUpdate,
    ServerState,
    Strategy,
    TaskPlan,
    is_mixture,
    make,
    reports_importance,
    reports_losses,
)
from clusterfed.types import ClientId, ModelKey

DIM = 12
N_CLASSES = 10
FEATURES = 8  # the input size of a data subspace


def initial_models(strategy: Strategy[Any]) -> list[np.ndarray]:
    """`initial_models` independent float32 vectors, the first the run's."""
    initial = np.random.default_rng(1).standard_normal(DIM).astype(np.float32)
    more = np.random.default_rng(2).standard_normal((strategy.initial_models - 1, DIM))
    return [initial, *more.astype(np.float32)]


def joined(
    name: str, seed: int = 0
) -> tuple[Strategy[Any], ServerState, list[ClientInfo], np.random.Generator]:
    """A strategy, its state with six clients joined, and the run's stream."""
    strategy = make(name)
    state = strategy.init_state(initial_models(strategy))
    clients = [ClientInfo(ClientId(i), n_train=20 + i) for i in range(6)]
    for client in clients:
        state = strategy.on_join(state, client)
    return strategy, state, clients, np.random.default_rng(seed)


def updates(plans: Sequence[TaskPlan], ok: bool = True) -> list[ClientUpdate]:
    rng = np.random.default_rng(7)
    updates = []
    for plan in plans:
        cluster, base = next(iter(plan.models.items()))
        if ok:
            delta = (rng.standard_normal(DIM) * 0.1).astype(np.float32)
            updates.append(
                ClientUpdate(
                    plan.client,
                    cluster,
                    "ok",
                    base,
                    delta,
                    20,
                    1.0,
                    importance=importance(plan),
                    losses=losses(plan),
                    deltas=mixture_deltas(plan, cluster, delta),
                )
            )
        else:
            updates.append(ClientUpdate(plan.client, cluster, "failed", reason="down"))
    return updates


def importance(plan: TaskPlan) -> tuple[float, ...] | None:
    """For a task whose rule reports importance (FedSoft's), as the server
    requires: all the weight on the model trained (the first sent), so that
    a zero delta leaves every model where it was; else None."""
    if not reports_importance(plan.identity):
        return None
    return (1.0,) + (0.0,) * (len(plan.models) - 1)


def losses(plan: TaskPlan) -> tuple[float, ...] | None:
    """For a task whose rule reports losses (FedDrift's), as the server
    requires: the same loss for every model sent, so the model trained (the
    first sent) is the lowest; else None."""
    if not reports_losses(plan.identity):
        return None
    return (1.0,) * len(plan.models)


def mixture_deltas(
    plan: TaskPlan, trained: ModelKey, delta: np.ndarray
) -> dict[ModelKey, np.ndarray] | None:
    """For a mixture task (FedEM's), as the server builds them: `delta` for
    the model the update names, zero for every other model sent; else None."""
    if not is_mixture(plan.identity):
        return None
    return {k: delta if k == trained else np.zeros_like(delta) for k in plan.models}


def histograms(clients: Sequence[ClientInfo]) -> dict[ClientId, np.ndarray]:
    """Class histograms of three kinds of client, none empty."""
    kinds = [
        np.full(N_CLASSES, 5),
        np.array([20, 20, 1, 0, 0, 0, 0, 0, 0, 0]),
        np.array([0, 0, 0, 0, 0, 0, 0, 15, 15, 12]),
    ]
    return {c.id: kinds[i % 3].astype(np.int64) for i, c in enumerate(clients)}


def subspaces(clients: Sequence[ClientInfo]) -> dict[ClientId, np.ndarray]:
    """Data subspaces (float32, FEATURES × 2, orthonormal) of three kinds of
    client: the same plane for the first two kinds, another for the third."""
    eye = np.eye(FEATURES, dtype=np.float32)
    kinds = [eye[:, :2], eye[:, [1, 0]], eye[:, 4:6]]
    return {c.id: kinds[i % 3].copy() for i, c in enumerate(clients)}


def descriptions(
    strategy: Strategy[Any], clients: Sequence[ClientInfo]
) -> dict[ClientId, np.ndarray]:
    """What the clients send for the description `strategy` wants."""
    if strategy.wants == ("data_subspace",):
        return subspaces(clients)
    return histograms(clients)


def frozen_copy(value: Any) -> Any:
    """A deep, comparable picture of `value`: dataclasses by field, mappings
    by item, arrays by dtype, shape and bytes, so any in-place change shows."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (
            type(value).__name__,
            tuple(
                (f.name, frozen_copy(getattr(value, f.name)))
                for f in dataclasses.fields(value)
            ),
        )
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, Mapping):
        return ("map", tuple((k, frozen_copy(v)) for k, v in value.items()))
    if isinstance(value, set | frozenset):
        return ("set", tuple(sorted(value)))
    if isinstance(value, list | tuple):
        return ("seq", tuple(frozen_copy(v) for v in value))
    return copy.deepcopy(value)


@contextmanager
def raises(error: type[BaseException], text: str) -> Iterator[None]:
    """The check fails unless the block raises `error` with `text` in it."""
    try:
        yield
    except error as exc:
        if text not in str(exc):
            raise AssertionError(f"expected {text!r} in {exc!r}") from exc
    else:
        raise AssertionError(f"expected {error.__name__} ({text!r})")
