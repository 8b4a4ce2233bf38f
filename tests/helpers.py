"""Helpers shared by the tests: small scenarios that run in seconds on digits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from clusterfed.protocol import TrainConfig
from clusterfed.scenarios import DirichletPartition, ModelSpec, Scenario


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


def read_rounds(out: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line) for line in (out / "rounds.jsonl").read_text().splitlines()
    ]
