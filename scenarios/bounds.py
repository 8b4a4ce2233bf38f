"""What a scenario may ask for, known before any data loads.

The dataset tables, the largest model and worker count a run accepts, and
the automatic wall-clock limit on one request.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from clusterfed.errors import ConfigError
from clusterfed.models import build_model, n_parameters

if TYPE_CHECKING:
    from .spec import ModelSpec, Scenario


# Samples of each known dataset's training split, to refuse a partition that
# cannot fit before any data is loaded (tests/test_data.py checks the table
# against the loaded datasets).
DATASET_SIZES = {
    "digits": 1797,
    "fashion_mnist": 60000,
    "mnist": 60000,
    "emnist": 112800,
    "cifar10": 50000,
}


# Input shape and classes of each known dataset, to size a model before any
# data is loaded.
DATASET_SHAPES: dict[str, tuple[tuple[int, ...], int]] = {
    "digits": ((1, 8, 8), 10),
    "fashion_mnist": ((1, 28, 28), 10),
    "mnist": ((1, 28, 28), 10),
    "emnist": ((1, 28, 28), 47),
    "cifar10": ((3, 32, 32), 10),
}

# The largest model a scenario may ask for. The papers' largest (the CNN on
# 28×28 inputs) has 1.2 M parameters; 50 M float32 weights are 200 MB a copy,
# and the server keeps one per cluster and every client its own, so a model
# past this bound does not run on a laptop or a cluster node, it only hangs
# while its weights are drawn.
MAX_MODEL_PARAMETERS = 50_000_000

# Worker processes of the local runtime: each holds its clients' data and a
# torch runtime (about 100 MB), so more than this is no machine's core count.
MAX_WORKERS = 256


def check_workers(workers: int | None) -> None:
    """Refuse a worker count outside 1..`MAX_WORKERS` (None: one per core).

    Raises:
        ConfigError: naming the count.
    """
    if workers is None:
        return
    if (
        isinstance(workers, bool)
        or not isinstance(workers, int)
        or not 1 <= workers <= MAX_WORKERS
    ):
        raise ConfigError(
            f"workers must be between 1 and {MAX_WORKERS}, got {workers!r}"
        )


def model_parameters(
    model: ModelSpec, input_shape: tuple[int, ...], n_classes: int
) -> int | None:
    """How many parameters `model` has on inputs of `input_shape`, or None
    when it cannot be built (building the plan then refuses it, with the
    family's own message).

    Built on torch's meta device: shapes only, no memory and no time, however
    large the model asks to be.
    """
    with torch.device("meta"):
        try:
            net = build_model(model.name, input_shape, n_classes, **model.params)
        except Exception:  # whatever a family raises, plan_run reports it
            return None
    return n_parameters(net)


TASK_TIMEOUT_FLOOR_S = 300.0
"""The least automatic task timeout: a slow start (imports, a first step)
and a busy machine fit in it many times over."""
TASK_SECONDS_PER_SAMPLE = 0.02
"""A pessimistic wall-clock cost of one training sample for one epoch: about
20 times the slowest built-in family on one core (the MNIST CNN, 1.1 ms a
sample) and 4 times that CNN with DP-SGD."""
UNKNOWN_DATASET_TIMEOUT_S = 3600.0
"""The automatic task timeout of a dataset of unknown size."""


def default_task_timeout(scenario: Scenario) -> float:
    """The wall-clock limit on one request of `scenario` when it sets none.

    No task should ever reach it: it bounds the time for one host to train
    on the dataset's whole training split for the configured epochs at a
    pessimistic cost a sample (`TASK_SECONDS_PER_SAMPLE`), at least
    `TASK_TIMEOUT_FLOOR_S`. That is more than any request can wait for, even
    one queued behind every other on its host, since a host's clients hold
    at most the whole split between them. A per-machine measurement would be
    tighter but is unknown before the run, and the courier's clock starts
    when a request is sent, so it is derived from what the scenario says.
    A dataset of unknown size gets `UNKNOWN_DATASET_TIMEOUT_S`. It is there
    so that a stalled worker costs one deadline, never the run; a model far
    heavier than the built-in families should set its own.
    """
    size = DATASET_SIZES.get(scenario.dataset.name)
    if size is None:
        return UNKNOWN_DATASET_TIMEOUT_S
    work = size * scenario.train.epochs * TASK_SECONDS_PER_SAMPLE
    return max(TASK_TIMEOUT_FLOOR_S, float(math.ceil(work)))


def check_partition_fits(scenario: Scenario) -> None:
    """Refuse more clients than the dataset has samples to deal them.

    Raises:
        ValueError: naming the counts and the knob to lower (the scenario's
            validator reports it as a field error).
    """
    size = DATASET_SIZES.get(scenario.dataset.name)
    total = scenario.clients + sum(n for _, n in scenario.joins())
    each = getattr(scenario.partition, "min_samples", 1)
    if size is None or total * each <= size:
        return
    knobs = "clients" + (" or partition.min_samples" if each > 1 else "")
    joiners = f" ({scenario.clients} + {total - scenario.clients} joining)" * (
        total > scenario.clients
    )
    raise ValueError(
        f"partition: {total} clients{joiners} × {each} samples each"
        f" = {total * each} samples, but {scenario.dataset.name} has {size};"
        f" lower {knobs} (at most {size // each} clients of {each})"
    )


def check_model_fits(scenario: Scenario) -> None:
    """Refuse a model above `MAX_MODEL_PARAMETERS` on the scenario's dataset.

    Raises:
        ValueError: naming the model, its size and the bound.
    """
    known = DATASET_SHAPES.get(scenario.dataset.name)
    if known is None:  # an unknown dataset is refused when data loads
        return
    shape, n_classes = known
    model = scenario.model
    count = model_parameters(model, shape, n_classes)
    if count is None or count <= MAX_MODEL_PARAMETERS:
        return
    params = "".join(f", {k}={v}" for k, v in model.params.items())
    raise ValueError(
        f"model ({model.name}{params}) has {count:,} parameters on"
        f" {scenario.dataset.name} ({count * 4 / 1e9:.1f} GB a copy), above the"
        f" bound of {MAX_MODEL_PARAMETERS:,}; make it smaller"
    )
