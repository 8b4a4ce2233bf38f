"""What a client reports of itself — its accuracy, the ε it spent — no check
can verify. A client the scenario made faulty has its reports marked in its
row (`faulty: true`) and kept out of the run's metrics: the mean accuracy
and `epsilon_max` are the honest clients'."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgpack
import numpy as np

import clusterfed
from clusterfed.actors import RoundOutcome
from clusterfed.plots_runs import _mean_acc
from clusterfed.scenarios import Faulty
from clusterfed.summary import mean_std
from clusterfed.testing import Request, ServerHarness
from clusterfed.types import ClientId
from helpers import small_scenario

LIAR = ClientId(2)


def with_payload(reply: bytes, **fields: Any) -> bytes:
    raw = msgpack.unpackb(reply, raw=False, ext_hook=lambda c, d: msgpack.ExtType(c, d))
    raw["payload"].update(fields)
    return msgpack.packb(raw, use_bin_type=True)


def lying_round(faulty: bool) -> RoundOutcome:
    """One round where client 2 claims accuracy 1.0 and ε = 50."""
    harness = ServerHarness(small_scenario(rounds=1))
    if faulty:
        harness.server.roster.faulty.add(LIAR)

    async def answer(request: Request) -> bytes | None:
        reply = await harness.honest(request)
        assert reply is not None
        if request.client != LIAR:
            return reply
        if request.kind == "evaluate_task":
            return with_payload(reply, accuracy=1.0)
        if request.kind == "train_task":
            return with_payload(reply, epsilon=50.0)
        return reply

    async def go() -> RoundOutcome:
        await harness.join()
        return await harness.run_round(0, answer)

    return asyncio.run(go())


def test_a_faulty_clients_reports_stay_out_of_the_metrics() -> None:
    outcome = lying_round(faulty=True)
    rows = {c.id: c.row(group=None) for c in outcome.clients}
    assert rows[LIAR]["faulty"] is True and rows[LIAR]["acc"] == 1.0
    assert all("faulty" not in r for c, r in rows.items() if c != LIAR)
    assert outcome.epsilon_max is None  # its ε = 50 is its own word
    honest = [r["acc"] for c, r in rows.items() if c != LIAR]
    mean, _ = mean_std({"clients": list(rows.values())})
    assert mean == np.mean(honest) and mean < 1.0


def test_without_the_mark_the_lie_would_enter_the_metrics() -> None:
    # The same lies from a client the scenario did not make faulty: trusted,
    # as every simulated client's reports are.
    outcome = lying_round(faulty=False)
    rows = [c.row(group=None) for c in outcome.clients]
    assert outcome.epsilon_max == 50.0
    mean, _ = mean_std({"clients": rows})
    assert mean == np.mean([r["acc"] for r in rows])


def test_a_run_marks_its_faulty_clients_and_reports_the_honest_mean(
    tmp_path: Path,
) -> None:
    scenario = small_scenario(
        rounds=2, faulty=[Faulty(clients=[LIAR], behaviour="sign_flip", scale=2.0)]
    )
    result = clusterfed.run(scenario, out=tmp_path, workers=1)
    last = result.rows[-1]["clients"]
    marked = {c["id"] for r in result.rows for c in r["clients"] if c.get("faulty")}
    assert marked == {LIAR}
    honest = [c["acc"] for c in last if c["id"] != LIAR]
    assert result.summary["final_mean_acc"] == float(np.mean(honest))
    assert _mean_acc(result.rows[-1]) == float(np.mean(honest))  # the plots' too
