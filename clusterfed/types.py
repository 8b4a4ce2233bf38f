"""Identifier and status types shared by the server, the strategies and the results."""

from __future__ import annotations

from typing import Final, Literal, NewType, TypeAlias

ClientId = NewType("ClientId", int)
ClusterId = NewType("ClusterId", int)

GLOBAL: Final = "global"
"""The name of a model that belongs to no cluster: DCFL's W_G, the mean of
the cluster models, which a newcomer trains from before it is placed. The
protocol sends it under this name (`ClusterModel.cluster`), never under an id
taken from the cluster id space."""

ModelKey: TypeAlias = ClusterId | Literal["global"]
"""What a task's model is keyed by: a cluster's id, or `GLOBAL`."""


def model_key(name: int | str) -> ModelKey:
    """The key of the model a message names (`ClusterModel.cluster`, a
    reply's `cluster`): `GLOBAL`, or a cluster's id.

    Raises:
        ValueError: `name` is another string (the protocol admits none).
    """
    if isinstance(name, int):
        return ClusterId(name)
    if name == GLOBAL:
        return GLOBAL
    raise ValueError(f"no model is named {name!r}")


Status = Literal["ok", "late", "failed", "rejected"]
"""How a client's task ended: "ok" (an accepted update in time), "late" (after
the round's deadline), "failed" (no usable reply: a timeout, a crash, an error
reply) or "rejected" (refused by a check before it could touch a model)."""

__all__ = ["GLOBAL", "ClientId", "ClusterId", "ModelKey", "Status", "model_key"]
