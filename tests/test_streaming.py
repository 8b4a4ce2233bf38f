"""Streaming aggregation: a round's deltas folded as they arrive, bit for bit
what aggregating the kept deltas gives, without keeping them."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import clusterfed
from clusterfed.actors.clock import Deadline, Fraction
from clusterfed.actors.courier import Courier
from clusterfed.actors.folding import RoundFold
from clusterfed.actors.reply_books import ReplyBooks
from clusterfed.algorithms import (
    ClientInfo,
    ClientUpdate,
    ClusterSums,
    Strategy,
    weighted_mean,
)
from clusterfed.algorithms._aggregate import (
    average_per_cluster,
    check_cluster_mean,
    member_weight,
    member_weights,
    sum_per_cluster,
)
from clusterfed.algorithms.base import streams
from clusterfed.algorithms.fedavg import FedAvg
from clusterfed.algorithms.ifca import IFCALoop
from clusterfed.algorithms.registry import make
from clusterfed.algorithms.robust import Median, NormClip
from clusterfed.scenarios import Straggle
from clusterfed.testing import Request, ServerHarness
from clusterfed.types import ClientId, ClusterId
from helpers import read_rounds, small_scenario


def _update(client: int, delta: np.ndarray, n: int, cluster: int = 0) -> ClientUpdate:
    return ClientUpdate(
        ClientId(client), ClusterId(cluster), "ok", delta=delta, n_samples=n
    )


def test_cluster_sums_give_weighted_mean_bit_for_bit() -> None:
    rng = np.random.default_rng(0)
    vectors = [
        rng.standard_normal(1000).astype(np.float32) * 10.0**k for k in range(-3, 4)
    ]
    weights = [3, 1, 250, 7, 1, 90, 12]
    sums = ClusterSums()
    for vector, weight in zip(vectors, weights, strict=True):
        sums.add(ClusterId(2), vector, weight)
    sums.add(ClusterId(2), vectors[0], 0)  # a weight of 0 is not a member
    assert sums.clusters == [2]
    np.testing.assert_array_equal(
        sums.mean(ClusterId(2)), weighted_mean(vectors, weights)
    )
    # The hand-sized case: (1·[2, 4] + 3·[6, 0]) / 4 = [5, 1].
    small = ClusterSums()
    small.add(ClusterId(0), np.array([2, 4], np.float32), 1)
    small.add(ClusterId(0), np.array([6, 0], np.float32), 3)
    models = {
        ClusterId(0): np.zeros(2, np.float32),
        ClusterId(1): np.ones(2, np.float32),
    }
    stepped = small.step(models, server_lr=0.5)
    np.testing.assert_array_equal(stepped[ClusterId(0)], [2.5, 0.5])
    assert stepped[ClusterId(0)].dtype == np.float32
    assert stepped[ClusterId(1)] is models[ClusterId(1)]  # nobody updated it


def test_a_fold_adds_in_client_order_whatever_the_order_of_arrival() -> None:
    rng = np.random.default_rng(1)
    updates = [
        _update(c, rng.standard_normal(50).astype(np.float32) * (c + 1), 5 + c, c % 2)
        for c in range(5)
    ]
    updates.append(ClientUpdate(ClientId(5), ClusterId(0), "failed", reason="down"))
    expected = {
        k: weighted_mean(
            [u.delta for u in updates if u.ok and u.cluster == k],  # type: ignore[misc]
            [u.n_samples for u in updates if u.ok and u.cluster == k],
        )
        for k in (0, 1)
    }
    for arrival in itertools.permutations(range(6)):
        fold = RoundFold(range(6), lambda u: float(u.n_samples))
        kept = [fold.add(updates[i]) for i in arrival]
        assert fold.done
        assert all(u.delta is None for u in kept)
        for k in (0, 1):
            np.testing.assert_array_equal(fold.sums.mean(ClusterId(k)), expected[k])
    # In reverse, every update but the last to come waits for client 0.
    fold = RoundFold(range(6), lambda u: float(u.n_samples))
    for update in reversed(updates):
        fold.add(update)
    assert fold.most_waiting == 5
    fold = RoundFold(range(6), lambda u: float(u.n_samples))
    for update in updates[:3]:
        fold.add(update)
    assert fold.most_waiting == 0 and not fold.done


class _Spy:
    """Counts which of a strategy's aggregation hooks the server calls and
    whether the updates it gets still carry their deltas."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, cls: type[Strategy[Any]]):
        self.calls: list[str] = []
        self.deltas_kept: list[bool] = []
        aggregate, aggregate_sums = cls.aggregate, cls.aggregate_sums

        def spy_aggregate(
            strategy: Any, state: Any, round: int, updates: Any, rng: Any
        ) -> Any:
            self.calls.append("aggregate")
            self.deltas_kept.append(any(u.delta is not None for u in updates))
            return aggregate(strategy, state, round, updates, rng)

        def spy_sums(
            strategy: Any, state: Any, round: int, updates: Any, sums: Any, rng: Any
        ) -> Any:
            self.calls.append("aggregate_sums")
            self.deltas_kept.append(any(u.delta is not None for u in updates))
            return aggregate_sums(strategy, state, round, updates, sums, rng)

        monkeypatch.setattr(cls, "aggregate", spy_aggregate)
        monkeypatch.setattr(cls, "aggregate_sums", spy_sums)


def _rows(out: Path, **changes: Any) -> list[dict[str, Any]]:
    clusterfed.run(small_scenario(**changes), out=out)
    return [{k: v for k, v in r.items() if k != "wall_time"} for r in read_rounds(out)]


STRAGGLING = dict(
    rounds=4,
    deadline=Deadline(seconds=2.0),
    events=[Straggle(start=1, target=1, factor=50, rounds=2)],
)


@pytest.mark.parametrize(
    ("algorithm", "cls"),
    [("fedavg", FedAvg), ("ifca", IFCALoop), ("gradloss", IFCALoop)],
)
def test_a_streamed_round_equals_one_whose_deltas_were_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, algorithm: str, cls: type
) -> None:
    changes: dict[str, Any] = dict(
        STRAGGLING,
        algorithm=algorithm,
        algorithm_params={algorithm: {"clusters": 2}} if algorithm != "fedavg" else {},
    )
    spy = _Spy(monkeypatch, cls)
    streamed = _rows(tmp_path / "streamed", **changes)
    assert spy.calls == ["aggregate_sums"] * 4
    assert spy.deltas_kept == [False] * 4  # the server held no delta till the end
    assert [r["late_updates"] for r in streamed] == [0, 1, 1, 0]

    spy.calls.clear()
    monkeypatch.setattr(cls, "folds", False)
    kept = _rows(tmp_path / "kept", **changes)
    assert spy.calls == ["aggregate"] * 4
    assert streamed == kept


def test_a_fraction_deadline_and_a_robust_aggregator_keep_every_delta(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Fraction ranks every reply before any is late; a median needs every
    # vector: both rounds aggregate the kept deltas.
    spy = _Spy(monkeypatch, FedAvg)
    rows = _rows(
        tmp_path / "fraction",
        rounds=2,
        deadline=Fraction(fraction=5 / 6),
        events=[Straggle(start=0, target=4, factor=30, rounds=2)],
    )
    assert [r["late_updates"] for r in rows] == [1, 1]
    assert spy.calls == ["aggregate"] * 2 and spy.deltas_kept == [True] * 2
    spy.calls.clear()
    _rows(tmp_path / "median", rounds=2, aggregator="median")
    assert spy.calls == ["aggregate"] * 2


class _Hosts:
    """The one thing `Courier.in_flight` reads of a runtime."""

    def __init__(self, parallelism: int | None) -> None:
        self.parallelism = parallelism


@pytest.mark.parametrize(
    ("parallelism", "explicit", "expected"),
    [(2, None, 16), (1, None, 8), (100, None, 64), (None, None, 64), (2, 5, 5)],
)
def test_requests_in_flight_follow_the_runtimes_hosts(
    parallelism: int | None, explicit: int | None, expected: int
) -> None:
    courier = Courier(_Hosts(parallelism), ReplyBooks(), max_in_flight=explicit)  # type: ignore[arg-type]
    assert courier.in_flight() == expected


def test_no_more_requests_are_outstanding_than_in_flight_allows() -> None:
    harness = ServerHarness(small_scenario(clients=20, rounds=1))
    harness.parallelism = 1
    outstanding, most = [0], [0]

    async def answer(request: Request) -> bytes | None:
        outstanding[0] += 1
        most[0] = max(most[0], outstanding[0])
        await asyncio.sleep(0.005)
        outstanding[0] -= 1
        return await harness.honest(request)

    async def play() -> None:
        await harness.join()
        await harness.run_round(0, answer)

    asyncio.run(play())
    assert most[0] == 8


class _Recorded(FedAvg):
    """FedAvg whose own `aggregate` records the deltas it gets: it declares
    that it does not fold, as a subclass that overrides `aggregate` alone
    must."""

    name = "recorded"
    folds = False
    deltas: list[int] = []

    def aggregate(self, state: Any, round: int, updates: Any, rng: Any) -> Any:
        _Recorded.deltas.append(sum(u.delta is not None for u in updates))
        return super().aggregate(state, round, updates, rng)


def test_a_subclass_that_declares_it_does_not_fold_gets_every_delta() -> None:
    assert streams(FedAvg()) and streams(make("fedprox")) and streams(make("gradloss"))
    assert not streams(_Recorded()) and not streams(make("dcfl"))
    _Recorded.deltas.clear()
    harness = ServerHarness(small_scenario(rounds=1))
    harness.server.strategy = _Recorded()

    async def play() -> None:
        await harness.join()
        await harness.run_round(0)

    asyncio.run(play())
    assert _Recorded.deltas == [6]


def test_a_strategy_folds_only_when_it_says_so() -> None:
    dcfl = make("dcfl")  # needs every update: keeps the default
    assert not dcfl.folds and not streams(dcfl)
    with pytest.raises(NotImplementedError, match="^dcfl does not fold its updates$"):
        dcfl.fold_weight(
            dcfl.init_state([np.zeros(3, np.float32)]), _update(0, np.zeros(3), 1)
        )
    with pytest.raises(NotImplementedError, match="^dcfl does not fold its updates$"):
        dcfl.aggregate_sums(
            dcfl.init_state([np.zeros(3, np.float32)]),
            0,
            [],
            ClusterSums(),
            np.random.default_rng(0),
        )
    median = make("fedavg")
    median.aggregator = Median()
    assert median.folds and not streams(median)  # a median needs every update


# -- the sums and means of _aggregate.py, worked by hand ---------------------


def test_a_server_step_moves_the_summed_models_by_server_lr() -> None:
    sums = ClusterSums()
    sums.add(ClusterId(0), np.array([2.0, 4.0], np.float32), 1)
    state = FedAvg().init_state([np.ones(2, np.float32)])
    half = FedAvg(server_lr=0.5).aggregate_sums(
        state, 0, [], sums, np.random.default_rng(0)
    )
    np.testing.assert_array_equal(half.models[ClusterId(0)], [2.0, 3.0])


def test_cluster_means_are_named_and_weigh_members_by_count_or_alike() -> None:
    assert check_cluster_mean("plain") == "plain"
    assert check_cluster_mean("weighted") == "weighted"
    with pytest.raises(ValueError) as refused:
        check_cluster_mean("median")
    assert str(refused.value) == "mean must be 'plain' or 'weighted', got 'median'"
    assert member_weights([3, 5], "weighted") == [3, 5]
    assert member_weights([3, 5], "plain") == [1, 1]
    three = _update(0, np.zeros(2, np.float32), 3)
    assert member_weight(three, "weighted") == 3.0
    assert member_weight(three, "plain") == 1.0


def test_a_weight_of_zero_adds_no_cluster() -> None:
    sums = ClusterSums()
    sums.add(ClusterId(5), np.ones(2, np.float32), 0)
    assert sums.clusters == []


def test_an_update_of_no_samples_is_no_member_even_in_a_plain_mean() -> None:
    updates = [
        _update(0, np.array([10.0, 10.0], np.float32), 0),
        _update(1, np.array([2.0, 2.0], np.float32), 3),
        _update(2, np.array([4.0, 0.0], np.float32), 1),
    ]
    plain = sum_per_cluster(updates, "plain")
    np.testing.assert_array_equal(plain.mean(ClusterId(0)), [3.0, 1.0])
    # The default is the sample-weighted mean: (3·[2, 2] + 1·[4, 0]) / 4.
    np.testing.assert_array_equal(
        sum_per_cluster(updates).mean(ClusterId(0)), [2.5, 1.5]
    )


def test_one_vector_is_its_own_weighted_mean() -> None:
    vector = np.array([1.5, -2.0, 3.0], np.float32)
    np.testing.assert_array_equal(weighted_mean([vector], [2]), vector)


def test_robust_rules_take_accepted_updates_with_the_clusters_weights() -> None:
    models = {ClusterId(0): np.zeros(2, np.float32)}
    late = replace(_update(2, np.array([100.0, 100.0], np.float32), 5), status="late")
    updates = [
        _update(0, np.array([2.0, 0.0], np.float32), 1),
        _update(1, np.array([0.0, 4.0], np.float32), 3),
        late,
    ]
    loose = NormClip(max_norm=1e6)  # clips nothing: the cluster's own mean
    weighted = average_per_cluster(models, updates, aggregator=loose)
    np.testing.assert_array_equal(weighted[ClusterId(0)], [0.5, 3.0])
    assert weighted[ClusterId(0)].dtype == np.float32
    plain = average_per_cluster(models, updates, aggregator=loose, mean="plain")
    np.testing.assert_array_equal(plain[ClusterId(0)], [1.0, 2.0])
    # A median of the two accepted updates; the late one is left out.
    median = average_per_cluster(models, updates, aggregator=Median())
    np.testing.assert_array_equal(median[ClusterId(0)], [1.0, 2.0])


def test_an_ifca_fold_leaves_out_leavers_and_moves_only_accepted_clients() -> None:
    ifca = make("ifca", clusters=2)
    state = ifca.init_state([np.zeros(2, np.float32), np.ones(2, np.float32)])
    for c in range(4):
        state = ifca.on_join(state, ClientInfo(ClientId(c), n_train=10))
    state = ifca.on_leave(state, ClientId(3))  # left while it trained
    updates = [
        _update(0, np.array([2.0, 2.0], np.float32), 4, cluster=1),
        ClientUpdate(ClientId(1), ClusterId(1), "failed", reason="down"),
        _update(2, np.array([4.0, 0.0], np.float32), 2, cluster=0),
        _update(3, np.array([50.0, 50.0], np.float32), 9, cluster=1),
    ]
    assert ifca.fold_weight(state, updates[3]) == 0.0
    fold = RoundFold(range(4), partial(ifca.fold_weight, state))
    kept = [fold.add(u) for u in updates]
    rng = np.random.default_rng(0)
    streamed = ifca.aggregate_sums(state, 0, kept, fold.sums, rng)
    # By hand: each cluster moves by its one accepted member's delta.
    np.testing.assert_array_equal(streamed.models[ClusterId(0)], [4.0, 0.0])
    np.testing.assert_array_equal(streamed.models[ClusterId(1)], [3.0, 3.0])
    assert dict(streamed.assignment) == {0: 1, 1: 0, 2: 0}
    whole = ifca.aggregate(state, 0, updates, rng)
    assert dict(whole.assignment) == dict(streamed.assignment)
    for k in (0, 1):
        np.testing.assert_array_equal(whole.models[k], streamed.models[k])
