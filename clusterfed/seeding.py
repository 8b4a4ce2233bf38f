"""Every random stream in a run derives from the scenario seed and a key path."""

from __future__ import annotations

import numpy as np


def derive_seed(seed: int, *keys: int) -> int:
    """A 63-bit seed for the stream named by `keys` under `seed`.

    Streams are independent of each other and of the order they are asked for,
    so a client's randomness in round 7 does not depend on who trained before.
    numpy's SeedSequence pads its entropy with zeros to 4 words (a seed
    under 2**32 is one word, each small key one), so paths of up to 4 words
    that differ only by trailing zeros are one stream: `(seed, a, 0)` is
    `(seed, a)` and `(seed, a, b, 0)` is `(seed, a, b)`, while a path longer
    than 4 words is told apart from a shorter one. Give sibling streams
    nonzero last keys.
    """
    state = np.random.SeedSequence([seed, *keys]).generate_state(2, dtype=np.uint32)
    return int((int(state[0]) << 31) ^ int(state[1]))


def numpy_rng(seed: int, *keys: int) -> np.random.Generator:
    return np.random.default_rng(derive_seed(seed, *keys))
