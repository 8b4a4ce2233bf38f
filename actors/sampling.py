"""Sampling a round's clients out of a registered population in O(K).

A cross-device population registers far more clients than take part in a
round (10⁶ registered, 10³ a round), so a round's sample is drawn by id
without listing, touching or asking about every registered client:

- uniform: K distinct ids of 0..N-1 by numpy's `Generator.choice(N, K,
  replace=False)`, which for K ≪ N runs Floyd's set-based algorithm in
  O(K) time and memory (numpy's own, not written here; the test draws K
  out of 10¹² ids to hold it to that);
- with availability (a diurnal cycle, a trace): candidates are drawn
  uniformly in batches and the online ones kept, in draw order, until K
  are found, so a round asks the schedule about K / (online share) clients
  on average; with too few online (a trace that names only a few), it
  stops after `max_draws` candidates and the round gets those it found.

`per_round` and `fraction` say K: K itself, or round(fraction · N) (at
least one). The existing scenarios sample their members through the
strategy (`algorithms.fedavg.sample_clients`) as before; this module serves
populations only, so their numbers do not move.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from clusterfed.errors import ConfigError

# Candidates drawn at most per id sampled when clients may be offline: with
# 2% online a round still finds K; fewer online ends its search early.
DRAWS_PER_SLOT = 50


def round_size(n: int, *, per_round: int | None, fraction: float | None) -> int:
    """K out of `n` registered: `per_round` (at most n) or round(fraction·n),
    at least 1.

    Raises:
        ConfigError: neither or both given, or a value out of range.
    """
    if (per_round is None) == (fraction is None):
        raise ConfigError("give one of per_round (K) or fraction, not both/neither")
    if per_round is not None:
        if per_round < 1:
            raise ConfigError(f"per_round must be >= 1, got {per_round}")
        return min(per_round, n)
    assert fraction is not None
    if not 0 < fraction <= 1:
        raise ConfigError(f"fraction must be in (0, 1], got {fraction}")
    return max(1, round(fraction * n))


def sample_uniform(n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """K distinct ids of 0..n-1, sorted, in O(K) for K ≪ n."""
    if not 1 <= k <= n:
        raise ConfigError(f"cannot sample {k} of {n} clients")
    return np.sort(rng.choice(n, size=k, replace=False))


def sample_online(
    n: int,
    k: int,
    rng: np.random.Generator,
    online: Callable[[int], bool],
    *,
    max_draws: int | None = None,
) -> np.ndarray:
    """Up to K distinct ids of 0..n-1 that `online` says are online, sorted.

    Candidates come uniformly, without repeats, in batches of K; each is
    asked about once. Every online client is equally likely to be chosen.
    Stops after `max_draws` candidates (default DRAWS_PER_SLOT·K, at most
    n): fewer than K come back when fewer are online.
    """
    if not 1 <= k <= n:
        raise ConfigError(f"cannot sample {k} of {n} clients")
    budget = min(n, max_draws if max_draws is not None else DRAWS_PER_SLOT * k)
    seen: set[int] = set()
    chosen: list[int] = []
    while len(chosen) < k and len(seen) < budget:
        batch = rng.integers(0, n, size=min(k, budget - len(seen)))
        for cid in batch.tolist():
            if cid in seen:
                continue
            seen.add(cid)
            if online(cid):
                chosen.append(cid)
                if len(chosen) == k:
                    break
            if len(seen) >= budget:
                break
    return np.sort(np.asarray(chosen, dtype=np.int64))
