"""issue 17 (start-up time): pld calibration from the CLT's first guess with secant steps on the
fixed-grid stand-in — few certified evaluations, the same or a smaller σ than bracket + Brent,
and the verification with the default accountant unchanged.

The quick start of the README: q = 256/60000, T = 14,063, δ = 1e-5, ε = 3 (Opacus MNIST).
"""

from __future__ import annotations

import math
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpcalc.accounting import calibrate as cal
from dpcalc.accounting.calibrate import calibrate_dpsgd, clt_log_slope, clt_noise_multiplier
from dpcalc.accounting.pld import PldAccountant, _FixedGridPld
from dpcalc.accounting.rdp import RdpAccountant
from dpcalc.events import GaussianEvent, LaplaceEvent, SelfComposedEvent, dpsgd_event
from dpcalc.mechanisms.gaussian import analytic_noise_std

Q, STEPS, DELTA, TARGET = 256 / 60000, 14_063, 1e-5, 3.0
#: the σ this calibration returned before the change (bracket + Brent after an rdp and a coarse
#: pld search; 7 certified evaluations): the README quick start prints it as 0.9686005
SIGMA_BEFORE = 0.96860047


def _counting(monkeypatch, certified: list | None = None) -> Counter:
    """Counts each accountant's ε evaluations; ``certified`` (if given) collects (σ, ε) of the
    PldAccountant ones, in order."""
    calls: Counter = Counter()
    for cls in (PldAccountant, _FixedGridPld, RdpAccountant):
        original = cls.__dict__["epsilon"]

        def counting(self, event, *, delta, _original=original, _cls=cls):
            if type(self).__dict__.get("epsilon") is None or type(self) is _cls:
                calls[type(self).__name__] += 1
            res = _original(self, event, delta=delta)
            if certified is not None and type(self) is PldAccountant:
                certified.append((event.event.event.noise_multiplier, res.epsilon))
            return res

        monkeypatch.setattr(cls, "epsilon", counting)
    probe = PldAccountant.calibration_probe

    def probing(self, event, *, delta):
        calls["probe"] += 1
        return probe(self, event, delta=delta)

    monkeypatch.setattr(PldAccountant, "calibration_probe", probing)
    return calls


def test_quick_start_needs_two_certified_evaluations_and_few_fixed_grid_ones(monkeypatch):
    certified: list[tuple[float, float]] = []
    calls = _counting(monkeypatch, certified)
    r = calibrate_dpsgd(PldAccountant(), target_epsilon=TARGET, delta=DELTA, sample_rate=Q, steps=STEPS)
    # before: 6 rdp + 4 coarse evaluations for the guess, 2 certified and 5 fixed-grid ones
    assert calls["RdpAccountant"] == 0
    assert calls["_CoarsePld"] <= 1
    # the secant's points, then the σ it settled on and — only when the stand-in's noise put that
    # σ a hair short (ε above the target by < 1e-8 relative; numpy 2.4's FFT: ε(0.96860045) =
    # 3.0000000049) — the next points of the 8-digit lattice, at most 3, all on the stand-in
    assert calls["_FixedGridPld"] <= 4 + 3
    # the first guess's grid (a probe: epsilon() without its last round's lower bound) and the
    # certificate: the stand-in already checked that σ on the grid the accountant settles on
    # there (its ε is never above the stand-in's on the same grid)
    assert calls["probe"] == 1
    assert calls["PldAccountant"] == len(certified) == 1
    assert certified[-1] == (r.noise_multiplier, r.epsilon)
    monkeypatch.undo()
    # the σ is the same or smaller, and still certified by the accountant a user calls
    assert r.noise_multiplier <= SIGMA_BEFORE
    again = PldAccountant().epsilon(dpsgd_event(noise_multiplier=r.noise_multiplier, sample_rate=Q, steps=STEPS),
                                    delta=DELTA)
    assert again.epsilon == r.epsilon <= TARGET
    # and minimal to rtol = 1e-6 on the grid searched
    stand_in = PldAccountant().calibration_search(again)[1]
    below = stand_in.epsilon(dpsgd_event(noise_multiplier=r.noise_multiplier * (1 - 1e-6), sample_rate=Q,
                                         steps=STEPS), delta=DELTA)
    assert below.epsilon > TARGET


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(q=st.floats(2e-3, 0.05), steps=st.integers(100, 5000), target=st.floats(0.5, 6.0))
def test_secant_sigma_never_above_the_bracket_and_brent_sigma(q, steps, target):
    # the secant search and the bracket + Brent search it replaces find the root of the same
    # stand-in; the secant's σ is the lattice point just above it (Brent's within rtol/4 above)
    new = calibrate_dpsgd(PldAccountant(), target_epsilon=target, delta=DELTA, sample_rate=q, steps=steps)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(cal, "_secant_calibration", lambda *a, **k: None)
        old = calibrate_dpsgd(PldAccountant(), target_epsilon=target, delta=DELTA, sample_rate=q, steps=steps)
    assert new.noise_multiplier <= old.noise_multiplier * (1 + 1e-12)
    assert new.noise_multiplier >= old.noise_multiplier * (1 - 2e-6)
    fresh = PldAccountant().epsilon(dpsgd_event(noise_multiplier=new.noise_multiplier, sample_rate=q, steps=steps),
                                    delta=DELTA)
    assert fresh.epsilon == new.epsilon <= target


def test_clt_guess_is_exact_for_the_unsampled_gaussian():
    # T-fold Gaussian with noise multiplier σ is exactly (√T/σ)-GDP (Dong, Roth, Su 2019 Cor 3.3), and
    # μ-GDP meets (ε, δ) iff 1/μ ≥ the analytic-Gaussian noise at sensitivity 1 (Balle & Wang 2018 Thm 8)
    steps, eps, delta = 100, 1.0, 1e-5
    sigma = clt_noise_multiplier(target_epsilon=eps, delta=delta,
                                 make_event=lambda s: SelfComposedEvent(GaussianEvent(s), steps))
    assert sigma == pytest.approx(math.sqrt(steps) * analytic_noise_std(epsilon=eps, delta=delta), rel=1e-6)


def test_clt_slope_matches_the_closed_form_derivative():
    # ε(μ) of μ-GDP at fixed δ: implicit differentiation of δ = Φ(a) − e^ε Φ(b), a = μ/2 − ε/μ,
    # b = −μ/2 − ε/μ (Balle & Wang 2018 Thm 8) gives dε/dμ = φ(a) / (e^ε Φ(b)); with μ = √T/σ,
    # d ln ε / d ln σ = −(μ/ε)·dε/dμ.
    from dpcalc.mechanisms.gaussian import gaussian_epsilon

    steps, sigma, delta = 100, 20.0, 1e-5
    mu = math.sqrt(steps) / sigma
    eps = gaussian_epsilon(delta=delta, mu=mu)
    a, b = mu / 2 - eps / mu, -mu / 2 - eps / mu
    phi_a = math.exp(-a * a / 2) / math.sqrt(2 * math.pi)
    big_phi_b = 0.5 * math.erfc(-b / math.sqrt(2))
    expected = -(mu / eps) * phi_a / (math.exp(eps) * big_phi_b)
    got = clt_log_slope(sigma, delta=delta, make_event=lambda s: SelfComposedEvent(GaussianEvent(s), steps))
    assert got == pytest.approx(expected, rel=1e-5)


def test_clt_helpers_decline_histories_outside_the_clt():
    laplace = lambda s: SelfComposedEvent(LaplaceEvent(s), 10)  # noqa: E731
    assert clt_noise_multiplier(target_epsilon=1.0, delta=1e-5, make_event=laplace) is None
    assert clt_log_slope(1.0, delta=1e-5, make_event=laplace) is None
    sampled = lambda s: dpsgd_event(noise_multiplier=s, sample_rate=0.01, steps=100)  # noqa: E731
    # the CLT formula for Poisson sampling assumes add/remove adjacency
    assert clt_noise_multiplier(target_epsilon=1.0, delta=1e-5, make_event=sampled, neighboring="replace") is None
    assert clt_noise_multiplier(target_epsilon=1.0, delta=1e-5, make_event=sampled) is not None
