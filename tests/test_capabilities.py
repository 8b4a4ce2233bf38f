"""Capabilities a strategy declares (`folds`, `honours_aggregator`,
`async_only`): each is checked where the class is written or where the
scenario is validated, so a run never quietly ignores what config.json says."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from clusterfed.algorithms import (
    ClientUpdate,
    ServerState,
    Strategy,
    algorithms,
    registry,
)
from clusterfed.algorithms.base import streams
from clusterfed.algorithms.fedavg import FedAvg
from clusterfed.algorithms.robust import Median
from clusterfed.cli import main
from clusterfed.errors import ScenarioError
from clusterfed.scenarios import load_scenario, with_overrides
from helpers import small_scenario

HONOURING = (
    "cafa, cfl, dcfl, fedac, fedacp, fedavg, feddrift, feddrift-eager, fedprox,"
    " flhc, gradloss, ifca, ocfl, pacfl"
)


def _overridden(algorithm: str, *assignments: str) -> Any:
    return with_overrides(
        small_scenario(), assignments, algorithms=[algorithm], algorithm=algorithm
    )


def _refusal(algorithm: str, *assignments: str) -> str:
    with pytest.raises(ScenarioError) as refused:
        _overridden(algorithm, *assignments)
    return str(refused.value).removeprefix("scenario 'small' with overrides: ")


class _OwnStep(Strategy[ServerState]):
    """A plug-in with its own aggregation: one global model moved by the
    plain mean of the deltas, whatever the scenario's aggregator says."""

    name = "capabilities-own-step"
    state_type = ServerState

    def aggregate(
        self,
        state: ServerState,
        round: int,
        updates: Sequence[ClientUpdate],
        rng: np.random.Generator,
    ) -> ServerState:
        deltas = [u.delta for u in updates if u.ok and u.delta is not None]
        if not deltas:
            return state
        step = np.mean(deltas, axis=0)
        return state.replace(models={k: m + step for k, m in state.models.items()})


class _Honours(_OwnStep):
    name = "capabilities-honours"
    honours_aggregator = True


class _Plain(FedAvg):
    """Overrides `aggregate` without declaring whether it honours the
    aggregator: it is taken not to."""

    name = "capabilities-plain"
    folds = False

    def aggregate(self, state: Any, round: int, updates: Any, rng: Any) -> Any:
        return super().aggregate(state, round, updates, rng)


@pytest.fixture
def own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        registry,
        "_REGISTERED",
        {c.name: c for c in (_OwnStep, _Honours, _Plain)},
    )


# -- folds: whether the server streams a round ---------------------------------


def test_streaming_follows_the_declaration_and_a_mean_aggregator() -> None:
    declared = {n for n, c in algorithms().items() if c.folds}
    assert declared == {
        "fedasync",
        "fedavg",
        "fedbuff",
        "fedprox",
        "gradloss",
        "ifca",
        "pacfl",
    }
    assert streams(FedAvg()) and not streams(_OwnStep())
    median = FedAvg()
    median.aggregator = Median()
    assert not streams(median)  # a median needs every update, whatever folds says


def test_a_subclass_that_overrides_aggregate_alone_is_refused_where_written() -> None:
    # Its `aggregate` would never be called while it inherits `folds = True`.
    with pytest.raises(TypeError) as refused:

        class Logs(FedAvg):
            def aggregate(self, state: Any, round: int, updates: Any, rng: Any) -> Any:
                return super().aggregate(state, round, updates, rng)

    assert str(refused.value).endswith(
        ".Logs overrides aggregate but inherits folds = True, so aggregate would"
        " never be called: set folds = False or override aggregate_sums"
    )

    class Declared(FedAvg):  # vouches that FedAvg's sums still equal it
        folds = True

        def aggregate(self, state: Any, round: int, updates: Any, rng: Any) -> Any:
            return super().aggregate(state, round, updates, rng)

    class Both(FedAvg):  # the folding pair, overridden together
        def aggregate(self, state: Any, round: int, updates: Any, rng: Any) -> Any:
            return super().aggregate(state, round, updates, rng)

        def aggregate_sums(
            self, state: Any, round: int, updates: Any, sums: Any, rng: Any
        ) -> Any:
            return super().aggregate_sums(state, round, updates, sums, rng)

    assert streams(Declared()) and streams(Both()) and not streams(_Plain())


def test_a_mixin_that_writes_aggregate_cannot_borrow_the_declarations() -> None:
    # Its aggregate comes first in the method order: FedAvg's folds and
    # honours_aggregator vouch for FedAvg's aggregate, not for the mixin's.
    class Audit:
        def aggregate(self, state: Any, round: int, updates: Any, rng: Any) -> Any:
            raise AssertionError("never called while the round folds")

    with pytest.raises(TypeError, match="takes aggregate from .*Audit but inherits"):

        class Audited(Audit, FedAvg):
            pass

    class Plain(Audit, FedAvg):
        folds = False

    assert not Plain.honours_aggregator and not streams(Plain())


def test_folds_without_its_hooks_is_refused_where_written() -> None:
    with pytest.raises(TypeError) as refused:

        class Sums(_OwnStep):
            folds = True

    assert str(refused.value).endswith(
        ".Sums declares folds = True without fold_weight: define fold_weight"
        " or set folds = False"
    )


# -- honours_aggregator: a robust rule only where aggregation applies it -------


def test_every_built_in_but_the_async_only_ones_honours_the_aggregator() -> None:
    honouring = [n for n, c in algorithms().items() if c.honours_aggregator]
    assert ", ".join(honouring) == HONOURING
    assert not Strategy.honours_aggregator  # a plug-in declares it or does not


def test_a_strategy_that_does_not_honour_a_robust_aggregator_is_refused(
    own: None,
) -> None:
    assert _refusal("capabilities-own-step", "aggregator=median") == (
        "aggregator: 'capabilities-own-step' does not honour aggregator ="
        f' "median" ({HONOURING} honour one); use'
        ' aggregator = "mean"'
    )
    # Overriding `aggregate` without declaring it takes the declaration away.
    assert "'capabilities-plain' does not honour" in _refusal(
        "capabilities-plain", "aggregator=trimmed_mean"
    )
    # The mean is every strategy's own: nothing to honour.
    assert _overridden("capabilities-own-step").aggregator.kind == "mean"


def test_a_mixing_step_before_the_mean_is_refused_where_nothing_applies_it() -> None:
    # `nnm+mean` mixes the updates first: not the mean every strategy owns.
    assert _refusal("fedem", "aggregator=nnm+mean") == (
        "aggregator: 'fedem' does not honour aggregator ="
        f' "nnm+mean" ({HONOURING} honour one); use aggregator = "mean"'
    )
    assert 'would ignore aggregator = "bucketing+mean"' in _refusal(
        "fedasync", "mode=async", "aggregator=bucketing+mean"
    )
    assert _overridden("fedavg", "aggregator=nnm+mean").aggregator.pre == ("nnm",)


def test_a_strategy_that_honours_the_aggregator_gets_it(own: None) -> None:
    scenario = _overridden("capabilities-honours", "aggregator=krum")
    assert scenario.aggregator.kind == "krum"
    for name in ("fedavg", "ocfl", "gradloss"):
        assert _overridden(name, "aggregator=median").aggregator.kind == "median"


def test_a_plug_in_that_ignores_the_aggregator_is_refused_on_the_command_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["run", "quickstart", "--algorithm", "tests_plugin:FedMedian"]
    assert main([*args, "--set", "aggregator=median", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert (
        "aggregator: 'tests_plugin:FedMedian' does not honour aggregator ="
        ' "median"' in err
    )


def test_the_async_mode_refuses_a_rule_only_where_no_buffer_folds_it() -> None:
    # A buffered strategy folds each full buffer by the rule; FedAsync mixes
    # each update alone, so a rule would be ignored there.
    assert _overridden("ifca", "mode=async", "aggregator=median").mode == "async"
    assert _refusal("fedasync", "mode=async", "aggregator=median") == (
        "aggregator: 'fedasync' in mode = \"async\" folds each update alone and"
        ' would ignore aggregator = "median"; use a buffered strategy (fedbuff,'
        ' ifca, dcfl) or aggregator = "mean"'
    )
    # Krum in a buffer of 3 updates: n > 2f + 2 fails for f = 1.
    assert "at least 5 updates, not 3 (a buffer of buffer_size = 3 updates)" in (
        _refusal("ifca", "mode=async", "aggregator=krum")
    )
    assert _overridden("dcfl", "mode=async").mode == "async"


# -- async_only: no synchronous round under an asynchronous algorithm's name ---


@pytest.mark.parametrize("name", ["fedasync", "fedbuff"])
def test_an_async_only_algorithm_in_sync_mode_is_refused(name: str) -> None:
    assert _refusal(name) == (
        f'mode: {name!r} has no synchronous mode; use mode = "async" (--set mode=async)'
    )
    assert _overridden(name, "mode=async").mode == "async"


def test_only_fedasync_and_fedbuff_are_async_only() -> None:
    only = [n for n, c in algorithms().items() if c.async_only]
    assert only == ["fedasync", "fedbuff"]
    assert all(algorithms()[n].supports_async for n in only)


def test_async_stragglers_with_fedbuff_needs_mode_async_on_the_command_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["run", "async-stragglers", "--algorithm", "fedbuff", "--quiet"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err == (
        "clusterfed: error: scenario 'async-stragglers' with overrides: mode:"
        " 'fedbuff' has no synchronous mode; use mode = \"async\""
        " (--set mode=async)\n"
    )
    scenario = with_overrides(
        load_scenario("async-stragglers"), ["mode=async"], algorithm="fedbuff"
    )
    assert (scenario.algorithm, scenario.mode) == ("fedbuff", "async")


def test_async_only_without_an_async_mode_is_refused_where_written() -> None:
    with pytest.raises(TypeError) as refused:

        class Half(_OwnStep):
            async_only = True

    assert str(refused.value).endswith(
        ".Half declares async_only = True without supports_async = True:"
        " set both or neither"
    )
