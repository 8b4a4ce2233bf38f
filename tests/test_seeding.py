"""Where named random streams coincide (clusterfed/seeding.py): numpy's
SeedSequence pads to 4 words, so short paths ending in zeros are the shorter
path's stream and longer ones are not."""

from __future__ import annotations

from clusterfed.scenarios.build import TEST_SET_STREAM
from clusterfed.seeding import derive_seed


def test_trailing_zeros_count_only_past_four_words() -> None:
    assert derive_seed(7, 4, 0) == derive_seed(7, 4)
    assert derive_seed(7, 4, 2, 0) == derive_seed(7, 4, 2)
    assert derive_seed(7, 4, 2, 0, 0) != derive_seed(7, 4, 2)
    assert derive_seed(7, 4, 2, 5, 0) != derive_seed(7, 4, 2, 5)
    # A seed past 2**32 is two words: one key fewer fits.
    assert derive_seed(2**40, 4, 0) == derive_seed(2**40, 4)
    assert derive_seed(2**40, 4, 2, 0) != derive_seed(2**40, 4, 2)


def test_a_class_mix_redraw_at_round_0_is_not_the_first_test_sets_stream() -> None:
    # (TEST_SET_STREAM, client, round, event) against (TEST_SET_STREAM, client)
    for seed in (0, 1, 2**40):
        for client in range(5):
            first = derive_seed(seed, TEST_SET_STREAM, client)
            assert derive_seed(seed, TEST_SET_STREAM, client, 0, 0) != first
