"""The server's clock times every task (issue 32): a client reports the
samples it processed, never seconds; the clock holds each client's device and
straggler slowdown, and a straggler event changes the clock, not the client."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest

import clusterfed
from clusterfed.actors import DeviceProfile, InlineRuntime, SimClock
from clusterfed.actors.clock import devices_problem
from clusterfed.actors.validation import SAMPLES_SEEN_SLACK, max_samples_seen
from clusterfed.checkpoint import read_checkpoint
from clusterfed.driving import drive
from clusterfed.federation import Federation
from clusterfed.protocol import TrainTask, UpdateReply, decode
from clusterfed.protocol.tensor import TENSOR_EXT, pack_tensor
from clusterfed.scenarios import Network, Straggle, plan_run
from clusterfed.testing import Request, ServerHarness
from clusterfed.types import ClientId
from helpers import read_rounds, small_scenario

SLOW = DeviceProfile(samples_per_s=100.0, bandwidth_bps=1e6, latency_s=0.01)
CLIENT = ClientId(1)


def _rewrite(reply: bytes, **payload: Any) -> bytes:
    """`reply` with fields of its payload replaced (or added)."""
    raw = msgpack.unpackb(reply, raw=False, ext_hook=lambda c, d: msgpack.ExtType(c, d))
    raw["payload"].update(payload)
    if isinstance(raw["payload"].get("delta"), np.ndarray):
        raw["payload"]["delta"] = msgpack.ExtType(
            TENSOR_EXT, pack_tensor(raw["payload"]["delta"])
        )
    return msgpack.packb(raw, use_bin_type=True)


def _one_round(
    rewrite: dict[str, Any] | None = None,
) -> tuple[ServerHarness, Any, dict[str, Any]]:
    """Round 0 of FedAvg with client 1 on a slow device; its train reply
    rewritten with `rewrite`. Returns the harness, the outcome and what
    client 1's train exchange was: its bytes both ways and its reply."""
    harness = ServerHarness(small_scenario(devices={int(CLIENT): SLOW}))
    seen: dict[str, Any] = {}

    async def answer(request: Request) -> bytes | None:
        reply = await harness.honest(request)
        assert reply is not None
        if request.client == CLIENT and request.kind == "train_task":
            if rewrite is not None:
                reply = _rewrite(reply, **rewrite)
            seen.update(down=len(request.data), up=len(reply), reply=reply)
            seen["task"] = request.envelope.payload
        return reply

    async def go() -> Any:
        await harness.join()
        return await harness.run_round(0, answer)

    return harness, asyncio.run(go()), seen


def test_the_server_times_an_update_by_the_samples_it_reports_on_its_own_clock() -> (
    None
):
    harness, outcome, seen = _one_round()
    reply = decode(seen["reply"]).payload
    assert isinstance(reply, UpdateReply)
    assert not hasattr(reply, "compute_s")  # the wire carries no time
    n_train = len(harness.plan.clients[CLIENT].train)
    assert reply.samples_seen == n_train  # one epoch, one model
    clock = harness.server.clock
    assert clock.profile(CLIENT) == SLOW  # the scenario's device, on the clock
    compute = reply.samples_seen / SLOW.samples_per_s
    expected = clock.exchange_s(CLIENT, seen["down"], compute, seen["up"])
    record = next(c for c in outcome.clients if c.id == CLIENT)
    assert record.status == "ok"
    assert record.sim_s == expected


def test_a_client_cannot_claim_its_compute_time() -> None:
    # protocol 2 has no such field: the claim is an unknown key, refused
    _, outcome, _ = _one_round(rewrite={"compute_s": 0.0})
    record = next(c for c in outcome.clients if c.id == CLIENT)
    assert record.status == "rejected"
    assert "compute_s" in (record.reason or "")


def test_a_hostile_samples_seen_is_refused_and_timed_at_most_at_its_bound() -> None:
    harness, outcome, seen = _one_round(rewrite={"samples_seen": 10**9})
    record = next(c for c in outcome.clients if c.id == CLIENT)
    assert record.status == "rejected"
    assert (record.reason or "").startswith("samples_seen 1000000000 is over")
    task = seen["task"]
    assert isinstance(task, TrainTask)
    n_train = len(harness.plan.clients[CLIENT].train)
    most = max_samples_seen(n_train, task.config.epochs, len(task.models))
    assert most == n_train * (SAMPLES_SEEN_SLACK + 1)
    # The refused claim stretches its task to the bound, no further.
    clock = harness.server.clock
    bound = clock.exchange_s(
        CLIENT, seen["down"], most / SLOW.samples_per_s, seen["up"]
    )
    assert record.sim_s == bound
    assert outcome.sim_duration <= bound + 1.0  # not 10⁹ / 100 s


def test_an_honest_count_at_the_bound_is_accepted() -> None:
    harness = ServerHarness(small_scenario())
    n_train = len(harness.plan.clients[CLIENT].train)
    most = max_samples_seen(n_train, 1, 1)

    async def go(round: int, samples: int) -> Any:
        async def answer(request: Request) -> bytes | None:
            reply = await harness.honest(request)
            assert reply is not None
            if request.client == CLIENT and request.kind == "train_task":
                return _rewrite(reply, samples_seen=samples)
            return reply

        return await harness.run_round(round, answer)

    async def both() -> tuple[Any, Any]:
        await harness.join()
        return await go(0, most), await go(1, most + 1)

    at, over = asyncio.run(both())
    assert next(c for c in at.clients if c.id == CLIENT).status == "ok"
    assert next(c for c in over.clients if c.id == CLIENT).status == "rejected"


class SpyRuntime(InlineRuntime):
    """Clients in this process; every spec update recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.updates: list[int] = []

    async def update(self, spec: Any) -> None:
        self.updates.append(spec.id)
        await super().update(spec)


def _run(tmp_path: Path, name: str, **changes: Any) -> tuple[list[dict], SpyRuntime]:
    scenario = small_scenario(rounds=3, **changes)
    runtime = SpyRuntime()
    config = {"scenario": scenario.model_dump(mode="json")}
    federation = Federation(scenario, runtime, tmp_path / name, config=config)
    return asyncio.run(drive(federation)).rows, runtime


def test_a_straggle_event_slows_the_clock_and_updates_no_hosted_client(
    tmp_path: Path,
) -> None:
    straggle = Straggle(start=1, target=2, factor=10.0, rounds=1)
    rows, runtime = _run(tmp_path, "straggle", events=[straggle])
    plain, _ = _run(tmp_path, "plain")
    assert runtime.updates == []  # the host's spec never changed
    sims = {
        r: {c["id"]: c["sim_s"] for c in row["clients"]} for r, row in enumerate(rows)
    }
    plain_sims = {
        r: {c["id"]: c["sim_s"] for c in row["clients"]} for r, row in enumerate(plain)
    }
    # The same work and bytes; only client 2's compute in round 1 is 10×.
    clients = plan_run(small_scenario(rounds=3)).clients
    n_train = len(next(s for s in clients if s.id == 2).train)
    compute = n_train / DeviceProfile().samples_per_s
    assert sims[1][2] - plain_sims[1][2] == pytest.approx(9 * compute, rel=1e-9)
    assert sims[0] == plain_sims[0] and sims[2] == plain_sims[2]
    assert {c: s for c, s in sims[1].items() if c != 2} == {
        c: s for c, s in plain_sims[1].items() if c != 2
    }


def test_the_clock_keeps_devices_and_slowdowns_and_gives_them_back() -> None:
    clock = SimClock()
    clock.profiles[CLIENT] = SLOW
    clock.straggle(CLIENT, 4.0)
    assert clock.compute_s(CLIENT, 200) == 200 / 100.0 * 4.0
    assert clock.compute_s(ClientId(9), 500) == 1.0  # the default device
    devices = clock.devices()
    fresh = SimClock()
    fresh.restore_devices(devices)
    assert fresh.profiles == {CLIENT: SLOW} and fresh.slowdowns == {CLIENT: 4.0}
    clock.straggle(CLIENT, 1.0)  # back to normal: no entry left
    assert clock.slowdowns == {} and fresh.slowdowns == {CLIENT: 4.0}
    with pytest.raises(ValueError, match="positive"):
        clock.straggle(CLIENT, 0.0)
    assert devices_problem({"profiles": {1: "fast"}, "slowdowns": {}}) is not None
    assert devices_problem({"profiles": {}, "slowdowns": {1: -2.0}}) is not None
    with pytest.raises(ValueError, match="slowdowns"):
        fresh.restore_devices({"profiles": {}, "slowdowns": {CLIENT: float("nan")}})


def test_a_resumed_run_keeps_the_clocks_stragglers_and_links(tmp_path: Path) -> None:
    # The straggle spans the checkpoint after round 2 and the link changed
    # before it: the resumed rounds time client 2 and 3 as the first run did.
    scenario = small_scenario(
        rounds=5,
        events=[
            Straggle(start=1, target=2, factor=50.0, rounds=10),
            Network(start=1, target=3, latency_s=0.4, bandwidth_bps=1e5),
        ],
    )
    first = clusterfed.run(scenario, out=tmp_path, workers=1, checkpoint_every=2)
    assert read_checkpoint(tmp_path).rounds_done == 4
    devices = read_checkpoint(tmp_path).federation["devices"]
    assert devices["slowdowns"] == {2: 50.0}
    assert devices["profiles"][3].latency_s == 0.4
    (tmp_path / "summary.json").unlink()
    clusterfed.resume(tmp_path, workers=1)
    rows = read_rounds(tmp_path)
    assert [r["sim_time"] for r in rows] == [r["sim_time"] for r in first.rows]
    sims = [{c["id"]: c["sim_s"] for c in r["clients"]} for r in rows]
    assert sims == [{c["id"]: c["sim_s"] for c in r["clients"]} for r in first.rows]
