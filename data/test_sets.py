"""Per-client test sets drawn from a dataset's own test split.

A client's reported accuracy should be measured on data it never saw, from
its own distribution. Its 20 % hold-out of the training split is that, but it
is also what the algorithms decide on (CAFA's peer scores, identity choices),
so the papers' test accuracy needs a set of its own: images of the official
test split, drawn with the client's label proportions. The client's transform
(rotation, label permutation) is applied to them where its training images
get it (`clusterfed.actors.spec.build_trainer`).
"""

from __future__ import annotations

import numpy as np

from clusterfed.errors import ConfigError


def class_shares(labels: np.ndarray, n_classes: int) -> np.ndarray:
    """The share of each class among `labels` (sums to 1)."""
    if len(labels) == 0:
        raise ConfigError("class shares of no labels")
    counts = np.bincount(labels, minlength=n_classes)
    if len(counts) != n_classes:
        raise ConfigError(
            f"labels up to {len(counts) - 1} but only {n_classes} classes"
        )
    return counts / counts.sum()


def class_counts(shares: np.ndarray, size: int) -> np.ndarray:
    """`size` split over the classes by `shares`, by largest remainder.

    Deterministic, so a client's test set holds its proportions exactly up to
    rounding rather than up to multinomial noise.
    """
    shares = np.asarray(shares, dtype=np.float64)
    if size < 1:
        raise ConfigError(f"a test set needs at least one image, got size {size}")
    if shares.ndim != 1 or (shares < 0).any() or not shares.sum() > 0:
        raise ConfigError(f"class shares must be >= 0 and not all 0, got {shares}")
    exact = shares / shares.sum() * size
    counts = np.floor(exact).astype(np.int64)
    # Ties go to the lower class index (a stable sort), so the split is fixed.
    order = np.argsort(-(exact - counts), kind="stable")
    counts[order[: size - int(counts.sum())]] += 1
    return counts


def draw_test_set(
    test_labels: np.ndarray,
    shares: np.ndarray,
    size: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """Sorted indices into a test split: `size` images with class `shares`.

    Each class's images are drawn without replacement while the split holds
    enough of them, with replacement only past that (a client larger than
    the test split's class).

    Args:
        test_labels: the labels of the test split, one per image.
        shares: one weight per class (normalised here).
        size: how many images.
        rng: the client's own stream.

    Raises:
        ConfigError: a class with a positive share has no test image, or the
            shares do not match the classes.
    """
    n_classes = len(shares)
    if len(test_labels) and int(test_labels.max()) >= n_classes:
        raise ConfigError(
            f"test labels go up to {int(test_labels.max())} but {n_classes}"
            " class shares were given"
        )
    chosen = []
    for c, k in enumerate(class_counts(shares, size)):
        if not k:
            continue
        pool = np.flatnonzero(test_labels == c)
        if len(pool) == 0:
            raise ConfigError(f"class {c} has no image in the test split")
        chosen.append(rng.choice(pool, size=int(k), replace=int(k) > len(pool)))
    return np.sort(np.concatenate(chosen))
