"""Every random stream in a run derives from the scenario seed and a key path."""

from __future__ import annotations

import numpy as np


def derive_seed(seed: int, *keys: int) -> int:
    """A 63-bit seed for the stream named by `keys` under `seed`.

    Streams are independent of each other and of the order they are asked for,
    so a client's randomness in round 7 does not depend on who trained before.
    A path's trailing zeros do not count (numpy's SeedSequence reads
    `(seed, a, 0)` as `(seed, a)`): give sibling streams nonzero last keys.
    """
    state = np.random.SeedSequence([seed, *keys]).generate_state(2, dtype=np.uint32)
    return int((int(state[0]) << 31) ^ int(state[1]))


def numpy_rng(seed: int, *keys: int) -> np.random.Generator:
    return np.random.default_rng(derive_seed(seed, *keys))
