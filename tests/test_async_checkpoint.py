"""Checkpoints in asynchronous mode: the event queue and the tasks in flight
are saved, and a resumed run writes the rows of an uninterrupted one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_checkpoint import assert_resumes_to, kill_after_checkpoint

import clusterfed
from clusterfed.actors import DeviceProfile, InlineRuntime
from clusterfed.checkpoint import read_checkpoint
from clusterfed.errors import ConfigError
from clusterfed.federation import Federation
from clusterfed.scenarios import Drift, Join, RotationTransform, load_scenario
from clusterfed.scenarios.events import Leave
from clusterfed.scenarios.spec import DPSpec
from helpers import read_rounds, small_scenario, without_wall_time

ASYNC = """\
name = "killed-async"
clients = 6
rounds = 8
seed = 2
algorithm = "dcfl"
mode = "async"

[model]
name = "mlp"
hidden = [32]

[partition]
kind = "dirichlet"
alpha = 1.0

[transform]
kind = "rotation"
angles = [0, 180]

[algorithm_params.dcfl]
window = 4
buffer_size = 2

[availability]
kind = "diurnal"
period_s = 3.0
online_fraction = 0.7

[dp]
epsilon = 10

[devices.0]
samples_per_s = 150

[[events]]
kind = "join"
start = 1
every = 3

[[events]]
kind = "drift"
start = 2
every = 3
target = "random"
to_group = "other"
"""


def test_a_killed_async_run_resumes_to_the_rows_of_an_uninterrupted_one(
    tmp_path: Path,
) -> None:
    scenario = tmp_path / "scenario.toml"
    scenario.write_text(ASYNC)
    killed = tmp_path / "killed"
    written = kill_after_checkpoint(scenario, killed, rounds_done=2)
    assert 3 <= written < load_scenario(scenario).rounds
    checkpoint = read_checkpoint(killed)
    driver = checkpoint.federation["driver"]
    assert driver is not None and driver["heap"], "tasks in flight are saved"

    resumed = clusterfed.resume(killed, workers=2)
    whole = clusterfed.run(scenario, out=tmp_path / "whole", workers=2)
    assert without_wall_time(read_rounds(killed)) == without_wall_time(whole.rows)
    assert without_wall_time(resumed.rows) == without_wall_time(whole.rows)
    summary = json.loads((killed / "summary.json").read_text())
    summary.pop("wall_s")
    whole.summary.pop("wall_s")
    assert summary == whole.summary
    assert whole.summary["staleness"]["max"] >= 1


def test_an_async_run_with_a_trace_resumes_in_one_process(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    # Client 3 is offline until t = 1.5: a wake-up waits in the queue.
    trace.write_text("client,online_from,online_to\n3,1.5,inf\n2,0,0.8\n")
    scenario = small_scenario(
        algorithm="ifca",
        mode="async",
        rounds=7,
        transform=RotationTransform(angles=[0.0, 180.0]),
        events=[Join(start=2), Drift(start=3, target=1, to_group=1)],
        devices={0: DeviceProfile(samples_per_s=150.0)},
        availability={"kind": "trace", "path": str(trace)},
        algorithm_params={"ifca": {"clusters": 2, "buffer_size": 2}},
    )
    out = tmp_path / "run"
    first = clusterfed.run(scenario, out=out, workers=1, checkpoint_every=2)
    checkpoint = read_checkpoint(out)
    assert checkpoint.rounds_done == 6
    driver = checkpoint.federation["driver"]
    assert driver is not None and driver["version"] == 6 and driver["heap"]
    # As if killed while writing row 6:
    (out / "summary.json").unlink()
    with (out / "rounds.jsonl").open("a") as stream:
        stream.write('{"round": 6, "sim_ti')
    clusterfed.resume(out, workers=1)
    assert without_wall_time(read_rounds(out)) == without_wall_time(first.rows)


def test_a_checkpoint_of_another_mode_is_refused(tmp_path: Path) -> None:
    # IFCA has both modes (fedasync has no synchronous one).
    scenario = small_scenario(algorithm="ifca", mode="async", rounds=3)
    clusterfed.run(scenario, out=tmp_path, workers=1, checkpoint_every=1)
    snapshot = read_checkpoint(tmp_path).federation
    sync = Federation(
        small_scenario(algorithm="ifca", rounds=3),
        InlineRuntime(),
        tmp_path / "other",
        config={"scenario": {}},
    )
    with pytest.raises(
        ConfigError, match="taken in async mode, this run's mode is sync"
    ):
        sync.restore(snapshot)


def test_a_resumed_async_runs_summary_keeps_a_leavers_privacy(tmp_path: Path) -> None:
    """Client 0 leaves before the checkpoint: the resumed async run's summary
    still lists its DP plan, as the run that never stopped does."""
    scenario = small_scenario(
        algorithm="ifca",
        mode="async",
        rounds=5,
        dp=DPSpec(epsilon=10),
        events=[Leave(start=1, target=0)],
        algorithm_params={"ifca": {"clusters": 2, "buffer_size": 2}},
    )
    first = clusterfed.run(scenario, out=tmp_path, workers=1, checkpoint_every=2)
    assert read_checkpoint(tmp_path).rounds_done == 4
    assert "0" in first.summary["privacy"]["clients"]
    assert_resumes_to(first, tmp_path)
