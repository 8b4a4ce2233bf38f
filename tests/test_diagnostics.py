"""The strategies' diagnostics: what they decided, as plain JSON, in rounds.jsonl."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import clusterfed
from clusterfed.algorithms import ClientInfo, ClientUpdate, algorithms, make
from clusterfed.types import ClientId
from helpers import read_rounds, small_scenario

DIM = 4


def _rounds(name: str, deltas: np.ndarray, rounds: int = 1) -> list[dict]:
    """Every client ends each round at `deltas[i]` from its cluster's model."""
    strategy = make(name)
    state = strategy.init_state([np.zeros(DIM, np.float32)])
    rng = np.random.default_rng(0)
    for i in range(len(deltas)):
        state = strategy.on_join(state, ClientInfo(ClientId(i), 10))
    found = []
    for round in range(rounds):
        updates = []
        for i, delta in enumerate(deltas):
            cluster, base = strategy.model_for(state, ClientId(i))
            updates.append(
                ClientUpdate(
                    ClientId(i), cluster, "ok", base, delta.astype(np.float32), 10, 1.0
                )
            )
        state = strategy.aggregate(state, round, updates, rng)
        found.append(strategy.diagnostics(state))
    return found


def test_every_strategy_reports_json_and_nothing_before_a_round() -> None:
    for name in algorithms():
        strategy = make(name)
        state = strategy.init_state(
            [np.zeros(DIM, np.float32) for _ in range(strategy.initial_models)]
        )
        # Nothing decided yet, so nothing to report.
        assert strategy.diagnostics(state) == {}, name


def test_dcfl_reports_its_dunn_index_and_whether_it_reclustered() -> None:
    opposed = np.array([[1.0, 0, 0, 0], [1.1, 0, 0, 0], [-1, 0, 0, 0], [-1.1, 0, 0, 0]])
    first, second = _rounds("dcfl", opposed, rounds=2)
    # One cluster at the start: the index is undefined (None, not a non-finite
    # float that JSON cannot hold), and DCFL re-clusters.
    assert first == {"dunn_index": None, "reclustered": True}
    # Two clean clusters next: a finite index of at least 1, no re-clustering.
    assert second["reclustered"] is False and second["dunn_index"] >= 1


def test_cfl_reports_each_clusters_update_norms() -> None:
    (found,) = _rounds("cfl", np.array([[3.0, 0, 0, 0], [0, 4.0, 0, 0]]))
    assert found == {
        "update_norms": {"0": {"mean": 2.5, "max": 4.0, "clients": 3.5}},
        "thresholds": {"eps1": 0.4, "eps2": 1.6},
        "splits": [],
    }


def test_rounds_jsonl_records_the_diagnostics(tmp_path: Path) -> None:
    clusterfed.run(small_scenario(algorithm="cfl", rounds=2), out=tmp_path)
    rows = read_rounds(tmp_path)
    assert all(
        set(r["strategy"]) == {"update_norms", "thresholds", "splits"} for r in rows
    )
