"""What is wrong with a scenario, said so that it points at the fix.

Pydantic's own messages name a field as `events.1.straggle.start` and say
"Extra inputs are not permitted" for a typo. Here every problem names its
field in one style (`events[1] (straggle).start`, the style of the scenario's
own checks), shows the offending value, and suggests the closest known name
for a misspelt field, kind or choice.
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Iterable, Sequence
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from .spec import Scenario

# The fields that pick a member of a tagged union (event kind, deadline
# policy, faulty behaviour, ...).
_TAGS = ("kind", "policy", "behaviour")


def describe_problems(error: ValidationError, root: type[BaseModel]) -> str:
    """One entry per problem of validating a `root`, joined by "; ": unknown
    fields first, since a misspelt field is often why another is missing."""
    items = error.errors(include_url=False)
    ordered = sorted(items, key=lambda item: item["type"] != "extra_forbidden")
    return "; ".join(_problem(item, root) for item in ordered)


def did_you_mean(name: str, known: Iterable[str], *, list_known: bool = True) -> str:
    """ "; did you mean 'x'?" for the closest of `known`; failing that
    "; known: ..." (or nothing, without `list_known`)."""
    known = sorted(set(known))
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    if close:
        return f"; did you mean {close[0]!r}?"
    return f"; known: {', '.join(known)}" if known and list_known else ""


def _problem(item: ErrorDetails, root: type[BaseModel]) -> str:
    loc = item["loc"]
    where = field_path(loc, root)
    kind, ctx, value = item["type"], item.get("ctx") or {}, item.get("input")
    if kind == "extra_forbidden":
        name = str(loc[-1])
        what = f"unknown field {name!r}{did_you_mean(name, _fields_at(root, loc[:-1]))}"
    elif kind == "union_tag_invalid":
        known = _quoted(ctx.get("expected_tags", ""))
        tag = str(ctx.get("tag"))
        field = str(ctx.get("discriminator", "kind")).strip("'")
        what = f"unknown {field} {tag!r}{did_you_mean(tag, known)}"
    elif kind == "union_tag_not_found":
        field = str(ctx.get("discriminator", "kind")).strip("'")
        what = f"missing {field!r}, which says what this is"
        keys = [str(k) for k in value] if isinstance(value, dict) else []
        typo = difflib.get_close_matches(field, keys, n=1, cutoff=0.6)
        what += f"; is {typo[0]!r} a misspelt {field!r}?" if typo else ""
    elif kind == "literal_error" and isinstance(value, str):
        known = _quoted(ctx.get("expected", ""))
        what = f"{value!r} is not one of {', '.join(map(repr, known))}"
        close = difflib.get_close_matches(value, known, n=1)
        what += f"; did you mean {close[0]!r}?" if close else ""
    elif kind == "missing":
        what = "missing (required)"
    else:
        what = item["msg"].removeprefix("Value error, ")
        if kind != "value_error" and _shown(value):
            what += f" (got {value!r})"
    return f"{where}: {what}" if where else what


def field_path(loc: Sequence[int | str], root: type[BaseModel] | None = None) -> str:
    """`loc` as `events[1] (straggle).start`: list items by index, followed
    by their kind; a union's tag after a field is dropped (`partition.alpha`)."""
    text, current, after_index = "", [root] if root else [], False
    for part in loc:
        if _is_tag(current, part):
            text += f" ({part})" if after_index else ""
            after_index = False
        elif isinstance(part, int):
            text += f"[{part}]"
            after_index = True
        else:
            text += f".{part}" if text else str(part)
            after_index = False
        current = [nxt for tp in current for nxt in _step(tp, part)]
    return text


def _is_tag(current: list[Any], part: int | str) -> bool:
    """Whether `part` picks a member of a tagged union rather than a field."""
    models = [
        leaf
        for tp in current
        for leaf in _leaves(tp)
        if isinstance(leaf, type) and issubclass(leaf, BaseModel)
    ]
    return (
        isinstance(part, str)
        and not any(part in m.model_fields for m in models)
        and any(_default(m, tag) == part for m in models for tag in _TAGS)
    )


def _fields_at(root: type[BaseModel], loc: Sequence[int | str]) -> list[str]:
    """The field names of the model(s) found at `loc`, following
    annotations through lists, dicts, optionals and tagged unions."""
    current: list[Any] = [root]
    for part in loc:
        current = [nxt for tp in current for nxt in _step(tp, part)]
    return [
        name
        for tp in current
        for leaf in _leaves(tp)
        if isinstance(leaf, type) and issubclass(leaf, BaseModel)
        for name in leaf.model_fields
    ]


def _step(tp: Any, part: int | str) -> list[Any]:
    found = []
    for leaf in _leaves(tp):
        if isinstance(leaf, type) and issubclass(leaf, BaseModel):
            if isinstance(part, str) and part in leaf.model_fields:
                found.append(leaf.model_fields[part].annotation)
            elif any(_default(leaf, tag) == part for tag in _TAGS):
                found.append(leaf)  # the union member this tag picked
        elif get_origin(leaf) in (list, tuple) and isinstance(part, int):
            found.extend(get_args(leaf)[:1])
        elif get_origin(leaf) is dict:
            found.extend(get_args(leaf)[1:2])
    return found


def _leaves(tp: Any) -> list[Any]:
    """`tp` without Annotated, Optional and unions: the types it may be."""
    origin = get_origin(tp)
    if origin is Annotated:
        return _leaves(get_args(tp)[0])
    if origin in (Union, types.UnionType):
        return [leaf for arg in get_args(tp) for leaf in _leaves(arg)]
    return [tp]


def _default(model: type[BaseModel], name: str) -> Any:
    field = model.model_fields.get(name)
    return None if field is None else field.default


def _quoted(text: str) -> list[str]:
    """ "'a', 'b' or 'c'" → [a, b, c] (pydantic's lists of choices)."""
    return [
        part for part in text.replace(" or ", ", ").replace("'", "").split(", ") if part
    ]


def _shown(value: Any) -> bool:
    return isinstance(value, (int, float, str, bool)) and len(repr(value)) <= 60


def scenario_warnings(scenario: Scenario) -> list[str]:
    """What in a valid scenario cannot happen as written: round-clock events
    that start after the last round. (Time-clock events are judged at the
    run's end, when its simulated length is known.)"""
    last = scenario.rounds - 1
    return [
        f"events[{i}] ({event.kind}): start {event.start:g} is after the last"
        f" round ({last}): it never fires"
        for i, event in enumerate(scenario.events)
        if event.clock == "round" and event.start > last
    ]


def unfired_time_events(
    scenario: Scenario, fired: dict[int, int], last_start: float
) -> list[str]:
    """Time-clock occurrences that never fired in a run whose last round
    started at `last_start` (events fire when a round starts, so one due
    later never fires, however long that round ran): an event that never
    fired, and each dropped occurrence of a repeating event with an end
    (`until`); one repeating without end is named only if it never fired."""
    found = []
    for i, event in enumerate(scenario.events):
        if event.clock != "time":
            continue
        done = fired.get(i, 0)
        head = f"events[{i}] ({event.kind}):"
        tail = f"after the last round started ({last_start:.1f} s): it never fired"
        if done == 0:
            found.append(f"{head} start {event.start:g} s is {tail}")
        if event.every is None or event.until is None:
            continue
        for key in list(event.occurrences(event.until))[max(done, 1) :]:
            found.append(f"{head} its occurrence at {key:g} s is {tail}")
    return found
