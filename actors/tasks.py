"""The requests of the round's phases, built so that a model sent to many
clients is one object (the codec packs it once per round)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from clusterfed.algorithms import ProbePlan, TaskPlan
from clusterfed.protocol import (
    ClusterModel,
    IdentityRule,
    PeerModel,
    ProbeTask,
    TrainConfig,
    TrainTask,
)
from clusterfed.types import ModelKey


def train_tasks(plans: Sequence[TaskPlan], base: TrainConfig) -> list[TrainTask]:
    """One task per plan; plans that send the same models share one object,
    so the codec packs each model once per round."""
    models: dict[tuple[ModelKey, int, int], ClusterModel] = {}
    configs: dict[tuple[Any, ...], TrainConfig] = {(): base}
    tasks: dict[tuple[Any, ...], TrainTask] = {}
    result = []
    for plan in plans:
        changes = tuple(sorted(plan.overrides.items()))
        if changes not in configs:
            configs[changes] = TrainConfig.model_validate(
                {**base.model_dump(), **plan.overrides}
            )
        sent = []
        for k, weights in plan.models.items():
            last = plan.last_updates.get(k)
            key = (k, id(weights), id(last))
            if key not in models:
                models[key] = ClusterModel(cluster=k, weights=weights, last_update=last)
            sent.append(models[key])
        identity = (
            IdentityRule(name=plan.identity, params=dict(plan.identity_params))
            if plan.identity is not None
            else None
        )
        task_key = (
            changes,
            tuple(id(m) for m in sent),
            plan.identity,
            tuple(sorted(plan.identity_params.items())),
            plan.mixture,
        )
        if task_key not in tasks:
            tasks[task_key] = TrainTask(
                models=tuple(sent),
                config=configs[changes],
                identity=identity,
                mixture=plan.mixture,
            )
        result.append(tasks[task_key])
    return result


def probe_tasks(plans: Sequence[ProbePlan]) -> list[ProbeTask]:
    """One probe task per plan; a model sent to several clients is built once."""
    models: dict[tuple[int, int], PeerModel] = {}
    tasks = []
    for plan in plans:
        sent = []
        for owner in sorted(plan.models):
            weights = plan.models[owner]
            key = (owner, id(weights))
            if key not in models:
                models[key] = PeerModel(owner=owner, weights=weights)
            sent.append(models[key])
        tasks.append(ProbeTask(models=tuple(sent)))
    return tasks
