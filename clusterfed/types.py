"""Identifier types shared by the server, the strategies and the results."""

from __future__ import annotations

from typing import NewType

ClientId = NewType("ClientId", int)
ClusterId = NewType("ClusterId", int)

__all__ = ["ClientId", "ClusterId"]
