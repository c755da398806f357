r"""Every applicable composition bound for one sequence of mechanisms (``dpcalc compose``).

:func:`compose` takes a parsed sequence (:class:`MechanismSpec` items) and a target
(total δ to get ε, or ε to get δ) and returns one :class:`MethodResult` per method:

=========  ==========================================================  ===========
method     what                                                        certified
=========  ==========================================================  ===========
basic      Σε_i, Σδ_i (Dwork & Roth 2014 Thm 3.16)                     yes
advanced   Dwork–Rothblum–Vadhan 2010 (DR14 Thm 3.20), identical       yes
           mechanisms only
kov        Kairouz–Oh–Viswanath 2015 Thm 3.4/3.5 closed form           yes
optimal    KOV 2015 Thm 3.3 / Murtagh–Vadhan 2016 (exact or numeric    yes
           certified bracket)
ma, rdp,   the registered accountants on the mechanisms themselves     per result
pld, gdp   (known mechanisms; gdp is a CLT approximation)
zcdp       Bun & Steinke 2016 (pure DP and unsampled Gaussians)        yes
=========  ==========================================================  ===========

**Known mechanisms under the generic theorems.** A Laplace mechanism with ε is
ε-DP. A Gaussian with noise multiplier σ is (ε₀(δ₀), δ₀)-DP for every δ₀ on its exact
curve (Balle & Wang 2018, μ = 1/σ); Poisson sampling at rate q amplifies this to
(ln(1 + q(e^{ε₀} − 1)), qδ₀) (Balle, Barthe, Gaboardi 2018 Thm 8). The per-step δ₀ is
a free choice: it is chosen (one δ₀ shared by all Gaussian items) to minimise each
method's result, so every generic row is the best that theorem gives for these
mechanisms. Every δ₀ yields a valid bound, so the optimised value is certified.

All mechanisms use add/remove adjacency (sensitivity 1 for the noise multiplier).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpcalc import _validate as v
from dpcalc.errors import DpcalcError, ParameterError
from dpcalc.events import (
    ComposedEvent,
    EpsilonDeltaEvent,
    Event,
    GaussianEvent,
    LaplaceEvent,
    PoissonSampledEvent,
    SelfComposedEvent,
)
from dpcalc.results import MethodResult

__all__ = [
    "MechanismSpec",
    "MethodResult",
    "ComposeReport",
    "METHODS",
    "SOURCES",
    "compose",
    "parse_spec",
    "load_spec_file",
    "sequence_event",
    "steps_grid_counts",
    "privacy_curves",
]

METHODS = ("basic", "advanced", "kov", "optimal", "ma", "rdp", "zcdp", "pld", "gdp")
ACCOUNTANT_METHODS = ("ma", "rdp", "pld", "gdp")
MECHANISMS = ("dp", "gaussian", "laplace")

SOURCES = {
    "basic": "Dwork & Roth 2014, Thm 3.16",
    "advanced": "Dwork, Rothblum, Vadhan 2010; Dwork & Roth 2014, Thm 3.20",
    "kov": "Kairouz, Oh, Viswanath 2015, Thm 3.4/3.5",
    "optimal": "Kairouz, Oh, Viswanath 2015, Thm 3.3; Murtagh & Vadhan 2016, Thm 1.5",
    "zcdp": "Bun & Steinke 2016, Prop 1.4/1.6; Canonne, Kamath, Steinke 2020, Prop 12",
    "ma": "Abadi et al. 2016, Thm 2",
    "rdp": "Mironov 2017; Mironov, Talwar, Zhang 2019",
    "pld": "Koskela et al. 2020; Doroshenko et al. 2022",
    "gdp": "Dong, Roth, Su 2019; Bu et al. 2020 (CLT, approx.)",
}

_U = float(np.finfo(float).eps)


# --------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class MechanismSpec:
    """One item of the sequence: ``count`` runs of one mechanism.

    Attributes:
        mechanism: ``"dp"`` (a generic (ε, δ)-DP mechanism), ``"gaussian"`` or ``"laplace"``.
        count: how many times it runs, ≥ 1.
        epsilon: ε of a ``dp`` or ``laplace`` mechanism (Laplace scale b = Δ₁/ε).
        delta: δ of a ``dp`` mechanism, in [0, 1).
        noise_multiplier: σ of a ``gaussian`` mechanism (noise std over L2 sensitivity).
        sample_rate: Poisson sampling rate q of a ``gaussian`` mechanism, in (0, 1].
    """

    mechanism: str
    count: int
    epsilon: float | None = None
    delta: float = 0.0
    noise_multiplier: float | None = None
    sample_rate: float = 1.0

    def __post_init__(self) -> None:
        v.choice("mechanism", self.mechanism, MECHANISMS)
        object.__setattr__(self, "count", v.count("count", self.count, minimum=1))
        if self.mechanism == "dp":
            object.__setattr__(self, "epsilon", v.nonnegative("epsilon", self.epsilon))
            d = v.closed_unit("delta", self.delta)
            if d >= 1:
                raise ParameterError("delta", "in [0, 1)", d)
            object.__setattr__(self, "delta", d)
        elif self.mechanism == "laplace":
            object.__setattr__(self, "epsilon", v.positive("epsilon", self.epsilon))
        else:
            object.__setattr__(self, "noise_multiplier", v.positive("noise_multiplier", self.noise_multiplier))
            object.__setattr__(self, "sample_rate", v.half_open_unit("sample_rate", self.sample_rate))

    def event(self) -> Event:
        """The :mod:`dpcalc.events` description of one run."""
        if self.mechanism == "dp":
            return EpsilonDeltaEvent(self.epsilon, self.delta)
        if self.mechanism == "laplace":
            return LaplaceEvent(1.0 / self.epsilon)
        g = GaussianEvent(self.noise_multiplier)
        return g if self.sample_rate == 1.0 else PoissonSampledEvent(self.sample_rate, g)

    def describe(self) -> dict:
        """The item as JSON ``inputs`` (glossary names)."""
        out: dict[str, Any] = {"mechanism": self.mechanism, "count": self.count}
        if self.mechanism == "dp":
            out.update(epsilon=self.epsilon, delta=self.delta)
        elif self.mechanism == "laplace":
            out.update(epsilon=self.epsilon)
        else:
            out.update(noise_multiplier=self.noise_multiplier, sample_rate=self.sample_rate)
        return out

    def label(self) -> str:
        if self.mechanism == "dp":
            body = f"DP(ε={self.epsilon:g}, δ={self.delta:g})"
        elif self.mechanism == "laplace":
            body = f"Laplace(ε={self.epsilon:g})"
        else:
            body = f"Gaussian(σ={self.noise_multiplier:g}" + (
                f", q={self.sample_rate:g})" if self.sample_rate < 1 else ")")
        return f"{self.count:,} × {body}"


_PARAMS = {
    "dp": {"epsilon", "delta"},
    "laplace": {"epsilon"},
    "gaussian": {"noise_multiplier", "sample_rate"},
}


def parse_spec(entries: Any, *, origin: str = "spec") -> list[MechanismSpec]:
    """Validate a list of ``{mechanism, parameters, count}`` objects (from JSON or TOML).

    Args:
        entries: a list of mappings (TOML files hold it under ``[[mechanisms]]``;
            a JSON file may be the list itself or ``{"mechanisms": [...]}``).
        origin: the name used in error messages (the option, ``spec``).

    Raises:
        ParameterError: one line naming the entry and what is wrong (unknown mechanism,
            unknown parameter, count < 1, value out of range).
    """
    if isinstance(entries, Mapping) and "mechanisms" in entries:
        entries = entries["mechanisms"]
    if not isinstance(entries, list) or not entries:
        raise ParameterError("spec", "", None, message=f"{origin} must be a non-empty list of "
                             "{mechanism, parameters, count} entries")
    out = []
    for i, entry in enumerate(entries, start=1):
        where = f"{origin} entry {i}"
        if not isinstance(entry, Mapping):
            raise ParameterError("spec", "", None, message=f"{where} must be a table/object with mechanism, parameters, count")
        extra = set(entry) - {"mechanism", "parameters", "count"}
        if extra:
            raise ParameterError("spec", "", None, message=f"{where}: unknown key(s) {', '.join(sorted(extra))} "
                                 "(allowed: mechanism, parameters, count)")
        mech = entry.get("mechanism")
        if mech not in _PARAMS:
            raise ParameterError("spec", "", None, message=f"{where}: unknown mechanism {mech!r} "
                                 f"(allowed: {', '.join(MECHANISMS)})")
        params = entry.get("parameters", {})
        if not isinstance(params, Mapping):
            raise ParameterError("spec", "", None, message=f"{where}: parameters must be a table/object")
        unknown = set(params) - _PARAMS[mech]
        if unknown:
            raise ParameterError("spec", "", None, message=f"{where}: unknown parameter(s) "
                                 f"{', '.join(sorted(unknown))} for {mech} (allowed: {', '.join(sorted(_PARAMS[mech]))})")
        try:
            out.append(MechanismSpec(mech, entry.get("count", 1), **dict(params)))
        except ParameterError as e:
            raise ParameterError("spec", "", None, message=f"{where}: {e.message}") from None
    return out


def load_spec_file(path: str) -> list[MechanismSpec]:
    """Read a JSON (``.json``) or TOML (any other suffix) spec file and :func:`parse_spec` it.

    Raises:
        ParameterError: unreadable or malformed file (one line with the parser's reason).
    """
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as e:
        raise ParameterError("spec", "", path, message=f"--spec cannot read {path}: {e.strerror}") from None
    if path.lower().endswith(".json"):
        try:
            data = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ParameterError("spec", "", path, message=f"--spec {path} is not valid JSON: {e}") from None
    else:
        try:
            import tomllib
        except ModuleNotFoundError:  # Python 3.10
            import tomli as tomllib  # type: ignore[no-redef]
        try:
            data = tomllib.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
            raise ParameterError("spec", "", path, message=f"--spec {path} is not valid TOML: {e}") from None
    return parse_spec(data, origin="--spec")


def sequence_event(sequence: Sequence[MechanismSpec]) -> Event:
    """The whole sequence as one event (``SelfComposedEvent`` per item, ``ComposedEvent`` of them)."""
    parts = tuple(SelfComposedEvent(m.event(), m.count) for m in sequence)
    return parts[0] if len(parts) == 1 else ComposedEvent(parts)


# --------------------------------------------------------------------------- results


@dataclass
class ComposeReport:
    """What :func:`compose` returns: the rows (sorted, tightest certified first) and inputs."""

    results: list[MethodResult]
    inputs: dict
    mode: str  # "epsilon" (ε at a target δ) or "delta" (δ at a target ε)
    curve: dict | None = None

    @property
    def tightest(self) -> MethodResult | None:
        """The tightest certified applicable row (None if there is none)."""
        for r in self.results:
            if r.applicable and r.certified and _value(r, self.mode) is not None and math.isfinite(_value(r, self.mode)):
                return r
        return None


def _value(r: MethodResult, mode: str) -> float | None:
    return r.epsilon if mode == "epsilon" else r.delta


def _na(method: str, reason: str) -> MethodResult:
    certified = method != "gdp"
    return MethodResult(method, None, None, certified, applicable=False, reason=reason, source=SOURCES[method],
                        accountant=method in ACCOUNTANT_METHODS)


# --------------------------------------------------------------------------- generic (ε, δ) view


def _amplify(eps: np.ndarray, q: float) -> np.ndarray:
    if q == 1.0:
        return eps
    # ln(1 + q(e^ε − 1)) = ε + ln(q + (1 − q)e^{−ε}) (stable for large ε); rounded up
    out = np.where(eps > 1, eps + np.log(q + (1 - q) * np.exp(-np.minimum(eps, 700))),
                   np.log1p(q * np.expm1(np.minimum(eps, 1.0))))
    return out * (1 + 16 * _U)


class _GenericView:
    """The sequence as (ε_i, δ_i, k_i) triples, with Gaussian items at a per-step δ₀."""

    def __init__(self, sequence: Sequence[MechanismSpec]):
        self.sequence = list(sequence)
        self.gaussian = [m for m in self.sequence if m.mechanism == "gaussian"]
        self.counts = np.array([m.count for m in self.sequence], dtype=np.int64)
        # Σ k_i q_i: the total δ the Gaussian items spend per unit of δ₀
        self.gauss_weight = float(sum(m.count * m.sample_rate for m in self.gaussian))
        self._cache: dict[float, tuple[np.ndarray, np.ndarray]] = {}

    @property
    def has_gaussian(self) -> bool:
        return bool(self.gaussian)

    def triples(self, delta0: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(ε_i, δ_i) per item, Gaussian items at per-step δ₀ (before amplification)."""
        key = -1.0 if delta0 is None else delta0
        if key in self._cache:
            return self._cache[key]
        eps, dl = [], []
        for m in self.sequence:
            if m.mechanism == "dp":
                eps.append(m.epsilon)
                dl.append(m.delta)
            elif m.mechanism == "laplace":
                eps.append(m.epsilon)
                dl.append(0.0)
            else:
                from dpcalc.mechanisms.gaussian import gaussian_epsilon

                e0 = gaussian_epsilon(delta=delta0, mu=1.0 / m.noise_multiplier)
                eps.append(float(_amplify(np.array(e0), m.sample_rate)))
                dl.append(min(m.sample_rate * delta0 * (1 + 4 * _U), 1 - 1e-16))
        out = (np.array(eps, dtype=float), np.array(dl, dtype=float))
        self._cache[key] = out
        return out

    def best(self, evaluate: Callable[[np.ndarray, np.ndarray], float], *, budget: float | None,
             ) -> tuple[float, float | None]:
        """min over δ₀ of ``evaluate(ε_i, δ_i)`` (δ₀ is None without Gaussian items).

        ``budget``: the target total δ (ε mode; δ₀ ≤ budget/Σk_iq_i) or None (δ mode).
        Candidates on a log grid, then a bounded Brent refinement around the best one.
        Every candidate is a valid bound, so the minimum is certified.
        """
        if not self.has_gaussian:
            return evaluate(*self.triples()), None
        if budget is not None:
            hi = math.log(budget / self.gauss_weight) + math.log1p(-1e-6)
        else:
            hi = math.log(0.5 / max(self.gauss_weight, 1.0))
        lo = hi - 46.0  # 20 decades below
        grid = np.linspace(lo, hi, 24)

        def f(t: float) -> float:
            val = evaluate(*self.triples(math.exp(t)))
            return val if math.isfinite(val) else 1e300

        vals = [f(t) for t in grid]
        i = int(np.argmin(vals))
        best_t, best = grid[i], vals[i]
        if best < 1e300:
            from scipy.optimize import minimize_scalar

            a, b = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
            if b > a:
                res = minimize_scalar(f, bounds=(a, b), method="bounded", options={"xatol": 1e-3})
                if res.fun < best:
                    best_t, best = float(res.x), float(res.fun)
        return (best if best < 1e300 else math.inf), math.exp(best_t)


# --------------------------------------------------------------------------- methods


def _generic_rows(view: _GenericView, *, delta: float | None, epsilon: float | None, rtol: float,
                  wanted: Sequence[str] = ("basic", "advanced", "kov", "optimal")) -> list[MethodResult]:
    from dpcalc.composition import advanced, basic, optimal

    eps_mode = delta is not None
    counts = view.counts
    rows = []

    def finish(method: str, value: float, delta0: float | None, extra: dict | None = None) -> MethodResult:
        details = dict(extra or {})
        if delta0 is not None:
            details["per_step_delta"] = delta0
            details["note"] = ("Gaussian steps enter as (ε₀(δ₀), δ₀) on their exact curve, amplified by "
                               "Poisson sampling; δ₀ chosen to minimise this bound")
        if eps_mode:
            if not math.isfinite(value):
                return MethodResult(method, None, delta, True, reason="the mechanisms' own δ already exceed the "
                                    "target δ under this theorem", source=SOURCES[method], details=details)
            return MethodResult(method, value, delta, True, source=SOURCES[method], details=details)
        return MethodResult(method, epsilon, value, True, source=SOURCES[method], details=details,
                            reason="no bound below δ = 1 at this ε" if value >= 1 else None)

    # basic
    if "basic" in wanted:
        if eps_mode:
            val, d0 = view.best(lambda e, d: basic.basic_epsilon(e, d, counts, delta=delta), budget=delta)
        else:
            val, d0 = view.best(lambda e, d: basic.basic_delta(e, d, counts, epsilon=epsilon), budget=None)
        rows.append(finish("basic", val, d0))

    # advanced (DRV): identical mechanisms only
    e_chk, d_chk = view.triples(1e-10 if view.has_gaussian else None)
    identical = len(view.sequence) == 1 or (np.all(e_chk == e_chk[0]) and np.all(d_chk == d_chk[0]))
    if "advanced" not in wanted:
        pass
    elif not identical:
        rows.append(_na("advanced", "advanced composition (DRV) needs identical (ε, δ) for every mechanism; "
                                    "see kov and optimal for heterogeneous sequences"))
    else:
        k = int(counts.sum())
        if eps_mode:
            def drv(e, d):
                return float(advanced.drv_epsilon(epsilon=float(e[0]), delta=float(d[0]), count=k, target_delta=delta))
        else:
            def drv(e, d):
                return float(advanced.drv_delta(epsilon=float(e[0]), delta=float(d[0]), count=k, target_epsilon=epsilon))

        def capped(e, d):  # a valid bound stays valid: never report more than basic composition
            b = (basic.basic_epsilon(e, d, counts, delta=delta) if eps_mode
                 else basic.basic_delta(e, d, counts, epsilon=epsilon))
            return min(drv(e, d), b)

        val, d0 = view.best(capped, budget=delta if eps_mode else None)
        drv_val = drv(*view.triples(d0))
        extra = {"capped_at_basic": True} if drv_val > val else {}
        rows.append(finish("advanced", val, d0, extra))

    # kov closed form (heterogeneous Thm 3.5)
    if "kov" in wanted:
        if eps_mode:
            val, d0 = view.best(lambda e, d: float(advanced.kov_epsilon(e, d, counts, delta=delta)), budget=delta)
        else:
            val, d0 = view.best(lambda e, d: float(advanced.kov_delta(e, d, counts, epsilon=epsilon)), budget=None)
        rows.append(finish("kov", val, d0))

    # optimal: for Gaussian items δ₀ is chosen on the KOV closed form (cheap), then the
    # optimal composition is evaluated at that δ₀ (any δ₀ gives a valid bound).
    if "optimal" not in wanted:
        return rows
    info: dict = {}

    def opt(e, d):
        r = (optimal.optimal_epsilon(e, d, counts, delta=delta, rtol=rtol) if eps_mode
             else optimal.optimal_delta(e, d, counts, epsilon=epsilon, rtol=rtol))
        info["last"] = r
        return r.value

    if view.has_gaussian:
        _, d0 = view.best(lambda e, d: float(advanced.kov_epsilon(e, d, counts, delta=delta)) if eps_mode
                          else float(advanced.kov_delta(e, d, counts, epsilon=epsilon)),
                          budget=delta if eps_mode else None)
        val = opt(*view.triples(d0))
    else:
        val, d0 = opt(*view.triples()), None
    r = info["last"]
    extra = {"evaluation": r.method}
    key = "epsilon_lower" if eps_mode else "delta_lower"
    if r.method == "numeric":
        extra[key] = r.lower
        extra["note_numeric"] = ("ε_i take many distinct values: numeric composition of the dominating "
                                 "randomized-response pairs with certified lower/upper bounds")
    extra.update({k2: v2 for k2, v2 in r.details.items() if k2 in ("atoms", "grid_step", "grid_points", "distinct_epsilons")})
    rows.append(finish("optimal", val, d0, extra))
    return rows


def _accountant_row(name: str, event: Event, *, delta: float | None, epsilon: float | None) -> MethodResult:
    from dpcalc.accounting.registry import ACCOUNTANTS, get_accountant

    if name not in ACCOUNTANTS:
        return _na(name, f"accountant '{name}' is not available in this build")
    try:
        acc = get_accountant(name)
    except ImportError as e:  # an accountant module still missing
        return _na(name, f"accountant '{name}' could not be loaded ({e})")
    try:
        acc.check(event)
        res = acc.epsilon(event, delta=delta) if delta is not None else acc.delta(event, epsilon=epsilon)
    except DpcalcError as e:
        if isinstance(e, ParameterError):
            raise
        return MethodResult(name, None, None, acc.certified, applicable=False, reason=str(e), source=SOURCES[name],
                            accountant=True)
    if not res.applicable:
        return MethodResult(name, None, None, res.certified, applicable=False, reason=res.reason, source=SOURCES[name],
                            accountant=True)
    source = res.source or SOURCES[name]
    eps_val = res.epsilon if res.epsilon is not None else math.inf
    return MethodResult(name, float(eps_val), None if res.delta is None else float(res.delta), bool(res.certified),
                        reason=res.reason, source=source, details=dict(res.details), accountant=True)


def _zcdp_row(sequence: Sequence[MechanismSpec], event: Event, *, delta: float | None, epsilon: float | None) -> MethodResult:
    """zCDP: the registered accountant if there is one, else ρ added up here."""
    from dpcalc.accounting.registry import ACCOUNTANTS

    if "zcdp" in ACCOUNTANTS:
        return _accountant_row("zcdp", event, delta=delta, epsilon=epsilon)
    rho = 0.0
    for m in sequence:
        if m.mechanism == "gaussian":
            if m.sample_rate < 1:
                return _na("zcdp", "zCDP gives no useful bound for Poisson-sampled Gaussians "
                                   "(subsampling does not amplify zCDP); see rdp")
            rho += m.count / (2 * m.noise_multiplier**2)  # Bun & Steinke 2016 Prop 1.6
        elif m.delta > 0:
            return _na("zcdp", "an (ε, δ) guarantee with δ > 0 has no zCDP bound")
        else:
            rho += m.count * m.epsilon**2 / 2  # Bun & Steinke 2016 Prop 1.4
    rho *= 1 + 8 * _U * len(sequence)
    if rho == 0:
        return MethodResult("zcdp", 0.0 if delta is not None else epsilon, delta if delta is not None else 0.0,
                            True, source=SOURCES["zcdp"], details={"rho": 0.0})
    if delta is not None:
        from dpcalc.mechanisms.conversions import zcdp_to_epsilon

        res = zcdp_to_epsilon(rho=rho, delta=delta)
        return MethodResult("zcdp", float(res.values["epsilon"]), delta, True, source=SOURCES["zcdp"],
                            details={"rho": rho, "order": res.details.get("order")})
    d, order = _zcdp_delta(rho, epsilon)
    return MethodResult("zcdp", epsilon, d, True, source=SOURCES["zcdp"], details={"rho": rho, "order": order})


def _zcdp_delta(rho: float, epsilon: float) -> tuple[float, float]:
    """δ = min_α exp((α−1)(αρ − ε))·(1 − 1/α)^α/(α − 1) (CKS 2020 Prop 12 with ε(α) = αρ), rounded up."""
    alphas = 1 + np.exp(np.linspace(-12, 12, 2001))
    logd = (alphas - 1) * (alphas * rho - epsilon) + alphas * np.log1p(-1 / alphas) - np.log(alphas - 1)
    i = int(np.argmin(logd))
    d = min(1.0, math.exp(min(0.0, float(logd[i]))) * (1 + 1e-12))
    return d, float(alphas[i])


def _sort(rows: list[MethodResult], mode: str) -> list[MethodResult]:
    def key(r: MethodResult):
        val = _value(r, mode)
        finite = val is not None and math.isfinite(val)
        if not r.applicable:
            tier = 3
        elif not finite:
            tier = 2
        elif r.certified:
            tier = 0
        else:
            tier = 1
        return (tier, val if finite else math.inf, METHODS.index(r.method))

    return sorted(rows, key=key)


def steps_grid_counts(sequence: Sequence[MechanismSpec], points: int) -> list[list[int]]:
    """Count vectors for ``points`` numbers of compositions, log-spaced up to the given counts.

    One item: k = 1 … K. Several items: every count scaled by the same factor
    (at least 1 each). Duplicates are removed; the last vector is the input itself.
    """
    points = v.count("steps_grid", points, minimum=2)
    base = np.array([m.count for m in sequence], dtype=float)
    fractions = np.geomspace(1.0 / base.max(), 1.0, points)
    vecs = np.maximum(1, np.round(fractions[:, None] * base[None, :])).astype(np.int64)
    vecs[-1] = base.astype(np.int64)  # the last vector is the input itself
    # drop repeats (the vectors are non-decreasing, so repeats are adjacent)
    keep = np.concatenate([[True], np.any(vecs[1:] != vecs[:-1], axis=1)])
    return vecs[keep].tolist()


def compose(
    sequence: Sequence[MechanismSpec],
    *,
    delta: float | None = None,
    epsilon: float | None = None,
    methods: Sequence[str] | None = None,
    steps_grid: int | None = None,
    rtol: float = 0.01,
) -> ComposeReport:
    r"""Every composition bound that applies to ``sequence``, tightest certified first.

    Args:
        sequence: the mechanisms (:class:`MechanismSpec`), in any order (composition is symmetric).
        delta: target total δ in (0, 1): each row gives ε. Exactly one of ``delta``/``epsilon``.
        epsilon: target total ε ≥ 0: each row gives δ.
        methods: subset of :data:`METHODS` (default: all).
        steps_grid: if given, also evaluate every row at this many numbers of compositions
            (:func:`steps_grid_counts`); stored in ``details["grid"]`` as ``steps`` (total
            number of mechanisms) and ``epsilon`` (or ``delta``) lists, evaluated in one
            vectorised pass; a method evaluated at a subset of the points only (pld; optimal
            with several distinct ε_i) says so in ``details["grid"]["note"]``. The last point
            is the input itself and carries the row's own value.
        rtol: relative accuracy of the numeric optimal composition (many distinct ε_i).

    Returns:
        :class:`ComposeReport`; rows that do not apply carry ``applicable=False`` and a reason.

    Raises:
        ParameterError: empty sequence, both/neither target, bad target, unknown method.
    """
    sequence = list(sequence)
    if not sequence:
        raise ParameterError("mechanism", "", None, message="give at least one mechanism "
                             "(--dp, --gaussian, --laplace or --spec)")
    if (delta is None) == (epsilon is None):
        raise ParameterError("delta", "", None, message="give exactly one of --delta (to get ε) or --eps (to get δ)")
    if delta is not None:
        delta = v.open_unit("delta", delta)
    else:
        epsilon = v.nonnegative("epsilon", epsilon)
    explicit = methods is not None
    methods = tuple(METHODS if methods is None else methods)
    for m in methods:
        v.choice("method", m, METHODS)
    mode = "epsilon" if delta is not None else "delta"
    rows = _evaluate(sequence, delta=delta, epsilon=epsilon, methods=methods, rtol=rtol,
                     guard=() if explicit else ("pld",))
    if steps_grid is not None:
        grid = steps_grid_counts(sequence, steps_grid)
        _add_grid(rows, sequence, grid, delta=delta, epsilon=epsilon, rtol=rtol)
    inputs: dict[str, Any] = {"mechanisms": [m.describe() for m in sequence]}
    if delta is not None:
        inputs["delta"] = delta
    else:
        inputs["epsilon"] = epsilon
    inputs["steps"] = int(sum(m.count for m in sequence))
    return ComposeReport(_sort(rows, mode), inputs, mode)


#: by default (no --method), pld is skipped for more distinct mechanisms than this
PLD_MAX_DISTINCT = 64


def _distinct_mechanisms(sequence: Sequence[MechanismSpec]) -> int:
    return len({(m.mechanism, m.epsilon, m.delta, m.noise_multiplier, m.sample_rate) for m in sequence})


def _evaluate(sequence, *, delta, epsilon, methods, rtol, guard=()) -> list[MethodResult]:
    """The rows of ``methods``. ``guard``: methods skipped (with the reason) when too costly
    for this sequence — pld beyond :data:`PLD_MAX_DISTINCT` distinct mechanisms."""
    rows: list[MethodResult] = []
    generic = [m for m in methods if m in ("basic", "advanced", "kov", "optimal")]
    if generic:
        view = _GenericView(sequence)
        rows += _generic_rows(view, delta=delta, epsilon=epsilon, rtol=rtol, wanted=generic)
    event = sequence_event(sequence)
    for name in methods:
        if name == "zcdp":
            rows.append(_zcdp_row(sequence, event, delta=delta, epsilon=epsilon))
        elif name == "pld" and "pld" in guard and _distinct_mechanisms(sequence) > PLD_MAX_DISTINCT:
            rows.append(_na("pld", f"not evaluated by default for {_distinct_mechanisms(sequence):,} distinct "
                                   f"mechanisms (more than {PLD_MAX_DISTINCT}): pld composes each distinct "
                                   "mechanism with its own FFT convolution, so its time grows with their number; "
                                   "ask for it with --method pld (optimal gives a certified bracket)"))
        elif name in ACCOUNTANT_METHODS:
            rows.append(_accountant_row(name, event, delta=delta, epsilon=epsilon))
    return rows


#: accountants evaluated point by point at no more than this many grid points (the others
#: are vectorised over the grid); the last grid point always reuses the row's own value
_GRID_CAP = {"pld": 5}
_GRID_CAP_OTHER = 12


def _generic_grid(sequence, grid, *, delta, epsilon, rtol, methods) -> dict:
    """The generic theorems at every count vector of ``grid`` in one vectorised pass
    (``optimal``: an ``(indices, values)`` pair, see :func:`_optimal_grid`; the others: lists).

    Gaussian items: a common set of 64 per-step δ₀ candidates (log-spaced) is converted
    once; each method takes the best candidate per grid point (each candidate is a valid
    bound, so the minimum is certified). ``optimal`` uses the candidate best for ``kov``.
    """
    from dpcalc.composition import advanced

    eps_mode = delta is not None
    cnt = np.array(grid, dtype=float)  # (m, n)
    view = _GenericView(sequence)
    if view.has_gaussian:
        qv = np.array([m.sample_rate if m.mechanism == "gaussian" else 0.0 for m in sequence])
        weight = cnt @ qv
        if eps_mode:
            top = delta / weight.min() * (1 - 1e-6)
            cands = np.geomspace(delta / weight.max() * 1e-16, top, 64)
        else:
            cands = np.geomspace(1e-30, 0.5 / max(weight.min(), 1.0), 64)
        pairs = [view.triples(float(c)) for c in cands]
        E = np.array([p[0] for p in pairs])  # (C, n)
        D = np.array([p[1] for p in pairs])
    else:
        e1, d1 = view.triples()
        E, D = e1[None, :], d1[None, :]
    cnt3 = cnt[:, None, :]
    out: dict[str, list[float]] = {}
    up = 1 + 1e-12
    e_basic = np.sum(cnt3 * E[None], axis=-1) * up  # (m, C)
    d_basic = np.sum(cnt3 * D[None], axis=-1) * up
    if eps_mode:
        basic_v = np.where(d_basic <= delta, e_basic, np.inf)
        kov_v = advanced.kov_epsilon(E[None], D[None], cnt3, delta=delta)
    else:
        basic_v = np.where(epsilon >= e_basic, np.minimum(d_basic, 1.0), 1.0)
        kov_v = advanced.kov_delta(E[None], D[None], cnt3, epsilon=epsilon)
    if "basic" in methods:
        out["basic"] = basic_v.min(axis=1).tolist()
    if "kov" in methods:
        out["kov"] = kov_v.min(axis=1).tolist()
    if "advanced" in methods:
        k = cnt.sum(axis=1)[:, None]
        if eps_mode:
            drv = advanced.drv_epsilon(epsilon=E[None, :, 0], delta=D[None, :, 0], count=k, target_delta=delta)
        else:
            drv = advanced.drv_delta(epsilon=E[None, :, 0], delta=D[None, :, 0], count=k, target_epsilon=epsilon)
        out["advanced"] = np.minimum(drv, basic_v).min(axis=1).tolist()
    if "optimal" in methods:
        out["optimal"] = _optimal_grid(E, D, cnt, np.argmin(kov_v, axis=1), delta=delta, epsilon=epsilon, rtol=rtol)
    return out


#: optimal composition with several distinct ε_i is evaluated at no more than this many grid points
_OPT_GRID_CAP = 16


def _optimal_grid(E, D, cnt, best, *, delta, epsilon, rtol):
    """``optimal`` at every grid point: one vectorised pass when every point is homogeneous
    (one distinct ε, KOV Thm 3.3: :func:`optimal.homogeneous_epsilon_many`), otherwise the
    scalar method at up to :data:`_OPT_GRID_CAP` points. Returns (indices, values)."""
    from dpcalc.composition import optimal

    eps_mode = delta is not None
    Ep, Dp = E[best], D[best]  # (m, n): per point, the per-item (ε_i, δ_i) of its best δ₀
    homogeneous = np.all(Ep == Ep[:, :1], axis=1)
    idx_all = np.arange(cnt.shape[0])
    out = np.full(cnt.shape[0], np.nan)
    if homogeneous.any():
        h = idx_all[homogeneous]
        k = cnt[h].sum(axis=1)
        log_keep = np.sum(cnt[h] * np.log1p(-Dp[h]), axis=1)
        if eps_mode:
            dt = -np.expm1(math.log1p(-delta) - log_keep)
            dt = np.where(dt > 0, dt * (1 - 16 * _U), dt)
            out[h] = optimal.homogeneous_epsilon_many(epsilons=Ep[h, 0], counts=k, delta_tildes=dt)
        else:
            dtl = optimal.homogeneous_delta_tilde_many(epsilons=Ep[h, 0], counts=k, epsilon=epsilon)
            spent = -np.expm1(log_keep)
            out[h] = np.minimum(1.0, (dtl + (1 - dtl) * spent) * (1 + 16 * _U))
    rest = idx_all[~homogeneous]
    if rest.size > _OPT_GRID_CAP:
        keep = np.unique(np.round(np.linspace(0, rest.size - 1, _OPT_GRID_CAP)).astype(int))
        rest = rest[keep]
    for p in rest:
        c = cnt[p].astype(np.int64)
        if eps_mode:
            out[p] = optimal.optimal_epsilon(Ep[p], Dp[p], c, delta=delta, rtol=rtol).value
        else:
            out[p] = optimal.optimal_delta(Ep[p], Dp[p], c, epsilon=epsilon, rtol=rtol).value
    idx = [int(i) for i in idx_all if not np.isnan(out[i])]
    return idx, [float(out[i]) for i in idx]


def _subset(n: int, cap: int) -> list[int]:
    """Up to ``cap`` indices of 0 … n−1, evenly spread, always including both ends."""
    if n <= cap:
        return list(range(n))
    return sorted({int(i) for i in np.round(np.linspace(0, n - 1, cap))})


def _accountant_grid(name, sequence, grid, *, delta, epsilon, row_value):
    """An accountant at every count vector of ``grid``.

    ``rdp``, ``ma``, ``gdp`` and the built-in ``zcdp`` are linear in the counts (RDP curves,
    log-moments, μ² and ρ add up over mechanisms: Mironov 2017 Prop 1; Abadi et al. 2016
    Thm 2.1; DRS 2019 Cor 3.3; Bun & Steinke 2016 Lemma 2.3), so each item's one-step
    curve is computed once and every grid point is one matrix product plus the conversion
    (every order/moment gives a valid bound, so the minimum over the accountant's grid of
    orders is certified; unlike the row itself it is not refined between orders).
    Other accountants (``pld``) are evaluated point by point at a subset of the grid.
    The last grid point is the row's own value.

    Returns:
        (indices into ``grid``, values, note or None).
    """
    from dpcalc.accounting.registry import get_accountant

    eps_mode = delta is not None
    cnt = np.array(grid, dtype=float)
    n = cnt.shape[0]
    items = [m.event() for m in sequence]
    vals = None
    note = None
    if name == "rdp":
        from dpcalc.accounting.rdp import _eps_per_order, _log_delta_per_order

        acc = get_accountant("rdp")
        per = np.array([acc.rdp(ev) for ev in items])  # (n_items, n_orders)
        total = cnt @ per
        if eps_mode:
            vals = _eps_per_order(acc.orders, total, math.log(delta)).min(axis=1)
        else:
            vals = np.exp(_log_delta_per_order(acc.orders, total, epsilon).min(axis=1))
        note = "grid points use the accountant's order grid (not refined between orders)"
    elif name == "ma":
        acc = get_accountant("ma")
        moments = cnt @ np.array([acc.log_moments(ev) for ev in items])  # (n, λ)
        lam = acc.lambdas
        if eps_mode:
            vals = np.maximum(((moments - math.log(delta)) / lam).min(axis=1), 0.0)
        else:
            vals = np.exp(np.minimum((moments - lam * epsilon).min(axis=1), 0.0))
        vals = np.where(np.any(moments != 0, axis=1), vals, 0.0)
    elif name == "gdp":
        from dpcalc.accounting.gdp import gdp_delta_many, gdp_epsilon_many, gdp_mu

        mu2 = np.array([gdp_mu(ev)[0] ** 2 for ev in items])
        mus = np.sqrt(cnt @ mu2)
        vals = gdp_epsilon_many(mus=mus, delta=delta) if eps_mode else gdp_delta_many(mus=mus, epsilon=epsilon)
    elif name == "zcdp" and "zcdp" not in _registered():
        rho1 = []
        for m in sequence:
            rho1.append(1 / (2 * m.noise_multiplier**2) if m.mechanism == "gaussian" else m.epsilon**2 / 2)
        rho = (cnt @ np.array(rho1)) * (1 + 8 * _U * len(sequence))
        alphas = 1 + np.exp(np.linspace(-12, 12, 2001))
        if eps_mode:
            # CKS 2020 Prop 12 with ε(α) = αρ, every α valid: the minimum over the α grid
            e = (alphas[None, :] * rho[:, None] + np.log1p(-1 / alphas)[None, :]
                 - (math.log(delta) + np.log(alphas))[None, :] / (alphas - 1)[None, :])
            vals = np.maximum(e.min(axis=1), 0.0) * (1 + 1e-12)
        else:
            # the same α grid and rounding as _zcdp_delta, for every ρ at once
            logd = ((alphas - 1)[None, :] * (alphas[None, :] * rho[:, None] - epsilon)
                    + (alphas * np.log1p(-1 / alphas) - np.log(alphas - 1))[None, :]).min(axis=1)
            vals = np.where(rho > 0, np.minimum(1.0, np.exp(np.minimum(0.0, logd)) * (1 + 1e-12)), 0.0)
    if vals is not None:
        out = [float(x) for x in vals]
        out[-1] = row_value
        return list(range(n)), out, note
    # point by point at a subset
    idx = _subset(n, _GRID_CAP.get(name, _GRID_CAP_OTHER))
    values = []
    for i in idx[:-1]:
        seq_i = [MechanismSpec(m.mechanism, c, m.epsilon, m.delta, m.noise_multiplier, m.sample_rate)
                 for m, c in zip(sequence, grid[i], strict=True)]
        sub = _evaluate(seq_i, delta=delta, epsilon=epsilon, methods=(name,), rtol=0.01)[0]
        values.append(sub.epsilon if eps_mode else sub.delta)
    values.append(row_value)
    note = (f"evaluated at {len(idx)} of the {n} grid points (one full {name} evaluation each); "
            "the plot joins them")
    return idx, values, note


def _registered() -> tuple[str, ...]:
    from dpcalc.accounting.registry import ACCOUNTANTS

    return tuple(ACCOUNTANTS)


def _add_grid(rows, sequence, grid, *, delta, epsilon, rtol) -> None:
    """Evaluate every applicable row at each count vector of ``grid`` (details["grid"])."""
    key = "epsilon" if delta is not None else "delta"
    totals = [int(sum(c)) for c in grid]
    live = [r for r in rows if r.applicable]
    generic = {r.method for r in live if r.method in ("basic", "advanced", "kov", "optimal")}
    gvals = _generic_grid(sequence, grid, delta=delta, epsilon=epsilon, rtol=rtol, methods=generic) if generic else {}
    for r in live:
        note = None
        if r.method in gvals:
            got = gvals[r.method]
            idx, values = got if isinstance(got, tuple) else (list(range(len(grid))), got)
            # the last point is the input itself: show the row's own value there (with Gaussian
            # items the row refines the per-step δ₀ beyond the grid's 64 candidates)
            values = list(values)
            values[-1] = r.epsilon if key == "epsilon" else r.delta
            if len(idx) < len(grid):
                note = (f"evaluated at {len(idx)} of the {len(grid)} grid points (several distinct ε_i: "
                        "one exact/numeric composition each)")
        else:
            row_value = r.epsilon if key == "epsilon" else r.delta
            idx, values, note = _accountant_grid(r.method, sequence, grid, delta=delta, epsilon=epsilon,
                                                 row_value=row_value)
        r.details["grid"] = {"steps": [totals[i] for i in idx],
                             key: [None if (x is None or not math.isfinite(x)) else float(x) for x in values]}
        if note:
            r.details["grid"]["note"] = note


#: methods drawn on the privacy-curve plot (the tight ones)
CURVE_METHODS = ("optimal", "pld", "rdp", "gdp")


def privacy_curves(sequence: Sequence[MechanismSpec], report: ComposeReport, *, points: int = 40) -> dict:
    """δ(ε) of the composition for the tight methods that apply.

    optimal, rdp and gdp are evaluated at ``points`` values of ε from ~0 to twice the tightest
    certified ε (ε mode) or twice the target ε (δ mode); pld is evaluated in its fast
    direction instead — ε at 16 log-spaced values of δ — and its points are kept where ε is
    in the plotted range. Returns ``{"curves": {method: {"epsilon": [...], "delta": [...]}},
    "certified": {method: bool}}`` (points without a bound are left out).
    """
    ref = None
    if report.mode == "epsilon" and report.tightest is not None:
        ref = report.tightest.epsilon
    elif report.mode == "delta":
        ref = report.inputs.get("epsilon")
    ref = ref if ref and math.isfinite(ref) and ref > 0 else 1.0
    eps_grid = np.linspace(ref / points, 2 * ref, points)
    live = [r.method for r in report.results if r.applicable and r.method in CURVE_METHODS]
    curves: dict[str, dict] = {}
    for name in live:
        if name == "pld":
            continue
        xs, ys = [], []
        for e in eps_grid:
            row = _evaluate(sequence, delta=None, epsilon=float(e), methods=(name,), rtol=0.01)[0]
            if row.applicable and row.delta is not None and row.delta > 0:
                xs.append(float(e))
                ys.append(float(row.delta))
        curves[name] = {"epsilon": xs, "delta": ys}
    if "pld" in live:
        lows = [min(c["delta"]) for c in curves.values() if c["delta"]]
        d_lo = max(min(lows) if lows else 1e-12, 1e-15)
        xs, ys = [], []
        for d in np.geomspace(d_lo, 0.5, 16):
            row = _evaluate(sequence, delta=float(d), epsilon=None, methods=("pld",), rtol=0.01)[0]
            if row.applicable and row.epsilon is not None and math.isfinite(row.epsilon) and row.epsilon <= 2 * ref:
                xs.append(float(row.epsilon))
                ys.append(float(d))
        order = np.argsort(xs)
        curves["pld"] = {"epsilon": [xs[i] for i in order], "delta": [ys[i] for i in order]}
    return {"curves": curves,
            "certified": {r.method: r.certified for r in report.results if r.method in curves}}
