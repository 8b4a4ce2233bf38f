"""Sampling a population's round in O(K): uniform and with availability."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from clusterfed.actors.availability import Diurnal, DiurnalSchedule
from clusterfed.actors.sampling import (
    round_size,
    sample_online,
    sample_uniform,
)
from clusterfed.errors import ConfigError


def test_uniform_sample_costs_k_not_n() -> None:
    # Out of 10¹² ids: anything that lists the population would never end.
    ids = sample_uniform(10**12, 1000, np.random.default_rng(0))
    assert len(ids) == 1000 and len(set(ids.tolist())) == 1000
    assert np.all(np.diff(ids) > 0) and ids.max() < 10**12


def test_uniform_sample_is_seeded_and_uniform() -> None:
    a = sample_uniform(10**6, 1000, np.random.default_rng(3))
    b = sample_uniform(10**6, 1000, np.random.default_rng(3))
    np.testing.assert_array_equal(a, b)
    counts = Counter(
        int(c)
        for seed in range(2000)
        for c in sample_uniform(20, 5, np.random.default_rng(seed))
    )
    # Each of 20 ids in a quarter of 2,000 draws: 500 ± 5 standard errors.
    assert all(
        abs(counts[c] - 500) < 5 * np.sqrt(2000 * 0.25 * 0.75) for c in range(20)
    )


def test_online_sample_asks_about_k_over_the_online_share_clients() -> None:
    asked: list[int] = []

    def online(cid: int) -> bool:
        asked.append(cid)
        return cid % 2 == 0

    ids = sample_online(10**6, 1000, np.random.default_rng(1), online)
    assert len(ids) == 1000 and all(c % 2 == 0 for c in ids.tolist())
    assert len(set(ids.tolist())) == 1000
    assert len(asked) == len(set(asked))  # nobody asked twice
    assert len(asked) < 2600  # 2,000 expected at half online, not 10⁶


def test_online_sample_is_uniform_over_the_online_clients() -> None:
    counts = Counter(
        int(c)
        for seed in range(2000)
        for c in sample_online(10, 2, np.random.default_rng(seed), lambda c: c < 5)
    )
    assert set(counts) <= set(range(5))
    assert all(abs(counts[c] - 800) < 5 * np.sqrt(2000 * 0.4 * 0.6) for c in range(5))


def test_online_sample_with_too_few_online_stops_at_its_budget() -> None:
    asked = []

    def online(cid: int) -> bool:
        asked.append(cid)
        return cid == 7

    ids = sample_online(10**6, 100, np.random.default_rng(2), online, max_draws=500)
    assert len(asked) == 500 and len(ids) <= 1
    small = sample_online(10, 3, np.random.default_rng(2), lambda c: c in (1, 4))
    assert small.tolist() == [1, 4]


def test_diurnal_sample_touches_only_the_clients_it_asked_about() -> None:
    sched = DiurnalSchedule(Diurnal(period_s=600, online_fraction=0.5), seed=5)
    ids = sample_online(
        10**6, 1000, np.random.default_rng(4), lambda c: sched.online(c, 123.0)
    )
    assert len(ids) == 1000 and all(sched.online(int(c), 123.0) for c in ids)
    assert len(sched._phases) < 2600  # phases drawn for the asked, not for 10⁶


def test_round_size_reads_per_round_or_fraction() -> None:
    assert round_size(10**6, per_round=1000, fraction=None) == 1000
    assert round_size(10, per_round=1000, fraction=None) == 10
    assert round_size(10**6, per_round=None, fraction=0.001) == 1000
    assert round_size(10, per_round=None, fraction=0.01) == 1
    with pytest.raises(ConfigError, match="one of per_round"):
        round_size(10, per_round=2, fraction=0.5)
    with pytest.raises(ConfigError, match="fraction must be"):
        round_size(10, per_round=None, fraction=1.5)
    with pytest.raises(ConfigError, match="per_round must be"):
        round_size(10, per_round=0, fraction=None)
    with pytest.raises(ConfigError, match="cannot sample"):
        sample_uniform(5, 6, np.random.default_rng(0))
