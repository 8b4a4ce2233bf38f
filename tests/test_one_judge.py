"""One judge in both modes: an update is settled by the same code whether a
synchronous round or the asynchronous driver scheduled its task.

Each case runs twice, `mode = "sync"` and `mode = "async"`, through the step
harness (`clusterfed.testing.ServerHarness`, which drives the asynchronous
driver for an async scenario). The hostile client rewrites every train reply
it sends; the reference run rewrites them into an update for a cluster that
was never sent, which both modes have always refused. A lie the server
catches is refused with its own reason and leaves the models bit for bit
those of the reference: the refusal, not the lie, decided the run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import msgpack
import numpy as np
import pytest
from test_hostile import one_torch_thread  # noqa: F401  (autouse: one thread)

from clusterfed.actors import ParameterServer, RoundOutcome
from clusterfed.algorithms._aggregate import ClusterSums, scaled, weighted_mean
from clusterfed.protocol import decode, encode
from clusterfed.protocol.tensor import TENSOR_EXT, pack_tensor
from clusterfed.testing import Request, ServerHarness
from clusterfed.types import ClientId, ClusterId
from helpers import small_scenario

HOSTILE = ClientId(2)
MODES = ["sync", "async"]


Forge = Callable[[dict[str, Any], np.ndarray], None]
"""Rewrites a train reply's raw payload in place, given its honest delta."""


def forged(forge: Forge) -> Callable[[bytes], bytes]:
    def rewrite(reply: bytes) -> bytes:
        raw = msgpack.unpackb(
            reply, raw=False, ext_hook=lambda c, d: msgpack.ExtType(c, d)
        )
        delta = decode(reply).payload.delta  # type: ignore[union-attr]
        forge(raw["payload"], delta)
        payload = raw["payload"]
        if isinstance(payload.get("delta"), np.ndarray):
            payload["delta"] = msgpack.ExtType(
                TENSOR_EXT, pack_tensor(payload["delta"])
            )
        return msgpack.packb(raw, use_bin_type=True)

    return rewrite


def unsent_cluster(payload: dict[str, Any], delta: np.ndarray) -> None:
    payload["cluster"] = 99


def garbage(reply: bytes) -> bytes:
    """The reference of a refusal by the codec: bytes that are no message."""
    return b"\xc1" + reply[1:]


def run(
    mode: str,
    forge: Forge | Callable[[bytes], bytes],
    *,
    rounds: int = 4,
    join_n_train: int | None = None,
    **changes: Any,
) -> tuple[ParameterServer, list[RoundOutcome]]:
    """Six clients, IFCA weighted by sample counts (it runs in both modes);
    every train reply of the hostile client rewritten by `forge`, and its
    join declaring `join_n_train` samples if given."""
    scenario = small_scenario(
        rounds=rounds,
        mode=mode,
        algorithm="ifca",
        algorithm_params={"ifca": {"clusters": 1, "mean": "weighted"}},
        **changes,
    )
    harness = ServerHarness(scenario)
    rewrite = forge if forge is garbage else forged(forge)  # type: ignore[arg-type]

    async def answer(request: Request) -> bytes | None:
        reply = await harness.honest(request)
        assert reply is not None
        if request.kind == "train_task" and request.client == HOSTILE:
            return rewrite(reply)
        return reply

    async def go() -> tuple[ParameterServer, list[RoundOutcome]]:
        data = {}
        if join_n_train is not None:
            join = decode(harness.clients[HOSTILE].join_request())
            lie = join.payload.model_copy(update={"n_train": join_n_train})
            data[HOSTILE] = encode(join.model_copy(update={"payload": lie}))
        await harness.join(data=data)
        return harness.server, [
            await harness.run_round(r, answer) for r in range(rounds)
        ]

    return asyncio.run(go())


def assert_same_models(a: ParameterServer, b: ParameterServer) -> None:
    assert a.state.models.keys() == b.state.models.keys()
    for cluster, model in a.state.models.items():
        np.testing.assert_array_equal(model, b.state.models[cluster])


def hostile_refusals(outcomes: list[RoundOutcome]) -> list[str]:
    """Every refusal of the run: each must be of the hostile client."""
    reasons = [r for o in outcomes for r in o.rejections]
    assert all(r.startswith(f"client {HOSTILE}: ") for r in reasons), reasons
    return reasons


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("forge", "reason"),
    [
        (
            lambda p, d: p.update(n_samples=10**6),
            "n_samples 1000000 is outside [1, ",
        ),
        (
            lambda p, d: p.update(delta=np.where(np.arange(d.size) == 0, 3e38, d)),
            "max_update_ratio bounds it",
        ),
        (
            lambda p, d: p.update(delta=np.full_like(d, 1e30)),
            "max_update_ratio bounds it",
        ),
        (lambda p, d: p.update(n_samples=0), "n_samples 0 is outside [1, "),
        (lambda p, d: p.update(delta=d[:-1]), "delta has shape"),
        (lambda p, d: p.update(delta=d * 1e3), "above max_update_norm = 50"),
        (lambda p, d: p.update(cluster=7), "update for cluster 7, which was not sent"),
        (
            lambda p, d: p.update(cluster="global"),
            "update for the global model, which was not sent",
        ),
    ],
    ids=[
        "more samples than n_train",
        "one 3e38",
        "1e30 all",
        "no samples",
        "short delta",
        "over the norm bound",
        "unsent cluster",
        "global model not sent",
    ],
)
def test_a_lie_is_refused_alike_in_sync_and_async_mode(
    mode: str, forge: Forge, reason: str
) -> None:
    # A norm bound of 50 for its own case only: the ratio guard comes after it.
    bound = 50.0 if reason.startswith("above max_update_norm") else None
    server, outcomes = run(mode, forge, max_update_norm=bound)
    reference, expected = run(mode, unsent_cluster, max_update_norm=bound)
    refusals = hostile_refusals(outcomes)
    assert refusals and all(reason in r for r in refusals), refusals
    assert len(refusals) == len(hostile_refusals(expected))
    assert_same_models(server, reference)
    for model in server.state.models.values():
        assert np.isfinite(model).all()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("forge", "reason"),
    [
        (lambda p, d: p.update(n_samples=2**63), "less than or equal"),
        (lambda p, d: p.update(n_samples="12"), "Input should be a valid integer"),
        (lambda p, d: p.update(n_samples=4.0), "Input should be a valid integer"),
        (lambda p, d: p.update(delta=np.full_like(d, np.nan)), "NaN"),
        (lambda p, d: p.update(compute_s=0.0), "compute_s"),
        (lambda p, d: p.update(samples_seen=2**31), "less than or equal"),
        (lambda p, d: p.update(admin=True), "admin"),
    ],
    ids=[
        "2**63 samples",
        "count as text",
        "count as float",
        "NaN",
        "a claimed compute time",
        "2**31 samples seen",
        "field",
    ],
)
def test_a_malformed_update_is_refused_alike_in_sync_and_async_mode(
    mode: str, forge: Forge, reason: str
) -> None:
    # Refused by the codec, before any judge: the reference is an update
    # that is no message at all.
    server, outcomes = run(mode, forge)
    reference, expected = run(mode, garbage)
    refusals = hostile_refusals(outcomes)
    assert refusals and all(reason in r for r in refusals), refusals
    assert len(refusals) == len(hostile_refusals(expected))
    assert_same_models(server, reference)


@pytest.mark.parametrize("mode", MODES)
def test_a_sample_count_declared_at_join_weighs_at_most_its_cap(mode: str) -> None:
    # The lie moved to join time: declared and reported 2**31 - 1 samples,
    # inside every bound. Its weight is capped at max_weight_ratio × the
    # median declared count: the run equals one where it declared the cap.
    honest = [len(c.train) for c in ServerHarness(small_scenario()).plan.clients]
    others = sorted(n for i, n in enumerate(honest) if i != HOSTILE)
    cap = 10 * int(np.median([*others, 2**31 - 1]))
    assert cap < 2**31 - 1 and cap == 10 * int(np.median([*others, cap]))

    def claim(n: int) -> Forge:
        return lambda p, d: p.update(n_samples=n)

    server, outcomes = run(mode, claim(2**31 - 1), join_n_train=2**31 - 1)
    reference, _ = run(mode, claim(cap), join_n_train=cap)
    assert not hostile_refusals(outcomes)
    assert_same_models(server, reference)
    reasons = [c.reason for o in outcomes for c in o.clients if c.id == HOSTILE]
    assert any(r and f"weighed as {cap}" in r for r in reasons), reasons
    uncapped, _ = run(
        mode, claim(2**31 - 1), join_n_train=2**31 - 1, max_weight_ratio="none"
    )
    assert not np.array_equal(uncapped.state.models[0], server.state.models[0])


def test_an_absurd_update_neither_freezes_nor_ruins_the_model() -> None:
    # One coordinate at 3e38 passed every check before the guard; weighted
    # by its sample count it overflowed the mean, and every round's
    # aggregation was refused: the model froze for the whole run.
    def peak(p: dict[str, Any], d: np.ndarray) -> None:
        p.update(delta=np.where(np.arange(d.size) == 0, 3e38, d).astype(np.float32))

    server, outcomes = run("sync", peak)
    assert not any("aggregation refused" in r for o in outcomes for r in o.rejections)
    start = ServerHarness(small_scenario()).server.state.models[0]
    model = server.state.models[0]
    assert not np.array_equal(model, start)
    assert float(np.abs(model).max()) < 100.0


def test_an_undecodable_reply_in_async_mode_rests_its_client_instead_of_spinning() -> (
    None
):
    # A reply the codec refuses takes no simulated time: restarted at once,
    # the client's next task came back at the same instant, for ever.
    server, outcomes = run("async", lambda p, d: p.update(n_samples="12"), rounds=3)
    refusals = hostile_refusals(outcomes)
    assert refusals and all("valid integer" in r for r in refusals)
    assert len(refusals) <= 3  # at most one a round: it rests until the next


def test_a_weighted_sum_that_overflows_float32_is_formed_in_float64() -> None:
    # With the guards lifted: 2**31 - 1 samples times a coordinate at 3e38
    # was Inf in float32, and the mean of the cluster with it.
    delta = np.array([3e38, 1.0], dtype=np.float32)
    other = np.array([-1.0, 1.0], dtype=np.float32)
    weight = float(2**31 - 1)
    sums = ClusterSums()
    sums.add(ClusterId(0), delta, weight)
    sums.add(ClusterId(0), other, 1.0)
    expected = (np.float64(delta[0]) * weight - 1.0) / (weight + 1.0)
    mean = sums.mean(ClusterId(0))
    assert np.isfinite(mean).all()
    np.testing.assert_allclose(mean[0], expected, rtol=1e-12)
    np.testing.assert_array_equal(weighted_mean([delta, other], [weight, 1.0]), mean)
    # Where float32 holds the product, it is formed as it always was.
    honest = np.array([0.5, -0.25], dtype=np.float32)
    np.testing.assert_array_equal(scaled(honest, 3.0), np.float32(3.0) * honest)
