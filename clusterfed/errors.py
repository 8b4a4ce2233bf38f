"""The error hierarchy: one base, narrow subclasses that show the bad value."""

from __future__ import annotations

from clusterfed.protocol.errors import ClusterfedError, ProtocolError


class ScenarioError(ClusterfedError):
    """A scenario is invalid; the message names the file, the field and the fix."""


class ConfigError(ClusterfedError, ValueError):
    """An unknown name or a bad parameter of an algorithm, model or dataset."""


class ScenarioWarning(UserWarning):
    """A scenario runs, but part of it cannot do what it says (an event after
    the last round, a straggler that is never late)."""


class UpdateRejected(ClusterfedError):
    """An update was refused before it could touch a model."""


__all__ = [
    "ClusterfedError",
    "ConfigError",
    "ProtocolError",
    "ScenarioError",
    "ScenarioWarning",
    "UpdateRejected",
]
