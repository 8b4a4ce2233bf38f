"""A checkpoint's typed snapshots (issue 32): what a run writes has the keys
of its types, and a snapshot of another layout, another format or with a
damaged part is refused naming the part and the problem, before
rounds.jsonl changes."""

from __future__ import annotations

import dataclasses
import hashlib
import pickle
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_checkpoint import _copy, _refused, stopped

import clusterfed
from clusterfed.actors import ClientState
from clusterfed.actors.client import CLIENT_STATE_KEYS, client_state_problem
from clusterfed.actors.snapshots import SNAPSHOT_KEYS
from clusterfed.actors.spec import PrivacyPlan
from clusterfed.checkpoint import (
    CHECKPOINT,
    FORMAT,
    MAGIC,
    Checkpoint,
    FederationSnapshot,
    RecorderSnapshot,
    read_checkpoint,
    write_checkpoint,
)
from clusterfed.scenarios import EngineSnapshot, Join
from clusterfed.scenarios.spec import DPSpec, Faulty
from helpers import small_scenario

__all__ = ["stopped"]  # the fixture, shared with test_checkpoint


def test_a_checkpoint_holds_one_typed_snapshot_per_part(
    stopped: tuple[Path, list[Any]],
) -> None:
    federation = read_checkpoint(stopped[0]).federation
    assert set(federation) == FederationSnapshot.__required_keys__
    assert set(federation["server"]) == SNAPSHOT_KEYS
    assert set(federation["engine"]) == EngineSnapshot.__required_keys__
    assert set(federation["recorder"]) == RecorderSnapshot.__required_keys__
    assert federation["driver"] is None  # a synchronous run
    assert federation["recorder"]["n_rows"] == 3


def test_client_states_are_typed_and_plain(tmp_path: Path) -> None:
    # Local DP and a replaying client: the two things a client keeps.
    scenario = small_scenario(
        rounds=4,
        dp=DPSpec(epsilon=10),
        events=[Join(start=1)],
        faulty=[Faulty(clients=1, behaviour="replay", start=3)],
    )
    clusterfed.run(scenario, out=tmp_path, workers=1, checkpoint_every=3)
    clients = read_checkpoint(tmp_path).federation["clients"]
    assert sorted(clients) == list(range(len(clients))) and len(clients) >= 5
    for state in clients.values():
        assert client_state_problem(state) is None
        assert set(state) <= CLIENT_STATE_KEYS
        history = state["privacy"]
        assert history and all(
            (type(s), type(q), type(n)) == (float, float, int) for s, q, n in history
        )
    assert any(isinstance(s.get("last_update"), bytes) for s in clients.values())


Edit = Callable[[Any], Any]


def _with(**parts: Any) -> Edit:
    """The snapshot with `parts` in place of its own."""
    return lambda federation: {**federation, **parts}


def _part(name: str, **changes: Any) -> Edit:
    """The snapshot with `changes` in its part `name`."""
    return lambda federation: {**federation, name: {**federation[name], **changes}}


def _without(name: str, key: str) -> Edit:
    """The snapshot with `key` gone from its part `name`."""
    return lambda federation: {
        **federation,
        name: {k: v for k, v in federation[name].items() if k != key},
    }


def _flat(federation: Any) -> Any:
    # The layout of format 3: the server's keys beside sim_now.
    return {**federation["server"], "sim_now": federation["sim_now"]}


BAD_STATE: ClientState = {"privacy": [(1.0, 2.0, 3)]}  # a sample rate of 2
PLAN = PrivacyPlan(
    epsilon=10.0,
    delta=1e-5,
    max_grad_norm=1.0,
    noise_multiplier=1.0,
    rounds=5,
    sample_rate=0.1,
    steps=50,
    run_id="elsewhere",
).model_dump()

FOREIGN: dict[str, tuple[Edit, str]] = {
    "the layout of format 3": (
        _flat,
        "the checkpoint lacks clients, devices, driver, engine, population, recorder,"
        " server, summary",
    ),
    "no snapshot at all": (lambda _: ["server"], "the checkpoint holds a list"),
    "an engine that is a list": (
        _with(engine=[]),
        "the engine's snapshot is a list, expected a mapping (EngineSnapshot)",
    ),
    "an engine without its random stream": (
        _without("engine", "rng"),
        "the engine's snapshot lacks rng",
    ),
    "a recorder of another version": (
        _part("recorder", rows=[]),
        "the recorder's snapshot holds rows, unknown to a RecorderSnapshot",
    ),
    "a server without its books": (
        _without("server", "roster"),
        "the server's snapshot lacks roster",
    ),
    "a driver in a sync run": (
        _with(driver={}),
        "it was taken in async mode, the scenario's mode is sync",
    ),
    "a negative simulated time": (
        _with(sim_now=-1.0),
        "sim_now is -1.0, expected a finite simulated time",
    ),
    "an infinite wall time": (
        _part("recorder", wall_s=float("inf")),
        "the recorder's wall_s is inf, expected finite seconds",
    ),
    "a summary without its warnings": (
        _without("summary", "warnings"),
        "the summary's snapshot lacks warnings",
    ),
    "a DP plan under a text id": (
        _part("summary", privacy={"0": {}}),
        "a DP plan is kept under '0', not a client id",
    ),
    "a DP plan with a negative budget": (
        _part("summary", privacy={0: {"epsilon": -1.0}}),
        "client 0's DP plan: Input should be greater than 0",
    ),
    "warnings that are not texts": (
        _part("summary", warnings=[1]),
        "the summary's warnings are not a list of texts",
    ),
    # The summary's part is checked against the run when the federation
    # takes it back: this run has no DP, and 6 clients.
    "a DP plan in a run without DP": (
        _part("summary", privacy={0: PLAN}),
        "checkpoint refused: the summary's client 0 has a DP-SGD plan; this run"
        " has no DP-SGD",
    ),
    "a warned straggler the run never had": (
        _part("summary", punctual_stragglers=[10**9]),
        "checkpoint refused: the summary's client 1000000000 was never in this"
        " run (ids 0..5)",
    ),
    "client states in a list": (
        _with(clients=[BAD_STATE]),
        "the clients' states are a list, not a dict",
    ),
    "a client state under a text id": (
        _with(clients={"0": {}}),
        "a client's state is kept under '0', not a client id",
    ),
    "a client state of another kind": (
        _with(clients={0: [1.0, 0.1, 1]}),
        "client 0's state is a list, not a client's state",
    ),
    "a client state with a key no client keeps": (
        _with(clients={0: {"optimizer": {}}}),
        "client 0's state holds optimizer, which no client keeps",
    ),
    "a sample rate past 1": (
        _with(clients={2: BAD_STATE}),
        "client 2's state has privacy history entry 0 (1.0, 2.0, 3), expected"
        " (noise multiplier, sample rate, steps)",
    ),
    "a replayed update that is text": (
        _with(clients={1: {"last_update": "bytes"}}),
        "client 1's state has a last update that is not bytes",
    ),
    # The engine checks its values against the scenario when it takes them
    # back, before the recorder cuts rounds.jsonl back.
    "a legacy random stream": (
        _part("engine", rng=np.random.RandomState(0)),
        "checkpoint refused: the engine's random stream is not a numpy Generator",
    ),
    "more joins than the scenario sets aside": (
        _part("engine", reserved_taken={0: 1}),
        "checkpoint refused: the engine's reserved_taken counts more joins than"
        " the scenario sets aside",
    ),
    "a client whose spec is another's": (
        lambda f: {
            **f,
            "engine": {**f["engine"], "specs": {9: f["engine"]["specs"][0]}},
        },
        "checkpoint refused: the engine's clients are not one of client ids to"
        " their ClientSpec",
    ),
}


@pytest.mark.parametrize("case", list(FOREIGN))
def test_a_foreign_or_damaged_snapshot_is_refused_naming_the_part(
    stopped: tuple[Path, list[Any]], tmp_path: Path, case: str
) -> None:
    edit, reason = FOREIGN[case]
    out = _copy(stopped, tmp_path / "edited")
    checkpoint = read_checkpoint(out)
    # Rewritten through write_checkpoint: the checksum holds, the content lies.
    write_checkpoint(
        out, dataclasses.replace(checkpoint, federation=edit(checkpoint.federation))
    )
    _refused(out, re.escape(reason))


def test_a_dp_plan_of_another_budget_is_refused(tmp_path: Path) -> None:
    clusterfed.run(
        small_scenario(rounds=3, dp=DPSpec(epsilon=10)),
        out=tmp_path,
        workers=1,
        checkpoint_every=2,
    )
    (tmp_path / "summary.json").unlink()
    checkpoint = read_checkpoint(tmp_path)
    plans = checkpoint.federation["summary"]["privacy"]
    assert plans.keys() == set(range(6))
    forged = {c: {**plan, "epsilon": 1e-9} for c, plan in plans.items()}
    edit = _part("summary", privacy=forged)
    write_checkpoint(
        tmp_path,
        dataclasses.replace(checkpoint, federation=edit(checkpoint.federation)),
    )
    _refused(
        tmp_path,
        re.escape(
            "checkpoint refused: the summary's client 0's DP plan has epsilon ="
            " 1e-09, this run's dp.epsilon is 10.0"
        ),
    )


def test_a_checkpoint_of_an_older_format_is_refused_naming_both_formats(
    stopped: tuple[Path, list[Any]], tmp_path: Path
) -> None:
    out = _copy(stopped, tmp_path / "old")
    old = dataclasses.replace(read_checkpoint(out), format=FORMAT - 1)
    payload = pickle.dumps(old)
    digest = hashlib.sha256(payload).hexdigest()
    # An intact file, as the previous version wrote it.
    (out / CHECKPOINT).write_bytes(
        MAGIC + f" {FORMAT - 1} sha256 {digest}\n".encode() + payload
    )
    reason = _refused(out, f"written in format {FORMAT - 1} by another version")
    assert f"(format {FORMAT})" in reason


def test_an_older_checkpoint_under_this_format_header_is_refused(
    stopped: tuple[Path, list[Any]], tmp_path: Path
) -> None:
    out = _copy(stopped, tmp_path / "relabelled")
    old = dataclasses.replace(read_checkpoint(out), format=FORMAT - 1)
    write_checkpoint(out, old)  # this format's header, an older payload
    _refused(out, re.escape(f"not a checkpoint of this clusterfed (format {FORMAT})"))


def test_a_pickled_checkpoint_stays_a_checkpoint(
    stopped: tuple[Path, list[Any]],
) -> None:
    # What crosses to a Ray actor or a worker is pickled: it must come back
    # as the same typed value.
    checkpoint = read_checkpoint(stopped[0])
    again = pickle.loads(pickle.dumps(checkpoint))
    assert isinstance(again, Checkpoint)
    assert again.rounds_done == checkpoint.rounds_done
    assert set(again.federation) == set(checkpoint.federation)
    assert pickle.dumps(again.federation["recorder"]) == pickle.dumps(
        checkpoint.federation["recorder"]
    )
