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
from clusterfed.algorithms.robust import Median
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
    with pytest.raises(
        ValueError, match="known: feddrift, fedem, fedsoft, gradloss, min_loss"
    ):
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
        async def request(self, client: int, head: bytes, body: bytes) -> bytes | None:
            request = decode(head + body)
            if isinstance(request.payload, TrainTask):
                sent.append(request.payload)
            reply = await super().request(client, head, body)
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


@pytest.mark.parametrize("name", ["ifca", "gradloss"])
def test_clusters_and_fraction_are_checked_at_their_edges(name: str) -> None:
    assert make(name, clusters=1, fraction=1.0).initial_models == 1
    for bad in (0, -1, True, 2.5):
        with pytest.raises(
            ValueError,
            match=rf"^{name}: clusters must be an integer >= 1, got {bad!r}$",
        ):
            make(name, clusters=bad)
    for bad in (0, -0.5, 1.5):
        with pytest.raises(
            ValueError, match=rf"^{name}: fraction must be in \(0, 1\], got {bad}$"
        ):
            make(name, fraction=bad)


def test_ifca_and_gradloss_start_from_four_models_by_default() -> None:
    assert make("ifca").initial_models == 4
    assert make("gradloss").initial_models == 4
    with pytest.raises(ValueError, match="needs 4 initial models, got 3"):
        make("ifca").init_state([np.zeros(2, np.float32)] * 3)


@pytest.mark.parametrize("name", ["ifca", "gradloss"])
def test_a_fraction_of_the_clients_is_sampled_each_round(name: str) -> None:
    _, state = _state(name, k=2, clients=4)
    strategy = make(name, clusters=2, fraction=0.5)
    clients = [ClientInfo(ClientId(c), 10) for c in range(4)]
    rng = np.random.default_rng(7)
    before = rng.bit_generator.state
    plans = strategy.plan_round(state, 0, clients, rng)
    # round(0.5 · 4) = 2 distinct clients, in id order, drawn from the generator
    chosen = [p.client for p in plans]
    assert len(chosen) == 2 and chosen == sorted(set(chosen))
    assert rng.bit_generator.state != before
    assert all(len(p.models) == 2 for p in plans)


def test_the_plans_carry_each_policys_parameters() -> None:
    clients = [ClientInfo(ClientId(c), 10) for c in range(2)]
    strategy, state = _state("gradloss", k=2, clients=2)
    for lam in (0.0, 0.3, 1.0):
        plans = make("gradloss", clusters=2, lam=lam).plan_round(
            state, 0, clients, _rng()
        )
        assert [dict(p.identity_params) for p in plans] == [{"lam": lam}] * 2
    strategy, state = _state("ifca", k=2, clients=2)
    for plan in strategy.plan_round(state, 0, clients, _rng()):
        assert plan.identity == "min_loss" and dict(plan.identity_params) == {}
    plan = strategy.plan_for(state, ClientId(1))
    assert plan.identity == "min_loss" and dict(plan.identity_params) == {}
    assert set(plan.models) == {0, 1}


def test_a_client_policy_without_lam_scores_with_the_strategys_default() -> None:
    probe = FakeProbe({0: (1.0, np.array([-1.0, 0.0])), 1: (0.6, np.zeros(2))})
    cands = [candidate(0, [1, 0]), candidate(1, None)]
    # λ = 0.2: model 0 scores 0.2·1 − 0.8·1.0 = −0.6, model 1 −0.8·0.6 = −0.48
    assert make("gradloss").identity_params() == {"lam": 0.2}
    policy = make_policy("gradloss", {})
    assert_allclose([policy.score(probe, c, 0) for c in cands], [-0.6, -0.48])
    assert policy.choose(probe, cands, 0) == 1


def test_lam_at_zero_is_ifcas_choice_and_at_one_the_gradient_alone() -> None:
    # model 0: the lower loss, a gradient against its last step (cos = −1);
    # model 1: the higher loss, a gradient along it (cos = +1)
    probe = FakeProbe({0: (0.1, np.array([1.0, 0.0])), 1: (0.9, np.array([-1.0, 0.0]))})
    cands = [candidate(0, [1, 0]), candidate(1, [1, 0])]
    assert make_policy("gradloss", {"lam": 0.0}).choose(probe, cands, 0) == 0
    assert make_policy("min_loss", {}).choose(probe, cands, 0) == 0
    assert make_policy("gradloss", {"lam": 1.0}).choose(probe, cands, 0) == 1
    for bad in (-0.01, 1.01):
        with pytest.raises(ValueError, match=rf"lam must be in \[0, 1\], got {bad}"):
            make_policy("gradloss", {"lam": bad})


def test_the_descent_similarity_of_short_vectors_is_their_cosine() -> None:
    # norms far below 1 still give the cosine: 0.5 · 0.25 = 0.125
    short = np.array([-0.25, 0.0], dtype=np.float32)
    assert descent_similarity(np.array([0.5, 0.0]), short) == pytest.approx(1.0)
    diagonal = np.array([-1e-3, -1e-3])
    tiny = np.array([1e-3, 0.0], dtype=np.float32)
    assert descent_similarity(diagonal, tiny) == pytest.approx(1 / math.sqrt(2))


def test_an_update_that_is_not_ok_moves_no_client_and_no_model() -> None:
    strategy, state = _state("ifca", k=3, clients=3)
    failed = ClientUpdate(ClientId(0), ClusterId(2), "failed", reason="crashed")
    late = ClientUpdate(
        ClientId(1),
        ClusterId(1),
        "late",
        np.full(2, 1.0, dtype=np.float32),
        np.array([5.0, 5.0], dtype=np.float32),
        10,
        1.0,
    )
    new = strategy.aggregate(state, 0, [failed, late, _ok(2, 2, [1, 1])], _rng())
    assert dict(new.assignment) == {0: 0, 1: 0, 2: 2}
    assert_allclose(new.models[1], [1.0, 1.0])
    assert_allclose(new.models[2], [3.0, 3.0])


def test_ifca_takes_the_scenario_aggregator_per_cluster() -> None:
    strategy, state = _state("ifca", k=2, clients=3)
    strategy.aggregator = Median()
    updates = [
        _ok(0, 1, [0, 0], 10),
        _ok(1, 1, [1, 2], 10),
        _ok(2, 1, [100, 100], 1000),
    ]
    # the coordinate-wise median of the three deltas, not their mean
    new = strategy.aggregate(state, 0, updates, _rng())
    assert_allclose(new.models[1], [1 + 1.0, 1 + 2.0])
    assert_allclose(new.models[0], [0.0, 0.0])


def test_gradloss_keeps_each_clusters_weighted_step_in_float32() -> None:
    strategy, state = _state("gradloss", k=2, clients=2)
    new = strategy.aggregate(
        state, 0, [_ok(0, 1, [1, 1], 10), _ok(1, 1, [3, -1], 30)], _rng()
    )
    # (10·[1,1] + 30·[3,−1]) / 40, sent to the clients as float32
    assert new.last_updates[1].dtype == np.float32
    assert_allclose(new.last_updates[1], [2.5, -0.5])
    assert set(new.last_updates) == {1}


def test_a_repair_seed_for_a_cluster_without_a_model_gets_every_model() -> None:
    strategy, state = _state("gradloss", k=2, clients=2)
    state = state.replace(seeds={ClientId(0): ClusterId(5)})
    plans = strategy.plan_round(
        state, 1, [ClientInfo(ClientId(c), 10) for c in range(2)], _rng()
    )
    assert [set(p.models) for p in plans] == [{0, 1}, {0, 1}]
    assert all(p.identity == "gradloss" for p in plans)


def test_repair_gives_each_empty_cluster_its_own_client() -> None:
    # five clusters, one chosen, four clients: each client seeds another
    # cluster, for every draw
    _, state = _state("gradloss", k=5, clients=4)
    for seed in range(20):
        seeds = repair_seeds(state, {ClusterId(0)}, np.random.default_rng(seed))
        assert sorted(seeds) == [0, 1, 2, 3]
        assert sorted(seeds.values()) == [1, 2, 3, 4]


def test_repair_with_fewer_clients_than_empty_clusters_seeds_what_it_can() -> None:
    _, state = _state("gradloss", k=4, clients=2)
    seeds = repair_seeds(state, {ClusterId(3)}, _rng())
    # two clients for three empty clusters: the lowest two ids are seeded
    assert sorted(seeds) == [0, 1] and sorted(seeds.values()) == [0, 1]
