r"""Local differential privacy: frequency oracles, RAPPOR, Apple's sketches and mean estimation.

One module per protocol family (``grr``, ``unary``, ``local_hashing``, ``hadamard``, ``subset``,
``rappor``, ``cms``, ``mean``); this module is the registry (:func:`make_oracle`) and the
calculations ``dpcalc ldp`` prints: the comparison of every frequency oracle at (ε, k, n)
(:func:`compare_protocols`), the inverse (:func:`epsilon_for_standard_error`) and a simulation
(:func:`simulate`). The variance printed is Var[f̂(v)] at f → 0 (Wang, Blocki, Li, Jha 2017's
approximate variance), the standard error its square root; each protocol's docstring gives
the closed form and its source.
"""

from __future__ import annotations

import math

import numpy as np

from dpcalc import _validate as v
from dpcalc.errors import InfeasibleError, ParameterError
from dpcalc.mechanisms.ldp._core import (
    FrequencyEstimate,
    FrequencyOracle,
    make_rng,
    project_simplex,
)
from dpcalc.mechanisms.ldp.cms import CountMeanSketch
from dpcalc.mechanisms.ldp.grr import GRR
from dpcalc.mechanisms.ldp.hadamard import HadamardResponse
from dpcalc.mechanisms.ldp.io import CHUNK_CELLS
from dpcalc.mechanisms.ldp.local_hashing import LocalHashing
from dpcalc.mechanisms.ldp.rappor import BasicRappor, rappor_epsilon
from dpcalc.mechanisms.ldp.subset import SubsetSelection
from dpcalc.mechanisms.ldp.unary import UnaryEncoding
from dpcalc.results import MechanismResult

__all__ = ["FREQUENCY_PROTOCOLS", "TABLE_PROTOCOLS", "make_oracle", "compare_protocols",
           "epsilon_for_standard_error", "inverse_table", "simulate", "synthetic_values", "FrequencyOracle",
           "FrequencyEstimate", "make_rng", "project_simplex", "rappor_epsilon", "MAX_EPSILON"]

#: every frequency oracle ``randomize``/``estimate`` accept
FREQUENCY_PROTOCOLS = ("grr", "sue", "oue", "olh", "blh", "hr", "ss", "rappor", "cms", "hcms")
#: the rows of the comparison table (rappor needs f, p, q: its basic form at ε is sue)
TABLE_PROTOCOLS = ("grr", "sue", "oue", "olh", "blh", "hr", "ss", "cms", "hcms")
#: the largest simulated population (the synthetic values are held in memory)
MAX_SIMULATED = 10**7
#: the largest domain ``--simulate`` accepts: the estimate keeps k counts and each block of
#: reports is at most CHUNK_CELLS cells (≈ 32 MB), whatever k
MAX_SIMULATED_DOMAIN = 1 << 16
#: the largest users × domain size ``--simulate`` accepts (every protocol's server does ~n·k work;
#: 10⁵ users × 1024 values take ~10 s for the whole table on a 2-core machine)
MAX_SIMULATED_WORK = 2 * 10**8
#: ε above this is refused (e^ε overflows the hash ranges long before; no LDP use needs more)
MAX_EPSILON = 20.0


def make_oracle(name: str, epsilon: float | None, k: int, *, rappor_f: float | None = None,
                rappor_p: float | None = None, rappor_q: float | None = None, sketch_width: int = 1024,
                sketch_hashes: int = 256, hash_seed: int = 0) -> FrequencyOracle:
    """The frequency oracle ``name`` at ε over the domain [0, k).

    Args:
        name: one of :data:`FREQUENCY_PROTOCOLS`.
        epsilon: ε > 0 (≤ :data:`MAX_EPSILON`); ignored for ``rappor`` (ε follows from f, p, q).
        k: domain size ≥ 2.
        rappor_f, rappor_p, rappor_q: RAPPOR's probabilities (``rappor`` only).
        sketch_width, sketch_hashes, hash_seed: CMS/HCMS sketch (``cms``, ``hcms`` only).

    Raises:
        ParameterError: unknown protocol, ε or k out of range (e.g. a unary encoding of 10¹²
            bits), missing RAPPOR parameters.
    """
    name = v.choice("protocol", name, FREQUENCY_PROTOCOLS)
    if name == "rappor":
        if None in (rappor_f, rappor_p, rappor_q):
            raise ParameterError("rappor_f", "given with --rappor-p and --rappor-q", None,
                                 message="rappor needs --rappor-f, --rappor-p and --rappor-q")
        return BasicRappor(k, f=rappor_f, p=rappor_p, q=rappor_q)
    eps = v.positive("epsilon", epsilon)
    if eps > MAX_EPSILON:
        raise ParameterError("epsilon", f"at most {MAX_EPSILON:g} for local DP", eps)
    if name == "grr":
        return GRR(eps, k)
    if name in ("sue", "oue"):
        return UnaryEncoding(eps, k, optimized=name == "oue")
    if name == "olh":
        return LocalHashing(eps, k)
    if name == "blh":
        return LocalHashing(eps, k, g=2)
    if name == "hr":
        return HadamardResponse(eps, k)
    if name == "ss":
        return SubsetSelection(eps, k)
    return CountMeanSketch(eps, k, width=sketch_width, hashes=sketch_hashes, hadamard=name == "hcms",
                           hash_seed=hash_seed)


def _row(o: FrequencyOracle, n: int) -> MechanismResult:
    var = o.variance(n)
    values = {"epsilon": o.epsilon, "variance": var, "standard_error": math.sqrt(var), "bits": o.bits}
    details: dict = {"variance_n1": o.variance(1)}
    if isinstance(o, LocalHashing):
        details["g"] = o.g
    if isinstance(o, SubsetSelection):
        details["d"] = o.d
    if isinstance(o, CountMeanSketch):
        details.update({"sketch_width": o.m, "sketch_hashes": o.kh})
    return MechanismResult(method=o.name, values=values, source=o.source, details=details)


def compare_protocols(*, epsilon: float, k: int, n: int, sketch_width: int = 1024,
                      sketch_hashes: int = 256) -> tuple[list[MechanismResult], str]:
    """Every table protocol at (ε, k, n): variance and standard error of one frequency estimate
    (f → 0), bits per report; and the recommended protocol — the smallest variance, ties
    within 1 % broken by fewer bits. A protocol that cannot run at this k (a unary encoding of
    more than 2²⁰ bits) is a not-applicable row with the reason.

    Raises:
        ParameterError: ε, k or n out of range.
    """
    n = v.count("users", n)
    rows = []
    for name in TABLE_PROTOCOLS:
        try:
            o = make_oracle(name, epsilon, k, sketch_width=sketch_width, sketch_hashes=sketch_hashes)
        except ParameterError as e:
            if e.name != "domain_size":
                raise
            rows.append(MechanismResult(method=name, values={"epsilon": float(epsilon), "variance": None,
                                                             "standard_error": None, "bits": None},
                                        applicable=False, reason=e.message))
            continue
        rows.append(_row(o, n))
    ok = [r for r in rows if r.applicable]
    best = min(r["variance"] for r in ok)
    near = [r for r in ok if r["variance"] <= best * 1.01]
    return rows, min(near, key=lambda r: r["bits"]).method


def epsilon_for_standard_error(*, protocol: str, target: float, k: int, n: int,
                               sketch_width: int = 1024, sketch_hashes: int = 256) -> float:
    """The smallest ε (to 1e-6 relative, rounded up) at which ``protocol``'s standard error of one
    frequency estimate (f → 0) at n users is ≤ ``target``. Grid over [1e-4, 20] then bisection
    in the first cell that meets the target (olh's integer hash range makes its error not
    monotone in ε); the answer is checked against the target.

    Raises:
        ParameterError: bad arguments.
        InfeasibleError: even ε = 20 misses the target (more users needed).
    """
    target = v.positive("target_standard_error", target)
    n = v.count("users", n)

    def se(e: float) -> float:
        return math.sqrt(make_oracle(protocol, e, k, sketch_width=sketch_width,
                                     sketch_hashes=sketch_hashes).variance(n))

    grid = np.geomspace(1e-4, MAX_EPSILON, 400)
    ok = [e for e in grid if se(float(e)) <= target]
    if not ok:
        raise InfeasibleError(f"{protocol} cannot reach a standard error of {target:g} with {n:,} users "
                              f"at any ε ≤ {MAX_EPSILON:g} (it reaches {se(MAX_EPSILON):.3g}); more users needed")
    hi = float(ok[0])
    i = int(np.searchsorted(grid, hi))
    lo = float(grid[i - 1]) if i > 0 else hi / 2
    while hi - lo > 1e-6 * hi:
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if se(mid) <= target else (mid, hi)
    assert se(hi) <= target
    return hi


def inverse_table(*, target: float, k: int, n: int) -> tuple[list[MechanismResult], str | None]:
    """For every table protocol, the ε its standard error needs (:func:`epsilon_for_standard_error`)
    with the variance, standard error and bits at that ε; a protocol that cannot run at this k or
    reach the target is a not-applicable row with the reason. The recommended protocol: the
    smallest ε, ties within 1 % broken by fewer bits (None when no protocol reaches the target).

    Raises:
        ParameterError: bad arguments.
    """
    rows = []
    for name in TABLE_PROTOCOLS:
        try:
            e = epsilon_for_standard_error(protocol=name, target=target, k=k, n=n)
        except (ParameterError, InfeasibleError) as err:
            if isinstance(err, ParameterError) and err.name != "domain_size":
                raise
            rows.append(MechanismResult(method=name, values={"epsilon": None, "variance": None,
                                                             "standard_error": None, "bits": None},
                                        applicable=False, reason=getattr(err, "message", None) or str(err)))
            continue
        rows.append(_row(make_oracle(name, e, k), n))
    ok = [r for r in rows if r.applicable]
    if not ok:
        return rows, None
    low = min(r["epsilon"] for r in ok)
    return rows, min((r for r in ok if r["epsilon"] <= low * 1.01), key=lambda r: r["bits"]).method


def synthetic_values(distribution: str, k: int, n: int, rng: np.random.Generator,
                     *, zipf_s: float = 1.1) -> np.ndarray:
    """n values in [0, k): ``zipf`` (Pr[v] ∝ (v + 1)^{−s}) or ``uniform``."""
    distribution = v.choice("distribution", distribution, ("zipf", "uniform"))
    if distribution == "uniform":
        return rng.integers(0, k, size=n, dtype=np.int64)
    w = (np.arange(1, k + 1, dtype=float)) ** (-zipf_s)
    return rng.choice(k, size=n, p=w / w.sum()).astype(np.int64)


def simulate(o: FrequencyOracle, *, n: int, distribution: str, rng: np.random.Generator,
             block: int = 1 << 16) -> dict[str, float]:
    """Randomize n synthetic values, estimate, and compare the empirical mean squared error over
    the k categories with the formula's mean variance Σ_v Var[f̂(v)]/k at the true fractions.

    Returns:
        ``{"empirical_mse", "formula_mean_variance", "ratio"}``.

    Raises:
        ParameterError: n above :data:`MAX_SIMULATED`, k above :data:`MAX_SIMULATED_DOMAIN`.
    """
    n = v.count("users", n)
    if n > MAX_SIMULATED:
        raise ParameterError("users", f"at most {MAX_SIMULATED:.0e} with --simulate".replace("+", ""), n)
    if o.k > MAX_SIMULATED_DOMAIN:
        raise ParameterError("domain_size", f"at most {MAX_SIMULATED_DOMAIN:,} with --simulate", o.k)
    if n * o.k > MAX_SIMULATED_WORK:
        raise ParameterError("users", f"at most {MAX_SIMULATED_WORK // o.k:,} with --simulate at "
                                      f"--domain-size {o.k:,} (users × domain ≤ {MAX_SIMULATED_WORK:.0e})"
                             .replace("+", ""), n)
    block = max(1, min(block, CHUNK_CELLS // o.k))  # a block of reports' supports: ≤ CHUNK_CELLS cells
    x = synthetic_values(distribution, o.k, n, rng)
    agg = None
    for s in range(0, n, block):
        part = o.support(o.randomize(x[s:s + block], rng))
        agg = part if agg is None else agg + part
    est = o.estimate(agg, n)
    true = np.bincount(x, minlength=o.k) / n
    mse = float(np.mean((est.estimates - true) ** 2))
    formula = float(np.mean([o.variance(n, float(f)) for f in true]))
    return {"empirical_mse": mse, "formula_mean_variance": formula, "ratio": mse / formula}

