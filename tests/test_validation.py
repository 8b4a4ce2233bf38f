"""The server's checks on what clients send, alone, on messages built by hand.

test_hostile.py and test_byzantine_rows.py drive these checks through a
running server; here each check is called directly, at the edges of what it
allows, and each refusal is compared whole with the reason a person reads in
`rounds.jsonl`. Every expected value is written out, not computed by the code
under test.

A check called alone involves no mode, so these tests are single-mode; the
section on `Round.settle` sends the update cases through the one object that
settles a train reply in both modes, configured as each mode configures it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from clusterfed.actors import ClientOutcome, Exchange
from clusterfed.actors.reply_books import ReplyBooks, client_of, membership_problem
from clusterfed.actors.roster import Roster
from clusterfed.actors.round import Lateness, Round, UpdateLimits, on_time
from clusterfed.actors.validation import (
    check_evaluation,
    check_histogram,
    check_models,
    check_probe,
    check_update,
)
from clusterfed.algorithms import ClientInfo, ClientUpdate, ProbePlan, TaskPlan
from clusterfed.protocol import (
    ClassHistogram,
    DescribeTask,
    Envelope,
    EvaluateReply,
    JoinRequest,
    LeaveNotice,
    Message,
    ProbeReply,
    ProbeScore,
    UpdateReply,
)
from clusterfed.types import ClientId, ClusterId

FLOAT32_MAX = 3.4028234663852886e38  # np.finfo(np.float32).max, written out
NONCE = "5eed"
MEMBERS = Roster(members={ClientId(c): ClientInfo(ClientId(c), 10) for c in range(3)})
# The same members, after client 4 left.
LEFT = Roster(members=dict(MEMBERS.members), departed={ClientId(4)})


def test_a_client_address_names_its_id_and_nothing_else_does() -> None:
    assert client_of("client/0") == 0
    assert client_of("client/12") == 12
    for other in ("server", "client/", "client/x", "client/1/2", "clients/1"):
        assert client_of(other) is None, other


# -- ReplyBooks ---------------------------------------------------------------------


def update(cluster: int = 0) -> UpdateReply:
    delta = np.zeros(2, np.float32)
    return UpdateReply(
        cluster=cluster, delta=delta, n_samples=1, loss=0.5, samples_seen=1
    )


def request(seq: int, client: int = 1, round: int = 1) -> Envelope:
    """The server's request `<nonce>:<seq>` to `client`."""
    return Envelope(
        msg_id=f"{NONCE}:{seq}",
        sender="server",
        recipient=f"client/{client}",
        round=round,
        payload=DescribeTask(),
    )


def reply(
    msg_id: str = "c1-a",
    *,
    sender: str = "client/1",
    round: int = 1,
    in_reply_to: str | None = f"{NONCE}:0",
    payload: Message | None = None,
) -> Envelope:
    return Envelope(
        msg_id=msg_id,
        sender=sender,
        recipient="server",
        round=round,
        in_reply_to=in_reply_to,
        payload=payload if payload is not None else update(),
    )


def books_in_round(round: int = 1) -> ReplyBooks:
    books = ReplyBooks()
    books.begin_round(round)
    return books


def test_a_reply_that_answers_its_request_is_taken_and_booked() -> None:
    books = books_in_round(1)
    answer = reply()
    assert books.check_reply(answer, request(0), ClientId(1), MEMBERS) is None
    books.accept(answer, request(0), ClientId(1))
    assert books.received == {(1, "c1-a")}
    assert books.answered == {f"{NONCE}:0": 1}
    # the next round forgets them
    books.begin_round(2)
    assert books.round == 2
    assert books.received == set() and books.answered == {}


def test_a_reply_of_round_0_is_taken_in_round_0() -> None:
    books = books_in_round(0)
    answer = reply(round=0)
    assert books.check_reply(answer, request(0, round=0), ClientId(1), MEMBERS) is None


REFUSED_REPLIES: dict[str, tuple[Envelope, Envelope, int, str]] = {
    # case: (reply, request, the client the runtime delivered it from, reason)
    "from the server's own address": (
        reply(sender="server"),
        request(0),
        1,
        "message from unknown client 'server'",
    ),
    "from a client that never joined": (
        reply(sender="client/9"),
        request(0, client=9),
        9,
        "message from unknown client 'client/9'",
    ),
    "from a client that has left": (
        reply(sender="client/4"),
        request(0, client=4),
        4,
        "message from client 4, which has left",
    ),
    "in another client's name": (
        reply(sender="client/2"),
        request(0),
        1,
        "reply from 'client/2' came from client 1: a client speaks only as itself",
    ),
    "for round 0, which is over": (
        reply(round=0),
        request(0),
        1,
        "reply for round 0, which is over (this is round 1)",
    ),
    "to a request of another run": (
        reply(in_reply_to="0ld:0"),
        request(0),
        1,
        "stale: '0ld:0' is a request of another run; the reply does not answer"
        f" '{NONCE}:0'",
    ),
    # an id that starts with this run's nonce is of this run, whatever follows
    "to another request of this run": (
        reply(in_reply_to=f"{NONCE}:0:0"),
        request(0),
        1,
        f"reply 'c1-a' from 'client/1' does not answer '{NONCE}:0' to 'client/1'",
    ),
    "to no request": (
        reply(in_reply_to=None),
        request(0),
        1,
        f"reply 'c1-a' from 'client/1' does not answer '{NONCE}:0' to 'client/1'",
    ),
    "for a round to come": (
        reply(round=2),
        request(0),
        1,
        f"reply 'c1-a' from 'client/1' does not answer '{NONCE}:0' to 'client/1'",
    ),
    "for no round": (
        reply(round=-1),
        request(0),
        1,
        f"reply 'c1-a' from 'client/1' does not answer '{NONCE}:0' to 'client/1'",
    ),
    "to a request sent to another client": (
        reply(),
        request(0, client=2),
        1,
        f"reply 'c1-a' from 'client/1' does not answer '{NONCE}:0' to 'client/2'",
    ),
    "a join in another client's name": (
        reply(payload=JoinRequest(client_id=2, n_train=5, n_test=1)),
        request(0),
        1,
        "forged 'join_request' for client 2 from client 1:"
        " a client speaks only as itself",
    ),
    "a leave in another client's name": (
        reply(payload=LeaveNotice(client_id=0)),
        request(0),
        1,
        "forged 'leave' for client 0 from client 1: a client speaks only as itself",
    ),
}


@pytest.mark.parametrize("case", list(REFUSED_REPLIES))
def test_a_reply_that_does_not_answer_is_refused_naming_why(case: str) -> None:
    answer, asked, client, reason = REFUSED_REPLIES[case]
    books = books_in_round(1)
    assert books.check_reply(answer, asked, ClientId(client), LEFT) == reason


def test_a_client_may_join_or_leave_in_its_own_name() -> None:
    assert membership_problem(JoinRequest(client_id=1, n_train=5, n_test=1), 1) is None
    assert membership_problem(LeaveNotice(client_id=1), ClientId(1)) is None
    assert membership_problem(update(), ClientId(1)) is None


def test_a_message_id_already_received_from_the_client_is_a_duplicate() -> None:
    books = books_in_round(1)
    first = reply("c1-a", in_reply_to=f"{NONCE}:0")
    books.accept(first, request(0), ClientId(1))
    # the same message id on the answer to another request
    again = reply("c1-a", in_reply_to=f"{NONCE}:1")
    assert books.check_reply(again, request(1), ClientId(1), MEMBERS) == (
        "duplicate: message 'c1-a' of client 1 was already received in round 1"
    )
    # message ids are the sender's to choose: another client may use the same
    other = reply("c1-a", sender="client/2", in_reply_to=f"{NONCE}:2")
    assert books.check_reply(other, request(2, client=2), ClientId(2), MEMBERS) is None


def test_a_second_answer_to_a_request_is_a_duplicate_naming_who_answered() -> None:
    books = books_in_round(1)
    books.accept(reply("c1-a"), request(0), ClientId(1))
    second = reply("c1-b", in_reply_to=f"{NONCE}:0")
    assert books.check_reply(second, request(0), ClientId(1), MEMBERS) == (
        f"duplicate: request '{NONCE}:0' was already answered by client 1 in round 1"
    )


INBOUND: dict[str, tuple[Envelope, str]] = {
    "from an unknown client": (
        reply(sender="client/9"),
        "inbound 'update_reply': message from unknown client 'client/9'",
    ),
    "from a client that has left": (
        reply(sender="client/4"),
        "inbound 'update_reply': message from client 4, which has left",
    ),
    "for round 0, which is over": (
        reply("c1-n", round=0, in_reply_to=None),
        "inbound 'update_reply' for round 0, which is over (this is round 1)",
    ),
    "for this round": (
        reply("c1-n", round=1, in_reply_to=None),
        "inbound 'update_reply' from 'client/1' is not accepted",
    ),
    "outside any round": (
        reply("c1-n", round=-1, in_reply_to=None),
        "inbound 'update_reply' from 'client/1' is not accepted",
    ),
    "a message id already received": (
        reply("c1-a", in_reply_to=None),
        "inbound 'update_reply': duplicate: message 'c1-a' of client 1 was already"
        " received in round 1",
    ),
    "an answer to a request already answered": (
        reply("c1-z", in_reply_to=f"{NONCE}:0"),
        f"inbound 'update_reply': duplicate: request '{NONCE}:0' was already"
        " answered by client 1 in round 1",
    ),
}


@pytest.mark.parametrize("case", list(INBOUND))
def test_an_inbound_reply_is_refused_naming_why(case: str) -> None:
    message, reason = INBOUND[case]
    books = books_in_round(1)
    books.accept(reply("c1-a"), request(0), ClientId(1))
    assert books.check_inbound(message, LEFT) == reason


def test_before_any_round_no_inbound_reply_is_of_a_round_that_is_over() -> None:
    books = ReplyBooks()
    assert books.check_inbound(reply("c1-n", round=0, in_reply_to=None), MEMBERS) == (
        "inbound 'update_reply' from 'client/1' is not accepted"
    )
    assert books.check_inbound(reply(sender="client/9"), MEMBERS) == (
        "inbound 'update_reply': message from unknown client 'client/9'"
    )


# -- check_update -------------------------------------------------------------------


def plan(*models: np.ndarray) -> TaskPlan:
    return TaskPlan(
        client=ClientId(1), models={ClusterId(c): m for c, m in enumerate(models)}
    )


def update_of(
    delta: list[float] | np.ndarray, *, cluster: int = 0, n_samples: int = 1
) -> UpdateReply:
    return UpdateReply(
        cluster=cluster,
        delta=np.asarray(delta, np.float32),
        n_samples=n_samples,
        loss=0.1,
        samples_seen=n_samples,
    )


ZEROS = np.zeros(4, np.float32)


@pytest.mark.parametrize("n_samples", [1, 7])
def test_an_update_inside_every_bound_is_taken(n_samples: int) -> None:
    # n_samples at both ends of [1, n_train]; the norm (5) exactly at the bound
    delta = update_of([3, 4, 0, 0], n_samples=n_samples)
    assert check_update(delta, plan(ZEROS), 4, 5.0, n_train=7) is None
    assert check_update(delta, plan(ZEROS), 4, None, n_train=None) is None


def test_the_norm_is_measured_in_float64() -> None:
    # each square (1e40) overflows float32; the norm, 2e20, does not
    delta = update_of([1e20] * 4)
    assert check_update(delta, plan(ZEROS), 4, 3e20) is None


def test_an_update_that_brings_a_large_model_back_is_taken() -> None:
    # the cheap bound (|delta| + max|base| * 2) is past float32, the end model
    # ([1e37, 1e37, 0, 0], norm 1.4e37) is not, nor are its squares in float64
    base = np.array([2e38, 2e38, 0, 0], np.float32)
    delta = update_of([-1.9e38, -1.9e38, 0, 0])
    assert check_update(delta, plan(base), 4, None) is None


def test_a_model_whose_norm_ends_exactly_at_the_float32_maximum_is_kept() -> None:
    base = np.array([FLOAT32_MAX, 0, 0, 0], np.float32)
    assert check_update(update_of(ZEROS), plan(base), 4, None) is None


REFUSED_UPDATES: dict[str, tuple[Message, TaskPlan, float | None, str]] = {
    "an evaluation": (
        EvaluateReply(cluster=0, accuracy=0.5, loss=0.1, n_samples=3),
        plan(ZEROS),
        None,
        "expected an update_reply, got 'evaluate_reply'",
    ),
    "a cluster that was not sent": (
        update_of(ZEROS, cluster=1),
        plan(ZEROS),
        None,
        "update for cluster 1, which was not sent",
    ),
    "a weight short": (
        update_of([0, 0, 0]),
        plan(ZEROS),
        None,
        "delta has shape (3,), the model has 4 weights",
    ),
    "float64": (
        UpdateReply(
            cluster=0, delta=np.zeros(4), n_samples=1, loss=0.1, samples_seen=1
        ),
        plan(ZEROS),
        None,
        "delta dtype float64, expected float32",
    ),
    "no sample": (
        update_of(ZEROS, n_samples=0),
        plan(ZEROS),
        None,
        "n_samples 0 is outside [1, 7], the client's n_train at join",
    ),
    "a sample more than declared": (
        update_of(ZEROS, n_samples=8),
        plan(ZEROS),
        None,
        "n_samples 8 is outside [1, 7], the client's n_train at join",
    ),
    "a norm just above the bound": (
        update_of([3, 4, 0, 0]),
        plan(ZEROS),
        4.99,
        "delta norm 5 is above max_update_norm = 4.99",
    ),
    # the end model ([3e38, 3e38, 0, 0]) has every weight finite in float32,
    # its norm (4.2e38) is not
    "an end model past float32": (
        update_of([1e38, 1e38, 0, 0], cluster=1),
        plan(ZEROS, np.array([2e38, 2e38, 0, 0], np.float32)),
        None,
        "delta of norm 1.414e+38 would make cluster 1's model non-finite",
    ),
}


@pytest.mark.parametrize("case", list(REFUSED_UPDATES))
def test_an_update_that_may_not_touch_a_model_is_refused_naming_why(
    case: str,
) -> None:
    payload, task, max_norm, reason = REFUSED_UPDATES[case]
    assert check_update(payload, task, 4, max_norm, n_train=7) == reason


# -- Round.settle: the one judge of both modes ----------------------------------------
# The checks above are called alone: no mode is involved. A synchronous round
# and the asynchronous driver settle every train reply through
# `Round.settle`, each configuring the round its way (sync: one update per
# client, lateness by the deadline; async: several, each with its staleness);
# here the same cases go through a round configured each way.

MODES = ["sync", "async"]


def fresh(update: ClientUpdate) -> tuple[str | None, int | None]:
    """The asynchronous driver's lateness rule for an update of the current
    model version: not late, staleness 0."""
    return None, 0


LATENESS: dict[str, Lateness] = {"sync": on_time, "async": fresh}


def round_of(mode: str, max_norm: float | None = None) -> Round:
    """Round 1, client 1 (n_train 7) its one member, a model of 4 weights;
    as a synchronous round or an asynchronous aggregation makes it."""
    return Round(
        number=1,
        roster=Roster(members={ClientId(1): ClientInfo(ClientId(1), 7)}),
        outcomes={ClientId(1): ClientOutcome(ClientId(1))},
        rejections=[],
        limits=UpdateLimits(4, max_update_norm=max_norm),
        once_per_client=mode == "sync",
    )


def settled(books: Round, mode: str, payload: Message, task: TaskPlan) -> ClientUpdate:
    """Settle and book `payload` as the reply to `task`, as `mode` does."""
    exchange = Exchange("ok", reply(payload=payload), bytes_up=100)
    return books.record(
        books.settle(task, exchange, length_s=1.0, lateness=LATENESS[mode])
    )


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", list(REFUSED_UPDATES))
def test_a_round_refuses_an_update_alike_in_both_modes(mode: str, case: str) -> None:
    payload, task, max_norm, reason = REFUSED_UPDATES[case]
    books = round_of(mode, max_norm)
    update = settled(books, mode, payload, task)
    assert (update.status, update.reason, update.delta) == ("rejected", reason, None)
    assert books.rejections == [f"client 1: {reason}"]
    outcome = books.outcomes[ClientId(1)]
    assert (outcome.status, outcome.reason, outcome.bytes_up) == (
        "rejected",
        reason,
        100,
    )
    assert outcome.staleness == (0 if mode == "async" else None)


@pytest.mark.parametrize("mode", MODES)
def test_a_round_takes_an_update_inside_every_bound_in_both_modes(mode: str) -> None:
    books = round_of(mode, 5.0)
    update = settled(books, mode, update_of([3, 4, 0, 0], n_samples=7), plan(ZEROS))
    assert (update.status, update.n_samples, update.cluster) == ("ok", 7, 0)
    np.testing.assert_array_equal(update.delta, np.array([3, 4, 0, 0], np.float32))
    assert books.rejections == []
    assert books.outcomes[ClientId(1)].status == "ok"


@pytest.mark.parametrize(
    ("mode", "second"),
    [("sync", "rejected"), ("async", "ok")],
    ids=["sync: one task a round", "async: a fast client may send several"],
)
def test_a_second_update_of_a_client_is_refused_in_a_synchronous_round_only(
    mode: str, second: str
) -> None:
    # The one rule of one mode: a synchronous round sends each client one
    # task, the asynchronous driver may start a fast client again before the
    # next aggregation.
    books = round_of(mode)
    first = settled(books, mode, update_of(ZEROS), plan(ZEROS))
    again = settled(books, mode, update_of(ZEROS), plan(ZEROS))
    assert first.ok and again.status == second
    if mode == "sync":
        reason = "duplicate: a second update from client 1 in round 1"
        assert again.reason == reason
        assert books.rejections == [f"client 1: {reason}"]
    else:
        assert books.rejections == []


# -- histograms, evaluations, probes, models ----------------------------------------


def histogram(*counts: int, client: int = 1) -> ClassHistogram:
    return ClassHistogram(client_id=client, counts=counts)


def test_a_histogram_of_the_dataset_and_the_client_is_taken() -> None:
    assert check_histogram(histogram(0, 3, 4), ClientId(1), 3, n_train=7) is None
    # one sample is enough; without a class count or n_train, any length and total
    assert check_histogram(histogram(1), ClientId(1), 1, n_train=1) is None
    assert check_histogram(histogram(0, 5), ClientId(1), None, n_train=None) is None


REFUSED_HISTOGRAMS: dict[str, tuple[Message, int | None, int | None, str]] = {
    "an update": (update(), 3, 7, "expected a class_histogram, got 'update_reply'"),
    "another client's": (
        histogram(0, 3, 4, client=2),
        3,
        7,
        "histogram of client 2, asked client 1",
    ),
    "a class short": (
        histogram(3, 4),
        3,
        7,
        "class histogram of 2 classes, the dataset has 3",
    ),
    "no sample": (histogram(0, 0, 0), 3, None, "class histogram counts no sample"),
    "no sample, n_train 0": (
        histogram(0, 0, 0),
        3,
        0,
        "class histogram counts no sample",
    ),
    "a sample short": (
        histogram(0, 3, 3),
        3,
        7,
        "class histogram counts 6 samples, the client's n_train is 7",
    ),
}


@pytest.mark.parametrize("case", list(REFUSED_HISTOGRAMS))
def test_a_histogram_that_does_not_fit_is_refused_naming_why(case: str) -> None:
    payload, n_classes, n_train, reason = REFUSED_HISTOGRAMS[case]
    assert check_histogram(payload, ClientId(1), n_classes, n_train=n_train) == reason


def test_an_evaluation_is_of_the_cluster_asked() -> None:
    scored = EvaluateReply(cluster=2, accuracy=0.5, loss=0.1, n_samples=3)
    assert check_evaluation(scored, 2) is None
    assert check_evaluation(scored, 1) == "evaluation of cluster 2, asked cluster 1"
    assert check_evaluation(update(), 2) == (
        "expected an evaluate_reply, got 'update_reply'"
    )


def probe_reply(*owners: int) -> ProbeReply:
    scores = tuple(ProbeScore(owner=o, accuracy=0.5, loss=0.1) for o in owners)
    return ProbeReply(scores=scores, n_samples=3)


def test_a_probe_reply_scores_the_models_sent_in_any_order() -> None:
    probe = ProbePlan(
        client=ClientId(1), models={ClientId(4): ZEROS, ClientId(2): ZEROS}
    )
    assert check_probe(probe_reply(2, 4), probe) is None
    assert check_probe(probe_reply(4, 2), probe) is None
    assert check_probe(probe_reply(4, 3), probe) == (
        "probe scores for models [3, 4], the task sent [2, 4]"
    )
    assert check_probe(update(), probe) == (
        "expected a probe_reply, got 'update_reply'"
    )


def models(*vectors: list[float]) -> dict[ClusterId, np.ndarray]:
    return {ClusterId(c): np.array(v, np.float32) for c, v in enumerate(vectors)}


@pytest.mark.parametrize(
    "kept",
    [
        [[0, 0], [1e20, 1e20]],  # squares past float32, the norm far below
        [[FLOAT32_MAX, 0]],  # the norm exactly the float32 maximum
    ],
    ids=["squares past float32", "norm at the maximum"],
)
def test_models_whose_norm_is_finite_in_float32_are_kept(kept: Any) -> None:
    assert check_models(models(*kept)) is None


@pytest.mark.parametrize(
    "damaged",
    [
        [[0, 0], [3e38, 3e38]],  # each weight finite, the norm (4.2e38) not
        [[0, 0], [np.nan, 0]],
        [[0, 0], [np.inf, 0]],
    ],
    ids=["norm past float32", "NaN", "Inf"],
)
def test_a_model_that_would_not_be_finite_is_named(damaged: Any) -> None:
    assert check_models(models(*damaged)) == "cluster 1's model would not be finite"
