"""Helpers shared by the tests: small scenarios that run in seconds on digits."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from clusterfed.actors import (
    Client,
    InlineRuntime,
    LocalTrainer,
    ParameterServer,
    Runtime,
)
from clusterfed.driving import drive
from clusterfed.federation import Federation, build_server
from clusterfed.models import build_model, get_flat
from clusterfed.protocol import TrainConfig, Welcome, decode
from clusterfed.scenarios import DirichletPartition, ModelSpec, RunPlan, Scenario
from clusterfed.types import ClientId


def tiny_trainer() -> LocalTrainer:
    """A client of 20 training and 4 held-out 4x4 images, 2 classes, and
    an MLP with one hidden layer of 5: for checks of one training step."""
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(24, 1, 4, 4, generator=gen)
    y = (x.flatten(1).sum(1) > 8).long()
    model = build_model("mlp", (1, 4, 4), 2, hidden=[5])
    return LocalTrainer(model, x[:20], y[:20], x[20:], y[20:], seed=0)


def opacus_hooks_round(
    trainer: LocalTrainer, weights: np.ndarray, config: TrainConfig, round: int
) -> np.ndarray:
    """`trainer`'s DP round from `weights` through Opacus' make_private with
    its per-sample hooks, on the trainer's own sampling and noise streams:
    the path clusterfed took before fast gradient clipping and book-keeping,
    the reference both are held against. Returns the delta."""
    from torch.utils.data import DataLoader

    from clusterfed.actors.privacy import quiet_opacus
    from clusterfed.actors.trainer import DP_NOISE_KEY, DP_SAMPLING_KEY
    from clusterfed.seeding import derive_seed

    privacy = trainer.privacy
    assert privacy is not None
    _, _, optimizer = trainer._start_round(weights, config, ())
    loader = DataLoader(
        trainer._train_set,
        batch_size=config.batch_size,
        generator=torch.Generator().manual_seed(
            derive_seed(trainer.seed, round, DP_SAMPLING_KEY)
        ),
    )
    with quiet_opacus():
        module, dp_optimizer, batches = privacy.engine.make_private(
            module=trainer.model,
            optimizer=optimizer,
            data_loader=loader,
            noise_multiplier=privacy.noise_multiplier,
            max_grad_norm=privacy.max_grad_norm,
            poisson_sampling=True,
            noise_generator=torch.Generator().manual_seed(
                derive_seed(trainer.seed, round, DP_NOISE_KEY)
            ),
            grad_sample_mode="hooks",
        )
        for _ in range(config.epochs):
            for x, y in batches:
                dp_optimizer.zero_grad(set_to_none=True)
                torch.nn.functional.cross_entropy(module(x), y).backward()
                dp_optimizer.step()
    module.to_standard_module()
    return get_flat(trainer.model) - weights


def tiny_model(seed: int) -> np.ndarray:
    """Flat weights of `tiny_trainer`'s architecture, initialised from `seed`."""
    return get_flat(build_model("mlp", (1, 4, 4), 2, hidden=[5], seed=seed))


def small_scenario(**changes: Any) -> Scenario:
    """Digits, 6 clients, a narrow MLP, 3 rounds: the smallest real federation."""
    base: dict[str, Any] = dict(
        name="small",
        partition=DirichletPartition(alpha=1.0),
        model=ModelSpec(name="mlp", hidden=[32]),
        train=TrainConfig(lr=0.05, momentum=0.9, batch_size=16, epochs=1),
        clients=6,
        rounds=3,
        seed=0,
    )
    base.update(changes)
    return Scenario(**base)


def without_wall_time(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows as two runs of the same seed share them (wall time aside)."""
    return [{k: v for k, v in row.items() if k != "wall_time"} for row in rows]


def read_rounds(out: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line) for line in (out / "rounds.jsonl").read_text().splitlines()
    ]


# The results contract of DESIGN §8, restated here: users' clones have no ../shared.
ROUND_KEYS = {
    "round",
    "sim_time",
    "wall_time",
    "n_clusters",
    "ari",
    "purity",
    "bytes_up",
    "bytes_down",
    "epsilon_max",
    "events",
    "clients",
}
CLIENT_KEYS = {"id", "group", "cluster", "acc", "loss", "late", "failed"}
SUMMARY_KEYS = set(
    [
        "algorithm",
        "scenario",
        "rounds",
        "final_mean_acc",
        "final_std_acc",
        "avg_mean_acc",
        "avg_std_acc",
        "ari_final",
        "purity_final",
        "rounds_to_purity90",
        "n_clusters_final",
        "epsilon_max",
        "late_updates",
        "failed_updates",
        "rejected_messages",
        "wall_s",
        "sim_s",
    ]
)


def assert_results_contract(out: Path) -> None:
    json.loads((out / "config.json").read_text())
    rows = read_rounds(out)
    assert rows and [r["round"] for r in rows] == sorted({r["round"] for r in rows})
    for row in rows:
        assert row.keys() >= ROUND_KEYS
        assert isinstance(row["events"], list)
        for client in row["clients"]:
            assert client.keys() >= CLIENT_KEYS
            assert client["acc"] is None or 0.0 <= client["acc"] <= 1.0
    summary = json.loads((out / "summary.json").read_text())
    assert summary.keys() >= SUMMARY_KEYS
    for key in ("final_mean_acc", "final_std_acc", "avg_mean_acc", "avg_std_acc"):
        assert math.isfinite(summary[key])
    assert {"accuracy.png", "clusters.png", "clustering.png"} <= {
        p.name for p in out.iterdir()
    }


def assert_compare_contract(out: Path) -> None:
    """A compare folder as the contract reads it: comparison.json maps each
    key to a full summary, and the key, a path below `out`, is a run folder."""
    table = json.loads((out / "comparison.json").read_text())
    assert table
    for name, summary in table.items():
        assert summary.keys() >= SUMMARY_KEYS, name
        assert_results_contract(out / name)


Tamper = Callable[[ClientId, bytes, bytes], bytes]


class TamperingRuntime(InlineRuntime):
    """Clients hosted in this process; `tamper(client, request, reply)` may
    rewrite a reply, or raise to make the exchange fail."""

    def __init__(self, tamper: Tamper | None = None) -> None:
        super().__init__()
        self.tamper = tamper

    @property
    def clients(self) -> dict[int, Client]:
        return self.host.clients

    async def request(self, client: int, head: bytes, body: bytes) -> bytes | None:
        reply = await super().request(client, head, body)
        if self.tamper is None or reply is None:
            return reply
        return self.tamper(ClientId(client), head + body, reply)


async def start_server(plan: RunPlan, runtime: Runtime) -> ParameterServer:
    """A parameter server for `plan` whose first clients have joined."""
    server = build_server(plan, runtime)
    for join in await runtime.add(plan.clients):
        reply = decode(await server.handle(join)).payload
        assert isinstance(reply, Welcome), reply
    return server


def traced_run(folder: Path, scenario: Scenario, mode: str = "full") -> list[dict]:
    """Run `scenario` in this process with a trace ("full" or "headers")."""
    config = {"scenario": scenario.model_dump(mode="json")}
    federation = Federation(
        scenario,
        InlineRuntime(),
        folder,
        config=config,
        trace=mode,  # type: ignore[arg-type]
    )
    return asyncio.run(drive(federation)).rows


class RecordingRuntime:
    """Enough of a runtime for a ScenarioEngine to add clients: it keeps the
    specs it was asked to add, and does nothing else."""

    def __init__(self) -> None:
        self.added: list[Any] = []

    async def add_clients(self, specs: Any) -> None:
        self.added += specs

    async def remove_client(self, client: int, reason: str) -> None: ...

    async def update_client(self, spec: Any) -> None: ...

    def set_unreachable(self, clients: Any) -> None: ...
