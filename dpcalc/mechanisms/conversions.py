r"""Conversions every practitioner looks up: group privacy, amplification by Poisson
subsampling, pure DP → zCDP, zCDP → (ε, δ).

* Group privacy: an (ε, δ)-DP mechanism is (kε, δ·(e^{kε} − 1)/(e^ε − 1))-DP for
  datasets differing in k records (Vadhan 2017, "The complexity of differential
  privacy", Lemma 2.2; pure case Dwork & Roth 2014 Thm 2.2). The δ term
  δ·Σ_{i<k} e^{iε} is tighter than the often quoted k·e^{(k−1)ε}·δ.
* Amplification by Poisson subsampling (Balle, Barthe, Gaboardi 2018, Thm 8): if M
  is (ε, δ)-DP under add/remove adjacency, then M run on a Poisson subsample of
  rate q is (ln(1 + q(e^ε − 1)), q·δ)-DP under add/remove adjacency.
* ε-DP ⇒ (ε²/2)-zCDP (Bun & Steinke 2016, Prop 1.4).
* ρ-zCDP ⇒ (ε, δ)-DP with ε = min_{α>1} αρ + ln((α − 1)/α) − (ln δ + ln α)/(α − 1)
  (Canonne, Kamath, Steinke 2020, Prop 12 / Cor 13), any α giving a valid bound;
  compared with the simpler ρ + 2√(ρ ln(1/δ)) (Bun & Steinke 2016, Prop 1.3).
"""

from __future__ import annotations

import math

from dpcalc import _validate as v
from dpcalc._numerics import log_expm1 as _log_expm1
from dpcalc.results import MechanismResult

__all__ = ["group_privacy", "poisson_subsampling", "pure_to_zcdp", "zcdp_to_epsilon"]


def group_privacy(*, epsilon: float, delta: float = 0.0, group_size: int) -> MechanismResult:
    r"""(ε, δ)-DP for individuals ⇒ guarantee for groups of ``group_size`` records.

    ε_k = kε, δ_k = δ·(e^{kε} − 1)/(e^ε − 1) (= kδ when ε = 0; capped at 1)
    (Vadhan 2017 Lemma 2.2; Dwork & Roth 2014 Thm 2.2).

    Args:
        epsilon: ε ≥ 0.
        delta: δ in [0, 1].
        group_size: k ≥ 1.

    Returns:
        A result with ``epsilon`` = kε, ``delta`` = δ_k, and the inputs.

    Raises:
        ParameterError: bad parameters.
    """
    epsilon = v.nonnegative("epsilon", epsilon)
    delta = v.closed_unit("delta", delta)
    k = v.count("group_size", group_size)
    if delta == 0:
        dk = 0.0
    elif epsilon == 0:
        dk = k * delta
    else:
        log_dk = math.log(delta) + _log_expm1(k * epsilon) - _log_expm1(epsilon)
        dk = math.exp(log_dk) if log_dk < 1 else math.inf
    vacuous = dk >= 1
    return MechanismResult(
        method="group",
        values={"epsilon": k * epsilon, "delta": min(1.0, dk), "group_size": k,
                "epsilon_individual": epsilon, "delta_individual": delta},
        source="Vadhan 2017 Lemma 2.2; Dwork & Roth 2014 Thm 2.2",
        details={"delta_loose": min(1.0, k * math.exp((k - 1) * epsilon) * delta)
                 if (k - 1) * epsilon < 700 else 1.0,
                 **({"note": "δ ≥ 1: the group guarantee is vacuous"} if vacuous else {})})


def poisson_subsampling(*, epsilon: float, delta: float = 0.0, sample_rate: float) -> MechanismResult:
    r"""Amplification by Poisson subsampling (Balle, Barthe, Gaboardi 2018, Thm 8).

    (ε, δ)-DP ⇒ (ln(1 + q(e^ε − 1)), q·δ)-DP for the mechanism run on a subsample that
    includes each record independently with probability q (add/remove adjacency).

    Args:
        epsilon: ε ≥ 0 of the mechanism on its input.
        delta: δ in [0, 1].
        sample_rate: q in (0, 1].

    Returns:
        A result with the amplified ``epsilon`` and ``delta``.

    Raises:
        ParameterError: bad parameters.
    """
    epsilon = v.nonnegative("epsilon", epsilon)
    delta = v.closed_unit("delta", delta)
    q = v.half_open_unit("sample_rate", sample_rate)
    if epsilon > 1:  # 1 + q(e^ε − 1) = e^ε·(q + (1 − q)e^{−ε}): no overflow for large ε
        eps_q = epsilon + math.log(q + (1 - q) * math.exp(-epsilon))
    else:
        eps_q = math.log1p(q * math.expm1(epsilon))
    return MechanismResult(
        method="subsample",
        values={"epsilon": eps_q, "delta": q * delta, "sample_rate": q,
                "epsilon_base": epsilon, "delta_base": delta},
        source="Balle, Barthe, Gaboardi 2018, Thm 8 (Poisson, add/remove)")


def pure_to_zcdp(*, epsilon: float) -> MechanismResult:
    r"""ε-DP ⇒ ρ-zCDP with ρ = ε²/2 (Bun & Steinke 2016, Prop 1.4).

    Args:
        epsilon: ε ≥ 0 of a pure-DP mechanism.

    Returns:
        A result with ``rho``.

    Raises:
        ParameterError: ε < 0 or not finite.
    """
    epsilon = v.nonnegative("epsilon", epsilon)
    return MechanismResult(method="pure-to-zcdp", values={"epsilon": epsilon, "rho": epsilon * epsilon / 2},
                           source="Bun & Steinke 2016, Prop 1.4")


def _cks_epsilon(alpha: float, rho: float, log_delta: float) -> float:
    return alpha * rho + math.log1p(-1 / alpha) - (log_delta + math.log(alpha)) / (alpha - 1)


def _golden_min(f, a: float, b: float, xatol: float) -> float:
    """A minimiser of ``f`` on [a, b] by golden-section search to ``xatol`` (plain Python: no
    scipy.optimize import on the calculator's start-up path). Any point is a valid α for the
    CKS bound, so the search only affects tightness."""
    g = (math.sqrt(5) - 1) / 2
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    while b - a > xatol:
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    return c if fc <= fd else d


def zcdp_to_epsilon(*, rho: float, delta: float) -> MechanismResult:
    r"""ρ-zCDP ⇒ (ε, δ)-DP by the conversion of Canonne, Kamath, Steinke 2020 (Prop 12/Cor 13).

    ε = min_{α>1} αρ + ln(1 − 1/α) − (ln δ + ln α)/(α − 1). Every α gives a valid bound,
    so the numerically minimised value is certified; the minimising α is reported.
    ``details.epsilon_bun_steinke`` = ρ + 2√(ρ ln(1/δ)) (Bun & Steinke 2016 Prop 1.3), never smaller.

    Args:
        rho: ρ > 0.
        delta: δ in (0, 1).

    Returns:
        A result with ``epsilon``, ``delta``, ``rho`` and ``details.order``.

    Raises:
        ParameterError: bad parameters.
    """
    rho = v.positive("rho", rho)
    delta = v.open_unit("delta", delta)
    ld = math.log(delta)
    # optimum near α ≈ 1 + √(ln(1/δ)/ρ); search ln(α − 1) on a wide bracket
    f = lambda t: _cks_epsilon(1 + math.exp(t), rho, ld)  # noqa: E731
    grid = [x / 4 for x in range(-80, 121)]  # α − 1 from e^-20 to e^30
    t0 = min(grid, key=f)
    x = _golden_min(f, t0 - 0.25, t0 + 0.25, 1e-12)
    t = x if f(x) <= f(t0) else t0
    eps = max(0.0, f(t))
    bs = rho + 2 * math.sqrt(rho * math.log(1 / delta))
    return MechanismResult(
        method="zcdp-to-dp", values={"rho": rho, "delta": delta, "epsilon": eps},
        source="Canonne, Kamath, Steinke 2020, Prop 12 / Cor 13",
        details={"order": 1 + math.exp(t), "epsilon_bun_steinke": bs})
