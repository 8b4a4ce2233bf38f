"""global_acc: the server's one model on the dataset's own test split."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
import torch

import clusterfed
from clusterfed.data.datasets import load_dataset
from clusterfed.global_test import GlobalTest
from clusterfed.models import build_model, get_flat
from clusterfed.scenarios import IIDPartition
from helpers import read_rounds, small_scenario


def write_idx(folder: Path, prefix: str, labels: np.ndarray, seed: int) -> None:
    """Fashion-MNIST's IDX files (uint8 images 28×28, uint8 labels)."""
    images = np.random.default_rng(seed).integers(0, 256, (len(labels), 28, 28))
    with open(folder / f"{prefix}-images-idx3-ubyte", "wb") as file:
        file.write(struct.pack(">IIII", 0x803, len(labels), 28, 28))
        file.write(images.astype(np.uint8).tobytes())
    with open(folder / f"{prefix}-labels-idx1-ubyte", "wb") as file:
        file.write(struct.pack(">II", 0x801, len(labels)))
        file.write(labels.astype(np.uint8).tobytes())


@pytest.fixture
def tiny_fashion(tmp_path: Path) -> Path:
    folder = tmp_path / "fashion"
    folder.mkdir()
    write_idx(folder, "train", np.arange(240) % 10, seed=1)
    # Every class once at least: clients draw their test sets from it.
    others = [0, 1, 2, 4, 6, 7, 8, 9]
    write_idx(folder, "t10k", np.array([3] * 30 + [5] * 2 + others), seed=2)
    return folder


def scenario_on(folder: Path, **changes: object) -> clusterfed.Scenario:
    return small_scenario(
        dataset={"name": "fashion_mnist", "root": str(folder)},
        partition=IIDPartition(),
        **changes,
    )


def test_the_one_model_is_scored_on_the_test_split(tiny_fashion: Path) -> None:
    scenario = scenario_on(tiny_fashion)
    data = load_dataset("fashion_mnist", str(tiny_fashion))
    net = build_model("mlp", data.input_shape, 10, hidden=[32])
    with torch.no_grad():
        for p in net.parameters():
            p.zero_()
        list(net.parameters())[-1][3] = 1.0  # the last bias: always class 3
    weights = get_flat(net)
    test = GlobalTest(scenario, data)
    assert test.accuracy({0: weights}) == 0.75  # 30 of the 40 test labels are 3
    assert test.accuracy({0: weights, 1: weights}) is None  # clusters: no one model


def test_a_dataset_without_a_test_split_scores_nothing() -> None:
    scenario = small_scenario()
    test = GlobalTest(scenario, load_dataset("digits"))
    assert test.accuracy({0: np.zeros(10, np.float32)}) is None


def test_rows_and_summary_carry_it_for_one_model_only(
    tiny_fashion: Path, tmp_path: Path
) -> None:
    clusterfed.run(scenario_on(tiny_fashion, rounds=2), out=tmp_path / "fedavg")
    rows = read_rounds(tmp_path / "fedavg")
    scores = [r["global_acc"] for r in rows]
    assert all(s is not None and 0 <= s <= 1 for s in scores)
    # 40 test images: every score is a whole number of them.
    assert all(abs(s * 40 - round(s * 40)) < 1e-9 for s in scores)
    summary = clusterfed.load(tmp_path / "fedavg").summary
    assert summary["global_acc_final"] == scores[-1]
    clusterfed.run(
        scenario_on(tiny_fashion, rounds=1, algorithm="ifca"), out=tmp_path / "ifca"
    )
    assert [r["global_acc"] for r in read_rounds(tmp_path / "ifca")] == [None]
