"""The parameter server's checkpoint snapshot: what the server takes
(`take_snapshot`, its `snapshot`), the check that refuses a damaged one
(`check_snapshot`) and how the server takes it back (`restore_snapshot`, its
`restore`). A checkpoint is a trusted file, but an edited or damaged one must
not resume silently."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from clusterfed.algorithms import ServerState
from clusterfed.errors import ConfigError
from clusterfed.types import ClusterId

from .roster import Roster
from .validation import check_models

if TYPE_CHECKING:  # client_dp imports the round, which imports validation
    from .client_dp import ClientDPSnapshot
    from .server import ParameterServer  # server.py imports this module


class ServerSnapshot(TypedDict):
    """What a resumed run needs of the parameter server (its `snapshot`);
    `client_dp` is None without client-level DP."""

    round: int
    state: ServerState
    rng: np.random.Generator
    roster: Roster
    next_id: int
    n_classes: int | None
    rejections: list[str]
    client_dp: ClientDPSnapshot | None


SNAPSHOT_KEYS = ServerSnapshot.__required_keys__


def check_snapshot(
    snapshot: Mapping[str, Any], state_type: type[ServerState], n_weights: int
) -> str | None:
    """Why a server snapshot (from a checkpoint) does not fit this run, or None.

    A checkpoint is a trusted file (it is unpickled), but a damaged or edited
    one must not resume silently: its state is checked as inbound state is.
    """
    missing = sorted(SNAPSHOT_KEYS - set(snapshot))
    if missing:
        return f"the server state lacks {', '.join(missing)}"
    state = snapshot["state"]
    if not isinstance(state, state_type):
        return (
            f"the strategy state is a {type(state).__name__},"
            f" this run's strategy keeps a {state_type.__name__}"
        )
    if not state.models:
        return "the strategy state holds no model"
    for cluster, model in state.models.items():
        if not isinstance(model, np.ndarray) or model.dtype != np.float32:
            return f"cluster {cluster}'s model is not a float32 vector"
        if model.shape != (n_weights,):
            return (
                f"cluster {cluster}'s model has shape {model.shape},"
                f" the run's model has {n_weights} weights"
            )
        if not np.isfinite(model).all():
            return f"cluster {cluster}'s model holds NaN or Inf"
    problem = check_models(state.models)
    if problem is not None:
        return problem
    problem = _centres_problem(state.centres, n_weights)
    if problem is not None:
        return problem
    roster = snapshot["roster"]
    if not isinstance(roster, Roster):
        return f"the roster is a {type(roster).__name__}, not a Roster"
    problem = roster.problem()
    if problem is not None:
        return problem
    for cid, cluster in state.assignment.items():
        if cid not in roster:
            return f"client {cid} is assigned a cluster but is not registered"
        if cluster not in state.models:
            return f"client {cid} is assigned cluster {cluster}, which has no model"
    if not isinstance(snapshot["rng"], np.random.Generator):
        return "the strategy's random stream is not a numpy Generator"
    for key in ("round", "next_id"):
        value = snapshot[key]
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            return f"{key} is {value!r}, expected a count"
    n_classes = snapshot["n_classes"]
    if n_classes is not None and (not isinstance(n_classes, int) or n_classes < 1):
        return f"n_classes is {n_classes!r}"
    return _client_dp_problem(snapshot["client_dp"])


def take_snapshot(server: ParameterServer) -> ServerSnapshot:
    """`server.snapshot()`: what a resumed run needs of `server`, between two
    rounds; picklable, sharing nothing mutable with the server."""
    snapshot: ServerSnapshot = {
        "round": server.round,
        "state": server.state,
        "rng": server.rng,
        "roster": server.roster.copy(),
        "next_id": server.courier.next_id,
        "n_classes": server.n_classes,
        "rejections": list(server._rejections),
        "client_dp": None if server.client_dp is None else server.client_dp.snapshot(),
    }
    return snapshot


def restore_snapshot(server: ParameterServer, snapshot: Mapping[str, Any]) -> None:
    """`server.restore(snapshot)`: give `server` back what `take_snapshot`
    took, once `check_snapshot` finds it fits this run.

    Raises:
        ConfigError: the snapshot does not fit this run.
    """
    problem = check_snapshot(
        snapshot, server.strategy.state_type, server.limits.n_weights
    )
    if problem is not None:
        raise ConfigError(f"checkpoint refused: {problem}")
    server.round = snapshot["round"]
    server.state = snapshot["state"]
    server.rng = snapshot["rng"]
    server.roster = snapshot["roster"].copy()
    server.courier.next_id = snapshot["next_id"]
    server.n_classes = snapshot["n_classes"]
    server.books.begin_round(server.round)
    server._rejections = list(snapshot["rejections"])
    books = snapshot["client_dp"]
    if (server.client_dp is None) != (books is None):
        raise ConfigError(
            "checkpoint refused: client-level DP is on in one of the run"
            " and the checkpoint only"
        )
    if server.client_dp is not None:
        server.client_dp.restore(books)


def _centres_problem(
    centres: Mapping[ClusterId, np.ndarray], n_weights: int
) -> str | None:
    """Why the clusters' centres (`ServerState.centres`) are damaged, or
    None. Each is a robust rule's last fold: a float64 vector of the run's
    weights, finite."""
    for cluster, centre in centres.items():
        if not isinstance(centre, np.ndarray) or centre.shape != (n_weights,):
            return f"cluster {cluster}'s centre is not a vector of {n_weights} weights"
        if centre.dtype != np.float64 or not np.isfinite(centre).all():
            return f"cluster {cluster}'s centre is not a finite float64 vector"
    return None


def _client_dp_problem(books: object) -> str | None:
    """Why client-level DP's books (None without it) are damaged, or None."""
    if books is None:
        return None
    if not isinstance(books, dict) or set(books) != {"clip_norm", "rounds_done"}:
        return f"client-level DP's books are {books!r}"
    bound, rounds = books["clip_norm"], books["rounds_done"]
    if not isinstance(bound, float) or not (0 < bound < math.inf):
        return f"client-level DP's clipping bound is {bound!r}"
    if not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 0:
        return f"client-level DP's rounds are {rounds!r}, expected a count"
    return None
