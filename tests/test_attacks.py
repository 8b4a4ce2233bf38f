"""The attacks: their maths against ByzFL (the oracle) or by hand, the
adversary that forges them in a round, label flipping, and the scenarios that
stage them or are refused."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import byzfl
import numpy as np
import pytest
import torch
from numpy.testing import assert_allclose

import clusterfed
from clusterfed.actors import attacks
from clusterfed.actors.adversary import Adversary, AttackWarning
from clusterfed.actors.backdoor import stamp
from clusterfed.actors.faults import FaultPlan, FaultyClientSpec
from clusterfed.actors.outcome import Exchange
from clusterfed.actors.spec import build_trainer
from clusterfed.algorithms.robust import Krum, Median
from clusterfed.data.datasets import Dataset
from clusterfed.errors import ScenarioError
from clusterfed.protocol import Envelope, UpdateReply
from clusterfed.scenarios import load_scenario
from clusterfed.scenarios.build import check_backdoors, plan_run
from clusterfed.scenarios.loader import with_overrides
from clusterfed.types import ClientId
from helpers import small_scenario, without_wall_time

HONEST = np.random.default_rng(3).normal(size=(6, 9))


# -- the maths: ByzFL's vectors where ByzFL has the attack ---------------------


@pytest.mark.parametrize("z", [0.5, 1.5, -1.0])
def test_alie_equals_byzfls_a_little_is_enough(z: float) -> None:
    assert_allclose(attacks.alie(HONEST, z), byzfl.ALittleIsEnough(tau=z)(HONEST))


@pytest.mark.parametrize("epsilon", [0.1, 0.5, 2.0])
def test_ipm_equals_byzfls_inner_product_manipulation(epsilon: float) -> None:
    assert_allclose(
        attacks.ipm(HONEST, epsilon),
        byzfl.InnerProductManipulation(tau=epsilon)(HONEST),
    )


def test_mimic_equals_byzfls_mimic_of_the_first_honest_update() -> None:
    assert_allclose(attacks.mimic(HONEST), byzfl.Mimic(epsilon=0)(HONEST))


def test_z_max_is_baruchs() -> None:
    # n = 50, f = 24 (the paper's example): s = ⌊26⌋ − 24 = 2, Φ⁻¹(48/50).
    assert attacks.z_max(50, 24) == pytest.approx(1.7507, abs=1e-4)
    # FLANDERS' layout: n = 100, f = 20: s = 31, Φ⁻¹(0.69).
    assert attacks.z_max(100, 20) == pytest.approx(0.4959, abs=1e-4)


@pytest.mark.parametrize(("n", "f", "s"), [(5, 3, 0), (5, 4, -1), (20, 12, -1)])
def test_z_max_refuses_a_coalition_that_needs_no_supporters(
    n: int, f: int, s: int
) -> None:
    # s = ⌊n/2 + 1⌋ − f <= 0: Φ⁻¹(1) = inf, Φ⁻¹(> 1) = NaN, never a shift.
    with pytest.raises(ValueError, match=f"gives s = {s} "):
        attacks.z_max(n, f)
    assert np.isfinite(attacks.z_max(n, math.floor(n / 2)))  # s = 1: defined


def test_minmax_by_hand_on_two_scalars() -> None:
    # Honest 0 and 2: mean 1, unbiased std √2, so m = 1 − γ√2. The largest
    # honest distance is 2; m's largest distance, max(|m|, |m − 2|), is 2 up
    # to m = 0 and more beyond. The halving search stops within ~1e-5 in γ below.
    got = attacks.minmax(np.array([[0.0], [2.0]]))
    assert got[0] == pytest.approx(0.0, abs=5e-5) and got[0] >= 0.0
    # MinSum: m² + (m − 2)² ≤ min_i Σ_j (b_i − b_j)² = 4, so again m = 0.
    assert attacks.minsum(np.array([[0.0], [2.0]]))[0] == pytest.approx(0, abs=5e-5)
    # With three: honest 0, 1, 5 (mean 2, std √7); bounds 5 and the least
    # of 0+1+25, 1+0+16, 25+16+0: 17 (the paper's text: the largest, 41).
    # Solved for m = 2 − γ·std: minmax: max(|m|, |m − 5|) = 5 at m = 0;
    # minsum: 3m² − 12m + 26 = 17 at m = 2 − √1 = 1 (41 would give −1).
    three = np.array([[0.0], [1.0], [5.0]])
    assert attacks.minmax(three)[0] == pytest.approx(0.0, abs=1e-4)
    assert attacks.minsum(three)[0] == pytest.approx(1.0, abs=1e-4)
    # The unbiased std sets γ: minmax's γ is |m − 2|/std = 2/√7.
    assert attacks.deviation(three, "std")[0] == pytest.approx(math.sqrt(7))


def test_minmax_keeps_within_the_honest_spread_and_minsum_within_its_sums() -> None:
    for kind in ("std", "unit_vec", "sign"):
        m = attacks.minmax(HONEST, kind)
        far = np.linalg.norm(HONEST - m, axis=1).max()
        spread = max(np.linalg.norm(a - b) for a in HONEST for b in HONEST)
        assert far <= spread + 1e-9
        s = attacks.minsum(HONEST, kind)
        sums = [np.square(HONEST - h).sum() for h in HONEST]
        assert np.square(HONEST - s).sum() <= min(sums) + 1e-9
        assert np.linalg.norm(m - HONEST.mean(axis=0)) > 0.1  # it did move


def test_fang_full_knowledge_sends_values_in_the_papers_intervals() -> None:
    # Benign coordinate 0: 1, 3, 2, the mean goes up (s = 1), w_min = 1 > 0,
    # so [w_min/b, w_min] = [0.5, 1]; coordinate 1: −1, −2, −4, down (s = −1),
    # w_max = −1 < 0, so [w_max, w_max/b] = [−1, −0.5].
    benign = np.array([[1.0, -1.0], [3.0, -2.0], [2.0, -4.0]])
    rows = attacks.fang_trimmed_full(benign, 50, np.random.default_rng(0))
    assert rows.shape == (50, 2)
    assert ((rows[:, 0] >= 0.5) & (rows[:, 0] <= 1.0)).all()
    assert ((rows[:, 1] >= -1.0) & (rows[:, 1] <= -0.5)).all()
    # Coordinate 0: −1 and 5, up, w_min < 0: [b·w_min, w_min] = [−2, −1];
    # coordinate 1: 1 and −5, down, w_max > 0: [w_max, b·w_max] = [1, 2].
    other = attacks.fang_trimmed_full(
        np.array([[-1.0, 1.0], [5.0, -5.0]]), 50, np.random.default_rng(0)
    )
    assert ((other[:, 0] >= -2.0) & (other[:, 0] <= -1.0)).all()
    assert ((other[:, 1] >= 1.0) & (other[:, 1] <= 2.0)).all()
    assert other[:, 0].max() - other[:, 0].min() > 0.5  # drawn, not one value


def test_fang_partial_knowledge_samples_three_to_four_sigmas_away() -> None:
    # The coalition's own: coordinate 0: 0 and 2 (μ = 1 ≥ 0, σ = 1), so
    # [μ − 4σ, μ − 3σ] = [−3, −2]; coordinate 1: 0 and −2 (μ = −1, σ = 1),
    # so [μ + 3σ, μ + 4σ] = [2, 3].
    own = np.array([[0.0, 0.0], [2.0, -2.0]])
    rows = attacks.fang_trimmed_partial(own, 50, np.random.default_rng(1))
    assert ((rows[:, 0] >= -3.0) & (rows[:, 0] <= -2.0)).all()
    assert ((rows[:, 1] >= 2.0) & (rows[:, 1] <= 3.0)).all()


def test_fang_lambda_bound_by_hand() -> None:
    # m = 6 updates, c = 2 attackers, d = 4; benign a = 0, b = 2e₀, c = 2e₁,
    # e = 4e₃. Each one's m − c − 2 = 2 nearest benign: a: 2 + 2 = 4 (the
    # least), b and c: 2 + 2√2, e: 4 + √20. (1/((m − 2c − 1)·√d))·4 = 2, and
    # max‖w_i − w_Re‖/√d = 4/2 = 2 (w_Re, the global model, is the origin).
    benign = np.array([[0, 0, 0, 0], [2, 0, 0, 0], [0, 2, 0, 0], [0, 0, 0, 4.0]])
    assert attacks.fang_lambda_bound(benign, 6, 2) == pytest.approx(4.0)
    with pytest.raises(ValueError, match="m > 2c"):
        attacks.fang_lambda_bound(benign, 5, 2)


def _krum_picks_a_copy(honest: np.ndarray, vector: np.ndarray, c: int, f: int) -> bool:
    from clusterfed.algorithms.robust import krum

    # The copies come first here (the attackers' lower ids): a tie is theirs.
    copies = np.repeat(vector[None, :], c, axis=0)
    return krum(np.vstack([copies, honest]), f)[0] < c


def test_fang_on_krum_halves_lambda_from_the_bound_until_krum_picks_it() -> None:
    # Spread honest updates (non-IID-like) around a small mean: the bound's
    # λ is too large for Krum to pick the copies; some halving of it is not.
    honest = np.random.default_rng(5).normal(0.1, 1.0, size=(6, 50))
    start = attacks.fang_lambda_bound(honest, 10, 4)
    direction = np.where(honest.mean(axis=0) >= 0, 1.0, -1.0)
    assert not _krum_picks_a_copy(honest, -start * direction, 4, 3)
    lam = attacks.fang_krum_lambda(honest, 4, 3, 10)
    halvings = math.log2(start / lam)
    assert halvings >= 1 and halvings == pytest.approx(round(halvings))
    vector = attacks.fang_krum(honest, 4, 3, 10)
    assert_allclose(vector, -lam * direction)
    # Our Krum over the whole round (4 copies, 6 honest) picks a copy, and
    # did not at the previous λ: the largest of the halvings it picks.
    assert _krum_picks_a_copy(honest, vector, 4, 3)
    assert not _krum_picks_a_copy(honest, 2 * vector, 4, 3)


def test_fang_with_knowledge_all_is_computed_from_the_honest_updates() -> None:
    # Under Krum (f = 3) over 10 updates, 4 of them fang's: the crafted
    # vector is the search's over the 6 honest ones, and Krum picks it.
    deltas = np.random.default_rng(5).normal(0.1, 1.0, size=(10, 50))
    adversary = Adversary(Krum(f=3))
    attackers = (0, 3, 5, 8)
    plan = FaultPlan(behaviour="fang", knowledge="all")
    for c in attackers:
        adversary.enlist(ClientId(c), [plan], c)
    exchanges = [(ClientId(c), _exchange(c, deltas[c])) for c in range(10)]
    for client, exchange in exchanges:
        adversary.observe(client, exchange)
    forged = np.stack([_delta(e) for e in adversary.forge(3, exchanges)])
    honest = np.array([c for c in range(10) if c not in attackers])
    benign = deltas[honest].astype(np.float32).astype(np.float64)
    expected = attacks.fang_krum(benign, 4, 3, 10)
    for c in attackers:
        assert_allclose(forged[c], expected, rtol=1e-6)
    from clusterfed.algorithms.robust import krum

    assert krum(forged, 3)[0] in attackers
    # Under the median, each coordinate lies beyond the honest extremes
    # (not the coalition's own), away from the honest mean's direction.
    adversary = Adversary(Median())
    for c in attackers:
        adversary.enlist(ClientId(c), [plan], c)
    for client, exchange in exchanges:
        adversary.observe(client, exchange)
    forged = np.stack([_delta(e) for e in adversary.forge(3, exchanges)])
    up = benign.mean(axis=0) >= 0
    low, high = benign.min(axis=0), benign.max(axis=0)
    for c in attackers:
        assert (forged[c][up] <= low[up] + 1e-6).all()
        assert (forged[c][~up] >= high[~up] - 1e-6).all()


def test_colluding_attacks_refuse_too_few_updates() -> None:
    with pytest.raises(ValueError, match="alie needs at least 2 honest update"):
        attacks.alie(HONEST[:1], 1.0)
    with pytest.raises(ValueError, match="0 < f < n"):
        attacks.z_max(4, 4)


# -- the adversary: forged in a round, in client order -------------------------


def _exchange(client: int, delta: np.ndarray) -> Exchange:
    reply = UpdateReply(
        cluster=0,
        delta=delta.astype(np.float32),
        n_samples=5,
        loss=1.0,
        samples_seen=5,
    )
    envelope = Envelope(
        msg_id=f"m{client}",
        sender=f"client/{client}",
        recipient="server",
        round=3,
        payload=reply,
    )
    return Exchange("ok", envelope)


def _delta(exchange: Exchange) -> np.ndarray:
    assert exchange.reply is not None
    payload = exchange.reply.payload
    assert isinstance(payload, UpdateReply)
    return np.asarray(payload.delta, dtype=np.float64)


def test_the_adversary_forges_each_coalition_from_its_own_honest_updates() -> None:
    deltas = np.random.default_rng(1).normal(size=(6, 4)).astype(np.float32)
    adversary = Adversary()
    for c in (1, 2):
        adversary.enlist(ClientId(c), [FaultPlan(behaviour="ipm", epsilon=2.0)], c)
    for c in (3, 4):
        adversary.enlist(ClientId(c), [FaultPlan(behaviour="mimic")], c)
    exchanges = [(ClientId(c), _exchange(c, deltas[c])) for c in range(6)]
    for client, exchange in reversed(exchanges):  # arrival order is no matter
        adversary.observe(client, exchange)
    forged = adversary.forge(3, exchanges)
    ipm = byzfl.InnerProductManipulation(tau=2.0)(deltas[[1, 2]].astype(np.float64))
    for c in (1, 2):
        assert_allclose(_delta(forged[c]), ipm, rtol=1e-6)
    for c in (3, 4):  # the honest client of the lowest id: 0
        assert_allclose(_delta(forged[c]), deltas[0])
    for c in (0, 5):
        assert forged[c] is exchanges[c][1]


def test_with_knowledge_all_the_attack_is_computed_from_every_honest_update() -> None:
    deltas = np.random.default_rng(2).normal(size=(6, 4)).astype(np.float32)
    adversary = Adversary()
    for c in (1, 2):
        adversary.enlist(ClientId(c), [FaultPlan(behaviour="alie", knowledge="all")], c)
    exchanges = [(ClientId(c), _exchange(c, deltas[c])) for c in range(6)]
    for client, exchange in exchanges:
        adversary.observe(client, exchange)
    forged = adversary.forge(3, exchanges)
    # Every client's honest update (the coalition's first, then the honest
    # ones in id order: the same rows); z from 6 clients, 2 of them attackers.
    seen = deltas[[1, 2, 0, 3, 4, 5]].astype(np.float64)
    z = attacks.z_max(6, 2)
    expected = byzfl.ALittleIsEnough(tau=z)(seen)
    for c in (1, 2):
        assert_allclose(_delta(forged[c]), expected, rtol=1e-6)
    coalition_only = byzfl.ALittleIsEnough(tau=z)(deltas[[1, 2]].astype(np.float64))
    assert not np.allclose(_delta(forged[1]), coalition_only)


def test_a_majority_alie_round_is_left_honest_with_a_warning() -> None:
    # 3 of the round's 5 updates: s = ⌊3.5⌋ − 3 = 0, z_max = inf. The
    # replies stay honest (and finite) and the adversary says why.
    deltas = np.random.default_rng(4).normal(size=(5, 4)).astype(np.float32)
    adversary = Adversary()
    for c in (0, 1, 2):
        adversary.enlist(ClientId(c), [FaultPlan(behaviour="alie")], c)
    exchanges = [(ClientId(c), _exchange(c, deltas[c])) for c in range(5)]
    for client, exchange in exchanges:
        adversary.observe(client, exchange)
    with pytest.warns(AttackWarning, match="s = 0"):
        forged = adversary.forge(3, exchanges)
    assert all(f is e for f, (_, e) in zip(forged, exchanges, strict=True))
    # Of 7 updates (2 honest more) the same coalition is a minority: forged.
    more = np.random.default_rng(4).normal(size=(7, 4)).astype(np.float32)
    exchanges = [(ClientId(c), _exchange(c, more[c])) for c in range(7)]
    for client, exchange in exchanges:
        adversary.observe(client, exchange)
    with warnings.catch_warnings():
        warnings.simplefilter("error", AttackWarning)
        forged = adversary.forge(3, exchanges)
    expected = attacks.alie(more[:3].astype(np.float64), attacks.z_max(7, 3))
    assert_allclose(_delta(forged[0]), expected, rtol=1e-6)


def test_knowledge_is_refused_for_attacks_that_do_not_read_honest_updates() -> None:
    with pytest.raises(ValueError, match="knowledge = 'all' is for alie, ipm"):
        FaultPlan(behaviour="mimic", knowledge="all")
    assert FaultPlan(behaviour="fang", knowledge="all").knowledge == "all"
    with pytest.raises(ValueError, match="not sign_flip"):
        FaultPlan(behaviour="sign_flip", knowledge="all")


# -- label flipping: data poisoning ----------------------------------------------


def test_label_flip_trains_on_c_minus_1_minus_y_and_tests_on_the_truth() -> None:
    scenario = small_scenario(rounds=1)
    from clusterfed.scenarios import plan_run

    spec = plan_run(scenario).clients[0]
    flipped = FaultyClientSpec(
        **dict(spec), faults=(FaultPlan(behaviour="label_flip"),)
    )
    honest, poisoned = build_trainer(spec), build_trainer(flipped)
    assert torch.equal(poisoned.y_train, 9 - honest.y_train)
    assert torch.equal(poisoned.y_test, honest.y_test)
    assert flipped.data_key() != spec.data_key()
    with pytest.raises(ValueError, match="whole run"):
        FaultPlan(behaviour="label_flip", start=2)


# -- scenarios: `--set faulty=NAME` runs each attack, or says why not ------------


def test_set_faulty_renames_the_behaviour_and_sets_options_on_every_entry() -> None:
    ipm = with_overrides(
        load_scenario("byzantine"), ["faulty=ipm", "faulty.epsilon=0.1"]
    )
    (entry,) = ipm.faulty
    assert entry.behaviour == "ipm" and entry.epsilon == 0.1
    assert entry.ids == [1, 6, 11, 16]
    with pytest.raises(ScenarioError, match="no faulty clients to change"):
        with_overrides(load_scenario("quickstart"), ["faulty=alie"])


def test_an_attack_the_scenario_cannot_stage_is_refused() -> None:
    base = load_scenario("byzantine")
    with pytest.raises(ScenarioError, match="a coalition of 1 client"):
        with_overrides(base, ['faulty={clients=1, behaviour="alie"}'])
    # One attacker that sees every honest update has a deviation to shift by.
    alone = with_overrides(
        base, ['faulty={clients=1, behaviour="alie", knowledge="all"}']
    )
    assert alone.faulty[0].knowledge == "all"
    # Fang's partial knowledge estimates a spread from the coalition's own;
    # its full knowledge reads the honest clients' updates instead.
    with pytest.raises(ScenarioError, match="cannot estimate the benign"):
        with_overrides(base, ['faulty={clients=1, behaviour="fang"}'])
    fang = 'faulty={clients=1, behaviour="fang", knowledge="all"}'
    assert with_overrides(base, [fang]).faulty[0].knowledge == "all"
    everyone = fang.replace("clients=1", f"clients={list(range(20))}")
    with pytest.raises(ScenarioError, match="honest clients' updates; none"):
        with_overrides(base, [everyone])
    with pytest.raises(ScenarioError, match='use mode = "sync"'):
        with_overrides(base, ["faulty=alie", "algorithm=fedbuff", "mode=async"])


def test_a_majority_alie_coalition_is_refused_unless_it_sets_z() -> None:
    # 12 of 20 under the plain mean (no rule's assumption to break): ALIE's
    # z_max is not defined there, s = ⌊11⌋ − 12 = −1.
    base = load_scenario("byzantine")
    majority = 'faulty={clients=[0,1,2,3,4,5,6,7,8,9,10,11], behaviour="alie"}'
    with pytest.raises(ScenarioError, match=r"faulty\[0\] \(alie\).*s = -1"):
        with_overrides(base, [majority])
    with_overrides(base, [majority.replace('"alie"', '"alie", z=1.0')])
    ten = majority.replace(",10,11", "")  # s = 1: Baruch et al.'s setting
    assert len(with_overrides(base, [ten]).faulty[0].ids) == 10


@pytest.mark.parametrize(
    "attack",
    ["alie", "ipm", "minmax", "minsum", "mimic", "gaussian", "label_flip", "fang"],
)
def test_each_attack_runs_in_the_byzantine_scenario(
    attack: str, tmp_path: Path
) -> None:
    scenario = with_overrides(
        load_scenario("byzantine"),
        [f"faulty={attack}", "rounds=2", "faulty.sigma=0.01"]
        if attack == "gaussian"
        else [f"faulty={attack}", "rounds=2"],
    )
    result = clusterfed.run(scenario, out=tmp_path, workers=1)
    rows = {c["id"]: c for c in result.rows[1]["clients"]}
    assert all(rows[c]["trained"] for c in (1, 6, 11, 16))
    assert result.summary["rejected_messages"] == 0


def test_fang_with_full_knowledge_runs_against_krum(tmp_path: Path) -> None:
    scenario = with_overrides(
        load_scenario("byzantine"),
        ["faulty=fang", "faulty.knowledge=all", "aggregator=krum"]
        + ["aggregator.f=4", "rounds=2"],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", AttackWarning)  # forged, not left honest
        result = clusterfed.run(scenario, out=tmp_path, workers=1)
    assert result.summary["rejected_messages"] == 0


# -- the backdoor: a pixel trigger, a target label, its success rate -------------


def test_stamp_whitens_the_bottom_right_square_of_every_image() -> None:
    from clusterfed.actors.backdoor import stamp

    images = torch.zeros(2, 1, 5, 5)
    stamped = stamp(images, 2)
    assert stamped[:, :, 3:, 3:].eq(1).all() and stamped.sum() == 2 * 4
    assert images.sum() == 0  # a copy
    flat = stamp(torch.zeros(3, 10), 2)
    assert flat[:, 6:].eq(1).all() and flat[:, :6].eq(0).all()


def test_a_backdoor_client_trains_on_stamped_target_labelled_samples() -> None:
    from clusterfed.scenarios import plan_run

    spec = plan_run(small_scenario(rounds=1)).clients[0]
    plan = FaultPlan(behaviour="backdoor", target=3, trigger=2, poison_share=0.5)
    poisoned = FaultyClientSpec(**dict(spec), faults=(plan,))
    honest, bad = build_trainer(spec), build_trainer(poisoned)
    changed = (bad.y_train != honest.y_train) | (
        bad._x_train.gather() != honest._x_train.gather()
    ).flatten(1).any(dim=1)
    stamped = bad._x_train.gather()[..., -2:, -2:].flatten(1).eq(1).all(dim=1)
    assert int(stamped.sum()) == len(spec.train) // 2  # the share, stamped
    assert (bad.y_train[stamped] == 3).all()
    assert not changed[~stamped].any()  # the others as they were
    assert torch.equal(bad.y_test, honest.y_test)


def test_a_backdoor_run_reports_its_success_rate_beside_clean_accuracy(
    tmp_path: Path,
) -> None:
    scenario = with_overrides(
        load_scenario("byzantine"), ["faulty=backdoor", "rounds=2"]
    )
    result = clusterfed.run(scenario, out=tmp_path, workers=1)
    rates = [row["backdoor_success"] for row in result.rows]
    assert all(0.0 <= r <= 1.0 for r in rates)
    assert result.summary["backdoor_success_final"] == rates[-1]
    assert result.summary["final_mean_acc"] is not None
    clean = clusterfed.run(
        with_overrides(load_scenario("byzantine"), ["faulty=[]", "rounds=1"]),
        out=tmp_path / "clean",
        workers=1,
    )
    assert "backdoor_success" not in clean.rows[0]
    assert "backdoor_success_final" not in clean.summary


@pytest.mark.parametrize(
    "mode",
    [
        [],
        ["algorithm=fedbuff", "mode=async", "algorithm_params.fedbuff.buffer_size=10"],
    ],
    ids=["sync", "async"],
)
def test_a_backdoor_probe_measures_the_trigger_on_a_clean_run_and_changes_nothing(
    tmp_path: Path, mode: list[str]
) -> None:
    """The probe is the backdoor's baseline: the same measure on a run whose
    clients all train honestly, and only a measure."""
    clean = ["faulty=[]", "rounds=2", *mode]
    plain = clusterfed.run(
        with_overrides(load_scenario("byzantine"), clean), out=tmp_path, workers=1
    )
    probed = clusterfed.run(
        with_overrides(load_scenario("byzantine"), [*clean, "backdoor_probe=on"]),
        out=tmp_path / "probed",
        workers=1,
    )
    rates = [row.pop("backdoor_success") for row in probed.rows]
    assert rates and all(0.0 <= r <= 1.0 for r in rates)
    assert probed.summary["backdoor_success_final"] == rates[-1]
    assert without_wall_time(probed.rows) == without_wall_time(plain.rows)


def test_a_backdoor_probe_beside_a_backdoor_client_is_refused() -> None:
    with pytest.raises(ScenarioError, match="backdoor_probe measures a trigger"):
        with_overrides(
            load_scenario("byzantine"), ["faulty=backdoor", "backdoor_probe=on"]
        )


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (
            ["faulty=backdoor", "faulty.target=10"],
            r"faulty\[0\]\.target = 10: .* labels 0 to 9",
        ),
        (["faulty=[]", "backdoor_probe.target=99"], r"backdoor_probe\.target = 99"),
        (
            ["faulty=backdoor", "faulty.trigger=8"],
            r"faulty\[0\]\.trigger = 8: .*8×8 images.*at most 7",
        ),
        (["faulty=[]", "backdoor_probe.trigger=500"], r"backdoor_probe\.trigger = 500"),
    ],
    ids=["backdoor-target", "probe-target", "backdoor-trigger", "probe-trigger"],
)
def test_a_backdoor_that_does_not_fit_the_dataset_is_refused_before_it_runs(
    overrides: list[str], named: str
) -> None:
    """A target outside the labels read a success rate of 0 in every row, and
    a trigger as large as the image stamped all of it, without a word."""
    scenario = with_overrides(load_scenario("byzantine"), overrides)
    with pytest.raises(ScenarioError, match=named):
        plan_run(scenario)


@pytest.mark.parametrize(
    ("images", "largest"),
    [((28, 28), 27), ((1, 28, 28), 27), ((1, 4, 8), 4), ((3, 8, 4), 4), ((60,), 7)],
    ids=["H×W", "C×H×W", "wide", "tall", "flat"],
)
def test_a_trigger_is_bounded_by_what_it_stamps(
    images: tuple[int, ...], largest: int
) -> None:
    data = Dataset("made", torch.zeros(2, *images), torch.zeros(2), n_classes=10)
    scenario = load_scenario("byzantine")
    for trigger, fits in ((largest, True), (largest + 1, False)):
        chosen = with_overrides(
            scenario, ["faulty=backdoor", f"faulty.trigger={trigger}"]
        )
        if fits:
            check_backdoors(chosen, data)
            stamped = stamp(data.x, trigger)
            assert (stamped == 1).any() and not (stamped == 1).all()
        else:
            with pytest.raises(ScenarioError, match=f"at most {largest}"):
                check_backdoors(chosen, data)


def test_the_largest_trigger_that_leaves_part_of_the_image_is_planned() -> None:
    scenario = with_overrides(
        load_scenario("byzantine"), ["faulty=backdoor", "faulty.trigger=7"]
    )
    assert plan_run(scenario).clients
