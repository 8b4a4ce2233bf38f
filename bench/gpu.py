"""Per-round wall time on CPU and on an accelerator, cohort training off and on.

    python bench/gpu.py                       # every workload, CPU and cuda
    python bench/gpu.py --rounds 3 --device cuda:1 --cohort 64
    python bench/gpu.py --only quickstart --devices cpu

Runs each workload for `--rounds` rounds on each device, once with clients
trained one at a time and once with `--cohort N`, and prints round 0 (it
builds every client's trainer and, on a GPU, starts CUDA) and the median of
the later rounds, from rounds.jsonl's wall time, with the peak device memory
(`torch.cuda.max_memory_allocated`, on a CUDA device). Then it projects the
paper-scale page (the runs of bench/paper_scale_cost.py, 3 seeds) from the
dcfl-fmnist rows: every run of the page costs per round what dcfl-fmnist
does on that device with DP where the run has DP, without where it has none
(the other Fashion-MNIST scenarios have about as many clients and samples;
bench/paper_scale_cost.py measures each run on its own, on CPU).

CPU runs use the local runtime's default workers (one per core), as a user's
run would. Device runs use one worker (`workers=1`: every client in this
process), so one process holds the GPU, a host holds every client and a
cohort can take a whole round, and the peak memory is this process's. A
device this machine lacks is skipped with a message. Needs
dataset-fashion-mnist. Prints figures; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

import clusterfed
from clusterfed.actors.compute import check_device
from clusterfed.errors import ConfigError
from clusterfed.scenarios import load_scenario, with_overrides
from clusterfed.scenarios.papers_fmnist import WITHOUT_DP

sys.path.insert(0, str(Path(__file__).resolve().parent))
from paper_scale_cost import RUNS  # noqa: E402

# name → (scenario, overrides)
WORKLOADS: dict[str, tuple[str, tuple[str, ...]]] = {
    "quickstart": ("quickstart", ()),
    "dcfl-fmnist": ("dcfl-fmnist", WITHOUT_DP),
    "dcfl-fmnist-dp": ("dcfl-fmnist", ()),
    "fmnist-1000": (
        "quickstart",
        ("dataset.name=fashion_mnist", "clients=1000", "partition.min_samples=4"),
    ),
}


@dataclass(frozen=True)
class Timing:
    workload: str
    device: str
    cohort: int
    first_s: float
    later_s: float
    peak_mib: float | None


def measure(
    workload: str, device: str, cohort: int, rounds: int, workers: int | None
) -> Timing:
    scenario, sets = WORKLOADS[workload]
    overrides = [*sets, f"compute.device={device}", f"compute.cohort={cohort}"]
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats(device)
    with tempfile.TemporaryDirectory() as tmp:
        result = clusterfed.run(
            scenario,
            rounds=rounds,
            overrides=overrides,
            out=Path(tmp) / "run",
            workers=workers,
        )
    walls = [r["wall_time"] for r in result.rows]
    steps = [b - a for a, b in zip(walls, walls[1:], strict=False)]
    peak = None
    if device.startswith("cuda"):
        peak = torch.cuda.max_memory_allocated(device) / 2**20
    return Timing(
        workload,
        device,
        cohort,
        walls[0],
        statistics.median(steps) if steps else walls[0],
        peak,
    )


def project_page(timings: list[Timing], device: str, cohort: int) -> float | None:
    """The paper-scale page's seconds (3 seeds) on `device` with `cohort`,
    from its dcfl-fmnist rows; None without both rows."""
    found = {
        t.workload: t for t in timings if t.device == device and t.cohort == cohort
    }
    if "dcfl-fmnist" not in found or "dcfl-fmnist-dp" not in found:
        return None
    total = 0.0
    for scenario, _algorithm, sets, share in RUNS:
        resolved = with_overrides(load_scenario(scenario), list(sets))
        row = found["dcfl-fmnist-dp" if resolved.dp is not None else "dcfl-fmnist"]
        total += (row.first_s + row.later_s * (resolved.rounds - 1)) * 3 * share
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cuda", help="the accelerator (cuda)")
    parser.add_argument(
        "--devices", nargs="*", help="devices to run (default: cpu and --device)"
    )
    parser.add_argument("--cohort", type=int, default=64, help="cohort size when on")
    parser.add_argument("--only", nargs="*", default=[], help="these workloads")
    args = parser.parse_args()
    devices = args.devices or ["cpu", args.device]
    workloads = [w for w in WORKLOADS if not args.only or w in args.only]
    timings: list[Timing] = []
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "none"
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, GPU {gpu}")
    print(
        f"{'workload':16} {'device':7} {'cohort':>6} {'round0 s':>9}"
        f" {'later s':>8} {'peak MiB':>9}"
    )
    for device in devices:
        try:
            check_device(device)
        except ConfigError as exc:
            print(f"{device}: skipped ({exc})")
            continue
        workers = None if device == "cpu" else 1
        for workload in workloads:
            for cohort in (1, args.cohort):
                start = time.perf_counter()
                t = measure(workload, device, cohort, args.rounds, workers)
                timings.append(t)
                peak = "-" if t.peak_mib is None else f"{t.peak_mib:.0f}"
                print(
                    f"{workload:16} {device:7} {cohort:6} {t.first_s:9.2f}"
                    f" {t.later_s:8.3f} {peak:>9}"
                    f"   ({time.perf_counter() - start:.0f} s in all)",
                    flush=True,
                )
    for device in devices:
        for cohort in (1, args.cohort):
            page = project_page(timings, device, cohort)
            if page is not None:
                print(
                    f"projected paper-scale page on {device}, cohort {cohort}:"
                    f" {page / 3600:.1f} h ({page / 60:.0f} min)"
                )


if __name__ == "__main__":
    main()
