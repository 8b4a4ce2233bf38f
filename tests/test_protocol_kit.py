"""The step harness, and a client written from the protocol docs alone
(examples/numpy_client.py) against a real parameter server."""

from __future__ import annotations

import ast
import asyncio
import importlib.util
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from clusterfed.data import load_dataset
from clusterfed.protocol import UpdateReply, decode, encode
from clusterfed.scenarios import ModelSpec
from clusterfed.testing import Request, ServerHarness
from helpers import small_scenario

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def example_client_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "numpy_client", EXAMPLES / "numpy_client.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_example_client_imports_nothing_of_clusterfed() -> None:
    tree = ast.parse((EXAMPLES / "numpy_client.py").read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    standard = {"__future__", "argparse", "hashlib", "hmac", "socket", "struct"}
    assert imported == standard | {"sys", "time", "typing", "msgpack", "numpy"}


@pytest.mark.parametrize("algorithm", ["fedavg", "ifca", "cafa"])
def test_the_example_client_completes_three_rounds_against_a_real_server(
    algorithm: str,
) -> None:
    # Softmax regression: the `mlp` with no hidden layer. IFCA sends several
    # models to choose from, CAFA asks for class histograms and probes.
    scenario = small_scenario(
        model=ModelSpec(name="mlp", hidden=[]), clients=4, algorithm=algorithm
    )
    harness = ServerHarness(scenario)
    numpy_client = example_client_module().NumpyClient
    data = load_dataset("digits")
    clients = {
        spec.id: numpy_client(
            spec.id,
            data.x[spec.train].numpy(),
            data.y[spec.train].numpy(),
            data.x[spec.test].numpy(),
            data.y[spec.test].numpy(),
            n_classes=data.n_classes,
            seed=spec.id,
        )
        for spec in harness.plan.clients
    }

    def answer(request: Request) -> bytes:
        return clients[request.client].handle(request.data)

    async def go() -> list:
        await harness.join(data={c: clients[c].join_request() for c in clients})
        return [await harness.run_round(r, answer) for r in range(3)]

    outcomes = asyncio.run(go())
    for outcome in outcomes:
        assert outcome.rejections == []
        planned = [c for c in outcome.clients if c.planned]
        assert planned and all(c.trained for c in planned)
        assert all(c.acc is not None for c in outcome.clients)
    kinds = {r.kind for r in harness.requests}
    assert {"train_task", "evaluate_task"} <= kinds
    if algorithm == "cafa":
        assert {"describe_task", "probe_task"} <= kinds
    first = np.mean([c.acc for c in outcomes[0].clients])
    last = np.mean([c.acc for c in outcomes[-1].clients])
    assert last > 0.3 and last >= first - 0.05  # it learns the digits


def test_the_harness_hands_each_request_to_the_test() -> None:
    harness = ServerHarness(small_scenario(clients=3))
    seen: list[tuple[int, str]] = []

    async def answer(request: Request) -> bytes | None:
        seen.append((request.client, request.kind))
        reply = await harness.honest(request)
        assert reply is not None
        if request.client == 1 and request.kind == "train_task":
            env = decode(reply)
            assert isinstance(env.payload, UpdateReply)
            bad = env.payload.model_construct(
                **{**env.payload.__dict__, "delta": np.zeros(3, np.float32)}
            )
            return encode(env.model_copy(update={"payload": bad}))
        if request.client == 2 and request.kind == "train_task":
            return None  # never answers
        return reply

    async def go():  # type: ignore[no-untyped-def]
        await harness.join()
        return await harness.run_round(0, answer)

    outcome = asyncio.run(go())
    assert sorted(seen) == [
        (0, "evaluate_task"),
        (0, "train_task"),
        (1, "evaluate_task"),
        (1, "train_task"),
        (2, "evaluate_task"),
        (2, "train_task"),
    ]
    by_id = {c.id: c for c in outcome.clients}
    assert by_id[0].trained
    assert by_id[1].rejected and "shape" in (by_id[1].reason or "")
    assert by_id[2].failed and "no reply" in (by_id[2].reason or "")
    assert outcome.rejected_messages == 1 and outcome.failed_updates == 1
