"""The built-in models' fast pooling: the same values and gradients, bit for bit, as
``F.max_pool2d`` in NCHW, and the same training trajectory for the tanh CNN."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from torch.func import grad, vmap  # noqa: E402

from dpcalc.train.dpsgd import DPSGDStep  # noqa: E402
from dpcalc.train.models import TanhCNN, build_model, max_pool_2x2_stride_1  # noqa: E402

torch.set_num_threads(1)


def plain_pool(h):
    return F.max_pool2d(h, kernel_size=2, stride=1)


def pool_and_grad(pool, h, g_out):
    h = h.detach().clone().requires_grad_()
    out = pool(h)
    (g_in,) = torch.autograd.grad(out, h, g_out)
    return out, g_in


@settings(max_examples=40, deadline=None)
@given(b=st.integers(1, 5), c=st.integers(1, 4), hw=st.integers(2, 9), levels=st.integers(1, 4),
       seed=st.integers(0, 2 ** 16), nan=st.booleans())
def test_pool_bit_identical_to_max_pool2d(b, c, hw, levels, seed, nan):
    """Ties (few distinct values) and NaN included: each output's gradient must go to the same
    input as in the NCHW kernel, and the sums into one input be added in the same order."""
    gen = torch.Generator().manual_seed(seed)
    h = torch.randint(0, levels, (b, c, hw, hw), generator=gen).float() * 0.25
    if nan:
        h[0, 0, hw // 2, hw // 2] = float("nan")
    g_out = torch.randn(b, c, hw - 1, hw - 1, generator=gen)
    ref_out, ref_g = pool_and_grad(plain_pool, h, g_out)
    out, g = pool_and_grad(max_pool_2x2_stride_1, h, g_out)
    assert torch.equal(out.nan_to_num(9.0), ref_out.nan_to_num(9.0))
    assert torch.equal(g, ref_g)
    assert out.is_contiguous() and g.is_contiguous()  # NCHW in both directions


def test_pool_unbatched_and_under_torch_func():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 2, 4, 7, 7, generator=gen)
    for xs in (x, x[:, 0]):  # vmap over (B, C, H, W) items and over (C, H, W) items
        got = vmap(grad(lambda h: max_pool_2x2_stride_1(h).square().sum()))(xs)
        ref = vmap(grad(lambda h: plain_pool(h).square().sum()))(xs)
        assert torch.equal(got, ref)
    assert torch.equal(max_pool_2x2_stride_1(x[0, 0]), plain_pool(x[0, 0]))


def plain_forward(self, x):
    """The tanh CNN's forward as it was written before: ``F.max_pool2d`` on NCHW tensors."""
    h = plain_pool(torch.tanh(self.conv1(x)))
    h = plain_pool(torch.tanh(self.conv2(h)))
    return self.fc2(torch.tanh(self.fc1(h.flatten(-3))))


@pytest.mark.parametrize("private", [True, False])
def test_tanh_cnn_trains_bit_identically_to_plain_pooling(private, monkeypatch):
    """Five steps of DP-SGD (fast clipping path, noise on) or of SGD from the same weights
    and batches: the same weights, bit for bit."""
    def train():
        model = build_model("tanh-cnn", seed=0)
        opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
        step = DPSGDStep(model, opt, noise_multiplier=1.0, max_grad_norm=0.5, expected_batch_size=64.0,
                         max_physical_batch=512, noise_generator=torch.Generator().manual_seed(3))
        assert step.uses_fast_path
        gen = torch.Generator().manual_seed(1)
        for _ in range(5):
            x = 3 * torch.randn(64, 1, 28, 28, generator=gen)
            y = torch.randint(0, 10, (64,), generator=gen)
            if private:
                step.step(x, y)
            else:
                opt.zero_grad()
                F.cross_entropy(model(x), y).backward()
                opt.step()
        return [p.detach() for p in model.parameters()]

    fast = train()
    monkeypatch.setattr(TanhCNN, "forward", plain_forward)
    plain = train()
    for a, b in zip(fast, plain, strict=True):
        assert torch.equal(a, b)
