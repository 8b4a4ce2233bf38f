"""What `clusterfed list` shows, read without importing torch.

The built-in scenarios, datasets, models and algorithms are defined in
modules that import torch, scipy or scikit-learn (seconds); the names, one-line
descriptions and algorithm parameters are read here from the source of those
modules (their `BUILTIN`, `DATASETS` and `MODELS` tables, the docstrings of
the functions they name, and each algorithm class's `name` and keyword-only
`__init__` parameters), so that the listing takes a fraction of a second.
tests/test_catalogue.py checks that it agrees with the imported objects.
"""

from __future__ import annotations

import ast
import importlib.util
from functools import cache
from pathlib import Path


def scenarios() -> dict[str, str]:
    """Built-in scenario name → the first line of its docstring."""
    table = _table(_source("clusterfed.scenarios", "builtin.py"), "BUILTIN")
    described: dict[str, str] = {}
    for name, value in table.items():
        if isinstance(value, ast.Name):  # a function of builtin.py
            module, function = "builtin.py", value.id
        elif isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name):
            module, function = f"{value.value.id}.py", value.attr
        else:
            raise ValueError(f"BUILTIN[{name!r}]: not a function name")
        doc = _docstring(_source("clusterfed.scenarios", module), function)
        described[name] = doc.strip().splitlines()[0] if doc else ""
    return described


def datasets() -> dict[str, str]:
    """The datasets by name, then the synthetic ones by their name patterns
    with a word on each (the named ones need none)."""
    named = _table(_source("clusterfed.data", "datasets.py"), "DATASETS")
    synthetic = _table(_source("clusterfed.data", "synthetic.py"), "LISTED")
    return {
        **dict.fromkeys(named, ""),
        **{
            k: v.value
            for k, v in synthetic.items()
            if isinstance(v, ast.Constant) and isinstance(v.value, str)
        },
    }


def models() -> list[str]:
    return list(_table(_source("clusterfed.models", "registry.py"), "MODELS"))


def algorithms() -> dict[str, dict[str, str]]:
    """Built-in algorithm name → {parameter: repr of its default}."""
    folder = _folder("clusterfed.algorithms")
    classes: dict[str, ast.ClassDef] = {}
    for path in sorted(folder.glob("*.py")):
        if not path.name.startswith("_") and path.stem != "registry":
            for node in _parse(path).body:
                if isinstance(node, ast.ClassDef):
                    classes[node.name] = node
    found = {}
    for cls in classes.values():
        name = _class_name(cls)
        if name is not None and _is_strategy(cls, classes):
            found[name] = _parameters(cls, classes)
    return dict(sorted(found.items()))


def _bases(cls: ast.ClassDef) -> list[str]:
    """The names of the bases (`Strategy[S]` is `Strategy`)."""
    names = []
    for base in cls.bases:
        node = base.value if isinstance(base, ast.Subscript) else base
        if isinstance(node, ast.Name):
            names.append(node.id)
    return names


def _is_strategy(cls: ast.ClassDef, classes: dict[str, ast.ClassDef]) -> bool:
    return any(
        b == "Strategy" or (b in classes and _is_strategy(classes[b], classes))
        for b in _bases(cls)
    )


def _class_name(cls: ast.ClassDef) -> str | None:
    for node in cls.body:
        if (
            isinstance(node, ast.Assign)
            and [getattr(t, "id", None) for t in node.targets] == ["name"]
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            return node.value.value
    return None


def _parameters(cls: ast.ClassDef, classes: dict[str, ast.ClassDef]) -> dict[str, str]:
    """The keyword-only parameters of the `__init__` the class has or inherits
    (first base with one, as the method resolution order finds it)."""
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name == "__init__":
            args = node.args
            return {
                a.arg: _default(d)
                for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)
                if d is not None
            }
    for base in _bases(cls):
        if base in classes:
            return _parameters(classes[base], classes)
    return {}


def _default(node: ast.expr) -> str:
    try:
        return repr(ast.literal_eval(node))
    except ValueError:
        return ast.unparse(node)


def _folder(package: str) -> Path:
    # find_spec imports the parents of `package` (clusterfed: light), never
    # `package` itself.
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"{package} not found")
    return Path(next(iter(spec.submodule_search_locations)))


def _source(package: str, module: str) -> ast.Module:
    return _parse(_folder(package) / module)


@cache
def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _table(tree: ast.Module, name: str) -> dict[str, ast.expr]:
    """The string-keyed dict literal assigned to `name` at module level."""
    for node in tree.body:
        target: ast.expr | None = None
        value: ast.expr | None = None
        if isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        if isinstance(target, ast.Name) and target.id == name:
            if not isinstance(value, ast.Dict):
                break
            return {
                k.value: v
                for k, v in zip(value.keys, value.values, strict=True)
                if isinstance(k, ast.Constant) and isinstance(k.value, str)
            }
    raise ValueError(f"no dict literal {name} found")


def _docstring(tree: ast.Module, function: str) -> str | None:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == function:
            return ast.get_docstring(node)
    raise ValueError(f"no function {function} found")
