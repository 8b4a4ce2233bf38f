"""What a federation adds to summary.json beyond its rows' figures
(`RunRecorder.finish`): the strategy's own keys and CBCC's scores against the
ground truth the scenario planted, the privacy spent, the simulated time to
the target accuracy and the staleness of asynchronous updates."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from clusterfed.actors import ParameterServer
from clusterfed.actors.spec import PrivacyPlan, privacy_summary
from clusterfed.algorithms.cafa import CAFADiagnostics
from clusterfed.scenarios import Scenario, ScenarioEngine

from .results import RunRecorder
from .summary import cbcc_scores, staleness_summary, time_to_accuracy


def summary_extra(
    scenario: Scenario,
    recorder: RunRecorder,
    engine: ScenarioEngine,
    server: ParameterServer,
    privacy: Mapping[int, PrivacyPlan],
) -> dict[str, Any]:
    """The keys `Federation.finish` adds to the summary; `privacy`: every
    client's DP plan as it joined."""
    extra = strategy_summary(scenario, recorder, engine)
    spent = {int(cid): eps for cid, eps in server.roster.epsilon.items()}
    spent_summary = privacy_summary(privacy, spent)
    if server.client_dp is not None:
        spent_summary = server.client_dp.summary()
    if spent_summary is not None:
        extra["privacy"] = spent_summary
    rows = recorder.rows
    extra["target_accuracy"] = scenario.target_accuracy
    extra["time_to_accuracy"] = time_to_accuracy(rows, scenario.target_accuracy)
    staleness = staleness_summary(rows)
    if staleness is not None:
        extra["staleness"] = staleness
    return extra


def strategy_summary(
    scenario: Scenario, recorder: RunRecorder, engine: ScenarioEngine
) -> dict[str, Any]:
    """Summary keys from the strategy's diagnostics of the last round
    recorded: what they offer (`Diagnostics.summary`: CFL's `splits`),
    and scores against the ground truth, which only the scenario knows:
    `cbcc` for CAFA."""
    last = recorder.diagnostics
    if not recorder.rows or last is None:
        return {}
    found: dict[str, Any] = dict(last.summary())
    if not isinstance(last, CAFADiagnostics) or last.cbcc is None:
        return found
    iid = scenario.partition.iid_groups()
    truth = (
        {
            cid: engine.partition_groups[cid] in iid
            for cid in engine.specs
            if cid in engine.partition_groups
        }
        if iid is not None
        else None
    )
    found["cbcc"] = cbcc_scores(last.cbcc, truth)
    return found
