"""CAFA: CBCC's silhouette clustering, ABFA's weights, Eq. 11, and the protocol."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from numpy.testing import assert_allclose
from sklearn.metrics import silhouette_score

import clusterfed
from clusterfed.actors import Client, InlineRuntime, ParameterServer
from clusterfed.actors.work import class_histogram
from clusterfed.algorithms import ClientInfo, ClientUpdate, PeerScore, make
from clusterfed.algorithms._abfa import ABFARecord
from clusterfed.algorithms.cafa import (
    CAFA,
    CAFADiagnostics,
    CAFAState,
    CBCCRecord,
    abfa_weights,
    cbcc_clustering,
    cbcc_weights,
    class_features,
    combined_weights,
    iid_cluster,
    weighted_accuracy,
)
from clusterfed.data import iid_mix, load_dataset
from clusterfed.federation import build_server
from clusterfed.protocol import Welcome, decode
from clusterfed.scenarios import plan_run
from clusterfed.scenarios.spec import IIDMixPartition
from clusterfed.types import ClientId, ClusterId
from helpers import read_rounds, small_scenario

DIM = 5

# Planted histograms: 5 near-uniform clients, 3 holding classes 0-1, 2 holding 7-9.
PLANTED = np.array(
    [
        [10, 11, 9, 10, 10, 10, 9, 11, 10, 10],
        [11, 10, 10, 9, 10, 10, 10, 10, 11, 9],
        [9, 10, 11, 10, 10, 9, 11, 10, 10, 10],
        [10, 9, 10, 11, 10, 10, 10, 9, 10, 11],
        [10, 10, 10, 10, 9, 11, 10, 10, 9, 11],
        [40, 38, 0, 0, 0, 0, 0, 0, 0, 0],
        [36, 42, 0, 0, 0, 0, 0, 0, 0, 0],
        [41, 37, 1, 0, 0, 0, 0, 0, 0, 0],
        [0, 0, 0, 0, 0, 0, 0, 30, 29, 31],
        [0, 0, 0, 0, 0, 0, 0, 28, 33, 30],
    ]
)
PLANTED_GROUPS = [0, 0, 0, 0, 0, 1, 1, 1, 2, 2]


# -- CBCC ------------------------------------------------------------------------


def test_class_features_are_histograms_over_their_totals() -> None:
    features = class_features(np.array([[1, 3, 0], [5, 5, 10]]))
    assert_allclose(features, [[0.25, 0.75, 0.0], [0.25, 0.25, 0.5]])
    with pytest.raises(ValueError, match="at least one sample"):
        class_features(np.array([[0, 0]]))


def test_the_silhouette_picks_the_planted_number_of_clusters() -> None:
    found = cbcc_clustering(class_features(PLANTED), seed=0)
    assert found.k == 3
    assert set(found.scores) == set(range(2, len(PLANTED)))
    assert found.scores[3] == max(found.scores.values())
    # The clusters are the planted groups, whatever their ids.
    pairs = set(zip(found.labels.tolist(), PLANTED_GROUPS, strict=True))
    assert len(pairs) == 3


def test_k_max_caps_the_range_and_tiny_federations_are_one_cluster() -> None:
    capped = cbcc_clustering(class_features(PLANTED), k_max=2, seed=0)
    assert capped.k == 2 and set(capped.scores) == {2}
    two = cbcc_clustering(class_features(PLANTED[:2]), seed=0)
    assert two.k == 1 and two.labels.tolist() == [0, 0] and not two.scores
    assert two.centres.shape == (1, 10)


def test_the_iid_cluster_is_the_largest() -> None:
    found = cbcc_clustering(class_features(PLANTED), seed=0)
    iid = iid_cluster(found.labels)
    assert [i for i, label in enumerate(found.labels) if label == iid] == [
        0,
        1,
        2,
        3,
        4,
    ]
    assert iid_cluster([2, 1, 1, 2, 0]) == 1  # a tie goes to the lowest id


def test_cbcc_weights_are_the_share_of_clients_in_each_cluster() -> None:
    assert_allclose(
        cbcc_weights([0, 0, 1, 2, 2, 2]), [2 / 6, 2 / 6, 1 / 6, 0.5, 0.5, 0.5]
    )


def _rng() -> np.random.Generator:
    return np.random.default_rng(0)


def _cafa_state(
    strategy: CAFA,
    histograms: np.ndarray = PLANTED,
    n: int | None = None,
    rng: np.random.Generator | None = None,
) -> CAFAState:
    """Every client joined and described; `rng` is the run's stream (drawn
    from by CBCC's seed)."""
    n = len(histograms) if n is None else n
    state = strategy.init_state([np.zeros(DIM, dtype=np.float32)])
    for i in range(n):
        state = strategy.on_join(state, ClientInfo(ClientId(i), n_train=80))
    return strategy.on_describe(
        state,
        0,
        {ClientId(i): histograms[i] for i in range(len(histograms))},
        _rng() if rng is None else rng,
    )


def _cbcc(strategy: CAFA, state: CAFAState) -> CBCCRecord:
    """CBCC's record in the strategy's diagnostics of `state`, typed."""
    found = strategy.diagnostics(state)
    assert found is not None and found.cbcc is not None
    return found.cbcc


def _abfa(strategy: CAFA, state: CAFAState) -> ABFARecord:
    """ABFA's record in the strategy's diagnostics of `state`, typed."""
    found = strategy.diagnostics(state)
    assert found is not None and found.abfa is not None
    return found.abfa


def test_a_late_client_joins_the_nearest_centre_and_the_clusters_stay() -> None:
    strategy = CAFA()
    rng = np.random.default_rng(0)
    state = _cafa_state(strategy, rng=rng)
    before = _cbcc(strategy, state)
    late = np.array([[0, 0, 0, 0, 0, 0, 0, 20, 20, 21]])
    state = strategy.on_join(state, ClientInfo(ClientId(10), 61, joined_round=3))
    state = strategy.on_describe(state, 3, {ClientId(10): late[0]}, rng)
    after = _cbcc(strategy, state)
    assert after.k == before.k == 3
    assert after.clusters[ClientId(10)] == after.clusters[ClientId(8)]
    assert {k: v for k, v in after.clusters.items() if k != 10} == before.clusters
    assert after.iid_clients == (0, 1, 2, 3, 4)
    assert strategy.cbcc_weight(state, ClientId(10)) == pytest.approx(3 / 11)
    assert strategy.cbcc_weight(state, ClientId(0)) == pytest.approx(5 / 11)


def test_a_leaving_client_leaves_its_cbcc_cluster() -> None:
    strategy = CAFA()
    state = strategy.on_leave(_cafa_state(strategy), ClientId(9))
    assert ClientId(9) not in _cbcc(strategy, state).clusters
    assert strategy.cbcc_weight(state, ClientId(8)) == pytest.approx(1 / 9)


# -- ABFA and Eq. 11 -----------------------------------------------------------------


def test_weighted_accuracy_weighs_by_validation_size() -> None:
    # Eq. 9 by hand: (0.5·20 + 0.9·30) / 50 = 0.74
    assert weighted_accuracy([0.5, 0.9], [20, 30]) == pytest.approx(0.74)
    with pytest.raises(ValueError, match="positive size"):
        weighted_accuracy([], [])


def test_abfa_and_combined_weights_on_known_numbers() -> None:
    assert_allclose(abfa_weights([0.2, 0.6, 0.2]), [0.2, 0.6, 0.2])
    assert_allclose(abfa_weights([0.5, 0.25, 0.25]), [0.5, 0.25, 0.25])
    assert_allclose(abfa_weights([0.0, 0.0]), [0.5, 0.5])
    # Eq. 11: (0.6·0.5, 0.2·0.25, 0.2·0.25) / 0.4 = (0.75, 0.125, 0.125)
    assert_allclose(
        combined_weights([0.6, 0.2, 0.2], [0.5, 0.25, 0.25]), [0.75, 0.125, 0.125]
    )
    assert_allclose(combined_weights([0.5, 0.25, 0.25], [0.2, 0.4, 0.4]), [1 / 3] * 3)


# Who scored whose model: TABLE[evaluator][owner], with each evaluator's held-out
# size. Clients 0, 5, 8: one per planted CBCC cluster (sizes 5, 3, 2 of 10).
MEMBERS = [0, 5, 8]
SIZES = {0: 10, 5: 20, 8: 30}
TABLE = {
    0: {5: 0.8, 8: 0.6},
    5: {0: 0.5, 8: 0.7},
    8: {0: 0.9, 5: 0.3},
}


def _scored_updates(state: CAFAState) -> list[ClientUpdate]:
    deltas = {0: [1.0, 0, 0, 0, 0], 5: [0, 2.0, 0, 0, 0], 8: [0, 0, 4.0, 0, 0]}
    updates = []
    for owner in MEMBERS:
        scores = {
            ClientId(evaluator): PeerScore(row[owner], 0.1, SIZES[evaluator])
            for evaluator, row in TABLE.items()
            if owner in row
        }
        updates.append(
            ClientUpdate(
                ClientId(owner),
                ClusterId(0),
                "ok",
                state.models[ClusterId(0)],
                np.array(deltas[owner], dtype=np.float32),
                80,
                1.0,
                peer_scores=scores,
            )
        )
    return updates


def test_abfa_weights_of_a_hand_made_accuracy_table_and_eq_11() -> None:
    strategy = CAFA()
    state = _cafa_state(strategy)
    new = strategy.aggregate(state, 0, _scored_updates(state), _rng())
    # Eq. 9 by hand: A_0 = (0.5·20 + 0.9·30)/50 = 0.74,
    # A_5 = (0.8·10 + 0.3·30)/40 = 0.425, A_8 = (0.6·10 + 0.7·20)/30 = 2/3.
    a = np.array([0.74, 0.425, 2 / 3])
    w_a = a / a.sum()  # Eq. 10
    w_k = np.array([5, 3, 2]) / 10  # Eq. 8: the planted clusters' shares
    c = w_k * w_a / (w_k * w_a).sum()  # Eq. 11
    record = _abfa(strategy, new)
    assert record.members == tuple(MEMBERS)
    assert_allclose([record.accuracy[ClientId(m)] for m in MEMBERS], a)
    assert_allclose([record.cbcc_weight[ClientId(m)] for m in MEMBERS], w_k)
    assert_allclose([record.weight[ClientId(m)] for m in MEMBERS], c)
    assert_allclose(new.models[0], [c[0], 2 * c[1], 4 * c[2], 0, 0], rtol=1e-6)
    assert new.models[0].dtype == np.float32
    np.testing.assert_array_equal(state.models[0], np.zeros(DIM))


def test_unscored_models_take_the_mean_accuracy_and_failures_are_left_out() -> None:
    strategy = CAFA()
    state = _cafa_state(strategy)
    updates = _scored_updates(state)
    updates[1] = ClientUpdate(
        updates[1].client, ClusterId(0), "ok", updates[1].base, updates[1].delta, 80
    )
    updates.append(ClientUpdate(ClientId(9), ClusterId(0), "failed", reason="down"))
    record = _abfa(strategy, strategy.aggregate(state, 0, updates, _rng()))
    assert record.members == tuple(MEMBERS)
    assert record.accuracy[ClientId(5)] == pytest.approx((0.74 + 2 / 3) / 2)


def test_a_round_samples_k_clients_among_those_cbcc_placed() -> None:
    strategy = CAFA(selected=4)
    rng = np.random.default_rng(0)  # one stream for the whole run
    state = _cafa_state(strategy, n=12, rng=rng)  # clients 10, 11 never described
    clients = [ClientInfo(ClientId(i), 80) for i in range(12)]
    counts: Counter[int] = Counter()
    for round in range(30):
        plans = strategy.plan_round(state, round, clients, rng)
        assert len(plans) == 4 and len({p.client for p in plans}) == 4
        counts.update(p.client for p in plans)
    assert set(counts) <= set(range(10)) and len(counts) == 10
    fresh = strategy.init_state([np.zeros(DIM, np.float32)])
    for client in clients[:3]:
        fresh = strategy.on_join(fresh, client)
    unplaced = strategy.plan_round(fresh, 0, clients[:3], _rng())
    assert len(unplaced) == 3  # nobody described yet: everyone may train


def test_each_member_scores_every_members_model_its_own_too() -> None:
    strategy = CAFA()
    state = _cafa_state(strategy)
    updates = _scored_updates(state)
    updates.append(ClientUpdate(ClientId(9), ClusterId(0), "late"))
    own = strategy.plan_probes(state, 0, updates, _rng())
    assert sorted(p.client for p in own) == MEMBERS
    assert all(sorted(p.models) == MEMBERS for p in own)  # Algorithm 1, line 13
    # A member alone still scores its own model.
    (alone,) = strategy.plan_probes(state, 0, updates[:1], _rng())
    assert list(alone.models) == [updates[0].client]


def test_without_its_own_a_member_scores_the_others_models() -> None:
    strategy = CAFA(include_own=False)
    state = _cafa_state(strategy)
    updates = _scored_updates(state)
    updates.append(ClientUpdate(ClientId(9), ClusterId(0), "late"))
    plans = {p.client: p for p in strategy.plan_probes(state, 0, updates, _rng())}
    assert sorted(plans) == MEMBERS
    assert sorted(plans[ClientId(5)].models) == [0, 8]
    assert_allclose(plans[ClientId(5)].models[ClientId(8)], [0, 0, 4.0, 0, 0])
    assert strategy.plan_probes(state, 0, updates[:1], _rng()) == []


@pytest.mark.parametrize(
    "params",
    [{"selected": 0}, {"selected": 2.5}, {"k_max": 1}, {"k_max": True}],
)
def test_bad_hyperparameters_name_the_value(params: dict) -> None:
    with pytest.raises(ValueError, match=str(next(iter(params.values())))):
        make("cafa", **params)


# -- the protocol, through real client actors -------------------------------------


class SpyTransport(InlineRuntime):
    """In-process clients; records the kind of every request it delivers."""

    def __init__(self) -> None:
        super().__init__()
        self.kinds: Counter[str] = Counter()
        self.by_client: dict[str, Counter[ClientId]] = {}

    async def request(self, client: int, head: bytes, body: bytes) -> bytes | None:
        kind = decode(head + body).payload.kind
        self.kinds[kind] += 1
        self.by_client.setdefault(kind, Counter())[ClientId(client)] += 1
        return await super().request(client, head, body)


MIX = IIDMixPartition(iid_fraction=0.5)


def _serve(
    algorithm: str, rounds: int = 2, strategy: CAFA | None = None, **changes: object
) -> tuple[ParameterServer, SpyTransport, list]:
    async def go() -> tuple[ParameterServer, SpyTransport, list]:
        plan = plan_run(
            small_scenario(algorithm=algorithm, partition=MIX, clients=8, **changes)
        )
        spy = SpyTransport()
        server = build_server(plan, spy)
        if strategy is not None:
            server.strategy = strategy
        for join in await spy.add(plan.clients):
            reply = decode(await server.handle(join)).payload
            assert isinstance(reply, Welcome)
        outcomes = [await server.run_round(r) for r in range(rounds)]
        return server, spy, outcomes

    return asyncio.run(go())


def test_the_histogram_is_sent_only_when_the_strategy_asks() -> None:
    _, fedavg, _ = _serve("fedavg")
    assert "describe_task" not in fedavg.kinds and "probe_task" not in fedavg.kinds
    server, cafa, outcomes = _serve("cafa", rounds=3)
    # Once per client, in its first round, whatever the number of rounds.
    assert cafa.kinds["describe_task"] == 8
    assert set(cafa.by_client["describe_task"].values()) == {1}
    assert server.roster.described == set(range(8))
    cbcc = outcomes[0].diagnostics
    assert isinstance(cbcc, CAFADiagnostics) and cbcc.cbcc is not None
    assert sorted(cbcc.cbcc.clusters) == list(range(8))


def test_each_histogram_counts_the_clients_training_labels() -> None:
    plan = plan_run(small_scenario(algorithm="cafa", partition=MIX, clients=8))
    labels = load_dataset("digits").labels
    for spec in plan.clients:
        counts = class_histogram(Client(spec).trainer, 10)
        assert counts == np.bincount(labels[spec.train], minlength=10).tolist()


class NoSharing(CAFA):
    """CAFA without the probes (no `name`: not registered)."""

    def plan_probes(self, state, round, updates, rng):  # type: ignore[no-untyped-def]
        return []


def test_the_bytes_of_model_sharing_show_up_in_bytes_up_and_down() -> None:
    server, spy, shared = _serve("cafa", rounds=2)
    _, quiet_spy, quiet = _serve("cafa", rounds=2, strategy=NoSharing())
    assert spy.kinds["probe_task"] == 2 * 6 and "probe_task" not in quiet_spy.kinds
    model_bytes = 4 * server.limits.n_weights
    for with_probes, without in zip(shared, quiet, strict=True):
        members = {
            c.id for c in with_probes.clients if c.trained
        }  # K = 6 members each scored the 6 members' models, its own too
        assert len(members) == 6
        extra_down = with_probes.bytes_down - without.bytes_down
        extra_up = with_probes.bytes_up - without.bytes_up
        assert 6 * 6 * model_bytes < extra_down < 6 * 6 * model_bytes * 1.01
        assert extra_up > 0
        for a, b in zip(with_probes.clients, without.clients, strict=True):
            if a.id in members:
                assert a.bytes_down > b.bytes_down + 6 * model_bytes
                assert a.bytes_up > b.bytes_up
            else:
                assert (a.bytes_down, a.bytes_up) == (b.bytes_down, b.bytes_up)
        assert with_probes.sim_duration > without.sim_duration


def test_a_whole_run_reports_cbcc_in_the_summary(tmp_path: Path) -> None:
    result = clusterfed.run(
        small_scenario(algorithm="cafa", partition=MIX, clients=10), out=tmp_path
    )
    cbcc = result.summary["cbcc"]
    assert {"precision", "recall", "accuracy", "f1", "k"} <= set(cbcc)
    assert cbcc["clients"] == 10 and cbcc["iid_true"] == 5
    assert cbcc["accuracy"] is not None and 0 <= cbcc["accuracy"] <= 1
    rows = read_rounds(tmp_path)
    assert rows[-1]["strategy"]["cbcc"]["k"] == cbcc["k"]
    assert json.loads((tmp_path / "summary.json").read_text())["cbcc"] == cbcc
    assert all(r["n_clusters"] == 1 for r in rows)


def test_other_algorithms_report_no_cbcc(tmp_path: Path) -> None:
    result = clusterfed.run(small_scenario(partition=MIX, rounds=1), out=tmp_path)
    assert "cbcc" not in result.summary
    assert read_rounds(tmp_path)[0]["strategy"] == {}


# -- the partition -------------------------------------------------------------------


def test_iid_mix_plants_iid_clients_and_clients_with_two_to_four_classes() -> None:
    labels = load_dataset("digits").labels
    partition = iid_mix(labels, 20, 5, (2, 4), np.random.default_rng(0))
    assert partition.groups.count(0) == 5
    everything = np.concatenate(partition.indices)
    assert len(np.unique(everything)) == len(everything)  # nobody shares a sample
    for indices, group in zip(partition.indices, partition.groups, strict=True):
        held = np.flatnonzero(np.bincount(labels[indices], minlength=10))
        if group == 0:
            assert len(held) == 10
        else:
            assert 2 <= len(held) <= 4
            # consecutive classes, modulo 10
            assert any(
                set(held) == {(s + i) % 10 for i in range(len(held))} for s in range(10)
            )
    again = iid_mix(labels, 20, 5, (2, 4), np.random.default_rng(0))
    assert again.groups == partition.groups


def test_iid_mix_scenarios_validate_and_know_their_iid_group() -> None:
    from clusterfed.scenarios import BUILTIN

    for name, share in (("cafa-mix", 0.25), ("cafa-mix50", 0.5)):
        scenario = BUILTIN[name]()
        assert scenario.clients == 20 and scenario.algorithm == "cafa"
        assert isinstance(scenario.partition, IIDMixPartition)
        assert scenario.partition.iid_fraction == share
        assert scenario.partition.iid_groups() == {0}
    assert IIDMixPartition().classes_per_client(10) == (2, 4)
    with pytest.raises(ValueError, match="min_class_share"):
        IIDMixPartition(min_class_share=0.5, max_class_share=0.3)


# -- edges of each step (issue 21) -----------------------------------------------------

# Four clients, each holding one class: the features are the vertices of a
# simplex, every pair at distance √2, so every 2-partition has the same inertia
# and K-means' answer depends on its seed alone.
ONE_CLASS = np.eye(4, dtype=np.int64) * 10


def test_one_selected_client_and_k_max_two_are_accepted() -> None:
    strategy = make("cafa", selected=1, k_max=2)
    state = _cafa_state(strategy)  # PLANTED would pick 3 unbounded
    assert _cbcc(strategy, state).k == 2
    assert set(_cbcc(strategy, state).silhouette) == {2}
    clients = [ClientInfo(ClientId(i), 80) for i in range(10)]
    assert len(strategy.plan_round(state, 0, clients, _rng())) == 1


def test_a_k_max_that_is_no_integer_is_refused_whole() -> None:
    with pytest.raises(
        ValueError, match=r"^k_max must be an integer ≥ 2 or None, got 2\.5$"
    ):
        CAFA(k_max=2.5)  # type: ignore[arg-type]


def test_a_histogram_of_one_sample_is_a_feature_and_an_empty_one_is_refused() -> None:
    assert_allclose(class_features(np.array([[0, 1, 0]])), [[0.0, 1.0, 0.0]])
    with pytest.raises(
        ValueError, match="^every class histogram needs at least one sample$"
    ):
        class_features(np.array([[3, 1], [0, 0]]))


def test_the_same_seed_gives_the_same_clustering_and_seeds_differ() -> None:
    features = class_features(np.eye(6, dtype=np.int64))  # six simplex vertices
    labellings = [
        {
            tuple(cbcc_clustering(features, k_max=2, seed=seed).labels.tolist())
            for _ in range(3)
        }
        for seed in range(4)
    ]
    assert all(len(runs) == 1 for runs in labellings)
    assert labellings[0] != labellings[1]  # the seed does reach K-means
    unseeded = cbcc_clustering(features, k_max=2).labels.tolist()
    assert {tuple(unseeded)} == labellings[0]  # no seed: seed 0


def test_cbcc_seeds_k_means_from_the_runs_stream() -> None:
    strategy = CAFA(k_max=2)
    clusterings = set()
    for seed in range(4):
        runs = {
            tuple(
                sorted(
                    _cafa_state(
                        strategy, ONE_CLASS, rng=np.random.default_rng(seed)
                    ).membership.items()
                )
            )
            for _ in range(3)
        }
        assert len(runs) == 1  # the same stream, the same clustering
        clusterings |= runs
    assert len(clusterings) > 1  # another stream, another K-means seed


def test_equal_silhouettes_go_to_the_smaller_k() -> None:
    # Four simplex vertices: every point's mean distance to its own cluster and
    # to the nearest other one is √2 (or it is alone): every silhouette is 0.
    found = cbcc_clustering(class_features(ONE_CLASS), seed=0)
    assert found.scores == {2: 0.0, 3: 0.0}
    assert found.k == 2 and len(set(found.labels.tolist())) == 2


def test_a_k_max_past_n_minus_one_scores_up_to_n_minus_one() -> None:
    found = cbcc_clustering(class_features(PLANTED), k_max=20, seed=0)
    assert sorted(found.scores) == list(range(2, len(PLANTED)))
    assert found.k == 3


def test_one_cluster_has_integer_labels_and_no_scores() -> None:
    two = cbcc_clustering(class_features(PLANTED[:2]), seed=0)
    assert two.scores == {}
    assert np.bincount(two.labels).tolist() == [2]  # labels index: integers


# Seven histograms on which one K-means++ start misses the best 2-partition
# for most seeds (14 of seeds 0-19 in scikit-learn 1.9); ten starts find it.
HARD = np.array(
    [
        [2, 3, 4, 5],
        [0, 0, 4, 5],
        [1, 1, 5, 2],
        [1, 4, 1, 2],
        [3, 3, 0, 0],
        [5, 4, 5, 3],
        [4, 1, 2, 4],
    ]
)


def test_ten_restarts_find_the_least_inertia_partition() -> None:
    features = class_features(HARD)
    best, best_labels = np.inf, None
    for rest in itertools.product((0, 1), repeat=len(HARD) - 1):
        labels = np.array((0, *rest))
        if len(set(labels.tolist())) < 2:
            continue
        inertia = sum(
            ((features[labels == j] - features[labels == j].mean(axis=0)) ** 2).sum()
            for j in (0, 1)
        )
        if inertia < best:
            best, best_labels = inertia, labels
    assert best_labels is not None
    for seed in range(5):
        found = cbcc_clustering(features, k_max=2, seed=seed)
        assert (
            len(set(zip(found.labels.tolist(), best_labels.tolist(), strict=True))) == 2
        )
        assert found.scores[2] == pytest.approx(silhouette_score(features, best_labels))


def test_weighted_accuracy_refuses_zero_sizes_and_unmatched_lengths() -> None:
    assert weighted_accuracy([0.3], [1]) == pytest.approx(0.3)
    message = "^weighted_accuracy needs one positive size per accuracy$"
    for accuracies, sizes in (([0.5, 0.6], [0, 0]), ([0.5, 0.6], [10])):
        with pytest.raises(ValueError, match=message):
            weighted_accuracy(accuracies, sizes)


def test_abfa_weights_divide_by_the_sum_of_accuracies() -> None:
    assert_allclose(abfa_weights([0.3, 0.6]), [1 / 3, 2 / 3])


def test_combined_weights_of_zero_products_are_equal() -> None:
    assert_allclose(combined_weights([0.5, 0.5], [0.0, 0.0]), [0.5, 0.5])
    assert_allclose(combined_weights([0.0, 0.0, 0.0], [0.2, 0.3, 0.5]), [1 / 3] * 3)


def test_eq_9_to_11_are_computed_in_float64_from_float32_inputs() -> None:
    a = np.array([0.1, 0.7, 0.35], dtype=np.float32)
    s = np.array([0.1, 0.3, 0.7], dtype=np.float32)
    wide_a, wide_s = a.astype(np.float64), s.astype(np.float64)
    assert weighted_accuracy(a, s) == (wide_a * wide_s).sum() / wide_s.sum()
    np.testing.assert_array_equal(abfa_weights(a), wide_a / wide_a.sum())
    product = wide_s * wide_a
    np.testing.assert_array_equal(combined_weights(s, a), product / product.sum())


def test_a_member_alone_keeps_its_whole_delta_and_an_accuracy_of_one() -> None:
    strategy = CAFA()
    state = _cafa_state(strategy)
    (update, *_) = _scored_updates(state)
    alone = ClientUpdate(update.client, ClusterId(0), "ok", update.base, update.delta)
    new = strategy.aggregate(state, 0, [alone], _rng())
    record = _abfa(strategy, new)
    assert record.members == (0,)
    assert record.accuracy == {0: 1.0} and record.weight == {0: 1.0}
    assert_allclose(new.models[ClusterId(0)], [1.0, 0, 0, 0, 0])


def test_a_round_without_usable_updates_records_no_members() -> None:
    strategy = CAFA()
    state = _cafa_state(strategy)
    state = strategy.aggregate(state, 0, _scored_updates(state), _rng())
    failed = [ClientUpdate(ClientId(0), ClusterId(0), "failed", reason="down")]
    after = strategy.aggregate(state, 1, failed, _rng())
    assert _abfa(strategy, after).members == ()
    np.testing.assert_array_equal(after.models[0], state.models[0])


def test_a_late_update_with_its_delta_takes_no_part() -> None:
    strategy = CAFA()
    state = _cafa_state(strategy)
    updates = _scored_updates(state)
    late = np.array([0, 0, 0, 0, 8.0], dtype=np.float32)
    updates.append(
        ClientUpdate(ClientId(9), ClusterId(0), "late", state.models[0], late, 80)
    )
    assert sorted(
        p.client for p in strategy.plan_probes(state, 0, updates, _rng())
    ) == (MEMBERS)
    new = strategy.aggregate(state, 0, updates, _rng())
    assert _abfa(strategy, new).members == tuple(MEMBERS)
    assert new.models[0][4] == 0.0


def test_diagnostics_keep_cbccs_k_and_silhouettes_when_a_cluster_empties() -> None:
    strategy = CAFA()
    state = _cafa_state(strategy)
    for client in (8, 9):  # the whole of the planted cluster of classes 7-9
        state = strategy.on_leave(state, ClientId(client))
    cbcc = _cbcc(strategy, state)
    assert cbcc.k == 3 and len(set(cbcc.clusters.values())) == 2
    assert list(cbcc.silhouette) == list(range(2, 10))
    assert max(cbcc.silhouette, key=cbcc.silhouette.__getitem__) == 3
    assert cbcc.iid_cluster == cbcc.clusters[ClientId(0)]
    assert cbcc.iid_clients == (0, 1, 2, 3, 4)


def test_diagnostics_of_a_membership_without_a_clustering_count_its_clusters() -> None:
    state = CAFAState(
        models={ClusterId(0): np.zeros(DIM, np.float32)},
        assignment={},
        membership={ClientId(0): 0, ClientId(1): 1, ClientId(2): 1},
    )
    found = CAFA().diagnostics(state)
    assert found == CAFADiagnostics(
        cbcc=CBCCRecord(
            k=2,
            iid_cluster=1,
            iid_clients=(ClientId(1), ClientId(2)),
            clusters={ClientId(0): 0, ClientId(1): 1, ClientId(2): 1},
            silhouette={},
        )
    )
    # No round aggregated yet: the record leaves `abfa` out.
    assert found.record() == {
        "cbcc": {
            "k": 2,
            "iid_cluster": 1,
            "iid_clients": [1, 2],
            "clusters": {"0": 0, "1": 1, "2": 1},
            "silhouette": {},
        }
    }
