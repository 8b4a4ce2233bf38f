"""What local DP costs: time per round of a scenario with DP against the same
run without it, in one process, and one client's DP round through Opacus'
fast gradient clipping (what clusterfed does) against Opacus' per-sample
hooks (what it did before).

    python bench/dp.py                                            # digits
    python bench/dp.py --rounds 3 --set dataset.name=fashion_mnist --set train.epochs=1
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader

import clusterfed
from clusterfed.actors import Client
from clusterfed.actors.privacy import quiet_opacus
from clusterfed.actors.trainer import DP_NOISE_KEY, DP_SAMPLING_KEY, LocalTrainer
from clusterfed.models import get_flat
from clusterfed.protocol import TrainConfig
from clusterfed.scenarios import load_scenario, plan_run, with_overrides
from clusterfed.seeding import derive_seed


def per_round(out: Path) -> list[float]:
    """Wall seconds of each round after the first (which also starts workers)."""
    lines = (out / "rounds.jsonl").read_text().splitlines()
    walls = [json.loads(line)["wall_time"] for line in lines]
    return [b - a for a, b in zip(walls, walls[1:], strict=False)]


def hooks_round(
    trainer: LocalTrainer, weights: np.ndarray, config: TrainConfig, round: int
) -> None:
    """One DP round through Opacus' default per-sample hooks."""
    privacy = trainer.privacy
    assert privacy is not None
    _, _, optimizer = trainer._start_round(weights, config)
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
        module, dp_optimizer, batches = privacy.engine.make_private(
            module=trainer.model,
            optimizer=optimizer,
            data_loader=loader,
            noise_multiplier=privacy.noise_multiplier,
            max_grad_norm=privacy.max_grad_norm,
            poisson_sampling=True,
            noise_generator=noise,
        )
        for _ in range(config.epochs):
            for x, y in batches:
                dp_optimizer.zero_grad(set_to_none=True)
                F.cross_entropy(module(x), y).backward()
                dp_optimizer.step()
    module.to_standard_module()
    get_flat(trainer.model)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="dcfl-dynamic")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        times = {}
        for label, extra in (("with DP", []), ("without DP", ["dp=off"])):
            out = Path(tmp) / label.replace(" ", "-")
            clusterfed.run(
                args.scenario,
                out=out,
                rounds=args.rounds,
                overrides=[*args.overrides, *extra],
            )
            times[label] = per_round(out)
    for label, walls in times.items():
        shown = ", ".join(f"{w:.2f}" for w in walls)
        print(f"{label:<11} s/round: {shown}  median {statistics.median(walls):.2f}")
    ratio = statistics.median(times["with DP"]) / statistics.median(times["without DP"])
    print(f"with/without DP (medians): {ratio:.2f}")

    torch.set_num_threads(1)
    scenario = with_overrides(load_scenario(args.scenario), args.overrides)
    plan = plan_run(scenario)
    config = plan.train_config
    for name, run in (
        ("fast gradient clipping", lambda t: t.train(plan.initial, config, 1)),
        ("Opacus hooks", lambda t: hooks_round(t, plan.initial, config, 1)),
    ):
        walls = []
        for _ in range(3):
            trainer = Client(plan.clients[0]).trainer
            start = time.perf_counter()
            run(trainer)
            walls.append(time.perf_counter() - start)
        print(
            f"client 0 ({plan.clients[0].id}, {len(plan.clients[0].train)} samples),"
            f" one DP round, {name}: median {statistics.median(walls):.3f} s"
        )


if __name__ == "__main__":
    main()
