"""FedDrift: the drift test, new clusters and merges decided by hand on planted
losses, the loss distance and the complete-linkage merge against independent
computations, the client's scores, the server's check of them, the
conformance suite, the scenarios, and runs in which the clients FedDrift
flags are the ones whose drift event fired."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import jsonschema
import msgpack
import numpy as np
import pytest
import test_hostile as hostile
import torch
from numpy.testing import assert_allclose, assert_array_equal
from pydantic import ValidationError
from sklearn.cluster import AgglomerativeClustering

import clusterfed
from clusterfed.actors import LocalTrainer, work
from clusterfed.actors.trace import read_trace
from clusterfed.actors.validation import check_update
from clusterfed.algorithms import ClientInfo, ClientUpdate, TaskPlan, make
from clusterfed.algorithms.feddrift import (
    FedDrift,
    FedDriftState,
    cluster_losses,
    loss_distances,
    merge_groups,
)
from clusterfed.algorithms.feddrift_eager import FedDriftEager
from clusterfed.conformance import CHECKS
from clusterfed.models import build_model, get_flat
from clusterfed.protocol import (
    Envelope,
    IdentityRule,
    TrainConfig,
    UpdateReply,
    decode,
    encode,
)
from clusterfed.protocol.codec import to_json_form
from clusterfed.protocol.schema import json_schema
from clusterfed.scenarios import BUILTIN, Drift, Scenario
from clusterfed.scenarios.spec import IIDPartition
from clusterfed.scenarios.transforms import PermutationTransform
from clusterfed.types import ClientId, ClusterId
from helpers import small_scenario, traced_run

DIM = 4
SIZES = (10, 20, 30, 40)


def _rng() -> np.random.Generator:
    return np.random.default_rng(0)


def _joined(strategy: FedDrift) -> FedDriftState:
    state = strategy.init_state([np.zeros(DIM, np.float32)])
    for i, n in enumerate(SIZES):
        state = strategy.on_join(state, ClientInfo(ClientId(i), n_train=n))
    return state


def _update(
    state: FedDriftState, client: int, cluster: int, losses: tuple[float, ...]
) -> ClientUpdate:
    """Client `client` trained `cluster`'s model by delta (client + 1) / 10
    on all its samples, having scored the offered models `losses`."""
    delta = np.full(DIM, (client + 1) / 10, np.float32)
    return ClientUpdate(
        ClientId(client),
        ClusterId(cluster),
        "ok",
        state.models[ClusterId(cluster)],
        delta,
        SIZES[client],
        0.5,
        losses=losses,
    )


def _delta(client: int) -> np.ndarray:
    return np.full(DIM, (client + 1) / 10, np.float64)


# -- the drift test, new clusters, merges: decided by hand ----------------------


def test_clients_whose_loss_jumps_by_more_than_delta_get_a_cluster_each() -> None:
    strategy = FedDrift(delta=0.5)
    state = _joined(strategy)
    # Round 0: no baseline yet, nobody is tested; every loss becomes one.
    state = strategy.aggregate(
        state, 0, [_update(state, c, 0, (2.0,)) for c in range(4)], _rng()
    )
    assert state.drifted == () and dict(state.baseline) == dict.fromkeys(range(4), 2.0)
    theta = state.models[ClusterId(0)].astype(np.float64)
    # Round 1: clients 0 and 1 improve; 2 rises by 0.5 (not more: stays);
    # 3 rises by 1.0 (flagged).
    losses = [(1.0,), (1.9,), (2.5,), (3.0,)]
    updates = [_update(state, c, 0, losses[c]) for c in range(4)]
    new = strategy.aggregate(state, 1, updates, _rng())
    assert new.drifted == (ClientId(3),)
    assert dict(new.assignment) == {0: 0, 1: 0, 2: 0, 3: 1}
    # The drifted client's own training starts its cluster; it joins no mean.
    assert_allclose(new.models[ClusterId(1)], theta + _delta(3), rtol=1e-6)
    want = theta + (10 * _delta(0) + 20 * _delta(1) + 30 * _delta(2)) / 60
    assert_allclose(new.models[ClusterId(0)], want, rtol=1e-6)
    assert dict(new.isolated) == {ClusterId(1): 2}  # W = 1 time step
    assert new.baseline[ClientId(3)] == 3.0  # the flagged client keeps the new loss
    assert dict(new.trained) == {0: 60.0 + 100.0, 1: 40.0}


def test_isolated_clusters_score_alone_and_open_clusters_merge_below_delta() -> None:
    strategy = FedDrift(delta=0.5, isolation=2)
    state = _joined(strategy)
    state = strategy.aggregate(
        state, 0, [_update(state, c, 0, (2.0,)) for c in range(4)], _rng()
    )
    jumps = [(1.0,), (1.0,), (3.0,), (3.0,)]
    state = strategy.aggregate(
        state, 1, [_update(state, c, 0, jumps[c]) for c in range(4)], _rng()
    )
    assert state.drifted == (2, 3) and dict(state.isolated) == {1: 3, 2: 3}
    # Time step 2: the isolated clients are offered only their own model.
    plans = strategy.plan_round(
        state, 2, [ClientInfo(ClientId(c), n) for c, n in enumerate(SIZES)], _rng()
    )
    assert [list(p.models) for p in plans] == [[0], [0], [1], [2]]
    assert {p.identity for p in plans} == {"feddrift"}
    own = [(0.5,), (0.6,), (0.4,), (0.5,)]
    state = strategy.aggregate(
        state, 2, [_update(state, c, [0, 0, 1, 2][c], own[c]) for c in range(4)], _rng()
    )
    assert state.merged == () and state.drifted == ()
    # Time step 3: out of isolation, everybody scores all three models.
    plans = strategy.plan_round(
        state, 3, [ClientInfo(ClientId(c), n) for c, n in enumerate(SIZES)], _rng()
    )
    assert [list(p.models) for p in plans] == [[0, 1, 2]] * 4
    scores = [(0.5, 2.0, 2.1), (0.6, 2.2, 2.0), (2.5, 0.4, 0.6), (2.4, 0.7, 0.5)]
    trained_before = dict(state.trained)
    thetas = {k: state.models[ClusterId(k)].astype(np.float64) for k in (1, 2)}
    updates = [
        _update(state, c, int(np.argmin(scores[c])), scores[c]) for c in range(4)
    ]
    new = strategy.aggregate(state, 3, updates, _rng())
    # By hand: L_1 = client 2's scores, L_2 = client 3's, so
    # D(1, 2) = max(0.6 − 0.4, 0.7 − 0.5) = 0.2 ≤ δ' = 0.5; cluster 0 is
    # over 1.4 from both (L_0 = (10·(0.5, 2.0, 2.1) + 20·(0.6, 2.2, 2.0))/30).
    assert new.merged == ((1, 2),)
    assert sorted(new.models) == [0, 1]
    assert dict(new.assignment) == {0: 0, 1: 0, 2: 1, 3: 1}
    # The merged model: each cluster's model after its FedAvg, weighted by
    # the samples it trained on over all time steps (this one included).
    w1 = trained_before[ClusterId(1)] + 30
    w2 = trained_before[ClusterId(2)] + 40
    want = (w1 * (thetas[1] + _delta(2)) + w2 * (thetas[2] + _delta(3))) / (w1 + w2)
    assert_allclose(new.models[ClusterId(1)], want, rtol=1e-6)
    assert new.trained[ClusterId(1)] == w1 + w2


def test_at_the_cap_a_drifted_client_is_flagged_but_stays() -> None:
    strategy = FedDrift(delta=0.5, max_clusters=2)
    state = _joined(strategy)
    state = strategy.aggregate(
        state, 0, [_update(state, c, 0, (2.0,)) for c in range(4)], _rng()
    )
    jumps = [(1.0,), (1.0,), (3.0,), (3.0,)]
    updates = [_update(state, c, 0, jumps[c]) for c in range(4)]
    theta = state.models[ClusterId(0)].astype(np.float64)
    new = strategy.aggregate(state, 1, updates, _rng())
    assert new.drifted == (2, 3)
    assert dict(new.assignment) == {0: 0, 1: 0, 2: 1, 3: 0}
    want = theta + (10 * _delta(0) + 20 * _delta(1) + 40 * _delta(3)) / 70
    assert_allclose(new.models[ClusterId(0)], want, rtol=1e-6)


def test_the_least_recently_used_empty_cluster_makes_room() -> None:
    strategy = FedDrift(delta=0.5, max_clusters=2)
    models = {
        ClusterId(0): np.zeros(DIM, np.float32),
        ClusterId(1): np.ones(DIM, np.float32),
    }
    state = FedDriftState(
        models=models,
        assignment={ClientId(0): ClusterId(0)},
        baseline={ClientId(0): 0.1},
        sizes={ClientId(0): 10},
        last_used={ClusterId(0): 4, ClusterId(1): 2},
        next_cluster=2,
    )
    update = ClientUpdate(
        ClientId(0),
        ClusterId(0),
        "ok",
        models[0],
        np.ones(DIM, np.float32),
        10,
        1.0,
        losses=(3.0, 3.5),
    )
    new = strategy.aggregate(state, 5, [update], _rng())
    assert new.drifted == (0,) and sorted(new.models) == [0, 2]
    assert new.assignment[ClientId(0)] == 2


def test_eager_drifters_share_one_cluster_that_never_merges() -> None:
    strategy = FedDriftEager(delta=0.5)
    state = _joined(strategy)
    state = strategy.aggregate(
        state, 0, [_update(state, c, 0, (2.0,)) for c in range(4)], _rng()
    )
    theta = state.models[ClusterId(0)].astype(np.float64)
    jumps = [(1.0,), (1.0,), (3.0,), (3.0,)]
    state = strategy.aggregate(
        state, 1, [_update(state, c, 0, jumps[c]) for c in range(4)], _rng()
    )
    assert state.drifted == (2, 3) and dict(state.isolated) == {}
    assert dict(state.assignment) == {0: 0, 1: 0, 2: 1, 3: 1}
    # The shared model: the drifters' local models weighted by their samples.
    want = (30 * (theta + _delta(2)) + 40 * (theta + _delta(3))) / 70
    assert_allclose(state.models[ClusterId(1)], want, rtol=1e-6)
    assert state.trained[ClusterId(1)] == 70.0
    # Next time step every client scores both; the clusters are close (D =
    # 0.1 ≤ δ') and FedDrift would merge them: the eager variant does not.
    plans = strategy.plan_round(
        state, 2, [ClientInfo(ClientId(c), n) for c, n in enumerate(SIZES)], _rng()
    )
    assert [list(p.models) for p in plans] == [[0, 1]] * 4
    close = [(0.5, 0.6), (0.5, 0.6), (0.6, 0.5), (0.6, 0.5)]
    updates = [_update(state, c, [0, 0, 1, 1][c], close[c]) for c in range(4)]
    assert strategy.aggregate(state, 2, updates, _rng()).merged == ()
    assert FedDrift(delta=0.5).aggregate(state, 2, updates, _rng()).merged == ((0, 1),)


# -- the loss distance and the merge against independent computations ---------


def test_the_loss_distance_is_the_papers_formula_pair_by_pair() -> None:
    losses = np.random.default_rng(3).uniform(0, 3, (5, 5))
    distances = loss_distances(losses)
    for i, j in itertools.product(range(5), repeat=2):
        want = max(losses[i, j] - losses[i, i], losses[j, i] - losses[j, j], 0.0)
        assert distances[i, j] == pytest.approx(0.0 if i == j else want)
    assert_array_equal(distances, distances.T)


def test_a_clusters_loss_is_its_members_sample_weighted_score() -> None:
    scores = {
        ClientId(0): {ClusterId(0): 1.0, ClusterId(3): 4.0},
        ClientId(1): {ClusterId(0): 2.0, ClusterId(3): 1.0},
        ClientId(2): {ClusterId(0): 5.0, ClusterId(3): 0.5},
    }
    assignment = {
        ClientId(0): ClusterId(0),
        ClientId(1): ClusterId(0),
        ClientId(2): ClusterId(3),
    }
    table = cluster_losses(
        [ClusterId(0), ClusterId(3)], assignment, scores, {0: 10, 1: 30, 2: 5}
    )
    assert_allclose(table, [[(10 + 60) / 40, (40 + 30) / 40], [5.0, 0.5]])


def _brute_complete_linkage(distances: np.ndarray, threshold: float) -> list[list[int]]:
    """Complete linkage by hand: join the two closest groups while their
    largest pairwise distance is at most `threshold`."""
    groups = [[i] for i in range(len(distances))]
    while len(groups) > 1:
        pairs = [
            (max(distances[a, b] for a in g for b in h), x, y)
            for (x, g), (y, h) in itertools.combinations(enumerate(groups), 2)
        ]
        best, x, y = min(pairs)
        if best > threshold:
            break
        groups[x] = sorted(groups[x] + groups[y])
        del groups[y]
    return sorted(groups, key=lambda g: g[0])


@pytest.mark.parametrize("seed", range(6))
def test_the_merge_is_complete_linkage_cut_at_delta(seed: int) -> None:
    rng = np.random.default_rng(seed)
    # Two or three planted concepts: small distances within, large across.
    concept = rng.integers(0, 3, 7)
    losses = rng.uniform(0.1, 0.4, (7, 7)) + 2.0 * (
        concept[:, None] != concept[None, :]
    )
    distances = loss_distances(losses)
    groups = merge_groups(distances, 0.5)
    assert groups == _brute_complete_linkage(distances, 0.5)
    sk = AgglomerativeClustering(
        n_clusters=None,
        metric="precomputed",
        linkage="complete",
        distance_threshold=0.5,
    ).fit(distances)
    assert sorted(map(sorted, _labels_to_groups(sk.labels_))) == sorted(groups)
    assert sorted(map(sorted, _labels_to_groups(concept))) == sorted(groups)


def _labels_to_groups(labels: np.ndarray) -> list[list[int]]:
    found: dict[int, list[int]] = {}
    for i, label in enumerate(labels):
        found.setdefault(int(label), []).append(i)
    return list(found.values())


def test_a_linkage_distance_equal_to_delta_still_merges() -> None:
    # scipy's fcluster by distance, as the authors' code cuts: at most δ'.
    distances = np.array([[0.0, 0.5], [0.5, 0.0]])
    assert merge_groups(distances, 0.5) == [[0, 1]]
    assert merge_groups(distances, 0.49) == [[0], [1]]


# -- the client's scores --------------------------------------------------------


def _trainer() -> LocalTrainer:
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(24, 1, 4, 4, generator=gen)
    y = (x.flatten(1).sum(1) > 8).long()
    model = build_model("mlp", (1, 4, 4), 2, hidden=[5])
    return LocalTrainer(model, x[:20], y[:20], x[20:], y[20:], seed=0)


def test_the_client_reports_every_models_loss_and_trains_the_lowest() -> None:
    from clusterfed.algorithms import Candidate

    trainer = _trainer()
    models = [
        get_flat(build_model("mlp", (1, 4, 4), 2, hidden=[5], seed=s))
        for s in (4, 5, 6)
    ]
    candidates = [Candidate(ClusterId(k), m) for k, m in enumerate(models)]
    config = TrainConfig(lr=0.1, momentum=0.0, batch_size=20, epochs=1)
    cluster, result = work.train(
        trainer, candidates, IdentityRule(name="feddrift"), config, 0
    )
    want = [trainer.loss(m) for m in models]
    assert result.losses is not None
    assert_allclose(result.losses, want)
    assert cluster == int(np.argmin(want))
    again = _trainer().train(models[int(cluster)], config, 0)
    assert_array_equal(result.delta, again.delta)
    assert result.samples_seen == 20 + 3 * 20  # the training set once per model
    # One model: still scored, so the server can test the client for drift.
    _, alone = work.train(
        _trainer(), candidates[:1], IdentityRule(name="feddrift"), config, 0
    )
    assert alone.losses == (pytest.approx(want[0]),)
    _, plain = work.train(_trainer(), candidates[:1], None, config, 0)
    assert plain.losses is None


# -- the losses on the wire and the server's check ----------------------------


def _reply(losses: tuple[float, ...] | None, cluster: int = 0) -> UpdateReply:
    return UpdateReply(
        cluster=cluster,
        delta=np.zeros(4, np.float32),
        n_samples=1,
        loss=0.5,
        samples_seen=1,
        losses=losses,
    )


def _plan(identity: str | None, n_models: int = 2) -> TaskPlan:
    models = {ClusterId(s): np.zeros(4, np.float32) for s in range(n_models)}
    return TaskPlan(ClientId(1), dict(models), identity=identity)


def test_a_recorded_update_with_losses_is_valid_against_the_schema(
    tmp_path: Path,
) -> None:
    traced_run(tmp_path, small_scenario(algorithm="feddrift", rounds=2))
    forms = [
        to_json_form(r.data)
        for r in read_trace(tmp_path)[1]
        if r.kind == "update_reply" and r.data is not None
    ]
    assert forms and all(len(f["payload"]["losses"]) == 1 for f in forms)
    validator = jsonschema.Draft202012Validator(json_schema())
    for form in forms:
        assert not list(validator.iter_errors(form)), form["payload"]
    losses = json_schema()["$defs"]["UpdateReply"]["properties"]["losses"]
    bounded = next(o for o in losses["anyOf"] if o.get("type") == "array")
    assert (bounded["minItems"], bounded["maxItems"]) == (1, 1024)
    assert bounded["items"]["minimum"] == 0 and bounded["items"]["maximum"] == 1e12
    broken = {**forms[0], "payload": {**forms[0]["payload"], "losses": [-1.0]}}
    assert list(validator.iter_errors(broken))


def test_the_losses_travel_and_an_update_without_them_keeps_its_bytes() -> None:
    sent = Envelope(
        msg_id="m", sender="c", recipient="s", round=0, payload=_reply((0.25, 7.5))
    )
    received = decode(encode(sent)).payload
    assert isinstance(received, UpdateReply) and received.losses == (0.25, 7.5)
    bare = encode(
        Envelope(msg_id="m", sender="c", recipient="s", round=0, payload=_reply(None))
    )
    assert b"losses" not in bare
    received = decode(bare).payload
    assert isinstance(received, UpdateReply) and received.losses is None


@pytest.mark.parametrize(
    "losses", [(), (-0.5,), ("0.5",), (True,), (2e12,), (float("nan"),), (0.1,) * 1025]
)
def test_malformed_losses_are_refused_when_decoded(losses: tuple) -> None:
    with pytest.raises(ValidationError):
        _reply(losses)


@pytest.mark.parametrize(
    ("identity", "losses", "cluster", "reason"),
    [
        ("feddrift", None, 0, "no losses, which the feddrift rule reports"),
        ("min_loss", (0.5, 0.6), 0, "losses for a task that asked for none"),
        (None, (1.0,), 0, "losses for a task that asked for none"),
        ("fedsoft", (1.0, 2.0), 0, "no importance weights"),
        ("feddrift", (1.0,), 0, "1 losses for the 2 models sent"),
        ("feddrift", (1.0, 2.0, 3.0), 0, "3 losses for the 2 models sent"),
        ("feddrift", (1.0, 0.5), 0, "update for cluster 0, but the lowest loss"),
        ("feddrift", (0.5, 0.5), 1, "update for cluster 1, but the lowest loss"),
    ],
)
def test_the_server_refuses_losses_that_do_not_fit_the_task(
    identity: str | None, losses: tuple[float, ...] | None, cluster: int, reason: str
) -> None:
    problem = check_update(_reply(losses, cluster), _plan(identity), 4, None)
    assert problem is not None and problem.startswith(reason)


def test_the_server_accepts_losses_that_fit_the_task() -> None:
    assert check_update(_reply((0.3, 0.7)), _plan("feddrift"), 4, None) is None
    assert check_update(_reply((0.9, 0.7), 1), _plan("feddrift"), 4, None) is None
    assert check_update(_reply((0.9,)), _plan("feddrift", 1), 4, None) is None
    assert check_update(_reply(None), _plan("min_loss"), 4, None) is None


# -- options and conformance ------------------------------------------------------


@pytest.mark.parametrize(
    "params",
    [
        {"delta": 0.0},
        {"delta": -1.0},
        {"delta": True},
        {"merge_delta": -0.1},
        {"isolation": 0},
        {"period": 0},
        {"max_clusters": 0},
        {"max_clusters": 2000},
        {"fraction": 1.5},
    ],
)
def test_bad_options_name_the_value(params: dict) -> None:
    with pytest.raises(Exception, match=str(next(iter(params.values())))):
        make("feddrift", **params)


def test_the_defaults() -> None:
    strategy = make("feddrift")
    assert isinstance(strategy, FedDrift)
    assert (strategy.delta, strategy.merge_delta, strategy.isolation) == (0.5, 0.5, 1)
    assert (strategy.period, strategy.max_clusters) == (1, 1024)
    assert make("feddrift", merge_delta=0.2).merge_delta == 0.2


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_feddrift_conforms(check) -> None:  # type: ignore[no-untyped-def]
    check("feddrift")


# -- scenarios and real runs: detection against the ground truth -----------------


def test_the_scenarios_hold_what_their_descriptions_say() -> None:
    digits = BUILTIN["feddrift-swap"]()
    assert digits.algorithm == "feddrift" and digits.dataset.name == "digits"
    assert (digits.clients, digits.rounds) == (10, 55)
    fired = {(int(e.start), c) for e in digits.events for c in e.target}
    assert (5, 1) in fired and (25, 0) in fired and len(fired) == 16
    assert "change points A" in digits.description
    fmnist = BUILTIN["feddrift-swap-fmnist"]()
    assert fmnist.dataset.name == "fashion_mnist" and fmnist.events == digits.events


def _flags(rows: list[dict]) -> set[tuple[int, int]]:
    return {(r["round"], c) for r in rows for c in r["strategy"]["drifted"]}


def _fired(rows: list[dict]) -> set[tuple[int, int]]:
    return {
        (r["round"], c)
        for r in rows
        for e in r["events"]
        if e["kind"] == "drift"
        for c in e["clients"]
    }


SWAP = [y ^ 1 for y in range(10)]


def _planted(**params: float) -> Scenario:
    """Half the clients swap every label pair at round 3: a concept no model
    knows."""
    return small_scenario(
        algorithm="feddrift",
        algorithm_params={"feddrift": params},
        partition=IIDPartition(),
        transform=PermutationTransform(groups=1),
        train=TrainConfig(lr=0.05, momentum=0.9, batch_size=16, epochs=2),
        rounds=6,
        events=[Drift(start=3, target=[0, 2, 4], label_permutation=SWAP)],
    )


def test_the_flagged_clients_are_those_whose_drift_fired(tmp_path: Path) -> None:
    # FedDrift flags exactly the drifted clients, in the round their drift
    # fired (precision and recall 1), isolates each for a time step, then
    # merges their clusters.
    rows = clusterfed.run(_planted(), out=tmp_path, workers=1).rows
    assert _flags(rows) == _fired(rows) == {(3, 0), (3, 2), (3, 4)}
    assert rows[3]["strategy"]["isolated"] == [1, 2, 3]
    assert rows[4]["strategy"]["merged"] and rows[4]["ari"] == 1.0
    assert rows[-1]["n_clusters"] == 2 and rows[-1]["ari"] == 1.0


@pytest.mark.filterwarnings("ignore:events")  # the later change points never fire
def test_on_change_points_a_every_flag_is_a_drift_that_fired(tmp_path: Path) -> None:
    # Client 1 is the first to hold the swapped concept (round 5): flagged.
    # Client 7 follows in round 10 to a concept a model now fits: moved to
    # that model, not flagged (no new cluster for a known concept).
    rows = clusterfed.run("feddrift-swap", out=tmp_path, workers=1, rounds=11).rows
    assert _flags(rows) == {(5, 1)} and _fired(rows) == {(5, 1), (10, 7)}
    assert rows[10]["clients"][7]["cluster"] == rows[10]["clients"][1]["cluster"]
    assert all(r["ari"] == 1.0 for r in rows)


def test_eager_flags_the_drifters_into_one_cluster_at_once(tmp_path: Path) -> None:
    scenario = _planted().model_copy(update={"algorithm": "feddrift-eager"})
    rows = clusterfed.run(scenario, out=tmp_path, workers=1).rows
    assert _flags(rows) == _fired(rows) == {(3, 0), (3, 2), (3, 4)}
    assert all(r["ari"] == 1.0 and not r["strategy"]["merged"] for r in rows)
    assert rows[3]["n_clusters"] == 2


def test_the_codes_delta_in_loss_units_leaves_twins_of_a_concept_apart(
    tmp_path: Path,
) -> None:
    # Why δ' is 0.5 here: at 0.1 (the code's MNIST δ, in accuracy) the
    # drifted clients' models, each trained on its own samples of the one
    # new concept, stay further apart than δ' in cross-entropy and never
    # merge (measured: merged at δ' = 0.25, 0.5 and 1.0).
    rows = clusterfed.run(_planted(merge_delta=0.1), out=tmp_path, workers=1).rows
    assert not any(r["strategy"]["merged"] for r in rows)
    assert rows[-1]["n_clusters"] == 3 and rows[-1]["ari"] < 1.0


def _forged_losses(losses: list[float] | None) -> Callable[[bytes], bytes]:
    """A reply with its `losses` replaced (None: taken off the wire)."""

    def forge(reply: bytes) -> bytes:
        raw = msgpack.unpackb(
            reply, raw=False, ext_hook=lambda c, d: msgpack.ExtType(c, d)
        )
        if losses is None:
            raw["payload"].pop("losses")
        else:
            raw["payload"]["losses"] = losses
        return msgpack.packb(raw, use_bin_type=True)

    return forge


@pytest.mark.parametrize(
    ("losses", "reason"),
    [
        (None, "no losses, which the feddrift rule reports"),
        ([0.5, 0.5], "2 losses for the 1 models sent"),
        ([-1.0], "losses"),  # refused when decoded: below the bound
    ],
)
def test_a_client_that_lies_about_its_losses_is_refused_and_the_run_goes_on(
    losses: list[float] | None, reason: str
) -> None:
    _, outcomes = hostile.run(
        rewrite=hostile.in_round(1, _forged_losses(losses)), algorithm="feddrift"
    )
    hostile.assert_refused_once(outcomes, 1, reason)
    hostile.others_trained(outcomes[1], hostile.HOSTILE)
    hostile.others_trained(outcomes[2])
