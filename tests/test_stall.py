"""No hang, no lost worker (issue 33): every scenario has a task timeout, a
worker that stalls or dies is replaced with its clients' state, and the
inline runtime does not accept a reply that came past its timeout."""

from __future__ import annotations

import asyncio
import os
import pickle
import signal
import socket
from pathlib import Path
from typing import Any

import pytest

from clusterfed.actors import InlineRuntime, ProcessRuntime
from clusterfed.actors.runtimes import frames, worker
from clusterfed.driving import drive
from clusterfed.errors import ScenarioError
from clusterfed.federation import Federation, build_server
from clusterfed.protocol import ProtocolError, decode
from clusterfed.scenarios import Crash, plan_run
from clusterfed.scenarios.loader import validate, with_overrides
from clusterfed.scenarios.spec import (
    TASK_TIMEOUT_FLOOR_S,
    UNKNOWN_DATASET_TIMEOUT_S,
    DatasetSpec,
    DPSpec,
    Scenario,
)
from clusterfed.types import ClientId
from helpers import small_scenario

TIMEOUT_S = 2.0  # wall clock: ends the stalled task (a real one takes ms)
STALLING = 2  # the client whose reply its worker leaves half sent
ROUND = 1  # the round it happens in


def first_time(flag: Path) -> bool:
    """True once across processes: a replaced worker must not stall again."""
    try:
        flag.open("x").close()
    except FileExistsError:
        return False
    return True


def is_update_of_round(body: bytes, round: int) -> bool:
    try:
        reply = decode(bytes(body))
    except ProtocolError:  # a client's state, pickled: no message
        return False
    return reply.payload.kind == "update_reply" and reply.round == round


def break_worker_mid_reply(
    monkeypatch: pytest.MonkeyPatch, flag: Path, how: str
) -> None:
    """The worker answering STALLING's train task of round ROUND sends half
    the reply's frame, then goes silent ("stall") or exits ("die"). Workers
    are forked after this, so they carry it."""
    send = worker.send_frame

    def half_a_frame(
        sock: socket.socket, kind: int, client_id: int, body: bytes
    ) -> None:
        if (
            kind == frames.REPLY
            and client_id == STALLING
            and is_update_of_round(body, ROUND)
            and first_time(flag)
        ):
            header = frames.HEADER.pack(kind, client_id, len(body))
            sock.sendall(header + bytes(body[: len(body) // 2]))
            if how == "die":
                os._exit(1)
            signal.pause()  # until the runtime kills it
        send(sock, kind, client_id, body)

    monkeypatch.setattr(worker, "send_frame", half_a_frame)


def run(folder: Path, scenario: Scenario) -> tuple[list[dict[str, Any]], float]:
    """The rows of a run on two workers, and STALLING's ε at the end."""
    config = {"scenario": scenario.model_dump(mode="json")}
    federation = Federation(scenario, ProcessRuntime(2), folder, config=config)
    rows = asyncio.run(drive(federation)).rows
    return rows, federation.server.roster.epsilon.get(ClientId(STALLING), 0.0)


def dp_scenario(**changes: Any) -> Scenario:
    return small_scenario(
        rounds=4, task_timeout_s=TIMEOUT_S, dp=DPSpec(epsilon=10), **changes
    )


def client(row: dict[str, Any], cid: int) -> dict[str, Any]:
    return next(c for c in row["clients"] if c["id"] == cid)


@pytest.fixture(scope="module")
def reference_epsilon(tmp_path_factory: pytest.TempPathFactory) -> float:
    """STALLING's ε in a run where its train task of round ROUND just failed."""
    crash = Crash(start=ROUND, target=STALLING, recover_after=1)
    rows, epsilon = run(
        tmp_path_factory.mktemp("reference"), dp_scenario(events=[crash])
    )
    assert not client(rows[ROUND], STALLING)["trained"]
    return epsilon


def test_a_worker_that_stalls_mid_reply_costs_one_round_then_its_clients_train(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    break_worker_mid_reply(monkeypatch, tmp_path / "stalled", "stall")
    rows, _ = run(tmp_path / "run", small_scenario(rounds=4, task_timeout_s=TIMEOUT_S))
    assert (tmp_path / "stalled").exists()
    stalled = client(rows[ROUND], STALLING)
    assert stalled["failed"] and f"no reply within {TIMEOUT_S} s" in stalled["reason"]
    # The run went on, and every round after the stalled one is whole: the
    # worker was replaced, its clients registered on the new one.
    assert len(rows) == 4
    for row in rows[:ROUND] + rows[ROUND + 1 :]:
        assert all(c["trained"] for c in row["clients"]), row["round"]


@pytest.mark.parametrize("how", ["stall", "die"])
def test_a_replaced_worker_gives_its_clients_back_their_privacy_accountant(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    reference_epsilon: float,
    how: str,
) -> None:
    break_worker_mid_reply(monkeypatch, tmp_path / "broken", how)
    rows, epsilon = run(tmp_path / "run", dp_scenario())
    assert (tmp_path / "broken").exists()
    assert not client(rows[ROUND], STALLING)["trained"]
    assert all(client(r, STALLING)["trained"] for r in rows[ROUND + 1 :])
    # A fresh accountant would have forgotten round 0 and report less.
    assert epsilon == pytest.approx(reference_epsilon, rel=1e-12)


class ClockedLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock a test moves forward: a training step that
    "takes" seconds without sleeping."""

    def __init__(self) -> None:
        super().__init__()
        self.offset = 0.0

    def time(self) -> float:
        return super().time() + self.offset


def test_an_inline_task_that_trains_past_its_timeout_fails_rather_than_counts(
    tmp_path: Path,
) -> None:
    timeout = 30.0
    scenario = small_scenario(rounds=3, task_timeout_s=timeout)
    runtime = InlineRuntime()
    handle = runtime.host.handle

    async def slow_in_round(cid: int, data: bytes) -> bytes | None:
        request = decode(data)
        train = request.payload.kind == "train_task"
        if cid == STALLING and request.round == ROUND and train:
            loop = asyncio.get_running_loop()
            assert isinstance(loop, ClockedLoop)
            loop.offset += 2 * timeout  # a step that blocks the loop that long
        return await handle(cid, data)

    runtime.host.handle = slow_in_round  # type: ignore[method-assign]
    config = {"scenario": scenario.model_dump(mode="json")}
    federation = Federation(scenario, runtime, tmp_path, config=config)
    with asyncio.Runner(loop_factory=ClockedLoop) as runner:
        rows = runner.run(drive(federation)).rows
    late = client(rows[ROUND], STALLING)
    assert not late["trained"] and f"no reply within {timeout} s" in late["reason"]
    # (Requests sent with it and served after it ran out of time as well.)
    for row in rows[:ROUND] + rows[ROUND + 1 :]:
        assert all(c["trained"] for c in row["clients"]), row["round"]


def test_an_inline_request_whose_time_ran_out_while_it_waited_is_not_served() -> None:
    runtime = InlineRuntime()
    served: list[int] = []

    async def handle(cid: int, data: bytes) -> bytes | None:
        served.append(cid)
        asyncio.get_running_loop().offset += 10.0  # type: ignore[attr-defined]
        return b"reply"

    runtime.host.handle = handle  # type: ignore[method-assign]

    async def two_at_once() -> list[Any]:
        return await asyncio.gather(
            *(asyncio.wait_for(runtime.request(c, b"", b""), 5.0) for c in (0, 1)),
            return_exceptions=True,
        )

    with asyncio.Runner(loop_factory=ClockedLoop) as runner:
        first, second = runner.run(two_at_once())
    # The first trained past its 5 s; the second's 5 s passed while the first
    # blocked the loop, so it never started.
    assert isinstance(first, TimeoutError) and isinstance(second, TimeoutError)
    assert served == [0]


def test_a_scenario_that_sets_no_timeout_gets_a_generous_one_at_the_server() -> None:
    scenario = small_scenario()
    assert scenario.task_timeout_s == "auto"
    server = build_server(plan_run(scenario), InlineRuntime())
    assert server.courier.task_timeout_s == TASK_TIMEOUT_FLOOR_S == 300.0


def test_the_automatic_timeout_grows_with_the_work_a_host_can_be_given() -> None:
    # Fashion-MNIST: 60,000 samples × 1 epoch × 0.02 s; then 2 epochs.
    fashion = small_scenario(dataset=DatasetSpec(name="fashion_mnist"))
    assert fashion.task_timeout() == 1200.0
    # "auto" is what a scenario holds, so a changed one derives its own.
    longer = with_overrides(fashion, ["train.epochs=2"])
    assert longer.task_timeout_s == "auto" and longer.task_timeout() == 2400.0
    unknown = small_scenario(dataset=DatasetSpec(name="my_data", root="data/mine"))
    assert unknown.task_timeout() == UNKNOWN_DATASET_TIMEOUT_S


@pytest.mark.parametrize("none", ["none", "None", "off"])
def test_none_set_explicitly_waits_forever(none: str) -> None:
    scenario = validate({"name": "x", "task_timeout_s": none}, source="t.toml")
    assert scenario.task_timeout_s is None and scenario.task_timeout() is None
    server = build_server(plan_run(scenario), InlineRuntime())
    assert server.courier.task_timeout_s is None


@pytest.mark.parametrize("bad", [0, -1.5, "soon", True, float("nan")])
def test_a_timeout_that_is_no_limit_is_refused_naming_it(bad: object) -> None:
    with pytest.raises(ScenarioError, match=r"task_timeout_s: .* is no limit"):
        validate({"name": "x", "task_timeout_s": bad}, source="t.toml")


def test_a_checkpoint_keeps_the_state_of_clients_whose_worker_was_lost(
    tmp_path: Path,
) -> None:
    # A worker lost between rounds (before a replacement): its clients'
    # privacy accountants come from what they sent with their last reply,
    # so a checkpoint taken then does not reset their ε.
    scenario = dp_scenario()
    config = {"scenario": scenario.model_dump(mode="json")}
    runtime = ProcessRuntime(1)
    federation = Federation(scenario, runtime, tmp_path / "run", config=config)

    async def go() -> tuple[dict[int, Any], dict[int, Any]]:
        await federation.start()
        await federation.step(0)
        before = await runtime.states()
        worker = runtime._workers[0]
        worker.process.kill()
        await asyncio.to_thread(worker.process.join, 10)
        after = await runtime.states()
        await federation.close()
        return before, after

    before, after = asyncio.run(go())
    assert before and sorted(after) == sorted(before)
    for cid, state in before.items():
        assert pickle.dumps(after[cid]) == pickle.dumps(state)
