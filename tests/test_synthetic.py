"""Synthetic(α, β): the generator against its definitions, and its determinism."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import numpy as np
import pytest
from scipy.special import softmax
from scipy.stats import norm

from clusterfed.data.synthetic import (
    COUNT_MIN,
    MAX_CLIENTS,
    N_CLASSES,
    N_FEATURES,
    SyntheticParams,
    feature_variances,
    generate,
    parse_name,
    sample_count,
)
from clusterfed.errors import ConfigError
from clusterfed.seeding import numpy_rng

ONE_ONE = SyntheticParams(1.0, 1.0)


def test_labels_are_the_argmax_of_each_clients_softmax_model() -> None:
    for client in range(5):
        data = generate(3, client, ONE_ONE)
        assert data.x.shape == (len(data.y), N_FEATURES)
        assert data.x.dtype == np.float32 and data.y.dtype == np.int64
        probs = softmax(data.x.astype(np.float64) @ data.weights + data.bias, axis=1)
        np.testing.assert_array_equal(data.y, probs.argmax(axis=1))
        assert data.y.min() >= 0 and data.y.max() < N_CLASSES


def test_features_have_the_clients_mean_and_the_power_law_variances() -> None:
    # A client with many samples: its sample mean and variance per feature.
    big = next(c for c in range(500) if sample_count(0, c, ONE_ONE) >= 3000)
    data = generate(0, big, ONE_ONE)
    n = len(data.y)
    var = feature_variances()
    np.testing.assert_allclose(var[[0, 9, 59]], [1.0, 10**-1.2, 60**-1.2])
    x = data.x.astype(np.float64)
    # Five standard errors of the mean, per feature.
    assert np.all(np.abs(x.mean(axis=0) - data.feature_mean) < 5 * np.sqrt(var / n))
    np.testing.assert_allclose(x.var(axis=0), var, rtol=6 * np.sqrt(2 / n))


def test_alpha_and_beta_spread_the_models_and_feature_means_across_clients() -> None:
    # u_k ~ N(0, α), W_k ~ N(u_k, 1): the mean of a client's 600 weights
    # varies over clients with variance α² + 1/600; likewise v_k's mean
    # with β² + 1/60.
    params = SyntheticParams(0.5, 2.0, max_samples=COUNT_MIN)
    clients = [generate(11, c, params) for c in range(3000)]
    w_means = np.array([c.weights.mean() for c in clients])
    v_means = np.array([c.feature_mean.mean() for c in clients])
    assert abs(w_means.mean()) < 0.05
    assert abs(v_means.mean()) < 0.15
    np.testing.assert_allclose(w_means.var(), 0.25 + 1 / 600, rtol=0.1)
    np.testing.assert_allclose(v_means.var(), 4.0 + 1 / 60, rtol=0.1)
    # b_k ~ N(u_k, 1) shares W_k's mean, as in the authors' generator.
    b_means = np.array([c.bias.mean() for c in clients])
    assert np.corrcoef(w_means, b_means)[0, 1] > 0.5


def test_sample_counts_follow_the_authors_lognormal_plus_fifty() -> None:
    counts = np.array([sample_count(5, c, ONE_ONE) for c in range(20000)])
    assert counts.min() >= COUNT_MIN
    # int(L) >= m exactly when L >= m for an integer m, and for
    # L ~ lognormal(4, 2), P(L >= m) = 1 - Φ((ln m - 4) / 2).
    for m in (20, 55, 403, 3000):
        expected = norm.sf((np.log(m) - 4) / 2)
        share = np.mean(counts - COUNT_MIN >= m)
        assert abs(share - expected) < 5 * np.sqrt(expected * (1 - expected) / 20000)
    capped = SyntheticParams(max_samples=200)
    assert max(sample_count(5, c, capped) for c in range(2000)) == 200


def test_same_seed_same_data_in_any_order_of_access() -> None:
    forward = [generate(9, c, ONE_ONE) for c in (0, 1, 2, 999_999)]
    backward = [generate(9, c, ONE_ONE) for c in (999_999, 2, 1, 0)][::-1]
    for a, b in zip(forward, backward, strict=True):
        np.testing.assert_array_equal(a.x, b.x)
        np.testing.assert_array_equal(a.y, b.y)
    other_seed = generate(10, 0, ONE_ONE)
    assert not np.array_equal(other_seed.weights, forward[0].weights)
    assert len({len(d.y) for d in forward}) > 1  # clients differ in size


def test_same_seed_same_data_in_another_process() -> None:
    here = generate(4, 123_456, ONE_ONE)
    code = (
        "import hashlib, sys\n"
        "from clusterfed.data.synthetic import SyntheticParams, generate\n"
        "d = generate(4, 123_456, SyntheticParams(1.0, 1.0))\n"
        "sys.stdout.write(hashlib.sha256(d.x.tobytes() + d.y.tobytes()).hexdigest())\n"
    )
    there = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert there == hashlib.sha256(here.x.tobytes() + here.y.tobytes()).hexdigest()


def test_names_give_the_parameters_and_bad_names_are_refused() -> None:
    assert parse_name("synthetic") == SyntheticParams(1.0, 1.0)
    assert parse_name("synthetic_0.5_0.5") == SyntheticParams(0.5, 0.5)
    assert parse_name("synthetic_0_0") == SyntheticParams(0.0, 0.0)
    assert parse_name("digits") is None
    with pytest.raises(ConfigError, match="synthetic_<alpha>_<beta>"):
        parse_name("synthetic_1")
    with pytest.raises(ConfigError, match="alpha must be >= 0"):
        SyntheticParams(-1.0, 1.0)
    with pytest.raises(ConfigError, match="max_samples"):
        SyntheticParams(max_samples=3)
    with pytest.raises(ConfigError, match="not an id"):
        generate(0, -1, ONE_ONE)


def test_a_capped_client_holds_a_prefix_of_its_rows() -> None:
    full = generate(2, 17, ONE_ONE)
    first = generate(2, 17, ONE_ONE, n=10)
    np.testing.assert_array_equal(first.x, full.x[:10])
    np.testing.assert_array_equal(first.y, full.y[:10])
    with pytest.raises(ConfigError, match="needs >= 1 sample"):
        generate(2, 17, ONE_ONE, n=0)


def test_synthetic_iid_labels_every_client_with_one_shared_model() -> None:
    params = parse_name("synthetic_iid")
    assert params == SyntheticParams(0.0, 0.0, iid=True)
    a, b = generate(3, 17, params, 400), generate(3, 900_000, params, 400)
    assert np.array_equal(a.weights, b.weights) and np.array_equal(a.bias, b.bias)
    assert not np.array_equal(a.weights, generate(4, 17, params, 10).weights)
    # β = 0: features centred at 0, each with variance j^-1.2.
    assert np.array_equal(a.feature_mean, np.zeros(60))
    np.testing.assert_allclose(
        generate(3, 5, params, 20_000).x.var(axis=0), feature_variances(), rtol=0.1
    )
    logits = a.x.astype(np.float64) @ a.weights + a.bias
    assert np.array_equal(a.y, np.argmax(softmax(logits, axis=1), axis=1))
    # The shared model's stream is no client's: client 0's own draws differ.
    assert not np.array_equal(a.x, generate(3, 0, params, 400).x)
    with pytest.raises(ConfigError, match="not below"):
        generate(3, MAX_CLIENTS, params, 1)


def test_a_client_s_data_comes_from_no_other_stream_of_the_scenario() -> None:
    # The scenario's own streams are (seed, 1..9, ...): CLIENT_STREAM's for
    # client 1 is (seed, 4, 1), which client 4 of the dataset once drew from.
    from clusterfed.scenarios.build import CLIENT_STREAM

    other = numpy_rng(7, CLIENT_STREAM, 1)
    u = other.normal(0.0, 1.0)
    other.normal(0.0, 1.0)
    weights = other.normal(u, 1.0, (N_FEATURES, N_CLASSES))
    mine = generate(7, CLIENT_STREAM, SyntheticParams(1.0, 1.0), 5).weights
    assert not np.allclose(mine, weights)
