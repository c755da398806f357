"""Ghost clipping and book-keeping (dpcalc/train/ghost.py): per-example norms and clipped sums
from activations and output gradients equal the definition (Abadi et al. 2016, Alg. 1) computed
one example at a time with ordinary autograd, for every layer kind, whichever of ghost norm
(Li et al. 2022 §4) or materialised per-example gradient the cost rule (Bu et al. 2023) picks."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from user_layers import RunningMean  # noqa: E402

from dpcalc.errors import ParameterError  # noqa: E402
from dpcalc.train import ghost  # noqa: E402
from dpcalc.train.dpsgd import DPSGDStep  # noqa: E402
from dpcalc.train.model_checks import check_model  # noqa: E402
from dpcalc.train.models import build_model  # noqa: E402

torch.set_num_threads(1)


def make_step(model, *, sigma=0.0, clip=1.0, expected=4.0, physical=512, seed=0):
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    return DPSGDStep(model, opt, noise_multiplier=sigma, max_grad_norm=clip, expected_batch_size=expected,
                     max_physical_batch=physical, noise_generator=torch.Generator().manual_seed(seed))


def reference(model, x, y, clip):
    """Per-example flat gradients (autograd on each example alone), their norms, and the clipped sum."""
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    flats = []
    for i in range(x.shape[0]):
        model.zero_grad()
        F.cross_entropy(model(x[i:i + 1]), y[i:i + 1]).backward()
        params = dict(model.named_parameters())
        flats.append(torch.cat([(params[n].grad if params[n].grad is not None
                                 else torch.zeros_like(params[n])).reshape(-1) for n in names]))
    g = torch.stack(flats)
    norms = g.norm(dim=1)
    factors = (clip / (norms + ghost.NORM_EPS)).clamp_max(1.0)
    return g, norms, factors @ g


def conv_norm_model():
    """Conv2d with a large output (materialised) and a small one (ghost), GroupNorm, InstanceNorm
    (affine, no running statistics), LayerNorm over (C, H, W), a frozen weight, no-bias layers."""
    torch.manual_seed(5)
    return nn.Sequential(
        nn.Conv2d(1, 4, kernel_size=5, stride=2, padding=2), nn.GroupNorm(2, 4), nn.Tanh(),   # 14×14
        nn.Conv2d(4, 8, kernel_size=4, stride=3, bias=False), nn.InstanceNorm2d(8, affine=True),  # 4×4
        nn.ReLU(), nn.LayerNorm([8, 4, 4]), nn.Conv2d(8, 6, kernel_size=3, dilation=2, padding=2),
        nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(24, 16), nn.GELU(), nn.Linear(16, 10, bias=False))


def sequence_model(vocab=30, t=6):
    """Embedding (with a padding index) → Linear per position (3-D input) → LayerNorm per
    position → Linear on the flattened sequence; and a second, ghost-friendly, wide Linear."""
    torch.manual_seed(6)
    return nn.Sequential(
        nn.Embedding(vocab, 8, padding_idx=0), nn.Linear(8, 40), nn.LayerNorm(40), nn.Tanh(),
        nn.Linear(40, 40), nn.Tanh(), nn.Flatten(), nn.Linear(t * 40, 10))


class Images:
    def __init__(self, b, seed=1):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(b, 1, 28, 28, generator=g)
        self.y = torch.randint(0, 10, (b,), generator=g)


def tokens(b, vocab=30, t=6, seed=2):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 6, (b, t), generator=g)  # few ids: repeats within an example, padding 0
    return x, torch.randint(0, 10, (b,), generator=g)


CASES = {
    "tanh-cnn": lambda: (build_model("tanh-cnn", seed=2), *vars(Images(9)).values()),
    "conv+norms": lambda: (conv_norm_model(), *vars(Images(7)).values()),
    "sequence": lambda: (sequence_model(), *tokens(8)),
    "embedding-T1": lambda: (nn.Sequential(nn.Embedding(12, 5), nn.Flatten(), nn.Linear(5, 10)),
                             *tokens(6, t=1)),
    "embedding-1d": lambda: (nn.Sequential(nn.Embedding(12, 5), nn.Tanh(), nn.Linear(5, 10)),
                             tokens(6, t=1)[0].squeeze(1), tokens(6, t=1)[1]),
}


@pytest.mark.parametrize("method", ["auto", "ghost", "materialise"])
@pytest.mark.parametrize("case", list(CASES))
def test_clipped_sum_and_norms_equal_definition(case, method, monkeypatch):
    """Each layer's norm by ghost norm or materialised gradient, forced or by the cost rule: the
    clip factors and the clipped sum equal the one-example-at-a-time definition."""
    model, x, y = CASES[case]()
    clip = 0.05
    step = make_step(model, clip=clip)
    assert step.uses_fast_path
    if method != "auto":
        monkeypatch.setattr(ghost, "choose_method",
                            lambda lay, a, d: "materialise" if lay.kind == "norm" else method)
    g, norms, want = reference(model, x, y, clip)
    assert (norms > clip).any()  # clipping is active
    records, _ = ghost.hooked_pass(model, step._layers, x, y)
    _, factors = ghost.clipped_sum(records, max_grad_norm=clip, b=x.shape[0], ref=g)
    # the norms ghost computed: c_i = min(1, C/(‖g_i‖ + ξ)) with ‖g_i‖ from the reference
    torch.testing.assert_close(factors, (clip / (norms + ghost.NORM_EPS)).clamp_max(1.0), rtol=1e-4, atol=1e-7)
    # every clipped example inside the ball, up to float32 rounding (as tests/train/test_train_dpsgd.py)
    assert float((factors[:, None] * g).norm(dim=1).max()) <= clip * (1 + 1e-6)
    got, _ = step.clipped_sum(x, y)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-7)
    # and the per-example gradients themselves
    grads, _ = step.per_example_gradients(x, y)
    flat = torch.cat([grads[n].reshape(x.shape[0], -1) for n in step.names], dim=1)
    torch.testing.assert_close(flat, g, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("case", list(CASES))
def test_fast_step_equals_torch_func_step(case):
    """The whole noisy update (physical chunks of 3) is the same on the ghost/book-keeping path
    and on the torch.func path."""
    model, x, y = CASES[case]()
    fast = make_step(model, sigma=0.8, clip=0.03, expected=6.0, physical=3, seed=4)
    slow = make_step(model, sigma=0.8, clip=0.03, expected=6.0, physical=3, seed=4)
    slow._layers = None
    assert fast.uses_fast_path and not slow.uses_fast_path
    g1, l1 = fast.noisy_gradient(x, y)
    g2, l2 = slow.noisy_gradient(x, y)
    for n in g1:
        torch.testing.assert_close(g1[n], g2[n], rtol=1e-4, atol=1e-7)
    assert l1 == pytest.approx(l2, rel=1e-5)


def test_cost_rule_picks_the_cheaper_method():
    """Bu et al. 2023, Table 2 norm costs: ghost iff T²(p+d) < Tpd. tanh CNN: conv1 (T = 196, p = 64,
    d = 16) materialised, conv2 (T = 25, p = 256, d = 32) ghost, the dense layers (T = 1) ghost; a
    Linear 64 → 64 on 3 positions ghost (3·128 < 4096), on 40 materialised (40·128 > 4096); an
    embedding with T² > V materialised."""
    model = build_model("tanh-cnn", seed=0)
    step = make_step(model)
    im = Images(2)
    records, _ = ghost.hooked_pass(model, step._layers, im.x, im.y)
    assert [ghost.choose_method(lay, a, d) for lay, a, d in records] == [
        "materialise", "ghost", "ghost", "ghost"]
    for t, want in ((3, "ghost"), (40, "materialise")):
        seq = nn.Sequential(nn.Linear(64, 64), nn.Flatten(), nn.Linear(64 * t, 10))
        x = torch.randn(2, t, 64)
        records, _ = ghost.hooked_pass(seq, make_step(seq)._layers, x, torch.zeros(2, dtype=torch.long))
        assert ghost.choose_method(*records[0]) == want
    emb = nn.Sequential(nn.Embedding(10, 4), nn.Flatten(), nn.Linear(16, 10))
    x = torch.randint(0, 10, (2, 4))
    records, _ = ghost.hooked_pass(emb, make_step(emb)._layers, x, torch.zeros(2, dtype=torch.long))
    assert ghost.choose_method(*records[0]) == "materialise"  # T² = 16 > V = 10
    assert ghost.choose_method(*records[1]) == "ghost"


def test_layers_without_an_exact_formula_use_torch_func():
    refused = [
        nn.Sequential(nn.Embedding(10, 4, max_norm=1.0), nn.Flatten(), nn.Linear(8, 10)),  # rewrites weight
        nn.Sequential(nn.Embedding(10, 4, scale_grad_by_freq=True), nn.Flatten(), nn.Linear(8, 10)),
        nn.Sequential(nn.Flatten(), nn.Linear(784, 8), nn.PReLU(), nn.Linear(8, 10)),  # unknown layer
    ]
    for model in refused:
        step = make_step(model)
        assert not step.uses_fast_path, model
    x = torch.randint(0, 10, (3, 2))
    y = torch.tensor([1, 2, 3])
    step = make_step(refused[1])  # scale_grad_by_freq on torch.func: counts within each example
    _, _, want = reference(refused[1], x, y, 1.0)
    torch.testing.assert_close(step.clipped_sum(x, y)[0], want, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("fast", [True, False])
def test_dropout_clipped_exactly_on_both_paths(fast):
    """Dropout draws a mask per example (torch.func: vmap randomness="different"); whatever the
    masks, every example's clipped gradient has norm ≤ C: with C tiny, all are clipped, so the
    clipped sum of b examples has norm ≤ b·C, and it is not zero."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 32), nn.Dropout(0.5), nn.Tanh(), nn.Linear(32, 10))
    step = make_step(model, clip=1e-3)
    if not fast:
        step._layers = None
    assert step.uses_fast_path is fast
    im = Images(6)
    per_example, _ = step.per_example_gradients(im.x, im.y)
    total, _ = step.clipped_sum(im.x, im.y)
    assert 0 < float(total.norm()) <= 6 * 1e-3 * (1 + 1e-6)
    assert per_example["1.weight"].shape == (6, 32, 784)


def test_cross_example_layers_refused_with_the_reason():
    with pytest.raises(ParameterError, match="mixes the examples"):
        check_model(nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2)))
    with pytest.raises(ParameterError, match="running statistics"):
        check_model(nn.Sequential(nn.Conv2d(1, 2, 3), nn.InstanceNorm2d(2, track_running_stats=True)))
    check_model(nn.Sequential(nn.Conv2d(1, 2, 3), nn.InstanceNorm2d(2), nn.GroupNorm(1, 2), nn.LayerNorm(26)))


def test_buffer_updated_by_the_data_is_refused_at_the_step():
    """A custom layer that keeps a running mean of the data (not a known class) is caught by
    the buffer version check, whichever path."""
    step = make_step(RunningMean())
    im = Images(4)
    with pytest.raises((ParameterError, RuntimeError)):
        step.clipped_sum(im.x, im.y)


PATCH_CONVS = [  # (in, kernel, stride, padding, input side): the tanh CNN's two, 3×3 same, non-square
    (16, 4, 2, 0, 13), (1, 8, 2, 3, 28), (3, 3, 1, 1, 7), (2, (4, 2), (2, 1), (1, 0), 9),
    (2, (2, 6), (2, 3), (0, 2), 11), (2, 3, 2, 1, 9),  # the last: 3 % 2 ≠ 0, im2col only
]


@pytest.mark.parametrize("route", ["cols", "pixels"])
@pytest.mark.parametrize("conv", PATCH_CONVS)
def test_patch_gram_routes_equal_the_im2col_definition(conv, route, monkeypatch):
    """The patch Gram a_i a_iᵀ of the ghost norm (Li et al. 2022 §4) through im2col and through
    the space-to-depth pixel Gram both equal the definition: F.unfold's patches, one product."""
    cin, k, s, p, side = conv
    m = nn.Conv2d(cin, 3, k, stride=s, padding=p)
    a = torch.randn(4, cin, side, side + 1, generator=torch.Generator().manual_seed(3))
    oh, ow = m(a).shape[2:]
    cols = F.unfold(a, m.kernel_size, padding=m.padding, stride=m.stride)  # (b, p, T)
    want = cols.transpose(1, 2) @ cols
    pixels_apply = ghost._pixel_grid(m, oh, ow) is not None
    assert pixels_apply == (conv != PATCH_CONVS[-1])
    # "pixels" where that route does not apply: its cost is None (as _gram_costs says), and the
    # Gram must still be right (im2col), however much cheaper the pixels would have been
    cost = (0, 1) if route == "cols" else (1, 0 if pixels_apply else None)
    assert (ghost._gram_costs(m, oh, ow)[1] is None) == (not pixels_apply)
    monkeypatch.setattr(ghost, "_gram_costs", lambda *_: cost)
    got = ghost._patch_gram(m, a, oh, ow)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_pixel_gram_costs_of_the_tanh_cnn():
    """Multiply-adds per example (docstring of ghost._patch_gram): conv2 T = 25, p = 256:
    im2col T²p = 160,000; pixels: 6×6 grid of 64 channels, 36²·64 + 4·25² = 85,444."""
    model = build_model("tanh-cnn", seed=0)
    assert ghost._gram_costs(model.conv2, 5, 5) == (160_000, 85_444)
    assert ghost._gram_costs(model.conv1, 14, 14) == (196 ** 2 * 64, 17 ** 4 * 4 + 16 * 196 ** 2)


@pytest.mark.parametrize("conv", [
    (1, 8, 2, 3, 28), (1, 3, 1, 1, 9), (1, (4, 2), (2, 1), (1, 0), 9), (1, (3, 5), (2, 3), (2, 1), 12),
    (1, 3, 2, 0, 8), (3, 3, 1, 1, 7), (2, (4, 2), (2, 1), (1, 0), 9)])
@pytest.mark.parametrize("chunked", [False, True])
def test_conv_per_example_gradients_equal_the_definition(conv, chunked, monkeypatch):
    """Per-example Conv2d weight gradients (the forward-convolution route for one input channel,
    Rochette et al. 2019; grouped weight gradient otherwise, whole or in chunks of examples)
    equal δ_i (out×T) times example i's patches (T×p) from F.unfold — the gradient of a
    convolution written as a matrix product."""
    if chunked:  # chunks of 2 examples (the last one alone) on the grouped route
        monkeypatch.setattr(ghost, "_CHUNK_ENTRIES", 2 * 3 * conv[0] * math.prod(nn.Conv2d(1, 1, conv[1]).kernel_size))
    cin, k, s, p, side = conv
    m = nn.Conv2d(cin, 3, k, stride=s, padding=p)
    g = torch.Generator().manual_seed(4)
    a = torch.randn(5, cin, side, side + 1, generator=g)
    d = torch.randn(m(a).shape, generator=g)
    cols = F.unfold(a, m.kernel_size, padding=m.padding, stride=m.stride)  # (b, p, T)
    want = (d.reshape(5, 3, -1) @ cols.transpose(1, 2)).view(5, *m.weight.shape)
    torch.testing.assert_close(ghost._conv_per_example(m, a, d), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", ["conv+norms", "sequence", "tanh-cnn"])
def test_chunked_per_example_gradients_equal_definition(case, monkeypatch):
    """With the chunk budget at one entry (every grouped convolution and every normalisation
    layer processed one example at a time) the per-example gradients and the clipped sum still
    equal the one-example-at-a-time definition."""
    monkeypatch.setattr(ghost, "_CHUNK_ENTRIES", 1)
    model, x, y = CASES[case]()
    step = make_step(model, clip=0.05)
    g, _, want = reference(model, x, y, 0.05)
    grads, _ = step.per_example_gradients(x, y)
    flat = torch.cat([grads[n].reshape(x.shape[0], -1) for n in step.names], dim=1)
    torch.testing.assert_close(flat, g, rtol=1e-4, atol=1e-6)
    got, _ = step.clipped_sum(x, y)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-7)
