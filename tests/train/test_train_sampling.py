"""``dpcalc train --sampling`` (issue 12): the loop draws its batches from the sampler it is
accounted for, the ε reported is that sampler's accounting (computed here directly), the
shuffle / balls-in-bins bracket and the Poisson ε beside it, calibration and budget on the
certified number, the ledger / checkpoint / --resume record the sampler, and bad combinations
are one-line refusals (exit 2). Tiny generated IDX data (N = 600, B = 60: T = 10 steps per
epoch), logistic regression, a few steps."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from dpcalc.accounting import shuffling  # noqa: E402
from dpcalc.accounting.calibrate import calibrate_dpsgd  # noqa: E402
from dpcalc.accounting.registry import default_accountant, get_accountant  # noqa: E402
from dpcalc.errors import ParameterError  # noqa: E402
from dpcalc.events import dpsgd_event  # noqa: E402
from dpcalc.train import checkpoint as ckpt  # noqa: E402
from dpcalc.train.config import TrainConfig  # noqa: E402
from dpcalc.train.loop import train  # noqa: E402
from dpcalc.train.privacy import touched_passes  # noqa: E402

N_TRAIN, N_TEST, B, SIGMA, DELTA = 600, 200, 60, 1.0, 1e-4  # N_TRAIN, N_TEST: the tiny_dir / tiny data
T = N_TRAIN // B  # steps per epoch


def base(tiny_dir, **kw):
    opts = dict(data_dir=str(tiny_dir), model="logistic", epochs=2, batch_size=B, lr=0.5,
                optimizer="momentum", max_grad_norm=1.0, noise_multiplier=SIGMA, delta=DELTA,
                threads=1, seed=3)
    opts.update(kw)
    return TrainConfig(**opts)


def params_of(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


class Sizes:
    """A reporter that records the batch size of every step."""

    def __init__(self):
        self.sizes = []

    def start(self, **kw):
        pass

    def start_epoch(self, *a):
        pass

    def step(self, *, loss, batch_size):
        self.sizes.append(batch_size)

    def end_epoch(self, record):
        pass

    def message(self, text):
        pass


def gaussian_delta_mp(eps: float, mu: float) -> float:
    """δ(ε) of μ-GDP in mpmath (Balle & Wang 2018 Thm 8; Dong, Roth, Su 2019 Cor 2.13):
    Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2)."""
    import mpmath as mp

    mp.mp.dps = 50
    e, m = mp.mpf(eps), mp.mpf(mu)
    return float(mp.ncdf(-e / m + m / 2) - mp.e ** e * mp.ncdf(-e / m - m / 2))


# ---- accounting: each sampler reports its own accountant's ε --------------------------------------------

def test_without_replacement_is_accounted_under_replace_one(tiny_dir, tiny):
    res = train(base(tiny_dir, sampling="without-replacement"), data=tiny)
    assert res.steps == 20 and res.accounting.accountant == "pld"
    direct = get_accountant("pld", neighboring="replace").epsilon(
        dpsgd_event(noise_multiplier=SIGMA, steps=20, sampling="without-replacement", batch_size=B,
                    dataset_size=N_TRAIN), delta=DELTA)
    assert res.accounting.epsilon == direct.epsilon
    poisson = train(base(tiny_dir), data=tiny).accounting.epsilon
    assert res.accounting.epsilon > poisson  # replace-one costs more than the Poisson add/remove number
    d = res.to_json()["details"]
    assert d["sampling"] == "without-replacement" and d["adjacency"] == "replace" and d["batch_size"] == B


def test_truncated_poisson_defaults_to_an_accountant_that_supports_it(tiny_dir, tiny):
    """The default accountant is the first certified one with a proof for truncated Poisson
    (default_accountant_for): pld, by its branch-decomposition pair (dpcalc/accounting/_truncated_pld.py)."""
    assert default_accountant() == "pld"
    res = train(base(tiny_dir, sampling="truncated-poisson", max_batch_size=65), data=tiny)
    assert res.accounting.accountant == "pld"
    direct = get_accountant("pld").epsilon(
        dpsgd_event(noise_multiplier=SIGMA, sample_rate=B / N_TRAIN, steps=20, sampling="truncated-poisson",
                    dataset_size=N_TRAIN, max_batch_size=65), delta=DELTA)
    assert res.accounting.epsilon == direct.epsilon
    assert res.to_json()["details"]["max_batch_size"] == 65


def test_with_replacement_is_accounted_under_add_remove_by_pld(tiny_dir, tiny):
    """The default is the first certified accountant that supports fixed-size sampling with replacement
    (pld since issue 32: the binomial mixture of Gaussians, add/remove), as `dpcalc sigma` /
    `dpcalc epsilon` choose it."""
    from dpcalc.accounting._sampling import default_accountant_for

    event = dpsgd_event(noise_multiplier=SIGMA, steps=20, sampling="with-replacement", batch_size=B,
                        dataset_size=N_TRAIN)
    assert default_accountant_for(event, "add-remove") == "pld"
    res = train(base(tiny_dir, sampling="with-replacement"), data=tiny)
    assert res.steps == 20 and res.accounting.accountant == "pld" and res.accounting.certified
    assert res.accounting.epsilon == get_accountant("pld", neighboring="add-remove").epsilon(event, delta=DELTA).epsilon
    d = res.to_json()["details"]
    assert d["sampling"] == "with-replacement" and d["adjacency"] == "add-remove" and d["batch_size"] == B


def test_without_replacement_under_add_remove_with_neighboring(tiny_dir, tiny):
    """--neighboring add-remove: the add/remove pair (the Poisson-sampled Gaussian at q = B/N, σ/2; Birrell,
    Ebrahimi, Behnia, Pacheco 2024 Thm 3.1/3.3 for rdp), from pld since issue 32; without --neighboring the
    default stays replace-one (pld), and
    --neighboring replace is that default, number for number."""
    wor = dict(sampling="without-replacement")
    event = dpsgd_event(noise_multiplier=SIGMA, steps=20, sampling="without-replacement", batch_size=B,
                        dataset_size=N_TRAIN)
    ar = train(base(tiny_dir, neighboring="add-remove", **wor), data=tiny)
    assert ar.accounting.accountant == "pld" and ar.to_json()["details"]["adjacency"] == "add-remove"
    assert ar.accounting.epsilon == get_accountant("pld", neighboring="add-remove").epsilon(event, delta=DELTA).epsilon
    default = train(base(tiny_dir, **wor), data=tiny)
    explicit = train(base(tiny_dir, neighboring="replace", **wor), data=tiny)
    assert default.accounting.accountant == explicit.accounting.accountant == "pld"
    assert default.accounting.epsilon == explicit.accounting.epsilon
    assert default.to_json()["details"]["adjacency"] == "replace"


@pytest.mark.slow  # ~25 s idle: a training run calibrated on the with-replacement bound
def test_with_replacement_target_epsilon_calibrates_on_the_certified_bound(tiny_dir, tiny):
    """--target-epsilon: σ is the default accountant's calibration (pld since issue 32, as `dpcalc sigma`), the
    certified ε at σ is ≤ the target and slightly less σ would exceed it."""
    target = 6.0
    res = train(base(tiny_dir, sampling="with-replacement", noise_multiplier=None, target_epsilon=target, epochs=1),
                data=tiny)
    rdp = get_accountant("pld", neighboring="add-remove")
    sampler = {"sampling": "with-replacement", "batch_size": B, "dataset_size": N_TRAIN}
    cal = calibrate_dpsgd(rdp, target_epsilon=target, delta=DELTA, sample_rate=B / N_TRAIN, steps=T, sampler=sampler)
    assert res.noise_multiplier == cal.noise_multiplier and res.accounting.accountant == "pld"
    assert res.accounting.epsilon <= target

    def eps(sigma):
        return rdp.epsilon(dpsgd_event(noise_multiplier=sigma, steps=T, **sampler), delta=DELTA).epsilon

    assert eps(res.noise_multiplier) <= target < eps(res.noise_multiplier * (1 - 1e-3))


def test_a_record_drawn_twice_contributes_twice_to_the_clipped_sum():
    """The accounted mechanism (Birrell et al. 2024 §3.2): n copies of a record add n clipped gradients.
    With σ = 0 and plain SGD (lr 1) the update is −(sum of clipped gradients)/B_expected, linear in the
    batch's multiset: the update of [x0, x0, x1] is the update of [x0, x1] plus that of [x0]."""
    from dpcalc.train.dpsgd import DPSGDStep
    from dpcalc.train.models import build_model

    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(2, 1, 28, 28, generator=g), torch.tensor([3, 7])

    def update(idx):
        model = build_model("logistic", seed=0)
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        step = DPSGDStep(model, torch.optim.SGD(model.parameters(), lr=1.0), noise_multiplier=0.0, max_grad_norm=0.01,
                         expected_batch_size=4.0, max_physical_batch=512, noise_generator=torch.Generator())
        step.step(x[idx], y[idx])
        return {n: p.detach() - before[n] for n, p in model.named_parameters()}

    twice, once, single = update(torch.tensor([0, 0, 1])), update(torch.tensor([0, 1])), update(torch.tensor([0]))
    for n in twice:
        # float32 parameters: the differences carry round-off of ~1 ulp of the weights (≈ 4e-9)
        torch.testing.assert_close(twice[n], once[n] + single[n], rtol=1e-4, atol=5e-8)
        assert not torch.allclose(twice[n], once[n])  # the duplicate is not collapsed


@pytest.mark.parametrize("sampler", ["shuffle", "balls-in-bins"])
def test_epoch_samplers_report_the_certified_bound_with_the_bracket(tiny_dir, tiny, sampler):
    res = train(base(tiny_dir, sampling=sampler), data=tiny)
    eps = res.accounting.epsilon
    assert res.steps == 2 * T and res.accounting.accountant == shuffling.EPOCH_ACCOUNTANT and res.accounting.certified
    # ε = the exact 2-fold Gaussian mechanism: μ = √2/σ, δ(ε) = δ (mpmath closed form)
    assert eps == shuffling.certified_upper_epsilon(noise_multiplier=SIGMA, epochs=2, delta=DELTA)
    assert gaussian_delta_mp(eps, math.sqrt(2) / SIGMA) == pytest.approx(DELTA, rel=1e-6)
    assert gaussian_delta_mp(eps, math.sqrt(2) / SIGMA) <= DELTA * (1 + 1e-9)
    d = res.to_json()["details"]
    low = (shuffling.shuffle_lower_epsilon if sampler == "shuffle" else shuffling.balls_in_bins_lower_epsilon)(
        noise_multiplier=SIGMA, steps_per_epoch=T, epochs=2, delta=DELTA)
    assert d["epsilon_lower"] == min(low, eps) and 0 < d["epsilon_lower"] <= eps
    pois = get_accountant("pld").epsilon(dpsgd_event(noise_multiplier=SIGMA, sample_rate=B / N_TRAIN, steps=20),
                                         delta=DELTA).epsilon
    assert d["poisson_epsilon"] == pois < eps
    assert (d["passes"], d["steps_per_epoch"], d["adjacency"]) == (2, T, "zero-out")
    if sampler == "shuffle":  # Chua et al. 2024: the Poisson number is below the shuffle lower bound here
        assert pois < d["epsilon_lower"]


def test_partial_epoch_counts_as_a_whole_one(tiny_dir, tiny):
    res = train(base(tiny_dir, sampling="shuffle", epochs=1.5), data=tiny)
    assert res.steps == 15
    assert res.accounting.epsilon == shuffling.certified_upper_epsilon(noise_multiplier=SIGMA, epochs=2, delta=DELTA)
    # the lower bound only for the whole epoch applied
    assert res.to_json()["details"]["lower_bound_epochs"] == 1


# ---- the loop uses the sampler ----------------------------------------------------------------------------

@pytest.mark.parametrize("sampler", ["without-replacement", "with-replacement", "shuffle", "truncated-poisson",
                                     "balls-in-bins", "poisson"])
def test_the_loop_draws_its_batches_from_the_sampler(tiny_dir, tiny, sampler):
    """Batch sizes seen by the loop per step: exactly B (without-replacement; shuffle, N = 10·B),
    at most B_max (truncated), N per epoch (balls-in-bins), variable (Poisson)."""
    rep = Sizes()
    extra = {"max_batch_size": 58} if sampler == "truncated-poisson" else {}
    train(base(tiny_dir, sampling=sampler, epochs=3, **extra), data=tiny, reporter=rep)
    sizes = rep.sizes
    assert len(sizes) == 30
    if sampler in ("without-replacement", "with-replacement", "shuffle"):
        assert sizes == [B] * 30  # with-replacement: duplicates kept, so exactly B examples too
    elif sampler == "truncated-poisson":
        assert max(sizes) == 58 and len(set(sizes)) > 1  # Pr[Bin(600, 0.1) > 58] ≈ 0.56: capped often
    elif sampler == "balls-in-bins":
        assert [sum(sizes[k:k + T]) for k in (0, 10, 20)] == [N_TRAIN] * 3 and len(set(sizes)) > 1
    else:
        assert len(set(sizes)) > 1 and sizes != [B] * 30


# ---- the epoch samplers' accountant ----------------------------------------------------------------------

def test_epoch_accountant_is_the_certified_bound_and_no_registry_choice():
    """EpochGaussianAccountant: ε of E epochs = certified_upper_epsilon bit for bit (orphaned passes add
    Gaussian runs), δ(ε) inverts it, sampled histories are refused, and it is not an --accountant choice."""
    from dpcalc.accounting.registry import available
    from dpcalc.errors import UnsupportedEventError
    from dpcalc.train.privacy import SamplerSpec

    acc = shuffling.EpochGaussianAccountant()
    spec = SamplerSpec("shuffle", N_TRAIN, B)
    for steps, orphaned_steps, orphaned_passes, epochs in ((20, 0, 0, 2), (15, 0, 0, 2), (23, 8, 1, 3), (8, 8, 1, 1)):
        event = spec.history(noise_multiplier=SIGMA, sample_rate=B / N_TRAIN, steps=steps,
                             orphaned_steps=orphaned_steps, orphaned_passes=orphaned_passes)
        res = acc.epsilon(event, delta=DELTA)
        assert res.epsilon == shuffling.certified_upper_epsilon(noise_multiplier=SIGMA, epochs=epochs, delta=DELTA)
        assert res.details["passes"] == epochs and res.certified and res.accountant == shuffling.EPOCH_ACCOUNTANT
        assert DELTA <= acc.delta(event, epsilon=res.epsilon).delta <= DELTA * (1 + 1e-9)
    empty = acc.epsilon(spec.history(noise_multiplier=SIGMA, sample_rate=B / N_TRAIN, steps=0), delta=DELTA)
    assert (empty.epsilon, empty.details["passes"], empty.details["note"]) == (0.0, 0, "no steps taken")
    with pytest.raises(UnsupportedEventError, match="without sampling"):
        acc.epsilon(dpsgd_event(noise_multiplier=SIGMA, sample_rate=B / N_TRAIN, steps=20), delta=DELTA)
    assert shuffling.EPOCH_ACCOUNTANT not in available()


def test_epoch_calibration_is_dpcalc_sigmas_path_and_verified():
    """σ for shuffle: calibrate_dpsgd with the epoch accountant (the helper behind `dpcalc sigma`); the target
    is met at σ and missed just below it."""
    from dpcalc.train.config import TrainConfig
    from dpcalc.train.privacy import SamplerSpec, calibrate_sigma, run_accountant

    spec = SamplerSpec("balls-in-bins", N_TRAIN, B)
    acc = run_accountant(TrainConfig(sampling="balls-in-bins", noise_multiplier=SIGMA), spec, B / N_TRAIN)
    assert acc.name == shuffling.EPOCH_ACCOUNTANT
    for target, steps in ((4.0, 20), (0.5, 95), (30.0, 10)):
        res = calibrate_sigma(acc, spec=spec, target_epsilon=target, delta=DELTA, sample_rate=B / N_TRAIN, steps=steps)
        cal = calibrate_dpsgd(shuffling.EpochGaussianAccountant(), target_epsilon=target, delta=DELTA,
                              sample_rate=B / N_TRAIN, steps=steps,
                              sampler={"sampling": "balls-in-bins", "batch_size": B, "dataset_size": N_TRAIN})
        sigma, epochs = res.noise_multiplier, -(-steps // T)
        assert sigma == cal.noise_multiplier and res.details["passes"] == epochs
        assert res.epsilon == shuffling.certified_upper_epsilon(noise_multiplier=sigma, epochs=epochs, delta=DELTA)
        assert res.epsilon <= target
        assert shuffling.certified_upper_epsilon(noise_multiplier=sigma * (1 - 1e-6), epochs=epochs, delta=DELTA) > target


# ---- calibration and budget on the certified number ------------------------------------------------------

def test_target_epsilon_calibrates_on_the_certified_bound(tiny_dir, tiny):
    target = 4.0
    res = train(base(tiny_dir, sampling="shuffle", noise_multiplier=None, target_epsilon=target), data=tiny)
    sigma = res.noise_multiplier
    assert res.accounting.epsilon <= target
    assert shuffling.certified_upper_epsilon(noise_multiplier=sigma * (1 - 1e-6), epochs=2, delta=DELTA) > target * (
        1 - 1e-5)
    assert res.accounting.epsilon == pytest.approx(target, rel=1e-5)
    wor = train(base(tiny_dir, sampling="without-replacement", noise_multiplier=None, target_epsilon=target),
                data=tiny)
    cal = calibrate_dpsgd(get_accountant("pld", neighboring="replace"), target_epsilon=target, delta=DELTA,
                          sample_rate=B / N_TRAIN, steps=20,
                          sampler={"sampling": "without-replacement", "batch_size": B, "dataset_size": N_TRAIN})
    assert wor.noise_multiplier == cal.noise_multiplier and wor.accounting.epsilon <= target


def test_max_epsilon_decides_on_the_certified_bound(tiny_dir, tiny):
    """ε of shuffle is flat within an epoch: a budget between the 1- and 2-epoch bounds stops after 10 steps."""
    e1 = shuffling.certified_upper_epsilon(noise_multiplier=SIGMA, epochs=1, delta=DELTA)
    e2 = shuffling.certified_upper_epsilon(noise_multiplier=SIGMA, epochs=2, delta=DELTA)
    res = train(base(tiny_dir, sampling="shuffle", epochs=3, max_epsilon=(e1 + e2) / 2), data=tiny)
    assert res.steps == T and res.accounting.epsilon == e1
    assert "would raise ε (e-fold-gaussian) to" in res.stopped


# ---- ledger, checkpoint, resume ----------------------------------------------------------------------------

def test_ledger_records_the_sampler_and_poisson_ledgers_keep_their_form(tiny_dir, tiny, tmp_path):
    train(base(tiny_dir, sampling="truncated-poisson", max_batch_size=70, epochs=1, checkpoint=str(tmp_path / "a")),
          data=tiny)
    raw = json.loads((tmp_path / "a" / ckpt.LEDGER_NAME).read_text())
    assert (raw["sampling"], raw["batch_size"], raw["max_batch_size"]) == ("truncated-poisson", B, 70)
    assert ckpt.load_checkpoint(tmp_path / "a")["ledger"]["sampling"] == "truncated-poisson"
    train(base(tiny_dir, epochs=1, checkpoint=str(tmp_path / "p")), data=tiny)
    raw = json.loads((tmp_path / "p" / ckpt.LEDGER_NAME).read_text())
    assert "sampling" not in raw and "batch_size" not in raw


@pytest.mark.parametrize("sampler", ["without-replacement", "shuffle"])
def test_resume_with_the_sampler_reproduces_the_uninterrupted_run(tiny_dir, tiny, tmp_path, sampler):
    ref = train(base(tiny_dir, sampling=sampler, epochs=3), data=tiny)
    run = str(tmp_path / "run")
    first = train(base(tiny_dir, sampling=sampler, epochs=1, checkpoint=run), data=tiny)
    assert first.steps == T
    res = train(base(tiny_dir, sampling=sampler, epochs=3, checkpoint=run, resume=True), data=tiny)
    for n, p in params_of(ref.model).items():
        torch.testing.assert_close(params_of(res.model)[n], p, rtol=0, atol=0)
    assert (res.steps, res.orphaned_steps) == (30, 0)
    assert res.accounting.epsilon == ref.accounting.epsilon


class Killed(Exception):
    pass


def kill_at(step):
    def on_step(s):
        if s == step:
            raise Killed(s)
    return on_step


def test_shuffle_orphaned_steps_count_as_a_whole_pass_each(tiny_dir, tiny, tmp_path):
    """Killed at step 15 (checkpoint at 10): 5 orphaned steps in the second epoch touch one pass;
    resumed (ledger 15) and killed again at ledger step 28 (checkpoint at model step 20, ledger 25):
    3 orphaned steps in the third epoch, a second pass. ε counts 3 + 2 passes; the model is the
    uninterrupted run's."""
    cfg = dict(sampling="shuffle", epochs=3)
    ref = train(base(tiny_dir, **cfg), data=tiny)
    run = str(tmp_path / "run")
    with pytest.raises(Killed):
        train(base(tiny_dir, checkpoint=run, **cfg), data=tiny, on_step=kill_at(15))
    with pytest.raises(Killed):
        train(base(tiny_dir, checkpoint=run, resume=True, **cfg), data=tiny, on_step=kill_at(28))
    assert ckpt.read_ledger(run).orphaned_passes == 1
    res = train(base(tiny_dir, checkpoint=run, resume=True, **cfg), data=tiny)
    for n, p in params_of(ref.model).items():
        torch.testing.assert_close(params_of(res.model)[n], p, rtol=0, atol=0)
    assert res.orphaned_steps == 5 + 3 and res.steps == 30 + 8
    assert res.to_json()["details"]["passes"] == 5
    assert res.accounting.epsilon == shuffling.certified_upper_epsilon(noise_multiplier=SIGMA, epochs=5, delta=DELTA)


@pytest.mark.parametrize(("first", "second", "word"), [
    ({"sampling": "without-replacement"}, {"sampling": "shuffle"}, "sampling"),
    ({}, {"sampling": "without-replacement"}, "sampling"),
    ({"sampling": "truncated-poisson", "max_batch_size": 70}, {"sampling": "truncated-poisson", "max_batch_size": 80},
     "max_batch_size"),
])
def test_resume_with_another_sampler_is_refused(tiny_dir, tiny, tmp_path, first, second, word):
    run = str(tmp_path / "run")
    train(base(tiny_dir, epochs=1, checkpoint=run, **first), data=tiny)
    with pytest.raises(ParameterError, match=word):
        train(base(tiny_dir, epochs=2, checkpoint=run, resume=True, **second), data=tiny)


@settings(max_examples=200, deadline=None)
@given(start=st.integers(0, 60), count=st.integers(-2, 40), t=st.integers(1, 12))
def test_touched_passes_counts_the_epochs_a_segment_meets(start, count, t):
    brute = len({k // t for k in range(start, start + count)})
    assert touched_passes(start, count, t) == brute


# ---- bad combinations: one line, exit 2 --------------------------------------------------------------------

@pytest.mark.parametrize(("args", "message"), [
    (["--sampling", "truncated-poisson"], "Error: --sampling truncated-poisson needs --max-batch-size"),
    (["--sampling", "shuffle", "--max-batch-size", "70"], "Error: --max-batch-size applies to --sampling "
                                                          "truncated-poisson only, not --sampling shuffle"),
    (["--sampling", "truncated-poisson", "--max-batch-size", "70", "--accountant", "zcdp"],
     "Error: --accountant zcdp cannot account for --sampling truncated-poisson"),
    (["--sampling", "without-replacement", "--accountant", "zcdp"],
     "Error: --accountant zcdp cannot account for --sampling without-replacement (replace adjacency)"),
    (["--sampling", "balls-in-bins", "--accountant", "rdp"],
     "Error: --accountant does not apply to --sampling balls-in-bins"),
    (["--sampling", "shuffle", "--ledger", "L.json", "--ledger-dataset", "x"],
     "Error: no ledger at "),  # the sampler's refusal on a dataset: tests/ledger/test_ledger_samplers.py
    (["--sampling", "with-replacement", "--accountant", "zcdp"],
     "Error: --accountant zcdp cannot account for --sampling with-replacement (add-remove adjacency)"),
    (["--sampling", "uniform"], "Error: Invalid value for '--sampling'"),
    (["--sampling", "with-replacement", "--neighboring", "replace"],
     "Error: --sampling with-replacement under replace adjacency: fixed-size sampling with replacement is "
     "accounted under add/remove adjacency only"),
    (["--sampling", "truncated-poisson", "--max-batch-size", "70", "--neighboring", "replace"],
     "Error: --sampling truncated-poisson under replace adjacency"),
    (["--neighboring", "replace"], "Error: --neighboring applies to --sampling without-replacement, "
                                   "with-replacement, truncated-poisson only, not --sampling poisson"),
    (["--sampling", "shuffle", "--neighboring", "add-remove"], "Error: --neighboring applies to"),
])
def test_bad_combinations_are_one_line(tiny_dir, tmp_path, run_cli, args, message):
    args = [str(tmp_path / a) if a == "L.json" else a for a in args]
    r = run_cli("train", "--data-dir", tiny_dir, "--model", "logistic", "--epochs", "1", "--batch-size", "60",
                "--noise-multiplier", "1", "--delta", "1e-4", "--quiet", *args)
    assert r.exit_code == 2
    assert r.stderr.startswith(message), r.stderr
    assert r.stderr.strip().count("\n") == 0 or message.startswith("Error: Invalid value")
    assert not (tmp_path / "L.json").exists()


def test_cli_prints_the_adjacency_given(tiny_dir, run_cli):
    r = run_cli("train", "--data-dir", tiny_dir, "--model", "logistic", "--epochs", "1", "--batch-size", "60",
                "--noise-multiplier", "1", "--delta", "1e-4", "--threads", "1", "--quiet",
                "--sampling", "without-replacement", "--neighboring", "add-remove")
    assert r.exit_code == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert "sampling=without-replacement, neighboring=add-remove" in text
    assert "accounted under add/remove adjacency (Birrell, Ebrahimi, Behnia, Pacheco 2024 Thm 3.1/3.3)" in text
    assert "--sampling without-replacement --neighboring add-remove --accountant pld" in text


def test_cli_table_names_the_sampler_and_its_bracket(tiny_dir, run_cli):
    r = run_cli("train", "--data-dir", tiny_dir, "--model", "logistic", "--epochs", "2", "--batch-size", "60",
                "--noise-multiplier", "1", "--delta", "1e-4", "--max-grad-norm", "1", "--seed", "3", "--threads", "1",
                "--quiet", "--sampling", "shuffle")
    assert r.exit_code == 0, r.stderr
    assert "sampler" in r.stdout and "shuffle" in r.stdout and "ε if Poisson" in r.stdout
    assert "Sampler: shuffle" in r.stdout and "Lower bound" in r.stdout and "never an ε" in r.stdout
    assert "Assumes Poisson sampling" not in r.stdout
    j = run_cli("train", "--data-dir", tiny_dir, "--model", "logistic", "--epochs", "2", "--batch-size", "60",
                "--noise-multiplier", "1", "--delta", "1e-4", "--max-grad-norm", "1", "--seed", "3", "--threads", "1",
                "--quiet", "--sampling", "shuffle", "--json").json()
    res = j["results"][0]
    assert j["inputs"]["sampling"] == "shuffle"
    assert res["epsilon"] == shuffling.certified_upper_epsilon(noise_multiplier=1.0, epochs=2, delta=1e-4)
    from dpcalc.cli.render import fmt

    assert f"[{fmt(res['details']['epsilon_lower'], 5)}, {fmt(res['epsilon'], 5)}]" in r.stdout


# ---- several processes: the same global batch, split across the ranks --------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("sampler", ["shuffle", "with-replacement"])
def test_two_processes_shuffle_equal_one_process(tiny_dir, tiny, tmp_path, sampler):
    """torchrun, 2 ranks, --sampling shuffle / with-replacement: every rank draws the same global batch
    (seeded by (seed, epoch) / (seed, step); with replacement, duplicates included) and keeps its shard, so
    the run is the one-process run: same steps and ε, the same weights up to float round-off (the ranks sum
    the clipped gradients in another order)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    ref = train(base(tiny_dir, sampling=sampler), data=tiny)
    flags = ["--model", "logistic", "--epochs", "2", "--batch-size", str(B), "--lr", "0.5", "--optimizer", "momentum",
             "--max-grad-norm", "1.0", "--noise-multiplier", str(SIGMA), "--delta", str(DELTA), "--threads", "1",
             "--seed", "3", "--sampling", sampler, "--save-model", str(tmp_path / "m.pt")]
    env = {**os.environ, "PYTHONPATH": str(repo) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "dpcalc",
           "train", "--data-dir", str(tiny_dir), "--json", "--quiet", *flags]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)["results"][0]
    assert res["steps"] == ref.steps and res["epsilon"] == ref.accounting.epsilon
    assert res["details"]["sampling"] == sampler
    state = torch.load(tmp_path / "m.pt", weights_only=True)
    for k, p in ref.model.state_dict().items():
        torch.testing.assert_close(state[k], p, rtol=1e-5, atol=1e-6)
