r"""Optimal composition of k ε-bounded-range mechanisms (exponential mechanisms), chosen non-adaptively.

Mathematics and sources
-----------------------
* **ε-bounded range** (Durfee & Rogers 2019; Dong, Durfee, Rogers 2020 — DDR20 — §2):
  for neighbours x, x′ the privacy loss L(y) = ln(P_x(y)/P_x′(y)) varies by at most ε
  over the outputs y, so it lies in [t − ε, t] for some t ∈ [0, ε]. The exponential
  mechanism is ε-BR (:class:`dpcalc.events.ExponentialMechanismEvent`).
* **Reduction to generalised randomized response** (DDR20 §4): for fixed neighbours an
  ε-BR mechanism is dominated by the binary pair RR_t with losses t and t − ε,

      P(L = t) = p_t = (e^ε − e^t)/(e^ε − 1),   Q(L = t) = q_t = e^{−t}·p_t,

  (δ(ε′) = E_Q[(e^L − e^{ε′})₊] is convex in e^L, whose Q-mean is 1 and whose range is
  [e^{t−ε}, e^t]: the two-point law at the ends maximises it).
* **Non-adaptive optimal composition, k identical ε** (DDR20 §5): when the k mechanisms
  (their score functions) are fixed before any is run, the exact privacy curve is the
  maximum over t of the curve of RR_t^{⊗k} (equal t_i are optimal), and the maximum over t
  has a closed form: with ℓ the number of positive terms,

      δ(ε_g) = max_{0 ≤ ℓ < k − ε_g/ε} Σ_{i=0}^{ℓ} C(k, i) p^{k−i} (1−p)^i (1 − e^{ε_g − kt + iε}),
      t = t_ℓ = (ε_g + (ℓ + 1)ε)/(k + 1),   p = p_{t_ℓ},

  (the ℓ-th partial sum has derivative ∝ −1 + e^{ε_g + (ℓ+1)ε − (k+1)t} in e^t, so t_ℓ is
  its only stationary point, a maximum, and it lies inside the piece where exactly the
  terms i ≤ ℓ are positive). δ(ε_g) = 0 for ε_g ≥ kε. tests/composition/test_bounded_range.py
  checks it against a brute-force maximisation over (t_1, …, t_k) for k ≤ 4.
* **Adaptivity** (DDR20 §3.3, §6): when each mechanism may be chosen after seeing the
  previous outputs, the optimum can be strictly larger (k = 2, ε = 0.5, ε_g = 0.2:
  0.08327 adaptive against 0.08284 here). This row is therefore labelled non-adaptive and
  is *not* certified for adaptive use; the certified adaptive bounds are the accountants'
  rows (``pld`` with the dominating pair of the ε-BR class, ``rdp``, ``zcdp``).
* At k = 1 the curve is (e^{ε/2} − e^{ε′/2})²/(e^ε − 1) on [0, ε] — strictly below the
  randomized-response curve (e^ε − e^{ε′})/(1 + e^ε) of a generic ε-DP mechanism except at
  ε′ ≥ ε, where both are 0: one ε-BR mechanism is exactly ε-DP (δ = 0), no better.

Evaluation: every term is positive, summed in log space (``gammaln``, log-sum-exp), so no
cancellation; the result is rounded up by its error bound. The cost is O(k²) per δ, so
the row is evaluated for k ≤ :data:`MAX_BR_COUNT`.
"""

from __future__ import annotations

import math

import numpy as np

from dpcalc import _validate as v
from dpcalc._numerics import UNIT_ROUNDOFF, log_expm1
from dpcalc.errors import ParameterError

__all__ = ["MAX_BR_COUNT", "SOURCE", "SHORT", "br_single_delta", "br_nonadaptive_delta",
           "br_nonadaptive_epsilon"]

#: the largest k evaluated exactly (O(k²) terms per δ)
MAX_BR_COUNT = 2000
SOURCE = "Dong, Durfee, Rogers 2020, §4–5 (optimal non-adaptive composition of ε-bounded-range mechanisms)"
SHORT = "DDR20 §5 (non-adaptive)"

_ROWS_PER_BLOCK = 128


def _check(epsilon: float, count: int) -> tuple[float, int]:
    eps = v.positive("epsilon", epsilon)
    if eps > 700.0:
        raise ParameterError("epsilon", "in (0, 700]", eps)
    k = v.count("count", count, minimum=1)
    if k > MAX_BR_COUNT:
        raise ParameterError("count", f"at most {MAX_BR_COUNT} for the exact bounded-range composition", k)
    return eps, k


def br_single_delta(epsilon: float, epsilon_g: float) -> float:
    r"""δ(ε′) of one ε-BR mechanism: (e^{ε/2} − e^{ε′/2})²/(e^ε − 1) for 0 ≤ ε′ < ε, else 0.

    The supremum over t of the curves of RR_t (maximised at t = (ε + ε′)/2; DDR20 §4), i.e.
    :func:`br_nonadaptive_delta` with k = 1 in closed form.

    Args:
        epsilon: ε of the mechanism, in (0, 700].
        epsilon_g: ε′ ≥ 0.

    Raises:
        ParameterError: an argument out of range.
    """
    eps, _ = _check(epsilon, 1)
    e = v.nonnegative("epsilon_g", epsilon_g)
    if e >= eps:
        return 0.0
    # (e^{ε/2} − e^{ε′/2})² / (e^ε − 1) = e^{ε′}·expm1((ε−ε′)/2)² / expm1(ε), no cancellation
    return math.exp(e + 2.0 * log_expm1((eps - e) / 2.0) - log_expm1(eps))


def br_nonadaptive_delta(epsilon: float, count: int, epsilon_g: float) -> float:
    r"""Exact δ at ``epsilon_g`` of k ε-BR mechanisms composed non-adaptively (DDR20 §5).

    Args:
        epsilon: ε of each mechanism, in (0, 700].
        count: k, in [1, :data:`MAX_BR_COUNT`].
        epsilon_g: the total ε_g ≥ 0.

    Returns:
        δ(ε_g) in [0, 1], rounded up by its floating-point error bound.

    Raises:
        ParameterError: an argument out of range.
    """
    from scipy.special import bdtr, gammaln

    eps, k = _check(epsilon, count)
    eg = v.nonnegative("epsilon_g", epsilon_g)
    if eg >= k * eps:
        return 0.0
    n_ell = min(k, math.ceil(k - eg / eps))  # ℓ = 0 … n_ell − 1 have ℓ < k − ε_g/ε
    i = np.arange(k + 1, dtype=float)
    log_c = gammaln(k + 1.0) - gammaln(i + 1.0) - gammaln(k - i + 1.0)
    lme = log_expm1(eps)
    ell_all = np.arange(n_ell, dtype=float)
    t_all = np.minimum((eg + (ell_all + 1.0) * eps) / (k + 1.0), eps)
    # pruning: the ℓ-th sum is at most P[Bin(k, 1 − p) ≤ ℓ] (drop the factors 1 − e^{…} ≤ 1);
    # rows are evaluated in decreasing order of that bound until it falls below the best sum
    with np.errstate(divide="ignore", invalid="ignore"):
        one_minus_p = np.exp(log_expm1(t_all) - lme)
        bound = bdtr(ell_all, k, np.clip(one_minus_p, 0.0, 1.0))
    order = np.argsort(-bound)
    best = -math.inf
    worst_mag = 0.0
    for start in range(0, n_ell, _ROWS_PER_BLOCK):
        rows = order[start:start + _ROWS_PER_BLOCK]
        if best > -math.inf and 2.0 * float(bound[rows[0]]) < math.exp(best):
            break  # every remaining row is below half the best (a generous margin for bdtr's error)
        ell = ell_all[rows]
        t = t_all[rows]
        with np.errstate(divide="ignore", invalid="ignore"):
            log_p = t + log_expm1(np.maximum(eps - t, 0.0)) - lme
            log_q1 = log_expm1(t) - lme  # log(1 − p)
            # terms i ≤ ℓ, where the exponent ε_g − kt + iε is < 0 (clamped below 0 against round-off:
            # a term can only grow)
            expo = np.minimum(eg - k * t[:, None] + i[None, :] * eps, -1e-300)
            mask = i[None, :] <= ell[:, None]
            ip = (k - i)[None, :] * log_p[:, None]
            iq = np.where(i[None, :] > 0, i[None, :] * log_q1[:, None], 0.0)
            lt = np.where(mask, log_c[None, :] + ip + iq + np.log(-np.expm1(expo)), -np.inf)
            m = lt.max(axis=1)
            mm = np.where(np.isfinite(m), m, 0.0)
            s = np.where(np.isfinite(m), mm + np.log(np.sum(np.exp(lt - mm[:, None]), axis=1)), -np.inf)
        if s.size:
            best = max(best, float(s.max()))
            finite_lt = np.where(np.isfinite(lt), np.abs(lt), 0.0)
            worst_mag = max(worst_mag, float(finite_lt.max()))
    if best == -math.inf:
        return 0.0
    # each log term: a few roundings on numbers of size ≤ worst_mag + log_c; the sum adds k+1 roundings
    err = 32 * UNIT_ROUNDOFF * (worst_mag + float(np.max(log_c)) + k + 10)
    return min(1.0, math.exp(best + err))


def br_nonadaptive_epsilon(epsilon: float, count: int, delta: float) -> float:
    r"""The smallest ε_g with :func:`br_nonadaptive_delta` ≤ ``delta`` (rounded up): the exact
    non-adaptive composition of k ε-BR mechanisms at total δ (DDR20 §5).

    δ(ε_g) is continuous and non-increasing (each RR_t curve is), so a root search on
    [0, kε] followed by a check (and a nudge upwards until it holds) gives the answer.

    Args:
        epsilon: ε of each mechanism, in (0, 700].
        count: k, in [1, :data:`MAX_BR_COUNT`].
        delta: target δ in (0, 1).

    Returns:
        ε_g in [0, kε].

    Raises:
        ParameterError: an argument out of range.
    """
    from dpcalc._numerics import brentq

    eps, k = _check(epsilon, count)
    d = v.open_unit("delta", delta)
    hi = k * eps
    if br_nonadaptive_delta(eps, k, 0.0) <= d:
        return 0.0

    def f(x: float) -> float:
        return br_nonadaptive_delta(eps, k, x) - d

    x = brentq(f, 0.0, hi, xtol=1e-12 * max(1.0, hi), rtol=1e-12)
    step = 1e-12 * max(1.0, hi)
    while x < hi and f(x) > 0:
        x = min(hi, x + step)
        step *= 2
    return min(hi, x * (1 + 4 * UNIT_ROUNDOFF))
