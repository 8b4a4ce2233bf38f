"""DP-SGD in one backward pass: book-keeping clipping.

Bu, Wang, Zha and Karypis, "Differentially Private Optimization on Large
Model at Small Cost", ICML 2023. Opacus 1.6 does not ship it: its fast
gradient clipping ("ghost" mode) takes the per-sample norms from a first
backward pass and the clipped sum from a second one, of the loss reweighted
by the clipping factors. Book-keeping keeps what the first pass already has,
each layer's input activations A and output gradients G, and forms the
clipped sum from them directly, Aᵀ·diag(c)·G per layer, so the second pass is
never taken; the one backward pass only runs the chain of output gradients
(autograd is asked for G, not for the weights' gradients).

Per sample i and layer, with a its input and g the gradient of its
(summed) loss at the layer's output:

- `nn.Linear` on (N, d) inputs: ‖∇W‖² = ‖aᵢ‖²·‖gᵢ‖², ‖∇b‖² = ‖gᵢ‖².
  With extra dimensions (N, T, d) the per-sample gradient is Gᵢᵀ·Aᵢ, whose
  norm comes from Aᵢ·Aᵢᵀ ⊙ Gᵢ·Gᵢᵀ (the ghost norm, T² per sample) or from
  the materialized gradient (d·p per sample), whichever is fewer products.
- `nn.Conv2d` (one group, zero padding): the same on the unfolded input
  (N, C·kh·kw, L) and the gradient (N, C_out, L), L the output positions.
  On the Fashion-MNIST CNN the materialized gradient is the cheaper of the
  two on both convolutions (bench/dp_steps.py measures both).

The clipping factor is Opacus': cᵢ = min(1, C / (‖∇ᵢ‖ + 1e-6)), ‖∇ᵢ‖ over
every layer's parameters together. Trainable layers of any other type (group
norm, say) take Opacus' own per-sample rule for that layer (its
`GradSampleModule.GRAD_SAMPLERS`, the hooks path's) on the same captured A and
G: their per-sample gradients are materialized, and their norms join the
others' in one clipping factor. A module that owns parameters with no such
rule is refused (`private_model` refuses it before a run); so is, at its
first step, a layer called twice in a forward pass (its activations would
need pairing) or one whose output a later operation changes in place
(`ReLU(inplace=True)`: the tensor would no longer hold the layer's output).

Noise, sampling and the books stay Opacus': σ·C Gaussian noise per parameter
in the model's order, drawn as Opacus' `_generate_noise` draws it, the sum
divided by the expected batch size; the caller samples with Opacus'
`DPDataLoader` and steps Opacus' accountant. tests/test_bookkeeping.py holds
the norms, factors, sums and updates against Opacus' hooks path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn
from torch.nn import functional as F

Path = Literal["book-keeping", "opacus"]
"""How a layer's per-sample norms and clipped sum are computed."""

# Opacus' clipping: C / (‖g‖ + 1e-6), at most 1.
_CLIP_EPS = 1e-6

_Record = tuple[torch.Tensor, torch.Tensor, int]
"""A layer's input (detached), its output, and the output's version."""


@dataclass(frozen=True)
class LayerPath:
    """One trainable layer: its name in the model, its type, its path."""

    name: str
    kind: str
    path: Path


def layer_paths(model: nn.Module) -> list[LayerPath]:
    """The path each trainable layer of `model` takes, in module order.

    Raises:
        ValueError: a module owns trainable parameters and has neither a
            book-keeping rule nor an Opacus per-sample rule.
    """
    paths = []
    for name, module in _trainable_layers(model):
        if _book_kept(module):
            path: Path = "book-keeping"
        elif type(module) in _opacus_samplers():
            path = "opacus"
        else:
            raise ValueError(
                f"layer {name or '(root)'} ({type(module).__name__}) owns"
                " parameters and has no per-sample gradient rule"
            )
        paths.append(LayerPath(name, type(module).__name__, path))
    return paths


def describe(paths: list[LayerPath]) -> str:
    """One line: each layer and its path."""
    return ", ".join(f"{p.name} {p.kind}: {p.path}" for p in paths)


class BookKeeping:
    """Clipped per-sample gradient sums of `model` in one backward pass.

    Args:
        model: the model; its trainable layers are read once, here.
        max_grad_norm: C, the per-sample clipping bound.
    """

    def __init__(self, model: nn.Module, max_grad_norm: float) -> None:
        if not max_grad_norm > 0:
            raise ValueError(f"max_grad_norm must be > 0, got {max_grad_norm}")
        self.model = model
        self.max_grad_norm = max_grad_norm
        self.paths = layer_paths(model)
        modules = dict(model.named_modules())
        self._layers = [(modules[p.name], p.path) for p in self.paths]
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.last_norms: torch.Tensor | None = None  # ‖∇ᵢ‖ of the last batch
        self.last_factors: torch.Tensor | None = None  # cᵢ of the last batch
        self._sums: list[torch.Tensor] | None = None

    def clipped_sum(
        self, x: torch.Tensor, y: torch.Tensor
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The batch's summed cross-entropy (detached) and Σᵢ cᵢ·∇ℓᵢ for
        each trainable parameter, in `model.parameters()` order.

        The sums are written into buffers kept from step to step (valid
        until the next call): on this machine, fresh weight-sized tensors
        every step measured slower than the arithmetic done on them.
        """
        if self._sums is None:
            self._sums = [torch.zeros_like(p) for p in self.params]
        out: _Out = dict(zip(self.params, self._sums, strict=True))
        if len(y) == 0:  # an empty Poisson batch: nothing to clip
            self.last_norms = self.last_factors = torch.zeros(0, device=x.device)
            for buffer in self._sums:
                buffer.zero_()
            return torch.zeros((), device=x.device), self._sums
        with self._captured() as records:
            losses = F.cross_entropy(self.model(x), y, reduction="none")
        outputs = []
        for (module, _), seen in zip(self._layers, records, strict=True):
            if len(seen) != 1:
                raise RuntimeError(
                    f"{type(module).__name__} ran {len(seen)} times in one forward"
                    " pass; book-keeping clipping needs each layer once"
                )
            _, output, version = seen[0]
            # Changed in place (ReLU(inplace=True), say), the tensor no
            # longer holds the layer's output: its gradient would be another's.
            if output._version != version:
                raise RuntimeError(
                    f"the output of {type(module).__name__} was changed in place"
                    " later in the forward pass; book-keeping clipping needs it"
                    " as the layer returned it (use inplace=False)"
                )
            outputs.append(output)
        # Only the output gradients: autograd skips the weights' gradients.
        grads = torch.autograd.grad(losses.sum(), outputs)
        squared = []
        sums: list[_Sum] = []
        for (module, path), seen, g in zip(self._layers, records, grads, strict=True):
            a = seen[0][0]
            if path == "book-keeping":
                norm2, summer = _book_keep(module, a, g)
            else:
                norm2, summer = _opacus_layer(module, a, g)
            squared.append(norm2)
            sums.append(summer)
        norms = torch.stack(squared).sum(dim=0).sqrt()
        factors = (self.max_grad_norm / (norms + _CLIP_EPS)).clamp(max=1.0)
        self.last_norms, self.last_factors = norms, factors
        for summer in sums:
            summer(factors, out)
        return losses.detach().sum(), self._sums

    @contextmanager
    def _captured(
        self,
    ) -> Iterator[list[list[_Record]]]:
        """Each layer's (input, output, output's version) of the forward
        passes run inside."""
        records: list[list[_Record]] = [[] for _ in self._layers]
        handles = [
            module.register_forward_hook(_recorder(seen))
            for (module, _), seen in zip(self._layers, records, strict=True)
        ]
        try:
            yield records
        finally:
            for handle in handles:
                handle.remove()


_Out = dict[torch.Tensor, torch.Tensor]
_Sum = Callable[[torch.Tensor, _Out], None]
"""Writes a layer's clipped sums, given the clipping factors, into the
buffers of its parameters."""


def _recorder(
    seen: list[_Record],
) -> Callable[[nn.Module, tuple[torch.Tensor, ...], torch.Tensor], None]:
    def hook(
        module: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor
    ) -> None:
        seen.append((inputs[0].detach(), output, output._version))

    return hook


def _trainable_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    return [
        (name, module)
        for name, module in model.named_modules()
        if any(p.requires_grad for p in module.parameters(recurse=False))
    ]


def _book_kept(module: nn.Module) -> bool:
    """Whether book-keeping has a rule for this layer (exact types: a
    subclass may change what its forward computes; every weight trainable,
    as its norms count them all)."""
    if not all(p.requires_grad for p in module.parameters(recurse=False)):
        return False
    if type(module) is nn.Linear:
        return True
    if type(module) is nn.Conv2d:
        return (
            module.groups == 1
            and module.padding_mode == "zeros"
            and not isinstance(module.padding, str)
        )
    return False


def _opacus_samplers() -> dict[type, Callable[..., dict[nn.Parameter, torch.Tensor]]]:
    from opacus.grad_sample import GradSampleModule

    return GradSampleModule.GRAD_SAMPLERS  # type: ignore[no-any-return]


def _book_keep(
    module: nn.Module, a: torch.Tensor, g: torch.Tensor
) -> tuple[torch.Tensor, _Sum]:
    """A Linear or Conv2d layer's squared per-sample norms and its clipped
    sum, from its input `a` and output gradient `g`."""
    if not isinstance(module, nn.Linear | nn.Conv2d):
        raise TypeError(f"no book-keeping rule for {type(module).__name__}")
    n = len(g)
    weight, bias = module.weight, module.bias
    if isinstance(module, nn.Conv2d):
        # (N, C·kh·kw, L) and (N, C_out, L): a linear layer over L positions.
        a3 = F.unfold(
            a.to(g.dtype),
            module.kernel_size,
            dilation=module.dilation,
            padding=module.padding,  # type: ignore[arg-type]
            stride=module.stride,
        ).transpose(1, 2)
        g3 = g.reshape(n, g.shape[1], -1).transpose(1, 2)
    elif a.dim() == 2:
        return _linear_2d(weight, bias, a, g)
    else:
        a3, g3 = a.reshape(n, -1, a.shape[-1]), g.reshape(n, -1, g.shape[-1])
    return _sequence(weight, bias, a3, g3)


def _linear_2d(
    weight: torch.Tensor, bias: torch.Tensor | None, a: torch.Tensor, g: torch.Tensor
) -> tuple[torch.Tensor, _Sum]:
    g2 = g.square().sum(dim=1)
    norm2 = a.square().sum(dim=1) * g2
    if bias is not None:
        norm2 = norm2 + g2

    def summed(c: torch.Tensor, out: _Out) -> None:
        cg = g * c.unsqueeze(1)
        torch.mm(cg.t(), a, out=out[weight])
        if bias is not None:
            torch.sum(cg, dim=0, out=out[bias])

    return norm2, summed


def ghost_norm_is_cheaper(t: int, d: int, p: int) -> bool:
    """Whether the ghost norm (T² (d + p) products a sample) beats the
    materialized gradient (T d p) for a linear map of d inputs and p outputs
    at T positions. bench/dp_steps.py times both on the CNNs' convolutions."""
    return t * (d + p) < d * p


def _sequence(
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    a: torch.Tensor,
    g: torch.Tensor,
    ghost: bool | None = None,
) -> tuple[torch.Tensor, _Sum]:
    """A linear map applied at T positions: a (N, T, d), g (N, T, p); the
    ghost norm or not as `ghost` says (None: the cheaper by count)."""
    n, t, d = a.shape
    p = g.shape[2]
    shape = weight.shape
    if ghost is None:
        ghost = ghost_norm_is_cheaper(t, d, p)
    if ghost:
        gram = torch.bmm(a, a.transpose(1, 2)) * torch.bmm(g, g.transpose(1, 2))
        norm2 = gram.sum(dim=(1, 2)).clamp(min=0)
        per_sample = None
    else:
        per_sample = torch.bmm(g.transpose(1, 2), a)  # (N, p, d)
        norm2 = per_sample.reshape(n, -1).square().sum(dim=1)
    bias_each = g.sum(dim=1) if bias is not None else None
    if bias_each is not None:
        norm2 = norm2 + bias_each.square().sum(dim=1)

    def summed(c: torch.Tensor, out: _Out) -> None:
        if per_sample is not None:
            w = torch.einsum("n,npd->pd", c, per_sample)
        else:
            cg = (g * c.view(n, 1, 1)).reshape(n * t, p)
            w = cg.t() @ a.reshape(n * t, d)
        out[weight].copy_(w.reshape(shape))
        if bias is not None and bias_each is not None:
            torch.mv(bias_each.t(), c, out=out[bias])

    return norm2, summed


def _opacus_layer(
    module: nn.Module, a: torch.Tensor, g: torch.Tensor
) -> tuple[torch.Tensor, _Sum]:
    """Opacus' per-sample rule for the layer: materialized gradients."""
    each = {
        param: grad
        for param, grad in _opacus_samplers()[type(module)](module, [a], g).items()
        if param.requires_grad
    }
    n = len(g)
    norm2 = sum(
        (grad.reshape(n, -1).square().sum(dim=1) for grad in each.values()),
        start=torch.zeros(n, dtype=g.dtype, device=g.device),
    )

    def summed(c: torch.Tensor, out: _Out) -> None:
        for param, grad in each.items():
            out[param].copy_(torch.einsum("n,n...->...", c, grad))

    return norm2, summed


def add_noise(
    sums: list[torch.Tensor],
    *,
    std: float,
    expected_batch_size: int,
    generator: torch.Generator,
    scratch: list[torch.Tensor] | None = None,
) -> list[torch.Tensor]:
    """(sum + N(0, std²)) / expected batch size, per parameter in order, in
    place in `sums`, which it returns.

    The noise is drawn as Opacus' `_generate_noise` draws it: each tensor's
    normals in turn from `generator`, in the gradient's dtype and device,
    none when std = 0; so a client's stream gives the noise Opacus would
    add, and the arithmetic is Opacus' (a sum, then a division). `scratch`
    (tensors shaped as `sums`) keeps the draws' memory from step to step.
    """
    buffers = scratch if scratch is not None else [torch.empty_like(s) for s in sums]
    for s, noise in zip(sums, buffers, strict=True):
        if std > 0:
            s.add_(noise.normal_(0, std, generator=generator))
        s.div_(expected_batch_size)
    return sums
