"""What a strategy decided in a round, typed: the base of every strategy's
diagnostics and the one function that reads a strategy's answer.

`Strategy.diagnostics(state)` returns a frozen `Diagnostics` subclass (CFL's
norms and splits, DCFL's Dunn index, CAFA's CBCC and ABFA) or None when there
is nothing to report. The results read its fields; rounds.jsonl gets its
`record()`, the row's `strategy`. A plug-in may still return a plain mapping:
`as_diagnostics` checks that it holds JSON values and wraps it in
`PlainDiagnostics`, which records it as it is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, JsonValue


class Diagnostics(BaseModel):
    """Base of a strategy's diagnostics: frozen, typed fields, nothing else.

    Subclass it with the fields the strategy reports; a field's type is what
    the record holds (`int`, `float`, `bool`, `str`, None, lists, mappings,
    nested `Diagnostics`). Mapping keys may be ints (cluster or client ids):
    the record writes them as strings, in the mapping's order. A float that is
    not finite is written as null: report None yourself, so that the typed
    object and its record agree (the conformance suite checks they do).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    omit_when_none: ClassVar[frozenset[str]] = frozenset()
    """Fields the record leaves out while they are None (CAFA's `cbcc` before
    any client described its data); any other None field is written as null."""

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        unknown = sorted(cls.omit_when_none - set(cls.model_fields))
        if unknown:
            raise TypeError(
                f"{cls.__name__}.omit_when_none names no field of it: {unknown}"
            )

    def record(self) -> dict[str, JsonValue]:
        """The fields as plain JSON values, in declaration order: the row's
        `strategy` in rounds.jsonl."""
        absent = {name for name in self.omit_when_none if getattr(self, name) is None}
        dumped: dict[str, JsonValue] = finite(
            self.model_dump(mode="json", exclude=absent)
        )
        return dumped

    def summary(self) -> dict[str, JsonValue]:
        """Keys that summary.json takes from the last round's diagnostics
        (CFL: `splits`); none by default. A key the summary already has is
        never replaced."""
        return {}


class PlainDiagnostics(Diagnostics):
    """A plug-in's diagnostics given as a plain mapping, checked to hold JSON
    values (`as_diagnostics`); recorded as they are. The summary takes its
    `splits`, as it did before diagnostics were typed."""

    values: dict[str, JsonValue]

    def record(self) -> dict[str, JsonValue]:
        return dict(self.values)

    def summary(self) -> dict[str, JsonValue]:
        return {"splits": self.values["splits"]} if "splits" in self.values else {}


def as_diagnostics(value: object, strategy: str) -> Diagnostics | None:
    """What `strategy`'s `diagnostics` hook returned, as `Diagnostics`.

    A `Diagnostics` is kept; None or an empty mapping is None; a non-empty
    mapping becomes `PlainDiagnostics` (keys as strings, numpy scalars as
    Python ones, tuples and sets as lists, non-finite floats as None).

    Raises:
        TypeError: anything else, or a mapping that holds something JSON
            cannot (the message names the strategy and where).
    """
    if value is None or isinstance(value, Diagnostics):
        return value
    if not isinstance(value, Mapping):
        raise TypeError(
            f"{strategy}.diagnostics returned {type(value).__name__}:"
            " return a Diagnostics subclass (clusterfed.algorithms.Diagnostics),"
            " a mapping of JSON values, or None"
        )
    if not value:
        return None
    values: dict[str, JsonValue] = _plain(value, strategy + ".diagnostics")
    return PlainDiagnostics(values=values)


def finite(value: Any) -> Any:
    """`value` with every non-finite float replaced by None (JSON has none)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


def _plain(value: Any, where: str) -> Any:
    """A plug-in's mapping as plain JSON values: what the recorder did with
    the plain dicts strategies returned before they were typed, and a
    TypeError naming `where` for a value JSON cannot hold."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v, f"{where}[{str(k)!r}]") for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset | np.ndarray):
        items = sorted(value) if isinstance(value, set | frozenset) else value
        return [_plain(v, f"{where}[{i}]") for i, v in enumerate(items)]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, str | int | float):  # bool is an int
        return value
    raise TypeError(f"{where} is no JSON value: {type(value).__name__}")
