"""Independent high-precision references for the privacy audit (and tests of the references).

Nothing here imports dpcalc: every function is evaluated from first principles with
mpmath so that the audit tests (``tests/test_audit_*.py``) compare dpcalc against
numbers that share no code with it.

References and their sources
----------------------------
* μ-GDP / unsampled Gaussian curve (Balle & Wang 2018 Thm 8; Dong, Roth, Su 2019
  Cor 2.13): δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2).
* Poisson-sampled Gaussian, one step, add/remove (Mironov, Talwar, Zhang 2019 §3.3):
  "remove" P = (1−q)N(0,σ²) + qN(1,σ²) vs Q = N(0,σ²); "add" P = N(0,σ²) vs Q = the
  mixture. The privacy loss is monotone in x, so the hockey-stick divergence
  ∫(p − e^ε q)₊ is a closed form in Φ at the crossing point (derived in the docstrings
  below) — exact, no quadrature.
* Two steps: δ₂(ε) = E_{x∼P}[δ₁(ε − L(x))] (Fubini on ∫∫(p(x)p(y) − e^ε q(x)q(y))₊,
  with L = ln p/q), where δ₁ is the one-step curve extended to negative ε
  (δ₁(ε') = 1 − e^{ε'} when every outcome has loss ≥ ε'). One mpmath quadrature of
  a closed form.
* Replace-one sampled Gaussian pair (1−q)N(0)+qN(1) vs (1−q)N(0)+qN(−1): mpmath
  quadrature of (p − e^ε q)₊ split at the (unique) crossing point, found by
  mpmath.findroot (the loss ratio is increasing in x).
* Pure ε₀-DP T-fold optimal composition (Kairouz, Oh, Viswanath 2015 Thm 3.3):
  δ(ε) = (1+e^{ε₀})^{−T} Σ_l C(T,l) (e^{(T−l)ε₀} − e^ε e^{lε₀})₊.
* Laplace (scale b, sensitivity s): loss ∈ [−s/b, s/b]; one step
  δ₁(ε) = 1 − e^{(ε − s/b)/2} on [−s/b, s/b] (1 − e^ε below, 0 above); two steps by
  the same Fubini recursion with one mpmath quadrature.
"""

from __future__ import annotations

import mpmath
import pytest

mp = mpmath.mp
DPS = 40


def _ncdf(x):
    return mpmath.ncdf(x)


def _nsf(x):
    return mpmath.ncdf(-x)


# ----------------------------------------------------------------------------- Gaussian / GDP
def gdp_delta(mu, eps) -> float:
    """Exact δ(ε) of μ-GDP (Dong, Roth, Su 2019 Cor 2.13), 40 digits, returned as float."""
    with mpmath.workdps(DPS):
        return float(gdp_delta_mp(mu, eps))


def gdp_delta_mp(mu, eps):
    m, e = mpmath.mpf(mu), mpmath.mpf(eps)
    return _ncdf(-e / m + m / 2) - mpmath.exp(e) * _ncdf(-e / m - m / 2)


def gdp_epsilon(mu, delta) -> float:
    """ε at δ for μ-GDP by mpmath bisection (exact to ~1e-12 relative)."""
    with mpmath.workdps(DPS):
        d = mpmath.mpf(delta)
        if gdp_delta_mp(mu, 0) <= d:
            return 0.0
        lo, hi = mpmath.mpf(0), mpmath.mpf(1)
        while gdp_delta_mp(mu, hi) > d:
            lo, hi = hi, 2 * hi
        for _ in range(120):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if gdp_delta_mp(mu, mid) > d else (lo, mid)
        return float(hi)


# ----------------------------------------------------------------------------- sampled Gaussian
def sg_delta1_mp(q, sigma, eps, direction):
    r"""Exact hockey-stick ∫(p − e^ε q)₊ for ONE step of the Poisson-sampled Gaussian
    (add/remove), any real ε (negative allowed: needed by the two-step recursion).

    remove: P = (1−q)N(0,σ²)+qN(1,σ²), Q = N(0,σ²). p/q = 1−q+q·e^{(2x−1)/(2σ²)} is increasing;
    p > e^ε q iff x > x* = σ² ln((e^ε−(1−q))/q) + ½ (all x when e^ε ≤ 1−q). Then
    δ = (1−q)Φ̄(x*/σ) + qΦ̄((x*−1)/σ) − e^ε Φ̄(x*/σ).

    add: P = N(0,σ²), Q = mixture. p > e^ε q iff e^{(2x−1)/(2σ²)} < (e^{−ε}−(1−q))/q, i.e.
    x < x' = σ² ln((e^{−ε}−(1−q))/q) + ½ (no x when e^{−ε} ≤ 1−q). Then
    δ = Φ(x'/σ) − e^ε[(1−q)Φ(x'/σ) + qΦ((x'−1)/σ)].
    """
    q, s, e = mpmath.mpf(q), mpmath.mpf(sigma), mpmath.mpf(eps)
    ee = mpmath.exp(e)
    if direction == "remove":
        if q == 1:
            xs = s * s * e + mpmath.mpf(1) / 2
        elif ee <= 1 - q:
            return 1 - ee
        else:
            xs = s * s * mpmath.log((ee - (1 - q)) / q) + mpmath.mpf(1) / 2
        return (1 - q) * _nsf(xs / s) + q * _nsf((xs - 1) / s) - ee * _nsf(xs / s)
    if direction == "add":
        em = mpmath.exp(-e)
        if em <= 1 - q:
            return mpmath.mpf(0)
        xp = s * s * mpmath.log((em - (1 - q)) / q) + mpmath.mpf(1) / 2
        return _ncdf(xp / s) - ee * ((1 - q) * _ncdf(xp / s) + q * _ncdf((xp - 1) / s))
    raise ValueError(direction)


def sg_delta1(q, sigma, eps) -> float:
    """Exact one-step δ(ε) of the Poisson-sampled Gaussian, max over both orderings."""
    with mpmath.workdps(DPS):
        return float(max(sg_delta1_mp(q, sigma, eps, "remove"), sg_delta1_mp(q, sigma, eps, "add")))


def sg_delta2(q, sigma, eps, dps: int = 20, step: float = 1.0, method: str = "gauss-legendre") -> float:
    r"""Exact two-step δ(ε) of the Poisson-sampled Gaussian, max over both orderings:
    δ₂(ε) = E_{x∼P}[δ₁(ε − L(x))], one mpmath quadrature per ordering.

    The integrand is smooth except where ε − L(x) crosses the edge of the one-step curve
    (ε' = ln(1−q) for "remove", ε' = −ln(1−q) for "add"); that x is a breakpoint, as are
    points every ``step``·σ over ±12σ around the two mixture centres. Relative accuracy
    ≤ 1e-11 (checked against a denser tanh-sinh splitting at higher precision in the
    self-tests).
    """
    with mpmath.workdps(dps):
        q, s, e = mpmath.mpf(q), mpmath.mpf(sigma), mpmath.mpf(eps)
        out = []
        for d in ("remove", "add"):
            def loss(x, d=d):
                r = mpmath.log(1 - q + q * mpmath.exp((2 * x - 1) / (2 * s * s)))
                return r if d == "remove" else -r

            def pdf(x, d=d):
                phi0 = mpmath.npdf(x, 0, s)
                if d == "remove":
                    return (1 - q) * phi0 + q * mpmath.npdf(x, 1, s)
                return phi0

            def integrand(x, d=d, pdf=pdf, loss=loss):
                return pdf(x) * sg_delta1_mp(q, s, e - loss(x), d)

            n = int(round(12 / step))
            pts = {mpmath.mpf(k) * s * step + c for k in range(-n, n + 1) for c in (0, 1)}
            if q < 1:
                edge = mpmath.log(1 - q)
                # x with L(x) = ε − edge (remove) or L(x) = ε + edge (add), if it exists
                c = e - edge if d == "remove" else e + edge
                arg = (mpmath.exp(c) - (1 - q)) / q if d == "remove" else (mpmath.exp(-c) - (1 - q)) / q
                if arg > 0:
                    pts.add(s * s * mpmath.log(arg) + mpmath.mpf(1) / 2)
            pts = [-mpmath.inf] + sorted(pts) + [mpmath.inf]
            out.append(mpmath.quad(integrand, pts, method=method))
        return float(max(out))


def sg_replace_delta1(q, sigma, eps, dps: int = 30) -> float:
    r"""Exact one-step δ(ε) of the replace-one pair P = (1−q)N(0,σ²)+qN(1,σ²),
    Q = (1−q)N(0,σ²)+qN(−1,σ²) (symmetric, so one ordering suffices), by quadrature of
    (p − e^ε q)₊ over x > x*, where x* is the unique root of ln p/q = ε."""
    with mpmath.workdps(dps):
        q, s, e = mpmath.mpf(q), mpmath.mpf(sigma), mpmath.mpf(eps)

        def p(x):
            return (1 - q) * mpmath.npdf(x, 0, s) + q * mpmath.npdf(x, 1, s)

        def qq(x):
            return (1 - q) * mpmath.npdf(x, 0, s) + q * mpmath.npdf(x, -1, s)

        def lossm(x):
            # ln p − ln q with the common factor exp(−x²/(2σ²)) removed (no underflow)
            a = mpmath.log((1 - q) + q * mpmath.exp((2 * x - 1) / (2 * s * s)))
            b = mpmath.log((1 - q) + q * mpmath.exp((-2 * x - 1) / (2 * s * s)))
            return a - b - e

        # the loss is increasing: bracket the root
        lo, hi = mpmath.mpf(-1), mpmath.mpf(1)
        while lossm(hi) < 0:
            hi *= 2
            if hi > 1e6:
                return 0.0
        while lossm(lo) > 0:
            lo *= 2
        for _ in range(200):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if lossm(mid) < 0 else (lo, mid)
        xs = hi
        # ∫_{x*}^∞ p − e^ε q in closed form (mixtures of normals)
        ee = mpmath.exp(e)
        tp = (1 - q) * _nsf(xs / s) + q * _nsf((xs - 1) / s)
        tq = (1 - q) * _nsf(xs / s) + q * _nsf((xs + 1) / s)
        return float(tp - ee * tq)


# ----------------------------------------------------------------------------- pure DP (KOV)
def kov_delta(eps0, count: int, eps) -> float:
    """Exact optimal δ(ε) of the T-fold composition of (ε₀, 0)-DP mechanisms
    (Kairouz, Oh, Viswanath 2015 Thm 3.3), 50 digits."""
    with mpmath.workdps(50):
        e0, e = mpmath.mpf(eps0), mpmath.mpf(eps)
        tot = mpmath.mpf(0)
        for lv in range(count + 1):
            term = mpmath.exp((count - lv) * e0) - mpmath.exp(e + lv * e0)
            if term > 0:
                tot += mpmath.binomial(count, lv) * term
        return float(tot / (1 + mpmath.exp(e0)) ** count)


# ----------------------------------------------------------------------------- Laplace
def laplace_delta1_mp(r, eps):
    """One-step Laplace curve, loss bound r = s/b, real ε: 1 − e^{(ε−r)/2} on [−r, r]."""
    r, e = mpmath.mpf(r), mpmath.mpf(eps)
    if e >= r:
        return mpmath.mpf(0)
    if e <= -r:
        return 1 - mpmath.exp(e)
    return 1 - mpmath.exp((e - r) / 2)


def laplace_delta(r, count: int, eps) -> float:
    r"""Exact δ(ε) of the T-fold Laplace mechanism with loss bound r = sensitivity/scale,
    T ∈ {1, 2}. Loss under P = Lap(0, 1) vs Lap(r, 1) (scale-free): L(x) = |x − r| − |x|,
    = r for x ≤ 0 (mass ½), −r for x ≥ r (mass ½e^{−r}), r − 2x in between."""
    if count == 1:
        with mpmath.workdps(DPS):
            return float(laplace_delta1_mp(r, eps))
    if count != 2:
        raise ValueError("count must be 1 or 2")
    with mpmath.workdps(DPS):
        rr, e = mpmath.mpf(r), mpmath.mpf(eps)
        atoms = mpmath.mpf(1) / 2 * laplace_delta1_mp(rr, e - rr) \
            + mpmath.exp(-rr) / 2 * laplace_delta1_mp(rr, e + rr)
        mid = mpmath.quad(lambda x: mpmath.exp(-x) / 2 * laplace_delta1_mp(rr, e - (rr - 2 * x)),
                          [0, (rr + e) / 2 if 0 < (rr + e) / 2 < rr else rr / 2, rr])
        return float(atoms + mid)


# ----------------------------------------------------------------------------- self-tests
def test_gdp_reference_matches_published():
    # docs/references.md: σ = 10, T = 100 ⇒ μ = 1, δ = 1e-5 ⇒ ε = 4.37718 (closed form)
    assert abs(gdp_epsilon(1.0, 1e-5) - 4.37718) < 1e-5


def test_sampled_gaussian_q1_is_gaussian():
    # q = 1: the sampled pair is the Gaussian pair with μ = 1/σ
    for eps in (0.0, 0.3, 2.0):
        assert abs(sg_delta1(1.0, 1.3, eps) - gdp_delta(1 / 1.3, eps)) < 1e-14


def test_sampled_gaussian_closed_form_matches_quadrature():
    # independent check of the closed form: direct quadrature of (p − e^ε q)₊
    q, s, eps = 0.3, 0.9, 0.4
    with mpmath.workdps(30):
        for d in ("remove", "add"):
            def f(x, d=d):
                mix = (1 - q) * mpmath.npdf(x, 0, s) + q * mpmath.npdf(x, 1, s)
                nor = mpmath.npdf(x, 0, s)
                p, qq = (mix, nor) if d == "remove" else (nor, mix)
                return max(p - mpmath.exp(eps) * qq, 0)
            # split at the crossing point (found numerically from the densities) so the kink of
            # (·)₊ is a breakpoint
            def g(x, d=d):
                return (mpmath.log((1 - q) * mpmath.npdf(x, 0, s) + q * mpmath.npdf(x, 1, s))
                        - mpmath.log(mpmath.npdf(x, 0, s)) - (eps if d == "remove" else -eps))
            lo, hi = mpmath.mpf(-30), mpmath.mpf(30)
            xc = mpmath.mpf(0)
            if g(lo) < 0 < g(hi):
                for _ in range(150):
                    mid = (lo + hi) / 2
                    lo, hi = (mid, hi) if g(mid) < 0 else (lo, mid)
                xc = hi
            quad = mpmath.quad(f, sorted([-mpmath.inf, -3, -1, 0, 0.5, 1, 2, 3, 5, xc, mpmath.inf]))
            assert abs(quad - sg_delta1_mp(q, s, eps, d)) < 1e-8


@pytest.mark.slow  # mpmath quadrature of a two-step reference: ~12 s
def test_two_step_reference_is_stable():
    # the case where a coarser quadrature was off by 2e-5 relative (σ = 0.5, tiny q)
    q, s, eps = 0.004090177462029146, 0.5044819849711937, 3.59525968023776
    a = sg_delta2(q, s, eps)
    b = sg_delta2(q, s, eps, dps=30, step=0.5, method="tanh-sinh")
    assert abs(a - b) <= 1e-10 * b


def test_two_step_recursion_q1_matches_gdp():
    # q = 1, T = 2: μ = √2/σ
    for eps in (0.2, 1.0):
        assert abs(sg_delta2(1.0, 1.5, eps) - gdp_delta(2 ** 0.5 / 1.5, eps)) < 1e-12


def test_replace_reference_q1_is_gaussian_sensitivity_2():
    for eps in (0.1, 1.0):
        assert abs(sg_replace_delta1(1.0, 2.0, eps) - gdp_delta(1.0, eps)) < 1e-14


def test_kov_reference_one_step():
    # one (ε₀,0)-DP step is randomized response: δ(ε) = (e^{ε₀} − e^ε)/(1 + e^{ε₀})
    import math
    assert abs(kov_delta(1.0, 1, 0.4) - (math.e - math.exp(0.4)) / (1 + math.e)) < 1e-15


@pytest.mark.slow
def test_laplace_two_step_reference_by_brute_force():
    # T = 2 via a fine 2-D Riemann sum of (p1 p2 − e^ε q1 q2)₊ would be slow; instead check
    # the ε = 2r end (δ = 0) and ε → −∞ behaviour and continuity against T = 1 at r → 0
    assert laplace_delta(0.5, 2, 1.0) == 0.0
    assert laplace_delta(0.5, 2, 0.99) > 0.0
    # the ε = 0 value equals TV of the product Laplace pair, computed by quadrature
    r = 0.7
    with mpmath.workdps(30):
        def lap(x, m):
            return mpmath.exp(-abs(x - m)) / 2
        def inner(x):
            lx = abs(x - r) - abs(x)  # loss of x; p(y)/q(y) > e^{-lx} iff r - 2y > -lx
            pts = [-mpmath.inf, 0, r, mpmath.inf]
            yc = (r + lx) / 2
            if 0 < yc < r:
                pts.insert(2, yc)
            return mpmath.quad(lambda y: max(lap(x, 0) * lap(y, 0) - lap(x, r) * lap(y, r), 0), pts)
        tv = mpmath.quad(inner, [-mpmath.inf, 0, r, mpmath.inf])
    assert abs(laplace_delta(r, 2, 0.0) - float(tv)) < 1e-8
