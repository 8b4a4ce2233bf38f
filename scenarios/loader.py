"""Load a scenario by built-in name, TOML file or Python script; apply overrides.

Every failure is a `ScenarioError` naming the source, the field and what was
expected, raised before anything runs.
"""

from __future__ import annotations

import runpy
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from clusterfed.algorithms import Strategy, parameters
from clusterfed.algorithms.registry import is_builtin, register
from clusterfed.errors import ClusterfedError, ScenarioError

from .builtin import BUILTIN
from .problems import describe_problems, did_you_mean
from .spec import Scenario


def load_scenario(source: str | Path | Scenario) -> Scenario:
    """A scenario from a built-in name, a `.toml` file or a `.py` script.

    A script defines `scenario` (a `Scenario`) or `build()` returning one.
    """
    if isinstance(source, Scenario):
        return source
    text = str(source)
    if text in BUILTIN:
        return BUILTIN[text]()
    path = Path(text)
    if path.suffix not in (".toml", ".py"):
        known = ", ".join(sorted(BUILTIN))
        raise ScenarioError(
            f"{text}: not a built-in scenario ({known}) nor a .toml or .py file"
        )
    if not path.is_file():
        raise ScenarioError(f"{text}: no such file")
    if path.suffix == ".toml":
        try:
            data = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise ScenarioError(f"{path}: not valid TOML: {exc}") from exc
        data.setdefault("name", path.stem)
        _beside(data, path.parent)
        return validate(data, source=str(path))
    return _from_script(path)


def _beside(data: dict[str, Any], folder: Path) -> None:
    """A relative availability trace path in a TOML file is relative to the
    file's folder, wherever the command runs."""
    availability = data.get("availability")
    if isinstance(availability, dict) and isinstance(availability.get("path"), str):
        trace = Path(availability["path"])
        if not trace.is_absolute():
            availability["path"] = str(folder / trace)


def validate(data: Mapping[str, Any], *, source: str) -> Scenario:
    """Validate a scenario dict; errors name `source` and the field."""
    try:
        return Scenario.model_validate(dict(data))
    except ValidationError as exc:
        raise ScenarioError(f"{source}: {describe_problems(exc, Scenario)}") from exc
    except ClusterfedError as exc:
        raise ScenarioError(f"{source}: {exc}") from exc


def with_overrides(
    scenario: Scenario,
    assignments: Iterable[str] = (),
    *,
    algorithms: Sequence[str] | None = None,
    **fields: Any,
) -> Scenario:
    """`scenario` with `key.path=value` assignments and top-level fields replaced.

    Values are read as TOML values (`0.1`, `true`, `[512, 128]`, `"text"`);
    anything that is not one is taken as a plain string. Setting `X.kind`
    starts table X afresh, since its other keys belong to the old kind.

    A plain key that is no scenario field but a hyperparameter of one of
    `algorithms` (default: the scenario's own) sets it for each of them:
    `distance=cosine` is `algorithm_params.dcfl.distance=cosine` in a DCFL run.
    """
    data = scenario.model_dump(mode="json", exclude_unset=False)
    for key, value in fields.items():
        if value is not None:
            data[key] = value
    targets = list(algorithms) if algorithms is not None else [data["algorithm"]]
    for assignment in assignments:
        key, sep, raw = assignment.partition("=")
        path = key.strip().split(".")
        if not sep or not key.strip():
            raise ScenarioError(f"--set {assignment!r}: expected key=value")
        value = _parse_value(raw.strip())
        if path[0] == "faulty" and isinstance(data.get("faulty"), list):
            _assign_faulty(data["faulty"], path, value, assignment)
            continue
        if path[0] in Scenario.model_fields:
            _assign(data, path, value, assignment)
            continue
        owners = [a for a in targets if len(path) == 1 and path[0] in _parameters(a)]
        if not owners:
            known = [
                *Scenario.model_fields,
                *(p for a in targets for p in _parameters(a)),
            ]
            close = did_you_mean(path[0], known, list_known=False)
            raise ScenarioError(
                f"--set {assignment!r}: {path[0]!r} is neither a scenario field"
                f" ({', '.join(Scenario.model_fields)}) nor a parameter of"
                f" {', '.join(targets)}{close}"
            )
        for owner in owners:
            _assign(data, ["algorithm_params", owner, path[0]], value, assignment)
    return validate(data, source=f"scenario {scenario.name!r} with overrides")


def _parameters(algorithm: str) -> dict[str, Any]:
    try:
        return parameters(algorithm)
    except ClusterfedError:
        return {}


def _assign(data: dict[str, Any], path: list[str], value: Any, text: str) -> None:
    node = data
    for part in path[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if isinstance(child, str):  # `X=name`, then `X.param=v`: name is X's kind
            child = node[part] = {"kind": child}
        if not isinstance(child, dict):
            raise ScenarioError(f"--set {text!r}: {part!r} is not a table")
        node = child
    if path[-1] == "kind" and node.get("kind") != value:
        node.clear()
    node[path[-1]] = value


def _assign_faulty(
    entries: list[dict[str, Any]], path: list[str], value: Any, text: str
) -> None:
    """`faulty=alie` gives every faulty entry that behaviour (its clients and
    schedule kept, the old behaviour's options dropped); `faulty.epsilon=0.1`
    sets an option on every entry. A list or a table replaces them all."""
    if len(path) == 1 and not isinstance(value, str):
        entries[:] = value if isinstance(value, list) else [value]
        return
    if not entries:
        raise ScenarioError(
            f"--set {text!r}: the scenario has no faulty clients to change;"
            ' give a table, e.g. faulty={clients=[1, 2], behaviour="alie"}'
        )
    keep = ("clients", "start", "every", "until")
    for entry in entries:
        if len(path) == 1:
            kept = {k: entry[k] for k in keep if k in entry}
            entry.clear()
            entry.update(kept, behaviour=value)
        else:
            _assign(entry, path[1:], value, text)


def _parse_value(raw: str) -> Any:
    try:
        return tomllib.loads(f"value = {raw}")["value"]
    except tomllib.TOMLDecodeError:
        return raw


def _from_script(path: Path) -> Scenario:
    try:
        namespace = runpy.run_path(str(path))
    except ClusterfedError as exc:
        raise ScenarioError(f"{path}: {exc}") from exc
    except ValidationError as exc:
        raise ScenarioError(f"{path}: {describe_problems(exc, Scenario)}") from exc
    # The script's own strategies outlive its namespace: `runpy` drops the
    # module, and a class only the garbage collector still knows of would
    # vanish from `Strategy.__subclasses__()` before the run builds it.
    for value in namespace.values():
        if (
            isinstance(value, type)
            and issubclass(value, Strategy)
            and "name" in value.__dict__
            and not is_builtin(value.name)
        ):
            register(value.name, value)
    found = namespace.get("scenario")
    if found is None and callable(namespace.get("build")):
        found = namespace["build"]()
    if not isinstance(found, Scenario):
        raise ScenarioError(
            f"{path}: define `scenario = Scenario(...)` or `def build() -> Scenario`"
        )
    return found
