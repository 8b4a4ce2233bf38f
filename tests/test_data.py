"""Partitioners: disjoint, complete, the promised skew, and true groups kept."""

from __future__ import annotations

import gzip
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch

from clusterfed.data import class_table, dirichlet, holdout, iid, load_dataset, shards
from clusterfed.data.datasets import available
from clusterfed.errors import ConfigError, ScenarioError
from clusterfed.scenarios import load_scenario, with_overrides
from clusterfed.scenarios.spec import DATASET_SIZES

LABELS = load_dataset("digits").labels


def _check_disjoint_cover(indices: list[np.ndarray], n: int) -> None:
    joined = np.concatenate(indices)
    assert len(joined) == len(set(joined.tolist())) == n


def test_digits_is_embedded_and_scaled() -> None:
    data = load_dataset("digits")
    assert data.input_shape == (1, 8, 8) and data.n_classes == 10 and len(data) == 1797
    assert float(data.x.min()) == 0.0 and float(data.x.max()) == 1.0


def test_unknown_dataset_lists_known_ones() -> None:
    with pytest.raises(ConfigError, match="known: .*digits.*fashion_mnist"):
        load_dataset("imagenet")


@pytest.mark.skipif(
    not available("fashion_mnist"), reason="dataset-fashion-mnist not installed"
)
def test_fashion_mnist_comes_from_the_debian_package() -> None:
    data = load_dataset("fashion_mnist")
    assert data.input_shape == (1, 28, 28) and len(data) == 60000
    assert np.bincount(data.labels).tolist() == [6000] * 10


def _idx(path: Path, magic: int, array: np.ndarray, gz: bool = False) -> None:
    data = struct.pack(f">I{array.ndim}I", magic, *array.shape) + array.tobytes()
    if gz:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)


@pytest.mark.parametrize("gz", [False, True])
def test_fashion_mnists_idx_files_are_read_plain_or_gzipped(
    tmp_path: Path, gz: bool
) -> None:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (12, 28, 28)).astype(np.uint8)
    labels = (np.arange(12) % 10).astype(np.uint8)
    _idx(tmp_path / "train-images-idx3-ubyte", 0x803, images, gz)
    _idx(tmp_path / "train-labels-idx1-ubyte", 0x801, labels, gz)
    data = load_dataset("fashion_mnist", str(tmp_path))
    assert data.x.shape == (12, 1, 28, 28) and data.x.dtype == torch.float32
    assert torch.equal(data.x, torch.from_numpy(images).float().div(255).unsqueeze(1))
    assert data.labels.tolist() == labels.tolist()


@pytest.mark.parametrize(
    ("magic", "cut", "message"),
    [
        (0x801, 0, "not an IDX file of unsigned bytes with 3 dimensions"),
        (0xD03, 0, "not an IDX file of unsigned bytes with 3 dimensions"),
        (0x803, 5, r"9403 bytes of data, the header says 12 × 28 × 28"),
    ],
)
def test_a_broken_idx_file_is_refused_naming_the_problem(
    tmp_path: Path, magic: int, cut: int, message: str
) -> None:
    images = np.zeros((12, 28, 28), np.uint8)
    _idx(tmp_path / "train-images-idx3-ubyte", magic, images)
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) - cut])
    _idx(tmp_path / "train-labels-idx1-ubyte", 0x801, np.zeros(12, np.uint8))
    with pytest.raises(ConfigError, match=message):
        load_dataset("fashion_mnist", str(tmp_path))


def test_images_and_labels_of_different_counts_are_refused(tmp_path: Path) -> None:
    _idx(tmp_path / "train-images-idx3-ubyte", 0x803, np.zeros((3, 28, 28), np.uint8))
    _idx(tmp_path / "train-labels-idx1-ubyte", 0x801, np.zeros(4, np.uint8))
    with pytest.raises(ConfigError, match="3 images but 4 labels"):
        load_dataset("fashion_mnist", str(tmp_path))


def test_a_run_without_odd_rotations_never_imports_torchvision() -> None:
    # torchvision costs every process 164 MiB; only rotations by angles that
    # are not multiples of 90° need it.
    code = (
        "import sys, clusterfed, clusterfed.actors.spec as spec, torch;"
        " clusterfed.run('quickstart', rounds=1, clients=4, out=sys.argv[1]);"
        " spec.rotate(torch.zeros(1, 1, 4, 4), 90);"
        " assert 'torchvision' not in sys.modules, 'imported';"
        " spec.rotate(torch.zeros(1, 1, 4, 4), 30);"
        " assert 'torchvision' in sys.modules"
    )
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([sys.executable, "-c", code, out], check=True)


def test_file_datasets_say_where_they_looked(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match="dataset-fashion-mnist"):
        load_dataset("fashion_mnist", str(tmp_path))
    with pytest.raises(ConfigError, match="set dataset.root"):
        load_dataset("mnist")
    with pytest.raises(ConfigError, match=str(tmp_path)):
        load_dataset("cifar10", str(tmp_path))


def test_iid_deals_everything_evenly_in_one_group() -> None:
    part = iid(LABELS, 7, np.random.default_rng(0))
    _check_disjoint_cover(part.indices, len(LABELS))
    sizes = [len(i) for i in part.indices]
    assert max(sizes) - min(sizes) <= 1 and set(part.groups) == {0}


def test_small_alpha_dirichlet_skews_labels_more_than_large_alpha() -> None:
    def mean_label_share(alpha: float) -> float:
        part = dirichlet(LABELS, 10, alpha, np.random.default_rng(0))
        _check_disjoint_cover(part.indices, len(LABELS))
        assert min(len(i) for i in part.indices) >= 10
        return float(
            np.mean([np.bincount(LABELS[i]).max() / len(i) for i in part.indices])
        )

    assert mean_label_share(0.1) > mean_label_share(100.0) + 0.3


def test_shards_give_about_k_labels_and_group_equal_label_sets() -> None:
    part = shards(LABELS, 10, 2, np.random.default_rng(0))
    _check_disjoint_cover(part.indices, len(LABELS))
    for idx in part.indices:
        assert (
            len(np.unique(LABELS[idx])) <= 4
        )  # 2 shards, each may straddle a boundary
    # clients share a group exactly when their shards' majority labels agree
    majorities = {}
    for idx, group in zip(part.indices, part.groups, strict=True):
        top = set(np.argsort(np.bincount(LABELS[idx], minlength=10))[-2:].tolist())
        majorities.setdefault(group, []).append(top)
    assert len(majorities) >= 2
    assert all(len({frozenset(t) for t in tops}) == 1 for tops in majorities.values())


def test_class_table_follows_the_table_and_keeps_groups() -> None:
    table = [[1, 1, 0, 0, 0, 0, 0, 0, 0, 0], [0, 1, 1, 1, 0, 0, 0, 0, 0, 0]]
    part = class_table(LABELS, table, [2, 3], np.random.default_rng(0))
    assert part.groups == [0, 0, 1, 1, 1]
    for idx, group in zip(part.indices, part.groups, strict=True):
        allowed = {c for c, w in enumerate(table[group]) if w > 0}
        assert set(np.unique(LABELS[idx]).tolist()) <= allowed
    # class 1 is split half and half between the groups
    ones = [int(np.sum(LABELS[idx] == 1)) for idx in part.indices]
    assert abs(sum(ones[:2]) - sum(ones[2:])) <= 1


def test_class_table_shape_is_checked() -> None:
    with pytest.raises(ConfigError, match="10 classes"):
        class_table(LABELS, [[1, 2, 3]], 2, np.random.default_rng(0))


def test_holdout_keeps_a_fifth_and_the_group() -> None:
    part = iid(LABELS, 5, np.random.default_rng(0))
    splits = holdout(part, 0.2, np.random.default_rng(1))
    for split, idx in zip(splits, part.indices, strict=True):
        assert len(np.intersect1d(split.train, split.test)) == 0
        assert len(split.train) + len(split.test) == len(idx)
        assert abs(len(split.test) - 0.2 * len(idx)) <= 1
        assert split.group == 0


def test_partitions_are_reproducible_from_the_seed() -> None:
    a = dirichlet(LABELS, 8, 0.5, np.random.default_rng(4))
    b = dirichlet(LABELS, 8, 0.5, np.random.default_rng(4))
    assert all(np.array_equal(x, y) for x, y in zip(a.indices, b.indices, strict=True))


@pytest.mark.parametrize("name", ["digits", "fashion_mnist"])
def test_the_scenario_s_size_table_matches_the_loaded_dataset(name: str) -> None:
    if not available(name):
        pytest.skip(f"{name} is not installed here")
    assert DATASET_SIZES[name] == len(load_dataset(name))


def test_a_partition_that_cannot_fit_is_refused_before_data_loads() -> None:
    with pytest.raises(ScenarioError) as error:
        with_overrides(load_scenario("quickstart"), ["clients=1002"])
    assert (
        "partition: 1002 clients × 10 samples each = 10020 samples, but digits has"
        " 1797; lower clients or partition.min_samples (at most 179 clients of 10)"
    ) in str(error.value)
    with pytest.raises(ScenarioError, match=r"1800 clients × 1 samples each"):
        with_overrides(
            load_scenario("quickstart"), ["partition.kind=iid", "clients=1800"]
        )
    # Joiners need data too.
    with pytest.raises(ScenarioError, match=r"190 clients \(170 \+ 20 joining\)"):
        with_overrides(
            load_scenario("quickstart"),
            [
                "clients=170",
                'events=[{kind = "join", start = 1, count = 20}]',
            ],
        )
    with_overrides(load_scenario("quickstart"), ["clients=179"])  # fits


def test_a_dirichlet_draw_that_keeps_failing_names_the_knobs() -> None:
    labels = np.repeat(np.arange(10), 20)
    with pytest.raises(ConfigError, match="raise partition.alpha, or lower"):
        dirichlet(labels, 19, 0.01, np.random.default_rng(0), max_tries=5)
