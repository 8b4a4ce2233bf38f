"""`LocalTrainer`: a client's training and evaluation, with no runtime around it.

It owns one model and the client's tensors; a task loads the received weights,
runs plain minibatch SGD and returns the delta. The shuffling stream of a task
is derived from the client's seed and the round, so a result never depends on
which thread, process or Ray actor ran it.

With local differential privacy the trainer holds a `PrivateTraining`
(`privacy.py`) and trains with DP-SGD: Opacus' Poisson sampling, per-sample
clipping in one backward pass (`bookkeeping.py`), Gaussian noise drawn as
Opacus draws it, every step counted by the client's Opacus accountant. The
sampling and noise streams derive from the seed and the round too, so a
private run is as reproducible as any other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader

from clusterfed.errors import ClusterfedError
from clusterfed.models import get_flat, set_flat
from clusterfed.protocol import TrainConfig
from clusterfed.seeding import derive_seed

from .bookkeeping import BookKeeping, add_noise
from .privacy import PrivateTraining, poisson_steps
from .proximal import Pull, add_proximal_gradient, grad_of, shaped_like
from .rows import Pairs, Rows

PROBE_KEY = 1  # keeps the probe's mini-batch stream apart from training's
DP_SAMPLING_KEY = 2  # the Poisson sampling stream of a private round
DP_NOISE_KEY = 3  # the Gaussian noise stream of a private round


Anchor = tuple[np.ndarray, float]
"""A proximal anchor: a flat model the local weights are pulled toward, and
the coefficient of that pull (FedSoft's λ·u_s toward center s)."""


@dataclass(frozen=True)
class TrainResult:
    delta: np.ndarray
    loss: float
    n_samples: int
    samples_seen: int
    epsilon: float | None = None  # privacy spent so far, with DP
    # The client's weight for each model of the task (FedSoft), or its new
    # mixture weights (FedEM), in task order.
    importance: tuple[float, ...] | None = None
    # Each model's mean training loss before training (FedDrift), in task order.
    losses: tuple[float, ...] | None = None
    # A mixture task's (FedEM's) deltas of the models other than `delta`'s,
    # in task order.
    components: tuple[np.ndarray, ...] | None = None


@dataclass(frozen=True)
class EvalResult:
    accuracy: float
    loss: float
    n_samples: int


class LocalTrainer:
    def __init__(
        self,
        model: nn.Module,
        x_train: torch.Tensor | Rows,
        y_train: torch.Tensor,
        x_test: torch.Tensor | Rows,
        y_test: torch.Tensor,
        *,
        seed: int,
        privacy: PrivateTraining | None = None,
        test_set: tuple[Rows, torch.Tensor] | None = None,
    ) -> None:
        if len(y_train) == 0 or len(y_test) == 0:
            raise ValueError("a client needs at least one train and one test sample")
        self.model = model
        self._x_train = x_train if isinstance(x_train, Rows) else Rows(x_train)
        self._x_test = x_test if isinstance(x_test, Rows) else Rows(x_test)
        if len(self._x_train) != len(y_train) or len(self._x_test) != len(y_test):
            raise ValueError("a client needs one label per sample")
        self.y_train, self.y_test = y_train, y_test
        self.seed = seed
        self.privacy = privacy
        # The device is the model's (`ScratchModels` puts it there); the
        # random streams stay on CPU, so batches are the same on every device.
        self.device = next(model.parameters()).device
        self._train_set = Pairs(self._x_train, y_train)
        # Images of the dataset's own test split (see data.test_sets): what
        # the reported accuracy comes from; "test" above is the hold-out.
        if test_set is not None and len(test_set[0]) != len(test_set[1]):
            raise ValueError("a client's test set needs one label per image")
        self._test_set = test_set

    @property
    def x_train(self) -> torch.Tensor:
        return self._x_train.gather()

    @property
    def x_test(self) -> torch.Tensor:
        return self._x_test.gather()

    @property
    def test_set(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The client's images and labels from the dataset's test split;
        None if it has none (digits)."""
        if self._test_set is None:
            return None
        rows, y = self._test_set
        return rows.gather(), y

    def batch(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Training samples `rows` and their labels, on the trainer's device."""
        return self._x_train[rows], self.y_train[rows]

    @property
    def n_train(self) -> int:
        return len(self.y_train)

    @property
    def n_test(self) -> int:
        return len(self.y_test)

    def train(
        self,
        weights: np.ndarray,
        config: TrainConfig,
        round: int,
        anchors: Sequence[Anchor] = (),
        sample_weights: np.ndarray | None = None,
    ) -> TrainResult:
        """Train from `weights` for `config.epochs` epochs; return the delta.

        The loss is the batch's cross-entropy plus the proximal terms: FedProx's
        μ/2·‖w − weights‖² (`config.mu`) and c/2·‖w − a‖² for each
        `(a, c)` of `anchors` (FedSoft's pull toward every center). With
        `sample_weights` (one per training sample: FedEM's responsibilities)
        the batch's cross-entropy is Σᵢ wᵢ·ℓᵢ / batch size, as the FedEM
        authors' `Learner.fit_epoch` weighs it.

        Raises:
            PrivacyBudgetError: with DP, when this task would spend more than
                the client's budget (nothing is trained then).
            ClusterfedError: `sample_weights` with DP (Opacus clips each
                sample's gradient of an unweighted loss), or not one finite
                weight ≥ 0 per training sample.
        """
        if self.privacy is not None:
            if sample_weights is not None:
                raise ClusterfedError(
                    "training with sample weights (FedEM's) has no DP path"
                )
            return self._train_private(weights, config, round, self.privacy, anchors)
        scale = None if sample_weights is None else self._sample_weights(sample_weights)
        params, pulls, optimizer = self._start_round(weights, config, anchors)
        generator = torch.Generator().manual_seed(derive_seed(self.seed, round))
        n = self.n_train
        total_loss, seen = 0.0, 0
        for _ in range(config.epochs):
            order = torch.randperm(n, generator=generator)
            for first in range(0, n, config.batch_size):
                batch = order[first : first + config.batch_size]
                logits = self.model(self._x_train[batch])
                if scale is None:
                    loss = F.cross_entropy(logits, self.y_train[batch])
                else:
                    each = F.cross_entropy(
                        logits, self.y_train[batch], reduction="none"
                    )
                    loss = (each * scale[batch]).sum() / len(batch)
                total_loss += loss.item() * len(batch)
                seen += len(batch)
                optimizer.zero_grad(set_to_none=True)
                # What Tensor.backward calls, but annotated: strict typing
                # refuses the untyped method.
                torch.autograd.backward(loss)
                # FedProx's μ/2·‖w − w₀‖² enters as its gradient μ(w − w₀),
                # as in the DP path: outside autograd's graph it is one
                # fused update per parameter instead of a squared distance
                # over every weight and its backward pass each step. So
                # does each anchor's c/2·‖w − a‖², after it.
                for anchor, coefficient in pulls:
                    add_proximal_gradient(params, anchor, coefficient)
                optimizer.step()
        delta = get_flat(self.model) - weights
        return TrainResult(delta, total_loss / seen, n, seen)

    def _sample_weights(self, weights: np.ndarray) -> torch.Tensor:
        if weights.shape != (self.n_train,) or not np.isfinite(weights).all():
            raise ClusterfedError(
                f"sample weights of shape {weights.shape}: one finite weight per"
                f" training sample ({self.n_train}) is needed"
            )
        if (weights < 0).any():
            raise ClusterfedError("sample weights must be >= 0")
        return torch.from_numpy(np.asarray(weights, dtype=np.float32)).to(self.device)

    def _start_round(
        self, weights: np.ndarray, config: TrainConfig, anchors: Sequence[Anchor]
    ) -> tuple[list[nn.Parameter], list[Pull], torch.optim.SGD]:
        """Load `weights`; the parameters, the proximal pulls (FedProx's toward
        `weights` first, then `anchors`', each with a positive coefficient)
        and a fresh optimizer: momentum starts at zero every round."""
        set_flat(self.model, weights)
        self.model.train()
        params = list(self.model.parameters())
        pulls: list[Pull] = []
        if config.mu > 0:
            pulls.append(([p.detach().clone() for p in params], config.mu))
        for anchor, coefficient in anchors:
            if not (coefficient >= 0 and np.isfinite(coefficient)):
                raise ValueError(
                    f"a proximal coefficient must be finite and >= 0, got {coefficient}"
                )
            if coefficient > 0:
                pulls.append((shaped_like(params, anchor), float(coefficient)))
        optimizer = torch.optim.SGD(
            params,
            lr=config.lr,
            momentum=config.momentum,
            weight_decay=config.weight_decay,
        )
        return params, pulls, optimizer

    def check_budget(self, config: TrainConfig) -> float | None:
        """The ε spent after a task with `config`; None without DP.

        Raises:
            PrivacyBudgetError: the task would exceed the budget.
        """
        if self.privacy is None:
            return None
        rate, steps = poisson_steps(self.n_train, config.batch_size)
        return self.privacy.check(rate, steps * config.epochs)

    def _train_private(
        self,
        weights: np.ndarray,
        config: TrainConfig,
        round: int,
        privacy: PrivateTraining,
        anchors: Sequence[Anchor] = (),
    ) -> TrainResult:
        """DP-SGD: Opacus' Poisson batches, clipped per-sample gradients,
        Gaussian noise, every step counted by Opacus' accountant.

        Clipping is book-keeping (`bookkeeping.py`): each sample's gradient
        norm and the clipped sum come from each layer's inputs and output
        gradients of one backward pass, so per-sample gradients are never
        materialized and no second pass is taken (Opacus' fast gradient
        clipping takes two). The noise is drawn as Opacus draws it, from the
        client's stream; the sampling is Opacus' `DPDataLoader`, the
        accountant steps as Opacus' optimizer hook steps it.
        """
        from opacus.data_loader import DPDataLoader

        self.check_budget(config)
        params, pulls, optimizer = self._start_round(weights, config, anchors)
        loader = DataLoader(
            self._train_set,
            batch_size=config.batch_size,
            generator=torch.Generator().manual_seed(
                derive_seed(self.seed, round, DP_SAMPLING_KEY)
            ),
        )
        batches = DPDataLoader.from_data_loader(loader)
        # As `PrivacyEngine.make_private` derives them from the loader.
        rate = 1 / len(loader)
        expected = int(len(self._train_set) * rate)
        noise = torch.Generator(self.device).manual_seed(
            derive_seed(self.seed, round, DP_NOISE_KEY)
        )
        keeper = BookKeeping(self.model, privacy.max_grad_norm)
        std = privacy.noise_multiplier * privacy.max_grad_norm
        scratch = [torch.empty_like(p) for p in keeper.params]
        total_loss, seen = 0.0, 0
        for _ in range(config.epochs):
            for x, y in batches:
                # An empty Poisson batch is built on CPU: noise only.
                x, y = x.to(self.device), y.to(self.device)
                loss, sums = keeper.clipped_sum(x, y)
                if len(y):
                    total_loss += loss.item()
                    seen += len(y)
                grads = add_noise(
                    sums,
                    std=std,
                    expected_batch_size=expected,
                    generator=noise,
                    scratch=scratch,
                )
                for param, grad in zip(keeper.params, grads, strict=True):
                    param.grad = grad
                privacy.engine.accountant.step(
                    noise_multiplier=privacy.noise_multiplier, sample_rate=rate
                )
                # The proximal term reads no data: it joins the noisy gradient.
                for anchor, coefficient in pulls:
                    add_proximal_gradient(params, anchor, coefficient)
                optimizer.step()
        delta = get_flat(self.model) - weights
        # Every batch empty (a tiny client, bad luck): report the received
        # model's training loss, as there is no batch loss to average.
        mean_loss = total_loss / seen if seen else self.loss(weights)
        return TrainResult(delta, mean_loss, self.n_train, seen, privacy.spent())

    @torch.no_grad()
    def loss(self, weights: np.ndarray) -> float:
        """Mean loss of `weights` over the training samples."""
        set_flat(self.model, weights)
        self.model.eval()
        return F.cross_entropy(self.model(self.x_train), self.y_train).item()

    @torch.no_grad()
    def sample_losses(self, weights: np.ndarray) -> np.ndarray:
        """The loss of `weights` on each training sample (float64), in order."""
        set_flat(self.model, weights)
        self.model.eval()
        losses = F.cross_entropy(
            self.model(self.x_train), self.y_train, reduction="none"
        )
        return losses.cpu().numpy().astype(np.float64)

    def batch_loss_and_gradient(
        self, weights: np.ndarray, batch_size: int, round: int
    ) -> tuple[float, np.ndarray]:
        """Mean loss and its flat gradient on one mini-batch of the round.

        The batch is drawn from a stream of its own, the same for every
        candidate model of the round, so candidates are compared on equal data.
        """
        set_flat(self.model, weights)
        self.model.train()
        generator = torch.Generator().manual_seed(
            derive_seed(self.seed, round, PROBE_KEY)
        )
        batch = torch.randperm(self.n_train, generator=generator)[:batch_size]
        self.model.zero_grad(set_to_none=True)
        loss = F.cross_entropy(self.model(self._x_train[batch]), self.y_train[batch])
        torch.autograd.backward(loss)
        gradient = torch.cat([grad_of(p).reshape(-1) for p in self.model.parameters()])
        return loss.item(), gradient.cpu().numpy().astype(np.float32, copy=True)

    @torch.no_grad()
    def evaluate(self, weights: np.ndarray) -> EvalResult:
        """Accuracy and mean loss of `weights` on the held-out split."""
        set_flat(self.model, weights)
        self.model.eval()
        logits = self.model(self.x_test)
        loss = F.cross_entropy(logits, self.y_test).item()
        correct = (logits.argmax(dim=1) == self.y_test).sum().item()
        return EvalResult(correct / self.n_test, loss, self.n_test)

    @torch.no_grad()
    def evaluate_test_set(self, weights: np.ndarray) -> EvalResult | None:
        """Accuracy and mean loss of `weights` on the client's test set drawn
        from the dataset's test split; None if it has none (digits)."""
        if self._test_set is None:
            return None
        rows, y = self._test_set
        set_flat(self.model, weights)
        self.model.eval()
        logits = self.model(rows.gather())
        loss = F.cross_entropy(logits, y).item()
        correct = (logits.argmax(dim=1) == y).sum().item()
        return EvalResult(correct / len(y), loss, len(y))
