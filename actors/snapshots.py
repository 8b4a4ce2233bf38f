"""The parameter server's checkpoint snapshot, and the check that refuses a
damaged one (`check_snapshot`): a checkpoint is a trusted file, but an edited
or damaged one must not resume silently."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from clusterfed.algorithms import ServerState

from .roster import Roster
from .validation import check_models

if TYPE_CHECKING:  # client_dp imports the round, which imports validation
    from .client_dp import ClientDPSnapshot


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
