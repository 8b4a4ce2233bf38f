"""One test per row of issue 17's table: a client that lies inside
well-formed messages can neither crash a run nor steer a model.

Each drives the real server over in-process clients (`test_hostile.run`):
the run finishes, the hostile message is refused with its reason (the sign
flip under the norm bound is counted as accepted), the other clients'
updates are accepted, and the models equal those of the run where the
hostile update simply failed.

Every row that sends the server something runs in sync and async mode (see
test_hostile.py for what each mode runs and what differs between them); the
rows of CAFA's class histograms and of checkpoints are single-mode, each says
why.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Mapping
from typing import Any

import msgpack
import numpy as np
import pytest
from test_hostile import (
    HOSTILE,
    MODES,
    ROUNDS,
    Capture,
    Push,
    assert_refused_once,
    assert_same_models,
    dropped,
    fails,
    hostile_scenario,
    in_round,
    once,
    others_trained,
    refused_in,
    run,
    scaled,
    with_payload,
)

from clusterfed.actors import Client, InlineRuntime, ParameterServer, RoundOutcome
from clusterfed.errors import ConfigError
from clusterfed.protocol import (
    MAX_REASON,
    MAX_TEXT,
    PROTOCOL_VERSION,
    Envelope,
    ErrorReply,
    JoinRequest,
    LeaveNotice,
    decode,
    encode,
)
from clusterfed.scenarios import plan_run
from clusterfed.testing import Request, ServerHarness
from clusterfed.types import ClientId
from helpers import small_scenario, start_server

OTHER = ClientId(3)


def trained(outcome: RoundOutcome) -> set[ClientId]:
    return {c.id for c in outcome.clients if c.trained}


def refusals_of(outcomes: list[RoundOutcome], client: ClientId) -> list[int]:
    """The rounds of the run's refusals of `client`'s messages."""
    return [
        i
        for i, o in enumerate(outcomes)
        for r in o.rejections
        if r.startswith(f"client {client}: ")
    ]


# -- n_samples ------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("lie", [2**63 - 1, 2**63], ids=["int64 max", "2**63"])
def test_a_sample_count_past_any_bound_is_refused(mode: str, lie: int) -> None:
    server, outcomes = run(mode=mode, rewrite=in_round(1, with_payload(n_samples=lie)))
    reference, _ = run(mode=mode, rewrite=fails(1))
    at = assert_refused_once(
        outcomes, 1, "n_samples: Input should be less than or equal", mode=mode
    )
    others_trained(outcomes[at], HOSTILE)
    assert_same_models(server, reference)


@pytest.mark.parametrize("mode", MODES)
def test_two_lying_sample_counts_under_a_norm_bound_leave_the_model_sound(
    mode: str,
) -> None:
    lie = with_payload(n_samples=2**63 - 1)

    def both(client: ClientId, n: int, reply: bytes) -> bytes:
        return lie(reply) if client in (HOSTILE, OTHER) and n == 1 else reply

    def both_fail(client: ClientId, n: int, reply: bytes) -> bytes:
        if client in (HOSTILE, OTHER) and n == 1:
            raise ConnectionError("gone")
        return reply

    server, outcomes = run(mode=mode, rewrite=both, max_update_norm=50.0)
    reference, _ = run(mode=mode, rewrite=both_fail, max_update_norm=50.0)
    if mode == "sync":
        assert refused_in(outcomes) == [1, 1]
        assert trained(outcomes[2]) == set(range(6))  # later honest updates count
    for liar in (HOSTILE, OTHER):
        (at,) = refusals_of(outcomes, liar)
        assert any(liar in trained(o) for o in outcomes[at + 1 :])
    assert len(refused_in(outcomes)) == 2
    assert_same_models(server, reference)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "lie", ["12", 4.0, True, "1" * 400], ids=["string", "float", "bool", "400 digits"]
)
def test_a_sample_count_of_another_type_is_refused_not_coerced(
    mode: str, lie: Any
) -> None:
    server, outcomes = run(mode=mode, rewrite=in_round(1, with_payload(n_samples=lie)))
    reference, _ = run(mode=mode, rewrite=fails(1))
    assert_refused_once(
        outcomes, 1, "n_samples: Input should be a valid integer", mode=mode
    )
    assert_same_models(server, reference)


@pytest.mark.parametrize("mode", MODES)
def test_more_samples_than_the_client_declared_at_join_are_refused(mode: str) -> None:
    server, outcomes = run(
        mode=mode, rewrite=in_round(1, with_payload(n_samples=10**6))
    )
    reference, _ = run(mode=mode, rewrite=dropped(mode, 1))
    assert_refused_once(outcomes, 1, "n_samples 1000000 is outside [1, ", mode=mode)
    assert_same_models(server, reference)


# -- deltas ---------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_a_finite_but_ruinous_delta_is_refused_without_a_norm_bound(
    mode: str,
) -> None:
    def huge(reply: bytes) -> bytes:
        n = decode(reply).payload.delta.shape[0]  # type: ignore[union-attr]
        return with_payload(delta=np.full(n, 3.0e38, dtype=np.float32))(reply)

    # The finiteness check alone: max_update_ratio would refuse it first.
    server, outcomes = run(mode=mode, rewrite=in_round(1, huge), max_update_ratio=None)
    reference, _ = run(mode=mode, rewrite=dropped(mode, 1), max_update_ratio=None)
    assert_refused_once(
        outcomes, 1, "would make cluster 0's model non-finite", mode=mode
    )
    assert_same_models(server, reference)
    for model in server.state.models.values():
        assert np.isfinite(model).all()


@pytest.mark.parametrize("mode", MODES)
def test_a_sign_flip_under_the_norm_bound_is_counted_as_accepted(mode: str) -> None:
    # The one row no check can refuse: a well-formed update, within every
    # bound. It is accepted (robust aggregation is the defence, see
    # test_byzantine.py).
    server, outcomes = run(
        mode=mode, rewrite=in_round(1, scaled(-3.0)), max_update_norm=50.0
    )
    assert refused_in(outcomes) == []
    if mode == "sync":
        assert trained(outcomes[1]) == set(range(6))
    rows = [c for o in outcomes for c in o.clients if c.id == HOSTILE and c.planned]
    assert len(rows) >= 2 and all(c.trained for c in rows)  # its task 1 arrived


# -- membership -----------------------------------------------------------------


def pushes(round: int, message: Callable[[Mapping[int, Client]], bytes]) -> Push:
    """Before the first train task of `round` (see `test_hostile.once`), the
    hostile client pushes a message to the server on its own connection."""

    async def push(server: ParameterServer, client: ClientId, r: int) -> None:
        harness = server.courier.runtime
        assert isinstance(harness, ServerHarness)
        answer = decode(await server.handle(message(harness.clients), HOSTILE))
        pushed.append(answer.payload)

    pushed: list[Any] = []
    first = once(round, push)
    first.pushed = pushed  # type: ignore[attr-defined]
    return first


def forged_leave(clients: Mapping[int, Client]) -> bytes:
    return clients[OTHER].leave_notice("forged")


@pytest.mark.parametrize("mode", MODES)
def test_a_leave_for_another_client_sent_while_a_round_trains_is_refused(
    mode: str,
) -> None:
    push = pushes(1, forged_leave)
    server, outcomes = run(mode=mode, push=push)
    clean, _ = run(mode=mode)
    assert_refused_once(
        outcomes, 1, "sender 'client/3' came from client 2", update=False, mode=mode
    )
    assert isinstance(push.pushed[0], ErrorReply)  # type: ignore[attr-defined]
    assert OTHER in server.roster
    assert_same_models(server, clean)


@pytest.mark.parametrize("mode", MODES)
def test_a_leave_for_another_client_between_rounds_is_refused(mode: str) -> None:
    harness = ServerHarness(hostile_scenario(mode))

    async def go() -> tuple[ParameterServer, list[RoundOutcome]]:
        await harness.join()
        server = harness.server
        outcomes = [await harness.run_round(0)]
        answer = decode(await server.handle(forged_leave(harness.clients), HOSTILE))
        assert isinstance(answer.payload, ErrorReply)
        for r in range(1, ROUNDS[mode]):
            outcomes.append(await harness.run_round(r))
        return server, outcomes

    server, outcomes = asyncio.run(go())
    clean, _ = run(mode=mode)
    at = assert_refused_once(
        outcomes, 1, "sender 'client/3' came from client 2", update=False, mode=mode
    )
    assert at == 1  # booked in the round after it
    assert OTHER in server.roster
    assert any(OTHER in trained(o) for o in outcomes[1:])
    if mode == "sync":
        assert trained(outcomes[2]) == set(range(6))
    assert_same_models(server, clean)


@pytest.mark.parametrize("mode", MODES)
def test_a_leave_in_another_name_with_its_own_sender_is_refused(mode: str) -> None:
    def leave(clients: Mapping[int, Client]) -> bytes:
        client = clients[HOSTILE]
        return encode(
            Envelope(
                msg_id="client/2:leave",
                sender=client.address,
                recipient="server",
                round=-1,
                payload=LeaveNotice(client_id=OTHER),
            )
        )

    server, outcomes = run(mode=mode, push=pushes(1, leave))
    clean, _ = run(mode=mode)
    assert_refused_once(
        outcomes, 1, "forged 'leave' for client 3", update=False, mode=mode
    )
    assert_same_models(server, clean)


@pytest.mark.parametrize("mode", MODES)
def test_a_client_that_leaves_during_a_round_departs_after_it(mode: str) -> None:
    own = pushes(1, lambda clients: clients[HOSTILE].leave_notice("bye"))
    server, outcomes = run(mode=mode, push=own)
    assert refused_in(outcomes) == []
    assert HOSTILE in {c.id for c in outcomes[1].clients}  # its round is booked
    assert all(HOSTILE not in {c.id for c in o.clients} for o in outcomes[2:])
    assert HOSTILE not in server.roster and HOSTILE in server.roster.departed


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n_train", [10**15, 100], ids=["huge n_train", "sane"])
def test_a_join_for_a_new_id_registers_no_phantom(mode: str, n_train: int) -> None:
    phantom = 40

    def join(clients: Mapping[int, Client]) -> bytes:
        payload = JoinRequest.model_construct(
            client_id=phantom, n_train=n_train, n_test=10
        )
        return encode(
            Envelope.model_construct(
                protocol_version=PROTOCOL_VERSION,
                msg_id=f"client/{phantom}:join",
                sender=f"client/{phantom}",
                recipient="server",
                round=-1,
                in_reply_to=None,
                payload=payload,
            )
        )

    server, outcomes = run(mode=mode, push=pushes(1, join))
    clean, _ = run(mode=mode)
    reason = "n_train: Input should be less than" if n_train > 2**31 else "client 2"
    assert_refused_once(outcomes, 1, reason, update=False, mode=mode)
    assert phantom not in server.roster
    assert_same_models(server, clean)


# -- message ids and runs ---------------------------------------------------------


def after_task_1(log: list[Request], kind: str) -> Request:
    """The request the server sent after the hostile client's task 1 of
    `kind`."""
    mine = [r for r in log if r.kind == kind and r.client == HOSTILE][1]
    return log[log.index(mine) + 1]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", ["train_task", "evaluate_task"])
def test_a_reply_id_chosen_to_collide_takes_nothing_from_its_owner(
    mode: str, kind: str
) -> None:
    # The hostile client sends its reply to its task 1 under the id the reply
    # to the server's next request will carry (in sync mode client 3's); that
    # reply is still accepted.
    log: list[Request] = []
    clean, _ = run(mode=mode, log=log)
    victim = after_task_1(log, kind).client
    if mode == "sync":
        assert victim == OTHER
    ids: list[str] = []

    def squat(client: ClientId, n: int, reply: bytes) -> bytes:
        env = decode(reply)
        if client == HOSTILE and n == 1:
            base = str(env.in_reply_to).rsplit(":", 1)
            theirs = f"{base[0]}:{int(base[1]) + 1}"  # the next request's id
            ids.append(f"client/{victim}:re:{theirs}")
            return encode(env.model_copy(update={"msg_id": ids[0]}))
        return reply

    log.clear()
    server, outcomes = run(mode=mode, rewrite=squat, kind=kind, log=log)
    assert refused_in(outcomes) == []
    after = after_task_1(log, kind)  # as in the clean run: the id was taken
    assert ids == [f"client/{victim}:re:{after.envelope.msg_id}"]
    assert after.client == victim
    if mode == "sync":
        other = {c.id: c for c in outcomes[1].clients}[OTHER]
        assert other.trained and other.acc is not None
    assert_same_models(server, clean)


@pytest.mark.parametrize(
    ("mode", "seed"),
    [("sync", 1), ("async", 0)],
    ids=["sync", "async, the same seed: its task 1 of the same round"],
)
def test_an_update_captured_in_another_run_is_refused_as_stale(
    mode: str, seed: int
) -> None:
    # Each run draws its own nonce, so a run of the same seed is another run
    # too. In async mode the seed fixes the schedule: with another one, the
    # hostile client's task 1 is of another round, and the capture is refused
    # first as a reply for a round that is over.
    capture = Capture()
    run(mode=mode, rewrite=capture.record, seed=0)
    captured = capture.sent[(HOSTILE, 1)]

    def replay(client: ClientId, n: int, reply: bytes) -> bytes:
        return captured if client == HOSTILE and n == 1 else reply

    server, outcomes = run(mode=mode, rewrite=replay, seed=seed)
    reference, _ = run(mode=mode, rewrite=fails(1), seed=seed)
    assert_refused_once(outcomes, 1, "is a request of another run", mode=mode)
    assert_same_models(server, reference)


# -- reported numbers -----------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_huge_sample_counts_seen_are_refused_and_the_clock_stays_finite(
    mode: str,
) -> None:
    def twice(client: ClientId, n: int, reply: bytes) -> bytes:
        if client == HOSTILE and n in (1, 2):
            return with_payload(samples_seen=2**63)(reply)
        return reply

    def fail_twice(client: ClientId, n: int, reply: bytes) -> bytes:
        if client == HOSTILE and n in (1, 2):
            raise ConnectionError("gone")
        return reply

    server, outcomes = run(mode=mode, rewrite=twice)
    reference, _ = run(mode=mode, rewrite=fail_twice)
    at = refusals_of(outcomes, HOSTILE)
    assert refused_in(outcomes) == at and len(at) == 2
    if mode == "sync":
        assert at == [1, 2]
    for round in at:
        assert (
            "samples_seen: Input should be less than or equal"
            in (outcomes[round].rejections[0])
        )
    assert all(math.isfinite(o.sim_duration) for o in outcomes)
    assert_same_models(server, reference)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("kind", "fields", "reason"),
    [
        ("train_task", {"epsilon": 1e308}, "epsilon: Input should be less than"),
        ("train_task", {"loss": -1e308}, "loss: Input should be greater than"),
        (
            "evaluate_task",
            {"accuracy": 1.0, "cluster": 99},
            "evaluation of cluster 99, asked cluster 0",
        ),
        ("evaluate_task", {"loss": -1e308}, "loss: Input should be greater than"),
    ],
    ids=["epsilon", "train loss", "evaluate cluster", "evaluate loss"],
)
def test_a_reported_number_out_of_range_is_refused(
    mode: str, kind: str, fields: dict[str, Any], reason: str
) -> None:
    server, outcomes = run(
        mode=mode, rewrite=in_round(1, with_payload(**fields)), kind=kind
    )
    at = assert_refused_once(
        outcomes, 1, reason, update=kind == "train_task", mode=mode
    )
    if kind == "evaluate_task":
        # Evaluated once a round (async: once an aggregation), its training
        # untouched.
        assert at == 1
        row = {c.id: c for c in outcomes[1].clients}[HOSTILE]
        assert row.acc is None and row.trained == row.planned
        clean, _ = run(mode=mode)
        assert_same_models(server, clean)
    else:
        assert server.roster.epsilon == {}
        reference, _ = run(mode=mode, rewrite=fails(1))
        assert_same_models(server, reference)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "size", [8 * 1024 * 1024, 60_000, MAX_TEXT], ids=["8 MB", "60 kB", "1 kB"]
)
def test_an_error_reply_is_stored_as_one_short_printable_line(
    mode: str, size: int
) -> None:
    def error(reply: bytes) -> bytes:
        text = ("\x1b[2J\x1b[31mboom\n" * (size // 14 + 1))[:size]
        env = decode(reply)
        bad = ErrorReply.model_construct(code="internal", message=text)
        return encode(Envelope.model_construct(**{**dict(env), "payload": bad}))

    server, outcomes = run(mode=mode, rewrite=in_round(1, error))
    reference, _ = run(mode=mode, rewrite=fails(1))
    (row,) = [
        c
        for o in outcomes
        for c in o.clients
        if c.id == HOSTILE and c.planned and not c.trained
    ]
    if mode == "sync":
        assert row is {c.id: c for c in outcomes[1].clients}[HOSTILE]
    reason = row.reason or ""
    assert len(reason) <= MAX_REASON
    assert not any(ch < " " for ch in reason)
    # Over the message size limit, or over the bound of an error's text:
    # refused; within both, a failed task whose reason is the client's text.
    assert row.rejected if size > MAX_TEXT else row.failed
    if size == 60_000:
        assert "message: String should have at most 1024" in reason
    assert_same_models(server, reference)


# -- CAFA's class histograms --------------------------------------------------------
# Single-mode: CAFA has no asynchronous mode, and a class histogram is asked
# by the describe phase of a synchronous round only.


def cafa(**changes: Any) -> dict[str, Any]:
    return dict(
        algorithm="cafa",
        algorithm_params={"cafa": {"k_max": 3}},
        kind="describe_task",
        **changes,
    )


def fails_always(client: ClientId, n: int, reply: bytes) -> bytes:
    if client == HOSTILE:
        raise ConnectionError("gone")
    return reply


def test_a_histogram_of_too_many_classes_is_refused_and_the_others_count() -> None:
    def long(client: ClientId, n: int, reply: bytes) -> bytes:
        if client == HOSTILE:
            return with_payload(counts=[1] * 65_536)(reply)
        return reply

    server, outcomes = run(rewrite=long, **cafa())
    reference, _ = run(rewrite=fails_always, **cafa())
    assert outcomes[0].rejected_messages == 1
    assert "65536 classes, the dataset has 10" in outcomes[0].rejections[0]
    described = {c for c in server.roster.described if c != HOSTILE}
    assert described == set(range(6)) - {HOSTILE}
    assert_same_models(server, reference)


def test_a_flood_of_empty_maps_is_refused_with_a_short_reason() -> None:
    def flood(client: ClientId, n: int, reply: bytes) -> bytes:
        if client == HOSTILE:
            return with_payload(counts=[{}] * 100_000)(reply)  # 200 kB
        return reply

    async def inbound(server: ParameterServer, client: ClientId, r: int) -> None:
        raw = {"protocol_version": PROTOCOL_VERSION, "msg_id": "x"}
        raw["sender"] = "client/2"
        raw |= {"recipient": "server", "round": 1, "in_reply_to": None}
        raw["payload"] = {"kind": "class_histogram", "client_id": 2}
        raw["payload"]["counts"] = [{}] * 100_000
        echo = decode(await server.handle(msgpack.packb(raw), HOSTILE))
        assert isinstance(echo.payload, ErrorReply)
        assert len(echo.payload.message) < 1000

    server, outcomes = run(rewrite=flood, push=once(1, inbound), **cafa())
    reference, _ = run(rewrite=fails_always, **cafa())
    assert all(len(r) < 1000 for o in outcomes for r in o.rejections)
    assert [o.rejected_messages for o in outcomes] == [1, 1, 0]
    assert_same_models(server, reference)


# -- checkpoints ------------------------------------------------------------------
# Single-mode: no reply reaches the server; `ParameterServer.restore` checks
# the models of a checkpoint of either mode (test_async_checkpoint.py resumes
# async runs).


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda m: np.full_like(m, np.nan), "holds NaN or Inf"),
        (lambda m: m[:-5], "has shape"),
    ],
    ids=["NaN model", "5 weights short"],
)
def test_a_damaged_checkpoint_is_refused_with_a_clear_error(
    damage: Callable[[np.ndarray], np.ndarray], reason: str
) -> None:
    async def go() -> None:
        plan = plan_run(small_scenario(rounds=2))
        server = await start_server(plan, InlineRuntime())
        await server.run_round(0)
        snapshot = server.snapshot()
        state = snapshot["state"]
        models = {k: damage(m) for k, m in state.models.items()}
        snapshot["state"] = state.replace(models=models)
        fresh = await start_server(plan_run(small_scenario(rounds=2)), InlineRuntime())
        with pytest.raises(ConfigError, match=f"checkpoint refused: .*{reason}"):
            fresh.restore(snapshot)

    asyncio.run(go())
