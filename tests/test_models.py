"""The MLP/CNN families of Lin et al. Fig. 3, sized from the input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from clusterfed.errors import ConfigError
from clusterfed.models import build_model, get_flat, n_parameters, set_flat


def _linear_sizes(model: nn.Module) -> list[tuple[int, int]]:
    return [
        (m.in_features, m.out_features)
        for m in model.modules()
        if isinstance(m, nn.Linear)
    ]


def test_mlp_for_grey_images_is_512_128() -> None:
    model = build_model("mlp", (1, 28, 28), 8)
    assert _linear_sizes(model) == [(784, 512), (512, 128), (128, 8)]


def test_mlp_for_colour_images_is_2048_512() -> None:
    model = build_model("mlp", (3, 32, 32), 8)
    assert _linear_sizes(model) == [(3072, 2048), (2048, 512), (512, 8)]


def test_cnn_for_mnist_is_conv32_conv64_pool_128() -> None:
    model = build_model("cnn", (1, 28, 28), 40)
    convs = [
        (m.in_channels, m.out_channels, m.kernel_size)
        for m in model.modules()
        if isinstance(m, nn.Conv2d)
    ]
    assert convs == [(1, 32, (3, 3)), (32, 64, (3, 3))]
    assert _linear_sizes(model) == [(64 * 12 * 12, 128), (128, 40)]
    assert model(torch.zeros(2, 1, 28, 28)).shape == (2, 40)


def test_cnn_for_cifar_is_lenet_like() -> None:
    model = build_model("cnn", (3, 32, 32), 10)
    assert _linear_sizes(model) == [(16 * 5 * 5, 120), (120, 84), (84, 10)]


def test_cnn_fits_the_8x8_digits() -> None:
    assert build_model("cnn", (1, 8, 8), 10)(torch.zeros(1, 1, 8, 8)).shape == (1, 10)


def test_seeded_build_is_reproducible_and_flat_round_trips() -> None:
    a = build_model("mlp", (1, 8, 8), 10, seed=5)
    b = build_model("mlp", (1, 8, 8), 10, seed=5)
    flat = get_flat(a)
    assert flat.dtype == np.float32 and flat.shape == (n_parameters(a),)
    np.testing.assert_array_equal(flat, get_flat(b))
    set_flat(b, np.zeros_like(flat))
    assert not get_flat(b).any()
    with pytest.raises(ValueError, match="expected"):
        set_flat(b, flat[:-1])


def test_unknown_model_and_bad_parameters_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="known: cnn, mlp"):
        build_model("resnet", (1, 8, 8), 10)
    with pytest.raises(ConfigError, match="depth"):
        build_model("mlp", (1, 8, 8), 10, depth=3)
