"""What local DP costs, in one run: one DP-SGD step of the Fashion-MNIST MLP
at batch 16 against a plain step plus its noise draw (bench/dp_steps.py),
time per round of a scenario with DP against the same run without it, and
one client's DP round through book-keeping (what clusterfed does), Opacus'
fast gradient clipping and Opacus' per-sample hooks (what it did before).

    python bench/dp.py                                            # digits
    python bench/dp.py --scenario dcfl-fmnist --rounds 4 --set train.epochs=1
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from resource import RUSAGE_CHILDREN, RUSAGE_SELF, getrusage

import numpy as np
import torch
from dp_steps import OPACUS_NOISE, make_private, report, step_costs
from torch.utils.data import DataLoader

import clusterfed
from clusterfed.actors import Client
from clusterfed.actors.privacy import quiet_opacus
from clusterfed.actors.trainer import DP_NOISE_KEY, DP_SAMPLING_KEY, LocalTrainer
from clusterfed.models import get_flat
from clusterfed.protocol import TrainConfig
from clusterfed.scenarios import load_scenario, plan_run, with_overrides
from clusterfed.seeding import derive_seed


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and its finished workers."""
    own, workers = (getrusage(w) for w in (RUSAGE_SELF, RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + workers.ru_utime + workers.ru_stime


def per_round(out: Path) -> list[float]:
    """Wall seconds of each round after the first (which also starts workers)."""
    lines = (out / "rounds.jsonl").read_text().splitlines()
    walls = [json.loads(line)["wall_time"] for line in lines]
    return [b - a for a, b in zip(walls, walls[1:], strict=False)]


def opacus_round(
    trainer: LocalTrainer,
    weights: np.ndarray,
    config: TrainConfig,
    round: int,
    mode: str = "hooks",
) -> None:
    """One DP round through Opacus' make_private, `grad_sample_mode` =
    `mode` ("hooks": per-sample gradients; "ghost": fast gradient
    clipping)."""
    privacy = trainer.privacy
    assert privacy is not None
    _, _, optimizer = trainer._start_round(weights, config, ())
    seed = derive_seed(trainer.seed, round, DP_SAMPLING_KEY)
    loader = DataLoader(
        trainer._train_set,
        batch_size=config.batch_size,
        generator=torch.Generator().manual_seed(seed),
    )
    noise = torch.Generator().manual_seed(
        derive_seed(trainer.seed, round, DP_NOISE_KEY)
    )
    with quiet_opacus():
        module, dp_optimizer, criterion, batches = make_private(
            privacy.engine,
            mode,
            module=trainer.model,
            optimizer=optimizer,
            data_loader=loader,
            noise_multiplier=privacy.noise_multiplier,
            max_grad_norm=privacy.max_grad_norm,
            noise_generator=noise,
        )
        for _ in range(config.epochs):
            for x, y in batches:
                dp_optimizer.zero_grad(set_to_none=True)
                criterion(module(x), y).backward()
                dp_optimizer.step()
    module.to_standard_module()
    get_flat(trainer.model)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="dcfl-dynamic")
    parser.add_argument("--rounds", type=int, default=3, help="at least 2")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--repeats", type=int, default=300, help="steps timed")
    parser.add_argument(
        "--only",
        choices=("steps", "rounds", "client"),
        help="one part of the three",
    )
    args = parser.parse_args()
    if args.only in (None, "steps"):
        steps_part(args.repeats)
    if args.only in (None, "rounds"):
        rounds_part(args.scenario, args.rounds, args.overrides)
    if args.only in (None, "client"):
        client_rounds(args.scenario, args.overrides)


def steps_part(repeats: int) -> None:
    """A DP-SGD step against a plain step plus its noise draw (dp_steps)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as a worker process trains
    steps = step_costs(16, repeats)
    report(steps, 16)
    plain, noise = steps["plain SGD"], steps[OPACUS_NOISE]
    ours = steps["book-keeping (clusterfed)"]
    print(
        f"DP step / (plain step + noise draw), batch 16: {ours / (plain + noise):.2f}"
        f" (book-keeping; Opacus fast gradient clipping:"
        f" {steps['Opacus fast gradient clipping (ghost)'] / (plain + noise):.2f})"
    )
    torch.set_num_threads(threads)


def rounds_part(scenario: str, rounds: int, overrides: list[str]) -> None:
    """A round of `scenario` with DP against one without, wall and CPU."""
    with tempfile.TemporaryDirectory() as tmp:
        times, cpu = {}, {}
        for label, extra in (("with DP", []), ("without DP", ["dp=off"])):
            # CPU seconds of the rounds after the first: a run of all the
            # rounds less a run of one (this process and its workers).
            spent = []
            for n in (1, rounds):
                out = Path(tmp) / f"{label.replace(' ', '-')}-{n}"
                before = cpu_seconds()
                clusterfed.run(
                    scenario, out=out, rounds=n, overrides=[*overrides, *extra]
                )
                spent.append(cpu_seconds() - before)
            times[label] = per_round(out)
            cpu[label] = (spent[1] - spent[0]) / (rounds - 1)
    for label, walls in times.items():
        shown = ", ".join(f"{w:.2f}" for w in walls)
        print(
            f"{label:<11} wall s/round: {shown}  median"
            f" {statistics.median(walls):.2f}; CPU s/round {cpu[label]:.2f}"
        )
    ratio = statistics.median(times["with DP"]) / statistics.median(times["without DP"])
    print(
        f"{scenario} round with/without DP, rounds 2+: wall (medians)"
        f" {ratio:.2f}, CPU {cpu['with DP'] / cpu['without DP']:.2f}"
    )


def client_rounds(name: str, overrides: list[str]) -> None:
    """One client's DP round by each clipping path, medians of 3."""
    torch.set_num_threads(1)
    scenario = with_overrides(load_scenario(name), overrides)
    plan = plan_run(scenario)
    config = plan.train_config
    for label, run in (
        ("book-keeping (clusterfed)", lambda t: t.train(plan.initial, config, 1)),
        (
            "Opacus fast gradient clipping",
            lambda t: opacus_round(t, plan.initial, config, 1, "ghost"),
        ),
        ("Opacus hooks", lambda t: opacus_round(t, plan.initial, config, 1)),
    ):
        walls, cpus = [], []
        for _ in range(3):
            trainer = Client(plan.clients[0]).trainer
            start, cpu = time.perf_counter(), time.thread_time()
            run(trainer)
            walls.append(time.perf_counter() - start)
            cpus.append(time.thread_time() - cpu)
        print(
            f"client 0 ({len(plan.clients[0].train)} samples), one DP round,"
            f" {label}: median {statistics.median(walls):.3f} s wall,"
            f" {statistics.median(cpus):.3f} s CPU"
        )


if __name__ == "__main__":
    main()
