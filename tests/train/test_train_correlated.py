"""``dpcalc train --noise correlated``: MF-SGD with a matrix-factorization mechanism's noise on a
fixed epoch order — the noise is C⁻¹z (checked against a dense solve), ε is the Gaussian mechanism's
with the strategy's sensitivity, banded:1 is DP-SGD without amplification, the stream holds
O(bands) arrays, --resume continues the same noise bit for bit, --max-epsilon stops at an epoch
end, and the options it cannot honour are refused in one line."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from dpcalc.accounting.correlated import mf_privacy  # noqa: E402
from dpcalc.accounting.shuffling import EpochGaussianAccountant  # noqa: E402
from dpcalc.errors import ParameterError  # noqa: E402
from dpcalc.events import dpsgd_event  # noqa: E402
from dpcalc.mechanisms.correlated import Participation, sensitivity  # noqa: E402
from dpcalc.mechanisms.correlated.spec import parse_strategy  # noqa: E402
from dpcalc.mechanisms.gaussian import gaussian_epsilon  # noqa: E402
from dpcalc.train import checkpoint as ckpt  # noqa: E402
from dpcalc.train.config import TrainConfig  # noqa: E402
from dpcalc.train.correlated import CorrelatedNoise, CorrelatedPlan  # noqa: E402
from dpcalc.train.dpsgd import DPSGDStep  # noqa: E402
from dpcalc.train.loop import train  # noqa: E402
from dpcalc.train.models import build_model  # noqa: E402
from dpcalc.train.samplers import CyclicSampler  # noqa: E402

N_TRAIN, N_TEST = 600, 200  # T = 600/60 = 10 steps per epoch


def base(tiny_dir, **kw):
    opts = dict(data_dir=str(tiny_dir), model="logistic", epochs=2, batch_size=60, lr=0.5,
                optimizer="momentum", max_grad_norm=1.0, noise_multiplier=1.5, delta=1e-4,
                threads=1, seed=3, noise="correlated", sampling="cyclic", strategy="banded:3")
    opts.update(kw)
    return TrainConfig(**opts)


def params_of(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def delta_of(spec, n=20, k=2, b=10):
    return sensitivity(parse_strategy(spec, steps=n, epochs=k), Participation(n, k, b)).value


@pytest.mark.parametrize("spec", ["tree", "sqrt", "banded:3", "blt:0.9/0.3"])
def test_tiny_runs_report_the_mechanisms_epsilon(tiny_dir, tiny, spec):
    torch.set_num_threads(1)
    res = train(base(tiny_dir, strategy=spec), data=tiny)
    assert res.steps == 20 and res.accounting.accountant == "mf-gaussian" and res.accounting.certified
    assert res.test_accuracy > 0.3  # chance is 0.1
    d = delta_of(spec)
    # ε: the exact Gaussian curve at μ = Δ/σ — what `dpcalc mf --sigma σ/Δ` prints
    mf = mf_privacy(parse_strategy(spec, steps=20, epochs=2), Participation(20, 2, 10), delta=1e-4,
                    noise_multiplier=1.5 / d)
    assert res.accounting.epsilon == pytest.approx(mf.epsilon, rel=1e-12)
    assert res.accounting.epsilon == pytest.approx(gaussian_epsilon(delta=1e-4, mu=d / 1.5), rel=1e-12)
    # the first epoch alone: the leading block (one participation)
    d1 = delta_of(spec, n=10, k=1)
    assert res.history[0].epsilon == pytest.approx(gaussian_epsilon(delta=1e-4, mu=d1 / 1.5), rel=1e-12)
    assert res.history[0].epsilon <= res.history[1].epsilon
    assert res.sampler["strategy"] == spec and res.sampler["sampling"] == "cyclic"
    # achievable: a record at the worst-case steps of the sensitivity's explicit pattern attains
    # ‖C·1_π‖ (an actual Gaussian release); its ε never exceeds the one reported, equal when Δ is exact
    s = sensitivity(parse_strategy(spec, steps=20, epochs=2), Participation(20, 2, 10))
    lower = gaussian_epsilon(delta=1e-4, mu=s.achieved / 1.5)
    assert lower <= res.accounting.epsilon * (1 + 1e-12)
    if s.exact:
        assert lower == pytest.approx(res.accounting.epsilon, rel=1e-9)


def test_noise_is_c_inverse_z_from_the_run_generator():
    """w = σ·clip·C⁻¹z (MF-SGD, Denisov et al. 2022 Alg. 1), z the generator's float32 draws."""
    plan = CorrelatedPlan("banded:3", 5, 2)
    gen = torch.Generator().manual_seed(7)
    noise = CorrelatedNoise(plan, num_parameters=4, noise_std=0.7, generator=gen)
    got = np.stack([noise().double().numpy() for _ in range(10)])
    ref = torch.Generator().manual_seed(7)
    z = np.stack([torch.randn(4, generator=ref).double().numpy() for _ in range(10)])  # row t: step t
    c = plan.strategy.coefs
    dense = np.zeros((10, 10))
    for i in range(10):
        for j in range(max(0, i - 2), i + 1):
            dense[i, j] = c[i - j]
    np.testing.assert_allclose(got, 0.7 * np.linalg.solve(dense, z), rtol=1e-6, atol=1e-7)


def test_banded_1_is_dpsgd_without_amplification(tiny_dir, tiny):
    """C = I: the same noise as DP-SGD's draw, and ε of the E-fold Gaussian mechanism (μ = √E/σ) —
    the certified ε of DP-SGD on an epoch sampler without amplification."""
    res = train(base(tiny_dir, strategy="banded:1"), data=tiny)
    assert res.accounting.epsilon == pytest.approx(gaussian_epsilon(delta=1e-4, mu=math.sqrt(2) / 1.5), rel=1e-12)
    shuffled = EpochGaussianAccountant().epsilon(
        dpsgd_event(noise_multiplier=1.5, sample_rate=0.1, steps=20, sampling="shuffle", batch_size=60,
                    dataset_size=600), delta=1e-4)
    assert res.accounting.epsilon == pytest.approx(shuffled.epsilon, rel=1e-9)
    plan = CorrelatedPlan("banded:1", 10, 2)
    model = build_model("logistic", seed=0)
    step = DPSGDStep(model, torch.optim.SGD(model.parameters(), lr=0.1), noise_multiplier=1.5, max_grad_norm=0.5,
                     expected_batch_size=60, max_physical_batch=60,
                     noise_generator=torch.Generator().manual_seed(5))
    corr = CorrelatedNoise(plan, num_parameters=step.num_parameters, noise_std=1.5 * 0.5,
                           generator=torch.Generator().manual_seed(5))
    for _ in range(3):
        torch.testing.assert_close(corr(), step.noise(), rtol=1e-6, atol=0)


def test_memory_is_bands_arrays_not_steps(tiny_dir, tiny):
    for spec, buffers in (("banded:4", 3), ("banded:1", 0), ("tree", 4), ("blt:0.9,0.5/0.3,0.1", 2)):
        plan = CorrelatedPlan(spec, 10, 50)  # 500 steps
        noise = CorrelatedNoise(plan, num_parameters=7, noise_std=1.0, generator=torch.Generator())
        assert noise.buffers == buffers
        for _ in range(37):
            noise()
        arrays = [t for x in noise.state_dict().values()
                  for t in (x if isinstance(x, list) else x.values() if isinstance(x, dict) else [])]
        assert len(arrays) <= buffers and all(t.shape == (7,) for t in arrays)
    assert CorrelatedNoise(CorrelatedPlan("sqrt", 10, 3), num_parameters=7, noise_std=1.0,
                           generator=torch.Generator()).buffers == 29  # sqrt = banded:n


def test_cyclic_sampler_is_the_same_each_epoch():
    s = CyclicSampler(dataset_size=25, batch_size=10, seed=4)
    assert s.steps_per_epoch == 3
    first = [s.batch(t) for t in range(3)]
    assert sorted(torch.cat(first).tolist()) == list(range(25))
    for t in range(3, 9):
        assert torch.equal(s.batch(t), first[t % 3])


class Killed(Exception):
    pass


def kill_at(step):
    def hook(s):
        if s == step:
            raise Killed
    return hook


def test_resume_continues_the_same_noise_bit_for_bit(tiny_dir, tiny, tmp_path):
    cfg = dict(epochs=3, strategy="tree")
    ref = train(base(tiny_dir, checkpoint=str(tmp_path / "ref"), **cfg), data=tiny)
    run = tmp_path / "run"
    with pytest.raises(Killed):
        train(base(tiny_dir, checkpoint=str(run), **cfg), data=tiny, on_step=kill_at(15))
    ledger = ckpt.read_ledger(run)
    assert ledger.mechanism["strategy"] == "tree" and ledger.sampling == "cyclic"
    res = train(base(tiny_dir, checkpoint=str(run), resume=True, **cfg), data=tiny)
    for n, p in params_of(ref.model).items():
        torch.testing.assert_close(params_of(res.model)[n], p, rtol=0, atol=0)
    # the 5 orphaned steps (one pass touched) add one more release of the full plan's Δ
    d = delta_of("tree", n=30, k=3)
    assert (res.steps, res.orphaned_steps) == (35, 5)
    assert res.accounting.epsilon == pytest.approx(
        gaussian_epsilon(delta=1e-4, mu=math.sqrt(2) * d / 1.5), rel=1e-12)
    assert res.accounting.epsilon > ref.accounting.epsilon
    # another strategy cannot continue this run
    with pytest.raises(ParameterError, match="strategy"):
        train(base(tiny_dir, checkpoint=str(run), resume=True, epochs=3, strategy="banded:2"), data=tiny)


def test_max_epsilon_stops_before_the_epoch_that_exceeds_it(tiny_dir, tiny):
    full = train(base(tiny_dir, epochs=3), data=tiny)
    e1, e2 = full.history[0].epsilon, full.history[1].epsilon
    res = train(base(tiny_dir, epochs=3, max_epsilon=(e1 + e2) / 2), data=tiny)
    assert res.steps == 10 and res.accounting.epsilon == e1 and "max-epsilon" in res.stopped


def test_target_epsilon_is_met_and_not_under_calibrated(tiny_dir, tiny):
    res = train(base(tiny_dir, noise_multiplier=None, target_epsilon=4.0), data=tiny)
    assert res.accounting.epsilon <= 4.0
    d = delta_of("banded:3")
    assert gaussian_epsilon(delta=1e-4, mu=d / res.noise_multiplier) <= 4.0
    assert gaussian_epsilon(delta=1e-4, mu=d / (res.noise_multiplier * (1 - 1e-6))) > 4.0


@pytest.mark.parametrize("args, needle", [
    (["--noise", "correlated", "--strategy", "tree", "--sampling", "poisson"], "--sampling poisson"),
    (["--noise", "correlated"], "needs --strategy"),
    (["--noise", "correlated", "--strategy", "tree-honaker"], "online"),
    (["--noise", "correlated", "--strategy", "dense:c.npy"], "online"),
    (["--noise", "correlated", "--strategy", "banded:x"], "banded:B"),
    (["--noise", "correlated", "--strategy", "banded:99"], "B in [1, steps = 20]"),
    (["--strategy", "tree"], "applies to --noise correlated"),
    (["--sampling", "cyclic"], "applies to --noise correlated"),
    (["--noise", "correlated", "--strategy", "tree", "--epochs", "1.5"], "whole number of --epochs"),
    (["--noise", "correlated", "--strategy", "tree", "--accountant", "rdp"], "--accountant"),
    (["--noise", "correlated", "--strategy", "tree", "--nproc", "2"], "--nproc"),
    (["--noise", "correlated", "--strategy", "tree", "--risk"], "--risk"),
])
def test_bad_combinations_exit_2_in_one_line(tiny_dir, run_cli, args, needle):
    epochs = [] if "--epochs" in args else ["--epochs", "2"]
    r = run_cli("train", "--data-dir", tiny_dir, "--model", "logistic", *epochs, "--batch-size", "60",
                "--noise-multiplier", "1", "--delta", "1e-4", "--quiet", *args)
    assert r.exit_code == 2, r.stdout + r.stderr
    assert needle in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_cli_prints_the_mechanism(tiny_dir, run_cli):
    r = run_cli("train", "--data-dir", tiny_dir, "--model", "logistic", "--epochs", "2", "--batch-size", "60",
                "--noise-multiplier", "1.5", "--delta", "1e-4", "--quiet", "--noise", "correlated",
                "--strategy", "banded:3", "--threads", "1", "--json")
    assert r.exit_code == 0, r.stderr
    res = r.json()["results"][0]
    assert res["accountant"] == "mf-gaussian" and res["details"]["strategy"] == "banded:3"
    assert res["epsilon"] == pytest.approx(gaussian_epsilon(delta=1e-4, mu=delta_of("banded:3") / 1.5), rel=1e-12)


@pytest.mark.parametrize("spec", ["banded:3", "blt:0.9,0.5/0.3,0.1", "tree", "sqrt"])
def test_stream_state_continues_the_same_noise(spec):
    plan = CorrelatedPlan(spec, 10, 3)
    gen = torch.Generator().manual_seed(1)
    a = CorrelatedNoise(plan, num_parameters=5, noise_std=0.3, generator=gen)
    for _ in range(13):
        a()
    state, rng = a.state_dict(), gen.get_state()
    want = [a() for _ in range(9)]
    gen2 = torch.Generator()
    b = CorrelatedNoise(plan, num_parameters=5, noise_std=0.3, generator=gen2)
    b.load_state_dict(state)
    gen2.set_state(rng)
    for w in want:
        assert torch.equal(b(), w)
    with pytest.raises(ParameterError, match="does not match"):
        CorrelatedNoise(plan, num_parameters=6, noise_std=0.3, generator=gen2).load_state_dict(state)
