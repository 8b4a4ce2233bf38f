"""Clients in other languages over TCP: the JS client (examples/js-client)
and the numpy client (examples/numpy_client.py) beside our reference clients
and simulated ones."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from net_helpers import ROOT, Served, rows, straggler_scenario

from clusterfed import run

JS_CLIENT = ROOT / "examples" / "js-client"


def js_client_problem() -> str | None:
    """Why the JS client cannot run here, or None."""
    if shutil.which("node") is None:
        return "node is not installed"
    if not (JS_CLIENT / "node_modules" / "@msgpack" / "msgpack").is_dir():
        return "@msgpack/msgpack is not installed (npm ci in examples/js-client)"
    return None


needs_node = pytest.mark.skipif(
    js_client_problem() is not None, reason=str(js_client_problem())
)


def js_client(served: Served, client_id: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["node", str(JS_CLIENT / "client.js"), "--connect", served.address,
         "--id", str(client_id), "--token", served.tokens[client_id]],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def numpy_client(served: Served, client_id: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(ROOT / "examples" / "numpy_client.py"), "--connect",
         served.address, "--id", str(client_id), "--token", served.tokens[client_id]],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def finished(*clients: subprocess.Popen[str]) -> None:
    for client in clients:
        out, err = client.communicate(timeout=60)
        assert client.returncode == 0, err
        assert "shutdown" in out, out


def differences(found: Any, expected: Any, where: str = "") -> set[str]:
    """The paths (`clients.acc`) where two rows differ, list indices dropped."""
    if isinstance(found, dict) and isinstance(expected, dict):
        paths: set[str] = set()
        for key in found.keys() | expected.keys():
            paths |= differences(found.get(key), expected.get(key), f"{where}.{key}")
        return paths
    if isinstance(found, list) and isinstance(expected, list):
        if len(found) != len(expected):
            return {where}
        return set().union(
            *(differences(a, b, where) for a, b in zip(found, expected, strict=True))
        )
    return set() if found == expected else {where.lstrip(".")}


SOFTMAX = ("--set", "model.hidden=[]")  # the JS client trains softmax regression


@needs_node
def test_python_and_js_clients_among_simulated_ones_finish_with_the_same_timing(
    tmp_path: Path,
) -> None:
    # Clients 0 and 3 are our reference client (3 the straggler, late in
    # rounds 0 and 1), client 7 the JS client; the other 17 are simulated.
    scenario = straggler_scenario(tmp_path)
    served = Served(scenario, tmp_path / "served", "--external", "0,3,7", *SOFTMAX)
    clients = [served.client(0), served.client(3), js_client(served, 7)]
    served.wait()
    finished(*clients)
    simulated = run(
        scenario, out=tmp_path / "simulated", workers=2, overrides=["model.hidden=[]"]
    )
    found, expected = rows(tmp_path / "served"), rows(simulated.out)
    assert [r["round"] for r in found] == [0, 1, 2]
    late = [[c["id"] for c in row["clients"] if c["late"]] for row in found]
    assert late == [[3], [3], []]
    assert all(not c["failed"] for row in found for c in row["clients"])
    # The JS client trains its own way (its own shuffling, float64 sums), so
    # its update and training loss differ from the simulated client 7's,
    # every model from round 0's aggregation on, and with them every
    # client's accuracy and loss, and training losses from round 1. What the
    # protocol fixes is the same: membership, groups, clusters, timing
    # (samples_seen and message sizes: the simulated time, who was late),
    # bytes up and down.
    pairs = zip(found, expected, strict=True)
    changed = set().union(*(differences(a, b) for a, b in pairs))
    assert changed == {"wall_time", "clients.acc", "clients.loss", "clients.train_loss"}
    first = zip(found[0]["clients"], expected[0]["clients"], strict=True)
    assert [a["id"] for a, b in first if a["train_loss"] != b["train_loss"]] == [7]


def test_the_numpy_client_connects_and_finishes_a_run(tmp_path: Path) -> None:
    served = Served(
        "quickstart", tmp_path / "served", "--rounds", "2", "--external", "5", *SOFTMAX
    )
    client = numpy_client(served, 5)
    out = served.wait()
    finished(client)
    assert "failed 0" in out and "rejected 0" in out
