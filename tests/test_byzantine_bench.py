"""bench/byzantine.py's experiments, its attacker/honest split and its page,
without running the table (hours)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from clusterfed.scenarios import load_scenario
from clusterfed.scenarios.loader import with_overrides

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import byzantine  # noqa: E402
from byzantine.cli import attacker_split  # noqa: E402
from byzantine.page import write_page  # noqa: E402


@pytest.mark.parametrize("quick", [False, True])
def test_every_cell_is_a_valid_scenario(quick: bool) -> None:
    found = byzantine.experiments(quick)
    cells = len(byzantine.ATTACKS) * len(byzantine.DEFENCES)
    assert len(found) == cells + 2 * len(byzantine.CLUSTERED_ATTACKS)
    for experiment in found:
        if quick and experiment.quick_rounds is None:
            continue
        scenario = with_overrides(
            load_scenario(experiment.scenario),
            list(experiment.sets),
            algorithms=list(experiment.algorithms),
        )
        attackers = {c for f in scenario.faulty for c in f.ids}
        if experiment.key.startswith("none__"):
            assert not attackers
        else:
            assert len(attackers) == scenario.clients // 5  # 20 %


def test_the_layout_is_flanders() -> None:
    scenario = load_scenario("byzantine-fmnist")
    assert (scenario.clients, scenario.rounds) == (100, 50)
    assert scenario.partition.kind == "dirichlet" and scenario.partition.alpha == 0.5
    assert len(scenario.faulty[0].ids) == 20


def test_the_attacker_split_is_the_ari_of_the_final_clusters() -> None:
    def row(clusters: list[int]) -> dict:
        return {
            "clients": [
                {"id": i, "cluster": c, "acc": 0.5 + 0.1 * (i < 2), "faulty": i >= 2}
                for i, c in enumerate(clusters)
            ]
        }

    assert attacker_split([row([0, 0, 1, 1])]) == (1.0, pytest.approx(0.6))
    ari, _ = attacker_split([row([0, 0, 0, 0])])
    assert ari == 0.0
    assert attacker_split([]) == (None, None)


def test_the_page_names_what_is_not_recorded(tmp_path: Path) -> None:
    page = tmp_path / "BYZANTINE.md"
    write_page([], "python bench/byzantine.py --no-run", page, False, tmp_path / "kept")
    text = page.read_text()
    assert f"from the records in `{tmp_path / 'kept'}`" in text
    assert "*(0.17)*" in text  # FLANDERS' FedAvg under ALIE, beside our cell
    assert "Not recorded yet (147)" in text  # 132 cells, 15 clustered rows


def test_the_page_says_flanders_lie_is_another_shift(tmp_path: Path) -> None:
    page = tmp_path / "BYZANTINE.md"
    write_page([], "python bench/byzantine.py --no-run", page, False, tmp_path)
    text = page.read_text()
    # FLANDERS' z: Φ(49/80) = Φ(0.6125) ≈ 0.7299; Baruch et al.'s for n = 100,
    # f = 20: Φ⁻¹(69/100) ≈ 0.4959 (tables of the standard normal).
    assert "z = Φ(49/80) = 0.73" in text
    assert "Φ⁻¹((n − s)/n) = 0.50 here (s = ⌊n/2 + 1⌋ − f = 31)" in text
