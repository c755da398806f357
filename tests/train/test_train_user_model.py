"""``--model package.module:factory`` (dpcalc/train/user_model.py): a user's torch.nn.Module
trained with exact per-example clipping — the fast (ghost/book-keeping) path for nn.Sequential
trees of known layers, torch.func for a custom forward — and one-line refusals of bad input."""

from __future__ import annotations

import inspect
import itertools
import textwrap

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from click.testing import CliRunner  # noqa: E402
from user_layers import RunningMean  # noqa: E402

from dpcalc.cli import cli  # noqa: E402
from dpcalc.errors import ParameterError  # noqa: E402
from dpcalc.train.dpsgd import DPSGDStep  # noqa: E402
from dpcalc.train.models import build_model, validate_model_name  # noqa: E402

torch.set_num_threads(1)
_COUNTER = itertools.count()

MODELS_SOURCE = textwrap.dedent('''
    import torch
    from torch import nn

    def sequential():
        return nn.Sequential(nn.Conv2d(1, 4, 5, stride=3), nn.GroupNorm(2, 4), nn.Tanh(), nn.Flatten(),
                             nn.Linear(4 * 8 * 8, 16), nn.LayerNorm(16), nn.ReLU(), nn.Linear(16, 10))

    class Custom(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(1, 2, 3, stride=2)
            self.norm = nn.LayerNorm(2 * 13 * 13)
            self.lin = nn.Linear(2 * 13 * 13, 10)

        def forward(self, x):
            h = self.conv(x)
            return self.lin(torch.tanh(self.norm(h.flatten(1))) + 0.5 * h.flatten(1))

    class Builders:
        @staticmethod
        def small():
            return nn.Sequential(nn.Flatten(), nn.Linear(784, 10))

    def batchnorm():
        return nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(2 * 26 * 26, 10))

    def instancenorm_running():
        return nn.Sequential(nn.Conv2d(1, 2, 3), nn.InstanceNorm2d(2, track_running_stats=True),
                             nn.Flatten(), nn.Linear(2 * 26 * 26, 10))

    def not_a_module():
        return 42

    def raises():
        raise RuntimeError("boom\\nsecond line")

    def exits():
        raise SystemExit(3)

    def wrong_shape():
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 3))

    def frozen():
        lin = nn.Linear(784, 10)
        lin.requires_grad_(False)
        return nn.Sequential(nn.Flatten(), lin)

    def fails_forward():
        return nn.Sequential(nn.Linear(5, 10))

    NOT_CALLABLE = 3

    class ScalarParts(nn.Module):  # a 0-dim parameter and a 0-dim buffer (issue 33)
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(784, 10)
            self.temperature = nn.Parameter(torch.tensor(1.5))
            self.register_buffer("offset", torch.tensor(0.25))

        def forward(self, x):
            return self.lin(x.flatten(1)) * self.temperature + self.offset

    class OnlyPairs(nn.Module):  # accepts the probe's batch of 2 and no other
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(784, 10)

        def forward(self, x):
            return self.lin(x.reshape(2, 784))

    class UpdatesItself(nn.Module):  # a forward that updates a parameter in place
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(784, 10)

        def forward(self, x):
            with torch.no_grad():
                self.lin.bias.mul_(0.99)
            return self.lin(x.flatten(1))

    class NanLogits(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(784, 10)

        def forward(self, x):
            return self.lin(x.flatten(1)) * float("nan")
''') + "\n\n" + inspect.getsource(RunningMean)  # the shared layer (tests/train/user_layers.py)


@pytest.fixture
def mod(tmp_path, monkeypatch):
    """A fresh module of model factories in a temporary directory that becomes the current
    directory (``--model`` imports from it as ``python -m`` would); a unique name per test."""
    name = f"dpcalc_test_models_{next(_COUNTER)}"
    (tmp_path / f"{name}.py").write_text(MODELS_SOURCE)
    (tmp_path / f"{name}_broken.py").write_text("import numpy\nraise ImportError('missing dependency xyz')\n")
    monkeypatch.chdir(tmp_path)
    return name


def make_step(model, clip=0.05):
    return DPSGDStep(model, torch.optim.SGD(model.parameters(), lr=0.0), noise_multiplier=0.0,
                     max_grad_norm=clip, expected_batch_size=4.0, max_physical_batch=512,
                     noise_generator=torch.Generator().manual_seed(0))


def reference_clipped_sum(model, x, y, clip):
    """Σ_i g_i·min(1, C/(‖g_i‖ + 10⁻⁶)) with g_i from autograd on example i alone."""
    total = None
    for i in range(x.shape[0]):
        model.zero_grad()
        F.cross_entropy(model(x[i:i + 1]), y[i:i + 1]).backward()
        g = torch.cat([p.grad.reshape(-1) for p in model.parameters() if p.requires_grad])
        c = g * min(1.0, clip / (float(g.norm()) + 1e-6))
        total = c if total is None else total + c
    return total


@pytest.mark.parametrize(("factory", "fast"), [("sequential", True), ("Custom", False), ("Builders.small", True)])
def test_user_model_trains_with_exact_clipping(mod, factory, fast):
    spec = f"{mod}:{factory}"
    assert validate_model_name(spec) == spec
    model = build_model(spec, seed=3)
    step = make_step(model)
    assert step.uses_fast_path is fast  # a custom forward cannot be checked: torch.func
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(5, 1, 28, 28, generator=g), torch.randint(0, 10, (5,), generator=g)
    torch.testing.assert_close(step.clipped_sum(x, y)[0], reference_clipped_sum(model, x, y, 0.05),
                               rtol=1e-4, atol=1e-7)


def test_user_model_seeded_and_global_rng_untouched(mod):
    before = torch.random.get_rng_state()
    a, b, c = (build_model(f"{mod}:sequential", seed=s) for s in (1, 1, 2))
    assert torch.equal(torch.random.get_rng_state(), before)
    pa, pb, pc = (torch.cat([p.reshape(-1) for p in m.parameters()]) for m in (a, b, c))
    assert torch.equal(pa, pb) and not torch.equal(pa, pc)


BAD = {
    "nonexistent_module_xyz:f": "no module named 'nonexistent_module_xyz'",
    "{mod}:missing": "has no attribute 'missing'",
    "{mod}:NOT_CALLABLE": "is not callable",
    "{mod}:not_a_module": "returned int, not a torch.nn.Module",
    "{mod}:raises": "calling the factory raised RuntimeError: boom$",
    "{mod}:exits": "calling the factory raised SystemExit: 3",
    "{mod}:batchnorm": "BatchNorm2d: batch normalisation mixes the examples",
    "{mod}:instancenorm_running": "track_running_stats=True: its running statistics",
    "{mod}:wrong_shape": r"\(2, 10\) float logits, got \(2, 3\)",
    "{mod}:frozen": "no trainable parameter",
    "{mod}:fails_forward": "failed on a \\(2, 1, 28, 28\\) batch",
    "{mod}:RunningMean": "changes its buffers",
    "{mod}:OnlyPairs": r"failed on a \(1, 1, 28, 28\) batch",
    "{mod}:UpdatesItself": "changes its parameters in forward",
    "{mod}_broken:f": "importing .* failed: ImportError: missing dependency xyz",
    "{mod}:": "expected package.module:factory",
    "a b:c": "expected package.module:factory",
}


@pytest.mark.parametrize("spec", list(BAD))
def test_bad_model_refused_with_one_line(mod, spec, random_idx):
    spec_ = spec.format(mod=mod)
    with pytest.raises(ParameterError, match=BAD[spec]) as e:
        validate_model_name(spec_)
    assert "\n" not in e.value.message and e.value.message.startswith(f"--model {spec_}: ")
    res = CliRunner().invoke(cli, ["train", "--data-dir", str(random_idx), "--quiet", "--model", spec_,
                                   "--noise-multiplier", "1", "--epochs", "0.5", "--batch-size", "20",
                                   "--delta", "1e-3"], prog_name="dpcalc")
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: --model {spec_}: "), res.stderr


def test_unknown_builtin_name_lists_the_forms():
    with pytest.raises(ParameterError, match="tanh-cnn, logistic, scatternet-linear, scatternet-cnn or package.module:factory"):
        validate_model_name("resnet")


def test_cli_trains_a_user_model(mod, random_idx):
    res = CliRunner().invoke(cli, ["train", "--data-dir", str(random_idx), "--quiet", "--model", f"{mod}:sequential",
                                   "--noise-multiplier", "1", "--epochs", "0.5", "--batch-size", "20",
                                   "--delta", "1e-3", "--threads", "1", "--json"], prog_name="dpcalc")
    assert res.exit_code == 0, res.output
    assert f'"model": "{mod}:sequential"' in res.stdout


def test_zero_dim_parameters_and_buffers_train(mod, random_idx):
    """A 0-dim parameter or buffer (issue 33: _digest viewed them as bytes and crashed)."""
    res = CliRunner().invoke(cli, ["train", "--data-dir", str(random_idx), "--quiet", "--model", f"{mod}:ScalarParts",
                                   "--noise-multiplier", "1", "--epochs", "0.5", "--batch-size", "20",
                                   "--delta", "1e-3", "--threads", "1", "--json"], prog_name="dpcalc")
    assert res.exit_code == 0, res.output


def test_non_finite_loss_stops_the_run(mod, random_idx):
    """NaN logits (issue 33): the run stops at the first non-finite loss with one line, exit 1,
    instead of training to 0.00% accuracy with exit 0; --allow-non-finite-loss lets it go on."""
    args = ["train", "--data-dir", str(random_idx), "--quiet", "--model", f"{mod}:NanLogits", "--noise-multiplier",
            "1", "--epochs", "0.5", "--batch-size", "20", "--delta", "1e-3", "--threads", "1"]
    res = CliRunner().invoke(cli, args, prog_name="dpcalc")
    assert res.exit_code == 1, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "non-finite" in lines[0] and "step 1" in lines[0], res.stderr
    res = CliRunner().invoke(cli, [*args, "--allow-non-finite-loss"], prog_name="dpcalc")
    assert res.exit_code == 0, res.output
    assert "non-finite" in res.stdout
