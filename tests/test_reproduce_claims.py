"""The reproduction pages' claims (bench/reproduce/claims.py): verdicts from
the seed-by-seed values, a collapsed baseline that never counts toward
"holds", Holm's adjustment against a hand computation, the sign test of an
event counted seed by seed, and the counts and claims table at the top of a
page, on outcomes made here (no records, no runs)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from reproduce import cafa, dcfl, dcfl_fig5, gradloss, ocfl  # noqa: E402
from reproduce.claims import (  # noqa: E402
    COLLAPSED,
    FAILS,
    HOLDS,
    MEASURED,
    Claim,
    Claims,
    comparison,
    holm,
)
from reproduce.page import claims_summary, write_page  # noqa: E402
from reproduce.runner import Experiment, Outcome, make_outcome  # noqa: E402


def outcome(
    experiment: Experiment,
    finals: dict[str, list[float | None]],
    extra: dict[str, dict[str, Any]] | None = None,
    rows: dict[str, list[dict[str, Any]]] | None = None,
) -> Outcome:
    """An outcome whose algorithm `a` ends seed s at finals[a][s]."""
    summaries = {
        a: {
            seed: {
                "final_mean_acc": f,
                "avg_mean_acc": f,
                "wall_s": 1.0,
                "rounds": 3,
                **(extra or {}).get(a, {}),
            }
            for seed, f in enumerate(values)
        }
        for a, values in finals.items()
    }
    seed_rows = {
        a: {seed: list((rows or {}).get(a, [])) for seed in by_seed}
        for a, by_seed in summaries.items()
    }
    return make_outcome(
        experiment, "digits", 3.0, summaries, seed_rows, Path("/tmp"), False
    )


def claim(values: list[float], **kw: Any) -> Claim:
    return Claim("k", "P", "Table 1", "a above b", tuple(values), **kw)


# -- verdicts -------------------------------------------------------------


def test_plain_verdict_is_the_interval_and_the_one_sided_t_test_agrees() -> None:
    rng = np.random.default_rng(0)
    seen = set()
    for _ in range(300):
        n = int(rng.integers(2, 8))
        values = list(rng.normal(rng.normal(0, 1), 1, n))
        c = claim(values)
        toward, against = c.p_values() or (1.0, 1.0)
        assert toward == pytest.approx(
            stats.ttest_1samp(values, 0, alternative="greater").pvalue
        )
        found = c.interval
        assert found.low is not None and found.high is not None
        expected = HOLDS if found.low > 0 else FAILS if found.high < 0 else None
        assert c.verdict == (expected or f"cannot tell at {n} seeds")
        # The interval's verdict is the one-sided test at 2.5 % either way.
        assert (c.verdict == HOLDS) == (toward < 0.025)
        assert (c.verdict == FAILS) == (against < 0.025)
        seen.add(c.verdict.split(" at ")[0])
    assert seen == {HOLDS, FAILS, "cannot tell"}


def test_one_seed_cannot_tell_and_has_no_test() -> None:
    c = claim([0.5])
    assert c.verdict == "cannot tell at 1 seed"
    assert c.p_values() is None
    assert c.shown() == "Δ 0.500"


def test_equal_values_decide_without_a_nan() -> None:
    assert claim([0.1, 0.1, 0.1]).verdict == HOLDS
    assert claim([0.1, 0.1, 0.1]).p_values() == (0.0, 1.0)
    assert claim([-0.2, -0.2]).verdict == FAILS
    assert claim([0.0, 0.0, 0.0]).verdict == "cannot tell at 3 seeds"
    assert claim([0.0, 0.0, 0.0]).p_two_sided() == 1.0
    claims = Claims()
    claims.add(claim([0.1, 0.1, 0.1]))  # p = 0: Holm keeps it
    assert claims.holm() == {"k": HOLDS}


def test_an_event_is_decided_by_the_sign_test() -> None:
    def event(passed: list[bool]) -> Claim:
        return Claim("e", "P", "Fig. 1", "it splits", passed=tuple(passed))

    assert event([True] * 3).verdict == "cannot tell at 3 seeds"
    assert event([True] * 3).p_values() == (0.125, 1.0)
    assert event([True] * 5).verdict == "cannot tell at 5 seeds"  # 1/32 > 2.5 %
    assert event([True] * 6).verdict == HOLDS  # 1/64 < 2.5 %
    assert event([False] * 6).verdict == FAILS
    assert event([True] * 5 + [False]).verdict == "cannot tell at 6 seeds"
    assert event([True]).verdict == "cannot tell at 1 seed"
    assert event([True, False, True]).shown() == "in 2 of 3 seeds"
    with pytest.raises(ValueError, match="both values and passed"):
        Claim("x", "P", "s", "t", (1.0,), passed=(True,))


def test_a_measurement_gets_no_verdict_and_is_not_counted() -> None:
    claims = Claims()
    claims.add(claim([0.3, 0.31, 0.32], own=False))
    mine = claims.add(Claim("m", "P", "Fig. 2", "b above c", (0.3, 0.31, 0.32)))
    assert claims.papers() == [mine]
    assert [c.verdict for c in claims] == [MEASURED, HOLDS]
    assert "holds" not in claims.add(claim([1.0], own=False)).sentence()


def test_a_claim_shown_twice_is_counted_once() -> None:
    claims = Claims()
    first = claims.add(claim([0.1, 0.2], note="first"))
    assert claims.add(claim([0.5, 0.6], note="again")) is first
    assert len(claims) == 1


# -- collapsed runs ---------------------------------------------------------

EXPERIMENT = Experiment("x", "x", ("method", "baseline"))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_collapsed_baseline_never_holds(seed: int) -> None:
    baseline = [0.6, 0.6, 0.6]
    baseline[seed] = 0.1  # chance on 10 classes: under twice chance
    o = outcome(EXPERIMENT, {"method": [0.9, 0.91, 0.92], "baseline": baseline})
    final = o.per_seed("method", lambda s, _: s["final_mean_acc"])
    low = o.per_seed("baseline", lambda s, _: s["final_mean_acc"])
    c = comparison(
        "k",
        "P",
        "T",
        "method above baseline",
        final,
        low,
        runs=([(o, "method")], [(o, "baseline")]),
    )
    assert c.verdict == COLLAPSED
    assert c.collapsed == ("x baseline",)
    assert "collapsed: x baseline" in c.sentence()
    claims = Claims()
    claims.add(c)
    assert claims.holm() == {"k": COLLAPSED}


def test_no_collapsed_baseline_yields_holds_over_random_runs() -> None:
    rng = np.random.default_rng(1)
    for _ in range(200):
        n = int(rng.integers(2, 6))
        method = list(rng.uniform(0.2, 1.0, n))
        baseline = list(rng.uniform(0.0, 1.0, n))
        o = outcome(EXPERIMENT, {"method": method, "baseline": baseline})
        c = comparison(
            "k",
            "P",
            "T",
            "t",
            dict(enumerate(method)),
            dict(enumerate(baseline)),
            runs=([(o, "method")], [(o, "baseline")]),
        )
        if min(baseline) < 0.2:
            assert c.verdict == COLLAPSED
        else:
            assert c.verdict != COLLAPSED


def test_a_baseline_just_at_twice_chance_has_not_collapsed() -> None:
    o = outcome(EXPERIMENT, {"method": [0.9, 0.9], "baseline": [0.2, 0.21]})
    c = comparison(
        "k", "P", "T", "t", {0: 0.9, 1: 0.91}, {0: 0.2, 1: 0.21},
        runs=([(o, "method")], [(o, "baseline")]),
    )  # fmt: skip
    assert c.verdict == HOLDS


def test_a_collapsed_method_never_holds_either() -> None:
    o = outcome(EXPERIMENT, {"method": [0.15, 0.15], "baseline": [0.1, 0.1]})
    c = comparison(
        "k", "P", "T", "t", {0: 0.15, 1: 0.16}, {0: 0.1, 1: 0.1},
        runs=([(o, "method")], []),
    )  # fmt: skip
    assert c.verdict == "method collapsed"


def test_ocfl_section_with_fedavg_at_chance_on_noniid2() -> None:
    """The page's own case: OCFL's Table 2 fall to non-IID2 reads "baseline
    collapsed", not "holds"; OCFL above FedAvg without the merge, and the
    ARI of IID and non-IID, are our measurements, that of non-IID2 the
    paper's claim."""
    by_key = {}
    finals = {
        "ocfl-iid": [0.85, 0.86, 0.87],
        "ocfl-noniid": [0.6, 0.62, 0.65],
        "ocfl-noniid2": [0.1, 0.1, 0.1],
    }
    for e in ocfl.EXPERIMENTS:
        if e is ocfl.MERGE:
            continue
        rows = {a: [{"round": 0, "ari": 1.0}] for a in ("ocfl", "fedavg")}
        by_key[("digits", e.key)] = outcome(
            e,
            {"ocfl": [0.95, 0.96, 0.97], "fedavg": finals[e.key]},
            {"ocfl": {"n_clusters_final": 10}},
            rows,
        )
    claims = Claims()
    lines = ocfl.section(by_key, "digits", Path("/tmp"), claims)
    verdicts = {c.key: c.verdict for c in claims}
    assert verdicts["ocfl-noniid-ocfl-noniid2:fedavg"] == COLLAPSED
    assert verdicts["ocfl-noniid2:ocfl-fedavg"] == MEASURED
    assert verdicts["ocfl-iid-ocfl-noniid:fedavg"] == HOLDS
    assert verdicts["ocfl-iid:ari"] == verdicts["ocfl-noniid:ari"] == MEASURED
    assert verdicts["ocfl-noniid2:ari"] == HOLDS
    fall = next(line for line in lines if "ocfl-noniid to ocfl-noniid2" in line)
    assert ": baseline collapsed (" in fall


def merge_rows(ocfl_accs: list[float], fedavg_accs: list[float]) -> Any:
    """Final rows of six clients in OCFL clusters 7, 7, 3, 3, 5, 5."""
    clusters = [7, 7, 3, 3, 5, 5]
    return {
        "ocfl": [
            {"round": 0},
            {
                "round": 1,
                "clients": [
                    {"id": i, "acc": a, "cluster": k}
                    for i, (a, k) in enumerate(zip(ocfl_accs, clusters, strict=True))
                ],
            },
        ],
        "fedavg": [
            {
                "round": 1,
                "clients": [{"id": i, "acc": a} for i, a in enumerate(fedavg_accs)],
            }
        ],
    }


def test_ocfl_table3_compares_every_merged_cluster() -> None:
    ocfl_accs = [0.9, 0.8, 0.7, 0.7, 0.6, 0.5]
    fedavg_accs = [0.5, 0.5, 0.6, 0.6, 0.2, 0.2]
    o = outcome(
        ocfl.MERGE,
        {"ocfl": [0.7, 0.7, 0.7], "fedavg": [0.45, 0.45, 0.45]},
        rows=merge_rows(ocfl_accs, fedavg_accs),
    )
    # Cluster 3 (FedAvg 0.6) first, then 7 (0.5), then 5 (0.2).
    assert ocfl.merged_clusters(o, 0) == [
        (pytest.approx(0.7), pytest.approx(0.6), 2),
        (pytest.approx(0.85), pytest.approx(0.5), 2),
        (pytest.approx(0.55), pytest.approx(0.2), 2),
    ]
    claims = Claims()
    lines = ocfl.section(
        {("fashion_mnist", "ocfl-merge"): o}, "fashion_mnist", Path("/tmp"), claims
    )
    (c,) = claims
    # The smallest cluster difference, 0.7 - 0.6, in every seed.
    assert c.values == pytest.approx((0.1, 0.1, 0.1))
    assert c.verdict == HOLDS and c.source == "Table 3"
    assert "| 0 | 1 | 2 | 0.781 | 0.600 | 0.942 | 0.700 |" in lines
    # One cluster where OCFL is below FedAvg decides the claim against it.
    worse = outcome(
        ocfl.MERGE,
        {"ocfl": [0.7, 0.7, 0.7], "fedavg": [0.45, 0.45, 0.45]},
        rows=merge_rows([0.9, 0.8, 0.5, 0.5, 0.6, 0.5], fedavg_accs),
    )
    claims = Claims()
    ocfl.section(
        {("fashion_mnist", "ocfl-merge"): worse}, "fashion_mnist", Path("/tmp"), claims
    )
    (c,) = claims
    assert c.values == pytest.approx((-0.1, -0.1, -0.1)) and c.verdict == FAILS


# -- Holm -----------------------------------------------------------------


def test_holm_against_a_hand_computation() -> None:
    # Sorted: 0.005 < 0.05/4 = 0.0125 yes; 0.01 < 0.05/3 = 0.0167 yes;
    # 0.03 < 0.05/2 = 0.025 no: stop, so 0.04 is not rejected either.
    assert holm([0.01, 0.04, 0.03, 0.005], 0.05) == [True, False, False, True]
    # 0.02 < 0.05/2 and then 0.04 < 0.05/1: both.
    assert holm([0.04, 0.02], 0.05) == [True, True]
    # A step-down stops at the first failure even if a later p would pass
    # its own bound: 0.03 >= 0.05/2.
    assert holm([0.03, 0.049], 0.05) == [False, False]
    assert holm([], 0.05) == []
    with pytest.raises(ValueError, match="p-value must be in"):
        holm([0.5, 1.5], 0.05)


def test_holm_with_one_claim_is_the_plain_verdict() -> None:
    rng = np.random.default_rng(2)
    for _ in range(100):
        c = claim(list(rng.normal(0.5, 1, 3)))
        claims = Claims()
        claims.add(c)
        assert claims.holm() == {"k": c.verdict}


def test_holm_adjusts_the_whole_family() -> None:
    claims = Claims()
    # One strong claim (p < 0.001) and ten weak "holds" (p just under 0.025).
    claims.add(Claim("strong", "P", "s", "t", (1.0, 1.1, 1.2)))
    weak = (0.1, 0.2, 0.3, 0.35)
    assert claim(list(weak)).verdict == HOLDS
    for i in range(10):
        claims.add(Claim(f"weak{i}", "P", "s", "t", weak))
    adjusted = claims.holm()
    assert adjusted["strong"] == HOLDS
    assert all(adjusted[f"weak{i}"] == "cannot tell at 4 seeds" for i in range(10))


# -- the page ---------------------------------------------------------------


def test_claims_summary_counts_and_the_chance_line() -> None:
    claims = Claims()
    claims.add(Claim("h", "P", "Table 1", "a above b", (0.3, 0.31, 0.32)))
    claims.add(Claim("f", "P", "Table 1", "c above d", (-0.3, -0.31, -0.32)))
    claims.add(Claim("u", "P", "Table 2", "e above f", (0.3, -0.3, 0.1)))
    claims.add(Claim("one", "P", "Table 2", "g above h", (0.3,)))
    claims.add(Claim("m", "P", "beyond", "i above j", (0.3, 0.4), own=False))
    text = "\n".join(claims_summary(claims))
    assert "The papers make 4 claims that this page tests: 1 confirmed" in text
    assert "1 contradicted (does not hold), 2 undecided" in text
    assert "1 more lines are our own measurements" in text
    # 3 tested (the one-seed claim has no test): 3 × 0.025 = 0.075.
    assert "The page makes 3 verdicts at 95 %" in text
    assert f"3 × 0.025 = {3 * 0.05 / 2:.2f} of them" in text
    assert f"1 − 0.975^3 = {1 - 0.975**3:.2f}" in text
    row = next(line for line in text.splitlines() if "i above j" in line)
    assert row.endswith("| our measurement | — |")
    assert "| P, Table 1: a above b | Δ 0.310 ± 0.025 |" in text


def test_gradloss_quotes_the_figure_of_its_dataset(tmp_path: Path) -> None:
    (e,) = gradloss.EXPERIMENTS
    rows = [{"round": r, "purity": 0.5 + 0.2 * r} for r in range(3)]
    o = outcome(
        e,
        {"gradloss": [0.8, 0.8, 0.8], "ifca": [0.8, 0.8, 0.8]},
        {"gradloss": {"rounds_to_purity90": 3}, "ifca": {"rounds_to_purity90": None}},
        {"gradloss": rows, "ifca": rows},
    )
    for dataset, figure, other in (
        ("fashion_mnist", "Fig. 5a, Fashion-MNIST", "Fig. 4a"),
        ("digits", "Fig. 4a, MNIST", "Fig. 5a"),
    ):
        claims = Claims()
        text = "\n".join(
            gradloss.section({(dataset, e.key): o}, dataset, tmp_path, claims)
        )
        assert figure in text and other not in text
        (c,) = claims
        # IFCA never reaches 0.9 in 3 rounds: counted as 4; gradloss takes 3.
        assert c.values == (1.0, 1.0, 1.0)
        assert c.verdict == HOLDS


def test_cafa_table_iv_claim_is_on_the_page() -> None:
    e = cafa.EXPERIMENTS[1]
    cbcc = {"cbcc": {"k": 7, "accuracy": 1.0, "precision": 1.0, "recall": 1.0}}
    finals = {
        "cafa": [0.81, 0.82, 0.82],
        "fedavg": [0.77, 0.78, 0.78],
        "fedprox": [0.83, 0.84, 0.83],
    }
    o = outcome(e, finals, {"cafa": cbcc})
    claims = Claims()
    cafa.section({("digits", e.key): o}, "digits", Path("/tmp"), claims)
    verdicts = {c.key: c.verdict for c in claims}
    assert verdicts["cafa-mix50:average:cafa-fedprox"] == FAILS
    assert verdicts["cafa-mix50:average:cafa-fedavg"] == HOLDS
    assert verdicts["cafa-mix50:cbcc"] == HOLDS


def test_dcfl_table_i_rows_of_fig5_are_table_i_claims_counted_once() -> None:
    by_key = {}
    for key in ("dcfl-table1", "dcfl-table1-nodp", "dcfl-fig5-0"):
        e = next(e for e in dcfl.EXPERIMENTS if e.key == key)
        by_key[("digits", key)] = outcome(
            e,
            {
                "dcfl": [0.9, 0.91, 0.92],
                "cfl": [0.8, 0.8, 0.81],
                "fedavg": [0.7, 0.72, 0.71],
            },
            {a: {"final_std_acc": 0.1} for a in ("dcfl", "cfl", "fedavg")},
            {"cfl": [{"round": 0, "n_clusters": 1}]},
        )
    main = by_key[("digits", "dcfl-table1")]
    nodp = by_key[("digits", "dcfl-table1-nodp")]
    claims = Claims()
    dcfl._verdict(main, claims, "Table I, with DP", dp=True)
    dcfl._verdict(nodp, claims, "without DP", dp=False)
    before = len(claims)
    assert before == 9 + 6  # with DP: 3 pairs x 3; without: 2 pairs x 3
    table = dcfl_fig5.fig5(by_key, "digits", claims, main, nodp)
    assert len(claims) == before + 2  # only dcfl-fig5-0's two are new
    sources = {c.key: c.source for c in claims}
    assert sources["dcfl-table1:final_mean_acc:dcfl-fedavg"] == "Table I, with DP"
    assert sources["dcfl-fig5-0:final_mean_acc:dcfl-cfl"].startswith("Fig. 5")
    # Without DP the spread is our measurement; accuracy is Fig. 5's claim.
    verdicts = {c.key: c.verdict for c in claims}
    assert verdicts["dcfl-table1-nodp:final_std_acc:dcfl-fedavg"] == MEASURED
    assert verdicts["dcfl-table1-nodp:final_mean_acc:dcfl-fedavg"] == HOLDS
    assert sum(line.count(": holds |") for line in table) == 6  # 3 rows x 2


def test_dcfl_without_its_dp_table_keeps_what_ran_without_dp(tmp_path: Path) -> None:
    # The scenario's DP settings changed: Table I with DP waits for its runs,
    # and the section still shows the no-DP table and Fig. 5's rows it has.
    finals = {"dcfl": [0.9, 0.91, 0.92], "cfl": [0.8, 0.8, 0.81], "fedavg": [0.7] * 3}
    by_key = {
        ("digits", key): outcome(
            next(e for e in dcfl.EXPERIMENTS if e.key == key),
            finals,
            {a: {"final_std_acc": 0.1} for a in finals},
        )
        for key in ("dcfl-table1-nodp", "dcfl-fig5-0")
    }
    claims = Claims()
    lines = "\n".join(dcfl.section(by_key, "digits", tmp_path, claims))
    assert "Not recorded at the scenario's present settings" in lines
    assert "--only dcfl-table1 --resume" in lines
    assert "### DCFL: Table I without DP" in lines
    assert "| joins, drift, no DP | 0.910" in lines
    assert "DP (Table I)" not in lines
    assert not any(c.key.startswith("dcfl-table1:") for c in claims)
    assert dcfl.section({}, "digits", tmp_path, Claims()) == []


def test_the_page_says_each_experiment_s_seed_count(tmp_path: Path) -> None:
    three = outcome(ocfl.EXPERIMENTS[0], {"ocfl": [0.9, 0.9, 0.9]})
    ten = outcome(ocfl.EXPERIMENTS[1], {"ocfl": [0.9] * 10})
    page = tmp_path / "PAGE.md"
    write_page([three, ten], "cmd", page, 1.0, [])
    assert (
        "Each experiment ran 3 or 10 seeds (each section's “Run by” says which):"
        in (page.read_text())
    )
    write_page([three], "cmd", page, 1.0, [])
    assert "Each experiment ran 3 seeds:" in page.read_text()


@pytest.mark.parametrize(
    "scenario, planted",
    [
        ("fedem-dirichlet", False),  # Dirichlet: every client in group 0
        ("ocfl-iid", False),
        ("bench-dirichlet-fmnist", False),
        ("bench-drift-fmnist", True),  # the drift makes a second concept
        ("fedsoft-rotated", True),
        ("pacfl-labels", True),  # a class table of 5 rows
        ("cafa-mix", True),
    ],
)
def test_ari_is_shown_only_where_the_scenario_plants_groups(
    scenario: str, planted: bool
) -> None:
    from reproduce.runner import plants_groups

    assert plants_groups(scenario) is planted


def test_a_baseline_seed_without_accuracy_has_collapsed() -> None:
    # Every client's last evaluation failed in seed 1 (a diverged model): the
    # seed-by-seed values leave that seed out, so the two left would say
    # "holds" were the collapse not read from the summaries.
    o = outcome(EXPERIMENT, {"method": [0.9, 0.91, 0.92], "baseline": [0.6, None, 0.6]})
    c = comparison(
        "k",
        "P",
        "T",
        "method above baseline",
        o.per_seed("method", lambda s, _: s["final_mean_acc"]),
        o.per_seed("baseline", lambda s, _: s["final_mean_acc"]),
        runs=([(o, "method")], [(o, "baseline")]),
    )
    assert c.verdict == COLLAPSED
    assert c.collapsed == ("x baseline",)
