"""The error types that cross package boundaries.

They live in `protocol` because `protocol` imports nothing else from the project;
every other package can import them from here (or from `clusterfed.errors`).
"""

from __future__ import annotations


class ClusterfedError(Exception):
    """Base class of every error clusterfed raises on purpose."""


class ProtocolError(ClusterfedError):
    """A message could not be decoded or failed validation.

    The message always names the field (or the layer) and the problem, so a
    rejected message can be recorded with a reason a person can act on.
    """
