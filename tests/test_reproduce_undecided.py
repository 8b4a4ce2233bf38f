"""What deciding the undecided claims would cost (bench/reproduce/undecided.py):
the projected seed count against the claim's own verdict on a sample of that
many seeds with the measured mean and spread, the sign test's count for an
event, and a total that counts shared runs once."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from reproduce.claims import FAILS, HOLDS, Claim, Claims, cannot_tell  # noqa: E402
from reproduce.undecided import (  # noqa: E402
    MOST_SEEDS,
    seeds_to_decide,
    undecided_lines,
)


def sample(n: int, mean: float, std: float) -> tuple[float, ...]:
    """n values with exactly this mean and sample standard deviation."""
    z = np.random.default_rng(n).normal(size=n)
    z = (z - z.mean()) / z.std(ddof=1)
    return tuple(float(v) for v in z * std + mean)


def claim(values: tuple[float, ...], **kw: object) -> Claim:
    return Claim("k", "P", "T", "a above b", values, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("mean", "std"), [(0.03, 0.02), (-0.01, 0.03), (0.002, 0.02), (0.5, 0.1)]
)
def test_the_projection_is_where_the_verdict_would_turn(
    mean: float, std: float
) -> None:
    now = claim(sample(3, mean, std))
    needed = seeds_to_decide(now)
    assert needed is not None
    decided = claim(sample(needed, mean, std)).verdict
    assert decided == (HOLDS if mean > 0 else FAILS)
    if needed > 3:
        assert claim(sample(needed - 1, mean, std)).verdict == cannot_tell(needed - 1)


def test_no_count_decides_a_mean_of_zero_or_a_split_event() -> None:
    assert seeds_to_decide(claim(sample(3, 0.0, 0.02))) is None
    assert seeds_to_decide(claim(sample(3, 1e-6, 1.0))) is None  # past MOST_SEEDS
    split = Claim("k", "P", "T", "event", passed=(True, False, True))
    assert seeds_to_decide(split) is None
    every = Claim("k", "P", "T", "event", passed=(True, True, True))
    assert seeds_to_decide(every) == 6


def test_shared_runs_are_counted_once_at_the_most_seeds_asked() -> None:
    claims = Claims()
    run = (("exp a", 60.0),)
    claims.add(Claim("one", "P", "T", "x", sample(3, 0.03, 0.02), seed_costs=run))
    claims.add(Claim("two", "P", "T", "y", sample(3, 0.01, 0.02), seed_costs=run))
    claims.add(Claim("three", "P", "T", "z", sample(3, 0.0, 0.02), seed_costs=run))
    more = [seeds_to_decide(c) for c in claims]
    assert more[0] is not None and more[1] is not None and more[2] is None
    text = "\n".join(undecided_lines(claims))
    total = max(more[0], more[1]) - 3  # the same run: its most seeds, once
    assert f"takes about {total * 60 / 3600:.1f} hours" in text
    assert f"1 would stay undecided at any count up to {MOST_SEEDS:,}" in text
    assert f"| P, T: z | 3 | over {MOST_SEEDS:,} | — |" in text
    assert f"| P, T: x | 3 | {more[0]} | {(more[0] - 3):.0f} min |" in text


def test_one_seed_is_too_few_to_project_from() -> None:
    claims = Claims()
    claims.add(Claim("one", "P", "T", "x", (0.02,), seed_costs=(("exp a", 60.0),)))
    text = "\n".join(undecided_lines(claims))
    assert "| P, T: x | 1 | — (one seed) | — |" in text
    assert "0 would stay undecided" in text and "1 has one seed" in text


def test_nothing_undecided_says_nothing() -> None:
    claims = Claims()
    claims.add(claim(sample(3, 0.5, 0.01)))
    assert undecided_lines(claims) == []
