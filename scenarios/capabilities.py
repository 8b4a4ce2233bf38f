"""Whether a scenario's algorithm can run the scenario's settings.

The algorithm must exist and take its `algorithm_params`; then what its
strategy declares (`Strategy.supports_async`, `async_only`, `supports_dp`,
`folds`, `honours_aggregator`) decides whether it runs the mode, the DP
mechanism and the aggregator asked for. `Scenario` runs these checks when it
is validated: a run that would quietly ignore a setting config.json records
is refused before anything runs, with the algorithms that would run it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from clusterfed.actors.clock import Fraction
from clusterfed.algorithms import Strategy, algorithms, make
from clusterfed.algorithms.registry import resolve
from clusterfed.errors import ConfigError

from .robustness import check_aggregator

if TYPE_CHECKING:
    from .spec import Scenario


def check_algorithm(scenario: Scenario) -> None:
    """Refuse an unknown algorithm, parameters it does not take, or async
    mode for a strategy without one.

    Raises:
        ValueError: with the algorithm's own message.
    """
    # Fails here, before anything runs, with the algorithm's own message.
    try:
        resolve(scenario.algorithm)
    except ConfigError as exc:
        raise ValueError(f"algorithm: {exc}") from exc
    try:
        strategy = make(scenario.algorithm, **scenario.params_of(scenario.algorithm))
    except ConfigError as exc:
        raise ValueError(f"algorithm_params.{scenario.algorithm}: {exc}") from exc
    if scenario.mode == "async" and not strategy.supports_async:
        have = ", ".join(n for n, c in algorithms().items() if c.supports_async)
        raise ValueError(
            f"mode: {scenario.algorithm!r} has no asynchronous mode"
            f' ({have} have one); use mode = "sync"'
        )


def check_capabilities(scenario: Scenario) -> None:
    """Refuse a mode, a DP mechanism or an aggregator the strategy does not
    declare it runs.

    Raises:
        ValueError: naming the setting and the algorithms that run it.
    """
    # What the strategy declares (`Strategy.async_only`, `supports_dp`,
    # `honours_aggregator`) decides; a run that would quietly ignore a
    # setting config.json records is refused instead.
    cls = resolve(scenario.algorithm)
    if scenario.mode == "sync" and cls.async_only:
        raise ValueError(
            f"mode: {scenario.algorithm!r} has no synchronous mode;"
            ' use mode = "async" (--set mode=async)'
        )
    if scenario.dp is not None and scenario.dp.mechanism == "client":
        _check_client_dp(scenario, cls)
    elif scenario.dp is not None and not cls.supports_dp:
        raise ValueError(
            f"dp: {scenario.algorithm!r} has no local-DP training; use dp = off"
        )
    rule = scenario.aggregator.name
    if scenario.aggregator.is_mean:
        return
    if scenario.mode == "sync" and not cls.honours_aggregator:
        have = ", ".join(n for n, c in algorithms().items() if c.honours_aggregator)
        raise ValueError(
            f"aggregator: {scenario.algorithm!r} does not honour"
            f' aggregator = "{rule}" ({have} honour one); use'
            ' aggregator = "mean"'
        )
    check_aggregator(scenario)  # the rule's own assumption (robustness.py)


def _check_client_dp(scenario: Scenario, cls: type[Strategy[Any]]) -> None:
    # Client-level DP adds its noise to each cluster's sum of clipped
    # updates, so the round must be one: a strategy that folds, every
    # update in its cluster's sum (no robust rule, no ranking deadline),
    # a synchronous round.
    have = ", ".join(n for n, c in algorithms().items() if c.folds and not c.async_only)
    if not cls.folds or cls.async_only:
        raise ValueError(
            f"dp.mechanism: {scenario.algorithm!r} does not aggregate a round as"
            f" each cluster's sum of updates, where client-level DP adds its"
            f" noise: it reads each client's own update, which no noise on a"
            f" sum covers ({have} aggregate sums); use one of them or"
            ' dp.mechanism = "sample"'
        )
    if scenario.mode == "async":
        raise ValueError(
            "dp.mechanism: client-level DP noises a synchronous round's sums;"
            ' use mode = "sync"'
        )
    if not scenario.aggregator.is_mean:
        raise ValueError(
            "dp.mechanism: client-level DP noises the mean of the clipped"
            f' updates; aggregator = "{scenario.aggregator.name}" is not one'
        )
    if isinstance(scenario.deadline, Fraction):
        raise ValueError(
            "dp.mechanism: a fraction deadline ranks every reply before any"
            " is summed; client-level DP needs the sums as replies arrive"
            ' (deadline policy "wait_all" or "deadline")'
        )
