"""A population on a two-node Ray cluster started on this machine, against
the same scenario in the local runtime (issue 40).

Starts a head (`ray start --head`) and a second node (`ray start --address`,
its own CPU and a resource of its own) on this machine, drives
`cross-device` with N registered and K a round over Ray with host actors of
`--per-host` clients, prints on which node each host ran, then runs the same
scenario locally and says whether every row but `wall_time` is the same. The
cluster is stopped at the end (`ray stop` on this session's temp folder).

    python bench/ray_nodes.py --registered 10000 --per-round 100 --rounds 3

A benchmark, not a test. Nothing else on the machine should call
`ray.init()` meanwhile: without an address it joins the newest cluster
started by `ray start`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import ray

from clusterfed.api import make_runtime
from clusterfed.federation import Federation
from clusterfed.scenarios import BUILTIN, with_overrides
from clusterfed.summary import mean_std

RAY = str(Path(sys.executable).parent / "ray")


def start_cluster(port: int, temp: str) -> str:
    # A throwaway cluster on loopback: no token to hand between its nodes.
    os.environ["RAY_AUTH_MODE"] = "disabled"
    address = f"127.0.0.1:{port}"
    common = ["--num-cpus", "1", "--disable-usage-stats"]
    subprocess.run(
        [RAY, "start", "--head", "--port", str(port), "--temp-dir", temp]
        + ["--include-dashboard", "false", *common],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [RAY, "start", "--address", address, '--resources={"second_node": 1}'] + common,
        check=True,
        capture_output=True,
    )
    return address


async def run_rows(scenario: Any, runtime: Any, out: Path) -> tuple[list[dict], list]:
    """The run's rows, and per round the node of every host actor (Ray)."""
    federation = Federation(scenario, runtime, out, config={"scenario": scenario.name})
    nodes = []
    try:
        await federation.start()
        for r in range(scenario.rounds):
            await federation.step(r)
            hosts = getattr(runtime, "hosts", None)
            if hosts is not None:
                nodes.append(ray.get([h.node.remote() for h in hosts]))
        _, rows = await federation.finish()
    finally:
        await federation.close()
    return rows, nodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--registered", type=int, default=10000)
    parser.add_argument("--per-round", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--per-host", type=int, default=25)
    parser.add_argument("--port", type=int, default=6391)
    args = parser.parse_args()
    scenario = with_overrides(
        BUILTIN["cross-device"](),
        [
            f"population.registered={args.registered}",
            f"population.per_round={args.per_round}",
        ],
        rounds=args.rounds,
    )
    temp = tempfile.mkdtemp(prefix="rtn", dir="/tmp")
    try:
        address = start_cluster(args.port, temp)
        ray.init(address=address, log_to_driver=False)
        alive = [n for n in ray.nodes() if n["Alive"]]
        print(f"cluster: {len(alive)} nodes, {ray.cluster_resources().get('CPU')} CPUs")
        with tempfile.TemporaryDirectory() as out:
            runtime = make_runtime(
                "ray", address=address, clients_per_host=args.per_host
            )
            on_ray, nodes = asyncio.run(run_rows(scenario, runtime, Path(out) / "ray"))
            ray.shutdown()
            local = make_runtime("local", workers=2)
            here, _ = asyncio.run(run_rows(scenario, local, Path(out) / "local"))
    finally:
        subprocess.run([RAY, "stop", "--force"], capture_output=True)
    names = {}
    for r, hosts in enumerate(nodes):
        count = Counter(names.setdefault(n, f"node{len(names)}") for n in hosts)
        print(f"round {r}: {len(hosts)} hosts: {dict(sorted(count.items()))}")

    def same(rows: list[dict]) -> list[dict]:
        return [{k: v for k, v in row.items() if k != "wall_time"} for row in rows]

    print(f"rows over Ray (two nodes) == rows local: {same(on_ray) == same(here)}")
    accs = [mean_std(rows[-1]) for rows in (on_ray, here)]
    print(f"final mean accuracy: ray {accs[0]}, local {accs[1]}")


if __name__ == "__main__":
    main()
