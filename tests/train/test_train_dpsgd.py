"""The DP-SGD step: per-example gradients, clipping, noise, physical batch splitting,
Poisson sampling, and the models (Abadi et al. 2016, Algorithm 1)."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from dpcalc.errors import ParameterError  # noqa: E402
from dpcalc.train.dpsgd import DPSGDStep, PoissonSampler  # noqa: E402
from dpcalc.train.model_checks import check_model  # noqa: E402
from dpcalc.train.models import TanhCNN, build_model  # noqa: E402

torch.set_num_threads(1)


def make_step(model, *, sigma=0.0, clip=1.0, expected=4.0, physical=512, seed=0, lr=0.0):
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    return DPSGDStep(model, opt, noise_multiplier=sigma, max_grad_norm=clip,
                     expected_batch_size=expected, max_physical_batch=physical,
                     noise_generator=torch.Generator().manual_seed(seed))


def one_at_a_time(model, x, y):
    """Reference: ordinary autograd on each example separately."""
    out = []
    for i in range(x.shape[0]):
        model.zero_grad()
        F.cross_entropy(model(x[i:i + 1]), y[i:i + 1]).backward()
        out.append({n: p.grad.detach().clone() for n, p in model.named_parameters() if p.requires_grad})
    return out


def data(b, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, 1, 28, 28, generator=g), torch.randint(0, 10, (b,), generator=g)


def generic(step):
    """Force the torch.func path (the reference for the hook-based fast path)."""
    step._layers = None
    assert not step.uses_fast_path
    return step


@pytest.mark.parametrize("path", ["fast", "torch.func"])
@pytest.mark.parametrize("name", ["tanh-cnn", "logistic"])
@pytest.mark.parametrize("b", [0, 1, 7])
def test_per_example_gradients_equal_one_at_a_time(name, b, path):
    model = build_model(name, seed=3)
    step = make_step(model)
    assert step.uses_fast_path
    if path == "torch.func":
        generic(step)
    x, y = data(b)
    grads, losses = step.per_example_gradients(x, y)
    ref = one_at_a_time(model, x, y)
    assert losses.shape == (b,)
    for n, p in model.named_parameters():
        assert grads[n].shape == (b, *p.shape)
        for i in range(b):
            torch.testing.assert_close(grads[n][i], ref[i][n], rtol=1e-4, atol=1e-6)
    if b:
        expected_losses = torch.stack([F.cross_entropy(model(x[i:i + 1]), y[i:i + 1]) for i in range(b)])
        torch.testing.assert_close(losses, expected_losses.detach(), rtol=1e-5, atol=1e-6)


def test_batched_module_without_unbatched_support_uses_generic_path():
    class Tiny(nn.Module):  # no supports_unbatched: forward needs a batch dimension
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(784, 10)

        def forward(self, x):
            assert x.dim() == 4
            return self.lin(x.reshape(x.shape[0], -1))

    model = Tiny()
    step = make_step(model)
    assert not step.uses_fast_path  # a custom forward might mix the examples of a batch
    x, y = data(3)
    grads, _ = step.per_example_gradients(x, y)
    ref = one_at_a_time(model, x, y)
    for i in range(3):
        torch.testing.assert_close(grads["lin.weight"][i], ref[i]["lin.weight"], rtol=1e-4, atol=1e-6)


def sequential_zoo():
    """Fast-path layers with the awkward cases: conv padding, stride and dilation, a
    non-square kernel, a Linear layer applied per position (3-D input), no bias, a frozen bias."""
    torch.manual_seed(4)
    model = nn.Sequential(
        nn.Conv2d(1, 3, kernel_size=(3, 5), stride=(2, 1), padding=(1, 2)), nn.Tanh(),
        nn.Conv2d(3, 4, kernel_size=3, dilation=2, bias=False), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(2), nn.Linear(60, 5), nn.Tanh(), nn.Flatten(), nn.Linear(20, 10))
    model[6].bias.requires_grad_(False)
    return model


def test_fast_path_layers_equal_one_at_a_time():
    model = sequential_zoo()
    step = make_step(model)
    assert step.uses_fast_path
    x, y = data(5)
    grads, losses = step.per_example_gradients(x, y)
    ref = one_at_a_time(model, x, y)
    assert "6.bias" not in grads and "2.bias" not in grads
    for n in step.names:
        for i in range(5):
            torch.testing.assert_close(grads[n][i], ref[i][n], rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(step.clipped_sum(x, y)[0], generic(make_step(model)).clipped_sum(x, y)[0],
                               rtol=1e-4, atol=1e-7)


def test_fast_path_refused_where_it_could_mix_examples_or_lacks_a_formula():
    refused = [
        nn.Sequential(nn.Flatten(), nn.Linear(784, 10), nn.PReLU()),  # not a known per-example layer
        nn.Sequential(nn.Conv2d(1, 2, 3, groups=1, padding="same"), nn.Flatten(), nn.Linear(1568, 10)),
        nn.Sequential(nn.Conv2d(1, 2, 3, padding=1, padding_mode="reflect"), nn.Flatten(),
                      nn.Linear(1568, 10)),
        nn.Sequential(nn.Conv2d(1, 2, 3, groups=1), nn.Conv2d(2, 2, 3, groups=2), nn.Flatten(),
                      nn.Linear(1152, 10)),  # grouped convolution: no formula here
        nn.Sequential(nn.Flatten(), nn.Linear(784, 8), nn.ReLU(inplace=True), nn.Linear(8, 10)),
    ]
    for model in refused:
        assert not make_step(model).uses_fast_path, model


def test_layer_used_twice_is_not_fast():
    """A shared layer's hook would fire twice per example: no fast path."""
    shared = nn.Linear(16, 16)
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 16), nn.Tanh(), shared, nn.Tanh(), shared,
                          nn.Linear(16, 10))
    assert not make_step(model).uses_fast_path


@pytest.mark.parametrize("path", ["fast", "torch.func"])
def test_clipped_sum_matches_definition(path):
    """Σ_i g_i·min(1, C/‖g_i‖₂), norm over all parameters (Abadi et al. 2016, Alg. 1)."""
    model = build_model("tanh-cnn", seed=0)
    clip = 0.05
    step = make_step(model, clip=clip)
    if path == "torch.func":
        generic(step)
    x, y = data(6)
    ref = one_at_a_time(model, x, y)
    total = None
    for g in ref:
        flat = torch.cat([g[n].reshape(-1) for n, _ in model.named_parameters()])
        clipped = flat * min(1.0, clip / float(flat.norm()))
        assert float(clipped.norm()) <= clip * (1 + 1e-6)
        total = clipped if total is None else total + clipped
    got, loss_sum = step.clipped_sum(x, y)
    torch.testing.assert_close(got, total, rtol=1e-4, atol=1e-7)
    assert got.shape == (sum(p.numel() for p in model.parameters()),) == (26010,)


@pytest.mark.parametrize("path", ["fast", "torch.func"])
def test_physical_batch_split_equals_unsplit(path):
    model = build_model("tanh-cnn", seed=0)
    x, y = data(23)
    whole = make_step(model, sigma=1.3, clip=0.1, expected=20.0, physical=512, seed=5)
    split = make_step(model, sigma=1.3, clip=0.1, expected=20.0, physical=4, seed=5)
    if path == "torch.func":
        generic(whole)
        generic(split)
    g1, l1 = whole.noisy_gradient(x, y)
    g2, l2 = split.noisy_gradient(x, y)
    for n in g1:
        torch.testing.assert_close(g1[n], g2[n], rtol=1e-5, atol=1e-7)
    assert l1 == pytest.approx(l2, rel=1e-5)


def test_fast_and_torch_func_steps_agree():
    """The same noisy update whichever path computes the per-example gradients."""
    model = build_model("tanh-cnn", seed=1)
    x, y = data(40, seed=7)
    fast = make_step(model, sigma=0.7, clip=0.02, expected=32.0, physical=16, seed=9)
    slow = generic(make_step(model, sigma=0.7, clip=0.02, expected=32.0, physical=16, seed=9))
    g1, l1 = fast.noisy_gradient(x, y)
    g2, l2 = slow.noisy_gradient(x, y)
    for n in g1:
        torch.testing.assert_close(g1[n], g2[n], rtol=1e-4, atol=1e-7)
    assert l1 == pytest.approx(l2, rel=1e-5)


def test_empty_batch_gives_pure_noise_with_the_right_scale():
    """B = 0: the update is N(0, σ²C²)/(qN) — the Poisson step still releases noise."""
    model = build_model("logistic", seed=0)
    sigma, clip, expected = 2.0, 0.5, 10.0
    step = make_step(model, sigma=sigma, clip=clip, expected=expected, seed=11)
    x, y = data(0)
    grads, loss_sum = step.noisy_gradient(x, y)
    z = torch.randn(7850, generator=torch.Generator().manual_seed(11)) * sigma * clip / expected
    flat = torch.cat([grads[n].reshape(-1) for n in step.names])
    torch.testing.assert_close(flat, z)
    assert loss_sum == 0.0
    # sample std of 7,850 draws is within 5% of σC/(qN) (a 4.4-sigma band)
    assert float(flat.std()) == pytest.approx(sigma * clip / expected, rel=0.05)


def test_step_applies_sgd_update():
    model = build_model("logistic", seed=0)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    step = make_step(model, sigma=0.5, clip=1.0, expected=4.0, seed=2, lr=0.1)
    x, y = data(5)
    probe = make_step(build_model("logistic", seed=0), sigma=0.5, clip=1.0, expected=4.0, seed=2)
    expected_grads, _ = probe.noisy_gradient(x, y)
    out = step.step(x, y)
    assert out.batch_size == 5
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.detach(), before[n] - 0.1 * expected_grads[n])


def test_poisson_sampler_variable_batches():
    sampler = PoissonSampler(dataset_size=1000, sample_rate=0.05,
                             generator=torch.Generator().manual_seed(0))
    sizes = []
    for _ in range(400):
        idx = sampler.sample()
        assert idx.dtype == torch.int64
        assert torch.equal(idx, torch.unique(idx))  # sorted, no repeats
        assert idx.numel() == 0 or (0 <= int(idx.min()) and int(idx.max()) < 1000)
        sizes.append(idx.numel())
    mean = sum(sizes) / len(sizes)
    # Binomial(1000, 0.05): mean 50, sd of the mean of 400 draws = sqrt(47.5/400) ≈ 0.34
    assert abs(mean - 50) < 2.0
    assert len(set(sizes)) > 10  # the batch size varies
    tiny = PoissonSampler(dataset_size=3, sample_rate=0.01, generator=torch.Generator().manual_seed(0))
    assert any(tiny.sample().numel() == 0 for _ in range(50))  # empty batches happen


def test_tanh_cnn_architecture():
    """Papernot et al. 2021 MNIST CNN: 26,010 parameters, (B,1,28,28) -> (B,10); unbatched too."""
    model = TanhCNN()
    assert sum(p.numel() for p in model.parameters()) == 16 * 64 + 16 + 32 * 16 * 16 + 32 + 512 * 32 + 32 + 330
    x, _ = data(3)
    assert model(x).shape == (3, 10)
    torch.testing.assert_close(model(x[0]), model(x)[0], rtol=1e-5, atol=1e-6)


def test_batchnorm_refused():
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.LazyLinear(10))
    with pytest.raises(ParameterError, match="batch normalisation mixes the examples"):
        check_model(model)
    with pytest.raises(ParameterError, match="layer 1 is BatchNorm2d"):
        make_step(model)
    check_model(nn.Sequential(nn.Conv2d(1, 4, 3), nn.GroupNorm(2, 4)))  # per-example: fine


def test_bad_parameters():
    model = build_model("logistic", seed=0)
    with pytest.raises(ParameterError, match="max_grad_norm must be a finite number > 0"):
        make_step(model, clip=0.0)
    with pytest.raises(ParameterError, match="model must be one of tanh-cnn, logistic"):
        build_model("resnet", seed=0)
    assert math.isfinite(make_step(model).noise_multiplier)
