"""Hostile inputs through a running server: each is refused with its reason,
the cluster models are bit for bit what they would be without it, and the run
goes on.

Clients run in this process behind the step harness
(`clusterfed.testing.ServerHarness`): a test's answer rewrites one reply, or
makes a client push a message to the server on its own, as a hostile or broken
client would. The reference run is the same run where the hostile message
never came (the client's update failed, or nothing was pushed).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import msgpack
import numpy as np
import pytest
import torch

from clusterfed.actors import ParameterServer, RoundOutcome
from clusterfed.protocol import Envelope, UpdateReply, decode, encode
from clusterfed.protocol.tensor import TENSOR_EXT, pack_tensor
from clusterfed.testing import Request, ServerHarness
from clusterfed.types import ClientId
from helpers import small_scenario

HOSTILE = ClientId(2)


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    # As the runtimes train: tiny models on a busy machine train far faster.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def run(
    rounds: int = 3,
    *,
    rewrite: Callable[[ClientId, int, bytes], bytes] | None = None,
    push: Callable[[ParameterServer, ClientId, int], Any] | None = None,
    leave: tuple[ClientId, int] | None = None,
    kind: str = "train_task",
    **changes: Any,
) -> tuple[ParameterServer, list[RoundOutcome]]:
    """A federation of six clients through the step harness: `rewrite(client,
    round, reply)` returns the bytes delivered instead of the honest reply to
    a task of `kind` (raise to make the exchange fail); `push(server, client,
    round)` runs before each train request, to send the server messages on
    the side; `leave = (client, round)` makes a client leave before that
    round."""
    harness = ServerHarness(small_scenario(rounds=rounds, **changes))

    async def answer(request: Request) -> bytes | None:
        client = ClientId(request.client)
        if request.kind == "train_task" and push is not None:
            await push(harness.server, client, request.round)
        reply = await harness.honest(request)
        assert reply is not None
        if request.kind == kind and rewrite is not None:
            return rewrite(client, request.round, reply)
        return reply

    async def go() -> tuple[ParameterServer, list[RoundOutcome]]:
        await harness.join()
        outcomes = []
        for r in range(rounds):
            if leave is not None and leave[1] == r:
                notice = harness.clients[leave[0]].leave_notice("bye")
                await harness.server.handle(notice, leave[0])
            outcomes.append(await harness.run_round(r, answer))
        return harness.server, outcomes

    return asyncio.run(go())


def in_round(round: int, forge: Callable[[bytes], bytes]) -> Callable[..., bytes]:
    def rewrite(client: ClientId, r: int, reply: bytes) -> bytes:
        return forge(reply) if client == HOSTILE and r == round else reply

    return rewrite


def fails(round: int) -> Callable[..., bytes]:
    """The reference: the hostile client's update of `round` simply fails."""

    def vanish(reply: bytes) -> bytes:
        raise ConnectionError("client vanished")

    return in_round(round, vanish)


def assert_same_models(a: ParameterServer, b: ParameterServer) -> None:
    assert a.state.models.keys() == b.state.models.keys()
    for cluster, model in a.state.models.items():
        np.testing.assert_array_equal(model, b.state.models[cluster])
    assert dict(a.state.assignment) == dict(b.state.assignment)


def assert_refused_once(
    outcomes: list[RoundOutcome], round: int, reason: str, *, update: bool = True
) -> None:
    counts = [o.rejected_messages for o in outcomes]
    assert counts == [int(r == round) for r in range(len(outcomes))], counts
    (rejection,) = outcomes[round].rejections
    assert reason in rejection, rejection
    assert len(outcomes) == 3  # the run went on to its end
    if update:
        row = {c.id: c for c in outcomes[round].clients}[HOSTILE]
        assert row.rejected and not row.trained and not row.failed


class Capture:
    """Keeps every train reply by (client, round), passing it on unchanged."""

    def __init__(self) -> None:
        self.sent: dict[tuple[ClientId, int], bytes] = {}

    def record(self, client: ClientId, round: int, reply: bytes) -> bytes:
        self.sent[(client, round)] = reply
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


def test_an_update_above_the_norm_bound_is_refused() -> None:
    server, outcomes = run(rewrite=in_round(1, scaled(1e4)), max_update_norm=50.0)
    reference, _ = run(rewrite=fails(1), max_update_norm=50.0)
    assert_refused_once(outcomes, 1, "above max_update_norm = 50")
    assert_same_models(server, reference)


def test_without_a_bound_a_large_update_is_taken() -> None:
    # Round 1 is the last: the hostile update, 1e4 times what the client
    # trained, is averaged in by its share of the samples, so the model ends
    # (1e4 - 1) x share x delta away from the clean run's. (Near 1e3 times
    # the model's norm, the default max_update_ratio would refuse it.)
    transport = Capture()
    clean, _ = run(rounds=2, rewrite=transport.record, max_update_ratio=None)
    server, outcomes = run(
        rounds=2, rewrite=in_round(1, scaled(1e4)), max_update_ratio=None
    )
    assert [o.rejected_messages for o in outcomes] == [0, 0]
    assert {c.id for c in outcomes[1].clients if c.trained} == set(range(6))
    replies: dict[ClientId, UpdateReply] = {}
    for (client, r), data in transport.sent.items():
        payload = decode(data).payload
        if r == 1 and isinstance(payload, UpdateReply):
            replies[client] = payload
    assert len(replies) == 6
    share = replies[HOSTILE].n_samples / sum(p.n_samples for p in replies.values())
    delta = replies[HOSTILE].delta.astype(np.float64)
    expected = (1e4 - 1) * share * delta
    moved = server.state.models[0].astype(np.float64) - clean.state.models[0]
    assert np.linalg.norm(expected) > 1.0  # far more than a round's step
    np.testing.assert_allclose(moved, expected, rtol=1e-3, atol=1e-3)


def test_a_replayed_reply_of_a_round_that_is_over_is_refused() -> None:
    transport_sent: dict[int, bytes] = {}

    def replay(client: ClientId, r: int, reply: bytes) -> bytes:
        if client == HOSTILE and r == 1:
            transport_sent[1] = reply
        if client == HOSTILE and r == 2:
            return transport_sent[1]  # its reply of round 1, byte for byte
        return reply

    server, outcomes = run(rewrite=replay)
    reference, _ = run(rewrite=fails(2))
    assert [o.rejected_messages for o in outcomes] == [0, 0, 1]
    assert (
        "reply for round 1, which is over (this is round 2)"
        in (outcomes[2].rejections[0])
    )
    assert_same_models(server, reference)


def test_a_duplicate_update_in_the_same_round_is_refused() -> None:
    async def resend(server: ParameterServer, client: ClientId, round: int) -> None:
        # While the round trains, the hostile client's update of this round,
        # already received, reaches the server a second time.
        # A retry: the same update under a message id of its own.
        if round == 1 and client == HOSTILE + 1:
            first = decode(transport.sent[(HOSTILE, 1)])
            retry = first.model_copy(update={"msg_id": "client/2:retry"})
            answer = decode(await server.handle(encode(retry)))
            assert answer.payload.kind == "error"

    transport = Capture()
    # Without a wall-clock limit the courier awaits each reply in place, so
    # client 2's reply is taken before client 3's request comes (a limit
    # wraps each request in a task of its own, which reorders them).
    server, outcomes = run(push=resend, rewrite=transport.record, task_timeout_s=None)
    clean, _ = run(task_timeout_s=None)
    assert_refused_once(outcomes, 1, "duplicate: request '", update=False)
    assert (
        f"already answered by client {HOSTILE} in round 1"
        in (outcomes[1].rejections[0])
    )
    row = {c.id: c for c in outcomes[1].clients}[HOSTILE]
    assert row.trained  # the first copy counts, once
    assert_same_models(server, clean)


def test_a_reply_already_received_is_refused_as_a_duplicate() -> None:
    # The hostile client answers its evaluate task with its update again.
    harness = ServerHarness(small_scenario(rounds=3))
    last: dict[int, bytes] = {}

    async def echo(request: Request) -> bytes | None:
        reply = await harness.honest(request)
        assert reply is not None
        if request.kind == "train_task":
            last[request.client] = reply
        if (request.kind, request.client, request.round) == (
            "evaluate_task",
            HOSTILE,
            1,
        ):
            return last[request.client]
        return reply

    async def go() -> tuple[ParameterServer, list[RoundOutcome]]:
        await harness.join()
        return harness.server, [await harness.run_round(r, echo) for r in range(3)]

    server, outcomes = asyncio.run(go())
    clean, _ = run()
    assert_refused_once(outcomes, 1, "duplicate: message 'client/2:re:", update=False)
    assert "was already received in round 1" in outcomes[1].rejections[0]
    assert_same_models(server, clean)


def test_a_reply_from_an_unknown_client_is_refused() -> None:
    def stranger(reply: bytes) -> bytes:
        env = decode(reply)
        return encode(env.model_copy(update={"sender": "client/99"}))

    server, outcomes = run(rewrite=in_round(1, stranger))
    reference, _ = run(rewrite=fails(1))
    assert_refused_once(outcomes, 1, "message from unknown client 'client/99'")
    assert_same_models(server, reference)


def test_an_update_from_a_departed_client_is_refused() -> None:
    gone = ClientId(5)

    async def ghost(server: ParameterServer, client: ClientId, round: int) -> None:
        # Client 5 left before round 2; during round 2 its update of round 1,
        # re-addressed to round 2, reaches the server.
        if round == 2 and client == 0:
            old = decode(transport.sent[(gone, 1)])
            forged = old.model_copy(update={"round": 2, "msg_id": "client/5:late"})
            await server.handle(encode(forged))

    transport = Capture()
    server, outcomes = run(push=ghost, rewrite=transport.record, leave=(gone, 2))
    reference, ref_outcomes = run(leave=(gone, 2))
    assert [o.rejected_messages for o in outcomes] == [0, 0, 1]
    assert (
        "inbound 'update_reply': message from client 5, which has left"
        in (outcomes[2].rejections[0])
    )
    assert gone not in {c.id for c in outcomes[2].clients}
    assert_same_models(server, reference)
    assert ref_outcomes[2].rejected_messages == 0


def test_the_books_balance_with_every_refusal() -> None:
    server, outcomes = run(rewrite=in_round(1, scaled(1e4)), max_update_norm=50.0)
    for outcome in outcomes:
        flags = [
            (c.trained, c.late, c.failed, c.rejected)
            for c in outcome.clients
            if c.planned
        ]
        assert all(sum(f) == 1 for f in flags)
        assert len(flags) == outcome.planned_updates == 6


def test_an_inbound_update_with_no_request_is_refused() -> None:
    async def unsolicited(server: ParameterServer, client: ClientId, r: int) -> None:
        if r == 1 and client == 0:
            env = Envelope(
                msg_id="client/3:own",
                sender="client/3",
                recipient="server",
                round=1,
                payload=UpdateReply(
                    cluster=0,
                    delta=np.zeros(3, dtype=np.float32),
                    n_samples=1,
                    loss=0.0,
                    compute_s=0.0,
                ),
            )
            await server.handle(encode(env))

    server, outcomes = run(push=unsolicited)
    clean, _ = run()
    assert_refused_once(
        outcomes,
        1,
        "inbound 'update_reply' from 'client/3' is not accepted",
        update=False,
    )
    assert_same_models(server, clean)
