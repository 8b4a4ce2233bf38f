"""One-backward DP-SGD (book-keeping) against Opacus' per-sample hooks."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import clusterfed
from clusterfed.actors import LocalTrainer
from clusterfed.actors.bookkeeping import BookKeeping, add_noise, layer_paths
from clusterfed.actors.privacy import PrivateTraining, private_model, quiet_opacus
from clusterfed.models import build_model, get_flat
from clusterfed.models.registry import MODELS as MODELS_BY_NAME
from clusterfed.protocol import TrainConfig
from clusterfed.scenarios.spec import DPSpec
from helpers import opacus_hooks_round, small_scenario


class _Sequence(nn.Module):
    """Linear layers over a (N, T, d) input: both norm routes of a sequence
    (T = 2: the ghost norm; T = 9: the materialized gradient)."""

    def __init__(self) -> None:
        super().__init__()
        self.wide = nn.Linear(8, 8)  # T·(d+p) = 32 < d·p = 64
        self.narrow = nn.Linear(8, 3)  # T·(d+p) = 22 < d·p = 24
        self.head = nn.Linear(2 * 3, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(len(x), 2, 8)
        return self.head(torch.relu(self.narrow(torch.relu(self.wide(x)))).flatten(1))


class _LongSequence(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(2, 3)  # T = 9: T·(d+p) = 45 > d·p = 6
        self.head = nn.Linear(27, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.proj(x.reshape(len(x), 9, 2))).flatten(1))


def _mixed() -> nn.Module:
    """Layers book-keeping leaves to Opacus: group norm, a grouped conv."""
    return nn.Sequential(
        nn.Conv2d(2, 4, 3, padding=1),
        nn.GroupNorm(2, 4),
        nn.ReLU(),
        nn.Conv2d(4, 4, 3, groups=2, stride=2),
        nn.Flatten(),
        nn.Linear(4 * 3 * 3, 3),
    )


# name → (model builder, input shape, classes)
MODELS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...], int]] = {
    "mlp": (lambda: build_model("mlp", (1, 6, 6), 5, hidden=[16, 8]), (1, 6, 6), 5),
    "cnn grey": (lambda: build_model("cnn", (1, 10, 10), 4), (1, 10, 10), 4),
    "cnn colour": (lambda: build_model("cnn", (3, 16, 16), 4), (3, 16, 16), 4),
    "sequence": (_Sequence, (16,), 4),
    "long sequence": (_LongSequence, (18,), 4),
    "mixed": (_mixed, (2, 7, 7), 3),
    # T·(d+p) = 4·(72+16) < d·p = 72·16: the ghost norm of a convolution.
    "conv ghost": (
        lambda: nn.Sequential(
            nn.Conv2d(8, 16, 3, stride=2), nn.Flatten(), nn.Linear(64, 3)
        ),
        (8, 5, 5),
        3,
    ),
}


def _batch(
    shape: tuple[int, ...], classes: int, n: int = 12
) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(n, *shape, generator=gen)
    # Some samples far larger than others: their gradients are clipped.
    x[: n // 3] *= 20
    return x, torch.randint(0, classes, (n,), generator=gen)


def _opacus_hooks(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Per-sample norms and per-sample gradients from Opacus'
    GradSampleModule in hooks mode (what DPOptimizer clips)."""
    from opacus.grad_sample import GradSampleModule

    with quiet_opacus():
        # GradSampleModule is the hooks mode (`grad_sample_mode="hooks"`).
        wrapped = GradSampleModule(model, batch_first=True, loss_reduction="sum")
        loss = nn.functional.cross_entropy(wrapped(x), y, reduction="sum")
        loss.backward()
    trained = [p for p in model.parameters() if p.requires_grad]
    samples = [p.grad_sample.detach().clone() for p in trained]
    wrapped._close()
    model.zero_grad(set_to_none=True)
    for p in trained:
        p.grad_sample = None
    norms = torch.stack([g.reshape(len(g), -1).norm(2, dim=1) for g in samples])
    return norms.norm(2, dim=0), samples


@pytest.mark.parametrize("name", sorted(MODELS))
def test_norms_factors_and_clipped_sums_equal_opacus_hooks(name: str) -> None:
    build, shape, classes = MODELS[name]
    torch.manual_seed(3)
    model = private_model(build())
    x, y = _batch(shape, classes)
    norms, samples = _opacus_hooks(model, x, y)
    bound = float(norms.median())  # clipping binds on about half the batch
    factors = (bound / (norms + 1e-6)).clamp(max=1.0)
    assert (factors < 1).sum() >= 3 and (factors == 1).sum() >= 3
    keeper = BookKeeping(model, bound)
    loss, sums = keeper.clipped_sum(x, y)
    assert keeper.last_norms is not None and keeper.last_factors is not None
    torch.testing.assert_close(keeper.last_norms, norms, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(keeper.last_factors, factors, rtol=1e-5, atol=1e-7)
    for got, each in zip(sums, samples, strict=True):
        expected = torch.einsum("n,n...->...", factors, each)
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-6)
    expected_loss = nn.functional.cross_entropy(model(x), y, reduction="sum")
    torch.testing.assert_close(loss, expected_loss.detach())
    # No hook is left behind, and no .grad was written.
    assert all(p.grad is None for p in model.parameters())
    assert not any(m._forward_hooks for m in model.modules())


def test_each_layer_says_which_path_it_takes() -> None:
    paths = {p.name: (p.kind, p.path) for p in layer_paths(_mixed())}
    assert paths == {
        "0": ("Conv2d", "book-keeping"),
        "1": ("GroupNorm", "opacus"),
        "3": ("Conv2d", "opacus"),  # two groups: no book-keeping rule
        "5": ("Linear", "book-keeping"),
    }


def test_a_layer_with_a_frozen_weight_takes_opacus_rule() -> None:
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    model[0].weight.requires_grad_(False)
    assert [p.path for p in layer_paths(model)] == ["opacus", "book-keeping"]
    x, y = torch.randn(6, 4), torch.tensor([0, 1, 0, 1, 1, 0])
    keeper = BookKeeping(model, 1e-3)  # clips every sample
    _, sums = keeper.clipped_sum(x, y)
    assert len(sums) == 3  # the frozen weight has no sum
    # Opacus' hooks on the same model skip the frozen weight too.
    norms, samples = _opacus_hooks(model, x, y)
    assert keeper.last_norms is not None and keeper.last_factors is not None
    torch.testing.assert_close(keeper.last_norms, norms, rtol=1e-5, atol=1e-7)
    factors = (1e-3 / (norms + 1e-6)).clamp(max=1.0)
    for got, each in zip(sums, samples, strict=True):
        expected = torch.einsum("n,n...->...", factors, each)
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-9)


def test_a_layer_without_any_per_sample_rule_is_refused_naming_it() -> None:
    class Scale(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.s = nn.Parameter(torch.ones(3))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * self.s

    with pytest.raises(ValueError, match=r"layer 1 \(Scale\).*no per-sample"):
        layer_paths(nn.Sequential(nn.Linear(2, 3), Scale()))


def test_a_layer_run_twice_in_one_pass_is_refused() -> None:
    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.Linear(3, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.layer(self.layer(x))

    keeper = BookKeeping(Twice(), 1.0)
    with pytest.raises(RuntimeError, match="Linear ran 2 times"):
        keeper.clipped_sum(torch.ones(2, 3), torch.zeros(2, dtype=torch.long))


def test_an_output_changed_in_place_is_refused() -> None:
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(inplace=True), nn.Linear(4, 2))
    keeper = BookKeeping(model, 1.0)
    with pytest.raises(RuntimeError, match="output of Linear was changed in place"):
        keeper.clipped_sum(torch.ones(2, 3), torch.zeros(2, dtype=torch.long))
    assert not any(m._forward_hooks for m in model.modules())


def test_an_empty_batch_gives_zero_sums() -> None:
    model = build_model("mlp", (1, 4, 4), 3, hidden=[5])
    loss, sums = BookKeeping(model, 1.0).clipped_sum(
        torch.zeros(0, 1, 4, 4), torch.zeros(0, dtype=torch.long)
    )
    assert float(loss) == 0 and all(not s.any() for s in sums)
    assert [s.shape for s in sums] == [p.shape for p in model.parameters()]


def test_the_noise_is_the_draws_opacus_adds() -> None:
    from opacus.optimizers.optimizer import _generate_noise

    sums = [torch.ones(3, 4), torch.ones(4)]
    ours = add_noise(
        [s.clone() for s in sums],
        std=0.7,
        expected_batch_size=5,
        generator=torch.Generator().manual_seed(2),
        scratch=[torch.empty(3, 4), torch.empty(4)],
    )
    gen = torch.Generator().manual_seed(2)
    for got, s in zip(ours, sums, strict=True):
        expected = (s + _generate_noise(0.7, s, gen)) / 5
        assert torch.equal(got, expected)


# -- the trainer's DP round ----------------------------------------------------


def _trainer(name: str, noise: float, bound: float, n: int = 40) -> LocalTrainer:
    build, shape, classes = MODELS[name]
    torch.manual_seed(5)
    model = private_model(build())
    x, y = _batch(shape, classes, n)
    privacy = PrivateTraining(
        epsilon=math.inf, delta=1e-5, max_grad_norm=bound, noise_multiplier=noise
    )
    return LocalTrainer(model, x, y, x[:4], y[:4], seed=11, privacy=privacy)


# A bound below some samples' gradient norms and above others' (checked).
BOUNDS = {"mlp": 2.0, "cnn grey": 2.0, "mixed": 2.0}


@pytest.mark.parametrize("noise", [0.0, 0.8])
@pytest.mark.parametrize("name", sorted(BOUNDS))
def test_a_dp_round_equals_opacus_hooks_round(name: str, noise: float) -> None:
    config = TrainConfig(lr=0.1, momentum=0.9, batch_size=8, epochs=2)
    ours = _trainer(name, noise, BOUNDS[name])
    weights = get_flat(ours.model)
    factors = []
    original = BookKeeping.clipped_sum

    def spy(self: BookKeeping, x: torch.Tensor, y: torch.Tensor) -> object:
        out = original(self, x, y)
        assert self.last_factors is not None
        factors.append(self.last_factors)
        return out

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(BookKeeping, "clipped_sum", spy)
        result = ours.train(weights, config, round=2)
    every = torch.cat(factors)
    assert (every < 1).any() and (every == 1).any()  # clipping binds on a part
    reference = _trainer(name, noise, BOUNDS[name])
    expected = opacus_hooks_round(reference, weights, config, round=2)
    assert np.linalg.norm(expected) > 0
    np.testing.assert_allclose(result.delta, expected, rtol=1e-4, atol=1e-6)
    assert ours.privacy is not None and reference.privacy is not None
    history = reference.privacy.engine.accountant.history
    assert ours.privacy.engine.accountant.history == history
    again = _trainer(name, noise, BOUNDS[name]).train(weights, config, round=2)
    assert np.array_equal(again.delta, result.delta)  # same seed, same update


def _group_norm_mlp(input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    width = int(np.prod(input_shape))
    return nn.Sequential(
        nn.Flatten(), nn.Linear(width, 16), nn.GroupNorm(4, 16), nn.ReLU(),
        nn.Linear(16, n_classes),
    )  # fmt: skip


def test_a_run_records_and_logs_each_layers_path(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setitem(MODELS_BY_NAME, "gn_mlp", _group_norm_mlp)
    scenario = small_scenario(
        rounds=1, clients=2, dp=DPSpec(epsilon=10), model={"name": "gn_mlp"}
    )
    with caplog.at_level(logging.INFO, logger="clusterfed.actors.privacy"):
        result = clusterfed.run(scenario, out=tmp_path, workers=1)
    assert result.summary["failed_updates"] == 0
    layers = json.loads((tmp_path / "config.json").read_text())["dp_layers"]
    assert layers == [
        {"name": "1", "kind": "Linear", "path": "book-keeping"},
        {"name": "2", "kind": "GroupNorm", "path": "opacus"},
        {"name": "4", "kind": "Linear", "path": "book-keeping"},
    ]
    assert (
        "DP-SGD clipping per layer: 1 Linear: book-keeping, 2 GroupNorm: opacus,"
        " 4 Linear: book-keeping" in caplog.text
    )
    plain = clusterfed.run(small_scenario(rounds=1, clients=2), out=tmp_path / "p")
    assert "dp_layers" not in json.loads((plain.out / "config.json").read_text())
