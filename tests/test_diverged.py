"""A client whose training or evaluation diverges answers with an error that
names the value, and the run goes on without its update."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np

import clusterfed
from clusterfed.actors import Client
from clusterfed.protocol import (
    ClusterModel,
    Envelope,
    ErrorReply,
    EvaluateTask,
    TrainConfig,
    TrainTask,
    UpdateReply,
    decode,
    encode,
)
from clusterfed.scenarios import plan_run
from helpers import read_rounds, small_scenario

CONFIG = TrainConfig(lr=0.05, momentum=0.9, batch_size=16)


def _ask(client: Client, payload: Any) -> Any:
    request = Envelope(
        msg_id="server:0",
        sender="server",
        recipient="client/0",
        round=0,
        payload=payload,
    )
    return decode(asyncio.run(client.handle(encode(request)))).payload


def test_weights_that_blow_up_the_loss_are_answered_with_diverged() -> None:
    plan = plan_run(small_scenario())
    client = Client(plan.clients[0])
    huge = (plan.initial * 1e12).astype(np.float32)
    model = ClusterModel(cluster=0, weights=huge)
    for task in (TrainTask(models=(model,), config=CONFIG), EvaluateTask(model=model)):
        reply = _ask(client, task)
        assert isinstance(reply, ErrorReply), reply
        assert reply.code == "diverged"
        assert "outside [0, 1e+12]" in reply.message
    # The same client still serves a sane model afterwards.
    sane = ClusterModel(cluster=0, weights=plan.initial)
    assert isinstance(
        _ask(client, TrainTask(models=(sane,), config=CONFIG)), UpdateReply
    )


def test_a_run_whose_training_diverges_counts_failed_updates_and_finishes(
    tmp_path: Path,
) -> None:
    scenario = small_scenario(
        rounds=2, train=TrainConfig(lr=1e9, momentum=0.9, batch_size=16, epochs=1)
    )
    result = clusterfed.run(scenario, out=tmp_path, workers=1)
    rows = read_rounds(tmp_path)
    assert len(rows) == 2
    assert result.summary["failed_updates"] > 0
    assert result.summary["rejected_messages"] == 0
    reasons = [c["reason"] for c in rows[0]["clients"] if c["failed"]]
    assert reasons and all(r.startswith("diverged: training diverged") for r in reasons)
