"""The local runtime's frames: a model that many clients get crosses to each
worker once and is cited after, within the worker's budget, and the run is
bit for bit the run of one process."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from clusterfed.actors import InlineRuntime, ProcessRuntime
from clusterfed.actors.host import ClientHost
from clusterfed.actors.runtimes import frames, processes
from clusterfed.actors.runtimes.processes import _Worker
from clusterfed.actors.runtimes.worker import answer
from clusterfed.actors.trace import TraceMode
from clusterfed.driving import drive
from clusterfed.federation import Federation
from clusterfed.scenarios import Scenario
from helpers import small_scenario


def final_models(
    tmp: Path, scenario: Scenario, runtime: Any, trace: TraceMode | None = None
) -> dict[int, np.ndarray]:
    config = {"scenario": scenario.model_dump(mode="json")}
    federation = Federation(scenario, runtime, tmp, config=config, trace=trace)
    asyncio.run(drive(federation))
    return dict(federation.server.state.models)


class FrameCount:
    """Counts the bodies each worker is asked to keep and the requests that
    cite one; checks a worker never keeps more than its budget."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.kept = 0
        self.cited = 0
        self.sent_whole = 0
        keep, call_parts = _Worker._keep, _Worker.call_parts
        count = self

        def counted_keep(worker: _Worker, body: bytes) -> int:
            known = id(body) in worker.kept
            key = keep(worker, body)
            count.kept += not known
            assert worker.kept_bytes <= processes.KEPT_BYTES
            return key

        async def counted_call(
            worker: _Worker, spec: Any, head: bytes, body: bytes
        ) -> bytes | None:
            if processes.KEEP_AT_LEAST <= len(body) <= processes.KEPT_BYTES:
                count.cited += 1
            else:
                count.sent_whole += 1
            return await call_parts(worker, spec, head, body)

        monkeypatch.setattr(_Worker, "_keep", counted_keep)
        monkeypatch.setattr(_Worker, "call_parts", counted_call)


@pytest.fixture(scope="module")
def scenario() -> Scenario:
    return small_scenario(rounds=3, algorithm="ifca")


@pytest.fixture(scope="module")
def inline_models(
    scenario: Scenario, tmp_path_factory: pytest.TempPathFactory
) -> dict[int, np.ndarray]:
    return final_models(tmp_path_factory.mktemp("inline"), scenario, InlineRuntime())


def test_a_model_crosses_to_each_worker_once_a_phase(
    scenario: Scenario,
    inline_models: dict[int, np.ndarray],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(processes, "KEEP_AT_LEAST", 1024)  # the models are small
    count = FrameCount(monkeypatch)
    models = final_models(tmp_path, scenario, ProcessRuntime(2))
    # IFCA sends both cluster models in one payload to every client: one
    # body a phase, kept once by each of the two workers.
    assert count.cited > 2 * count.kept > 0
    assert count.sent_whole > 0  # the small requests go whole (no model)
    assert models.keys() == inline_models.keys()
    for k in models:
        np.testing.assert_array_equal(models[k], inline_models[k])


def test_a_traced_run_still_sends_a_model_to_each_worker_once(
    scenario: Scenario,
    inline_models: dict[int, np.ndarray],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The tracing wrapper passes the request's parts on: joined, every
    # model would cross to a worker with every request.
    monkeypatch.setattr(processes, "KEEP_AT_LEAST", 1024)
    count = FrameCount(monkeypatch)
    models = final_models(tmp_path, scenario, ProcessRuntime(2), trace="headers")
    assert count.cited > 2 * count.kept > 0
    for k in models:
        np.testing.assert_array_equal(models[k], inline_models[k])


def test_a_worker_over_its_budget_forgets_the_oldest_and_the_run_is_the_same(
    scenario: Scenario,
    inline_models: dict[int, np.ndarray],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    body = sum(m.nbytes for m in inline_models.values())
    # Room for one model body (plus its framing): each new one forgets the last.
    monkeypatch.setattr(processes, "KEPT_BYTES", body + 4096)
    monkeypatch.setattr(processes, "KEEP_AT_LEAST", 1024)
    forgotten: list[int] = []
    connect = _Worker.connect

    class Spy:
        """A worker's transport, noting the keys of the FORGET frames."""

        def __init__(self, transport: Any) -> None:
            self.transport = transport

        def write(self, data: bytes) -> None:
            if bytes(data[:1]) == bytes([frames.FORGET]):
                forgotten.append(frames.HEADER.unpack(bytes(data))[1])
            self.transport.write(data)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.transport, name)

    async def spied_connect(worker: _Worker) -> None:
        await connect(worker)
        worker.writer = Spy(worker.writer)

    monkeypatch.setattr(_Worker, "connect", spied_connect)
    count = FrameCount(monkeypatch)
    models = final_models(tmp_path, scenario, ProcessRuntime(2))
    assert forgotten and count.kept > len(forgotten)
    for k in models:
        np.testing.assert_array_equal(models[k], inline_models[k])


def test_a_worker_answers_a_citation_of_a_body_it_does_not_keep_with_an_error() -> None:
    with pytest.raises(LookupError, match="cites request body 7, which is not kept"):
        answer(
            asyncio.new_event_loop(),
            ClientHost(),
            {},
            frames.CITE,
            1,
            frames.KEY.pack(7) + b"head",
        )
