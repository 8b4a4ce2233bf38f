"""The Ray runtime: same results as the local one, host faults, and cleanup.

One local Ray of 2 CPUs serves the whole module; it is shut down at the end
and the test checks that no Ray process is left behind.
"""

from __future__ import annotations

import os
import signal
import warnings
from pathlib import Path
from typing import Any

import psutil
import pytest

import clusterfed
from clusterfed.actors.runtimes.base import KEEP_AT_LEAST
from clusterfed.actors.runtimes.ray import RayRuntime
from clusterfed.checkpoint import read_checkpoint
from clusterfed.scenarios import Join, Scenario
from clusterfed.scenarios.events import Leave
from clusterfed.scenarios.spec import DPSpec, ModelSpec
from helpers import read_rounds, small_scenario, without_wall_time

ray = pytest.importorskip("ray")

RAY_PROCESSES = ("raylet", "gcs_server", "ray::", "default_worker", "plasma_store")


def _ray_processes() -> list[str]:
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            line = " ".join(child.cmdline())
        except psutil.Error:
            continue
        if any(name in line for name in RAY_PROCESSES):
            found.append(line[:80])
    return found


@pytest.fixture(scope="module", autouse=True)
def local_ray() -> Any:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()
    leftovers = []
    for _ in range(50):  # Ray's processes take a moment to exit
        leftovers = _ray_processes()
        if not leftovers:
            break
        psutil.wait_procs(psutil.Process().children(recursive=True), timeout=0.2)
    assert not leftovers, f"Ray processes left behind: {leftovers}"


def _accuracies(rows: list[dict[str, Any]]) -> list[list[float | None]]:
    return [[c["acc"] for c in row["clients"]] for row in rows]


def test_local_and_ray_give_the_same_per_client_accuracies(tmp_path: Path) -> None:
    # A join needs a host actor created mid-run, beside hosts already placed.
    scenario = small_scenario(rounds=3, events=[Join(start=1)])
    local = clusterfed.run(scenario, out=tmp_path / "local")
    on_ray = clusterfed.run(scenario, out=tmp_path / "ray", runtime="ray")
    assert _accuracies(local.rows) == _accuracies(on_ray.rows)
    assert [r["bytes_up"] for r in local.rows] == [r["bytes_up"] for r in on_ray.rows]
    newcomer = [c for r in on_ray.rows for c in r["clients"] if c["id"] == 6]
    assert len(newcomer) == 2 and all(c["trained"] for c in newcomer)


def test_a_model_sent_through_the_object_store_gives_the_same_results(
    tmp_path: Path,
) -> None:
    # Digits' 64 inputs × 256 hidden float32 weights alone fill KEEP_AT_LEAST:
    # the model goes into Ray's object store once a phase, and each host
    # reads it from there.
    scenario = small_scenario(rounds=2, model=ModelSpec(name="mlp", hidden=[256]))
    assert KEEP_AT_LEAST <= 64 * 256 * 4
    local = clusterfed.run(scenario, out=tmp_path / "local")
    on_ray = clusterfed.run(scenario, out=tmp_path / "ray", runtime="ray")
    assert _accuracies(local.rows) == _accuracies(on_ray.rows)
    assert [r["bytes_down"] for r in local.rows] == [
        r["bytes_down"] for r in on_ray.rows
    ]


def test_one_actor_per_client_gives_the_same_results(tmp_path: Path) -> None:
    scenario = small_scenario(rounds=2, events=[Join(start=1)])
    packed = clusterfed.run(scenario, out=tmp_path / "a", runtime="ray")
    runtime = RayRuntime(clients_per_host=1)
    single = clusterfed.run(scenario, out=tmp_path / "b", runtime=runtime)
    assert _accuracies(packed.rows) == _accuracies(single.rows)


class HostKiller:
    """Kills the first host actor after round `after` (an `on_round` hook:
    the federation runs in its own Ray actor; the driver only sees rows)."""

    def __init__(self, after: int, restart: bool) -> None:
        self.after = after
        self.restart = restart
        self.victims: list[int] = []

    def __call__(self, row: dict[str, Any]) -> None:
        if row["round"] != self.after:
            return
        (name,) = [
            n
            for n in ray.util.list_named_actors()
            if n.startswith("clusterfed-host-") and n.endswith("-0")
        ]
        host = ray.get_actor(name)
        self.victims = ray.get(host.clients.remote())
        ray.kill(host, no_restart=not self.restart)


def test_a_killed_host_fails_its_clients_and_the_run_finishes(tmp_path: Path) -> None:
    killer = HostKiller(after=1, restart=False)
    result = clusterfed.run(
        small_scenario(rounds=4),
        out=tmp_path,
        runtime=RayRuntime(clients_per_host=3),
        on_round=killer,
    )
    victims = killer.victims
    assert len(victims) == 3
    for row in result.rows:
        failed = sorted(c["id"] for c in row["clients"] if c["failed"])
        assert failed == (victims if row["round"] >= 2 else [])
        assert all(
            c["acc"] is not None for c in row["clients"] if c["id"] not in victims
        )
    assert result.summary["failed_updates"] == 3 * 2
    assert result.summary["rounds"] == 4


def test_a_restarted_host_brings_its_clients_back(tmp_path: Path) -> None:
    killer = HostKiller(after=1, restart=True)
    result = clusterfed.run(
        small_scenario(rounds=4),
        out=tmp_path,
        runtime=RayRuntime(clients_per_host=3, max_restarts=1),
        on_round=killer,
    )
    victims = killer.victims
    assert len(victims) == 3
    # The clients miss the round their host died in and are back the next.
    failed = [sorted(c["id"] for c in r["clients"] if c["failed"]) for r in result.rows]
    assert failed == [[], [], victims, []]
    assert all(c["acc"] is not None for c in result.rows[-1]["clients"])
    assert result.summary["failed_updates"] == 3


def test_dp_runs_on_ray(tmp_path: Path) -> None:
    from clusterfed.scenarios import DPSpec

    scenario = small_scenario(rounds=2, dp=DPSpec(epsilon=5.0))
    local = clusterfed.run(scenario, out=tmp_path / "local")
    on_ray = clusterfed.run(scenario, out=tmp_path / "ray", runtime="ray")
    assert _accuracies(local.rows) == _accuracies(on_ray.rows)
    # both rounds trained: the budget is spent to Opacus' tolerance (0.01)
    assert 5.0 - 0.01 <= on_ray.summary["epsilon_max"] <= 5.0
    assert on_ray.summary["epsilon_max"] == local.summary["epsilon_max"]


def test_async_mode_gives_the_same_rows_on_ray(tmp_path: Path) -> None:
    from clusterfed.actors import DeviceProfile

    scenario = small_scenario(
        algorithm="fedasync",
        mode="async",
        rounds=6,
        clients=4,
        devices={0: DeviceProfile(samples_per_s=100.0)},
    )
    local = clusterfed.run(scenario, out=tmp_path / "local")
    on_ray = clusterfed.run(scenario, out=tmp_path / "ray", runtime="ray")

    def timeless(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in r.items() if k != "wall_time"} for r in rows]

    assert timeless(local.rows) == timeless(on_ray.rows)
    assert [r["strategy"]["version"] for r in on_ray.rows] == list(range(1, 7))


def test_clustered_async_mode_with_joins_and_drift_gives_the_same_rows_on_ray(
    tmp_path: Path,
) -> None:
    from clusterfed.actors import DeviceProfile
    from clusterfed.scenarios import Drift, RotationTransform

    scenario = small_scenario(
        algorithm="dcfl",
        mode="async",
        rounds=8,
        transform=RotationTransform(angles=[0.0, 180.0]),
        events=[Join(start=2), Drift(start=3, target="random", to_group="other")],
        devices={0: DeviceProfile(samples_per_s=150.0)},
        algorithm_params={"dcfl": {"window": 4, "buffer_size": 2}},
    )
    local = clusterfed.run(scenario, out=tmp_path / "local")
    on_ray = clusterfed.run(scenario, out=tmp_path / "ray", runtime="ray")

    def timeless(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in r.items() if k != "wall_time"} for r in rows]

    assert timeless(local.rows) == timeless(on_ray.rows)
    assert any(r["strategy"].get("reclustered") for r in on_ray.rows)


@pytest.mark.parametrize(
    "attack",
    [
        ["faulty=alie", "aggregator=median", "backdoor_probe=on"],
        ["faulty=backdoor"],
    ],
    ids=["alie-probed", "backdoor"],
)
def test_byzantine_attacks_give_the_same_rows_on_ray(
    tmp_path: Path, attack: list[str]
) -> None:
    """The colluding attack is forged in the simulator from replies that come
    from other processes on Ray; the backdoor poisons data inside the actor;
    the probe stamps the test images in the server. None of it may depend
    on where the actors run."""
    from clusterfed.actors.adversary import AttackWarning
    from clusterfed.scenarios import load_scenario, with_overrides

    scenario = with_overrides(load_scenario("byzantine"), ["rounds=2", *attack])
    local = clusterfed.run(scenario, out=tmp_path / "local")
    with warnings.catch_warnings():
        warnings.simplefilter("error", AttackWarning)  # forged, not left honest
        on_ray = clusterfed.run(scenario, out=tmp_path / "ray", runtime="ray")
    assert without_wall_time(local.rows) == without_wall_time(on_ray.rows)
    rates = [row["backdoor_success"] for row in on_ray.rows]
    assert len(rates) == 2 and all(0.0 <= r <= 1.0 for r in rates)


def test_cohort_runs_give_the_same_rows_on_ray_and_locally(tmp_path: Path) -> None:
    from clusterfed.scenarios import with_overrides

    scenario = with_overrides(small_scenario(rounds=2), ["compute.cohort=4"])
    local = clusterfed.run(scenario, out=tmp_path / "local", workers=2)
    on_ray = clusterfed.run(scenario, out=tmp_path / "ray", runtime="ray")
    assert _accuracies(local.rows) == _accuracies(on_ray.rows)
    assert [[c["loss"] for c in r["clients"]] for r in local.rows] == [
        [c["loss"] for c in r["clients"]] for r in on_ray.rows
    ]


def _population(registered: int, **changes: Any) -> Scenario:
    """A synthetic population of `registered` clients, 6 of them a round."""
    return Scenario.model_validate(
        {
            "name": "pop",
            "dataset": {"name": "synthetic"},
            "model": {"name": "mlp", "hidden": []},
            "train": {"epochs": 1, "batch_size": 10, "lr": 0.01},
            "population": {
                "registered": registered,
                "per_round": 6,
                "max_samples": 100,
            },
            **changes,
        }
    )


def test_a_population_reuses_its_hosts_and_gives_the_local_rows(
    tmp_path: Path,
) -> None:
    # Each round's sampled clients join, then leave: the next round's fill
    # the hosts they left instead of starting new ones.
    scenario = _population(registered=1000, rounds=3)
    hosts: list[int] = []

    def count(row: dict[str, Any]) -> None:
        named = ray.util.list_named_actors(all_namespaces=True)
        hosts.append(sum(a["name"].startswith("clusterfed-host-") for a in named))

    local = clusterfed.run(scenario, out=tmp_path / "local", workers=2)
    remote = clusterfed.run(
        scenario, out=tmp_path / "ray", runtime="ray", on_round=count
    )
    strip = [{k: v for k, v in r.items() if k != "wall_time"} for r in local.rows]
    assert strip == [
        {k: v for k, v in r.items() if k != "wall_time"} for r in remote.rows
    ]
    # As many hosts every round (the old placement added hosts each round).
    assert hosts == [hosts[0]] * 3 and hosts[0] <= 6


def test_ctrl_c_on_ray_checkpoints_the_round_in_flight_and_resumes(
    tmp_path: Path,
) -> None:
    # The federation runs in a Ray actor; Ctrl-C reaches the driver, which
    # asks the actor for the checkpoint (RemoteFederation.checkpoint).
    scenario = small_scenario(rounds=5)

    def press_ctrl_c(row: dict[str, Any]) -> None:
        # Pressed after round 2 is recorded: the driver takes it while
        # round 3 runs, so that round finishes and is kept.
        if row["round"] == 1:
            os.kill(os.getpid(), signal.SIGINT)

    out = tmp_path / "ray"
    with pytest.raises(clusterfed.RunInterrupted) as stopped:
        clusterfed.run(scenario, out=out, runtime="ray", on_round=press_ctrl_c)
    assert stopped.value.checkpoint and stopped.value.rounds_done == 3
    assert read_checkpoint(out).rounds_done == 3
    resumed = clusterfed.resume(out)
    assert resumed.summary["rounds"] == 5
    whole = clusterfed.run(scenario, out=tmp_path / "local")
    assert without_wall_time(read_rounds(out)) == without_wall_time(whole.rows)


def test_a_population_checkpoint_taken_on_ray_resumes_to_the_local_rows(
    tmp_path: Path,
) -> None:
    scenario = _population(
        registered=500,
        rounds=4,
        algorithm="ifca",
        algorithm_params={"ifca": {"clusters": 2}},
        transform={"kind": "label_permutation", "groups": 2},
    )
    out = tmp_path / "ray"
    clusterfed.run(scenario, out=out, runtime="ray", checkpoint_every=2)
    kept = read_checkpoint(out).federation["population"]
    assert kept is not None and int(kept["last_round"].max()) == 1
    # As if it had been killed while writing round 3's row:
    (out / "summary.json").unlink()
    with (out / "rounds.jsonl").open("a") as stream:
        stream.write('{"round": 2, "sim_ti')
    clusterfed.resume(out)
    whole = clusterfed.run(scenario, out=tmp_path / "local", workers=2)
    assert without_wall_time(read_rounds(out)) == without_wall_time(whole.rows)


def test_a_dp_run_resumed_on_ray_keeps_a_leavers_privacy(tmp_path: Path) -> None:
    # The checkpoint is taken inside the Ray actor that runs the federation.
    scenario = small_scenario(
        rounds=5, dp=DPSpec(epsilon=10), events=[Leave(start=1, target=0)]
    )
    out = tmp_path / "ray"
    clusterfed.run(scenario, out=out, runtime="ray", checkpoint_every=2)
    (out / "summary.json").unlink()
    resumed = clusterfed.resume(out)
    whole = clusterfed.run(scenario, out=tmp_path / "local")
    assert "0" in whole.summary["privacy"]["clients"]
    resumed.summary.pop("wall_s")
    whole.summary.pop("wall_s")
    assert resumed.summary == whole.summary
