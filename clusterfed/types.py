"""Identifier and status types shared by the server, the strategies and the results."""

from __future__ import annotations

from typing import Literal, NewType

ClientId = NewType("ClientId", int)
ClusterId = NewType("ClusterId", int)

Status = Literal["ok", "late", "failed", "rejected"]
"""How a client's task ended: "ok" (an accepted update in time), "late" (after
the round's deadline), "failed" (no usable reply: a timeout, a crash, an error
reply) or "rejected" (refused by a check before it could touch a model)."""

__all__ = ["ClientId", "ClusterId", "Status"]
