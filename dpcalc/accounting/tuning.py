r"""Repeat-and-select (private hyperparameter search): the RDP of the best of K runs, K random.

A :class:`~dpcalc.events.TuningEvent` runs a mechanism Q a random number K of times and
releases only the best run. Its privacy follows from Q's Rényi-DP curve:

* **Truncated negative binomial** D_{η,γ} (η ∈ (−1, ∞), γ ∈ (0, 1); geometric η = 1,
  logarithmic η → 0). Papernot & Steinke 2022 ("Hyperparameter tuning with Rényi
  differential privacy", ICLR), **Theorem 2**: if Q is (λ, ε)-RDP and (λ̂, ε̂)-RDP with
  λ ∈ (1, ∞), λ̂ ∈ [1, ∞), the best of K ~ D_{η,γ} runs is (λ, ε′)-RDP with

  .. math:: ε′ = ε + (1+η)(1 − 1/λ̂)\,ε̂ + (1+η)\log(1/γ)/λ̂ + \log E[K]/(λ − 1),

  E[K] = η(1−γ)/(γ(1−γ^η)) (η ≠ 0), (1/γ − 1)/log(1/γ) (η = 0). We minimise over λ̂ in the
  order grid (every λ̂ gives a valid bound). **Corollary 3** (λ, λ̂ → ∞): if Q is ε-DP, the
  search is (2+η)ε-DP — for the geometric law 3ε, the theorem of Liu & Talwar 2019
  ("Private selection from private candidates", STOC; random stopping, Thm 3.4 of
  arXiv:1811.07971): *run Q, after each run stop with probability γ, release the best
  candidate seen; if Q is ε-DP this is 3ε-DP, whatever γ.* **Corollary 4**: if Q is
  ρ-zCDP, ε′(λ) = ρ(λ−1) + log E[K]/(λ−1) + 2(1+η)√(ρ log(1/γ)) − ηρ for
  λ ≥ 1 + √(log E[K]/ρ) (our closed-form test).
* **Poisson**, K ~ Poisson(μ). Papernot & Steinke 2022, **Theorem 6**: if Q is (λ, ε)-RDP and
  (ε̂, δ̂)-DP with e^{ε̂} ≤ 1 + 1/(λ−1), the search is (λ, ε + μδ̂ + log(μ)/(λ−1))-RDP. We take
  ε̂ = log(1 + 1/(λ−1)) and δ̂ the smallest δ we can certify for Q at ε̂: from its RDP curve
  (CKS 2020 Prop 12 inverted, or the total-variation bound), the exact Gaussian δ (Balle &
  Wang 2018 Thm 8) when Q is a composition of unsampled Gaussians, or the tight profile
  (e^{ε₀} − e^{ε̂})/(1 + e^{ε₀}) of an ε₀-DP Q (randomized response dominates every ε₀-DP
  mechanism, Kairouz, Oh, Viswanath 2015).

Rényi divergence is non-decreasing in the order (van Erven & Harremoës 2014, Thm 3), so each order's bound is also capped by the bounds at larger orders,
as dp_accounting does. Computation (issue 31): one run's RDP is remembered per order (the
refinements and the accountant's order search ask for the same orders again and again); Thm 6's
δ̂ is refined only for the rows that can change the curve at the orders asked and, when the
caller converts at a known δ, the ε of its best order (:func:`_rows_to_refine`); conversion
orders whose lower bound cannot beat a row's best are not evaluated; under Thm 2 the run's RDP at
the fractional grid orders (1.01 … 1.75, slow series) is computed only when a row or the λ̂ term
can need it. Every skipped step could only
have lowered a bound that does not decide the answer: the ε, its order and a calibrated σ are
the floats computed with every row refined (tests/accounting/test_tuning.py). dp_accounting's ``RepeatAndSelectDpEvent`` with its RDP accountant
implements the same theorems (our cross-check in tests/accounting/test_tuning.py; docs/design.md §2).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from dpcalc import _validate as v
from dpcalc._numerics import log_abs_gamma, log_expm1, minimize_bounded
from dpcalc.accounting.rdp_conversion import DEFAULT_ORDERS, epsilon_per_order, log_delta_per_order
from dpcalc.errors import ParameterError, UnsupportedEventError
from dpcalc.events import (
    ComposedEvent,
    EpsilonDeltaEvent,
    Event,
    GaussianEvent,
    LaplaceEvent,
    PoissonSampledEvent,
    SelfComposedEvent,
    TuningEvent,
)
from dpcalc.mechanisms.gaussian import gaussian_delta

__all__ = [
    "SOURCE",
    "tnb_mean",
    "tnb_gamma",
    "repeat_and_select_rdp",
    "hat_minimum",
    "refined_log_delta_hat",
    "pure_epsilon",
    "gaussian_mu",
    "contains_tuning",
    "refuse_tuning",
    "runs_quantile",
    "TUNING_ORDERS",
    "rdp_of_tuning",
]

SOURCE = ("Papernot & Steinke 2022 (ICLR) Thm 2 (truncated negative binomial), Thm 6 (Poisson), "
          "Cor 3 (pure DP: (2+eta)·eps; geometric 3·eps, Liu & Talwar 2019)")

#: relative width to which γ is found from the mean (then moved down by as much: E[K] errs high)
_GAMMA_RTOL = 1e-13
#: the smallest log γ searched (γ ≈ 1e-300): a law that needs a smaller γ is refused, not computed
#: with γ rounded to 0 (η near −1 with many runs: η = −0.999 and E[K] = 10 needs γ ≈ e^{−2300})
_LOG_GAMMA_MIN = -690.0


def tnb_mean(gamma: float, eta: float) -> float:
    r"""E[K] of the truncated negative binomial D_{η,γ} (Papernot & Steinke 2022 §3):
    η(1−γ)/(γ(1−γ^η)) for η ≠ 0, (1/γ − 1)/log(1/γ) for η = 0 (logarithmic); 1 at γ = 1.

    Args:
        gamma: γ in (0, 1].
        eta: η in (−1, ∞).
    """
    if gamma >= 1.0:
        return 1.0
    lg = math.log(gamma)
    if eta == 0.0:
        return (1.0 / gamma - 1.0) / -lg
    # 1 − γ^η = −expm1(η log γ), with the sign of η; the ratio is positive for every η > −1
    return eta * (1.0 - gamma) / (gamma * -math.expm1(eta * lg))


def tnb_gamma(mean_runs: float, eta: float) -> float:
    r"""The γ of D_{η,γ} with E[K] = ``mean_runs``, rounded down (E[K] decreases in γ, so the
    law returned has E[K] ≥ ``mean_runs``, and log(1/γ) errs high: both terms of Thm 2 err
    on the safe side). Bisection on log γ to relative width 1e-13.

    Args:
        mean_runs: E[K] ≥ 1 (1 gives γ = 1, the point mass K = 1).
        eta: η in (−1, ∞).

    Raises:
        ParameterError: ``mean_runs`` < 1 or η ≤ −1.
    """
    mean = v.positive("mean_runs", mean_runs)
    if mean < 1.0:
        raise ParameterError("mean_runs", "at least 1 (K >= 1)", mean)
    if not eta > -1.0:
        raise ParameterError("eta", "in (-1, inf)", eta)
    if mean == 1.0:
        return 1.0
    lo, hi = -1.0, 0.0  # log γ: E(e^lo) ≥ mean > E(e^hi) = 1
    while tnb_mean(math.exp(lo), eta) < mean:
        if lo <= _LOG_GAMMA_MIN:
            raise ParameterError("mean_runs", "", mean, message=(
                f"mean_runs {mean:g} with η = {eta:g} (--eta) needs the law's parameter γ below 1e-300 (outside "
                "floating point; η near −1 needs astronomically small γ): use a larger eta or fewer mean runs"))
        lo = max(2.0 * lo, _LOG_GAMMA_MIN)
    while hi - lo > _GAMMA_RTOL * max(1.0, -lo) and hi - lo > 1e-300:
        mid = 0.5 * (lo + hi)
        if tnb_mean(math.exp(mid), eta) >= mean:
            lo = mid
        else:
            hi = mid
    return math.exp(lo * (1.0 + _GAMMA_RTOL) if lo < 0 else lo)


def pure_epsilon(event: Event, sensitivity: float = 1.0) -> float | None:
    """A pure ε-DP guarantee of ``event`` when it has one, else None: Laplace (sensitivity/b),
    (ε, 0)-DP steps, their compositions (ε adds up), and a negative-binomial repeat-and-select
    of a pure base, (2+η)ε (Papernot & Steinke 2022 Cor 3; geometric: 3ε, Liu & Talwar 2019).

    Args:
        event: the history.
        sensitivity: 1 under add/remove, 2 under replace (noise scales are relative to one
            record's contribution bound, as in :mod:`dpcalc.accounting.rdp`).
    """
    if isinstance(event, SelfComposedEvent):
        if event.count == 0:
            return 0.0
        inner = pure_epsilon(event.event, sensitivity)
        return None if inner is None else event.count * inner
    if isinstance(event, ComposedEvent):
        total = 0.0
        for e in event.events:
            part = pure_epsilon(e, sensitivity)
            if part is None:
                return None
            total += part
        return total
    if isinstance(event, LaplaceEvent):
        return sensitivity / event.scale
    if isinstance(event, EpsilonDeltaEvent):
        return event.epsilon if event.delta == 0 else None
    if isinstance(event, TuningEvent) and event.eta is not None:
        base = pure_epsilon(event.event, sensitivity)
        if base is None:
            return None
        return base if event.mean_runs == 1.0 else (2.0 + event.eta) * base
    return None


def gaussian_mu(event: Event, sensitivity: float = 1.0) -> float | None:
    """μ = sensitivity·√(Σ count/σ²) when ``event`` is a composition of unsampled Gaussians
    (then it is exactly μ-GDP, Dong, Roth, Su 2019 Cor 3.3), else None."""
    total = 0.0

    def walk(e: Event, mult: int) -> bool:
        nonlocal total
        if isinstance(e, SelfComposedEvent):
            return walk(e.event, mult * e.count)
        if isinstance(e, ComposedEvent):
            return all(walk(x, mult) for x in e.events)
        if isinstance(e, PoissonSampledEvent) and e.sample_rate == 1.0:
            e = e.event
        if isinstance(e, GaussianEvent):
            total += mult / e.noise_multiplier ** 2
            return True
        return False

    if not walk(event, 1) or total <= 0.0 or not math.isfinite(total):
        return None
    return sensitivity * math.sqrt(total)


def contains_tuning(event: Event) -> bool:
    """True iff ``event`` has a :class:`~dpcalc.events.TuningEvent` anywhere in it."""
    if isinstance(event, TuningEvent):
        return True
    if isinstance(event, SelfComposedEvent):
        return contains_tuning(event.event)
    if isinstance(event, ComposedEvent):
        return any(contains_tuning(e) for e in event.events)
    if isinstance(event, PoissonSampledEvent):
        return contains_tuning(event.event)
    return False


def refuse_tuning(event: Event, accountant: str) -> None:
    """Raise :class:`UnsupportedEventError` with the reason when ``event`` contains a
    repeat-and-select: only the rdp accountant has a bound for it.

    Args:
        event: the history.
        accountant: the refusing accountant's name (for the message).
    """
    if contains_tuning(event):
        raise UnsupportedEventError(
            f"{accountant} cannot account for a repeat-and-select (TuningEvent, hyperparameter "
            "search): its privacy is known as a Rényi-DP bound (Papernot & Steinke 2022), which "
            "only the rdp accountant computes; use --accountant rdp")


def _suffix_min(x: np.ndarray) -> np.ndarray:
    """out[i] = min(x[i:]) (RDP is non-decreasing in the order, so larger orders cap smaller)."""
    return np.minimum.accumulate(x[::-1])[::-1]


def _log_delta_hat(orders: np.ndarray, rdp: np.ndarray, eps_hat: np.ndarray) -> np.ndarray:
    """log δ̂ for each ε̂: the smallest (ε̂, δ)-DP δ the RDP curve certifies (CKS 2020 Prop 12
    inverted, or total variation ≤ √(1 − e^{−KL})), over all orders; shape of ``eps_hat``."""
    ld = log_delta_per_order(orders[None, :], rdp[None, :], eps_hat[:, None])
    return ld.min(axis=1)


def refined_log_delta_hat(orders, rdp, eps_hat, rdp_at: Callable[[np.ndarray], np.ndarray], *,
                          passes: int = 2, points: int = 12) -> np.ndarray:
    r"""ln δ̂ at each ε̂ certified by the RDP curve, the conversion's order refined off the grid.

    δ̂(ε̂) = min over α of CKS 2020 Prop 12 inverted (or total variation) at ε(α); every α > 1
    gives a valid bound, so after the grid each row's best order is bracketed by its grid
    neighbours and ``passes`` times replaced by the best of ``points`` evenly spaced orders in
    its bracket (then the bracket shrinks to the spacing around it). The run's RDP at the new
    orders comes from ``rdp_at`` (one call per pass, orders shared between rows evaluated once).

    Args:
        orders: grid orders α > 1, ascending, shape (m,).
        rdp: the run's RDP at ``orders``, shape (m,).
        eps_hat: the ε̂ at which δ̂ is wanted, shape (n,).
        rdp_at: α array (k,) ↦ the run's RDP at those orders, shape (k,) (a valid upper bound
            at each; ``inf`` allowed).
        passes: refinement passes (0: the grid's minimum only).
        points: orders tried per row and pass.

    Returns:
        ln δ̂ per ε̂, shape (n,), ≤ 0, never above the grid's minimum.
    """
    a = np.asarray(orders, dtype=float)
    r = np.asarray(rdp, dtype=float)
    e = np.asarray(eps_hat, dtype=float)
    ld = log_delta_per_order(a[None, :], r[None, :], e[:, None])
    i = np.argmin(ld, axis=1)
    best = ld[np.arange(e.size), i]
    centre = a[i]
    lo, hi = a[np.maximum(i - 1, 0)], a[np.minimum(i + 1, a.size - 1)]
    for _ in range(passes):
        if not np.any(np.isfinite(best) & (best > -np.inf)):
            break
        cand = np.linspace(lo, hi, points, axis=1)  # (n, points)
        cand = np.where(cand > 1.0, cand, np.nan)
        uniq, inv = np.unique(cand, return_inverse=True)
        finite = np.isfinite(uniq)
        # a lower bound of each candidate's ln δ: the run's RDP at the largest known order
        # below it (RDP does not decrease with the order, van Erven & Harremoës 2014 Thm 3);
        # a candidate that cannot beat the best of any row asking for it is not evaluated
        below = np.searchsorted(a, np.where(finite, uniq, a[0]), side="right") - 1
        r_low = np.where(below >= 0, r[np.maximum(below, 0)], 0.0)
        with np.errstate(invalid="ignore"):
            lb = log_delta_per_order(uniq[None, :], r_low[None, :], e[:, None])  # (n, u)
        lb_row = lb[np.arange(e.size)[:, None], inv.reshape(cand.shape)]  # (n, points)
        hopeful = np.zeros(uniq.shape, dtype=bool)
        hopeful[inv.reshape(cand.shape)[lb_row < best[:, None]]] = True
        finite &= hopeful
        vals = np.full(uniq.shape, np.inf)
        if finite.any():
            vals[finite] = rdp_at(uniq[finite])
        with np.errstate(invalid="ignore"):
            lds = log_delta_per_order(uniq[None, :], vals[None, :], e[:, None])  # (n, u)
        lds = np.where(np.isfinite(uniq)[None, :], lds, 0.0)
        row = lds[np.arange(e.size)[:, None], inv.reshape(cand.shape)]  # (n, points)
        j = np.argmin(row, axis=1)
        got = row[np.arange(e.size), j]
        better = got < best
        best = np.where(better, got, best)
        centre = np.where(better, np.nan_to_num(cand[np.arange(e.size), j], nan=1.0), centre)
        step = (hi - lo) / (points - 1)
        lo, hi = np.maximum(centre - step, lo), np.minimum(centre + step, hi)
    return np.minimum(best, 0.0)


def hat_minimum(orders, rdp, gamma: float, *, rdp_at: Callable[[float], float] | None = None,
                pure: float | None = None) -> float:
    r"""min over λ̂ of (1 − 1/λ̂)·ε(λ̂) + log(1/γ)/λ̂, the λ̂ part of Papernot & Steinke 2022 Thm 2.

    Every λ̂ ≥ 1 gives a valid bound, so any λ̂ may be tried: the grid ``orders``, then (with
    ``rdp_at``) a bounded Brent search between the best grid order's neighbours, and (with
    ``pure``) λ̂ → ∞, where the term tends to ε₀.

    Args:
        orders: λ̂ grid, ascending, > 1, shape (m,).
        rdp: the run's RDP at ``orders``, shape (m,).
        gamma: γ in (0, 1).
        rdp_at: optional λ̂ ↦ the run's RDP at λ̂ (for the refinement).
        pure: optional ε₀ with the run ε₀-DP.
    """
    a = np.asarray(orders, dtype=float)
    lg = -math.log(gamma)
    with np.errstate(invalid="ignore"):
        vals = (1.0 - 1.0 / a) * np.asarray(rdp, dtype=float) + lg / a
    vals = np.where(np.isnan(vals), np.inf, vals)
    i = int(np.argmin(vals))
    best = float(vals[i])
    if rdp_at is not None and math.isfinite(best) and a.size > 1:
        lo, hi = float(a[max(i - 1, 0)]), float(a[min(i + 1, a.size - 1)])

        def f(x: float) -> float:
            val = (1.0 - 1.0 / x) * rdp_at(x) + lg / x
            return val if math.isfinite(val) else 1e300

        x, fx = minimize_bounded(f, lo, hi, xatol=1e-3 * float(a[i]))
        if math.isfinite(fx) and fx < best:
            best = float(fx)
    if pure is not None:
        best = min(best, pure)
    return best


def repeat_and_select_rdp(
    orders,
    rdp,
    *,
    distribution: str,
    mean_runs: float,
    eta: float | None = None,
    pure: float | None = None,
    delta_hat: Callable[[float], float] | None = None,
    hat: float | None = None,
    log_delta_hat: np.ndarray | None = None,
    own: bool = False,
) -> np.ndarray:
    r"""The RDP curve of the best of K runs from one run's RDP curve (module docstring: Papernot
    & Steinke 2022 Thm 2 / Thm 6, monotonicity in the order applied).

    Args:
        orders: Rényi orders λ > 1, ascending, shape (m,); they also serve as the λ̂ of Thm 2
            and as the orders of the RDP→DP conversion giving δ̂ in Thm 6.
        rdp: one run's RDP ε(λ) at ``orders``, shape (m,), ≥ 0 (``inf`` allowed).
        distribution: ``"poisson"``, ``"negative-binomial"``, ``"geometric"`` or ``"logarithmic"``.
        mean_runs: E[K] ≥ 1 (for the negative-binomial family 1 means K = 1 always).
        eta: η for ``"negative-binomial"`` (in (−1, ∞)); ignored otherwise.
        pure: an ε₀ with Q ε₀-DP, if known (adds λ̂ → ∞ to Thm 2 and caps the curve at
            (2+η)ε₀, Cor 3; gives δ̂ = max(0, (e^{ε₀} − e^{ε̂})/(1 + e^{ε₀})) in Thm 6).
        delta_hat: optional function ε̂ ↦ a certified δ of Q at ε̂ (e.g. the exact Gaussian δ).
        hat: optional precomputed λ̂ term of Thm 2 (:func:`hat_minimum` at the γ of
            :func:`tnb_gamma`); default: its minimum over ``orders`` (and λ̂ → ∞ with ``pure``).
        log_delta_hat: optional certified ln δ̂ of Q at each order's ε̂ = log(1 + 1/(λ−1)) of
            Thm 6, shape (m,) (e.g. :func:`refined_log_delta_hat`: the conversion's order
            refined between grid orders); the smaller of it and the grid's is used.
        own: return each order's own bound, before the cap by the larger orders' bounds.

    Returns:
        ε′(λ) at ``orders``, shape (m,), ≥ 0.

    Raises:
        ParameterError: bad law, mean or η; orders not ascending or mismatched shapes.
    """
    a = np.asarray(orders, dtype=float)
    r = np.asarray(rdp, dtype=float)
    if a.ndim != 1 or a.shape != r.shape or a.size == 0 or not np.all(a > 1) or np.any(np.diff(a) <= 0):
        raise ParameterError("orders", "ascending orders > 1, one RDP value each", orders)
    dist = v.choice("runs_distribution", distribution, ("poisson", "negative-binomial", "geometric",
                                                          "logarithmic"))
    mean = v.positive("mean_runs", mean_runs)
    with np.errstate(invalid="ignore", over="ignore"):
        if dist == "poisson":
            if mean < 1.0:  # ln(μ)/(λ − 1) → −∞ near λ = 1: no valid bound from Thm 6 (TuningEvent)
                raise ParameterError("mean_runs", "at least 1 for the poisson law (E[K] >= 1)", mean)
            eps_hat = np.log1p(1.0 / (a - 1.0))
            ld = _log_delta_hat(a, r, eps_hat)
            if log_delta_hat is not None:
                ld = np.minimum(ld, np.asarray(log_delta_hat, dtype=float))
            dh = np.exp(ld)
            if delta_hat is not None:
                dh = np.minimum(dh, [delta_hat(float(e)) for e in eps_hat])
            if pure is not None:
                # tight profile of ε₀-DP (randomized response), rounded up by 1e-12 relative
                rr = -np.expm1(np.minimum(eps_hat - pure, 0.0)) / (1.0 + math.exp(-pure)) * (1 + 1e-12)
                dh = np.minimum(dh, rr)
            out = r + mean * dh + math.log(mean) / (a - 1.0)
        else:
            shape = {"geometric": 1.0, "logarithmic": 0.0}.get(dist, eta)
            if shape is None or not shape > -1.0 or not math.isfinite(shape):
                raise ParameterError("eta", "in (-1, inf)", shape)
            if mean < 1.0:
                raise ParameterError("mean_runs", "at least 1 (K >= 1)", mean)
            if mean == 1.0:
                out = r.copy()  # K = 1 always: one run
            else:
                gamma = tnb_gamma(mean, shape)
                log_mean = math.log(max(mean, tnb_mean(gamma, shape)))
                c = hat_minimum(a, r, gamma, pure=pure) if hat is None else hat
                out = r + (1.0 + shape) * c + log_mean / (a - 1.0)
                if pure is not None:
                    out = np.minimum(out, (2.0 + shape) * pure)
    out = np.where(np.isnan(out), np.inf, out)
    out = np.maximum(out, 0.0)
    return out if own else _suffix_min(out)


# ---------------------------------------------------------------------------
# The RDP of a TuningEvent, given the RDP of its run
# ---------------------------------------------------------------------------

#: the RDP of one run of a mechanism: ``rdp_of(event, orders, warnings, neighboring)`` -> shape (m,)
#: (the RDP accountant's dispatch passes itself: this module never imports it)
RunRdp = Callable[..., np.ndarray]

#: orders of a repeat-and-select's base curve: the default orders and larger ones up to 1024
#: (the λ̂ of Papernot & Steinke Thm 2 gains from large orders when K is large)
TUNING_ORDERS: tuple[float, ...] = DEFAULT_ORDERS + tuple(float(x) for x in range(320, 1025, 64))


def _sensitivity(neighboring: str) -> float:
    return 2.0 if neighboring == "replace" else 1.0


_TUNING_INT = np.array([x for x in TUNING_ORDERS if x == round(x)])
_TUNING_FRAC = np.array([x for x in TUNING_ORDERS if x != round(x)])


class _RunMemo:
    """One run's RDP at single orders, remembered: the refinements between orders (Thm 2's λ̂,
    Thm 6's conversion order) and the order search of the accountant ask for the same run at
    many orders, most of them again and again (e.g. one fractional order of the sampled
    Gaussian costs milliseconds). An order's value does not depend on the orders asked with it
    (the RDP of a run is computed order by order; the sampled Gaussian's series are elementwise,
    tests/accounting/test_rdp_batch.py), so a remembered value is the value a new call gives.

    The integer orders of :data:`TUNING_ORDERS` are computed at once (closed forms), its
    fractional ones (1.01 … 1.75, slow series) when first needed (:meth:`base`)."""

    def __init__(self, event: Event, neighboring: str, rdp_of: RunRdp) -> None:
        self.event, self.neighboring, self.rdp_of = event, neighboring, rdp_of
        self.values: dict[float, float] = {}
        warns: list[str] = []
        self.store(_TUNING_INT, rdp_of(event, _TUNING_INT, warns, neighboring))
        self.warnings = list(warns)  # the messages of the base curve's orders computed so far
        self.fractional = False  # whether the fractional orders of TUNING_ORDERS are known

    def store(self, orders: np.ndarray, rdp: np.ndarray) -> None:
        self.values.update(zip(np.asarray(orders, dtype=float).tolist(),
                               np.asarray(rdp, dtype=float).tolist(), strict=True))

    def __call__(self, orders: np.ndarray) -> np.ndarray:
        """The run's RDP at ``orders``, shape (k,) (the orders not seen before in one call,
        without its messages: the refinements never reported them)."""
        xs = np.asarray(orders, dtype=float).tolist()
        missing = list(dict.fromkeys(x for x in xs if x not in self.values))
        if missing:
            got = self.rdp_of(self.event, np.array(missing), None, self.neighboring)
            self.store(np.array(missing), got)
        return np.array([self.values[x] for x in xs], dtype=float)

    def base(self, fractional: bool = True) -> np.ndarray:
        """The run's RDP at :data:`TUNING_ORDERS` (shape (m,)); without ``fractional`` and
        with them still unknown, ``nan`` at the fractional orders."""
        if fractional and not self.fractional:
            warns: list[str] = []
            self.store(_TUNING_FRAC, self.rdp_of(self.event, _TUNING_FRAC, warns, self.neighboring))
            self.warnings.extend(w for w in warns if w not in self.warnings)
            self.fractional = True
        return np.array([self.values.get(x, math.nan) for x in TUNING_ORDERS])


@functools.lru_cache(maxsize=64)
def _run_memo(event: Event, neighboring: str, rdp_of: RunRdp) -> _RunMemo:
    """The :class:`_RunMemo` of one run (cached: the order refinement and the σ search ask for
    a repeat-and-select of the same base many times)."""
    return _RunMemo(event, neighboring, rdp_of)


def _base_curve(event: Event, neighboring: str, rdp_of: RunRdp) -> tuple[np.ndarray, tuple[str, ...]]:
    """One run's RDP at :data:`TUNING_ORDERS` (cached), with its warnings."""
    memo = _run_memo(event, neighboring, rdp_of)
    out = memo.base()
    return out, tuple(memo.warnings)


@functools.lru_cache(maxsize=64)
def _hat_term(event: Event, neighboring: str, rdp_of: RunRdp, gamma: float, pure: float | None) -> float:
    """The λ̂ term of Papernot & Steinke Thm 2 for one run (cached), refined between orders.

    A fractional grid order λ̂ ≤ 1.75 contributes at least log(1/γ)/λ̂ (its RDP is ≥ 0): when
    an integer order does strictly better, the fractional orders cannot be the grid's best and
    are not computed (the minimum, the bracket of its refinement and so the term are those of
    the full grid)."""
    memo = _run_memo(event, neighboring, rdp_of)
    base = memo.base(fractional=False)
    a = np.asarray(TUNING_ORDERS)
    frac = a != np.round(a)
    if not memo.fractional:
        lg = -math.log(gamma)
        with np.errstate(invalid="ignore"):
            ints = (1.0 - 1.0 / a[~frac]) * base[~frac] + lg / a[~frac]
        ints = np.where(np.isnan(ints), np.inf, ints)
        if float(np.min(ints)) < lg / float(np.max(a[frac])):
            base = np.where(frac, np.inf, base)
        else:
            base = memo.base()
    return hat_minimum(a, base, gamma, pure=pure, rdp_at=lambda x: float(memo(np.array([x]))[0]))


def _rows_to_refine(union: np.ndarray, orders: np.ndarray, own_lower: np.ndarray,
                    own_upper: np.ndarray, log_delta: float | None) -> np.ndarray:
    r"""Which rows λ of the union need Thm 6's refined δ̂ for the curve at ``orders`` to be the
    one computed with every row refined (a boolean mask over ``union``). ``own_lower`` and
    ``own_upper`` bound each row's own bound (before the cap by larger orders) whatever the
    work skipped; the same argument tells which rows need the run's RDP at the fractional grid
    orders (Thm 2 laws: with it between 0 and its value at the next order).

    The curve at x is the smallest own bound ε(λ) + μδ̂(λ) + log μ/(λ−1) over the rows λ ≥ x
    (monotonicity in the order). With every δ̂ between 0 and the grid's (unrefined) value, a row
    λ > x whose own bound is at least x's capped upper bound whatever δ̂ (ε(λ) + log μ/(λ−1) ≥
    min over [x, ∞) of the unrefined bounds) does not change the curve at x, so its δ̂ need not
    be refined. With ``log_delta`` (the caller converts the curve to ε at δ = e^{log_delta} and
    keeps the best order: :class:`~dpcalc.accounting.rdp.RdpAccountant`), an order x whose
    ε is certainly above an upper bound of the best order's (CKS 2020 Prop 12, monotone in the
    RDP, with x's curve at its lower bound) cannot be the best, and needs no exact value either.
    Every row is still a valid bound; only rows that cannot change the answer skip refinement.
    """
    cap_upper = _suffix_min(own_upper)
    wanted = np.isin(union, orders)
    if log_delta is not None and wanted.any():
        cap_lower = _suffix_min(own_lower)
        eps_upper = float(np.min(epsilon_per_order(union[wanted], cap_upper[wanted], log_delta)))
        wanted &= epsilon_per_order(union, cap_lower, log_delta) <= eps_upper
    # the largest capped upper bound over the wanted orders ≤ λ (non-decreasing in λ)
    reach = np.maximum.accumulate(np.where(wanted, cap_upper, -np.inf))
    return wanted | (own_lower < reach)


def _report(warnings: list | None, messages: list[str]) -> None:
    if warnings is not None:
        warnings.extend(w for w in messages if w not in warnings)


def rdp_of_tuning(event: TuningEvent, orders: np.ndarray, warnings: list | None, neighboring: str,
                  rdp_of: RunRdp, *, log_delta: float | None = None) -> np.ndarray:
    """RDP of a repeat-and-select at ``orders`` (module docstring: Papernot & Steinke 2022 Thm 2,
    Thm 6, Cor 3): the run's curve is computed on ``orders`` ∪ :data:`TUNING_ORDERS` (the λ̂ of
    Thm 2 and the orders of the δ̂ of Thm 6 range over that union; every order gives a valid
    bound).

    Args:
        event: the search (already checked by the caller).
        orders: Rényi orders λ > 1, shape (m,).
        warnings: optional list collecting the run's messages (e.g. series that did not converge).
        neighboring: ``"add-remove"`` or ``"replace"`` (noise scales relative to one record's
            contribution bound: sensitivity 2 under replace).
        rdp_of: the RDP of one run, ``rdp_of(event.event, orders, warnings, neighboring)``
            (the RDP accountant's dispatch).
        log_delta: optional ln δ at which the caller converts the curve to ε, keeping the
            best of ``orders`` (:class:`~dpcalc.accounting.rdp.RdpAccountant`): orders that
            cannot be the best then get a valid bound without Thm 6's refined δ̂ (the best
            order's value and which order is best do not change, :func:`_rows_to_refine`).

    Returns:
        ε′(λ) at ``orders``, shape (m,).
    """
    sensitivity = _sensitivity(neighboring)
    default = np.asarray(TUNING_ORDERS)
    memo = _run_memo(event.event, neighboring, rdp_of)
    # Thm 2 laws at a known δ: the fractional grid orders (slow series) only if they can matter
    base_default = memo.base(fractional=log_delta is None or event.distribution == "poisson")
    _report(warnings, memo.warnings)
    extra = np.setdiff1d(orders, default)
    union = np.union1d(default, orders)
    base = np.empty_like(union)
    base[np.isin(union, default)] = base_default
    if extra.size:  # computed afresh (with their messages), then remembered
        got = rdp_of(event.event, extra, warnings, neighboring)
        memo.store(extra, got)
        base[np.isin(union, extra)] = got
    mu = gaussian_mu(event.event, sensitivity)
    pure = pure_epsilon(event.event, sensitivity)
    hat = None
    if event.eta is not None and event.mean_runs > 1.0:
        hat = _hat_term(event.event, neighboring, rdp_of, tnb_gamma(event.mean_runs, event.eta), pure)

    def curve(refined: np.ndarray | None, own: bool = False, rdp: np.ndarray | None = None) -> np.ndarray:
        return repeat_and_select_rdp(
            union, base if rdp is None else rdp, distribution=event.distribution,
            mean_runs=event.mean_runs, eta=event.eta, pure=pure, hat=hat, log_delta_hat=refined,
            own=own, delta_hat=None if mu is None else (lambda e: gaussian_delta(epsilon=e, mu=mu)))

    asked = np.asarray(orders, dtype=float)
    unknown = np.isnan(base)
    if unknown.any():
        # between 0 and the RDP at the next known order (RDP does not decrease with the order)
        known = np.flatnonzero(~unknown)
        above = known[np.minimum(np.searchsorted(known, np.arange(union.size)), known.size - 1)]
        own_upper = curve(None, own=True, rdp=np.where(unknown, base[above], base))
        own_lower = curve(None, own=True, rdp=np.where(unknown, 0.0, base))
        if not np.any(_rows_to_refine(union, asked, own_lower, own_upper, log_delta)[unknown]):
            return _suffix_min(own_upper)[np.searchsorted(union, orders)]
        base[np.isin(union, default)] = memo.base()
        _report(warnings, memo.warnings)
    refined = None
    if event.distribution == "poisson":
        # Thm 6's δ̂ with the conversion's order refined off the grid, for the rows that matter
        # (the others keep the grid's δ̂: +inf here, the smaller of the two is used)
        with np.errstate(invalid="ignore", over="ignore"):
            own_lower = np.maximum(np.where(np.isnan(base), np.inf, base)
                                   + math.log(event.mean_runs) / (union - 1.0), 0.0)
        need = _rows_to_refine(union, asked, own_lower, curve(None, own=True), log_delta)
        refined = np.full(union.shape, np.inf)
        if need.any():
            refined[need] = refined_log_delta_hat(
                union, base, np.log1p(1.0 / (union[need] - 1.0)), memo)
    out = curve(refined)
    return out[np.searchsorted(union, orders)]


@functools.lru_cache(maxsize=64)
def _law_pmf_tail(distribution: str, mean: float, eta: float | None, quantile: float) -> int:
    return _quantile(distribution, mean, eta, quantile)


def _quantile(distribution: str, mean: float, eta: float | None, quantile: float) -> int:
    cap = 10**8
    if distribution == "poisson":
        # P[K = k] = e^{−μ}μ^k/k! in log space (ln k! from log_abs_gamma: ≤ 2u·ln k! against
        # mpmath), summed in order; the smallest k with P[K ≤ k] ≥ quantile (scipy's pdtr gives
        # the same k, tests/accounting/test_tuning.py; its import cost ~0.6 s of `dpcalc tune`)
        log_mean, cdf, k0 = math.log(mean), 0.0, 0
        chunk = int(mean + 10 * math.sqrt(mean) + 64)
        while k0 < cap:
            k = np.arange(k0, k0 + chunk, dtype=float)
            with np.errstate(under="ignore"):
                c = cdf + np.cumsum(np.exp(k * log_mean - mean - log_abs_gamma(k + 1.0)))
            hit = np.flatnonzero(c >= quantile)
            if hit.size:
                return int(k0 + hit[0])
            cdf, k0 = float(c[-1]), k0 + chunk
        return cap
    shape = {"geometric": 1.0, "logarithmic": 0.0}.get(distribution, eta)
    if mean == 1.0:
        return 1
    gamma = tnb_gamma(mean, shape)
    # p_1 = (1−γ)·η/(γ^{−η} − 1) (→ (1−γ)/log(1/γ) as η → 0); p_{k+1} = p_k·(1−γ)(k+η)/(k+1)
    lg = math.log(gamma)
    # log of norm = (γ^{−η} − 1)/η, without overflow (η = 1e3, γ = 1e-3: γ^{−η} = 1e3000)
    x = -shape * lg
    if shape == 0.0:
        log_norm = math.log(-lg)
    elif x > 0:
        log_norm = log_expm1(x) - math.log(shape)
    else:
        log_norm = math.log(-math.expm1(x)) - math.log(-shape)
    log_p1 = math.log1p(-gamma) - log_norm
    cdf, k0, log_pk = 0.0, 1, log_p1
    chunk = 4096
    while k0 < cap:
        k = np.arange(k0, k0 + chunk, dtype=float)
        steps = math.log1p(-gamma) + np.log(k + shape) - np.log(k + 1.0)
        logs = log_pk + np.concatenate([[0.0], np.cumsum(steps[:-1])])
        c = cdf + np.cumsum(np.exp(logs))
        hit = np.flatnonzero(c >= quantile)
        if hit.size:
            return int(k0 + hit[0])
        cdf, log_pk, k0 = float(c[-1]), float(logs[-1] + steps[-1]), k0 + chunk
        chunk = min(chunk * 2, 1 << 20)
    return cap


def runs_quantile(event: TuningEvent, quantile: float = 0.99) -> int:
    """The ``quantile``-quantile of K (the smallest k with P[K ≤ k] ≥ quantile), for the
    naive-composition comparison; capped at 10⁸.

    Args:
        event: the search (its law and mean).
        quantile: in (0, 1).
    """
    q = v.open_unit("quantile", quantile)
    return _law_pmf_tail(event.distribution, event.mean_runs, event.eta, q)
