"""docs/writing-a-strategy.md is real: its clustered example, PinnedClusters,
is the code these tests run, on the scenario the page shows, and it does what
the page says — a late update moves no model, a client that left is out of
the assignment and its update counts for nothing, an emptied cluster keeps
its model, and the streaming variant writes the same rows."""

from __future__ import annotations

import importlib
import re
import sys
import tomllib
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import clusterfed
from clusterfed.actors import InlineRuntime
from clusterfed.actors.folding import RoundFold
from clusterfed.algorithms import ClientInfo, ClientUpdate, ServerState, make
from clusterfed.checkpoint import read_checkpoint
from clusterfed.conformance import CHECKS
from clusterfed.scenarios import validate
from clusterfed.types import ClientId, ClusterId

PAGE = Path(__file__).resolve().parent.parent / "docs" / "writing-a-strategy.md"
TEXT = PAGE.read_text()
# The example's blocks are fenced as ```python file=pinned.py, in file order.
EXAMPLE = "\n\n".join(re.findall(r"```python file=pinned\.py\n(.*?)```", TEXT, re.S))
SCENARIO = next(
    block
    for block in re.findall(r"```toml\n(.*?)```", TEXT, re.S)
    if 'algorithm = "pinned:PinnedClusters"' in block
)
CLASSES = ["pinned:PinnedClusters", "pinned:StreamingPinned"]


@pytest.fixture(scope="module")
def pinned(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    """The page's pinned.py, importable as `pinned` (as the page runs it)."""
    folder = tmp_path_factory.mktemp("page")
    (folder / "pinned.py").write_text(EXAMPLE)
    sys.path.insert(0, str(folder))
    try:
        yield importlib.import_module("pinned")
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("pinned", None)


@pytest.mark.parametrize("name", CLASSES)
@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_the_example_passes_the_conformance_suite(
    pinned: ModuleType, check: Any, name: str
) -> None:
    check(name)


def _aggregate(
    name: str, state: ServerState, updates: list[ClientUpdate]
) -> ServerState:
    """The round as the server would run it: `aggregate`, or the fold of the
    updates into running sums and `aggregate_sums` for a strategy that folds."""
    strategy = make(name)
    rng = np.random.default_rng(0)
    if not strategy.folds:
        return strategy.aggregate(state, 4, updates, rng)
    fold = RoundFold((u.client for u in updates), partial(strategy.fold_weight, state))
    stripped = [fold.add(u) for u in updates]
    assert fold.done
    return strategy.aggregate_sums(state, 4, stripped, fold.sums, rng)


@pytest.mark.parametrize("name", CLASSES)
def test_only_accepted_updates_of_pinned_clients_move_a_model(
    pinned: ModuleType, name: str
) -> None:
    strategy = make(name)
    models = [np.full(4, k, dtype=np.float32) for k in range(3)]
    state = strategy.init_state(models)
    for i in range(5):  # clusters {0, 3}, {1, 4}, {2}
        state = strategy.on_join(state, ClientInfo(ClientId(i), n_train=40))
    state = strategy.on_leave(state, ClientId(1))
    state = strategy.on_leave(state, ClientId(4))  # cluster 1 is empty now

    def update(client: int, cluster: int, status: Any, step: float, n: int) -> Any:
        delta = np.full(4, step, dtype=np.float32)
        base = models[cluster]
        return ClientUpdate(
            ClientId(client), ClusterId(cluster), status, base, delta, n
        )

    updates = [
        update(0, 0, "ok", 1.0, 10),
        update(1, 1, "ok", 5.0, 10),  # its client left: it counts for nothing
        update(2, 2, "late", 5.0, 10),
        update(3, 0, "ok", 3.0, 30),
    ]
    new = _aggregate(name, state, updates)
    # Cluster 0: (10 × 1 + 30 × 3) / 40 = 2.5; the others exactly as they were.
    np.testing.assert_allclose(new.models[ClusterId(0)], np.full(4, 2.5))
    assert new.models[ClusterId(1)] is state.models[ClusterId(1)]
    assert new.models[ClusterId(2)] is state.models[ClusterId(2)]
    assert set(new.assignment) == {0, 2, 3}
    assert new.moved_in == {0: 4} and new.ignored == 2


def _run(name: str, out: Path) -> tuple[list[dict[str, Any]], list[ServerState]]:
    """The page's scenario with algorithm `name`: its rows, and the server's
    state after each round but the last (from the checkpoint written then)."""
    scenario = validate(tomllib.loads(SCENARIO), source=str(PAGE))
    states: list[ServerState] = []

    def after(row: dict[str, Any]) -> None:
        if row["round"] < scenario.rounds - 1:  # no checkpoint after the last
            states.append(read_checkpoint(out).federation["server"]["state"])

    result = clusterfed.run(
        scenario,
        algorithm=name,
        out=out,
        runtime=InlineRuntime(),
        checkpoint_every=1,
        on_round=after,
    )
    return result.rows, states


def test_the_page_scenario_runs_as_the_page_says(
    pinned: ModuleType, tmp_path: Path
) -> None:
    rows, states = _run("pinned:PinnedClusters", tmp_path / "pinned")
    assert [r["round"] for r in rows] == [0, 1, 2, 3] and len(states) == 3
    k0, k1, k2 = (ClusterId(k) for k in range(3))
    assert dict(states[0].assignment) == {0: k0, 1: k1, 2: k2, 3: k0, 4: k1}

    # Round 1: client 2, alone in cluster 2, straggles past the deadline.
    late = {c["id"]: c["late"] for c in rows[1]["clients"]}
    assert late == {0: False, 1: False, 2: True, 3: False, 4: False}
    before, after = states[0].models, states[1].models
    assert np.array_equal(after[k2], before[k2])  # the late update moved nothing
    assert not np.array_equal(after[k0], before[k0])
    assert not np.array_equal(after[k1], before[k1])
    loss = [{c["id"]: c["loss"] for c in rows[r]["clients"]} for r in (0, 1)]
    assert loss[1][2] == loss[0][2]  # so client 2 scores the same model again
    assert rows[1]["strategy"]["ignored"] == 1
    assert rows[1]["strategy"]["moved_in"] == {"0": 1, "1": 1, "2": 0}

    # Round 2: clients 1 and 4 left; cluster 1 is empty and keeps its model.
    assert [e["kind"] for e in rows[2]["events"]] == ["leave"]
    assert {c["id"] for c in rows[2]["clients"]} == {0, 2, 3}
    assert set(states[2].assignment) == {0, 2, 3}
    assert k1 not in states[2].assignment.values()
    assert np.array_equal(states[2].models[k1], states[1].models[k1])
    assert rows[2]["n_clusters"] == 2
    assert rows[3]["strategy"]["sizes"] == {"0": 2, "1": 0, "2": 1}
    assert rows[3]["strategy"]["moved_in"]["1"] == 1

    # Streaming changes where the sums are made, not one number of the run.
    folded, folded_states = _run("pinned:StreamingPinned", tmp_path / "streaming")
    fields = ("clients", "strategy", "n_clusters")
    assert [[r[f] for f in fields] for r in folded] == [
        [r[f] for f in fields] for r in rows
    ]
    for mine, theirs in zip(folded_states, states, strict=True):
        assert mine.models.keys() == theirs.models.keys()
        for k in mine.models:
            assert np.array_equal(mine.models[k], theirs.models[k])
