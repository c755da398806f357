r"""Differentially private empirical risk minimisation (DP-ERM) for linear predictors:
output perturbation and objective perturbation, as a calculator and as a real private
logistic regression.

**Problem.** n records (xᵢ, yᵢ), ‖xᵢ‖₂ ≤ 1, yᵢ ∈ {−1, +1}; a convex loss ℓ(y·wᵀx) with
|ℓ'| ≤ L (Lipschitz) and 0 ≤ ℓ'' ≤ c (smoothness); the regularised empirical risk

    J(w; D) = (1/n) Σᵢ ℓ(yᵢ wᵀxᵢ) + (λ/2)‖w‖²,   w* = argmin J.

Logistic loss ℓ(t) = ln(1 + e^{−t}) has L = 1 and c = 1/4 (ℓ'(t) = −1/(1 + e^t),
ℓ''(t) = σ(t)σ(−t) ≤ 1/4). Neighbouring datasets differ in one record, replaced (n is
public): the adjacency of Chaudhuri, Monteleoni, Sarwate 2011 (CMS11) and Kifer, Smith,
Thakurta 2012 (KST12).

**Output perturbation** (CMS11 Alg. 1, Thm 6, Cor. 8): ‖w*(D) − w*(D')‖ ≤ Δ₂ = 2L/(nλ)
(λ-strong convexity). Releasing w* + b with density ∝ exp(−β‖b‖), β = ε/Δ₂ = nλε/(2L), is
ε-DP. Under (ε, δ): b ~ N(0, σ²I) with σ the analytic Gaussian std for Δ₂ (Balle & Wang
2018 Thm 8, :func:`dpcalc.mechanisms.gaussian.analytic_noise_std`).

**Objective perturbation, ε-DP** (CMS11 Alg. 2, Thm 9): minimise
J(w) + bᵀw/n + (Δ/2)‖w‖² with density ∝ exp(−β‖b‖), β = ε'/(2L), where

    ε' = ε − ln(1 + 2c/(nλ) + c²/(n²λ²))   (= ε − 2 ln(1 + c/(nλ))),   Δ = 0,

and when ε' ≤ 0 (the fallback branch) Δ = c/(n(e^{ε/4} − 1)) − λ and ε' = ε/2. The log
term bounds the Jacobian of the map b ↦ w (CMS11 Thm 9); the noise pays ε'.

**Objective perturbation, (ε, δ)-DP** (the Gaussian algorithm of KST12 Alg. 1: b ~ N(0, σ²I)
in the same objective). dpcalc splits ε exactly as CMS11 Alg. 2 (ε', Δ above) and calibrates
σ by a bound derived in docs/design.md §4: the two neighbours' noise vectors differ by
s = ∇ℓ(w; d) − ∇ℓ(w; d'), which lies in span(x, x') and has ‖s‖ ≤ 2L, so the privacy loss
of the noise is ≤ (2L‖Pb‖ + 2L²)/σ² with P the projection on that span of dimension ≤ 2;
‖Pb‖ ≤ σt with t = √(2 ln(1/δ)) except with probability ≤ δ (χ² tail with ≤ 2 degrees of
freedom), hence

    σ = L (t + √(t² + 2ε')) / ε'.

KST12 Alg. 1 line 5 states σ² = L²(8 ln(2/δ) + 4ε)/ε² with Δ ≥ 2c/ε (sum form: the
Jacobian takes ε/2, the noise the other ε/2); for the noise's share ε/2 the bound above needs
about twice that σ, so dpcalc does not use KST12's constant
(:func:`kst12_published_noise_std` gives it for comparison only).

**Sampling** ‖b‖-densities ∝ exp(−β‖b‖) in ℝᵈ exactly in distribution: in polar
coordinates the radius has density ∝ r^{d−1}e^{−βr}, i.e. ‖b‖ ~ Gamma(d, scale 1/β),
independent of a uniform direction (a normalised standard Gaussian vector). Hence
E‖b‖ = d/β and E‖b‖² = d(d + 1)/β². The draws are floating point (as every implementation;
the exact samplers of :mod:`dpcalc.mechanisms.discrete` are one-dimensional).

**Excess risk** (expected over the noise, for every dataset; derived in docs/design.md §4
from c-smoothness and strong convexity, the argument of CMS11 §6 before its generalisation
step): with J (c + λ)-smooth and ∇J(w*) = 0,

* output perturbation: E[J(w* + b)] − J(w*) ≤ ((c + λ)/2)·E‖b‖²;
* objective perturbation: E[J(w_priv)] − J(w*) ≤ E‖b‖²/(2n²(λ + Δ)) + ΔL²/(2λ²)
  (the minimiser of the perturbed objective is within ‖b‖/(n(λ + Δ)) of the minimiser of
  J + (Δ/2)‖w‖², and ‖w*‖ ≤ L/λ).

**Exact minimisers.** Both analyses assume the exact minimiser. The fit stops at a gradient
norm ≤ g (:data:`GRADIENT_TOL`, verified); for output perturbation dpcalc adds 2g/λ to Δ₂
(λ-strong convexity puts the computed w within g/λ of w*), so its guarantee covers the solver.
For objective perturbation the guarantee is that of the exact minimiser (as in CMS11's and
every implementation's experiments); the fit says so.
"""

from __future__ import annotations

import csv
import io
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpcalc import _validate as v
from dpcalc._numerics import round_down, round_up
from dpcalc.errors import InfeasibleError, ParameterError
from dpcalc.results import MechanismResult

__all__ = [
    "LOGISTIC_LIPSCHITZ",
    "LOGISTIC_SMOOTHNESS",
    "GRADIENT_TOL",
    "MAX_CSV_BYTES",
    "METHODS",
    "output_sensitivity",
    "output_rate",
    "objective_epsilon_prime",
    "gaussian_objective_noise_std",
    "kst12_published_noise_std",
    "gamma_norm_moments",
    "erm_noise",
    "sample_norm_noise",
    "sample_gaussian_noise",
    "Dataset",
    "read_csv_dataset",
    "scale_rows",
    "split_indices",
    "fit_logistic",
    "accuracy",
    "PrivateFit",
    "private_logistic_regression",
    "model_json",
]

#: the logistic loss ln(1 + e^{−t}) for ‖x‖ ≤ 1: |ℓ'| ≤ 1 and ℓ'' ≤ 1/4
LOGISTIC_LIPSCHITZ = 1.0
LOGISTIC_SMOOTHNESS = 0.25
#: the fit's verified gradient-norm tolerance g (the output-perturbation Δ₂ carries + 2g/λ)
GRADIENT_TOL = 1e-8
#: size limit of a --fit CSV file
MAX_CSV_BYTES = 256 * 2**20
METHODS = ("output", "objective")

SOURCE_OUTPUT = "Chaudhuri, Monteleoni, Sarwate 2011, Alg. 1, Thm 6, Cor. 8"
SOURCE_OUTPUT_GAUSS = "CMS11 Cor. 8 + Balle & Wang 2018 Thm 8 (analytic Gaussian)"
SOURCE_OBJECTIVE = "Chaudhuri, Monteleoni, Sarwate 2011, Alg. 2, Thm 9"
SOURCE_OBJECTIVE_GAUSS = "Kifer, Smith, Thakurta 2012 Alg. 1 with σ by docs/design.md §4"


# ---------------------------------------------------------------------------------------------
# closed forms


def _check_common(n: Any, lam: Any, lipschitz: Any, smoothness: Any) -> tuple[int, float, float, float]:
    n = v.count("dataset_size", n)
    lam = v.positive("lambda", lam)
    lipschitz = v.positive("lipschitz", lipschitz)
    smoothness = v.nonnegative("smoothness", smoothness)
    return n, lam, lipschitz, smoothness


def output_sensitivity(*, n: int, lam: float, lipschitz: float = LOGISTIC_LIPSCHITZ) -> float:
    """Δ₂ = 2L/(nλ): the L2 sensitivity of the exact regularised-ERM minimiser
    (CMS11 Cor. 8; replace-one neighbours, ‖x‖ ≤ 1), rounded up.

    Args:
        n: number of training records (public).
        lam: λ > 0, the weight of (λ/2)‖w‖² in J.
        lipschitz: L > 0, a bound on |ℓ'|.

    Raises:
        ParameterError: n < 1, λ ≤ 0, L ≤ 0.
    """
    n, lam, lipschitz, _ = _check_common(n, lam, lipschitz, 0.0)
    return round_up(2.0 * lipschitz / (n * lam))


def output_rate(*, epsilon: float, n: int, lam: float, lipschitz: float = LOGISTIC_LIPSCHITZ) -> float:
    """β = ε/Δ₂ = nλε/(2L) of the noise density ∝ exp(−β‖b‖) of output perturbation
    (CMS11 Alg. 1), rounded down (more noise). ε = inf gives inf (no noise).

    Raises:
        ParameterError: ε ≤ 0, n < 1, λ ≤ 0, L ≤ 0.
    """
    epsilon = v.positive("epsilon", epsilon, allow_inf=True)
    sens = output_sensitivity(n=n, lam=lam, lipschitz=lipschitz)
    return round_down(epsilon / sens)


def objective_epsilon_prime(*, epsilon: float, n: int, lam: float,
                            smoothness: float = LOGISTIC_SMOOTHNESS) -> tuple[float, float, str]:
    r"""ε' and the extra regulariser Δ of objective perturbation (CMS11 Alg. 2).

    ε' = ε − ln(1 + 2c/(nλ) + c²/(n²λ²)) with Δ = 0 when that is > 0 (branch ``"main"``);
    otherwise Δ = c/(n(e^{ε/4} − 1)) − λ and ε' = ε/2 (branch ``"fallback"``). ε' is rounded
    down and Δ up (both on the side of more privacy).

    Args:
        epsilon: ε > 0 (inf: ε' = inf, Δ = 0).
        n: number of records.
        lam: λ > 0.
        smoothness: c ≥ 0, a bound on ℓ''.

    Returns:
        (ε', Δ, branch).

    Raises:
        ParameterError: ε ≤ 0, n < 1, λ ≤ 0, c < 0.
    """
    epsilon = v.positive("epsilon", epsilon, allow_inf=True)
    n, lam, _, c = _check_common(n, lam, 1.0, smoothness)
    if math.isinf(epsilon):
        return math.inf, 0.0, "main"
    jacobian = round_up(2.0 * math.log1p(c / (n * lam)))
    eps_prime = round_down(epsilon - jacobian)
    if eps_prime > 0:
        return eps_prime, 0.0, "main"
    total = round_up(c / (n * math.expm1(epsilon / 4)))
    return round_down(epsilon / 2), round_up(total - lam), "fallback"


def gaussian_objective_noise_std(*, epsilon_noise: float, delta: float,
                                 lipschitz: float = LOGISTIC_LIPSCHITZ) -> float:
    r"""σ = L(t + √(t² + 2ε'))/ε', t = √(2 ln(1/δ)): Gaussian objective perturbation's noise
    std that makes the noise's share (ε', δ)-DP (derived in docs/design.md §4), rounded up.

    Args:
        epsilon_noise: ε' > 0, the noise's share of ε (:func:`objective_epsilon_prime`); inf: 0.
        delta: δ in (0, 1).
        lipschitz: L > 0.

    Raises:
        ParameterError: ε' ≤ 0, δ ∉ (0, 1), L ≤ 0.
    """
    eps = v.positive("epsilon", epsilon_noise, allow_inf=True)
    delta = v.open_unit("delta", delta)
    lipschitz = v.positive("lipschitz", lipschitz)
    if math.isinf(eps):
        return 0.0
    t = math.sqrt(2.0 * math.log(1.0 / delta))
    return round_up(lipschitz * (t + math.sqrt(t * t + 2.0 * eps)) / eps)


def kst12_published_noise_std(*, epsilon: float, delta: float, lipschitz: float = LOGISTIC_LIPSCHITZ) -> float:
    r"""σ = L·√(8 ln(2/δ) + 4ε)/ε, as printed in KST12 Alg. 1 line 5 (with Δ ≥ 2c/ε, sum form).

    For comparison only: dpcalc calibrates with :func:`gaussian_objective_noise_std`, which
    it can prove (docs/design.md §4); at KST12's split (noise share ε/2) that is about twice
    this value.
    """
    epsilon = v.positive("epsilon", epsilon)
    delta = v.open_unit("delta", delta)
    return lipschitz * math.sqrt(8.0 * math.log(2.0 / delta) + 4.0 * epsilon) / epsilon


def gamma_norm_moments(*, dims: int, rate: float) -> tuple[float, float]:
    """(E‖b‖, E‖b‖²) = (d/β, d(d + 1)/β²) for the density ∝ exp(−β‖b‖) in ℝᵈ (‖b‖ ~ Gamma(d, 1/β));
    inf when β underflows to 0, (0, 0) for β = inf (no noise)."""
    if rate == 0:
        return math.inf, math.inf
    if math.isinf(rate):
        return 0.0, 0.0
    mean = dims / rate
    return mean, mean * ((dims + 1.0) / rate)


def _gaussian_norm_mean(dims: int, sigma: float) -> float:
    """E‖b‖ = σ√2·Γ((d + 1)/2)/Γ(d/2) for b ~ N(0, σ²Iᵈ)."""
    return sigma * math.sqrt(2.0) * math.exp(math.lgamma((dims + 1) / 2) - math.lgamma(dims / 2))


def erm_noise(*, method: str, epsilon: float, delta: float | None = None, n: int, dims: int, lam: float,
              lipschitz: float = LOGISTIC_LIPSCHITZ, smoothness: float = LOGISTIC_SMOOTHNESS,
              beta: float = 0.05) -> MechanismResult:
    r"""The noise of output or objective perturbation and the excess-risk bound it buys.

    ε-DP (``delta`` None or 0): noise density ∝ exp(−β‖b‖) (CMS11 Alg. 1 / Alg. 2); (ε, δ):
    Gaussian noise (analytic Gaussian for output perturbation; KST12's Gaussian objective
    perturbation with σ of :func:`gaussian_objective_noise_std`).

    Args:
        method: ``"output"`` or ``"objective"``.
        epsilon: ε > 0 (the whole release).
        delta: δ in (0, 1), or None/0 for ε-DP.
        n: number of training records (public; replace-one neighbours).
        dims: d, the number of weights (features plus intercept).
        lam: λ > 0 of (λ/2)‖w‖².
        lipschitz: L, |ℓ'| ≤ L (logistic: 1 for ‖x‖ ≤ 1).
        smoothness: c, ℓ'' ≤ c (logistic: 1/4).
        beta: the printed noise-norm quantile holds with probability 1 − β.

    Returns:
        A :class:`MechanismResult` with values ``epsilon``, ``delta``, ``noise`` (``"gamma-norm"``
        or ``"gaussian"``), ``sensitivity`` (output), ``rate`` (β of exp(−β‖b‖)) or
        ``noise_std`` (σ per coordinate), ``epsilon_noise`` (ε'), ``extra_regularization``
        (Δ), ``branch``, ``expected_noise_norm``, ``noise_norm_quantile`` (‖b‖ ≤ it w.p. 1 − β)
        and ``excess_risk_bound`` (E[J(w_priv)] − J(w*), every dataset).

    Raises:
        ParameterError: any argument outside its range.
    """
    from scipy.special import gammaincinv  # light (not scipy.stats)

    method = v.choice("method", method, METHODS)
    epsilon = v.positive("epsilon", epsilon, allow_inf=True)
    gaussian = delta is not None and delta != 0
    if gaussian:
        delta = v.open_unit("delta", delta)
    n, lam, L, c = _check_common(n, lam, lipschitz, smoothness)
    dims = v.count("dims", dims)
    beta = v.open_unit("beta", beta)
    values: dict[str, Any] = {"epsilon": epsilon, "delta": delta if gaussian else 0.0,
                              "noise": "gaussian" if gaussian else "gamma-norm"}
    details: dict[str, Any] = {"n": n, "dims": dims, "regularization": lam, "lipschitz": L, "smoothness": c,
                               "adjacency": "replace one record (n public)"}
    if method == "output":
        sens = output_sensitivity(n=n, lam=lam, lipschitz=L)
        values["sensitivity"] = sens
        extra, eps_noise, branch = 0.0, epsilon, None
        if gaussian:
            from dpcalc.mechanisms.gaussian import analytic_noise_std

            sigma = 0.0 if math.isinf(epsilon) else analytic_noise_std(epsilon=epsilon, delta=delta,
                                                                        sensitivity=sens)
            source = SOURCE_OUTPUT_GAUSS
        else:
            rate = round_down(epsilon / sens)
            source = SOURCE_OUTPUT
    else:
        eps_noise, extra, branch = objective_epsilon_prime(epsilon=epsilon, n=n, lam=lam, smoothness=c)
        if gaussian:
            sigma = gaussian_objective_noise_std(epsilon_noise=eps_noise, delta=delta, lipschitz=L)
            source = SOURCE_OBJECTIVE_GAUSS
            if not math.isinf(epsilon):
                details["kst12_published_noise_std"] = kst12_published_noise_std(
                    epsilon=epsilon, delta=delta, lipschitz=L)
        else:
            rate = round_down(eps_noise / (2.0 * L))
            source = SOURCE_OBJECTIVE
    if gaussian:
        values["noise_std"] = sigma
        mean_norm = _gaussian_norm_mean(dims, sigma)
        second = dims * (sigma * sigma)
        quantile = sigma * math.sqrt(2.0 * float(gammaincinv(dims / 2.0, 1.0 - beta)))
    else:
        values["rate"] = rate
        mean_norm, second = gamma_norm_moments(dims=dims, rate=rate)
        q = float(gammaincinv(float(dims), 1.0 - beta))
        quantile = 0.0 if math.isinf(rate) else (math.inf if rate == 0 else q / rate)
    values["epsilon_noise"] = eps_noise
    values["extra_regularization"] = extra
    if branch is not None:
        values["branch"] = branch
    values["expected_noise_norm"] = round_up(mean_norm)
    values["noise_norm_quantile"] = round_up(quantile, 1e6)  # gammaincinv: ~1e-10 relative
    if method == "output":
        risk = (c + lam) / 2.0 * second
    else:
        risk = second / (2.0 * n * n * (lam + extra)) + extra * (L / lam) * (L / lam) / 2.0
    values["excess_risk_bound"] = round_up(risk)
    details["beta"] = beta
    return MechanismResult(method=method, values=values, certified=True, source=source, details=details)


# ---------------------------------------------------------------------------------------------
# samplers


def _is_generator(rng: Any) -> bool:
    return isinstance(rng, np.random.Generator)


def sample_norm_noise(dims: int, rate: float, rng: Any = None) -> np.ndarray:
    r"""A draw of b ∈ ℝᵈ with density ∝ exp(−β‖b‖): radius Gamma(d, scale 1/β) times a
    uniform direction (exact in distribution; floating point).

    Args:
        dims: d ≥ 1.
        rate: β > 0 (inf: the zero vector).
        rng: a :class:`random.Random`-like object (default: :class:`random.SystemRandom`,
            the OS CSPRNG) or a seeded :class:`numpy.random.Generator` (tests, reproducibility).

    Returns:
        float64 array of shape (d,).
    """
    dims = v.count("dims", dims)
    rate = v.positive("rate", rate, allow_inf=True)
    if math.isinf(rate):
        return np.zeros(dims)
    rng = random.SystemRandom() if rng is None else rng
    if _is_generator(rng):
        radius = float(rng.gamma(dims, 1.0 / rate))
        u = rng.standard_normal(dims)
    else:
        radius = rng.gammavariate(float(dims), 1.0 / rate)
        u = np.array([rng.normalvariate(0.0, 1.0) for _ in range(dims)])
    norm = float(np.linalg.norm(u))
    while norm == 0.0:  # probability 0; redraw rather than divide by zero
        u = rng.standard_normal(dims) if _is_generator(rng) else np.array(
            [rng.normalvariate(0.0, 1.0) for _ in range(dims)])
        norm = float(np.linalg.norm(u))
    return u * (radius / norm)


def sample_gaussian_noise(dims: int, sigma: float, rng: Any = None) -> np.ndarray:
    """A draw of N(0, σ²Iᵈ) (floating point) from the OS CSPRNG (default) or a seeded generator."""
    dims = v.count("dims", dims)
    sigma = v.nonnegative("noise_std", sigma)
    if sigma == 0:
        return np.zeros(dims)
    rng = random.SystemRandom() if rng is None else rng
    if _is_generator(rng):
        return sigma * rng.standard_normal(dims)
    return np.array([rng.normalvariate(0.0, sigma) for _ in range(dims)])


# ---------------------------------------------------------------------------------------------
# data


@dataclass(frozen=True)
class Dataset:
    """A two-class table read from CSV.

    Attributes:
        features: float64 array (m, k) of the feature columns, in file order.
        labels: int array (m,) in {−1, +1}.
        feature_names: the k feature column names.
        classes: (class mapped to −1, class mapped to +1): the label texts, sorted.
    """

    features: np.ndarray
    labels: np.ndarray
    feature_names: tuple[str, ...]
    classes: tuple[str, str]


def _fit_error(path: str, text: str) -> ParameterError:
    return ParameterError("fit", "a two-class CSV file", path, message=f"--fit {path!r}: {text}")


def read_csv_dataset(path: str, *, label: str, max_bytes: int = MAX_CSV_BYTES) -> Dataset:
    """Read a CSV file with a header row: one label column (two classes), every other column
    a number.

    Refused with a one-line :class:`ParameterError` naming the line and column: an unsafe or
    unreadable file (:func:`dpcalc._files.read_input_file`), binary or non-UTF-8 content, no
    header, duplicate column names, ``label`` not a column, no feature column, no data rows,
    a row with the wrong number of fields, a feature that is not a finite plain decimal number,
    an empty label, fewer or more than two classes.

    Args:
        path: the file (``-``: standard input).
        label: the label column's name.
        max_bytes: size limit.

    Returns:
        A :class:`Dataset`.
    """
    from dpcalc._files import read_input_file

    data = read_input_file(path, option="fit", max_bytes=max_bytes)
    nul = data.find(b"\x00")
    if nul >= 0:
        raise _fit_error(path, f"looks binary (NUL byte at offset {nul})")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise _fit_error(path, f"is not UTF-8 text (byte offset {e.start})") from None
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader, None)
        while header is not None and not any(h.strip() for h in header):
            header = next(reader, None)
        if header is None:
            raise _fit_error(path, "is empty: expected a header row and data rows")
        names = [h.strip() for h in header]
        seen: set[str] = set()
        for i, nm in enumerate(names):
            if not nm:
                raise _fit_error(path, f"header column {i + 1} has no name")
            if nm in seen:
                raise _fit_error(path, f"column name {nm!r} appears twice in the header")
            seen.add(nm)
        if label not in seen:
            shown = ", ".join(names[:8]) + (", …" if len(names) > 8 else "")
            raise ParameterError("label", "a column of the CSV header", label,
                                 message=f"--label {label!r} is not a column of {path!r} (columns: {shown})")
        li = names.index(label)
        if len(names) < 2:
            raise _fit_error(path, "has no feature column besides the label")
        rows: list[list[float]] = []
        labs: list[str] = []
        for rec in reader:
            if not any(f.strip() for f in rec):
                continue
            line = reader.line_num
            if len(rec) != len(names):
                raise _fit_error(path, f"line {line} has {len(rec)} fields, the header has {len(names)}")
            lab = rec[li].strip()
            if not lab:
                raise _fit_error(path, f"line {line}, column {label!r}: empty label")
            vals = []
            for j, f in enumerate(rec):
                if j == li:
                    continue
                try:
                    x = v.parse_number(f)
                except ValueError:
                    raise _fit_error(path, f"line {line}, column {names[j]!r}: {f.strip()[:40]!r} is not a "
                                           "number (plain decimal such as 0.5 or 1e-5)") from None
                if not math.isfinite(x):
                    raise _fit_error(path, f"line {line}, column {names[j]!r}: {f.strip()[:40]!r} is not finite")
                vals.append(x)
            rows.append(vals)
            labs.append(lab)
    except csv.Error as e:
        raise _fit_error(path, f"line {reader.line_num}: malformed CSV ({e})") from None
    if not rows:
        raise _fit_error(path, "has no data rows (only a header)")
    classes = sorted(set(labs))
    if len(classes) != 2:
        shown = ", ".join(repr(c) for c in classes[:5]) + (", …" if len(classes) > 5 else "")
        raise ParameterError("label", "a column with exactly two classes", label, message=(
            f"--label column {label!r} has {len(classes)} class{'es' if len(classes) != 1 else ''} "
            f"({shown}); dpcalc erm fits two-class logistic regression"))
    y = np.where(np.array(labs) == classes[1], 1, -1)
    feats = tuple(nm for j, nm in enumerate(names) if j != li)
    return Dataset(np.asarray(rows, dtype=float).reshape(len(rows), len(feats)), y, feats,
                   (classes[0], classes[1]))


def scale_rows(features: np.ndarray, *, norm_bound: float | None = None) -> tuple[np.ndarray, str]:
    """Map every row to a vector z of norm ≤ 1 by a fixed per-record rule (no statistic of the
    data is used, so neighbouring datasets differ in one z only).

    Rule: the feature vector x is clipped to L2 norm B and divided by B (``norm_bound`` B),
    or divided by its own L2 norm (``norm_bound`` None; the zero vector stays 0); then the
    constant 1 (intercept) is appended and the row divided by √2.

    Args:
        features: (m, k) array.
        norm_bound: B > 0 or None.

    Returns:
        (Z of shape (m, k + 1) with ‖zᵢ‖ ≤ 1, the rule in one sentence).
    """
    x = np.asarray(features, dtype=float)
    # the L2 norm without overflow for entries up to 1e308: max|x| · ‖x / max|x|‖
    top = np.max(np.abs(x), axis=1) if x.shape[1] else np.zeros(x.shape[0])
    safe = np.where(top > 0, top, 1.0)
    norms = top * np.linalg.norm(x / safe[:, None], axis=1)
    if norm_bound is None:
        x = x / np.where(norms > 0, norms, 1.0)[:, None]
        rule = "each row's features divided by their L2 norm"
    else:
        b = v.positive("norm_bound", norm_bound)
        x = x / np.maximum(norms, b)[:, None]  # = x·min(1, B/‖x‖)/B
        rule = f"each row's features clipped to L2 norm {b:g} and divided by {b:g}"
    z = np.hstack([x, np.ones((x.shape[0], 1))]) / math.sqrt(2.0)
    # rounding may leave a norm of 1 + 1e-16: shrink those rows onto the ball
    zn = np.linalg.norm(z, axis=1)
    z = z / np.maximum(zn, 1.0)[:, None]
    over = np.linalg.norm(z, axis=1) > 1.0
    z[over] *= 1.0 - 4 * 2.0**-52
    return z, rule + ", then a constant 1 (intercept) appended and the row divided by √2 (‖z‖ ≤ 1)"


def split_indices(m: int, *, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A random train/test split of m rows (a public seed: the split uses no data value).

    Returns:
        (train indices, test indices), each non-empty.

    Raises:
        ParameterError: fewer than 2 rows, or a fraction leaving one side empty.
    """
    test_fraction = v.open_unit("test_fraction", test_fraction)
    n_test = int(round(m * test_fraction))
    if m < 2 or n_test < 1 or n_test > m - 1:
        raise ParameterError("test_fraction", "leaving at least one training and one test row", test_fraction,
                             message=f"--test-fraction {test_fraction:g} of {m} rows leaves no "
                                     f"{'test' if n_test < 1 else 'training'} row")
    perm = np.random.default_rng(seed).permutation(m)
    return np.sort(perm[n_test:]), np.sort(perm[:n_test])


# ---------------------------------------------------------------------------------------------
# fitting


def _objective(w: np.ndarray, z: np.ndarray, y: np.ndarray, reg: float, linear: np.ndarray
               ) -> tuple[float, np.ndarray]:
    m = z @ w * y
    n = z.shape[0]
    loss = float(np.logaddexp(0.0, -m).sum() / n + 0.5 * reg * w @ w + linear @ w)
    s = 0.5 * (1.0 - np.tanh(0.5 * m))  # σ(−m), stable
    grad = -(z.T @ (y * s)) / n + reg * w + linear
    return loss, grad


def fit_logistic(z: np.ndarray, y: np.ndarray, *, reg: float, linear: np.ndarray | None = None,
                 gtol: float = GRADIENT_TOL) -> tuple[np.ndarray, float]:
    r"""argmin_w (1/n)Σ ln(1 + e^{−yᵢwᵀzᵢ}) + (reg/2)‖w‖² + linearᵀw, by scipy.optimize
    (L-BFGS, then trust-region Newton-CG and exact Newton steps to the gradient tolerance).

    Args:
        z: (n, d) rows; y: (n,) labels in {−1, +1}; reg > 0; linear: (d,) or None.
        gtol: the gradient norm the returned w must meet (verified).

    Returns:
        (w of shape (d,), ‖∇‖ at w).

    Raises:
        InfeasibleError: the tolerance is not met (not observed: the objective is smooth and
            reg-strongly convex).
    """
    from scipy.optimize import minimize

    d = z.shape[1]
    lin = np.zeros(d) if linear is None else np.asarray(linear, dtype=float)
    n = z.shape[0]

    def hessp(w, p, *_):
        s = 0.5 * (1.0 - np.tanh(0.5 * (z @ w * y)))
        return z.T @ (s * (1.0 - s) * (z @ p)) / n + reg * p

    args = (z, y, reg, lin)
    res = minimize(_objective, np.zeros(d), args=args, jac=True, method="L-BFGS-B",
                   options={"gtol": 1e-7, "maxiter": 5000})
    w = res.x
    gnorm = float(np.linalg.norm(_objective(w, *args)[1]))
    if gnorm > gtol:
        res = minimize(_objective, w, args=args, jac=True, hessp=hessp, method="trust-ncg",
                       options={"gtol": gtol / 4, "maxiter": 500})
        w = res.x
        gnorm = float(np.linalg.norm(_objective(w, *args)[1]))
    for _ in range(20):  # exact Newton steps (dense Hessian) where the trust region stalled
        if gnorm <= gtol:
            break
        grad = _objective(w, *args)[1]
        s = 0.5 * (1.0 - np.tanh(0.5 * (z @ w * y)))
        hess = (z.T * (s * (1.0 - s) / n)) @ z + reg * np.eye(d)
        w = w - np.linalg.solve(hess, grad)
        gnorm = float(np.linalg.norm(_objective(w, *args)[1]))
    if not gnorm <= gtol:
        raise InfeasibleError(f"the solver did not reach gradient norm {gtol:g} (got {gnorm:.3g}); "
                              "nothing was released")
    return w, gnorm


def accuracy(w: np.ndarray, z: np.ndarray, y: np.ndarray) -> float:
    """The fraction of rows with sign(wᵀz) = y (a score of 0 counts as +1)."""
    pred = np.where(z @ w >= 0, 1, -1)
    return float(np.mean(pred == y))


@dataclass(frozen=True)
class PrivateFit:
    """A private logistic-regression fit.

    Attributes:
        weights: (d,) the released private weights.
        noise_norm: ‖b‖ of the drawn noise (not to be published: diagnostics and tests).
        calibration: the noise parameters (:func:`erm_noise`-like values, with the Δ₂ the fit
            used for output perturbation).
        gradient_norm: the solver's verified gradient norm.
    """

    weights: np.ndarray
    noise_norm: float
    calibration: dict = field(default_factory=dict)
    gradient_norm: float = 0.0


def private_logistic_regression(z: np.ndarray, y: np.ndarray, *, method: str, epsilon: float,
                                delta: float | None = None, lam: float, rng: Any = None,
                                gtol: float = GRADIENT_TOL) -> PrivateFit:
    r"""A private L2-regularised logistic regression (rows with ‖z‖ ≤ 1, labels ±1).

    ``method="output"``: w* + b, b with density ∝ exp(−β‖b‖), β = ε/Δ₂, Δ₂ = 2/(nλ) + 2g/λ
    (g = ``gtol``, the solver's verified accuracy), or Gaussian with the analytic σ for Δ₂
    when ``delta`` is given. ``method="objective"``: argmin J(w) + bᵀw/n + (Δ/2)‖w‖² with
    ε', Δ of :func:`objective_epsilon_prime` and β = ε'/2 (or Gaussian σ of
    :func:`gaussian_objective_noise_std`). ``epsilon=inf``: no noise (the non-private fit).

    Args:
        z: (n, d) rows, ‖zᵢ‖ ≤ 1 (:func:`scale_rows`); y: (n,) in {−1, +1}.
        method: ``"output"`` or ``"objective"``.
        epsilon: ε > 0 or inf; delta: δ in (0, 1) or None for ε-DP.
        lam: λ > 0.
        rng: OS CSPRNG by default; a seeded :class:`numpy.random.Generator` for tests.
        gtol: solver gradient tolerance g.

    Returns:
        A :class:`PrivateFit`.

    Raises:
        ParameterError: bad arguments or rows of norm > 1; InfeasibleError: solver failure.
    """
    method = v.choice("method", method, METHODS)
    epsilon = v.positive("epsilon", epsilon, allow_inf=True)
    lam = v.positive("lambda", lam)
    z = np.asarray(z, dtype=float)
    y = np.asarray(y)
    n, d = z.shape
    if n < 1 or not np.all(np.isin(y, (-1, 1))) or y.shape != (n,):
        raise ParameterError("labels", "n labels in {-1, +1}", None)
    if float(np.max(np.linalg.norm(z, axis=1))) > 1.0:
        raise ParameterError("rows", "of L2 norm <= 1", None, message="rows must have L2 norm <= 1 (scale_rows)")
    gaussian = delta is not None and delta != 0
    L = LOGISTIC_LIPSCHITZ
    cal: dict[str, Any] = {"method": method, "epsilon": epsilon, "delta": delta if gaussian else 0.0,
                           "noise": "gaussian" if gaussian else "gamma-norm", "n": n, "dims": d, "regularization": lam}
    if method == "output":
        w_star, gnorm = fit_logistic(z, y, reg=lam, gtol=gtol)
        sens = round_up(2.0 * L / (n * lam) + 2.0 * gtol / lam)
        cal["sensitivity"] = sens
        if gaussian:
            from dpcalc.mechanisms.gaussian import analytic_noise_std

            delta = v.open_unit("delta", delta)
            sigma = 0.0 if math.isinf(epsilon) else analytic_noise_std(epsilon=epsilon, delta=delta,
                                                                        sensitivity=sens)
            cal["noise_std"] = sigma
            b = sample_gaussian_noise(d, sigma, rng)
        else:
            rate = round_down(epsilon / sens)
            cal["rate"] = rate
            b = sample_norm_noise(d, rate, rng)
        return PrivateFit(w_star + b, float(np.linalg.norm(b)), cal, gnorm)
    eps_prime, extra, branch = objective_epsilon_prime(epsilon=epsilon, n=n, lam=lam,
                                                       smoothness=LOGISTIC_SMOOTHNESS)
    cal.update(epsilon_noise=eps_prime, extra_regularization=extra, branch=branch)
    if gaussian:
        delta = v.open_unit("delta", delta)
        sigma = gaussian_objective_noise_std(epsilon_noise=eps_prime, delta=delta, lipschitz=L)
        cal["noise_std"] = sigma
        b = sample_gaussian_noise(d, sigma, rng)
    else:
        rate = round_down(eps_prime / (2.0 * L))
        cal["rate"] = rate
        b = sample_norm_noise(d, rate, rng)
    w, gnorm = fit_logistic(z, y, reg=lam + extra, linear=b / n, gtol=gtol)
    return PrivateFit(w, float(np.linalg.norm(b)), cal, gnorm)


def model_json(fit: PrivateFit, *, feature_names: Sequence[str], classes: Sequence[str], rule: str,
               norm_bound: float | None) -> dict:
    """The saved model: weights by name (intercept last), the classes, the scaling rule and
    the privacy calibration (everything needed to apply it; no data)."""
    w = [float(x) for x in fit.weights]
    return {"model": "logistic-regression", "classes": {"-1": classes[0], "+1": classes[1]},
            "scaling": {"rule": rule, "norm_bound": norm_bound},
            "weights": dict(zip([*feature_names, "(intercept)"], w, strict=True)),
            "privacy": dict(fit.calibration)}
