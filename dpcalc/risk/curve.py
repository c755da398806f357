r"""Certified trade-off curves from accounting results, and the attack bounds read off them.

:func:`curve_from_accountant` asks a registered accountant, through its public API only
(``get_accountant(name).epsilon(event, delta=…)`` and ``.delta(event, epsilon=…)``), for the
privacy profile δ(ε) at an adaptively chosen grid of ε, and keeps the certified points
(ε_i, δ_i). Their envelope max_i f_{ε_i,δ_i} is a certified lower bound of the attacker's
type-II error (:mod:`dpcalc.risk.tradeoff`). For ``pld``, whose δ comes with a proven lower
bound, the true profile's curve is also bracketed from above, and the grid is refined until
the bracket of every requested attack bound is within ``rtol`` (or the evaluation budget is
spent): the remaining gap is stated.

:func:`gdp_curve` is the exact μ-GDP curve and :func:`pair_curve` the curve of a bare
(ε, δ) pair. :meth:`RiskCurve.bounds` turns any of them into the rows ``dpcalc risk`` prints.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from dpcalc import _validate as v
from dpcalc._numerics import round_down, round_up
from dpcalc.errors import ParameterError
from dpcalc.events import Event
from dpcalc.risk import tradeoff as t

__all__ = ["RiskCurve", "curve_from_accountant", "gdp_curve", "pair_curve", "tpr_bound_at", "DEFAULT_FPRS",
           "PROFILE_SOURCE", "RISK_FPR"]

#: the FPR of the one-number risk summary (``epsilon --risk``, ``train --risk``)
RISK_FPR = 1e-3

#: FPRs at which ``dpcalc risk`` always reports the TPR bound
DEFAULT_FPRS = (1e-4, 1e-3, 1e-2, 1e-1)
#: FPR grid on which the curve gap is measured and plotted
_ALPHA_GRID = np.unique(np.concatenate([np.logspace(-6, 0, 241), np.linspace(0.0, 1.0, 201)]))
PROFILE_SOURCE = ("trade-off envelope of certified privacy-profile points: Kairouz, Oh, Viswanath "
                  "2015 Thm 2.1; Dong, Roth, Su 2022 Prop 2.5 and Prop 2.12")
_GDP_SOURCE = "exact μ-GDP trade-off G_μ(α) = Φ(Φ⁻¹(1−α) − μ): Dong, Roth, Su 2022 Def 2.7"
_PAIR_SOURCE = "f_{ε,δ}: Kairouz, Oh, Viswanath 2015 Thm 2.1; Dong, Roth, Su 2022 Prop 2.5"
_RDP_SOURCE = ("Rényi DP of each binary test (data processing, both orders): Balle, Barthe, Gaboardi, "
               "Hsu, Sato 2020 §3; Mironov 2017")


@dataclass(frozen=True)
class RiskCurve:
    """A certified lower bound f of the trade-off function, with what produced it.

    Attributes:
        method: ``pld``, ``rdp``, ``ma``, ``gdp`` (an accountant's profile), ``gdp-exact``
            (μ-GDP) or ``epsilon-delta`` (one pair).
        certified: True iff every bound is proven (``gdp`` on sampled steps: False).
        epsilons, deltas: the profile points (ε_i, δ_i), δ_i certified upper bounds, shape (k,).
        deltas_lower: proven lower bounds of δ(ε_i) (pld), else None.
        mu: μ for the exact GDP curve, else None.
        rdp: ``(orders, values)`` of an RDP curve also constraining the curve (the accountant's
            :meth:`~dpcalc.accounting.base.Accountant.rdp_curve`, when it declares
            :attr:`~dpcalc.accounting.base.Accountant.rdp_tradeoff`), else None.
        source: papers and results the numbers come from.
        evaluations: accountant calls made for the profile.
        notes: sentences for the reader (how the grid was chosen, the gap, ...).
    """

    method: str
    certified: bool
    epsilons: tuple[float, ...] = ()
    deltas: tuple[float, ...] = ()
    deltas_lower: tuple[float, ...] | None = None
    mu: float | None = None
    rdp: tuple[tuple[float, ...], tuple[float, ...]] | None = None
    source: str = ""
    evaluations: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)

    # ------------------------------------------------------------------ curves
    def tpr(self, alpha: ArrayLike) -> np.ndarray:
        """Certified upper bound on the TPR of any membership test at FPR ``alpha`` (shape kept)."""
        a = np.asarray(alpha, dtype=float)
        if self.mu is not None:
            out = t.gdp_tpr(a, self.mu)
            return np.minimum(1.0, round_up(out, 64.0))  # ndtr/ndtri: a few ulps each
        out = t.envelope_tpr(a, self.epsilons, self.deltas)
        if self.rdp is not None:
            out = np.minimum(out, t.rdp_tpr(a.reshape(-1), *self.rdp).reshape(a.shape))
        # the envelope is a few float operations per point: 16 ulps cover its evaluation
        return np.minimum(1.0, round_up(out, 16.0))

    def tradeoff(self, alpha: ArrayLike) -> np.ndarray:
        """The certified lower envelope f(α) = 1 − :meth:`tpr` (type-II error)."""
        return 1.0 - self.tpr(alpha)

    def tpr_lower(self, alpha: ArrayLike) -> np.ndarray | None:
        """A lower bound on the TPR the exact privacy profile allows at FPR ``alpha`` (so the
        bracket [tpr_lower, tpr] holds the profile's own bound), or None when unknown."""
        a = np.asarray(alpha, dtype=float)
        if self.mu is not None:
            return np.maximum(0.0, round_down(t.gdp_tpr(a, self.mu), 64.0))
        if self.method == "epsilon-delta":
            return self.tpr(a)
        if self.deltas_lower is None:
            return None
        ec, dc = t.upper_envelope_points(self.epsilons, self.deltas_lower, self.deltas)
        return np.maximum(0.0, round_down(t.envelope_tpr(a, ec, dc), 16.0))

    def gap(self) -> float | None:
        """max over α of (upper − lower) trade-off envelope: how far the printed curve can be
        from the curve of the exact privacy profile (absolute, in TPR units)."""
        lo = self.tpr_lower(_ALPHA_GRID)
        if lo is None:
            return None
        return float(np.max(self.tpr(_ALPHA_GRID) - lo))

    # ------------------------------------------------------------------ scalar bounds
    def _delta_at(self, eps: float) -> tuple[float, float | None] | None:
        """(certified δ, lower δ) of the profile at a grid point equal to ``eps``, if any."""
        for i, e in enumerate(self.epsilons):
            if abs(e - eps) <= 1e-12 * max(1.0, eps):
                lo = None if self.deltas_lower is None else self.deltas_lower[i]
                return self.deltas[i], lo
        return None

    def advantage(self) -> tuple[float, float | None]:
        """(upper bound, lower bound or None) on max TPR − FPR (the total-variation distance
        δ(0), DRS Prop 2.12 at ε = 0; for pairs (e^ε − 1 + 2δ)/(e^ε + 1), KOV 2015)."""
        if self.mu is not None:
            from scipy.special import ndtr

            val = 2.0 * float(ndtr(self.mu / 2.0)) - 1.0
            return min(1.0, round_up(val, 64.0)), max(0.0, round_down(val, 64.0))
        up = min(t.pair_advantage(e, d) for e, d in zip(self.epsilons, self.deltas, strict=True))
        if self.rdp is not None:  # the Rényi region's own maximum, on the grid (concave: bounded via max + slope)
            up = min(up, _rdp_advantage(self.rdp))
        lo = None
        at0 = self._delta_at(0.0)
        if at0 is not None and at0[1] is not None:
            lo = at0[1]
        elif self.method == "epsilon-delta":
            lo = up
        return min(1.0, round_up(up, 16.0)), lo

    def prior_success(self, prior: float) -> tuple[float, float | None]:
        """(upper, lower or None) on the probability that a Bayes attacker with prior ``prior``
        of membership guesses membership right: max(π, 1−π) + min(π, 1−π)·δ(|ln(π/(1−π))|)
        (DRS Prop 2.12 at e^ε = (1−π)/π); for each certified pair the exact optimum over tests."""
        pi = v.open_unit("prior", prior)
        eps_pi = abs(math.log(pi) - math.log1p(-pi))
        base, weight = max(pi, 1.0 - pi), min(pi, 1.0 - pi)
        if self.mu is not None:
            from dpcalc.mechanisms.gaussian import gaussian_delta

            d = gaussian_delta(epsilon=eps_pi, mu=self.mu) if self.mu > 0 else 0.0
            val = base + weight * d
            return min(1.0, round_up(val, 64.0)), round_down(val, 64.0)
        up = min(t.pair_prior_success(pi, e, d) for e, d in zip(self.epsilons, self.deltas, strict=True))
        lo = None
        at = self._delta_at(eps_pi)
        if at is not None and at[1] is not None:
            lo = base + weight * at[1]
        elif self.method == "epsilon-delta":
            lo = up
        return min(1.0, round_up(up, 16.0)), lo

    def bounds(self, *, fprs: Sequence[float], priors: Sequence[float] = (), baselines: Sequence[float] = (),
               pair: tuple[float, float] | None = None) -> list[dict[str, Any]]:
        """The attack bounds as JSON-ready rows (see :func:`attack_rows`)."""
        return attack_rows(self, fprs=fprs, priors=priors, baselines=baselines, pair=pair)


def _rdp_advantage(rdp) -> float:
    """max_x (y_max(x) − x) over the Rényi region, certified: y_max is concave, so between grid
    points x_j < x_{j+1} the gain y − x is at most the larger end value plus the chord-slope
    excess; here bounded by evaluating on a fine grid and adding the worst step times the
    largest slope (1/x_j ≥ y' is not needed: y_max − x ≤ y_max(x_{j+1}) − x_j)."""
    x = np.linspace(0.0, 1.0, 401)[1:-1]
    y = t.rdp_tpr(x, *rdp)
    # on [x_j, x_{j+1}]: y(x) − x ≤ y(x_{j+1}) − x_j (y non-decreasing)
    gains = y[1:] - x[:-1]
    return float(min(1.0, max(float(np.max(gains)), float(y[0]), 1.0 - float(x[-1]))))


def attack_rows(curve: RiskCurve, *, fprs: Sequence[float], priors: Sequence[float] = (),
                baselines: Sequence[float] = (), pair: tuple[float, float] | None = None) -> list[dict[str, Any]]:
    """Rows of attack-success bounds from ``curve``, each beside the bound from the single
    (ε, δ) ``pair`` (None: no comparison).

    Row keys: ``quantity`` (``tpr_at_fpr``, ``advantage``, ``balanced_accuracy``,
    ``prior_success``, ``reconstruction``), its parameter (``fpr``, ``prior``, ``baseline``),
    ``bound`` (certified upper bound when ``certified``), ``bound_lower`` (what the exact
    profile gives at least; None when unknown), ``single_pair`` (from (ε, δ) alone),
    ``method``, ``certified``, ``source``.

    Raises:
        ParameterError: an FPR, prior or baseline outside (0, 1).
    """
    fprs = [v.open_unit("fpr", x) for x in fprs]
    priors = [v.open_unit("prior", x) for x in priors]
    baselines = [v.open_unit("baseline", x) for x in baselines]
    rows: list[dict[str, Any]] = []
    common = {"method": curve.method, "certified": curve.certified}

    def single_tpr(a: float) -> float | None:
        return None if pair is None else min(1.0, float(round_up(1.0 - t.pair_tradeoff(a, *pair), 16.0)))

    alphas = np.array(fprs + baselines, dtype=float)
    up = curve.tpr(alphas) if alphas.size else np.array([])
    lo = curve.tpr_lower(alphas) if alphas.size else None
    for j, a in enumerate(fprs):
        rows.append({"quantity": "tpr_at_fpr", "fpr": a, "bound": float(up[j]),
                     "bound_lower": None if lo is None else float(lo[j]),
                     "single_pair": single_tpr(a), **common, "source": curve.source})
    adv_up, adv_lo = curve.advantage()
    pair_adv = None if pair is None else min(1.0, round_up(t.pair_advantage(*pair), 16.0))
    rows.append({"quantity": "advantage", "bound": adv_up, "bound_lower": adv_lo,
                 "single_pair": pair_adv, **common,
                 "source": "max TPR − FPR = δ(0) (total variation): Dong, Roth, Su 2022 Prop 2.12"})
    rows.append({"quantity": "balanced_accuracy", "bound": 0.5 * (1.0 + adv_up),
                 "bound_lower": None if adv_lo is None else 0.5 * (1.0 + adv_lo),
                 "single_pair": None if pair_adv is None else 0.5 * (1.0 + pair_adv), **common,
                 "source": "(1 + advantage)/2 (prior ½)"})
    for pi in priors:
        p_up, p_lo = curve.prior_success(pi)
        rows.append({"quantity": "prior_success", "prior": pi, "bound": p_up, "bound_lower": p_lo,
                     "single_pair": None if pair is None else min(1.0, round_up(t.pair_prior_success(pi, *pair), 16.0)),
                     **common, "source": ("Bayes attacker: max(π,1−π) + min(π,1−π)·δ(|ln(π/(1−π))|), "
                                          "Dong, Roth, Su 2022 Prop 2.12")})
    for j, k in enumerate(baselines):
        i = len(fprs) + j
        rows.append({"quantity": "reconstruction", "baseline": k, "bound": float(up[i]),
                     "bound_lower": None if lo is None else float(lo[i]),
                     "single_pair": single_tpr(k), **common,
                     "source": ("reconstruction robustness γ ≤ 1 − f(κ): Hayes, Mahloujifar, Balle 2023 "
                                "(blow-up of a dominating pair); Kaissis et al. 2023")})
    return rows


# ---------------------------------------------------------------------- constructors
def pair_curve(epsilon: float, delta: float) -> RiskCurve:
    """The curve f_{ε,δ} of a mechanism known only to be (ε, δ)-DP (exact for that knowledge).

    Raises:
        ParameterError: ε < 0 or δ outside [0, 1).
    """
    e = v.nonnegative("epsilon", epsilon)
    d = v.closed_unit("delta", delta)
    if d >= 1:
        raise ParameterError("delta", "in [0, 1)", d)
    return RiskCurve("epsilon-delta", True, (e,), (d,), None, source=_PAIR_SOURCE)


def gdp_curve(mu: float) -> RiskCurve:
    """The exact trade-off curve of μ-GDP (Dong, Roth, Su 2022 Def 2.7).

    Raises:
        ParameterError: μ negative or not finite.
    """
    return RiskCurve("gdp-exact", True, mu=v.nonnegative("mu", mu), source=_GDP_SOURCE)


def _merge(grid: list[float], new: Sequence[float]) -> list[float]:
    out = sorted(set(grid) | {float(x) for x in new if x >= 0 and math.isfinite(x)})
    # drop near-duplicates (relative 1e-9)
    keep = [out[0]]
    for x in out[1:]:
        if x - keep[-1] > 1e-9 * max(1.0, x):
            keep.append(x)
    return keep


def curve_from_accountant(
    event: Event, *, accountant: str | None = None, delta: float, neighboring: str = "add-remove",
    options: Mapping[str, Any] | None = None, fprs: Sequence[float] = DEFAULT_FPRS,
    priors: Sequence[float] = (), baselines: Sequence[float] = (), rtol: float = 0.02,
    gap_tol: float = 0.005, max_evaluations: int = 24,
) -> tuple[RiskCurve, Any]:
    """The certified trade-off curve of ``event`` from a registered accountant's privacy profile.

    1. ``acc.epsilon(event, delta=delta)`` — the headline (ε, δ) pair (what ``dpcalc
       epsilon`` prints for this accountant).
    2. δ(ε) at a grid: ε = 0, 13 points up to twice the headline ε, the headline ε, and
       |ln(π/(1−π))| for each prior, evaluated by the accountant's
       :meth:`~dpcalc.accounting.base.Accountant.profile_stand_in` when it has one (pld: the
       grid step of the privacy loss fixed to twice the one the headline call settled on — one
       composition per point, on a grid half as fine: every δ is still a certified upper bound
       with a proven lower bound).
    3. Refinement: for each requested FPR/baseline whose TPR bracket (pld) is wider than
       ``rtol``·TPR — or, without a lower bound, twice around each active point — the grid
       is refined around the point that sets the bound (extended past the end when that is
       the last point), until ``max_evaluations`` profile evaluations.

    Args:
        event: the mechanism history.
        accountant: a registry name (default: the tightest certified one,
            :func:`~dpcalc.accounting.registry.default_accountant`).
        delta: δ of the headline pair, in (0, 1).
        neighboring: ``add-remove`` or ``replace``.
        options: constructor options of the accountant (``{"accuracy": 1e-3}``).
        fprs, priors, baselines: the bounds that will be read off (the grid adapts to them).
        rtol: relative TPR bracket aimed at (pld).
        gap_tol: absolute bracket of the whole curve aimed at (pld).
        max_evaluations: cap on profile evaluations.

    Returns:
        ``(RiskCurve, headline AccountingResult)``.

    Raises:
        ParameterError: a parameter out of range.
        UnsupportedEventError: the accountant cannot account for ``event``.
    """
    from dpcalc.accounting.registry import default_accountant, get_accountant

    delta = v.open_unit("delta", delta)
    accountant = default_accountant() if accountant is None else accountant
    acc = get_accountant(accountant, neighboring=neighboring, **dict(options or {}))
    acc.check(event)
    head = acc.epsilon(event, delta=delta)
    point_acc, point_note = acc.profile_stand_in(head) or (acc, "")
    cache: dict[float, tuple[float, float | None]] = {}
    # certified iff every number used is: an approximate accountant (gdp) may still certify a
    # history it computes exactly (the unsampled Gaussian), as its headline result says
    lower_known: list[bool] = []

    def evaluate(grid: list[float]) -> None:
        new = [e for e in grid if e not in cache]
        if not new:
            return
        # one call for all new points: pld composes once and reads every δ(ε) off it
        up, lo = point_acc.privacy_profile(event, new)
        lower_known.append(lo is not None)
        for i, e in enumerate(new):
            d = 1.0 if not math.isfinite(up[i]) else min(1.0, float(up[i]))
            cache[e] = (d, None if lo is None else max(0.0, float(lo[i])))

    e_head = head.epsilon if head.epsilon is not None and math.isfinite(head.epsilon) else None
    e_top = 1.25 * e_head if e_head else 4.0
    priors_eps = [abs(math.log(p) - math.log1p(-p)) for p in (v.open_unit("prior", p) for p in priors)]
    grid = _merge([0.0], list(np.linspace(0.0, e_top, 7)) + ([e_head] if e_head else []) + priors_eps)
    evaluate(grid)
    has_lower = all(lower_known)  # the accountant proves lower bounds of δ(ε) (pld)
    fixed_targets = sorted({v.open_unit("fpr", a) for a in fprs} | {v.open_unit("baseline", b) for b in baselines})
    targets = np.array(fixed_targets)
    rounds = 0
    while len(cache) < max_evaluations and targets.size:
        rounds += 1
        if has_lower and rounds > 1:  # also refine where the whole curve's bracket is widest
            cur = RiskCurve(accountant, True, tuple(grid), tuple(cache[e][0] for e in grid),
                            tuple(cache[e][1] or 0.0 for e in grid))
            widths = cur.tpr(_ALPHA_GRID) - cur.tpr_lower(_ALPHA_GRID)
            worst = int(np.argmax(widths))
            extra = [float(_ALPHA_GRID[worst])] if widths[worst] > gap_tol else []
            targets = np.array(sorted(set(fixed_targets) | set(extra)))
        eps = np.array(grid)
        dup = np.array([cache[e][0] for e in grid])
        f_i = np.maximum(0.0, np.maximum(1.0 - dup[None, :] - np.exp(np.minimum(eps, 700))[None, :] * targets[:, None],
                                         np.exp(-eps)[None, :] * (1.0 - dup[None, :] - targets[:, None])))
        active = np.argmax(f_i, axis=1)
        tpr_up = 1.0 - f_i.max(axis=1)
        if has_lower:
            dlo = [cache[e][1] for e in grid]
            ec, dc = t.upper_envelope_points(eps, [0.0 if x is None else x for x in dlo], dup)
            tpr_lo = t.envelope_tpr(targets, ec, dc)
            tol = np.where(np.isin(targets, fixed_targets), rtol * tpr_up, gap_tol)
            loose = (tpr_up - tpr_lo) > tol
        else:
            loose = np.full(targets.shape, rounds <= 2)
        new: list[float] = []
        for j in np.flatnonzero(loose):
            i = int(active[j])
            if i + 1 < len(grid):
                new.append(0.5 * (grid[i] + grid[i + 1]))
            else:
                new.append(grid[i] + max(grid[i] - grid[i - 1], 0.25 * grid[i]))
            if i > 0:
                new.append(0.5 * (grid[i - 1] + grid[i]))
        new = [x for x in _merge([], new) if x not in cache] if new else []
        if not new:
            break
        new = new[: max(0, max_evaluations - len(cache))]
        grid = _merge(grid, new)
        evaluate(grid)
        grid = [e for e in grid if e in cache]
    eps_t = tuple(grid)
    d_t = tuple(cache[e][0] for e in grid)
    lo_t = tuple(cache[e][1] or 0.0 for e in grid) if has_lower else None
    rdp = None
    source = f"{accountant}: {acc.source}; {PROFILE_SOURCE}"
    rdp_curve = acc.rdp_curve(event) if acc.rdp_tradeoff else None
    if rdp_curve is not None:
        orders, values = rdp_curve
        rdp = (tuple(float(x) for x in orders), tuple(float(x) for x in values))
        source += "; " + _RDP_SOURCE
    notes = (f"{accountant}: trade-off curve from {len(grid)} certified points (ε, δ(ε)) of the privacy "
             f"profile, ε in [0, {grid[-1]:.4g}] ({len(cache)} δ(ε) evaluations"
             + (f", {point_note}" if point_note else "") + ")",)
    curve = RiskCurve(accountant, bool(head.certified), eps_t, d_t, lo_t, rdp=rdp, source=source,
                      evaluations=len(cache) + 1, notes=notes)
    return curve, head


def tpr_bound_at(event: Event, *, accountant: str, delta: float, fpr: float = RISK_FPR,
                 neighboring: str = "add-remove", options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The one-number risk summary: the largest TPR any membership-inference test can reach at
    FPR ``fpr`` against ``event``, read off :func:`curve_from_accountant` (``fprs=(fpr,)``, the
    grid refined for that one FPR) — the ``TPR at FPR = …`` row of ``dpcalc risk``.

    Args:
        event: the mechanism history.
        accountant: a registry name. delta: δ of the headline pair, in (0, 1).
        fpr: the false-positive rate, in (0, 1) (default 10⁻³).
        neighboring: adjacency. options: the accountant's constructor options.

    Returns:
        ``{"fpr", "tpr_bound", "tpr_bound_lower", "single_pair", "certified", "method", "source"}``:
        ``tpr_bound`` a certified upper bound when ``certified`` (approximate for ``gdp``),
        ``tpr_bound_lower`` what the exact profile allows at least (pld; else None),
        ``single_pair`` the bound from the headline (ε, δ) alone.

    Raises:
        ParameterError: δ or FPR out of range.
        UnsupportedEventError: the accountant cannot account for ``event``.
    """
    fpr = v.open_unit("fpr", fpr)
    curve, head = curve_from_accountant(event, accountant=accountant, delta=delta, neighboring=neighboring,
                                        options=options, fprs=(fpr,))
    eps = head.epsilon if head.epsilon is not None else math.inf
    row = curve.bounds(fprs=[fpr], pair=(eps, delta))[0]
    return {"fpr": fpr, "tpr_bound": row["bound"], "tpr_bound_lower": row["bound_lower"],
            "single_pair": row["single_pair"], "certified": row["certified"], "method": row["method"],
            "source": row["source"]}
