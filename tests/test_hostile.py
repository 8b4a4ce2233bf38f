"""Hostile inputs through a running server: each is refused with its reason,
the cluster models are bit for bit what they would be without it, and the run
goes on — in synchronous rounds and in asynchronous mode alike.

Clients run in this process behind the step harness
(`clusterfed.testing.ServerHarness`): a test's answer rewrites one reply, or
makes a client push a message to the server on its own, as a hostile or broken
client would. The reference run is the same run where the hostile message
never came (the client's update failed, or nothing was pushed).

Every test that sends the server something runs in both modes (`MODES`): a
synchronous round and the asynchronous driver settle a train reply through one
object (`Round.settle`), and a drift between them fails here. Sync mode runs
FedAvg; FedAvg has no asynchronous mode, so async mode runs its counterpart,
IFCA with one model weighted by sample count (test_one_judge.py's). What
legitimately differs by mode is asserted per mode: an async "round" is one
aggregation (a buffer of arrivals), so a refusal is found in the aggregation
where the reply arrived rather than at a fixed index; and a task's timing
decides the async schedule, so an update the round's judge refuses is
compared with one refused by the same judge (`dropped`), not with a failure.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import msgpack
import numpy as np
import pytest
import torch

from clusterfed.actors import ParameterServer, RoundOutcome
from clusterfed.protocol import Envelope, UpdateReply, decode, encode
from clusterfed.protocol.tensor import TENSOR_EXT, pack_tensor
from clusterfed.scenarios import Scenario
from clusterfed.testing import Request, ServerHarness
from clusterfed.types import ClientId
from helpers import small_scenario

HOSTILE = ClientId(2)
MODES = ["sync", "async"]
ROUNDS = {"sync": 3, "async": 3}
"""Rounds of a run by mode; in async mode aggregations of `BUFFER` arrivals."""
BUFFER = 6
"""Async mode: the updates a buffer gathers before the model moves. One per
client, so an aggregation is about a round's updates: the hostile client's
task 1 arrives within 3 of them (seed 0: in the second), and an aggregation
evaluates every client once, as a round does (3 buffers of 3 took 6
aggregations, twice the evaluations)."""

Rewrite = Callable[[ClientId, int, bytes], bytes]
Push = Callable[[ParameterServer, ClientId, int], Awaitable[None]]


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    # As the runtimes train: tiny models on a busy machine train far faster.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def hostile_scenario(
    mode: str = "sync", rounds: int | None = None, **changes: Any
) -> Scenario:
    """Six clients of `small_scenario` in `mode`: FedAvg in sync mode, IFCA
    with one model weighted by sample count in async mode (`BUFFER`)."""
    if mode == "async":
        ifca = {"clusters": 1, "mean": "weighted", "buffer_size": BUFFER}
        changes = {"algorithm": "ifca", "algorithm_params": {"ifca": ifca}, **changes}
    return small_scenario(
        rounds=ROUNDS[mode] if rounds is None else rounds, mode=mode, **changes
    )


def run(
    rounds: int | None = None,
    *,
    mode: str = "sync",
    rewrite: Rewrite | None = None,
    push: Push | None = None,
    leave: tuple[ClientId, int] | None = None,
    kind: str = "train_task",
    log: list[Request] | None = None,
    **changes: Any,
) -> tuple[ParameterServer, list[RoundOutcome]]:
    """A federation of six clients through the step harness.

    `rewrite(client, n, reply)` returns the bytes delivered instead of the
    honest reply to the client's `n`-th task of `kind`, counted from 0 — its
    round in sync mode, where a client has one task a round; in async mode a
    fast client may have several in one aggregation (raise to make the
    exchange fail). `push(server, client, round)` runs before each train
    request, `round` the request's (in async mode the aggregation that sent
    it), to send the server messages on the side; `leave = (client, round)`
    makes a client leave before that round. `log` gets every request the
    server sent."""
    scenario = hostile_scenario(mode, rounds, **changes)
    harness = ServerHarness(scenario)
    tasks: Counter[tuple[int, str]] = Counter()

    async def answer(request: Request) -> bytes | None:
        client = ClientId(request.client)
        n = tasks[(client, request.kind)]
        tasks[(client, request.kind)] += 1
        if request.kind == "train_task" and push is not None:
            await push(harness.server, client, request.round)
        reply = await harness.honest(request)
        assert reply is not None
        if request.kind == kind and rewrite is not None:
            return rewrite(client, n, reply)
        return reply

    async def go() -> tuple[ParameterServer, list[RoundOutcome]]:
        await harness.join()
        outcomes = []
        for r in range(scenario.rounds):
            if leave is not None and leave[1] == r:
                notice = harness.clients[leave[0]].leave_notice("bye")
                await harness.server.handle(notice, leave[0])
            outcomes.append(await harness.run_round(r, answer))
        if log is not None:
            log.extend(harness.requests)
        return harness.server, outcomes

    return asyncio.run(go())


def in_round(round: int, forge: Callable[[bytes], bytes]) -> Rewrite:
    """`forge` the hostile client's reply to its task `round` (see `run`)."""

    def rewrite(client: ClientId, n: int, reply: bytes) -> bytes:
        return forge(reply) if client == HOSTILE and n == round else reply

    return rewrite


def fails(round: int) -> Rewrite:
    """The reference: the hostile client's update of `round` simply fails."""

    def vanish(reply: bytes) -> bytes:
        raise ConnectionError("client vanished")

    return in_round(round, vanish)


def with_payload(**fields: Any) -> Callable[[bytes], bytes]:
    """Rewrite fields of a reply's payload, below the codec (as a hostile
    client's own encoder would)."""

    def forge(reply: bytes) -> bytes:
        raw = msgpack.unpackb(
            reply, raw=False, ext_hook=lambda c, d: msgpack.ExtType(c, d)
        )
        for key, value in fields.items():
            if isinstance(value, np.ndarray):
                value = msgpack.ExtType(TENSOR_EXT, pack_tensor(value))
            raw["payload"][key] = value
        return msgpack.packb(raw, use_bin_type=True)

    return forge


def dropped(mode: str, round: int) -> Rewrite:
    """The reference of an update the round's judge refuses (`check_update`).

    Sync mode: the update simply fails. Async mode: a failed task comes back
    at once and its client rests until the next aggregation, while a judged
    update arrives on the simulated clock and its client starts again then:
    the schedule, and with it the models, would differ. There the reference
    is the update refused by the same judge for another reason (a cluster
    that was never sent). A refusal on reading (codec, ids, rounds) takes no
    simulated time, as a failure: `fails` is its reference in both modes."""
    if mode == "sync":
        return fails(round)
    return in_round(round, with_payload(cluster=99))


def once(round: int, push: Push) -> Push:
    """`push` once, before the first train request of `round` or later: in
    sync mode client 0's of `round`, in async mode the first task the driver
    starts in that aggregation or after."""
    done: list[int] = []

    async def first(server: ParameterServer, client: ClientId, r: int) -> None:
        if r >= round and not done:
            done.append(r)
            await push(server, client, r)

    return first


def assert_same_models(a: ParameterServer, b: ParameterServer) -> None:
    assert a.state.models.keys() == b.state.models.keys()
    for cluster, model in a.state.models.items():
        np.testing.assert_array_equal(model, b.state.models[cluster])
    assert dict(a.state.assignment) == dict(b.state.assignment)


def refused_in(outcomes: list[RoundOutcome]) -> list[int]:
    """The round of each refusal of the run."""
    return [i for i, o in enumerate(outcomes) for _ in o.rejections]


def assert_refused_once(
    outcomes: list[RoundOutcome],
    round: int,
    reason: str,
    *,
    update: bool = True,
    mode: str = "sync",
) -> int:
    """One refusal in the run, for `reason`: in sync mode in `round`, in
    async mode in whichever aggregation the reply arrived (a reply refused on
    reading arrives when it was sent). With `update`, the hostile client's
    row there is refused. Returns the round."""
    rounds = refused_in(outcomes)
    if mode == "sync":
        assert rounds == [round], [o.rejected_messages for o in outcomes]
    assert len(rounds) == 1, [o.rejected_messages for o in outcomes]
    (at,) = rounds
    (rejection,) = outcomes[at].rejections
    assert reason in rejection, rejection
    if update:
        row = {c.id: c for c in outcomes[at].clients}[HOSTILE]
        assert row.rejected and not row.trained and not row.failed
    return at


def others_trained(outcome: RoundOutcome, *hostile: ClientId) -> None:
    """Every update the round settled is accepted but those of `hostile`
    (in sync mode every client's is settled, in async mode the arrivals')."""
    settled = {c.id for c in outcome.clients if c.planned}
    assert {c.id for c in outcome.clients if c.trained} == settled - set(hostile)
    assert set(hostile) <= settled


class Capture:
    """Keeps every train reply by (client, its task number), passing it on
    unchanged (see `run`)."""

    def __init__(self) -> None:
        self.sent: dict[tuple[ClientId, int], bytes] = {}

    def record(self, client: ClientId, n: int, reply: bytes) -> bytes:
        self.sent[(client, n)] = reply
        return reply


def scaled(factor: float) -> Callable[[bytes], bytes]:
    def forge(reply: bytes) -> bytes:
        raw = msgpack.unpackb(
            reply, raw=False, ext_hook=lambda c, d: msgpack.ExtType(c, d)
        )
        delta = decode(reply).payload.delta  # type: ignore[union-attr]
        raw["payload"]["delta"] = msgpack.ExtType(
            TENSOR_EXT, pack_tensor(delta * np.float32(factor))
        )
        return msgpack.packb(raw, use_bin_type=True)

    return forge


@pytest.mark.parametrize("mode", MODES)
def test_an_update_above_the_norm_bound_is_refused(mode: str) -> None:
    server, outcomes = run(
        mode=mode, rewrite=in_round(1, scaled(1e4)), max_update_norm=50.0
    )
    reference, _ = run(mode=mode, rewrite=dropped(mode, 1), max_update_norm=50.0)
    assert_refused_once(outcomes, 1, "above max_update_norm = 50", mode=mode)
    assert_same_models(server, reference)


@pytest.mark.parametrize("mode", MODES)
def test_without_a_bound_a_large_update_is_taken(mode: str) -> None:
    # The last round takes the hostile update, 1e4 times what the client
    # trained: its model ends (1e4 - 1) x weight x delta away from the clean
    # run's, the update's weight its share of the samples (sync: the round's;
    # async: its buffer's, discounted by its staleness τ, s(τ) = (τ+1)^-0.5).
    # (Near 1e3 times the model's norm, the default max_update_ratio would
    # refuse it.)
    changes: dict[str, Any] = {"max_update_ratio": None}
    rounds = 2
    if mode == "async":
        # Buffers of 3, so the last one is 3 clients' updates, one each (a
        # fast client may bring two to a larger one); the run ends with the
        # aggregation the hostile client's task 1 arrives in.
        ifca = {"clusters": 1, "mean": "weighted", "buffer_size": 3}
        changes["algorithm_params"] = {"ifca": ifca}
        _, probe = run(6, mode=mode, **changes)
        arrivals = [
            i
            for i, o in enumerate(probe)
            for c in o.clients
            if c.id == HOSTILE and c.planned
        ]
        rounds = arrivals[1] + 1
    transport = Capture()
    clean, _ = run(rounds, mode=mode, rewrite=transport.record, **changes)
    server, outcomes = run(
        rounds, mode=mode, rewrite=in_round(1, scaled(1e4)), **changes
    )
    assert refused_in(outcomes) == []
    last = outcomes[-1]
    settled = {c.id: c for c in last.clients if c.planned}
    assert all(c.trained for c in settled.values())
    assert len(settled) == (6 if mode == "sync" else 3)
    samples: dict[ClientId, int] = {}
    for (client, _), data in transport.sent.items():
        payload = decode(data).payload
        assert isinstance(payload, UpdateReply)
        samples[client] = payload.n_samples
    hostile = decode(transport.sent[(HOSTILE, 1)]).payload
    assert isinstance(hostile, UpdateReply)
    assert HOSTILE in settled and hostile.n_samples == samples[HOSTILE]
    share = samples[HOSTILE] / sum(samples[c] for c in settled)
    if mode == "async":
        staleness = settled[HOSTILE].staleness
        assert staleness is not None
        share *= (staleness + 1) ** -0.5
    expected = (1e4 - 1) * share * hostile.delta.astype(np.float64)
    moved = server.state.models[0].astype(np.float64) - clean.state.models[0]
    assert np.linalg.norm(expected) > 1.0  # far more than a round's step
    np.testing.assert_allclose(moved, expected, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("mode", MODES)
def test_a_replayed_reply_of_a_round_that_is_over_is_refused(mode: str) -> None:
    transport_sent: dict[int, bytes] = {}

    def replay(client: ClientId, n: int, reply: bytes) -> bytes:
        if client == HOSTILE and n == 1:
            transport_sent[1] = reply
        if client == HOSTILE and n == 2:
            return transport_sent[1]  # its reply of task 1, byte for byte
        return reply

    server, outcomes = run(mode=mode, rewrite=replay)
    reference, _ = run(mode=mode, rewrite=fails(2))
    at = assert_refused_once(outcomes, 2, "which is over", mode=mode)
    old = decode(transport_sent[1]).round
    assert (
        f"reply for round {old}, which is over (this is round {at})"
        in outcomes[at].rejections[0]
    )
    assert_same_models(server, reference)


@pytest.mark.parametrize("mode", MODES)
def test_a_duplicate_update_in_the_same_round_is_refused(mode: str) -> None:
    retried: list[int] = []

    async def resend(server: ParameterServer, client: ClientId, round: int) -> None:
        # At the next train request after the hostile client's update of
        # task 1, that update, already received, reaches the server a
        # second time: a retry, the same update under a message id of its own.
        if retried or (HOSTILE, 1) not in transport.sent:
            return
        first = decode(transport.sent[(HOSTILE, 1)])
        retried.extend((first.round, round))  # sent in, retried in
        retry = first.model_copy(update={"msg_id": "client/2:retry"})
        answer = decode(await server.handle(encode(retry)))
        assert answer.payload.kind == "error"

    transport = Capture()
    # Without a wall-clock limit the courier awaits each reply in place, so
    # client 2's reply is taken before the next request comes (a limit
    # wraps each request in a task of its own, which reorders them).
    server, outcomes = run(
        mode=mode, push=resend, rewrite=transport.record, task_timeout_s=None
    )
    clean, _ = run(mode=mode, task_timeout_s=None)
    at = assert_refused_once(
        outcomes, 1, "duplicate: request '", update=False, mode=mode
    )
    assert retried == [at, at]  # in the round of the update it copies
    assert (
        f"already answered by client {HOSTILE} in round {at}"
        in (outcomes[at].rejections[0])
    )
    rows = [c for o in outcomes for c in o.clients if c.id == HOSTILE and c.planned]
    assert rows and all(c.trained for c in rows)  # the first copy counts, once
    assert_same_models(server, clean)


@pytest.mark.parametrize("mode", MODES)
def test_a_reply_already_received_is_refused_as_a_duplicate(mode: str) -> None:
    # The hostile client answers its evaluate task of round 1 with the
    # update it sent in round 1, which the server received (async mode: of
    # the first aggregation from 1 on that sent it a task).
    harness = ServerHarness(hostile_scenario(mode))
    last: dict[int, bytes] = {}
    echoed: list[int] = []  # the round it was sent back in

    async def echo(request: Request) -> bytes | None:
        reply = await harness.honest(request)
        assert reply is not None
        if request.kind == "train_task":
            last[request.client] = reply
        if (
            (request.kind, request.client) == ("evaluate_task", HOSTILE)
            and request.round >= 1
            and not echoed
            and decode(last[HOSTILE]).round == request.round
        ):
            echoed.append(request.round)
            return last[request.client]
        return reply

    async def go() -> tuple[ParameterServer, list[RoundOutcome]]:
        await harness.join()
        rounds = range(ROUNDS[mode])
        return harness.server, [await harness.run_round(r, echo) for r in rounds]

    server, outcomes = asyncio.run(go())
    clean, _ = run(mode=mode)
    at = assert_refused_once(
        outcomes, 1, "duplicate: message 'client/2:re:", update=False, mode=mode
    )
    assert echoed == [at]
    assert f"was already received in round {at}" in outcomes[at].rejections[0]
    assert {c.id: c for c in outcomes[at].clients}[HOSTILE].acc is None
    assert_same_models(server, clean)


@pytest.mark.parametrize("mode", MODES)
def test_a_reply_from_an_unknown_client_is_refused(mode: str) -> None:
    def stranger(reply: bytes) -> bytes:
        env = decode(reply)
        return encode(env.model_copy(update={"sender": "client/99"}))

    server, outcomes = run(mode=mode, rewrite=in_round(1, stranger))
    reference, _ = run(mode=mode, rewrite=fails(1))
    assert_refused_once(
        outcomes, 1, "message from unknown client 'client/99'", mode=mode
    )
    assert_same_models(server, reference)


@pytest.mark.parametrize("mode", MODES)
def test_an_update_from_a_departed_client_is_refused(mode: str) -> None:
    gone = ClientId(5)

    async def ghost(server: ParameterServer, client: ClientId, round: int) -> None:
        # Client 5 left before round 2; during round 2 its last update,
        # re-addressed to round 2, reaches the server.
        last = max(n for c, n in transport.sent if c == gone)
        old = decode(transport.sent[(gone, last)])
        forged = old.model_copy(update={"round": 2, "msg_id": "client/5:late"})
        await server.handle(encode(forged))

    transport = Capture()
    server, outcomes = run(
        mode=mode, push=once(2, ghost), rewrite=transport.record, leave=(gone, 2)
    )
    reference, ref_outcomes = run(mode=mode, leave=(gone, 2))
    assert refused_in(outcomes) == [2]
    assert (
        "inbound 'update_reply': message from client 5, which has left"
        in (outcomes[2].rejections[0])
    )
    assert all(gone not in {c.id for c in o.clients} for o in outcomes[2:])
    assert_same_models(server, reference)
    assert refused_in(ref_outcomes) == []


@pytest.mark.parametrize("mode", MODES)
def test_the_books_balance_with_every_refusal(mode: str) -> None:
    server, outcomes = run(
        mode=mode, rewrite=in_round(1, scaled(1e4)), max_update_norm=50.0
    )
    assert len(refused_in(outcomes)) == 1
    for outcome in outcomes:
        flags = [
            (c.trained, c.late, c.failed, c.rejected)
            for c in outcome.clients
            if c.planned
        ]
        assert all(sum(f) == 1 for f in flags)
        # A round settles every client's update; an aggregation its arrivals.
        assert len(flags) == outcome.planned_updates
        assert len(flags) == 6 if mode == "sync" else len(flags) >= 1


@pytest.mark.parametrize("mode", MODES)
def test_an_inbound_update_with_no_request_is_refused(mode: str) -> None:
    async def unsolicited(server: ParameterServer, client: ClientId, r: int) -> None:
        # Client 3's update of its first task, sent again on its own, as
        # if for round 1, answering no request.
        honest = decode(transport.sent[(ClientId(3), 0)])
        env = Envelope(
            msg_id="client/3:own",
            sender="client/3",
            recipient="server",
            round=1,
            payload=honest.payload,
        )
        await server.handle(encode(env))

    transport = Capture()
    server, outcomes = run(
        mode=mode, push=once(1, unsolicited), rewrite=transport.record
    )
    clean, _ = run(mode=mode)
    at = assert_refused_once(
        outcomes,
        1,
        "inbound 'update_reply' from 'client/3' is not accepted",
        update=False,
        mode=mode,
    )
    assert at == 1
    assert_same_models(server, clean)
