"""The published JSON Schema: generated from the message models, every kind in
it, and every kind a real run sends valid against it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import jsonschema
import pytest

from clusterfed.actors import Client
from clusterfed.actors.trace import read_trace
from clusterfed.protocol import MESSAGE_KINDS
from clusterfed.protocol.codec import to_json_form
from clusterfed.protocol.schema import json_schema, message_kinds
from clusterfed.scenarios import Leave, plan_run
from clusterfed.scenarios.spec import IIDMixPartition
from helpers import small_scenario, traced_run


def test_the_schema_lists_every_kind_of_the_message_union() -> None:
    schema = json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert sorted(schema["x-message-kinds"]) == sorted(MESSAGE_KINDS)
    kinds = set()
    for definition in schema["$defs"].values():
        kind = definition.get("properties", {}).get("kind", {})
        if "const" in kind:
            kinds.add(kind["const"])
    assert kinds == set(message_kinds()) == set(MESSAGE_KINDS)


@pytest.fixture(scope="module")
def samples(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """One recorded message of every kind: a CAFA run (describe and probe
    tasks) in which a client leaves, and a client's answer to garbage."""
    scenario = small_scenario(
        algorithm="cafa",
        partition=IIDMixPartition(iid_fraction=0.5),
        clients=8,
        rounds=2,
        events=[Leave(start=1, target=7)],
    )
    folder = tmp_path_factory.mktemp("cafa")
    traced_run(folder, scenario)
    _, records = read_trace(folder)
    # PACFL's run: a client's data subspace, the other description it may send.
    pacfl = tmp_path_factory.mktemp("pacfl")
    traced_run(pacfl, small_scenario(algorithm="pacfl", clients=4, rounds=1))
    found: dict[str, bytes] = {}
    for record in [*records, *read_trace(pacfl)[1]]:
        if record.kind is not None and record.data is not None:
            found.setdefault(record.kind, record.data)
    client = Client(plan_run(scenario).clients[0])
    error = asyncio.run(client.handle(b"not a message"))
    assert error is not None
    found["error"] = error
    return found


def test_a_recorded_message_of_every_kind_is_valid(samples: dict[str, bytes]) -> None:
    assert set(samples) == set(MESSAGE_KINDS)
    validator = jsonschema.Draft202012Validator(json_schema())
    for kind, data in samples.items():
        form = to_json_form(data)
        assert form["payload"]["kind"] == kind
        errors = list(validator.iter_errors(form))
        assert not errors, (kind, [e.message for e in errors])


def test_the_schema_refuses_what_decode_refuses(samples: dict[str, bytes]) -> None:
    validator = jsonschema.Draft202012Validator(json_schema())
    update = to_json_form(samples["update_reply"])
    broken = [
        {**update, "msg_id": None},
        {**update, "surprise": 1},
        {**update, "payload": {**update["payload"], "n_samples": "12"}},
        {**update, "payload": {**update["payload"], "kind": "gossip"}},
        {
            **update,
            "payload": {
                **update["payload"],
                "delta": {**update["payload"]["delta"], "shape": [3, 4]},
            },
        },
    ]
    for instance in broken:
        assert list(validator.iter_errors(json.loads(json.dumps(instance))))


def test_protocol_2_names_the_global_model_and_carries_no_compute_time() -> None:
    schema = json_schema()
    assert schema["$id"] == "urn:clusterfed:protocol:2:envelope"
    defs = schema["$defs"]
    for kind, field in (
        ("ClusterModel", "cluster"),
        ("UpdateReply", "cluster"),
        ("EvaluateReply", "cluster"),
    ):
        options = defs[kind]["properties"][field]["anyOf"]
        assert {"const": "global", "type": "string"} in options
        ids = next(o for o in options if o.get("type") == "integer")
        assert (ids["minimum"], ids["maximum"]) == (0, 2**31 - 1)
    update = defs["UpdateReply"]["properties"]
    assert "compute_s" not in update and "compute_s" not in defs["ProbeReply"]
    assert "samples_seen" in defs["UpdateReply"]["required"]
    assert update["samples_seen"]["maximum"] == 2**31 - 1


def test_the_schema_refuses_another_name_for_a_model(
    samples: dict[str, bytes],
) -> None:
    validator = jsonschema.Draft202012Validator(json_schema())
    update = to_json_form(samples["update_reply"])
    for cluster, valid in (("global", True), (3, True), ("Global", False), (-1, False)):
        instance = {**update, "payload": {**update["payload"], "cluster": cluster}}
        errors = list(validator.iter_errors(instance))
        assert (not errors) is valid, (cluster, errors)


def test_a_data_subspace_task_and_its_answer_are_valid(tmp_path: Path) -> None:
    traced_run(tmp_path, small_scenario(algorithm="pacfl", clients=3, rounds=1))
    _, records = read_trace(tmp_path)
    forms = [
        to_json_form(r.data)
        for r in records
        if r.kind in ("describe_task", "data_subspace") and r.data is not None
    ]
    validator = jsonschema.Draft202012Validator(json_schema())
    for form in forms:
        assert not list(validator.iter_errors(form)), form["payload"]
    tasks = [f["payload"] for f in forms if f["payload"]["kind"] == "describe_task"]
    asked = {"want": "data_subspace", "n_basis": 3, "per_class": True}
    assert tasks == 3 * [{"kind": "describe_task", **asked}]
    answer = next(f for f in forms if f["payload"]["kind"] == "data_subspace")
    basis = answer["payload"]["basis"]
    assert basis["dtype"] == "float32" and basis["shape"][0] == 64
    for change in ({"dtype": "float64"}, {"shape": [64]}, {"shape": [64, 2, 1]}):
        bad = {**answer, "payload": {**answer["payload"], "basis": {**basis, **change}}}
        assert list(validator.iter_errors(bad)), change
