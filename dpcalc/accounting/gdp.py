r"""Gaussian differential privacy (GDP) accountant with the central limit theorem.

Dong, Roth, Su 2019 ("Gaussian differential privacy", Thm 3.5 / Cor 5.4) and Bu,
Dong, Long, Su 2020 ("Deep learning with Gaussian differential privacy", eq. (6)):
T steps of the Poisson-sampled Gaussian mechanism (rate q, noise multiplier σ) are
approximately μ-GDP with

    μ = q·√(T·(e^{1/σ²} − 1)),

and μ-GDP is (ε, δ(ε))-DP with δ(ε) = Φ(−ε/μ + μ/2) − e^ε·Φ(−ε/μ − μ/2)
(DRS 2019 Cor 2.13). The CLT is a limit, not a bound: it **may under-report ε**
(e.g. q = 5e-3, σ = 0.8, T = 1000: GDP 1.32 against PRV ≥ 1.90), so results are
``certified: false`` — except when every step is an unsampled Gaussian, where
T-fold composition is exactly μ-GDP with μ = √(Σ T_i/σ_i²) (DRS 2019 Cor 3.3) and
the result is exact (``certified: true``, ``details.exact``). Compositions of
several segments add μ² (DRS 2019 Cor 3.3 / the CLT's variance).
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from dpcalc import _validate as v
from dpcalc._numerics import round_up
from dpcalc.accounting._sampling import refuse_sampler
from dpcalc.accounting.additive import AdditiveAccountant
from dpcalc.accounting.tuning import refuse_tuning
from dpcalc.errors import UnsupportedEventError
from dpcalc.events import (
    Event,
    ExponentialMechanismEvent,
    GaussianEvent,
    PoissonSampledEvent,
    flatten,
)
from dpcalc.mechanisms.gaussian import gaussian_delta, gaussian_epsilon
from dpcalc.results import AccountingResult

__all__ = ["GdpAccountant", "gdp_mu", "gdp_epsilon_many", "gdp_delta_many"]

#: round-up budget of the μ-GDP read-outs, in unit round-offs: 4504u ≈ 1.0001e-12 relative,
#: far above the few-ulp error of the bisection end point and of exp(ln δ)
_MARGIN_ULPS = 4504.0


def _segments(event: Event):
    """(sample_rate, noise_multiplier, count) for each Gaussian step of the history."""
    for step, count in flatten(event):
        if isinstance(step, GaussianEvent):
            yield 1.0, step.noise_multiplier, count
        elif isinstance(step, PoissonSampledEvent) and isinstance(step.event, GaussianEvent):
            yield step.sample_rate, step.event.noise_multiplier, count
        elif isinstance(step, ExponentialMechanismEvent):
            raise UnsupportedEventError(
                "the GDP/CLT accountant handles (Poisson-sampled) Gaussian mechanisms only: for an exponential "
                "(ε-bounded-range) mechanism a CLT μ would be an uncertified approximation; see br, pld, rdp, zcdp")
        else:
            refuse_tuning(step, GdpAccountant.name)
            refuse_sampler(step, GdpAccountant.name)
            raise UnsupportedEventError(
                f"the GDP/CLT accountant handles (Poisson-sampled) Gaussian mechanisms only, not {type(step).__name__}")


def gdp_mu(event: Event, *, neighboring: str = "add-remove") -> tuple[float, bool]:
    """μ of the (CLT-approximate) GDP guarantee of ``event`` and whether it is exact.

    Returns:
        (μ, exact): μ = √(Σ μ_i²) with μ_i = q√(T(e^{1/σ²} − 1)) for sampled segments
        (Bu et al. 2020 eq. (6), approximate) and μ_i = √T/σ for unsampled ones (exact;
        √T·2/σ under ``replace`` adjacency, the sensitivity doubling).

    Raises:
        UnsupportedEventError: a mechanism other than a (Poisson-sampled) Gaussian, or a
            sampled Gaussian under ``replace`` adjacency.
    """
    mu2 = 0.0
    exact = True
    for q, sigma, count in _segments(event):
        if count == 0:
            continue
        if q == 1.0:
            sens = 2.0 if neighboring == "replace" else 1.0
            r = sens / sigma
            mu2 += count * r * r  # float products overflow to inf (unbounded), ** would raise
        else:
            if neighboring == "replace":
                raise UnsupportedEventError("the GDP/CLT formula for Poisson sampling assumes add/remove adjacency")
            exact = False
            x = (1.0 / sigma) * (1.0 / sigma)
            # e^{1/σ²} overflows for σ < 0.0376: μ is then unbounded for every T ≥ 1
            mu2 += q * q * count * math.expm1(x) if x < 709.0 else math.inf
    return math.sqrt(mu2), exact


class GdpAccountant(AdditiveAccountant):
    """Gaussian DP with the central limit theorem (approximate; never the default)."""

    name: ClassVar[str] = "gdp"
    certified: ClassVar[bool] = False
    source: ClassVar[str] = "Dong, Roth, Su 2019 Cor 2.13; Bu et al. 2020 eq. (6) (CLT, approx.)"
    short_source: ClassVar[str] = "DRS19; Bu+20"
    description: ClassVar[str] = "Gaussian DP via the central limit theorem (approximate, may under-report)"
    plotted_curve: ClassVar[bool] = True
    approximation_note: ClassVar[str] = "CLT, may under-report"

    def check(self, event: Event) -> None:
        gdp_mu(event, neighboring=self.neighboring)

    def _result(self, epsilon: float, delta: float, mu: float, exact: bool) -> AccountingResult:
        details = {"mu": mu, "exact": exact}
        if not exact:
            details["note"] = "central limit approximation: may under-report epsilon"
        reason = ("mu is unbounded (e^{1/sigma^2} overflows): no finite epsilon"
                  if math.isinf(mu) else "epsilon is unbounded (beyond the largest double)"
                  if math.isinf(epsilon) else None)
        return AccountingResult(self.name, epsilon, delta, exact, details=details, source=self.source,
                                reason=reason)

    def epsilon(self, event: Event, *, delta: float) -> AccountingResult:
        """ε at ``delta`` from the μ-GDP curve (exact inverse, rounded up)."""
        delta = v.open_unit("delta", delta)
        mu, exact = gdp_mu(event, neighboring=self.neighboring)
        eps = 0.0 if mu == 0 else math.inf if math.isinf(mu) else gaussian_epsilon(delta=delta, mu=mu)
        return self._result(eps, delta, mu, exact)

    def delta(self, event: Event, *, epsilon: float) -> AccountingResult:
        """δ at ``epsilon`` from the μ-GDP curve (rounded up)."""
        epsilon = v.nonnegative("epsilon", epsilon)
        mu, exact = gdp_mu(event, neighboring=self.neighboring)
        # gaussian_delta is already rounded up; _MARGIN_ULPS more (≈ 1e-12 relative) for exp()
        d = 0.0 if mu == 0 else 1.0 if math.isinf(mu) else min(
            1.0, round_up(gaussian_delta(epsilon=epsilon, mu=mu), _MARGIN_ULPS))
        return self._result(epsilon, d, mu, exact)

    # --- many numbers of compositions at once (dpcalc compose --steps-grid, AdditiveAccountant)
    def step_cost(self, step: Event) -> float:
        """One run's μ²: μ² adds up over compositions (DRS 2019 Cor 3.3 / the CLT's variance)."""
        return gdp_mu(step, neighboring=self.neighboring)[0] ** 2

    def epsilons_of_costs(self, costs: np.ndarray, delta: float) -> np.ndarray:
        """ε at δ of each composed μ² (:func:`gdp_epsilon_many` of μ = √μ²)."""
        return gdp_epsilon_many(mus=np.sqrt(costs), delta=delta)

    def deltas_of_costs(self, costs: np.ndarray, epsilon: float) -> np.ndarray:
        """δ at ε of each composed μ² (:func:`gdp_delta_many` of μ = √μ²)."""
        return gdp_delta_many(mus=np.sqrt(costs), epsilon=epsilon)


def _log_delta_many(epsilon, mu):
    """ln δ(ε) of μ-GDP elementwise (DRS 2019 Cor 2.13) with ``log_ndtr``; accurate to a few
    ulps relative unless μ is tiny (cancellation; callers use the scalar routine there)."""
    from scipy.special import log_ndtr

    la = log_ndtr(mu / 2 - epsilon / mu)
    lb = log_ndtr(-mu / 2 - epsilon / mu)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = la + np.log(-np.expm1(np.minimum(epsilon + lb - la, 0.0)))
    return np.where(np.isnan(out), -np.inf, out)


def gdp_epsilon_many(*, mus, delta: float) -> np.ndarray:
    r"""ε(δ) of μ-GDP for many μ at once (Dong, Roth, Su 2019 Cor 2.13), each rounded up.

    Vectorised bisection on ln δ(ε) (decreasing in ε) aimed 1e-9 (relative, in δ) below the
    target, ended on the side that meets it; μ < 1e-2 (where the two terms of δ(ε) nearly
    cancel) and μ = 0 use the scalar :func:`~dpcalc.mechanisms.gaussian.gaussian_epsilon`
    (μ = 0: ε = 0). Used by ``dpcalc compose --steps-grid``.

    Args:
        mus: μ ≥ 0, shape (m,).
        delta: δ in (0, 1).

    Returns:
        ε ≥ 0 per μ, shape (m,).
    """
    delta = v.open_unit("delta", delta)
    mu = np.asarray(mus, dtype=float).ravel()
    out = np.zeros(mu.size)
    vec = mu >= 1e-2
    for i in np.flatnonzero((mu > 0) & ~vec):
        out[i] = gaussian_epsilon(delta=delta, mu=float(mu[i]))
    if vec.any():
        m = mu[vec]
        target = math.log(delta) + math.log1p(-1e-9)
        zero_ok = _log_delta_many(np.zeros(m.size), m) <= target
        hi = np.maximum(1.0, m * m)
        for _ in range(60):
            bad = _log_delta_many(hi, m) > target
            if not bad.any():
                break
            hi = np.where(bad, 2 * hi, hi)
        lo = np.zeros(m.size)
        for _ in range(70):
            mid = 0.5 * (lo + hi)
            good = _log_delta_many(mid, m) <= target
            hi = np.where(good, mid, hi)
            lo = np.where(good, lo, mid)
        out[vec] = np.where(zero_ok, 0.0, round_up(hi, _MARGIN_ULPS))
    return out


def gdp_delta_many(*, mus, epsilon: float) -> np.ndarray:
    """δ(ε) of μ-GDP for many μ (DRS 2019 Cor 2.13): the scalar
    :func:`~dpcalc.mechanisms.gaussian.gaussian_delta` (rounded up) per μ; μ = 0 gives 0."""
    epsilon = v.nonnegative("epsilon", epsilon)
    mu = np.asarray(mus, dtype=float).ravel()
    out = np.array([round_up(gaussian_delta(epsilon=epsilon, mu=float(m)), _MARGIN_ULPS) if m > 0 else 0.0
                    for m in mu])
    return np.minimum(out, 1.0)
