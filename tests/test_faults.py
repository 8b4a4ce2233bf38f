"""Faulty clients: the misbehaviour runs inside the client actor, goes through
the local runtime's worker processes and the codec, and is refused by the
server; the cluster models end as if the faulty update had simply failed."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import numpy as np
import pytest

from clusterfed.actors import ProcessRuntime
from clusterfed.driving import drive
from clusterfed.errors import ScenarioError
from clusterfed.federation import Federation
from clusterfed.scenarios import Crash, load_scenario
from clusterfed.scenarios.spec import Faulty
from helpers import small_scenario

FAULTY = 2
TIMEOUT_S = 3.0  # wall clock: ends a hung task (a real task takes milliseconds)
# Where each behaviour strikes: a replay needs an earlier update to re-send.
ROUND = {"nan": 1, "garbage": 1, "wrong_shape": 1, "hang": 1, "replay": 2}
REASON = {
    "nan": "contains NaN or Inf",
    "garbage": "truncated or malformed message",
    "wrong_shape": "delta has shape",
    "replay": "reply for round 1, which is over (this is round 2)",
    "hang": f"no reply within {TIMEOUT_S} s",
}


def run(tmp: Path, **changes: object) -> tuple[Federation, list[dict]]:
    """A run on two worker processes, and its federation (its final models)."""
    scenario = small_scenario(rounds=4, task_timeout_s=TIMEOUT_S, **changes)
    config = {"scenario": scenario.model_dump(mode="json")}
    federation = Federation(scenario, ProcessRuntime(2), tmp, config=config)
    result = asyncio.run(drive(federation))
    return federation, result.rows


_references: dict[int, dict[int, np.ndarray]] = {}


def reference(round: int, factory: pytest.TempPathFactory) -> dict[int, np.ndarray]:
    """The models of a run where the faulty client's update of `round` failed."""
    if round not in _references:
        federation, rows = run(
            factory.mktemp("reference"),
            events=[Crash(start=round, target=FAULTY, recover_after=1)],
        )
        assert rows[round]["failed_updates"] == 1
        _references[round] = dict(federation.server.state.models)
    return _references[round]


@pytest.mark.parametrize("behaviour", list(ROUND))
def test_a_faulty_update_is_refused_and_the_models_are_as_if_it_failed(
    tmp_path_factory: pytest.TempPathFactory, behaviour: str
) -> None:
    round = ROUND[behaviour]
    fault = Faulty(clients=FAULTY, behaviour=behaviour, start=round, until=round)  # type: ignore[arg-type]
    federation, rows = run(tmp_path_factory.mktemp(behaviour), faulty=[fault])
    row = rows[round]
    mine = next(c for c in row["clients"] if c["id"] == FAULTY)
    assert REASON[behaviour] in (mine["reason"] or "")
    if behaviour == "hang":
        assert mine["failed"] and row["failed_updates"] == 1
        assert row["rejected_messages"] == 0
    else:
        assert mine["rejected"] and row["rejected_messages"] == 1
        assert f"client {FAULTY}: " in row["rejections"][0]
    # Only the faulty client's task suffered, though it shares a worker with
    # others; it is back to normal the round after, and the run finished.
    others = [c for c in row["clients"] if c["id"] != FAULTY]
    assert all(c["trained"] for c in others)
    assert [r["planned_updates"] for r in rows] == [6, 6, 6, 6]
    later = next(c for c in rows[round + 1]["clients"] if c["id"] == FAULTY)
    assert later["trained"] and len(rows) == 4
    models = federation.server.state.models
    expected = reference(round, tmp_path_factory)
    for cluster, model in expected.items():
        np.testing.assert_array_equal(models[cluster], model)


def test_faulty_clients_in_toml_are_validated(tmp_path: Path) -> None:
    path = tmp_path / "faulty.toml"
    path.write_text(
        "clients = 6\nrounds = 8\ntask_timeout_s = 30\n\n"
        '[[faulty]]\nclients = [3, 4]\nbehaviour = "nan"\nstart = 2\nuntil = 5\n\n'
        '[[faulty]]\nclients = 1\nbehaviour = "hang"\nstart = 3\nevery = 2\n'
    )
    scenario = load_scenario(path)
    assert [f.ids for f in scenario.faulty] == [[3, 4], [1]]
    (nan,) = scenario.faults_of(3)
    assert [r for r in range(8) if nan.active(r)] == [2, 3, 4, 5]
    (hang,) = scenario.faults_of(1)
    assert [r for r in range(8) if hang.active(r)] == [3, 5, 7]
    assert scenario.faults_of(0) == ()


@pytest.mark.parametrize(
    ("table", "named"),
    [
        (
            'clients = 3\nbehaviour = "explode"',
            "faulty[0].behaviour: 'explode' is not one of",
        ),
        ('clients = 9\nbehaviour = "nan"', "client [9] does not exist"),
        ('clients = []\nbehaviour = "nan"', "lists no client"),
        ('clients = 1\nbehaviour = "nan"\nstart = 4\nuntil = 2', "before start"),
        ('clients = 1\nbehaviour = "hang"', "needs task_timeout_s"),
        (
            'clients = 1\nbehaviour = "nan"\nevery = 0',
            "faulty[0].every: Input should be greater than or equal to 1 (got 0)",
        ),
    ],
)
def test_bad_faulty_tables_are_refused_naming_the_field(
    tmp_path: Path, table: str, named: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(f"clients = 6\n\n[[faulty]]\n{table}\n")
    with pytest.raises(ScenarioError, match=re.escape(named)):
        load_scenario(path)
