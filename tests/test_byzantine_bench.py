"""bench/byzantine.py's experiments, its attacker/honest split and its page,
without running the table (hours)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from clusterfed.scenarios import load_scenario
from clusterfed.scenarios.loader import with_overrides

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import byzantine  # noqa: E402
from byzantine.cli import attacker_split, best_global_accuracy  # noqa: E402
from byzantine.page import write_page  # noqa: E402
from reproduce.runner import make_outcome  # noqa: E402


@pytest.mark.parametrize("quick", [False, True])
def test_every_cell_is_a_valid_scenario(quick: bool) -> None:
    found = byzantine.experiments(quick)
    cells = len(byzantine.ATTACKS) * len(byzantine.DEFENCES)
    # The clustered section's FedAvg row is the table's cell, not a run.
    # The backdoor's baseline is a run of its own.
    assert len(found) == cells + 1 + len(byzantine.CLUSTERED_ATTACKS)
    for experiment in found:
        if quick and experiment.quick_rounds is None:
            continue
        scenario = with_overrides(
            load_scenario(experiment.scenario),
            list(experiment.sets),
            algorithms=list(experiment.algorithms),
        )
        attackers = {c for f in scenario.faulty for c in f.ids}
        if experiment.key.startswith("none__") or experiment.key.endswith("__none"):
            assert not attackers
        else:
            assert len(attackers) == scenario.clients // 5  # 20 %


def test_the_layout_is_flanders() -> None:
    scenario = load_scenario("byzantine-fmnist")
    assert (scenario.clients, scenario.rounds) == (100, 50)
    assert scenario.partition.kind == "dirichlet" and scenario.partition.alpha == 0.5
    assert len(scenario.faulty[0].ids) == 20


def _row(clusters: list[int | None], faulty: set[int]) -> dict[str, Any]:
    return {
        "round": 0,
        "clients": [
            {
                "id": i,
                "cluster": c,
                "acc": 0.6 - 0.1 * (i in faulty),
                "faulty": i in faulty,
            }
            for i, c in enumerate(clusters)
        ],
    }


def test_the_attacker_split_of_the_final_clusters() -> None:
    two = attacker_split([_row([0, 0, 1, 1], {2, 3})])
    assert two["attacker_ari"] == 1.0 and two["honest_acc"] == pytest.approx(0.6)
    assert (two["attackers_alone"], two["honest_with_attackers"]) == (1.0, 0.0)
    one = attacker_split([_row([0, 0, 0, 0], {2, 3})])
    assert one["attacker_ari"] == 0.0
    assert (one["attackers_alone"], one["honest_with_attackers"]) == (0.0, 1.0)
    assert set(attacker_split([]).values()) == {None}


def test_isolated_attackers_score_alone_where_ari_falls() -> None:
    # The audit's case: attackers alone in one cluster, the honest clients
    # spread over four. ARI is far below 1; every attacker is still alone and
    # no honest client shares their cluster.
    clusters = [0, 1, 2, 3, 0, 1, 2, 3, 4, 4]
    found = attacker_split([_row(clusters, {8, 9})])
    assert found["attacker_ari"] is not None and found["attacker_ari"] < 0.5
    assert (found["attackers_alone"], found["honest_with_attackers"]) == (1.0, 0.0)
    # One honest client in the attackers' cluster: 1 of 8 exposed.
    found = attacker_split([_row([0, 1, 2, 3, 0, 1, 2, 4, 4, 4], {8, 9})])
    assert found["attackers_alone"] == 0.0
    assert found["honest_with_attackers"] == pytest.approx(1 / 8)


def test_clients_without_a_cluster_are_left_out_not_a_cluster() -> None:
    # Were None a cluster of its own, attackers left unassigned would read
    # as isolated (ARI 1).
    found = attacker_split([_row([0, 0, 0, 0, None, None], {4, 5})])
    assert found["unassigned"] == 2.0
    assert found["attacker_ari"] is None and found["attackers_alone"] is None
    assert found["honest_acc"] == pytest.approx(0.6)


def test_flanders_measure_is_the_best_global_accuracy_from_round_three() -> None:
    rows = [{"round": r, "global_acc": a} for r, a in enumerate([0.9, 0.8, 0.5, 0.7])]
    # Rows 0 and 1 are FLANDERS' rounds 1 and 2: out of its maximum.
    assert best_global_accuracy(rows) == 0.7
    assert best_global_accuracy([{"round": 5, "global_acc": None}]) is None


def test_the_page_names_what_is_not_recorded(tmp_path: Path) -> None:
    page = tmp_path / "BYZANTINE.md"
    write_page([], "python bench/byzantine.py --no-run", page, False, tmp_path / "kept")
    text = page.read_text()
    assert f"from the records in `{tmp_path / 'kept'}`" in text
    # FLANDERS' FedAvg under ALIE beside ours in its own measure.
    assert "| `alie` | `mean` | 0.17 | — | — | — |" in text
    # 132 cells, the backdoor's baseline and 16 clustered rows (FedAvg's rows
    # are cells of the table).
    assert "Not recorded yet (149)" in text
    assert "calls (not recorded yet) of the triggered test images 0" in text


def test_the_page_says_flanders_lie_is_another_shift(tmp_path: Path) -> None:
    page = tmp_path / "BYZANTINE.md"
    write_page([], "python bench/byzantine.py --no-run", page, False, tmp_path)
    text = page.read_text()
    # FLANDERS' z: Φ(49/80) = Φ(0.6125) ≈ 0.7299; Baruch et al.'s for n = 100,
    # f = 20: Φ⁻¹(69/100) ≈ 0.4959 (tables of the standard normal).
    assert "z = Φ(49/80) = 0.73" in text
    assert "Φ⁻¹((n − s)/n) = 0.50 here (s = ⌊n/2 + 1⌋ − f = 31)" in text


def _recorded(key: str, summaries: dict[str, list[dict[str, float]]]) -> Any:
    (experiment,) = [e for e in byzantine.experiments() if e.key == key]
    by_seed = {a: dict(enumerate(runs)) for a, runs in summaries.items()}
    rows = {a: {s: [] for s in runs} for a, runs in by_seed.items()}
    return make_outcome(
        experiment, "fashion_mnist", 1.0, by_seed, rows, Path("."), False
    )


def test_the_page_reads_fedavgs_row_from_the_tables_median_cell(
    tmp_path: Path,
) -> None:
    fedavg = {
        "final_mean_acc": 0.81,
        "global_acc_best": 0.86,
        "global_acc_final": 0.84,
        "attacker_ari": 0.0,
        "attackers_alone": 0.0,
        "honest_with_attackers": 1.0,
        "n_clusters_final": 1.0,
        "unassigned": 0.0,
        "honest_acc": 0.81,
    }
    cfl = {**fedavg, "attacker_ari": 0.4, "attackers_alone": 1.0}
    cfl["honest_with_attackers"], cfl["n_clusters_final"] = 0.0, 6.0
    outcomes = [
        _recorded(
            "alie__median", {"fedavg": [fedavg, {**fedavg, "final_mean_acc": 0.83}]}
        ),
        _recorded("clustered__alie", {a: [cfl] for a in byzantine.CLUSTERED}),
    ]
    page = tmp_path / "BYZANTINE.md"
    write_page(outcomes, "cmd", page, False, tmp_path)
    text = page.read_text()
    # Two seeds of three: the count beside the interval.
    assert "0.820 ± 0.127 (2 seeds)" in text  # the table's cell, t(1) = 12.71
    # FLANDERS' median under LIE beside our best global accuracy, its measure.
    assert "| `alie` | `median` | 0.65 | 0.860 ± 0.000 (2 seeds)" in text
    assert (
        "| `alie` | fedavg + median | 0.000 ± 0.000 (2 seeds) | 0.000 ± 0.000"
        " (2 seeds) | 1.000 ± 0.000 (2 seeds) | 1.0 ± 0.0 (2 seeds)"
    ) in text
    assert (
        "| `alie` | cfl | 0.400 (1 seed) | 1.000 (1 seed) | 0.000 (1 seed) | 6.0"
        in text
    )
    assert "`clustered__alie (fedavg)`" not in text and "clustered__ipm (cfl)" in text


def test_the_clean_clustered_row_has_no_split_to_measure(tmp_path: Path) -> None:
    # Without attackers the split is undefined: attacker_split leaves it None.
    clean = {**attacker_split([_row([0, 1, 1, 0], set())]), "n_clusters_final": 2.0}
    assert clean["attacker_ari"] is None and clean["honest_acc"] == pytest.approx(0.6)
    outcomes = [_recorded("clustered__none", {a: [clean] for a in byzantine.CLUSTERED})]
    page = tmp_path / "BYZANTINE.md"
    write_page(outcomes, "cmd", page, False, tmp_path)
    text = page.read_text()
    assert "| `none` | cfl | n/a | n/a | n/a | 2.0 (1 seed) | 0.0 (1 seed)" in text
    assert "clustered__none (cfl)" not in text and "clustered__alie (cfl)" in text


def test_the_page_counts_honest_clients_left_without_accuracy(tmp_path: Path) -> None:
    # A diverged cluster: 6 honest clients and 2 attackers lost their accuracy;
    # honest_acc is a mean over the rest, so the page says how many it left out.
    attackers = set(byzantine.FULL[1])
    honest_lost = [i for i in range(100) if i not in attackers][:6]
    lost = {*honest_lost, 4, 9}
    final = {
        "round": 49,
        "clients": [
            {"id": i, "acc": None if i in lost else 0.8, "cluster": 0}
            for i in range(100)
        ],
    }
    (experiment,) = [e for e in byzantine.experiments() if e.key == "clustered__ipm"]
    outcome = make_outcome(
        experiment,
        "fashion_mnist",
        1.0,
        {"cfl": {0: {"honest_acc": 0.8}}},
        {"cfl": {0: [final]}},
        Path("."),
        False,
    )
    page = tmp_path / "BYZANTINE.md"
    write_page([outcome], "cmd", page, False, tmp_path)
    row = next(
        line
        for line in page.read_text().splitlines()
        if line.startswith("| `ipm` | cfl")
    )
    assert row.endswith("| 0.800 (1 seed) | 0.075 (1 seed) |")  # 6 of 80


def test_a_seed_without_accuracy_is_shown_not_averaged_away(tmp_path: Path) -> None:
    # A defence that lets the model diverge in one seed of three: every honest
    # client's last evaluation failed there, so its summary has no accuracy.
    fine = {"final_mean_acc": 0.84, "global_acc_final": 0.85, "honest_acc": 0.84}
    diverged = {"final_mean_acc": None, "global_acc_final": 0.10, "honest_acc": None}
    outcomes = [
        _recorded("sign_flip__mean", {"fedavg": [fine, diverged, fine]}),
        _recorded("ipm__mean", {"fedavg": [fine, {**fine, "final_mean_acc": 0.80}]}),
    ]
    page = tmp_path / "BYZANTINE.md"
    write_page(outcomes, "cmd", page, False, tmp_path)
    rows: dict[str, str] = {}
    for line in page.read_text().splitlines():  # the table's row: the first
        rows.setdefault(line.split(" | ")[0], line)
    flip = rows["| `sign_flip`"]
    assert flip.split(" | ")[1] == "none in 1 of 3 seeds"
    assert "0.840" not in flip  # not the mean of the two seeds that have one
    assert rows["| `ipm`"].split(" | ")[1] == "0.820 ± 0.254 (2 seeds)"


def test_the_backdoor_baseline_probes_the_backdoors_own_trigger_on_a_clean_run(
    tmp_path: Path,
) -> None:
    (baseline,) = [
        e for e in byzantine.experiments() if e.key == byzantine.TRIGGER_BASELINE
    ]
    (backdoor,) = [e for e in byzantine.experiments() if e.key == "backdoor__mean"]
    (cell,) = [e for e in byzantine.experiments() if e.key == "none__mean"]
    clean = baseline.resolved("fashion_mnist")
    attack = backdoor.resolved("fashion_mnist").faulty[0]
    # The table's clean cell with the probe: its runs train as that cell's.
    assert clean.model_copy(update={"backdoor_probe": None}) == cell.resolved(
        "fashion_mnist"
    )
    assert clean.backdoor_probe is not None
    assert (clean.backdoor_probe.target, clean.backdoor_probe.trigger) == (
        attack.target,
        attack.trigger,
    )
    outcomes = [
        _recorded(
            byzantine.TRIGGER_BASELINE,
            {"fedavg": [{"backdoor_success_final": s} for s in (0.02, 0.04, 0.03)]},
        )
    ]
    page = tmp_path / "BYZANTINE.md"
    write_page(outcomes, "cmd", page, False, tmp_path)
    text = page.read_text()
    # mean 0.03, s = 0.01, t(2) = 4.303: half-width 0.01 · 4.303 / √3 = 0.025
    assert "the plain mean's final model calls 0.030 ± 0.025 of the" in text
    assert "none__mean__trigger" not in text.split("Not recorded yet")[1]
