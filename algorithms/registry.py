"""Algorithms by name: every `Strategy` subclass in this package, found once,
plus algorithms from anywhere else.

Adding an algorithm to clusterfed is adding one module here that defines a
subclass with a `name`; nothing else changes. An algorithm of one's own
needs no change to clusterfed (docs/writing-a-strategy.md):

- `package.module:Class` as the algorithm name imports the module and takes
  the class (`--algorithm mystrategies:FedMedian`);
- an installed distribution registers it under a name in the entry point
  group `clusterfed.algorithms` (`fedmedian = "mystrategies:FedMedian"`);
- a `Strategy` subclass with a `name`, defined in a `.py` scenario script,
  is known by that name once the script is loaded.

Inside `no_local_code()` (a replay of a folder someone else wrote), a
`package.module:Class` name imports only what is importable without the
current folder: an installed module or one on `PYTHONPATH`.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
import pkgutil
import sys
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from functools import cache
from importlib.machinery import ModuleSpec, PathFinder
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, TypeVar

from clusterfed.errors import ConfigError

from .base import IdentityPolicy, Strategy

T = TypeVar("T", Strategy[Any], IdentityPolicy)

ENTRY_POINTS = "clusterfed.algorithms"


def algorithms() -> dict[str, type[Strategy[Any]]]:
    """Name → strategy class: this package's algorithms and the installed
    plug-ins (entry point group `clusterfed.algorithms`)."""
    found = {**_plugins(), **_builtin()}  # a plug-in never hides a built-in
    return dict(sorted(found.items()))


@cache
def _builtin() -> dict[str, type[Strategy[Any]]]:
    package = __name__.rsplit(".", 1)[0] + "."
    found = _named_subclasses(Strategy)  # type: ignore[type-abstract]
    return {k: v for k, v in found.items() if v.__module__.startswith(package)}


# Classes handed over by name where they cannot be imported (a Ray worker
# that receives a strategy defined in the driver's scenario script).
_REGISTERED: dict[str, type[Strategy[Any]]] = {}


def register(name: str, cls: type[Strategy[Any]]) -> None:
    """Make `name` resolve to `cls` in this process."""
    _REGISTERED[name] = _strategy_class(cls, name)


def is_builtin(name: str) -> bool:
    """Whether `name` is one of this package's algorithms."""
    return name in _builtin()


def _defined() -> dict[str, type[Strategy[Any]]]:
    return _named_subclasses(Strategy)  # type: ignore[type-abstract]


@cache
def _plugins() -> dict[str, type[Strategy[Any]]]:
    """The installed plug-ins; one that does not load is left out, with a
    warning (naming it as an algorithm raises its error)."""
    found: dict[str, type[Strategy[Any]]] = {}
    for point in entry_points(group=ENTRY_POINTS):
        try:
            found[point.name] = _strategy_class(point.load(), point.value)
        except Exception as exc:  # a broken plug-in must not break the others
            warnings.warn(
                f"algorithm plug-in {point.name} = {point.value!r}: {exc}",
                stacklevel=2,
            )
    return found


def resolve(name: str) -> type[Strategy[Any]]:
    """The strategy class of algorithm `name`: a registered name (built-in,
    plug-in, or defined in a loaded script) or `package.module:Class`.

    Raises:
        ConfigError: no such algorithm (with the names it may have meant), a
            module that does not import, or a class that is no `Strategy`.
    """
    if name in _REGISTERED:
        return _REGISTERED[name]
    if ":" in name:
        return _import_class(name)
    for table in (_builtin, _plugins, _defined):
        if name in (found := table()):
            return found[name]
    known = algorithms()
    for point in entry_points(group=ENTRY_POINTS, name=name):
        try:
            return _strategy_class(point.load(), point.value)
        except Exception as exc:
            raise ConfigError(
                f"algorithm {name!r} (plug-in {point.value!r}): {exc}"
            ) from exc
    close = difflib.get_close_matches(name, known, n=3)
    hint = f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""
    raise ConfigError(
        f"unknown algorithm {name!r}{hint}; known: {', '.join(known)};"
        " or name one of your own as package.module:Class"
    )


def _import_class(spec: str) -> type[Strategy[Any]]:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"algorithm {spec!r}: expected package.module:Class")
    untrusted = _UNTRUSTED.get()
    if untrusted is not None:
        _refuse_local(spec, module_name.partition(".")[0], untrusted)
    # As `python -m` does: a module in the current folder is found, also from
    # the `clusterfed` script (whose sys.path starts at its own folder).
    elif os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            f"algorithm {spec!r}: cannot import {module_name!r} ({exc}); is it"
            " installed, or in the current folder or on PYTHONPATH?"
        ) from exc
    found: Any = module
    for part in attr.split("."):
        found = getattr(found, part, None)
        if found is None:
            public = [
                n for n, v in vars(module).items() if inspect.isclass(v) and n[0] != "_"
            ]
            close = difflib.get_close_matches(part, public, n=3)
            hint = f"; did you mean {' or '.join(close)}?" if close else ""
            raise ConfigError(
                f"algorithm {spec!r}: module {module_name} has no {part!r}{hint}"
            )
    return _strategy_class(found, spec)


# The folders whose code a `module:Class` name may not import, while a
# `no_local_code()` block runs; None outside any (the current folder is fine).
_UNTRUSTED: ContextVar[tuple[Path, ...] | None] = ContextVar(
    "clusterfed_untrusted_folders", default=None
)


@contextmanager
def no_local_code(*folders: Path) -> Iterator[None]:
    """Inside, a `package.module:Class` algorithm is imported only from what
    is importable without the current folder and `folders`; a module found
    only there, or there first, is refused (`ConfigError`) before any of its
    code runs. A module imported before is taken as it is."""
    token = _UNTRUSTED.set(tuple(Path(f).resolve() for f in (Path(), *folders)))
    try:
        yield
    finally:
        _UNTRUSTED.reset(token)


def _refuse_local(spec: str, top: str, untrusted: tuple[Path, ...]) -> None:
    if top in sys.modules:
        return
    # Where the import would find the top-level module, and where it finds it
    # on the trusted part of sys.path: locating runs none of its code.
    trusted = [p for p in sys.path if Path(p or ".").resolve() not in untrusted]
    found, safe = _find(top, sys.path), _find(top, trusted)
    if found is None:
        return  # the import itself says it is not there
    if safe is None or (found.origin, found.submodule_search_locations) != (
        safe.origin,
        safe.submodule_search_locations,
    ):
        raise ConfigError(
            f"algorithm {spec!r}: {top!r} is not installed, and code from the"
            " current folder or the one being read is not run untrusted (--trust)"
        )


def _find(name: str, path: list[str]) -> ModuleSpec | None:
    """The spec `import name` would use were sys.path `path`."""
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        spec = (
            PathFinder.find_spec(name, path)
            if finder is PathFinder
            else find(name, None)
        )
        if spec is not None:
            return spec
    return None


def _strategy_class(found: Any, where: str) -> type[Strategy[Any]]:
    if not (inspect.isclass(found) and issubclass(found, Strategy)):
        raise ConfigError(f"algorithm {where!r}: {found!r} is not a Strategy subclass")
    if inspect.isabstract(found):
        raise ConfigError(
            f"algorithm {where!r}: {found.__name__} leaves abstract methods:"
            f" {', '.join(sorted(found.__abstractmethods__))}"
        )
    return found


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


@cache
def _import_package() -> None:
    package = __name__.rsplit(".", 1)[0]
    for module in pkgutil.iter_modules(importlib.import_module(package).__path__):
        if not module.name.startswith("_") and module.name != "registry":
            importlib.import_module(f"{package}.{module.name}")


def _named_subclasses(base: type[T]) -> dict[str, type[T]]:
    _import_package()
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
    signature = inspect.signature(resolve(name).__init__)
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
    cls = resolve(name)
    takes = parameters(name)
    unknown = sorted(set(params) - set(takes))
    if unknown:
        close = [m for u in unknown for m in difflib.get_close_matches(u, takes, n=1)]
        hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
        raise ConfigError(
            f"{name} has no parameter {', '.join(map(repr, unknown))}{hint};"
            f" it takes: {', '.join(takes) or 'none'}"
        )
    try:
        return cls(**params)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{name}: {exc}") from exc
