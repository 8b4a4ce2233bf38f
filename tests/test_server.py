"""The parameter server through real client actors: refusals and their books."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import msgpack
import numpy as np
import pytest

from clusterfed.actors import Client, ParameterServer, RoundOutcome
from clusterfed.actors.tasks import train_tasks
from clusterfed.algorithms._abfa import ABFARecord
from clusterfed.algorithms.cafa import CAFADiagnostics, CBCCRecord
from clusterfed.protocol import ErrorReply, Welcome, decode, encode
from clusterfed.protocol.messages import Envelope, UpdateReply
from clusterfed.scenarios import plan_run
from clusterfed.types import ClientId
from helpers import Tamper, TamperingRuntime, small_scenario, start_server


def run_rounds(
    rounds: int, tamper: Tamper | None = None, between: Callable | None = None
):  # type: ignore[no-untyped-def]
    async def go() -> tuple[ParameterServer, list]:
        plan = plan_run(small_scenario(rounds=rounds))
        server = await start_server(plan, TamperingRuntime(tamper))
        outcomes = []
        for r in range(rounds):
            if between:
                await between(server, r)
            outcomes.append(await server.run_round(r))
        return server, outcomes

    return asyncio.run(go())


def in_round(
    client: int, round: int, rewrite: Callable[[Envelope, bytes], bytes]
) -> Tamper:
    def tamper(cid: ClientId, request: bytes, reply: bytes) -> bytes:
        env = decode(reply)
        if (
            cid == client
            and env.round == round
            and isinstance(env.payload, UpdateReply)
        ):
            return rewrite(env, reply)
        return reply

    return tamper


def fail(env: Envelope, reply: bytes) -> bytes:
    raise ConnectionError("client vanished")


def with_delta(delta: np.ndarray) -> Callable[[Envelope, bytes], bytes]:
    def rewrite(env: Envelope, reply: bytes) -> bytes:
        raw = msgpack.unpackb(
            reply, raw=False, ext_hook=lambda c, d: msgpack.ExtType(c, d)
        )
        from clusterfed.protocol.tensor import TENSOR_EXT, pack_tensor

        raw["payload"]["delta"] = msgpack.ExtType(TENSOR_EXT, pack_tensor(delta))
        return msgpack.packb(raw, use_bin_type=True)

    return rewrite


BAD_REPLIES = {
    "garbage bytes": (lambda env, reply: b"\xc1\x00garbage", "malformed"),
    "truncated": (lambda env, reply: reply[: len(reply) // 2], "truncated"),
    "NaN in the delta": (with_delta(np.full(5, np.nan, dtype=np.float32)), "NaN"),
    "wrong shape": (with_delta(np.zeros(5, dtype=np.float32)), "shape"),
    "wrong kind": (
        lambda env, reply: encode(
            env.model_copy(update={"payload": Welcome(client_id=2)})
        ),
        "expected an update_reply",
    ),
    "reply to another request": (
        lambda env, reply: encode(
            env.model_copy(update={"in_reply_to": "server:9999"})
        ),
        "does not answer",
    ),
}


@pytest.mark.parametrize("case", list(BAD_REPLIES))
def test_a_bad_reply_is_refused_counted_and_leaves_the_models_as_without_it(
    case: str,
) -> None:
    rewrite, reason = BAD_REPLIES[case]
    server, outcomes = run_rounds(3, in_round(2, 1, rewrite))
    reference, ref_outcomes = run_rounds(3, in_round(2, 1, fail))
    assert [o.rejected_messages for o in outcomes] == [0, 1, 0]
    assert (
        reason in outcomes[1].rejections[0] and "client 2" in outcomes[1].rejections[0]
    )
    row = {c.id: c for c in outcomes[1].clients}[ClientId(2)]
    assert row.rejected and not row.trained and not row.failed
    assert ref_outcomes[1].failed_updates == 1
    for cluster, model in reference.state.models.items():
        np.testing.assert_array_equal(server.state.models[cluster], model)


def test_unsolicited_garbage_to_the_server_is_refused_and_counted() -> None:
    async def inject(server: ParameterServer, round: int) -> None:
        if round == 1:
            reply = decode(await server.handle(b"\x00\xffnot a message"))
            assert (
                isinstance(reply.payload, ErrorReply)
                and reply.payload.code == "bad_message"
            )

    server, outcomes = run_rounds(3, between=inject)
    clean, _ = run_rounds(3)
    assert [o.rejected_messages for o in outcomes] == [0, 1, 0]
    assert "inbound" in outcomes[1].rejections[0]
    np.testing.assert_array_equal(server.state.models[0], clean.state.models[0])


def test_a_failed_client_is_recorded_and_the_round_goes_on() -> None:
    _, outcomes = run_rounds(2, in_round(4, 0, fail))
    row = {c.id: c for c in outcomes[0].clients}[ClientId(4)]
    assert row.failed and "vanished" in (row.reason or "")
    assert outcomes[0].failed_updates == 1 and outcomes[1].failed_updates == 0


def test_a_client_answers_a_malformed_request_with_an_error_reply() -> None:
    plan = plan_run(small_scenario())
    reply = decode(asyncio.run(Client(plan.clients[0]).handle(b"junk")))
    assert isinstance(reply.payload, ErrorReply) and reply.payload.code == "bad_message"


def test_task_overrides_change_one_task_only() -> None:
    from clusterfed.algorithms import TaskPlan
    from clusterfed.protocol import TrainTask

    plan = plan_run(small_scenario())
    weights = plan.initial
    tasks = train_tasks(
        [
            TaskPlan(ClientId(0), {0: weights}, {"epochs": 3}),
            TaskPlan(ClientId(1), {0: weights}),
            TaskPlan(ClientId(2), {0: weights}, {"epochs": 3}),
        ],
        plan.train_config,
    )
    assert all(isinstance(t, TrainTask) for t in tasks)
    assert [t.config.epochs for t in tasks] == [3, 1, 3]
    assert tasks[0] is tasks[2] and tasks[0].config.lr == tasks[1].config.lr


# -- the describe and probe phases (CAFA) -------------------------------------------


def run_cafa(rounds: int, tamper: Tamper | None = None):  # type: ignore[no-untyped-def]
    from clusterfed.scenarios.spec import IIDMixPartition

    async def go() -> tuple[ParameterServer, list]:
        scenario = small_scenario(
            algorithm="cafa",
            partition=IIDMixPartition(iid_fraction=0.5),
            clients=8,
            rounds=rounds,
        )
        server = await start_server(plan_run(scenario), TamperingRuntime(tamper))
        return server, [await server.run_round(r) for r in range(rounds)]

    return asyncio.run(go())


def on_kind(client: int, kind: str, rewrite: Callable[[Envelope], bytes]) -> Tamper:
    def tamper(cid: ClientId, request: bytes, reply: bytes) -> bytes:
        env = decode(reply)
        if cid == client and env.payload.kind == kind:
            return rewrite(env)
        return reply

    return tamper


def _cbcc(outcome: RoundOutcome) -> CBCCRecord:
    """CAFA's CBCC record of a round, typed."""
    found = outcome.diagnostics
    assert isinstance(found, CAFADiagnostics) and found.cbcc is not None
    return found.cbcc


def _abfa(outcome: RoundOutcome) -> ABFARecord:
    """CAFA's ABFA record of a round, typed."""
    found = outcome.diagnostics
    assert isinstance(found, CAFADiagnostics) and found.abfa is not None
    return found.abfa


def test_a_forged_histogram_is_refused_counted_and_not_asked_again() -> None:
    from clusterfed.protocol import ClassHistogram

    def other(env: Envelope) -> bytes:
        payload = env.payload
        assert isinstance(payload, ClassHistogram)
        forged = payload.model_copy(update={"client_id": 5})
        return encode(env.model_copy(update={"payload": forged}))

    server, outcomes = run_cafa(2, on_kind(2, "class_histogram", other))
    assert outcomes[0].rejected_messages == 1 and outcomes[1].rejected_messages == 0
    assert "client 2: describe: histogram of client 5" in outcomes[0].rejections[0]
    assert ClientId(2) in server.roster.described
    clusters = _cbcc(outcomes[1]).clusters
    assert ClientId(2) not in clusters and len(clusters) == 7


def test_a_client_that_cannot_describe_itself_is_asked_again() -> None:
    def vanish(env: Envelope) -> bytes:
        raise ConnectionError("client vanished")

    calls = {"n": 0}

    def once(cid: ClientId, request: bytes, reply: bytes) -> bytes:
        if cid == 3 and decode(reply).payload.kind == "class_histogram":
            calls["n"] += 1
            if calls["n"] == 1:
                return vanish(decode(reply))
        return reply

    _, outcomes = run_cafa(2, once)
    assert calls["n"] == 2
    assert ClientId(3) not in _cbcc(outcomes[0]).clusters
    assert ClientId(3) in _cbcc(outcomes[1]).clusters


def test_a_probe_reply_for_other_models_is_refused_and_the_round_goes_on() -> None:
    from clusterfed.protocol import ProbeReply

    def drop_one(env: Envelope) -> bytes:
        payload = env.payload
        assert isinstance(payload, ProbeReply)
        fewer = payload.model_copy(update={"scores": payload.scores[1:]})
        return encode(env.model_copy(update={"payload": fewer}))

    server, outcomes = run_cafa(1)
    members = _abfa(outcomes[0]).members
    _, tampered = run_cafa(1, on_kind(members[0], "probe_reply", drop_one))
    assert tampered[0].rejected_messages == 1
    assert f"client {members[0]}: probe: probe scores" in tampered[0].rejections[0]
    assert _abfa(tampered[0]).members == members
    # The refused scores are missing: other models' accuracies change.
    assert _abfa(tampered[0]).accuracy != _abfa(outcomes[0]).accuracy
