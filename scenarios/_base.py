"""The shared base of every scenario spec: frozen, and no unknown keys."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
