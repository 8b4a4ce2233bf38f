"""FedProx's Synthetic(α, β): each client's data drawn from its seed alone.

Li, Sahu, Zaheer, Sanjabi, Talwalkar, Smith, "Federated Optimization in
Heterogeneous Networks", MLSys 2020, section 5.1. Client k has its own
softmax-regression model and its own feature distribution:

    u_k ~ N(0, α)      W_k ~ N(u_k, 1) (60×10)      b_k ~ N(u_k, 1) (10)
    B_k ~ N(0, β)      v_k ~ N(B_k, 1) (60)         x ~ N(v_k, Σ), Σ = diag(j^-1.2)
    y = argmax softmax(W_kᵀ x + b_k)

α controls how much the clients' models differ, β how much their features
do. The second argument of N is a standard deviation, as in the authors'
generator (litian96/FedProx, data/synthetic_*/generate_synthetic.py, which
calls `np.random.normal(0, alpha, ...)`), so Synthetic(1, 1) is theirs. Their
sample counts are power-law: `lognormal(4, 2)` truncated to an integer, plus
50; so are these.

What differs from the authors' script, on purpose: they draw all clients from
one global stream, so client 7's data depends on how many clients came
before it; here each client's draws come from its own stream under the
run's seed (`clusterfed.seeding`), so a client is generated only when it is
first needed, in any process and any order, and a client that is never
sampled costs nothing but its id. `max_samples` optionally caps the heavy
tail of the counts (lognormal(4, 2) reaches 10⁵ samples about once in 25,000
clients); None keeps the authors' counts. numpy has no generator for this
dataset, so it is written here; tests/test_synthetic.py holds it against the
definitions above.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from clusterfed.errors import ConfigError
from clusterfed.seeding import numpy_rng

N_FEATURES = 60
N_CLASSES = 10
# The authors' sample counts: int(lognormal(mean 4, sigma 2)) + 50.
COUNT_MEAN, COUNT_SIGMA, COUNT_MIN = 4.0, 2.0, 50
# The dataset's streams live under a key of their own (the scenario's other
# streams are (seed, 1..9, ...)); each client has two: its sample count
# alone (cheap to ask for without generating anything), and its model and
# data. No path ends in 0: SeedSequence reads (a, b, 0) as (a, b).
SYNTHETIC_STREAM = 10
_COUNT, _DATA = 1, 2

# The names `clusterfed list` shows for these datasets (one is a pattern).
LISTED = {
    "synthetic": "Synthetic(1, 1)",
    "synthetic_<alpha>_<beta>": "Synthetic(alpha, beta), e.g. synthetic_0.5_0.5",
    "synthetic_iid": "the authors' synthetic_iid: one shared labelling model",
}

_NAME = re.compile(r"synthetic(?:_(?P<iid>iid)|_(?P<alpha>[0-9.]+)_(?P<beta>[0-9.]+))?")
# Client ids stay below this (a population's `registered` is bounded by it);
# the iid variant's shared model comes from the stream of this "client",
# which no client's own streams can reach.
MAX_CLIENTS = 1_000_000_000
_SHARED = MAX_CLIENTS


@dataclass(frozen=True)
class SyntheticParams:
    """Synthetic(α, β): `alpha` spreads the clients' models, `beta` their
    features (both standard deviations, ≥ 0); `max_samples` caps a client's
    sample count (None: the authors' uncapped counts). `iid`: the authors'
    synthetic_iid, where every client labels with one shared model (W, b
    drawn once, N(0, 1)) and its features are N(B_k·1, Σ), B_k ~ N(0, β)
    (α unused; their synthetic_iid has β = 0)."""

    alpha: float = 1.0
    beta: float = 1.0
    max_samples: int | None = None
    iid: bool = False

    def __post_init__(self) -> None:
        for name in ("alpha", "beta"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and 0 <= value < float("inf")):
                raise ConfigError(f"synthetic: {name} must be >= 0, got {value!r}")
        if self.max_samples is not None and self.max_samples < COUNT_MIN:
            raise ConfigError(
                f"synthetic: max_samples must be >= {COUNT_MIN}, got {self.max_samples}"
            )


def parse_name(name: str) -> SyntheticParams | None:
    """The parameters a dataset name gives: `synthetic` is Synthetic(1, 1),
    `synthetic_0.5_0.5` Synthetic(0.5, 0.5) (the authors' folder names);
    None for a name that is not synthetic.

    Raises:
        ConfigError: the name starts like a synthetic one but is not one.
    """
    if not name.startswith("synthetic"):
        return None
    found = _NAME.fullmatch(name)
    if found is None:
        raise ConfigError(
            f"dataset {name!r}: a synthetic dataset is named synthetic,"
            " synthetic_<alpha>_<beta> (e.g. synthetic_0.5_0.5) or synthetic_iid"
        )
    if found["iid"] is not None:
        return SyntheticParams(0.0, 0.0, iid=True)
    if found["alpha"] is None:
        return SyntheticParams()
    try:
        return SyntheticParams(float(found["alpha"]), float(found["beta"]))
    except ValueError as exc:
        raise ConfigError(f"dataset {name!r}: {exc}") from exc


@dataclass(frozen=True)
class SyntheticClient:
    """One client's generated data and the truth it was drawn from."""

    x: np.ndarray  # n × 60, float32
    y: np.ndarray  # n, int64
    weights: np.ndarray  # W_k, 60 × 10
    bias: np.ndarray  # b_k, 10
    feature_mean: np.ndarray  # v_k, 60


def feature_variances() -> np.ndarray:
    """Σ's diagonal: j^-1.2 for features j = 1..60."""
    return np.arange(1, N_FEATURES + 1, dtype=np.float64) ** -1.2


def sample_count(seed: int, client: int, params: SyntheticParams) -> int:
    """How many samples client `client` holds; draws nothing else."""
    rng = numpy_rng(seed, SYNTHETIC_STREAM, client, _COUNT)
    n = int(rng.lognormal(COUNT_MEAN, COUNT_SIGMA)) + COUNT_MIN
    return n if params.max_samples is None else min(n, params.max_samples)


def generate(
    seed: int, client: int, params: SyntheticParams, n: int | None = None
) -> SyntheticClient:
    """Client `client`'s model, feature mean and samples, from `seed` and
    its id only (the same in any process and any order of access).

    `n`: generate its first `n` samples only (default: all it holds). The
    samples are drawn row by row, so these are a prefix of all of them.
    """
    if client < 0:
        raise ConfigError(f"synthetic: client {client} is not an id (>= 0)")
    if n is None:
        n = sample_count(seed, client, params)
    elif n < 1:
        raise ConfigError(f"synthetic: client {client} needs >= 1 sample, got {n}")
    if client >= MAX_CLIENTS:
        raise ConfigError(f"synthetic: client {client} is not below {MAX_CLIENTS}")
    rng = numpy_rng(seed, SYNTHETIC_STREAM, client, _DATA)
    if params.iid:
        weights, bias = shared_model(seed)
        mean = np.full(N_FEATURES, rng.normal(0.0, params.beta))
    else:
        u = rng.normal(0.0, params.alpha)
        big_b = rng.normal(0.0, params.beta)
        weights = rng.normal(u, 1.0, (N_FEATURES, N_CLASSES))
        bias = rng.normal(u, 1.0, N_CLASSES)
        mean = rng.normal(big_b, 1.0, N_FEATURES)
    # Σ is diagonal: x = v + sqrt(Σ)·z, one standard normal z per feature.
    z = rng.standard_normal((n, N_FEATURES))
    x = (mean + np.sqrt(feature_variances()) * z).astype(np.float32)
    # Labelled from the float32 features a client trains on, so a label is
    # exactly the model's answer to its sample; softmax is increasing, so its
    # argmax is the logits' argmax.
    y = np.argmax(x.astype(np.float64) @ weights + bias, axis=1).astype(np.int64)
    return SyntheticClient(x, y, weights, bias, mean)


@lru_cache(maxsize=4)
def shared_model(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """synthetic_iid's one model (W, b), every entry N(0, 1), from the seed."""
    rng = numpy_rng(seed, SYNTHETIC_STREAM, _SHARED, _DATA)
    weights = rng.normal(0.0, 1.0, (N_FEATURES, N_CLASSES))
    weights.setflags(write=False)
    bias = rng.normal(0.0, 1.0, N_CLASSES)
    bias.setflags(write=False)
    return weights, bias


# Clients of a round whose rows this process keeps, newest first: a host
# regenerates a client's rows only when it comes back after this many others.
ROWS_CACHED = 256


@lru_cache(maxsize=ROWS_CACHED)
def client_rows(name: str, seed: int, client: int, n: int) -> tuple[torch.Tensor, ...]:
    """The first `n` samples of client `client` of dataset `name` as tensors
    (features float32, labels int64), generated on first use and kept in a
    bounded LRU cache of this process.

    Raises:
        ConfigError: `name` is not a synthetic dataset.
    """
    params = parse_name(name)
    if params is None:
        raise ConfigError(f"dataset {name!r} is not a synthetic dataset")
    data = generate(seed, client, params, n)
    return torch.from_numpy(data.x), torch.from_numpy(data.y)
