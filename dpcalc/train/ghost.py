r"""Per-example clipping without per-example gradients: ghost norms and book-keeping.

DP-SGD needs, for each example i of a batch, the norm of its gradient over all parameters,
:math:`\lVert g_i\rVert_2`, and then the clipped sum :math:`\sum_i c_i g_i` with
:math:`c_i = \min(1, C/(\lVert g_i\rVert_2 + 10^{-6}))`. For the layers handled here every
parameter gradient is a function of the layer's input activations :math:`a_i` and the
gradient :math:`\delta_i` of example i's loss with respect to the layer's output, so one
batched forward pass (recording :math:`a`) and one backward pass of :math:`\sum_i \ell_i`
to the layer *outputs* (giving :math:`\delta`; each example's loss depends on its own row
only, so :math:`\delta_i` is the gradient of :math:`\ell_i` alone) give everything:

* **Norms.** Per layer, the cheaper of two exact computations (below, T positions — sequence
  steps, or the output pixels of a convolution — p input and d output features):

  - *ghost norm* (Li, Tramèr, Liang, Hashimoto, "Large Language Models Can Be Strong
    Differentially Private Learners", ICLR 2022, §4): for :math:`G_i = \delta_i^\top a_i`
    (a_i: T×p, δ_i: T×d), :math:`\lVert G_i\rVert_F^2 = \langle a_i a_i^\top,
    \delta_i\delta_i^\top\rangle_F` — two T×T Gram matrices, time O(T²(p+d)), memory O(T²);
    with T = 1 it is :math:`\lVert a_i\rVert^2\lVert\delta_i\rVert^2`. For a convolution
    whose kernel sides are multiples of its strides the patch Gram :math:`a_i a_i^\top` comes
    from the Gram of the input's space-to-depth pixels when that is cheaper (no im2col;
    :func:`_patch_gram`). An embedding is the
    same with :math:`a_i` the one-hot rows of the token ids: :math:`\langle [\mathrm{id}_t =
    \mathrm{id}_s]_{ts}, \delta_i\delta_i^\top\rangle_F`.
  - *materialised* per-example gradient :math:`G_i` (Goodfellow, arXiv:1510.01799, 2015;
    Opacus): time O(Tpd), memory O(pd) per example; a convolution's without im2col, by one
    grouped convolution (:func:`_conv_per_example`).

  The choice is per layer and per input shape, by the per-example norm costs of Bu, Wang,
  Zha, Karypis, "Differentially Private Optimization on Large Model at Small Cost", ICML 2023
  (Table 2; their layer-wise hybrid "BK-MixOpt"): ghost iff T²(p+d) < Tpd (T²p replaced
  by the pixel route's count where that is smaller) — always for
  T = 1 (p, d ≥ 2), materialised for convolutions with many output positions. The clipped
  sum is not counted: for a ghost layer it is the batch's ordinary weight gradient (what
  non-private training pays, by the same kernel); materialised per-example gradients cost
  time and memory beyond their operation count (measured on the tanh CNN, batch 1024, one
  thread: its second convolution, T = 25, ghost rather than materialised made the whole step
  18% faster and its peak memory 43 instead of ~100 KiB per example). Normalisation layers
  (LayerNorm, GroupNorm, affine InstanceNorm without running statistics) have per-example
  gradients of the size of one channel vector: always materialised, from the recomputed
  normalised input :math:`\hat a_i`: :math:`\partial w = \sum \delta_i\odot\hat a_i`,
  :math:`\partial b = \sum\delta_i` over the positions.

* **Sum (book-keeping).** Bu et al. 2023 §3: no second backward pass — the clipped sum of a
  layer is its ordinary weight gradient with :math:`\delta_i` scaled by :math:`c_i`:
  :math:`\sum_i c_i\delta_i^\top a_i = (c\cdot\delta)^\top a` (one matrix product over all
  b·T rows), or :math:`\sum_i c_i G_i` when :math:`G_i` was materialised anyway.

Nothing here is approximate: each :math:`c_i g_i` is exactly example i's gradient scaled to
norm < C (the test suite compares with one-example-at-a-time autograd).

Which models: the forward pass must treat each example on its own (otherwise :math:`\delta_i`
mixes in other examples' losses and clipping no longer bounds one example's influence).
That is known for the built-in models and for ``nn.Sequential`` trees of the layers listed
in ``PER_EXAMPLE_LAYERS`` and the parameterised layers above, each used once. Any other
model — a custom ``forward`` cannot be checked — goes through ``torch.func`` in
:mod:`dpcalc.train.dpsgd`, which evaluates each example alone and is exact whatever the
forward does. See docs/design.md §6.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["Layer", "PER_EXAMPLE_LAYERS", "plan_layers", "hooked_pass", "per_example_gradients",
           "clipped_sum", "choose_method", "NORM_EPS"]

#: layers without parameters that compute each example from that example alone (so a batched
#: forward pass gives every example its own gradient)
PER_EXAMPLE_LAYERS = (
    nn.Identity, nn.Flatten, nn.Unflatten, nn.Tanh, nn.ReLU, nn.LeakyReLU, nn.ELU, nn.GELU,
    nn.SiLU, nn.Sigmoid, nn.Softplus, nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d,
    nn.AdaptiveMaxPool2d, nn.MaxPool1d, nn.AvgPool1d, nn.AdaptiveAvgPool1d,
    nn.Dropout, nn.Dropout1d, nn.Dropout2d,  # masks drawn per element or per (example, channel)
)

#: added to the norm in the clipping factor C/(‖g‖ + ξ), as Opacus does: a clipped
#: gradient's norm is then strictly below C despite float rounding, and ‖g‖ = 0 is safe
NORM_EPS = 1e-6

_INSTANCE_NORMS = (nn.InstanceNorm1d, nn.InstanceNorm2d, nn.InstanceNorm3d)


@dataclass(frozen=True)
class Layer:
    """A parameterised layer of the fast path.

    Attributes:
        module: the layer.
        kind: ``"linear"``, ``"conv2d"``, ``"embedding"`` or ``"norm"``.
        weight: the weight's parameter name in the model (None: frozen or absent).
        bias: the bias's parameter name (None: frozen or absent).
    """

    module: nn.Module
    kind: str
    weight: str | None
    bias: str | None


def _kind(m: nn.Module) -> str | None:
    """The fast-path kind of a parameterised layer, or None when it has no exact formula here."""
    t = type(m)
    if t is nn.Linear:
        return "linear"
    if t is nn.Conv2d:
        ok = m.groups == 1 and m.padding_mode == "zeros" and not isinstance(m.padding, str)
        return "conv2d" if ok else None
    if t is nn.Embedding:
        # max_norm rewrites the weight in place during forward; scale_grad_by_freq scales by
        # counts over the whole batch (mixing examples): both left to torch.func
        return "embedding" if m.max_norm is None and not m.scale_grad_by_freq else None
    if t in (nn.LayerNorm, nn.GroupNorm):
        return "norm"
    if t in _INSTANCE_NORMS and not m.track_running_stats:
        return "norm"
    return None


def _parameter_free_per_example(m: nn.Module) -> bool:
    if any(True for _ in m.parameters(recurse=False)) or any(True for _ in m.buffers(recurse=False)):
        return False
    if getattr(m, "inplace", False):  # in place would overwrite a recorded input or output
        return False
    if type(m) in PER_EXAMPLE_LAYERS:
        return True
    # normalisation layers without affine parameters normalise each example on its own
    return type(m) in (nn.LayerNorm, nn.GroupNorm) or (type(m) in _INSTANCE_NORMS
                                                       and not m.track_running_stats)


def plan_layers(model: nn.Module, names: list[str], *, trusted: tuple[type, ...] = ()) -> list[Layer] | None:
    """The fast path's layers of ``model``, or None when it does not apply.

    Args:
        model: the model.
        names: the names of its trainable parameters (all must be covered).
        trusted: module classes whose own ``forward`` is known to treat each example on its
            own (the built-in models); besides them only ``nn.Sequential`` roots qualify.

    Returns:
        The layers in module order, or None: a custom forward, a layer without an exact
        formula here or not known to be per-example, a layer used twice (its hook would fire
        twice per example), a trainable parameter outside the covered layers or shared.
    """
    if type(model) not in (*trusted, nn.Sequential):
        return None
    if len(list(model.modules())) != len(list(model.named_modules(remove_duplicate=False))):
        return None
    layers: list[Layer] = []
    covered: list[str] = []
    for mname, m in model.named_modules():
        if m is model or type(m) is nn.Sequential:
            continue
        kind = _kind(m) if any(True for _ in m.parameters(recurse=False)) else None
        if kind is None:
            if not _parameter_free_per_example(m):
                return None
            continue
        if any(True for _ in m.children()):
            return None
        prefix = f"{mname}." if mname else ""
        weight = getattr(m, "weight", None)
        bias = getattr(m, "bias", None)
        w = prefix + "weight" if isinstance(weight, nn.Parameter) and weight.requires_grad else None
        bn = prefix + "bias" if isinstance(bias, nn.Parameter) and bias.requires_grad else None
        if {n for n, _ in m.named_parameters(recurse=False)} - {"weight", "bias"}:
            return None
        if w is None and bn is None:
            continue
        layers.append(Layer(m, kind, w, bn))
        covered += [n for n in (w, bn) if n is not None]
    if sorted(covered) != sorted(names) or len(set(covered)) != len(covered):
        return None
    return layers


def hooked_pass(model: nn.Module, layers: list[Layer], x: torch.Tensor,
                y: torch.Tensor) -> tuple[list, torch.Tensor] | None:
    """One forward pass recording each layer's input a, and one backward pass of Σ_i loss_i
    to the layer outputs giving δ.

    Returns:
        ``(records, losses)``: records are ``(layer, a, δ)`` for the layers that ran (δ zero
        where the loss does not depend on the layer), losses the (b,) per-example
        cross-entropies; or None when a layer ran more than once.
    """
    inputs: dict[nn.Module, torch.Tensor] = {}
    outputs: dict[nn.Module, torch.Tensor] = {}
    reused = False

    def hook(module, args, out):
        nonlocal reused
        if module in outputs:
            reused = True
        inputs[module] = args[0].detach()
        outputs[module] = out

    handles = [lay.module.register_forward_hook(hook) for lay in layers]
    try:
        with torch.enable_grad():
            logits = model(x)
            losses = F.cross_entropy(logits, y, reduction="none")  # (b,): loss_i per example
            if reused:
                return None
            ran = [lay for lay in layers if lay.module in outputs]
            deltas = torch.autograd.grad(losses.sum(), [outputs[lay.module] for lay in ran],
                                         allow_unused=True) if ran else ()
    finally:
        for h in handles:
            h.remove()
    records = [(lay, inputs[lay.module], d if d is not None else torch.zeros_like(outputs[lay.module]))
               for lay, d in zip(ran, deltas, strict=True)]
    return records, losses.detach()


# -- per-layer pieces ----------------------------------------------------------------------

def _conv_cols(m: nn.Conv2d, a: torch.Tensor) -> torch.Tensor:
    """The unfolded input patches (im2col), shape (b, in·kh·kw, positions): ``F.unfold``'s own
    layout, which the Gram product reads through a transposed view without another copy
    (measured on the tanh CNN's second convolution, batch 1024, one thread: 13 ms, against
    21 ms for a strided view of the patches copied into (b, positions, in·kh·kw))."""
    return F.unfold(a, m.kernel_size, dilation=m.dilation, padding=m.padding, stride=m.stride)


def _pixel_grid(m: nn.Conv2d, oh: int, ow: int) -> tuple[int, int] | None:
    """The space-to-depth grid (gh, gw) of :func:`_patch_gram`'s pixel route, or None when it
    does not apply (dilation, or a kernel side not a multiple of its stride)."""
    (kh, kw), (sh, sw) = m.kernel_size, m.stride
    if m.dilation != (1, 1) or kh % sh or kw % sw:
        return None
    return oh + kh // sh - 1, ow + kw // sw - 1


def _gram_costs(m: nn.Conv2d, oh: int, ow: int) -> tuple[int, int | None]:
    """Multiply-adds per example of the patch Gram: (through im2col, through pixels or None)."""
    t = oh * ow
    p = m.in_channels * m.kernel_size[0] * m.kernel_size[1]
    grid = _pixel_grid(m, oh, ow)
    if grid is None:
        return t * t * p, None
    (sh, sw), (kh, kw) = m.stride, m.kernel_size
    g = grid[0] * grid[1]
    return t * t * p, g * g * m.in_channels * sh * sw + (kh // sh) * (kw // sw) * t * t


def _patch_gram(m: nn.Conv2d, a: torch.Tensor, oh: int, ow: int) -> torch.Tensor:
    r"""The Gram matrices :math:`a_i a_i^\top` (b, T, T) of each example's input patches
    (T = oh·ow output positions; row t = the patch that output t reads), by the cheaper of:

    * im2col: the (b, p, T) patches, then one batched product (T²p per example);
    * pixels, when each kernel side is a multiple of its stride (dilation 1): regroup the
      padded input into its stride×stride phases (space-to-depth: C·sh·sw channels on a
      gh×gw grid, gh = oh + kh/sh − 1); the kernel becomes (kh/sh)×(kw/sw) with stride 1, so
      patch t is the concatenation over kernel offsets q of the grid pixels t + q, and
      :math:`\langle a_t, a_s\rangle = \sum_q P_{t+q,\,s+q}` with P the (gh·gw)² Gram of
      the grid pixels: (gh·gw)²·C·sh·sw + (kh/sh)(kw/sw)·T² per example, no im2col (the
      tanh CNN's second convolution: 85k against 160k multiply-adds; measured at batch 1024,
      one thread: 12 ms against 22 ms for im2col and Gram).

    Both are exact (the same products, summed in another order).
    """
    b = a.shape[0]
    cost_cols, cost_pixels = _gram_costs(m, oh, ow)
    if cost_pixels is None or cost_cols <= cost_pixels:
        cols = _conv_cols(m, a)  # (b, p, T)
        return torch.bmm(cols.transpose(1, 2), cols)
    gh, gw = _pixel_grid(m, oh, ow)
    (kh, kw), (sh, sw), (ph, pw) = m.kernel_size, m.stride, m.padding
    if ph or pw:
        a = F.pad(a, (pw, pw, ph, ph))
    c = a.shape[1]
    grid = (a[:, :, :gh * sh, :gw * sw].reshape(b, c, gh, sh, gw, sw).permute(0, 1, 3, 5, 2, 4)
            .reshape(b, c * sh * sw, gh * gw))  # (b, C·sh·sw, grid pixels)
    pix = torch.bmm(grid.transpose(1, 2), grid).view(b, -1)  # (b, (gh·gw)²)
    idx = _shift_index(gh, gw, oh, ow, kh // sh, kw // sw).to(a.device)
    # one gather of the q shifted (T×T) blocks, then their sum (faster than q strided adds)
    return pix.index_select(1, idx).view(b, -1, oh * ow * oh * ow).sum(1).view(b, oh * ow, oh * ow)


@functools.lru_cache(maxsize=64)
def _shift_index(gh: int, gw: int, oh: int, ow: int, qh: int, qw: int) -> torch.Tensor:
    """Flat indices into the (gh, gw, gh, gw) pixel Gram of the blocks P[t+q, s+q] (t, s on
    the oh×ow output grid), one block per kernel offset q = (i, j): shape (qh·qw·(oh·ow)²,)."""
    flat = torch.arange(gh * gw * gh * gw).view(gh, gw, gh, gw)
    return torch.cat([flat[i:i + oh, j:j + ow, i:i + oh, j:j + ow].reshape(-1)
                      for i in range(qh) for j in range(qw)])


def _conv_per_example(m: nn.Conv2d, a: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """Per-example Conv2d weight gradients (b, *weight.shape) without unfolding the input.

    * One input channel, dilation 1: example i's gradient for output channel o is the
      cross-correlation of its image with δ_io dilated by the stride — one forward
      convolution of the b images as b channels of a single input (1, b, H, W) with the b·out
      output gradients as depthwise kernels (b·out, 1, H', W'), groups = b (Rochette, Manoel,
      Tramel, "Efficient per-example gradient computations in convolutional neural networks",
      arXiv:1912.06015, 2019): the tanh CNN's first convolution at batch 1024, one thread,
      15 ms against 21 ms for the grouped weight gradient below.
    * Otherwise the weight gradient of one convolution with the b examples as b groups (input
      (1, b·in, H, W), output gradient (1, b·out, H', W'), weight (b·out, in, kh, kw): group i
      is example i) — faster than the above once there are several input channels (measured:
      16 → 32 channels, 60 against 92 ms).
    """
    b = a.shape[0]
    (kh, kw), out = m.kernel_size, m.out_channels
    if m.in_channels == 1 and m.dilation == (1, 1):
        gw = F.conv2d(a.transpose(0, 1), d.reshape(b * out, 1, *d.shape[2:]), padding=m.padding,
                      dilation=m.stride, groups=b)  # (1, b·out, ≥ kh, ≥ kw)
        return gw[0, :, :kh, :kw].reshape(b, *m.weight.shape)
    # in chunks of about 2²¹ gradient entries: the grouped kernel slows down once its operands
    # leave the cache (measured: 32 → 64 channels on 14×14, batch 1024 at once 290 ms, in
    # chunks of 113 examples 160–230 ms)
    chunk = max(1, _CHUNK_ENTRIES // m.weight.numel())
    if chunk >= b:
        return _grouped_weight_grad(m, a, d)
    gw = a.new_empty((b, *m.weight.shape))
    for start in range(0, b, chunk):
        gw[start:start + chunk] = _grouped_weight_grad(m, a[start:start + chunk], d[start:start + chunk])
    return gw


#: examples are processed in chunks of about this many per-example entries (gradient entries
#: of a grouped convolution, input entries of a normalisation layer): 8 MiB of float32, a
#: quarter of this machine's L3 cache
_CHUNK_ENTRIES = 2 ** 21


def _grouped_weight_grad(m: nn.Conv2d, a: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    b, (kh, kw), out = a.shape[0], m.kernel_size, m.out_channels
    gw = torch.nn.grad.conv2d_weight(
        a.reshape(1, b * m.in_channels, *a.shape[2:]), (b * out, m.in_channels, kh, kw),
        d.reshape(1, b * out, *d.shape[2:]), stride=m.stride, padding=m.padding,
        dilation=m.dilation, groups=b)
    return gw.view(b, *m.weight.shape)


def _as_rows(lay: Layer, a: torch.Tensor, d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(a, δ) of a Linear layer as (b, T, p) and (b, T, d) blocks: T positions per example."""
    b = a.shape[0]
    return a.reshape(b, -1, a.shape[-1]), d.reshape(b, -1, d.shape[-1])


def choose_method(lay: Layer, a: torch.Tensor, d: torch.Tensor) -> str:
    """``"ghost"`` or ``"materialise"`` for this layer and input: the cheaper per-example norm
    by the operation counts of Bu et al. 2023, Table 2 — ghost norm T²(p+d), materialised
    per-example gradient Tpd (T positions, p inputs, d outputs per position), so ghost iff
    T(p+d) < pd; for a convolution the T²p of the input Gram is the cheaper of that and the
    pixel route of :func:`_patch_gram`; an embedding: ghost T²d against writing V·d per
    example, ghost iff T² ≤ V. Normalisation layers: always materialised (their gradients are
    channel vectors)."""
    if lay.kind == "norm":
        return "materialise"
    m = lay.module
    if lay.kind == "linear":
        t = a.numel() // (a.shape[0] * a.shape[-1]) if a.shape[0] else 1
        p, q = m.in_features, m.out_features
    elif lay.kind == "conv2d":
        t = d[0, 0].numel() if d.shape[0] else 1
        p = m.in_channels * m.kernel_size[0] * m.kernel_size[1]
        cols, pixels = _gram_costs(m, d.shape[2], d.shape[3])
        gram_a = cols if pixels is None else min(cols, pixels)
        return "ghost" if gram_a + t * t * m.out_channels < t * p * m.out_channels else "materialise"
    else:  # embedding
        t = a.numel() // a.shape[0] if a.shape[0] else 1
        return "ghost" if t * t <= m.num_embeddings else "materialise"
    return "ghost" if t * (p + q) < p * q else "materialise"


def _norm_stats(lay: Layer, a: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The normalised input â of a normalisation layer and the number of feature dims kept
    per example (its gradient shape is that of the weight)."""
    m = lay.module
    if type(m) is nn.LayerNorm:
        return F.layer_norm(a, m.normalized_shape, None, None, m.eps), len(m.normalized_shape)
    if type(m) is nn.GroupNorm:
        return F.group_norm(a, m.num_groups, None, None, m.eps), 1
    return F.instance_norm(a, eps=m.eps), 1  # InstanceNorm without running statistics


def _norm_grads(lay: Layer, a: torch.Tensor, d: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Per-example (weight, bias) gradients of a normalisation layer, each (b, *weight.shape)."""
    m = lay.module
    b = a.shape[0]
    shape = (m.weight if m.weight is not None else m.bias).shape
    k = math.prod(shape)
    gw = gb = None
    layer_norm = type(m) is nn.LayerNorm
    if lay.weight is not None:
        # the normalised input recomputed in chunks of about 2²¹ entries, each used while in
        # the cache (batch 1024, one thread, freed memory kept: GroupNorm 64 × 14 × 14 13 ms
        # so, 17 ms at once; 32 × 28 × 28 31 ms either way; under glibc's defaults 32 × 28 × 28
        # took 85 ms at once)
        per = max(1, a[0].numel()) if b else 1
        chunk = max(1, _CHUNK_ENTRIES // per)
        gw = a.new_empty((b, k))
        for start in range(0, b, chunk):
            ac, dc = a[start:start + chunk], d[start:start + chunk]
            n = ac.shape[0]
            a_hat = _norm_stats(lay, ac)[0]
            if layer_norm:  # sums over the leading (non-normalised) positions
                gw[start:start + n] = (dc * a_hat).reshape(n, -1, k).sum(1)
            else:  # per channel, a dot product over its positions (vecdot: GroupNorm 32 × 28 × 28
                # at batch 1024 31 ms, against 45 ms as b·C (1×P)·(P×1) products by bmm)
                gw[start:start + n] = torch.linalg.vecdot(dc.reshape(n, k, -1), a_hat.reshape(n, k, -1))
        gw = gw.view(b, *shape)
    if lay.bias is not None:
        gb = (d.reshape(b, -1, k).sum(1) if layer_norm else d.reshape(b, k, -1).sum(2)).view(b, *shape)
    return gw, gb


def _materialised(lay: Layer, a: torch.Tensor, d: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Per-example (weight, bias) gradients, each (b, *param.shape) (None where frozen)."""
    m = lay.module
    b = a.shape[0]
    if lay.kind == "norm":
        return _norm_grads(lay, a, d)
    if lay.kind == "embedding":
        idx = a.reshape(b, -1)
        dd = d.reshape(b, idx.shape[1], -1)
        if m.padding_idx is not None:
            dd = dd * (idx != m.padding_idx).unsqueeze(-1)
        v = m.num_embeddings
        rows = (torch.arange(b, device=idx.device).unsqueeze(1) * v + idx).reshape(-1)
        gw = dd.new_zeros(b * v, dd.shape[-1]).index_add_(0, rows, dd.reshape(-1, dd.shape[-1]))
        return gw.view(b, v, -1), None
    if lay.kind == "conv2d":
        gw = _conv_per_example(m, a, d) if lay.weight is not None else None
        return gw, d.sum((2, 3)) if lay.bias is not None else None
    aa, dd = _as_rows(lay, a, d)
    gw = torch.bmm(dd.transpose(1, 2), aa) if lay.weight is not None else None
    return gw, dd.sum(1) if lay.bias is not None else None


def per_example_gradients(records: list, b: int) -> dict[str, torch.Tensor]:
    """Every example's gradient of every covered parameter, ``name -> (b, *param.shape)``
    (layers the forward pass skipped are absent: their gradients are zero)."""
    out = {}
    for lay, a, d in records:
        gw, gb = _materialised(lay, a, d)
        if lay.weight is not None:
            out[lay.weight] = gw
        if lay.bias is not None:
            out[lay.bias] = gb
    return out


def _ghost_sq_norm(lay: Layer, a: torch.Tensor, d: torch.Tensor) -> tuple[torch.Tensor, object]:
    """Ghost squared norms (b,) of the layer's weight+bias gradients, and what the
    book-keeping sum needs."""
    m = lay.module
    b = a.shape[0]
    if lay.kind == "embedding":
        idx = a.reshape(b, -1)
        dd = d.reshape(b, idx.shape[1], -1)
        if m.padding_idx is not None:
            dd = dd * (idx != m.padding_idx).unsqueeze(-1)
        if idx.shape[1] == 1:
            sq = dd.square().sum((1, 2))
        else:
            same = (idx.unsqueeze(2) == idx.unsqueeze(1)).to(dd.dtype)  # (b, T, T)
            sq = (same * torch.bmm(dd, dd.transpose(1, 2))).sum((1, 2))
        return sq, (idx, dd)
    if lay.kind == "conv2d":  # the sum is the native conv weight gradient of (a, c·δ)
        dt = d.reshape(b, d.shape[1], -1)  # (b, out, T): the Gram reads a transposed view
        sq = dt.new_zeros(b)
        gram_d = torch.bmm(dt.transpose(1, 2), dt)  # (b, T, T)
        if lay.weight is not None:
            gram_a = _patch_gram(m, a, d.shape[2], d.shape[3])
            sq = sq + (gram_a * gram_d).sum((1, 2))
        if lay.bias is not None:
            sq = sq + gram_d.sum((1, 2))  # ‖Σ_t δ_t‖² = Σ_ts δ_t·δ_s
        return sq, (a, d)
    else:
        aa, dd = _as_rows(lay, a, d)  # (b, T, p), (b, T, out)
        at, dt = aa.transpose(1, 2), dd.transpose(1, 2)
        saved = (aa, dd)
    sq = dt.new_zeros(b)
    if dt.shape[2] == 1:  # T = 1: ‖δ aᵀ‖² = ‖a‖²‖δ‖²
        d2 = dt.square().sum((1, 2))
        if lay.weight is not None:
            sq = sq + at.square().sum((1, 2)) * d2
        if lay.bias is not None:
            sq = sq + d2
    else:
        gram_d = torch.bmm(dt.transpose(1, 2), dt)  # (b, T, T)
        if lay.weight is not None:
            sq = sq + (torch.bmm(at.transpose(1, 2), at) * gram_d).sum((1, 2))
        if lay.bias is not None:
            sq = sq + gram_d.sum((1, 2))  # ‖Σ_t δ_t‖² = Σ_ts δ_t·δ_s
    return sq, saved


def _ghost_sum(lay: Layer, saved, factors: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Book-keeping: Σ_i c_i g_i of a ghost layer's weight and bias, flattened."""
    m = lay.module
    if lay.kind == "embedding":
        idx, dd = saved
        cd = (dd * factors[:, None, None]).reshape(-1, dd.shape[-1])
        gw = dd.new_zeros(m.weight.shape).index_add_(0, idx.reshape(-1), cd)
        return gw.reshape(-1), None
    if lay.kind == "conv2d":  # Σ_i c_i δ_i ⋆ a_i: the weight gradient of the batch with δ scaled by c
        a, d = saved
        cd = d * factors[:, None, None, None]
        gw = torch.nn.grad.conv2d_weight(a, m.weight.shape, cd, stride=m.stride, padding=m.padding,
                                         dilation=m.dilation) if lay.weight is not None else None
        return (None if gw is None else gw.reshape(-1)), (cd.sum((0, 2, 3)) if lay.bias is not None else None)
    aa, dd = saved  # (b, T, p), (b, T, d)
    cd = dd * factors[:, None, None]
    gw = (cd.reshape(-1, cd.shape[-1]).T @ aa.reshape(-1, aa.shape[-1])).reshape(-1) if lay.weight is not None else None
    gb = cd.sum((0, 1)) if lay.bias is not None else None
    return gw, gb


def clipped_sum(records: list, *, max_grad_norm: float, b: int,
                ref: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Σ_i c_i g_i per covered parameter (flattened) with c_i = min(1, C/(‖g_i‖ + 10⁻⁶)), the
    norm over all covered parameters, per-example gradients formed only where cheaper.

    Args:
        records: from :func:`hooked_pass`.
        max_grad_norm: C > 0.
        b: the number of examples.
        ref: a tensor giving dtype and device.

    Returns:
        (sums, factors): ``name -> flattened clipped sum``; the (b,) clip factors c_i.
    """
    sq_norms = ref.new_zeros(b)
    pending = []
    for lay, a, d in records:
        if choose_method(lay, a, d) == "ghost":
            sq, saved = _ghost_sq_norm(lay, a, d)
            pending.append((lay, "ghost", saved))
        else:
            gw, gb = _materialised(lay, a, d)
            sq = ref.new_zeros(b)
            if gw is not None:
                gw = gw.reshape(b, -1)
                sq = sq + torch.linalg.vector_norm(gw, dim=1).square()
            if gb is not None:
                gb = gb.reshape(b, -1)
                sq = sq + torch.linalg.vector_norm(gb, dim=1).square()
            pending.append((lay, "materialise", (gw, gb)))
        sq_norms = sq_norms + sq
    factors = (max_grad_norm / (sq_norms.sqrt() + NORM_EPS)).clamp_max(1.0)  # (b,)
    out: dict[str, torch.Tensor] = {}
    for lay, method, saved in pending:
        if method == "ghost":
            gw, gb = _ghost_sum(lay, saved, factors)
        else:
            gw, gb = (None if t is None else factors @ t for t in saved)
        if lay.weight is not None:
            out[lay.weight] = gw
        if lay.bias is not None:
            out[lay.bias] = gb
    return out, factors
