"""The MLP and CNN families of Lin et al. (Fig. 3 of "A Joint Gradient and Loss
Based Clustered Federated Learning Design"), sized from the input shape.

Grey-scale inputs get the MNIST column of Fig. 3 (MLP 512-128; CNN conv 32-64
3×3, max-pool, 128 hidden); colour inputs get the CIFAR-10 column (MLP
2048-512; LeNet-style CNN 6-16 5×5 with pooling, 120-84 hidden).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


def mlp(
    input_shape: Sequence[int],
    n_classes: int,
    *,
    hidden: Sequence[int] | None = None,
) -> nn.Module:
    """Fully connected layers with ReLU; `hidden` defaults from the channels.
    `hidden=[]` is softmax regression: one linear layer (what the protocol's
    example client in examples/numpy_client.py trains)."""
    channels = input_shape[0] if len(input_shape) == 3 else 1
    sizes = list(hidden) if hidden is not None else _mlp_hidden(channels)
    if sizes and min(sizes) < 1:
        raise ValueError(f"hidden must list positive layer widths, got {hidden}")
    width = int(torch.Size(input_shape).numel())
    layers: list[nn.Module] = [nn.Flatten()]
    for size in sizes:
        layers += [nn.Linear(width, size), nn.ReLU()]
        width = size
    layers.append(nn.Linear(width, n_classes))
    return nn.Sequential(*layers)


def cnn(input_shape: Sequence[int], n_classes: int) -> nn.Module:
    """Two convolutions then fully connected layers (Fig. 3)."""
    if len(input_shape) != 3:
        raise ValueError(f"cnn needs a C×H×W input, got shape {tuple(input_shape)}")
    channels = input_shape[0]
    features: nn.Sequential
    if channels == 1:
        features = nn.Sequential(
            nn.Conv2d(1, 32, 3),
            nn.ReLU(),
            nn.Conv2d(32, 64, 3),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
        )
        hidden: list[int] = [128]
    else:
        features = nn.Sequential(
            nn.Conv2d(channels, 6, 5),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
        )
        hidden = [120, 84]
    with torch.no_grad():
        try:
            width = features(torch.zeros(1, *input_shape)).shape[1]
        except RuntimeError as exc:
            raise ValueError(
                f"input shape {tuple(input_shape)} is too small for the cnn"
            ) from exc
    layers: list[nn.Module] = [features]
    for size in hidden:
        layers += [nn.Linear(width, size), nn.ReLU()]
        width = size
    layers.append(nn.Linear(width, n_classes))
    return nn.Sequential(*layers)


def _mlp_hidden(channels: int) -> list[int]:
    return [512, 128] if channels == 1 else [2048, 512]
