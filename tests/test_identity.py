"""IFCA and gradloss: identities chosen inside the clients, by the formula."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest
from numpy.testing import assert_allclose

from clusterfed.actors import InlineRuntime
from clusterfed.algorithms import Candidate, ClientInfo, ClientUpdate, make, make_policy
from clusterfed.algorithms.gradloss import descent_similarity, repair_seeds
from clusterfed.protocol import TrainTask, UpdateReply, decode, encode
from clusterfed.scenarios import ClassTablePartition, plan_run
from clusterfed.types import ClientId, ClusterId
from helpers import small_scenario, start_server


class FakeProbe:
    """A client whose losses and gradients per model are given by hand."""

    def __init__(self, answers: dict[int, tuple[float, np.ndarray]]) -> None:
        self.answers = answers

    def loss(self, weights: np.ndarray) -> float:
        return self.answers[int(weights[0])][0]

    def batch_loss_and_gradient(
        self, weights: np.ndarray, round: int
    ) -> tuple[float, np.ndarray]:
        return self.answers[int(weights[0])]


def candidate(k: int, last: list[float] | None) -> Candidate:
    weights = np.array([k, 0.0], dtype=np.float32)  # weights[0] names the model
    update = None if last is None else np.array(last, dtype=np.float32)
    return Candidate(ClusterId(k), weights, update)


def test_gradloss_identity_follows_the_formula_by_hand() -> None:
    # model 0: loss 1.0, descent (−∇L) = (1, 0), last update (1, 1): cos = 1/√2
    # model 1: loss 0.8, descent = (0, 1), last update (1, 0):        cos = 0
    # model 2: loss 0.5, no last update yet:                          cos term 0
    probe = FakeProbe(
        {
            0: (1.0, np.array([-1.0, 0.0])),
            1: (0.8, np.array([0.0, -1.0])),
            2: (0.5, np.array([3.0, 3.0])),
        }
    )
    cands = [candidate(0, [1, 1]), candidate(1, [1, 0]), candidate(2, None)]
    for lam in (0.1, 0.5, 0.9):
        scores = [
            lam * (1 / math.sqrt(2)) + (1 - lam) * -1.0,
            lam * 0.0 + (1 - lam) * -0.8,
            lam * 0.0 + (1 - lam) * -0.5,
        ]
        policy = make_policy("gradloss", {"lam": lam})
        assert policy.choose(probe, cands, round=3) == int(np.argmax(scores))
        assert_allclose([policy.score(probe, c, 3) for c in cands], scores)


def test_the_descent_direction_agrees_with_the_clusters_last_step() -> None:
    gradient = np.array([2.0, 0.0])
    assert descent_similarity(gradient, np.array([-1.0, 0.0], dtype=np.float32)) == 1.0
    assert descent_similarity(gradient, np.array([1.0, 0.0], dtype=np.float32)) == -1.0
    assert descent_similarity(gradient, None) == 0.0
    assert descent_similarity(gradient, np.zeros(2, dtype=np.float32)) == 0.0


def test_ifca_identity_is_the_lowest_loss() -> None:
    probe = FakeProbe(
        {0: (0.9, np.zeros(2)), 1: (0.2, np.zeros(2)), 2: (0.4, np.zeros(2))}
    )
    policy = make_policy("min_loss", {})
    assert policy.choose(probe, [candidate(k, None) for k in range(3)], round=0) == 1


def test_bad_policy_names_and_parameters_are_refused() -> None:
    with pytest.raises(ValueError, match="known: gradloss, min_loss"):
        make_policy("oracle", {})
    with pytest.raises(ValueError, match="lam"):
        make_policy("gradloss", {"lam": 2.0})
    with pytest.raises(ValueError, match="lam"):
        make("gradloss", lam=-0.1)


def _rng() -> np.random.Generator:
    return np.random.default_rng(0)


def _state(name: str, k: int = 3, clients: int = 4):  # type: ignore[no-untyped-def]
    strategy = make(name, clusters=k)
    models = [np.full(2, float(i), dtype=np.float32) for i in range(k)]
    state = strategy.init_state(models)
    for c in range(clients):
        state = strategy.on_join(state, ClientInfo(ClientId(c), 10))
    return strategy, state


def _ok(client: int, cluster: int, delta: list[float], n: int = 10) -> ClientUpdate:
    return ClientUpdate(
        ClientId(client),
        ClusterId(cluster),
        "ok",
        np.full(2, float(cluster), dtype=np.float32),
        np.array(delta, dtype=np.float32),
        n,
        1.0,
    )


def test_the_server_averages_per_reported_identity() -> None:
    strategy, state = _state("ifca")
    plans = strategy.plan_round(
        state, 0, [ClientInfo(ClientId(c), 10) for c in range(4)], _rng()
    )
    assert all(len(p.models) == 3 and p.identity == "min_loss" for p in plans)
    updates = [
        _ok(0, 2, [1, 1], 10),
        _ok(1, 2, [3, -1], 30),
        _ok(2, 0, [0.5, 0.5]),
        _ok(3, 0, [1.5, 0.5]),
    ]
    new = strategy.aggregate(state, 0, updates, _rng())
    assert dict(new.assignment) == {0: 2, 1: 2, 2: 0, 3: 0}
    # The reference's plain mean: ([1,1] + [3,−1]) / 2, whatever the counts.
    assert_allclose(new.models[2], [2 + 2.0, 2 + 0.0])
    assert_allclose(new.models[0], [1.0, 0.5])
    assert_allclose(new.models[1], [1.0, 1.0])  # nobody chose it
    weighted = make("ifca", clusters=3, mean="weighted")
    new = weighted.aggregate(state, 0, updates, _rng())
    assert_allclose(new.models[2], [2 + 2.5, 2 - 0.5])  # (10·[1,1] + 30·[3,−1]) / 40
    assert_allclose(new.models[0], [1.0, 0.5])


def test_ifca_refuses_an_unknown_mean() -> None:
    with pytest.raises(
        ValueError, match="mean must be 'plain' or 'weighted', got 'median'"
    ):
        make("ifca", mean="median")


def test_gradloss_sends_last_updates_and_repairs_an_empty_cluster() -> None:
    strategy, state = _state("gradloss")
    rng = np.random.default_rng(0)
    state = strategy.aggregate(
        state,
        0,
        [_ok(0, 0, [1, 0]), _ok(1, 0, [1, 0]), _ok(2, 1, [0, 2]), _ok(3, 1, [0, 2])],
        rng,
    )
    assert_allclose(state.last_updates[0], [1, 0])
    assert_allclose(state.last_updates[1], [0, 2])
    seeds = state.seeds
    assert list(seeds.values()) == [2]  # cluster 2 was empty: one client seeds it
    plans = strategy.plan_round(
        state, 1, [ClientInfo(ClientId(c), 10) for c in range(4)], rng
    )
    for plan in plans:
        if plan.client in seeds:
            assert list(plan.models) == [2] and plan.identity is None
        else:
            assert len(plan.models) == 3 and plan.identity == "gradloss"
            assert set(plan.last_updates) == {0, 1}


def test_repair_needs_someone_to_have_chosen() -> None:
    _, state = _state("gradloss")
    assert repair_seeds(state, set(), _rng()) == {}


def test_in_gradloss_the_server_takes_identities_from_the_clients() -> None:
    """A reply that reports another identity than the client's policy would
    pick moves the client there: the server computes none itself."""
    table = [[1] * 5 + [0] * 5, [0] * 5 + [1] * 5]
    scenario = small_scenario(
        partition=ClassTablePartition(table=table),
        algorithm="gradloss",
        algorithm_params={"gradloss": {"clusters": 2}},
    )
    plan = plan_run(scenario)
    sent: list[TrainTask] = []

    class Rewriting(InlineRuntime):
        async def request(self, client: int, data: bytes) -> bytes | None:
            request = decode(data)
            if isinstance(request.payload, TrainTask):
                sent.append(request.payload)
            reply = await super().request(client, data)
            assert reply is not None
            env = decode(reply)
            if isinstance(env.payload, UpdateReply) and client == 0:
                forced = env.payload.model_copy(update={"cluster": 1})
                return encode(env.model_copy(update={"payload": forced}))
            if isinstance(env.payload, UpdateReply) and client == 5:
                forced = env.payload.model_copy(update={"cluster": 0})
                return encode(env.model_copy(update={"payload": forced}))
            return reply

    async def go():  # type: ignore[no-untyped-def]
        server = await start_server(plan, Rewriting())
        outcomes = [await server.run_round(r) for r in range(2)]
        return server, outcomes

    server, outcomes = asyncio.run(go())
    assert server.state.assignment[ClientId(0)] == 1
    assert server.state.assignment[ClientId(5)] == 0
    assert all(len(t.models) == 2 and t.identity.name == "gradloss" for t in sent[:6])  # type: ignore[union-attr]
    assert any(m.last_update is not None for t in sent[6:] for m in t.models)
