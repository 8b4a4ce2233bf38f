"""Algorithms by name: every `Strategy` subclass in this package, found once.

Adding an algorithm is adding one module here that defines a subclass with a
`name`; nothing else changes.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Mapping
from functools import cache
from typing import Any, TypeVar

from clusterfed.errors import ConfigError

from .base import IdentityPolicy, Strategy

T = TypeVar("T", Strategy[Any], IdentityPolicy)


@cache
def algorithms() -> dict[str, type[Strategy[Any]]]:
    """Name → strategy class, for every algorithm module in this package."""
    # mypy takes no abstract class for type[T]; only concrete ones come back.
    return _named_subclasses(Strategy)  # type: ignore[type-abstract]


@cache
def identity_policies() -> dict[str, type[IdentityPolicy]]:
    """Name → client-side identity policy, for every module in this package."""
    return _named_subclasses(IdentityPolicy)  # type: ignore[type-abstract]


def make_policy(name: str, params: Mapping[str, Any]) -> IdentityPolicy:
    """A new identity policy `name` with `params`.

    Raises:
        ConfigError: unknown name or bad parameters.
    """
    known = identity_policies()
    if name not in known:
        raise ConfigError(
            f"unknown identity policy {name!r}; known: {', '.join(known)}"
        )
    try:
        return known[name](**params)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"identity policy {name}: {exc}") from exc


def _named_subclasses(base: type[T]) -> dict[str, type[T]]:
    package = __name__.rsplit(".", 1)[0]
    for module in pkgutil.iter_modules(importlib.import_module(package).__path__):
        if not module.name.startswith("_") and module.name != "registry":
            importlib.import_module(f"{package}.{module.name}")
    found: dict[str, type[T]] = {}
    stack = list(base.__subclasses__())
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if "name" in cls.__dict__ and not inspect.isabstract(cls):
            found[cls.name] = cls
    return dict(sorted(found.items()))


def parameters(name: str) -> dict[str, Any]:
    """The hyperparameters of algorithm `name` and their defaults."""
    signature = inspect.signature(_lookup(name).__init__)
    return {
        p.name: p.default
        for p in signature.parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    }


def make(name: str, **params: Any) -> Strategy[Any]:
    """A new strategy `name` with `params`.

    Raises:
        ConfigError: unknown name, unknown parameter, or a bad value.
    """
    cls = _lookup(name)
    unknown = sorted(set(params) - set(parameters(name)))
    if unknown:
        raise ConfigError(
            f"{name} has no parameter {', '.join(map(repr, unknown))};"
            f" it takes: {', '.join(parameters(name)) or 'none'}"
        )
    try:
        return cls(**params)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{name}: {exc}") from exc


def _lookup(name: str) -> type[Strategy[Any]]:
    known = algorithms()
    if name not in known:
        raise ConfigError(f"unknown algorithm {name!r}; known: {', '.join(known)}")
    return known[name]
