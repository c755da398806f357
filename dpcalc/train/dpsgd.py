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

Per-example norms and clipped sum, fast path (:mod:`dpcalc.train.ghost`; the built-in
models and ``nn.Sequential`` trees of layers known to treat each example on its own, with
trainable parameters only in Linear, Conv2d, Embedding, LayerNorm, GroupNorm or InstanceNorm
layers): one ordinary batched forward pass records each such layer's input activations a_i,
one backward pass of Σ_i loss_i to the layer outputs gives the output gradients δ_i (each
example's loss depends on its own row only, so δ_i is the gradient of loss_i alone); each
layer's per-example norm is then the ghost norm (Li et al. 2022) or the norm of the
materialised per-example gradient (Goodfellow, arXiv:1510.01799, 2015; Opacus), whichever
is cheaper, and the clipped sum is book-keeping (Bu et al. 2023): no second backward pass.
Any other model uses ``torch.func`` (``functional_call`` + ``vmap(grad_and_value(...))``,
each example evaluated alone). Either way the per-example norms and the clipped sum are
fused tensor operations (no Python loop per example), and exact.
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
from dpcalc.errors import ParameterError
from dpcalc.train import ghost
from dpcalc.train.ghost import NORM_EPS as _NORM_EPS
from dpcalc.train.model_checks import check_model
from dpcalc.train.models import LogisticRegression, TanhCNN

__all__ = ["PoissonSampler", "DPSGDStep", "StepOutput"]


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
            parameters are updated in place by ``optimizer``. Batch norm and layers with
            running statistics are refused (:func:`dpcalc.train.model_checks.check_model`).
        optimizer: any torch optimiser over ``model.parameters()``.
        noise_multiplier: σ, noise std divided by ``max_grad_norm``; ≥ 0 (0 only for tests
            and benchmarks — not private).
        max_grad_norm: C > 0, the per-example L2 clipping norm over all parameters.
        expected_batch_size: qN > 0, the divisor of the noisy sum.
        max_physical_batch: largest number of examples whose per-example gradients are
            held in memory at once.
        noise_generator: the torch generator that owns the noise (checkpointed).

    Attribute ``noise_source`` (default None): a callable returning the next step's noise
    (shape (P,)) in place of the independent draw — the correlated noise of ``--noise correlated``
    (:class:`dpcalc.train.correlated.CorrelatedNoise`).

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
        self.noise_source = None
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

        self._per_example = vmap(grad_and_value(example_loss), in_dims=(None, None, 0, 0),
                                 randomness="different")  # dropout: each example its own mask
        self._layers = ghost.plan_layers(model, self.names, trusted=(TanhCNN, LogisticRegression))

    @property
    def uses_fast_path(self) -> bool:
        """True when per-example gradients come from layer hooks rather than ``torch.func``."""
        return self._layers is not None

    # -- fast path: one batched forward/backward, per-layer norms, book-keeping sum ------
    def _fast_per_example(self, x, y) -> tuple[dict, torch.Tensor] | None:
        """Like :meth:`per_example_gradients`, via hooks; None when a layer ran twice."""
        passed = ghost.hooked_pass(self.model, self._layers, x, y)
        if passed is None:
            return None
        records, losses = passed
        got = ghost.per_example_gradients(records, x.shape[0])
        grads = {n: got[n] if n in got else self._params[n].new_zeros((x.shape[0], *self._params[n].shape))
                 for n in self.names}  # zeros stay for a layer the forward pass skipped
        return grads, losses

    def _fast_clipped_sum(self, x, y) -> tuple[list[torch.Tensor], float] | None:
        """This chunk's clipped sum per parameter (in ``self.names`` order, flattened) via
        hooks, ghost norms where cheaper and book-keeping (:mod:`dpcalc.train.ghost`)."""
        passed = ghost.hooked_pass(self.model, self._layers, x, y)
        if passed is None:
            return None
        records, losses = passed
        out, _ = ghost.clipped_sum(records, max_grad_norm=self.max_grad_norm, b=x.shape[0],
                                   ref=losses)
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

        Raises:
            ParameterError: a model buffer changed during the pass (a layer keeping running
                statistics of the data, which would be released without clipping or noise).
        """
        parts: list[torch.Tensor] | None = None
        loss_sum = 0.0
        versions = [b._version for b in self.model.buffers()]
        for start in range(0, x.shape[0], self.max_physical_batch):
            xs, ys = x[start:start + self.max_physical_batch], y[start:start + self.max_physical_batch]
            fast = self._fast_clipped_sum(xs, ys) if self._layers is not None else None
            if fast is not None:
                chunk, chunk_loss = fast
            else:
                chunk, chunk_loss = self._generic_clipped_sum(xs, ys)
            parts = chunk if parts is None else [a + c for a, c in zip(parts, chunk, strict=True)]
            loss_sum += chunk_loss
        if [b._version for b in self.model.buffers()] != versions:
            raise ParameterError(
                "model", "", None,
                message="--model: a layer updated its buffers from the training data (running "
                        "statistics), which would be released without clipping or noise")
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
        """One draw of N(0, σ²C²·I_P) from the noise generator, shape (P,) (or the next output of
        ``noise_source`` when set)."""
        if self.noise_source is not None:
            return self.noise_source().to(self._device)
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

