"""The strategies' diagnostics: typed objects the results read by field, and
their records, plain JSON, in rounds.jsonl (issue 32)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

import clusterfed
from clusterfed.actors import RoundOutcome
from clusterfed.actors.asynchronous import DriverDiagnostics
from clusterfed.algorithms import (
    ClientInfo,
    ClientUpdate,
    Diagnostics,
    ServerState,
    algorithms,
    make,
)
from clusterfed.algorithms.cfl import CFLDiagnostics, CFLNorms, CFLThresholds
from clusterfed.algorithms.dcfl import DCFLDiagnostics
from clusterfed.algorithms.diagnostics import PlainDiagnostics, as_diagnostics
from clusterfed.algorithms.fedavg import FedAvg
from clusterfed.conformance import check_strategy
from clusterfed.types import ClientId, ClusterId
from helpers import read_rounds, small_scenario

DIM = 4


def _rounds(name: str, deltas: np.ndarray, rounds: int = 1) -> list[Any]:
    """Every client ends each round at `deltas[i]` from its cluster's model."""
    strategy = make(name)
    state = strategy.init_state([np.zeros(DIM, np.float32)])
    rng = np.random.default_rng(0)
    for i in range(len(deltas)):
        state = strategy.on_join(state, ClientInfo(ClientId(i), 10))
    found = []
    for round in range(rounds):
        updates = []
        for i, delta in enumerate(deltas):
            cluster, base = strategy.model_for(state, ClientId(i))
            updates.append(
                ClientUpdate(
                    ClientId(i), cluster, "ok", base, delta.astype(np.float32), 10, 1.0
                )
            )
        state = strategy.aggregate(state, round, updates, rng)
        found.append(strategy.diagnostics(state))
    return found


def test_every_strategy_reports_nothing_before_a_round() -> None:
    for name in algorithms():
        strategy = make(name)
        state = strategy.init_state(
            [np.zeros(DIM, np.float32) for _ in range(strategy.initial_models)]
        )
        # Nothing decided yet, so nothing to report (None, or an empty
        # mapping from a strategy that returns a plain one).
        assert as_diagnostics(strategy.diagnostics(state), name) is None, name


def test_dcfl_reports_its_dunn_index_and_whether_it_reclustered() -> None:
    opposed = np.array([[1.0, 0, 0, 0], [1.1, 0, 0, 0], [-1, 0, 0, 0], [-1.1, 0, 0, 0]])
    first, second = _rounds("dcfl", opposed, rounds=2)
    # One cluster at the start: the index is undefined (None, not a non-finite
    # float that JSON cannot hold), and DCFL re-clusters.
    assert first == DCFLDiagnostics(dunn_index=None, reclustered=True)
    # Two clean clusters next: a finite index of at least 1, no re-clustering.
    assert isinstance(second, DCFLDiagnostics)
    assert second.reclustered is False
    assert second.dunn_index is not None and second.dunn_index >= 1


def test_cfl_reports_each_clusters_update_norms() -> None:
    (found,) = _rounds("cfl", np.array([[3.0, 0, 0, 0], [0, 4.0, 0, 0]]))
    assert found == CFLDiagnostics(
        update_norms={ClusterId(0): CFLNorms(mean=2.5, max=4.0, clients=3.5)},
        thresholds=CFLThresholds(eps1=0.4, eps2=1.6),
        splits=(),
    )
    assert found.record() == {
        "update_norms": {"0": {"mean": 2.5, "max": 4.0, "clients": 3.5}},
        "thresholds": {"eps1": 0.4, "eps2": 1.6},
        "splits": [],
    }


def test_rounds_jsonl_records_the_diagnostics(tmp_path: Path) -> None:
    clusterfed.run(small_scenario(algorithm="cfl", rounds=2), out=tmp_path)
    rows = read_rounds(tmp_path)
    assert all(
        list(r["strategy"]) == ["update_norms", "thresholds", "splits"] for r in rows
    )


# -- the base: typed, frozen, recorded as JSON -------------------------------------


class Sample(Diagnostics):
    omit_when_none = frozenset({"maybe"})
    count: int
    score: float | None
    by_cluster: dict[ClusterId, float]
    maybe: int | None = None


def test_a_record_keeps_declaration_and_mapping_order_with_string_keys() -> None:
    found = Sample(count=2, score=0.5, by_cluster={ClusterId(3): 1.0, ClusterId(1): 2})
    assert found.by_cluster == {3: 1.0, 1: 2.0}  # the type's float, not the int
    text = json.dumps(found.record())
    assert text == '{"count": 2, "score": 0.5, "by_cluster": {"3": 1.0, "1": 2.0}}'


def test_a_field_omitted_when_none_is_written_once_set_and_others_as_null() -> None:
    assert "maybe" not in Sample(count=1, score=None, by_cluster={}).record()
    found = Sample(count=1, score=None, by_cluster={}, maybe=0)
    assert found.record() == {"count": 1, "score": None, "by_cluster": {}, "maybe": 0}


def test_omit_when_none_must_name_a_field() -> None:
    with pytest.raises(TypeError, match=r"Typo.omit_when_none .*\['mabye'\]"):

        class Typo(Diagnostics):
            omit_when_none = frozenset({"mabye"})
            maybe: int | None = None


def test_a_non_finite_float_is_recorded_as_null() -> None:
    found = Sample(count=1, score=math.inf, by_cluster={ClusterId(0): math.nan})
    assert found.record() == {"count": 1, "score": None, "by_cluster": {"0": None}}


def test_diagnostics_are_frozen_and_refuse_unknown_or_mistyped_fields() -> None:
    found = Sample(count=1, score=None, by_cluster={})
    with pytest.raises(ValidationError, match="frozen"):
        found.count = 2  # type: ignore[misc]
    with pytest.raises(ValidationError, match="dunn"):
        Sample(count=1, score=None, by_cluster={}, dunn=1.0)  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="count"):
        Sample(count="many", score=None, by_cluster={})  # type: ignore[arg-type]


def test_the_summary_takes_nothing_unless_the_type_offers_it() -> None:
    assert Sample(count=1, score=None, by_cluster={}).summary() == {}
    assert PlainDiagnostics(values={"splits": [1], "other": 2}).summary() == {
        "splits": [1]
    }


def test_the_driver_s_versions_follow_the_strategy_s_record() -> None:
    outcome = RoundOutcome(
        round=0,
        sim_duration=1.0,
        clients=[],
        n_clusters=2,
        diagnostics=DCFLDiagnostics(dunn_index=None, reclustered=True),
        driver=DriverDiagnostics(
            version=4, cluster_versions={ClusterId(0): 3, ClusterId(2): 1}
        ),
    )
    assert json.dumps(outcome.strategy_record()) == (
        '{"dunn_index": null, "reclustered": true, "version": 4,'
        ' "cluster_versions": {"0": 3, "2": 1}}'
    )
    alone = RoundOutcome(0, 1.0, [], 1, driver=DriverDiagnostics(version=1))
    assert alone.strategy_record() == {"version": 1}
    assert RoundOutcome(0, 1.0, [], 1).strategy_record() == {}


# -- a plug-in's plain mapping -------------------------------------------------------


def test_a_plain_mapping_is_checked_and_recorded_as_before() -> None:
    found = as_diagnostics(
        {
            0: np.float32(1.5),
            "pair": (1, np.int64(2)),
            "set": {3, 1},
            "inf": float("inf"),
            "nested": {"flag": np.bool_(True), "none": None, "text": "x"},
        },
        "Mine",
    )
    assert isinstance(found, PlainDiagnostics)
    assert found.record() == {
        "0": 1.5,
        "pair": [1, 2],
        "set": [1, 3],
        "inf": None,
        "nested": {"flag": True, "none": None, "text": "x"},
    }
    assert as_diagnostics({}, "Mine") is None
    assert as_diagnostics(None, "Mine") is None
    typed = DCFLDiagnostics(dunn_index=1.0, reclustered=False)
    assert as_diagnostics(typed, "DCFL") is typed


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"a": {"b": [1, object()]}}, r"Mine.diagnostics\['a'\]\['b'\]\[1\] .*object"),
        ({"raw": b"x"}, r"Mine.diagnostics\['raw'\] is no JSON value: bytes"),
        ([("a", 1)], "Mine.diagnostics returned list: return a Diagnostics"),
        (1.0, "Mine.diagnostics returned float"),
    ],
)
def test_what_json_cannot_hold_is_refused_naming_where(
    value: object, message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        as_diagnostics(value, "Mine")


class PlainReporting(FedAvg):
    """FedAvg whose diagnostics are a plain dict, as plug-ins returned them
    before diagnostics were typed."""

    name = "diagnostics_plain_reporting"

    def diagnostics(self, state: ServerState) -> Mapping[str, Any]:
        return {
            "clients": np.int64(len(state.assignment)),
            "splits": [{"round": 0, "cluster": 0}],
        }


def test_a_plug_in_returning_a_plain_dict_still_runs(tmp_path: Path) -> None:
    result = clusterfed.run(
        small_scenario(algorithm="test_diagnostics:PlainReporting", rounds=2),
        out=tmp_path,
    )
    assert [r["strategy"] for r in read_rounds(tmp_path)] == [
        {"clients": 6, "splits": [{"round": 0, "cluster": 0}]}
    ] * 2
    assert result.summary["splits"] == [{"round": 0, "cluster": 0}]


# -- the summary reads the last round's typed diagnostics ----------------------------


def test_the_summary_takes_cfls_splits_from_the_last_round(tmp_path: Path) -> None:
    scenario = small_scenario(
        algorithm="cfl",
        rounds=5,
        clients=8,
        algorithm_params={
            "cfl": {"warmup": 2, "thresholds": "relative", "eps1": 5.0, "eps2": 0.5}
        },
    )
    result = clusterfed.run(scenario, out=tmp_path / "whole", workers=1)
    last = read_rounds(tmp_path / "whole")[-1]["strategy"]
    assert last["splits"], "the thresholds were chosen to split"
    assert result.summary["splits"] == last["splits"]
    # A run resumed from a checkpoint ends with the same splits.
    stopped = tmp_path / "stopped"
    clusterfed.run(scenario, out=stopped, workers=1, checkpoint_every=3)
    (stopped / "summary.json").unlink()
    resumed = clusterfed.resume(stopped, workers=1)
    assert resumed.summary["splits"] == last["splits"]
    written = json.loads((stopped / "summary.json").read_text())
    assert written["splits"] == last["splits"]


# -- the conformance suite checks the diagnostics -------------------------------------


class NonFiniteDiagnostics(Diagnostics):
    value: float


class ReportsInfinity(FedAvg):
    name = "conformance_reports_infinity"

    def diagnostics(self, state: ServerState) -> NonFiniteDiagnostics:
        return NonFiniteDiagnostics(value=math.inf)


class ReportsAnObject(FedAvg):
    name = "conformance_reports_an_object"

    def diagnostics(self, state: ServerState) -> Mapping[str, Any]:
        return {"model": state}


@pytest.mark.parametrize(
    ("strategy", "message"),
    [
        (ReportsInfinity, "reads back as another object"),
        (ReportsAnObject, r"\['model'\] is no JSON value: ServerState"),
    ],
)
def test_the_suite_catches_diagnostics_json_cannot_hold(
    strategy: type[FedAvg], message: str
) -> None:
    check = "diagnostics_are_typed_and_recorded_as_json"
    with pytest.raises(AssertionError, match=f"{strategy.name}: {check}: .*{message}"):
        check_strategy(strategy.name)
