"""Where two JSON-like values differ: for equivalence checks and replays."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def differences(want: Any, got: Any, where: str = "") -> Iterator[tuple[str, Any, Any]]:
    """Every place where two JSON values differ, as (path, want, got), outermost
    first; list items that carry an `id` (a client's row) are named by it."""
    if isinstance(want, dict) and isinstance(got, dict):
        for key in sorted(set(want) | set(got), key=str):
            yield from differences(want.get(key), got.get(key), f"{where}.{key}")
    elif isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            yield f"{where} (length)", len(want), len(got)
        for i, (a, b) in enumerate(zip(want, got, strict=False)):
            label = f"client {a['id']}" if isinstance(a, dict) and "id" in a else i
            yield from differences(a, b, f"{where}[{label}]")
    elif want != got:
        yield where, want, got


def first_difference(
    want: list[Any], got: list[Any], label: str = "round"
) -> tuple[str, Any, Any] | None:
    """The first difference between two lists of records (e.g. rounds.jsonl
    rows), its path starting with `label` and the index; None if equal."""
    for index, (a, b) in enumerate(zip(want, got, strict=False)):
        for where, x, y in differences(a, b):
            return f"{label} {index}{where}", x, y
    if len(want) != len(got):
        return f"{label}s (count)", len(want), len(got)
    return None
