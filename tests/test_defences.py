"""The robust rules and pre-aggregators: ByzFL's vectors (the oracle) where
ByzFL has the rule, hand-computed cases where it does not, the `a+b`
composition, and the assumptions a scenario is refused for."""

from __future__ import annotations

import importlib
import tracemalloc
from pathlib import Path

import byzfl
import numpy as np
import pytest
from numpy.testing import assert_allclose

import clusterfed
from clusterfed.algorithms import ClientInfo, ClientUpdate, defences, make
from clusterfed.algorithms._aggregate import average_per_cluster
from clusterfed.algorithms._buffers import BufferRule
from clusterfed.algorithms.base import streams
from clusterfed.algorithms.fedavg import sample_clients, sample_size
from clusterfed.algorithms.robust import (
    AGGREGATOR_ADAPTER,
    AGGREGATORS,
    AssumptionWarning,
    Bulyan,
    CenteredClipping,
    DnC,
    GeometricMedian,
    Krum,
    Median,
    NormClip,
    SignGuard,
    TrimmedMean,
    clip_norms,
    krum,
    parse_aggregator,
    robust_mean,
)
from clusterfed.errors import ScenarioError
from clusterfed.scenarios import load_scenario
from clusterfed.scenarios.loader import with_overrides
from clusterfed.types import ClientId, ClusterId

STACK = np.random.default_rng(7).normal(size=(11, 6))
ONES = [1.0] * len(STACK)


def _rule(text: str):  # type: ignore[no-untyped-def]
    return AGGREGATOR_ADAPTER.validate_python(parse_aggregator(text))


# -- ByzFL as the oracle ---------------------------------------------------------


def test_median_and_trimmed_mean_equal_byzfls() -> None:
    assert_allclose(robust_mean(list(STACK), ONES, Median()), byzfl.Median()(STACK))
    # β·n = 2 values cut per end: ByzFL's TrMean(f=2).
    got = robust_mean(list(STACK), ONES, TrimmedMean(beta=2 / 11 + 1e-9))
    assert_allclose(got, byzfl.TrMean(f=2)(STACK))


@pytest.mark.parametrize(("nu", "iterations"), [(0.1, 3), (1e-6, 8)])
def test_geometric_median_equals_byzfls_weiszfeld(nu: float, iterations: int) -> None:
    got = robust_mean(list(STACK), ONES, GeometricMedian(nu=nu, iterations=iterations))
    assert_allclose(got, byzfl.GeometricMedian(nu=nu, T=iterations)(STACK))


@pytest.mark.parametrize(("tau", "iterations"), [(0.5, 1), (2.0, 3)])
def test_centered_clipping_equals_byzfls(tau: float, iterations: int) -> None:
    got = robust_mean(
        list(STACK), ONES, CenteredClipping(tau=tau, iterations=iterations)
    )
    assert_allclose(got, byzfl.CenteredClipping(L=iterations, tau=tau)(STACK))


@pytest.mark.parametrize("f", [0, 1, 3])
def test_krum_picks_byzfls_row(f: int) -> None:
    # ByzFL scores by the n − f − 1 nearest others, Blanchard et al. (ours)
    # by n − f − 2: our f is ByzFL's f + 1.
    chosen = byzfl.Krum(f=f + 1)(STACK)
    assert_allclose(STACK[krum(STACK, f)[0]], chosen)
    assert_allclose(robust_mean(list(STACK), ONES, Krum(f=f)), chosen)


def test_norm_clip_with_a_fixed_bound_is_the_mean_of_byzfls_clipping() -> None:
    clipped = byzfl.Clipping(c=1.5)(STACK.copy())  # it clips in place
    assert_allclose(clip_norms(list(STACK), 1.5), clipped)
    assert_allclose(
        robust_mean(list(STACK), ONES, NormClip(max_norm=1.5)), clipped.mean(axis=0)
    )
    assert (np.linalg.norm(STACK, axis=1) > 1.5).any()  # some row is clipped


@pytest.mark.parametrize("f", [1, 3])
def test_nnm_equals_byzfls(f: int) -> None:
    assert_allclose(defences.nnm(STACK, f), byzfl.NNM(f=f)(STACK))


def test_bucketing_equals_byzfls_for_the_same_shuffle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    order = np.random.default_rng(3).permutation(len(STACK))

    class Fixed:  # ByzFL's shuffle, made ours
        def __init__(self, vectors: np.ndarray) -> None:
            pass

        def permutation(self, vectors: np.ndarray) -> np.ndarray:
            return vectors[order]

    monkeypatch.setattr(
        importlib.import_module(byzfl.Bucketing.__module__), "random_tool", Fixed
    )
    seed = 3
    assert_allclose(defences.bucketing(STACK, 3, seed), byzfl.Bucketing(s=3)(STACK))


# Wider than one block of `distances_to` (16,384 columns), four rows one
# update repeated (mimic's copies): the rules read a stack block by block and
# by matrix products, never a whole difference of it.
WIDE = np.random.default_rng(11).normal(size=(11, 40_000))
WIDE[:4] = WIDE[4]


def test_rules_on_a_wide_stack_with_copies_equal_byzfls() -> None:
    ones = [1.0] * len(WIDE)
    assert_allclose(
        robust_mean(list(WIDE), ones, GeometricMedian()),
        byzfl.GeometricMedian(nu=1e-6, T=8)(WIDE),
    )
    assert_allclose(
        robust_mean(list(WIDE), ones, CenteredClipping(tau=150.0, iterations=3)),
        byzfl.CenteredClipping(L=3, tau=150.0)(WIDE),
    )
    assert_allclose(defences.nnm(WIDE, 3), byzfl.NNM(f=3)(WIDE))


@pytest.mark.parametrize("block", [1, 7, 6, 1 << 14])
def test_distances_by_blocks_equal_the_norm_of_the_difference(block: int) -> None:
    point = STACK[3] + 0.5
    assert_allclose(
        defences.distances_to(STACK, point, block=block),
        np.linalg.norm(STACK - point, axis=1),
    )


def test_nnm_never_holds_a_copy_of_the_stack_per_neighbour() -> None:
    stack = np.random.default_rng(5).normal(size=(40, 20_000))
    tracemalloc.start()
    try:
        defences.nnm(stack, 8)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Gathering each row's 32 neighbours would take 32 stacks (for 100
    # Fashion-MNIST updates, 28 GB); the mixing matrix takes one.
    assert peak < 2 * stack.nbytes


def test_dnc_keeping_no_row_leaves_the_model_with_a_warning() -> None:
    # Each row an outlier on a coordinate of its own; one coordinate a
    # sample: each of 40 samples drops the row of its coordinate, and over
    # them every row is dropped once. A mean of no rows would be NaN.
    stack = 10.0 * np.eye(5)
    rule = DnC(f=1, c=1.0, iterations=40, dims=1)
    assert defences.dnc(stack, 1, 1.0, 40, 1, seed=0) is None
    with pytest.warns(AssumptionWarning, match="no update of the 5 survived"):
        step = robust_mean(list(stack), [1.0] * 5, rule)
    assert_allclose(step, np.zeros(5))


def test_updates_of_another_shape_are_refused_not_broadcast() -> None:
    with pytest.raises(ValueError, match=r"shape \(1,\), not \(6,\)"):
        robust_mean([STACK[0], STACK[1][:1], STACK[2]], [1.0] * 3, Median())


# -- by hand, where ByzFL has no such rule -------------------------------------------


def test_bulyan_by_hand() -> None:
    # Scalars 0, 1, 2, 3, 4, 5, 100; f = 1 (n = 7 = 4f + 3): Krum picks
    # θ = 5 rows one by one (scores over n − f − 2 neighbours), dropping the
    # outlier and one end: {0..4} or {1..5}; here the scores drop 100 then
    # 5 (ties go to the lower row). β = θ − 2f = 3 values closest to the
    # median 2 of {0,1,2,3,4}: 1, 2, 3 → mean 2.
    stack = np.array([[0.0], [1.0], [2.0], [3.0], [4.0], [5.0], [100.0]])
    assert_allclose(defences.bulyan(stack, 1), [2.0])
    assert "at least 7 updates, not 6" in (Bulyan(f=1).breaks(6) or "")


def test_dnc_drops_the_outliers_along_the_top_singular_direction() -> None:
    # Five honest rows near (1, 1) and one far along (10, -10): the centred
    # data's top direction is the outlier's; f = 1 drops it every iteration.
    honest = np.array([[1.0, 1.0], [1.1, 0.9], [0.9, 1.1], [1.0, 1.05], [1.05, 1.0]])
    stack = np.vstack([honest, [[10.0, -10.0]]])
    assert_allclose(defences.dnc(stack, 1, 1.0, 3, 2, seed=0), honest.mean(axis=0))


def test_signguard_keeps_the_sign_majority_and_clips_to_the_median_norm() -> None:
    # Eight rows of positive coordinates (norms 1..1.7), two of negative ones:
    # the sign statistics split 8 / 2, the majority is kept, each clipped to
    # the median norm (1.45).
    d = 20
    scales = np.linspace(1.0, 1.7, 8)
    honest = np.ones((8, d)) / np.sqrt(d) * scales[:, None]
    hostile = -np.ones((2, d)) / np.sqrt(d)
    stack = np.vstack([honest, hostile])
    median = float(np.median(np.linalg.norm(stack, axis=1)))
    expected = (honest * np.minimum(1.0, median / scales)[:, None]).mean(axis=0)
    assert_allclose(defences.signguard(stack, 0.1, 3.0, 1.0, seed=0), expected)


def test_the_seeded_rules_give_the_same_answer_for_the_same_updates() -> None:
    for rule in (DnC(f=2, dims=3), SignGuard(), _rule("bucketing+median")):
        assert_allclose(
            robust_mean(list(STACK), ONES, rule), robust_mean(list(STACK), ONES, rule)
        )


# -- composition and assumptions -------------------------------------------------------


def test_pre_aggregators_compose_in_front_of_any_rule() -> None:
    rule = _rule("nnm+krum")
    assert rule.kind == "krum" and rule.pre == ("nnm",)
    mixed = defences.nnm(STACK, 1)
    assert_allclose(
        robust_mean(list(STACK), ONES, rule),
        robust_mean(list(mixed), ONES, _rule("krum")),
    )
    with pytest.raises(ValueError, match="'nmm' is no pre-aggregator"):
        parse_aggregator("nmm+krum")
    for name in AGGREGATORS:  # every rule takes one
        assert _rule(f"bucketing+nnm+{name}").pre == ("bucketing", "nnm")


def test_a_pre_aggregator_in_front_of_the_mean_is_applied_not_dropped() -> None:
    # One planted outlier: NNM's mixed mean is not the plain mean.
    stack = STACK.copy()
    stack[0] *= 50
    rule = _rule("nnm+mean")
    assert _rule("mean").is_mean and not rule.is_mean
    mixed = defences.nnm(stack, 1).mean(axis=0)
    assert not np.allclose(mixed, stack.mean(axis=0))
    zero = np.zeros(stack.shape[1], np.float32)
    updates = [
        ClientUpdate(ClientId(i), ClusterId(0), "ok", base=zero, delta=row, n_samples=1)
        for i, row in enumerate(stack.astype(np.float32))
    ]
    models = average_per_cluster({ClusterId(0): zero}, updates, aggregator=rule)
    assert_allclose(models[ClusterId(0)], mixed, rtol=1e-5)
    buffering = BufferRule.checked(
        buffer_size=len(stack), staleness="constant", a=0.5, b=4, server_lr=1.0
    )
    folded: dict = {ClusterId(0): zero}
    buffers: dict = {}
    for update in updates:
        folded, buffers, *_ = buffering.fold(
            folded, buffers, update, 0, aggregator=rule
        )
    assert_allclose(folded[ClusterId(0)], mixed, rtol=1e-5)
    fedavg = make("fedavg")  # a round of sums would be the plain mean
    fedavg.aggregator = rule
    assert not streams(fedavg)


def test_krum_after_nnm_folds_when_only_nnms_assumption_fails() -> None:
    # 8 updates: NNM with nnm_f = 4 assumes n > 8 (warned), but Krum with
    # f = 1 is defined on the 8 mixed rows it gets: a step, not none.
    rule = Krum(pre=("nnm",), nnm_f=4)
    with pytest.warns(AssumptionWarning, match="nnm with nnm_f = 4"):
        got = robust_mean(list(STACK[:8]), ONES[:8], rule)
    mixed = defences.nnm(STACK[:8], 3)  # as many as 8 rows allow
    assert_allclose(got, mixed[krum(mixed, 1)[0]])
    assert np.abs(got).sum() > 0
    with pytest.warns(AssumptionWarning, match="krum with f = 3"):  # n ≤ 2f + 2
        assert not robust_mean(list(STACK[:8]), ONES[:8], Krum(f=3)).any()


def test_each_rule_states_its_assumption() -> None:
    assert _rule("geomed").breaks(10, 5) is not None
    assert _rule("geomed").breaks(10, 4) is None
    assert _rule("signguard").breaks(4, 2) is not None
    assert "tolerates 1 Byzantine" in (_rule("bulyan").breaks(20, 2) or "")
    assert _rule("dnc").breaks(20, 2) is not None
    # Bucketing of 20 by 2: 10 buckets, up to 4 with an attacker: median fits.
    assert _rule("bucketing+median").breaks(20, 4) is None
    assert "nnm_f = 1" in (_rule("nnm+median").breaks(20, 4) or "")


def test_a_scenario_that_breaks_a_rule_is_refused_with_the_reason() -> None:
    base = load_scenario("byzantine")  # 20 clients, 4 Byzantine
    with pytest.raises(ScenarioError, match=r"bulyan with f = 5 assumes n >= 4f \+ 3"):
        with_overrides(base, ["aggregator=bulyan", "aggregator.f=5"])
    assert with_overrides(base, ["aggregator=geomed"]).aggregator.kind == "geomed"
    nnm = with_overrides(base, ["aggregator=nnm+median", "aggregator.nnm_f=4"])
    assert nnm.aggregator.pre == ("nnm",)


def test_a_rule_is_checked_at_the_round_that_sampling_leaves() -> None:
    # 5 of 20 clients a round, and all 4 Byzantine ones may be among them:
    # Krum would refuse every round and never move the model.
    base = load_scenario("byzantine")
    sampled = ["algorithm_params.fedavg.fraction=0.25", "aggregator=krum"]
    with pytest.raises(ScenarioError) as refused:
        with_overrides(base, [*sampled, "aggregator.f=4"])
    assert str(refused.value).endswith(
        "aggregator: krum with f = 4 assumes n > 2f + 2 (Blanchard et al.): it"
        " needs at least 11 updates, not 5 (a round of 5 of the run's 20"
        " clients, fraction = 0.25; every Byzantine client may be in one round)"
    )
    assert with_overrides(base, ["aggregator=krum", "aggregator.f=4"])  # 20
    fedavg = "algorithm_params.fedavg.fraction"
    median = with_overrides(base, [f"{fedavg}=0.75", "aggregator=median"])
    assert median.aggregator.kind == "median"  # 4 of 15
    with pytest.raises(ScenarioError, match=r"4 of 5 are \(a round of 5 .*0\.25;"):
        with_overrides(base, [f"{fedavg}=0.25", "aggregator=median"])
    # A round closed at half the replies folds 10.
    half = ["deadline.policy=fraction", "deadline.fraction=0.5"]
    trimmed = ["aggregator=trimmed_mean", "aggregator.beta=0.2"]
    with pytest.raises(ScenarioError, match=r"⌊0\.2·10⌋ = 2 .*deadline\.fraction"):
        with_overrides(base, [*half, *trimmed])


def test_the_checked_round_is_the_size_strategies_sample() -> None:
    clients = [ClientInfo(ClientId(i), n_train=1) for i in range(21)]
    for n in (1, 2, 5, 20, 21):
        for fraction in (0.01, 0.1, 0.25, 0.5, 0.99, 1.0):
            picked = sample_clients(clients[:n], fraction, np.random.default_rng(0))
            assert sample_size(fraction, n) == len(picked), (n, fraction)


@pytest.mark.parametrize(
    "rule", ["geomed", "centered_clip", "dnc", "signguard", "bucketing+median"]
)
def test_each_defence_runs_in_the_byzantine_scenario(rule: str, tmp_path: Path) -> None:
    extra = ["aggregator.f=4"] if rule == "dnc" else []
    scenario = with_overrides(
        load_scenario("byzantine"), [f"aggregator={rule}", "rounds=2", *extra]
    )
    result = clusterfed.run(scenario, out=tmp_path, workers=1)
    assert len(result.rows) == 2
