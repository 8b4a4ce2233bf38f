"""The algorithm registry at its edges: every refusal said whole, names of
one's own (`package.module:Class`), entry points that fail, identity policies."""

from __future__ import annotations

import importlib
import importlib.metadata
import re
import sys
from abc import abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clusterfed.algorithms import algorithms, make, registry
from clusterfed.algorithms.fedavg import FedAvg
from clusterfed.algorithms.gradloss import GradLossIdentity
from clusterfed.algorithms.registry import (
    is_builtin,
    make_policy,
    register,
    resolve,
)
from clusterfed.errors import ConfigError

CASES = '''
from abc import abstractmethod

from clusterfed.algorithms.base import Strategy
from clusterfed.algorithms.fedavg import FedAvg


class FedMedian(FedAvg):
    """The one public class near "FedMedain"."""


class _FedMedian(FedAvg):
    """Private: never offered as a hint."""


def fedmedian():
    """A function: never offered as a hint."""


class Alpha1: ...
class Alpha2: ...
class Alpha3: ...
class Alpha4: ...


class Holder:
    class Inner(FedAvg):
        """Reached as Holder.Inner."""


class Bare(FedAvg):
    def __init__(self) -> None:
        super().__init__()


class Params(FedAvg):
    def __init__(self, *, alpha: float = 1.0, alpha_two: float = 2.0) -> None:
        super().__init__()


class TwoAbstract(Strategy):
    @abstractmethod
    def extra(self) -> None: ...


class NotAStrategy: ...
'''


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A module of one's own, `registry_cases`, on sys.path."""
    folder = tmp_path_factory.mktemp("cases")
    (folder / "registry_cases.py").write_text(CASES)
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(folder))
        yield "registry_cases"
        sys.modules.pop("registry_cases", None)


def _refused(name: str, **params: Any) -> str:
    with pytest.raises(ConfigError) as caught:
        make(name, **params)
    return str(caught.value)


# -- unknown names and parameters ---------------------------------------------------


def test_an_unknown_name_offers_the_three_closest_and_every_known_name() -> None:
    known = ", ".join(algorithms())
    tail = f"; known: {known}; or name one of your own as package.module:Class"
    message = _refused("fedav")  # close to fedavg, fedac, fedacp and fedasync
    assert message.endswith(tail)
    assert re.fullmatch(
        r"unknown algorithm 'fedav' \(did you mean 'fedavg' or '\w+' or '\w+'\?\)",
        message.removesuffix(tail),
    )
    assert _refused("qqqq") == f"unknown algorithm 'qqqq'{tail}"  # nothing close


def test_unknown_parameters_are_all_named_with_their_closest() -> None:
    assert _refused("fedprox", muu=1, fractoin=1) == (
        "fedprox has no parameter 'fractoin', 'muu' (did you mean 'fraction',"
        " 'mu'?); it takes: mu, fraction, server_lr"
    )
    assert _refused("fedprox", zzz=1) == (
        "fedprox has no parameter 'zzz'; it takes: mu, fraction, server_lr"
    )


def test_an_unknown_parameter_gets_only_its_closest(cases: str) -> None:
    # "alphaa" is close to both; only "alpha", the closer, is offered.
    assert _refused(f"{cases}:Params", alphaa=1) == (
        f"{cases}:Params has no parameter 'alphaa' (did you mean 'alpha'?);"
        " it takes: alpha, alpha_two"
    )


def test_a_strategy_without_parameters_takes_none(cases: str) -> None:
    assert _refused(f"{cases}:Bare", x=1) == (
        f"{cases}:Bare has no parameter 'x'; it takes: none"
    )


# -- package.module:Class -------------------------------------------------------------


def test_a_name_without_module_or_class_is_refused_whole(cases: str) -> None:
    for spec in (":FedMedian", f"{cases}:"):
        assert _refused(spec) == f"algorithm {spec!r}: expected package.module:Class"


def test_a_module_that_does_not_import_is_refused_whole() -> None:
    assert _refused("no_such_module:Strategy") == (
        "algorithm 'no_such_module:Strategy': cannot import 'no_such_module'"
        " (No module named 'no_such_module'); is it installed, or in the current"
        " folder or on PYTHONPATH?"
    )


def test_a_class_path_splits_at_the_first_colon_and_follows_dots(cases: str) -> None:
    assert isinstance(make(f"{cases}:Holder.Inner"), FedAvg)
    assert _refused(f"{cases}:FedMedian:x") == (
        f"algorithm '{cases}:FedMedian:x': module {cases} has no 'FedMedian:x';"
        " did you mean FedMedian?"
    )


def test_the_hint_for_a_missing_class_names_public_classes_only(cases: str) -> None:
    assert _refused(f"{cases}:FedMedain") == (
        f"algorithm '{cases}:FedMedain': module {cases} has no 'FedMedain';"
        " did you mean FedMedian?"
    )
    assert _refused(f"{cases}:Zzz") == (
        f"algorithm '{cases}:Zzz': module {cases} has no 'Zzz'"
    )
    three = _refused(f"{cases}:Alpha")  # four as close: the hint names three
    assert re.fullmatch(
        rf"algorithm '{cases}:Alpha': module {cases} has no 'Alpha';"
        r" did you mean Alpha\d or Alpha\d or Alpha\d\?",
        three,
    )


def test_a_class_that_is_no_strategy_is_refused_whole(cases: str) -> None:
    assert re.fullmatch(
        rf"algorithm '{cases}:NotAStrategy': <class '{cases}\.NotAStrategy'> is"
        " not a Strategy subclass",
        _refused(f"{cases}:NotAStrategy"),
    )


def test_an_abstract_strategy_is_refused_naming_its_abstract_methods(
    cases: str,
) -> None:
    assert _refused(f"{cases}:TwoAbstract") == (
        f"algorithm '{cases}:TwoAbstract': TwoAbstract leaves abstract methods:"
        " aggregate, extra"
    )


def test_a_module_in_the_current_folder_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here = [p for p in sys.path if p not in ("", str(tmp_path))]
    for module, path, added in (
        ("registry_here_a", here, [str(tmp_path)]),  # cwd appended
        ("registry_here_b", ["", *here], []),  # "" already finds the cwd
    ):
        (tmp_path / f"{module}.py").write_text(
            "from clusterfed.algorithms.fedavg import FedAvg\nclass Here(FedAvg): ...\n"
        )
        importlib.invalidate_caches()
        monkeypatch.chdir(tmp_path)
        monkeypatch.setattr(sys, "path", list(path))
        monkeypatch.delitem(sys.modules, module, raising=False)
        assert isinstance(make(f"{module}:Here"), FedAvg)
        assert sys.path == [*path, *added]
        sys.modules.pop(module, None)


# -- registered names ---------------------------------------------------------------


def test_registering_something_that_is_no_strategy_names_the_name() -> None:
    with pytest.raises(ConfigError) as caught:
        register("not-a-strategy", int)  # type: ignore[arg-type]
    assert str(caught.value) == (
        "algorithm 'not-a-strategy': <class 'int'> is not a Strategy subclass"
    )


def test_only_this_packages_algorithms_are_builtin() -> None:
    assert is_builtin("fedavg") and is_builtin("cafa")
    assert not is_builtin("tests_plugin:FedMedian") and not is_builtin("fedavgg")


def test_an_abstract_strategy_with_a_name_is_not_an_algorithm() -> None:
    class Abstract(FedAvg):
        name = "registry-abstract"

        @abstractmethod
        def extra(self) -> None: ...

    with pytest.raises(ConfigError, match="^unknown algorithm 'registry-abstract'"):
        resolve("registry-abstract")
    assert Abstract.name == "registry-abstract"  # alive until here


# -- entry points --------------------------------------------------------------------


def test_a_plug_in_that_fails_to_load_is_named_with_its_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    registry._plugins()  # the installed plug-ins, found before these appear
    group = registry.ENTRY_POINTS

    def point(name: str, value: str, group: str = group) -> Any:
        return importlib.metadata.EntryPoint(name=name, value=value, group=group)

    points = importlib.metadata.EntryPoints(
        [
            point("ep-ok", "json:JSONDecoder", group="console_scripts"),  # a decoy
            point("ep-first", "no_such_module:X"),
            point("ep-ok", "tests_plugin:FedMedian"),
            point("ep-broken", "no_such_module:Strategy"),
            point("ep-class", "json:JSONDecoder"),
        ]
    )
    monkeypatch.setattr(registry, "entry_points", lambda **kw: points.select(**kw))
    from tests_plugin import FedMedian

    assert resolve("ep-ok") is FedMedian
    with pytest.raises(ConfigError) as broken:
        resolve("ep-broken")
    assert str(broken.value) == (
        "algorithm 'ep-broken' (plug-in 'no_such_module:Strategy'):"
        " No module named 'no_such_module'"
    )
    with pytest.raises(ConfigError) as wrong:
        resolve("ep-class")
    assert str(wrong.value) == (
        "algorithm 'ep-class' (plug-in 'json:JSONDecoder'): algorithm"
        " 'json:JSONDecoder': <class 'json.decoder.JSONDecoder'> is not a Strategy"
        " subclass"
    )


# -- identity policies ---------------------------------------------------------------


def test_identity_policies_are_made_by_name_and_refused_whole() -> None:
    policy = make_policy("gradloss", {"lam": 0.5})
    assert isinstance(policy, GradLossIdentity) and policy.lam == 0.5
    with pytest.raises(ConfigError) as unknown:
        make_policy("no-such-policy", {})
    assert str(unknown.value) == (
        "unknown identity policy 'no-such-policy';"
        " known: feddrift, fedem, fedsoft, gradloss, min_loss"
    )
    with pytest.raises(ConfigError) as bad:
        make_policy("gradloss", {"lam": 2.0})
    assert str(bad.value) == "identity policy gradloss: lam must be in [0, 1], got 2.0"
