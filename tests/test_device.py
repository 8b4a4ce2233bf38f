"""`--device`: the device is named, checked before anything runs, kept out
of messages; CUDA runs start their workers with spawn."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from clusterfed import run
from clusterfed.actors.compute import ComputeSpec, check_device, start_method
from clusterfed.actors.runtimes import ProcessRuntime
from clusterfed.api import make_runtime
from clusterfed.cli import main
from clusterfed.errors import ConfigError
from clusterfed.scenarios import plan_run, with_overrides
from helpers import read_rounds, small_scenario, tiny_model, tiny_trainer

needs_cuda = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU; this machine has none"
)


def _rows(out: Path) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "wall_time"} for r in read_rounds(out)]


@pytest.mark.parametrize("name", ["cpu", "cuda", "cuda:0", "cuda:12", "mps", " CUDA "])
def test_every_documented_device_form_is_accepted(name: str) -> None:
    assert ComputeSpec(device=name).device == name.strip().lower()


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("auto", 'device "auto" does not exist'),
        ("gpu", "unknown device 'gpu'"),
        ("cuda:x", "unknown device 'cuda:x'"),
        ("", "unknown device ''"),
    ],
)
def test_a_bad_device_is_refused_naming_it(name: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        ComputeSpec(device=name)


def test_a_cohort_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="cohort"):
        ComputeSpec(cohort=0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_run_on_cuda_without_cuda_fails_at_validation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code = main(["run", "quickstart", "--device", "cuda", "--out", str(out)])
    assert code == 2
    err = capsys.readouterr().err
    assert "device 'cuda'" in err and "--device cpu" in err
    assert not out.exists()  # refused before anything ran


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_check_device_names_the_missing_gpu() -> None:
    with pytest.raises(ConfigError, match="cuda:1"):
        check_device("cuda:1")
    check_device("cpu")


def test_cuda_runs_spawn_their_workers_and_cpu_runs_fork() -> None:
    assert start_method("cpu") == "fork"
    assert start_method("cuda") == start_method("cuda:1") == "spawn"
    runtime = make_runtime("local", workers=2)
    assert isinstance(runtime, ProcessRuntime) and runtime.start_method == "fork"


def test_gpus_per_host_is_refused_off_ray_and_off_gpu() -> None:
    with pytest.raises(ConfigError, match="gpus_per_host"):
        make_runtime("local", workers=2, gpus_per_host=0.5)
    with pytest.raises(ConfigError, match="gpus_per_host"):
        make_runtime("ray", compute=ComputeSpec(), gpus_per_host=0.5)


def test_ray_hosts_refuse_a_gpu_share_outside_bounds() -> None:
    pytest.importorskip("ray")
    from clusterfed.actors.runtimes.ray import RayRuntime

    assert RayRuntime(gpus_per_host=0.25).gpus_per_host == 0.25
    for bad in (0.0, -1.0, 100.0):
        with pytest.raises(ValueError, match="gpus_per_host"):
            RayRuntime(gpus_per_host=bad)


def test_a_cpu_device_leaves_the_config_and_client_specs_as_before() -> None:
    plain = small_scenario()
    named = with_overrides(plain, ["compute.device=cpu"])
    assert named.model_dump(mode="json") == plain.model_dump(mode="json")
    assert "compute" not in plain.model_dump(mode="json")
    spec = plan_run(named).clients[0]
    assert spec.compute is None and "compute" not in spec.model_dump()


def test_a_device_reaches_every_client_spec() -> None:
    scenario = with_overrides(small_scenario(), ["compute.cohort=4"])
    assert scenario.model_dump(mode="json")["compute"] == {
        "device": "cpu",
        "cohort": 4,
    }
    specs = plan_run(scenario).clients
    assert all(s.compute == ComputeSpec(cohort=4) for s in specs)


def test_spawned_workers_give_the_rows_of_forked_ones(tmp_path: Path) -> None:
    scenario = small_scenario(rounds=2)
    forked = run(scenario, out=tmp_path / "fork", workers=2)
    spawned = run(scenario, out=tmp_path / "spawn", runtime=ProcessRuntime(2, "spawn"))
    assert _rows(forked.out) == _rows(spawned.out)


def test_device_cpu_on_the_command_line_gives_todays_rows(tmp_path: Path) -> None:
    base = ["run", "quickstart", "--rounds", "2", "--clients", "4", "--quiet"]
    assert main([*base, "--out", str(tmp_path / "a")]) == 0
    assert main([*base, "--device", "cpu", "--out", str(tmp_path / "b")]) == 0
    assert _rows(tmp_path / "a") == _rows(tmp_path / "b")
    config = json.loads((tmp_path / "b" / "config.json").read_text())
    assert "compute" not in config["scenario"]


@needs_cuda
def test_a_trainer_on_cuda_trains_near_its_cpu_twin() -> None:
    from clusterfed.models import build_model
    from clusterfed.protocol import TrainConfig

    cpu = tiny_trainer()
    model = build_model("mlp", (1, 4, 4), 2, hidden=[5]).to("cuda")
    gpu = type(cpu)(
        model,
        cpu.x_train.cuda(),
        cpu.y_train.cuda(),
        cpu.x_test.cuda(),
        cpu.y_test.cuda(),
        seed=0,
    )
    config = TrainConfig(lr=0.1, batch_size=4, epochs=2, momentum=0.9, mu=0.1)
    weights = tiny_model(1)
    a, b = cpu.train(weights, config, 3), gpu.train(weights, config, 3)
    assert isinstance(b.delta, np.ndarray) and b.delta.dtype == np.float32
    np.testing.assert_allclose(a.delta, b.delta, rtol=1e-4, atol=1e-5)
    assert gpu.evaluate(weights).accuracy == cpu.evaluate(weights).accuracy


@needs_cuda
def test_a_cuda_run_gives_the_same_rows_inline_and_in_spawned_workers(
    tmp_path: Path,
) -> None:
    scenario = with_overrides(small_scenario(rounds=2), ["compute.device=cuda"])
    inline = run(scenario, out=tmp_path / "inline", workers=1)
    workers = run(scenario, out=tmp_path / "workers", workers=2)
    assert _rows(inline.out) == _rows(workers.out)


def test_device_cpu_cohort_20_equals_todays_run_up_to_rounding(
    tmp_path: Path,
) -> None:
    base = ["run", "quickstart", "--rounds", "2", "--clients", "6", "--quiet"]
    assert main([*base, "--out", str(tmp_path / "a")]) == 0
    cohort = ["--device", "cpu", "--cohort", "20"]
    assert main([*base, *cohort, "--out", str(tmp_path / "b")]) == 0
    for a, b in zip(_rows(tmp_path / "a"), _rows(tmp_path / "b"), strict=True):
        for x, y in zip(a["clients"], b["clients"], strict=True):
            assert x["cluster"] == y["cluster"]
            assert x["train_loss"] == pytest.approx(y["train_loss"], rel=1e-5)
            assert x["loss"] == pytest.approx(y["loss"], rel=1e-4)
    config = json.loads((tmp_path / "b" / "config.json").read_text())
    assert config["scenario"]["compute"] == {"device": "cpu", "cohort": 20}
