"""Datasets as in-memory tensors, loaded once per process.

Only what ships with an installed package or sits in a folder the user names is
read: nothing is downloaded at run time.

- `digits` (default): scikit-learn's embedded 8×8 digits, 1,797 images.
- `fashion_mnist`: the IDX files of the Debian package `dataset-fashion-mnist`
  (`/usr/share/datasets/fashion-mnist`), or a folder named by `root` that holds
  the same four files, gzipped or not.
- `mnist`, `emnist` (the 47-class "balanced" split), `cifar10`: through
  torchvision, from the folder named by `root` in torchvision's own layout.
- `synthetic`, `synthetic_<alpha>_<beta>`: FedProx's Synthetic(α, β)
  (`synthetic.py`), generated per client; the dataset itself holds no rows.

File datasets use their training split for the clients' samples: each client
holds out part of its own (validation data for the algorithms' decisions).
The accuracy a run reports comes from a test set per client drawn from the
dataset's own test split (`WITH_TEST_SPLIT`, `data.test_sets`) to match its
distribution; digits, which has no test split, reports its hold-out.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from clusterfed.errors import ConfigError

from .synthetic import N_FEATURES, parse_name

FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"


@dataclass(frozen=True)
class Dataset:
    """Images `x` (N×C×H×W, float32 in [0, 1]) and integer labels `y`."""

    name: str
    x: torch.Tensor
    y: torch.Tensor
    n_classes: int

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x.shape[1:])

    @property
    def labels(self) -> np.ndarray:
        return self.y.numpy()

    def __len__(self) -> int:
        return int(self.y.shape[0])


def _digits(root: str | None, train: bool = True) -> Dataset:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = torch.tensor(bunch.images / 16.0, dtype=torch.float32).unsqueeze(1)
    y = torch.tensor(bunch.target, dtype=torch.int64)
    return Dataset("digits", x, y, n_classes=10)


def _fashion_mnist(root: str | None, train: bool = True) -> Dataset:
    folder = Path(root or FASHION_MNIST_DIR)
    prefix = "train" if train else "t10k"
    x = _read_idx(_idx_file(folder, f"{prefix}-images-idx3-ubyte"), dims=3)
    y = _read_idx(_idx_file(folder, f"{prefix}-labels-idx1-ubyte"), dims=1)
    if len(x) != len(y):
        raise ConfigError(
            f"dataset fashion_mnist: {len(x)} images but {len(y)} labels in {folder}"
        )
    images = torch.from_numpy(x).float().div_(255).unsqueeze(1)
    return Dataset("fashion_mnist", images, torch.from_numpy(y).long(), 10)


def _read_idx(path: Path, dims: int) -> np.ndarray:
    """An IDX file of unsigned bytes (gzipped or not) as an array.

    Read with numpy rather than torchvision's reader: importing torchvision
    adds 164 MiB to every process, the forked workers included, and the
    format is a big-endian header (magic 0x08 0x<dims>, then each size) in
    front of the bytes.
    """
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as source:
        data = source.read()
    header = 4 + 4 * dims
    magic = data[:4]
    if len(data) < header or magic != bytes([0, 0, 0x08, dims]):
        raise ConfigError(
            f"{path}: not an IDX file of unsigned bytes with {dims} dimensions"
            f" (magic {magic.hex()})"
        )
    shape = tuple(int(n) for n in np.frombuffer(data, ">u4", dims, offset=4))
    if len(data) - header != int(np.prod(shape)):
        raise ConfigError(
            f"{path}: {len(data) - header} bytes of data, the header says"
            f" {' × '.join(map(str, shape))}"
        )
    # A copy: an array over the file's bytes would be read-only.
    return np.frombuffer(data, np.uint8, offset=header).reshape(shape).copy()


def _idx_file(folder: Path, stem: str) -> Path:
    for candidate in (folder / stem, folder / f"{stem}.gz"):
        if candidate.is_file():
            return candidate
    raise ConfigError(
        f"dataset fashion_mnist: {stem}[.gz] not found in {folder}; install the"
        " Debian package (apt-get install dataset-fashion-mnist) or set dataset.root"
    )


def _torchvision(name: str) -> Callable[[str | None, bool], Dataset]:
    def load(root: str | None, train: bool = True) -> Dataset:
        from torchvision import datasets

        if root is None:
            raise ConfigError(
                f"dataset {name} is read through torchvision from a folder:"
                " set dataset.root"
            )
        try:
            if name == "mnist":
                raw = datasets.MNIST(root, train=train, download=False)
            elif name == "emnist":
                raw = datasets.EMNIST(
                    root, split="balanced", train=train, download=False
                )
            else:
                raw = datasets.CIFAR10(root, train=train, download=False)
        except RuntimeError as exc:  # torchvision's "Dataset not found"
            raise ConfigError(f"dataset {name}: {exc} (looked in {root})") from exc
        data = torch.as_tensor(np.asarray(raw.data))
        x = data.float().div(255)
        x = x.unsqueeze(1) if x.ndim == 3 else x.permute(0, 3, 1, 2)
        if name == "emnist":  # stored transposed
            x = x.transpose(-1, -2)
        y = torch.as_tensor(np.asarray(raw.targets)).long()
        return Dataset(name, x.contiguous(), y, n_classes=len(raw.classes))

    return load


DATASETS: dict[str, Callable[[str | None, bool], Dataset]] = {
    "digits": _digits,
    "fashion_mnist": _fashion_mnist,
    "mnist": _torchvision("mnist"),
    "emnist": _torchvision("emnist"),
    "cifar10": _torchvision("cifar10"),
}


@lru_cache(maxsize=4)
def load_dataset(name: str, root: str | None = None) -> Dataset:
    """The dataset called `name`; `root` is the folder for file-based ones."""
    if parse_name(name) is not None:
        # Procedural: no rows of its own; each client generates its rows
        # from its seed (`synthetic.client_rows`).
        return Dataset(name, torch.empty(0, N_FEATURES), torch.empty(0).long(), 10)
    loader = DATASETS.get(name)
    if loader is None:
        raise ConfigError(
            f"unknown dataset {name!r}; known: {', '.join(sorted(DATASETS))}"
        )
    return loader(root, True)


# Datasets that come with a test split of their own (the 8×8 digits do not).
WITH_TEST_SPLIT = frozenset({"fashion_mnist", "mnist", "emnist", "cifar10"})


@lru_cache(maxsize=2)
def load_test_split(name: str, root: str | None = None) -> Dataset | None:
    """The dataset's own test split, or None if it has none (`digits`)."""
    if name not in WITH_TEST_SPLIT:
        load_dataset(name, root)  # an unknown name is refused as for training
        return None
    return DATASETS[name](root, False)


def available(name: str) -> bool:
    """Whether `name` can be loaded here without extra arguments."""
    if name == "digits":
        return True
    if name == "fashion_mnist":
        folder = Path(FASHION_MNIST_DIR)
        return (folder / "train-images-idx3-ubyte.gz").is_file() or (
            folder / "train-images-idx3-ubyte"
        ).is_file()
    return False
