"""clusterfed: a simulator for clustered federated learning.

Clients and the parameter server are actors exchanging typed, msgpack-encoded
messages; scenarios run on one process (asyncio) or on a Ray cluster.

    >>> import clusterfed
    >>> result = clusterfed.run("quickstart", rounds=3)   # doctest: +SKIP
    >>> clusterfed.resume("runs/stopped-run")             # doctest: +SKIP
    >>> clusterfed.compare("quickstart", ["fedavg", "fedprox"])  # doctest: +SKIP
    >>> clusterfed.load("runs/latest").rounds             # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

# The public API pulls in torch; import it on first use so that light imports
# such as `clusterfed.protocol` in a worker stay light.
_LAZY = {
    "run": "clusterfed.api",
    "resume": "clusterfed.api",
    "RunResult": "clusterfed.api",
    "RunInterrupted": "clusterfed.driving",
    "compare": "clusterfed.comparison",
    "CompareResult": "clusterfed.comparison",
    "sweep": "clusterfed.sweeps",
    "SweepResult": "clusterfed.sweeps",
    "load": "clusterfed.results",
    "Scenario": "clusterfed.scenarios",
    "load_scenario": "clusterfed.scenarios",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'clusterfed' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "CompareResult",
    "RunInterrupted",
    "RunResult",
    "Scenario",
    "SweepResult",
    "__version__",
    "compare",
    "load",
    "load_scenario",
    "resume",
    "run",
    "sweep",
]
