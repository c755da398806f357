r"""The DP-SGD step: Poisson sampling, per-example gradients, clipping, Gaussian noise.

Abadi, Chu, Goodfellow, McMahan, Mironov, Talwar, Zhang, "Deep Learning with
Differential Privacy" (CCS 2016), Algorithm 1, with Poisson sampling (each record joins
the batch independently with probability q, so the batch size varies and may be 0 —
the sampling the accountants certify; Mironov, Talwar, Zhang 2019):

.. math::
    \tilde g = \frac{1}{qN}\Big(\sum_{i \in B} g_i \min\big(1, C / \lVert g_i\rVert_2\big)
               + \mathcal N(0, \sigma^2 C^2 I)\Big)

where :math:`g_i` is example i's gradient over *all* parameters, C the clipping norm,
σ the noise multiplier and qN the expected batch size. The noisy gradient is handed to an
ordinary optimiser (SGD, momentum, Adam): post-processing, no privacy cost.

Per-example gradients, fast path (models made only of layers known to treat each example
on its own, whose trainable parameters all sit in ``Linear`` or ``Conv2d`` layers with
``groups=1``): one ordinary batched forward pass records each such layer's input
activations a_i, one backward pass of Σ_i loss_i gives its output gradients δ_i (each
example's loss depends on its own row only, so δ_i is the gradient of loss_i alone), and the
per-example weight gradients follow in closed form — Linear: g_i = δ_iᵀ a_i (the squared
norm ‖δ_i‖²‖a_i‖² without forming g_i); Conv2d: g_i = δ_i · unfold(a_i)ᵀ with δ_i of shape
(out channels × positions) — the hook-based method of Goodfellow, "Efficient Per-Example
Gradient Computations" (arXiv:1510.01799, 2015) and of Opacus. Any other model uses
``torch.func`` (``functional_call`` + ``vmap(grad_and_value(...))``). Either way the
per-example norms and the clipped sum are fused tensor operations (no Python loop per
example).
A large Poisson batch is processed in physical chunks of at most ``max_physical_batch``
examples; the clipped sums add up, and the noise is drawn once per step, so the result
equals the unsplit step (up to floating-point summation order).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad_and_value, vmap

from dpcalc import _validate as v
from dpcalc.train.models import LogisticRegression, TanhCNN, check_model

__all__ = ["PoissonSampler", "DPSGDStep", "StepOutput"]

#: layers without parameters that compute each example from that example alone (so a batched
#: forward pass gives every example its own gradient) — the fast path allows only these,
#: ``Linear``, ``Conv2d`` and containers of them
_PER_EXAMPLE_LAYERS = (
    nn.Identity, nn.Flatten, nn.Unflatten, nn.Tanh, nn.ReLU, nn.LeakyReLU, nn.ELU, nn.GELU,
    nn.SiLU, nn.Sigmoid, nn.Softplus, nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d,
    nn.AdaptiveMaxPool2d,
)

#: added to the norm in the clipping factor C/(‖g‖ + ξ), as Opacus does: a clipped
#: gradient's norm is then strictly below C despite float rounding, and ‖g‖ = 0 is safe
_NORM_EPS = 1e-6


class PoissonSampler:
    """Draws Poisson batches: each of ``dataset_size`` indices independently with probability q.

    Args:
        dataset_size: N ≥ 1.
        sample_rate: q in (0, 1].
        generator: the torch generator that owns the sampling randomness (checkpointed).
    """

    def __init__(self, *, dataset_size: int, sample_rate: float, generator: torch.Generator) -> None:
        self.dataset_size = v.count("dataset_size", dataset_size)
        self.sample_rate = v.half_open_unit("sample_rate", sample_rate)
        self.generator = generator

    def sample(self) -> torch.Tensor:
        """Indices of one batch: a sorted int64 tensor of variable length (possibly 0)."""
        mask = torch.rand(self.dataset_size, generator=self.generator) < self.sample_rate
        return mask.nonzero().squeeze(1)


class StepOutput:
    """What one DP-SGD step produced (for logging; the update is already applied)."""

    __slots__ = ("batch_size", "loss_sum")

    def __init__(self, batch_size: int, loss_sum: float) -> None:
        self.batch_size = batch_size
        self.loss_sum = loss_sum


class DPSGDStep:
    """Computes the noisy DP-SGD gradient of a model and applies an optimiser step.

    Args:
        model: a torch module mapping (B, ...) inputs to (B, classes) logits; its
            parameters are updated in place by ``optimizer``. Batch-norm layers are refused
            (:func:`dpcalc.train.models.check_model`).
        optimizer: any torch optimiser over ``model.parameters()``.
        noise_multiplier: σ, noise std divided by ``max_grad_norm``; ≥ 0 (0 only for tests
            and benchmarks — not private).
        max_grad_norm: C > 0, the per-example L2 clipping norm over all parameters.
        expected_batch_size: qN > 0, the divisor of the noisy sum.
        max_physical_batch: largest number of examples whose per-example gradients are
            held in memory at once.
        noise_generator: the torch generator that owns the noise (checkpointed).

    Per-example gradients take the hook-based fast path when :attr:`uses_fast_path`
    (see the module docstring), else ``torch.func``; both give each example the gradient of
    its own loss, so the step's result does not depend on the path.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        noise_multiplier: float,
        max_grad_norm: float,
        expected_batch_size: float,
        max_physical_batch: int,
        noise_generator: torch.Generator,
    ) -> None:
        check_model(model)  # batch norm would mix the examples the clipping keeps apart
        self.model = model
        self.optimizer = optimizer
        self.noise_multiplier = v.nonnegative("noise_multiplier", noise_multiplier)
        self.max_grad_norm = v.positive("max_grad_norm", max_grad_norm)
        self.expected_batch_size = v.positive("expected_batch_size", expected_batch_size)
        self.max_physical_batch = v.count("max_physical_batch", max_physical_batch)
        self.noise_generator = noise_generator
        self.names = [n for n, p in model.named_parameters() if p.requires_grad]
        self._params = dict(model.named_parameters())

        if getattr(model, "supports_unbatched", False):
            # one example without a batch dimension: under vmap the linear layers'
            # per-example weight gradients become outer products rather than k=1 matmuls
            def example_loss(params, buffers, x, y):
                return F.cross_entropy(functional_call(model, (params, buffers), (x,)), y)
        else:
            def example_loss(params, buffers, x, y):
                logits = functional_call(model, (params, buffers), (x.unsqueeze(0),))
                return F.cross_entropy(logits, y.unsqueeze(0))

        self._per_example = vmap(grad_and_value(example_loss), in_dims=(None, None, 0, 0))
        self._layers = _fast_path_layers(model, self.names)

    @property
    def uses_fast_path(self) -> bool:
        """True when per-example gradients come from layer hooks rather than ``torch.func``."""
        return self._layers is not None

    # -- fast path: one batched forward/backward, closed-form per-example gradients ------
    def _hooked_pass(self, x: torch.Tensor, y: torch.Tensor) -> tuple[list, torch.Tensor] | None:
        """Per-layer (module, weight name, bias name, a, δ) records and per-example losses,
        or None when a layer ran more than once (a shared layer: use ``torch.func``)."""
        inputs: dict[nn.Module, torch.Tensor] = {}
        outputs: dict[nn.Module, torch.Tensor] = {}
        reused = False

        def hook(module, args, out):
            nonlocal reused
            if module in outputs:
                reused = True
            inputs[module] = args[0].detach()
            outputs[module] = out

        handles = [m.register_forward_hook(hook) for m, _, _ in self._layers]
        try:
            with torch.enable_grad():
                logits = self.model(x)
                losses = F.cross_entropy(logits, y, reduction="none")  # (b,): loss_i per example
                if reused:
                    return None
                ran = [(m, w, bias) for m, w, bias in self._layers if m in outputs]
                deltas = torch.autograd.grad(losses.sum(), [outputs[m] for m, _, _ in ran],
                                             allow_unused=True) if ran else ()
        finally:
            for h in handles:
                h.remove()
        records = [(m, w, bias, inputs[m], d if d is not None else torch.zeros_like(outputs[m]))
                   for (m, w, bias), d in zip(ran, deltas, strict=True)]
        return records, losses.detach()

    @staticmethod
    def _conv_grads(m: nn.Conv2d, a: torch.Tensor, d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Conv2d per-example weight gradients (b, *weight.shape) and bias gradients (b, out)."""
        b = a.shape[0]
        d = d.reshape(b, d.shape[1], -1)  # (b, out, positions)
        if m.dilation == (1, 1):  # patches as a strided view: one copy, faster than im2col
            (kh, kw), (sh, sw), (ph, pw) = m.kernel_size, m.stride, m.padding
            padded = F.pad(a, (pw, pw, ph, ph)) if ph or pw else a
            patches = padded.unfold(2, kh, sh).unfold(3, kw, sw)  # (b, in, oh, ow, kh, kw)
            cols = patches.permute(0, 2, 3, 1, 4, 5).reshape(b, d.shape[2], -1)  # (b, positions, in·kh·kw)
        else:
            cols = F.unfold(a, m.kernel_size, dilation=m.dilation, padding=m.padding,
                            stride=m.stride).transpose(1, 2)
        gw = torch.bmm(d, cols)  # (b, out, in·kh·kw)
        return gw.view(b, *m.weight.shape), d.sum(2)

    @staticmethod
    def _linear_grads(a: torch.Tensor, d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Linear per-example weight gradients (b, out, in) and bias gradients (b, out)."""
        b = a.shape[0]
        a = a.reshape(b, -1, a.shape[-1])
        d = d.reshape(b, -1, d.shape[-1])
        return torch.einsum("bto,bti->boi", d, a), d.sum(1)

    def _fast_per_example(self, x, y) -> tuple[dict, torch.Tensor] | None:
        """Like :meth:`per_example_gradients`, via hooks; None when a layer ran twice."""
        passed = self._hooked_pass(x, y)
        if passed is None:
            return None
        records, losses = passed
        grads = {n: self._params[n].new_zeros((x.shape[0], *self._params[n].shape))
                 for n in self.names}  # zeros stay for a layer the forward pass skipped
        for m, w, bias, a, d in records:
            gw, gb = (self._conv_grads(m, a, d) if isinstance(m, nn.Conv2d)
                      else self._linear_grads(a, d))
            if w is not None:
                grads[w] = gw
            if bias is not None:
                grads[bias] = gb
        return grads, losses

    def _fast_clipped_sum(self, x, y) -> tuple[list[torch.Tensor], float] | None:
        """This chunk's clipped sum per parameter (in ``self.names`` order, flattened) via
        hooks; the per-example weight gradients of 2-D Linear inputs are never formed."""
        passed = self._hooked_pass(x, y)
        if passed is None:
            return None
        records, losses = passed
        b = x.shape[0]
        sq_norms = x.new_zeros(b)
        terms = []  # (weight name, bias name, kind, tensors) to be summed with the clip factors
        for m, w, bias, a, d in records:
            if isinstance(m, nn.Linear) and a.dim() == 2:
                # one row per example: ‖δ_iᵀa_i‖_F = ‖δ_i‖·‖a_i‖, so g_i is never formed
                d_sq = d.square().sum(1)
                if w is not None:
                    sq_norms += d_sq * a.square().sum(1)
                if bias is not None:
                    sq_norms += d_sq
                terms.append((w, bias, "outer", (a, d)))
                continue
            gw, gb = self._conv_grads(m, a, d) if isinstance(m, nn.Conv2d) else self._linear_grads(a, d)
            gw = gw.reshape(b, -1)
            if w is not None:
                sq_norms += torch.linalg.vector_norm(gw, dim=1).square()
            if bias is not None:
                sq_norms += torch.linalg.vector_norm(gb, dim=1).square()
            terms.append((w, bias, "per-example", (gw, gb)))
        factors = (self.max_grad_norm / (sq_norms.sqrt() + _NORM_EPS)).clamp_max(1.0)  # (b,)
        out = {}
        for w, bias, kind, (p, q) in terms:
            if kind == "outer":  # Σ_i c_i δ_iᵀ a_i = (c·δ)ᵀ a
                cd = q * factors[:, None]
                gw_sum, gb_sum = (cd.T @ p).reshape(-1), cd.sum(0)
            else:
                gw_sum, gb_sum = factors @ p, factors @ q
            if w is not None:
                out[w] = gw_sum
            if bias is not None:
                out[bias] = gb_sum
        parts = [out[n] if n in out else x.new_zeros(self._params[n].numel()) for n in self.names]
        return parts, float(losses.sum())

    # -- per-example gradients -------------------------------------------------
    def _detached(self) -> tuple[dict, dict]:
        params = {n: self._params[n].detach() for n in self.names}
        buffers = {n: b.detach() for n, b in self.model.named_buffers()}
        return params, buffers

    def per_example_gradients(self, x: torch.Tensor, y: torch.Tensor) -> tuple[dict, torch.Tensor]:
        """Every example's gradient of its own cross-entropy loss.

        Args:
            x: inputs of shape (B, ...), B ≥ 0.
            y: int64 labels of shape (B,).

        Returns:
            (grads, losses): ``grads[name]`` has shape (B, *param.shape); ``losses`` (B,).
        """
        params, buffers = self._detached()
        b = x.shape[0]
        if b == 0:
            return ({n: p.new_zeros((0, *p.shape)) for n, p in params.items()},
                    x.new_zeros((0,)))
        if self._layers is not None:
            fast = self._fast_per_example(x, y)
            if fast is not None:
                return fast
        grads, losses = self._per_example(params, buffers, x, y)
        return grads, losses

    def clipped_sum(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, float]:
        """Σ_i g_i·min(1, C/(‖g_i‖₂ + 10⁻⁶)) over the examples given, flattened to shape (P,),
        and Σ losses.

        ‖g_i‖₂ is the norm over all parameters; each clipped term has norm < C. Memory is bounded by
        ``max_physical_batch`` examples' gradients at a time.
        """
        parts: list[torch.Tensor] | None = None
        loss_sum = 0.0
        for start in range(0, x.shape[0], self.max_physical_batch):
            xs, ys = x[start:start + self.max_physical_batch], y[start:start + self.max_physical_batch]
            fast = self._fast_clipped_sum(xs, ys) if self._layers is not None else None
            if fast is not None:
                chunk, chunk_loss = fast
            else:
                chunk, chunk_loss = self._generic_clipped_sum(xs, ys)
            parts = chunk if parts is None else [a + c for a, c in zip(parts, chunk, strict=True)]
            loss_sum += chunk_loss
        if parts is None:
            return torch.zeros(self.num_parameters, device=self._device), loss_sum
        return torch.cat(parts), loss_sum

    def _generic_clipped_sum(self, xs, ys) -> tuple[list[torch.Tensor], float]:
        """One chunk's clipped sum per parameter from ``torch.func`` per-example gradients."""
        params, buffers = self._detached()
        grads, losses = self._per_example(params, buffers, xs, ys)
        b = xs.shape[0]
        flat = [grads[n].reshape(b, -1) for n in self.names]  # views when contiguous
        sq_norms = torch.stack([torch.linalg.vector_norm(g, dim=1) for g in flat]).square().sum(0)
        factors = (self.max_grad_norm / (sq_norms.sqrt() + _NORM_EPS)).clamp_max(1.0)  # (b,)
        return [factors @ g for g in flat], float(losses.sum())  # one mat-vec per parameter

    @property
    def _device(self) -> torch.device:
        return self._params[self.names[0]].device if self.names else torch.device("cpu")

    @property
    def num_parameters(self) -> int:
        """P, the number of trainable scalars."""
        return sum(self._params[n].numel() for n in self.names)

    def noise(self) -> torch.Tensor:
        """One draw of N(0, σ²C²·I_P) from the noise generator, shape (P,)."""
        std = self.noise_multiplier * self.max_grad_norm
        # drawn on the CPU (the generator's device): the same numbers on every device
        z = torch.randn(self.num_parameters, generator=self.noise_generator)
        return z.to(self._device) * std

    def noisy_gradient(self, x: torch.Tensor, y: torch.Tensor) -> tuple[dict, float]:
        """The privatised gradient (Σ clipped + noise)/(qN) as a dict name -> tensor, and Σ losses."""
        total, loss_sum = self.clipped_sum(x, y)
        noisy = (total + self.noise()) / self.expected_batch_size
        return dict(zip(self.names, self._unflatten(noisy), strict=True)), loss_sum

    def _unflatten(self, flat: torch.Tensor) -> Iterator[torch.Tensor]:
        offset = 0
        for n in self.names:
            p = self._params[n]
            yield flat[offset:offset + p.numel()].view_as(p)
            offset += p.numel()

    def step(self, x: torch.Tensor, y: torch.Tensor) -> StepOutput:
        """One DP-SGD update on the Poisson batch (x, y): noisy gradient, then optimiser step."""
        grads, loss_sum = self.noisy_gradient(x, y)
        for n in self.names:
            self._params[n].grad = grads[n]
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return StepOutput(int(x.shape[0]), loss_sum)


def _fast_path_layers(model: nn.Module, names: list[str]) -> list | None:
    """The (module, weight name, bias name) triples for the hook-based fast path, or None.

    The fast path needs (1) a forward pass in which example i's output depends on input i
    alone — otherwise a batched backward pass mixes the examples and clipping would not bound
    one example's influence — and (2) closed-form per-example gradients for every trainable
    parameter. (1) is known only for the built-in models and for ``nn.Sequential``
    containers of the layers in ``_PER_EXAMPLE_LAYERS`` (not in place), ``Linear`` and
    ``Conv2d``, each used once; (2) holds for ``Linear`` and ``Conv2d`` with ``groups=1``
    and zero padding given as numbers. Anything else returns None (the ``torch.func`` path).
    """
    if type(model) not in (TanhCNN, LogisticRegression, nn.Sequential):
        return None
    if len(list(model.modules())) != len(list(model.named_modules(remove_duplicate=False))):
        return None  # a layer used twice: its hook would see two inputs per example
    layers, covered = [], []
    for mname, m in model.named_modules():
        if m is model or type(m) is nn.Sequential:
            continue
        if type(m) is nn.Conv2d:
            if m.groups != 1 or m.padding_mode != "zeros" or isinstance(m.padding, str):
                return None
        elif type(m) is not nn.Linear:
            if (type(m) not in _PER_EXAMPLE_LAYERS or any(True for _ in m.parameters(recurse=False))
                    or getattr(m, "inplace", False)):  # in place would overwrite a recorded a or out
                return None
            continue
        prefix = f"{mname}." if mname else ""
        w = prefix + "weight" if m.weight.requires_grad else None
        bias = prefix + "bias" if m.bias is not None and m.bias.requires_grad else None
        if w is None and bias is None:
            continue
        layers.append((m, w, bias))
        covered += [n for n in (w, bias) if n is not None]
    if sorted(covered) != sorted(names) or len(set(covered)) != len(covered):
        return None  # a parameter outside these layers, or one shared between layers
    return layers
