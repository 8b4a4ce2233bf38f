"""The global model is addressed by its own name (issue 32): DCFL's W_G
travels as "global", never as an id of the cluster id space, and the server
refuses a reply that names a model it did not send, "global" included."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from clusterfed.actors.trace import read_trace
from clusterfed.actors.validation import check_evaluation, check_update
from clusterfed.algorithms import ClientUpdate, TaskPlan
from clusterfed.protocol import (
    GLOBAL_MODEL,
    ClusterModel,
    Envelope,
    EvaluateReply,
    EvaluateTask,
    TrainConfig,
    TrainTask,
    UpdateReply,
    decode,
    encode,
)
from clusterfed.scenarios import Join
from clusterfed.types import GLOBAL, ClientId, ClusterId, model_key
from helpers import small_scenario, traced_run

WEIGHTS = np.linspace(-1, 1, 4, dtype=np.float32)


def _envelope(payload: object) -> Envelope:
    return Envelope(
        msg_id="abc:1", sender="server", recipient="client/1", round=0, payload=payload
    )


def _update(cluster: int | str) -> UpdateReply:
    return UpdateReply(
        cluster=cluster, delta=np.zeros(4, np.float32), n_samples=1, loss=0.1,
        samples_seen=1,
    )  # fmt: skip


def test_the_protocol_spells_the_global_model_as_the_types_do() -> None:
    assert GLOBAL_MODEL == GLOBAL == "global"
    assert model_key("global") == GLOBAL and model_key(3) == ClusterId(3)
    with pytest.raises(ValueError, match="no model is named 'Global'"):
        model_key("Global")


@pytest.mark.parametrize(
    "payload",
    [
        TrainTask(
            models=(ClusterModel(cluster="global", weights=WEIGHTS),),
            config=TrainConfig(),
        ),
        EvaluateTask(model=ClusterModel(cluster="global", weights=WEIGHTS)),
        _update("global"),
        EvaluateReply(cluster="global", accuracy=0.5, loss=0.1, n_samples=3),
    ],
    ids=["train task", "evaluate task", "update", "evaluation"],
)
def test_the_global_model_travels_by_its_name(payload: object) -> None:
    data = encode(_envelope(payload))
    assert b"\xa6global" in data  # msgpack's "global"; no 2³¹ − 1 anywhere
    assert b"\xce\x7f\xff\xff\xff" not in data
    back = decode(data).payload
    assert type(back) is type(payload)
    if isinstance(back, TrainTask):
        assert back.models[0].cluster == "global"
    elif isinstance(back, EvaluateTask):
        assert back.model.cluster == "global"
    else:
        assert isinstance(back, UpdateReply | EvaluateReply)
        assert back.cluster == "global"


def test_cluster_ids_stay_plain_ints_numpy_ones_included() -> None:
    model = ClusterModel(cluster=np.int64(3), weights=WEIGHTS)
    assert model.cluster == 3 and type(model.cluster) is int
    for bad in ("3", True, 3.0, -1, 2**31, "Global"):
        with pytest.raises(ValueError):
            ClusterModel(cluster=bad, weights=WEIGHTS)


def test_an_update_for_a_model_not_offered_is_refused_global_included() -> None:
    offered_global = TaskPlan(ClientId(1), {GLOBAL: WEIGHTS})
    offered_cluster = TaskPlan(ClientId(1), {ClusterId(0): WEIGHTS})
    assert check_update(_update("global"), offered_global, 4, None, 10) is None
    assert check_update(_update(0), offered_cluster, 4, None, 10) is None
    assert (
        check_update(_update("global"), offered_cluster, 4, None, 10)
        == "update for the global model, which was not sent"
    )
    assert (
        check_update(_update(0), offered_global, 4, None, 10)
        == "update for cluster 0, which was not sent"
    )


def test_an_evaluation_of_a_model_not_asked_is_refused() -> None:
    def evaluation(cluster: int | str) -> EvaluateReply:
        return EvaluateReply(cluster=cluster, accuracy=0.5, loss=0.1, n_samples=3)

    assert check_evaluation(evaluation("global"), GLOBAL) is None
    assert (
        check_evaluation(evaluation(0), GLOBAL)
        == "evaluation of cluster 0, asked the global model"
    )
    assert (
        check_evaluation(evaluation("global"), 2)
        == "evaluation of the global model, asked cluster 2"
    )


def test_an_update_of_the_global_model_belongs_to_no_cluster() -> None:
    update = ClientUpdate(ClientId(4), GLOBAL, "ok")
    with pytest.raises(ValueError, match="global model"):
        _ = update.cluster_id
    assert ClientUpdate(ClientId(4), ClusterId(2), "ok").cluster_id == 2


def test_a_dcfl_newcomer_trains_and_is_evaluated_on_the_global_model(
    tmp_path: Path,
) -> None:
    scenario = small_scenario(algorithm="dcfl", rounds=4, events=[Join(start=2)])
    rows = traced_run(tmp_path, scenario)
    newcomer = 6
    _, records = read_trace(tmp_path)
    sent = [
        decode(r.data).payload
        for r in records
        if r.client == newcomer and r.role == "request" and r.data is not None
    ]
    replies = [
        decode(r.data).payload
        for r in records
        if r.client == newcomer and r.role == "reply" and r.data is not None
    ]
    first_train = next(p for p in sent if isinstance(p, TrainTask))
    assert [m.cluster for m in first_train.models] == ["global"]
    first_update = next(p for p in replies if isinstance(p, UpdateReply))
    assert first_update.cluster == "global"
    # Accepted and placed in its round: no refusal, a cluster in its row.
    assert all(row["rejected_messages"] == 0 for row in rows)
    joined = next(c for c in rows[2]["clients"] if c["id"] == newcomer)
    assert joined["trained"] and isinstance(joined["cluster"], int)
    # Every other model a task named is a cluster's id.
    names = {
        m.cluster for p in sent for m in (p.models if isinstance(p, TrainTask) else ())
    }
    assert names - {"global"} and all(isinstance(n, int) for n in names - {"global"})
