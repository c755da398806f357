r"""Privacy, calibration and the DP-SGD comparison of matrix-factorization mechanisms.

The mechanism adds z ~ N(0, s²) to ``C x`` (per gradient coordinate, clip norm 1). With the
sensitivity Δ of :func:`dpcalc.mechanisms.correlated.sensitivity` (an upper bound, exact where
a theorem gives it) and the noise multiplier σ = s/Δ, one release of ``C x + z`` is the Gaussian
mechanism with μ = Δ/s = 1/σ, i.e. μ-GDP (exactly when Δ is exact, else μ ≤ 1/σ; Dong, Roth, Su 2019 Cor 2.13; Choquette-Choo
et al. ICML 2023 §2: the whole stream is one Gaussian mechanism, adaptively chosen gradients
included, Denisov et al. 2022 Thm 2.1), whose (ε, δ) curve is the exact Gaussian curve of
Balle & Wang 2018 Thm 8 (:func:`dpcalc.mechanisms.gaussian.gaussian_epsilon`). Calibration
inverts it (:func:`dpcalc.mechanisms.gaussian.analytic_noise_std`, verified, rounded up).

Neighbouring streams differ in one record's gradients, replaced by zero ("zero-out", the
relation of Denisov et al. 2022 and Choquette-Choo et al. 2023; dp_accounting's
``REPLACE_SPECIAL``), with the participation layout fixed — not add/remove: removing a record
would shift the batches. The Poisson comparison rows are add/remove (DP-SGD's relation).
Replacing a record by another doubles Δ.

Comparison rows, at the same (ε, δ):

* DP-SGD without amplification — C = I (Δ = √k): the same computation with the identity
  strategy;
* DP-SGD with Poisson sampling at rate q (default k/n: k expected participations in n steps),
  σ from the one calibration helper with the default accountant; its error counts the noise
  only (the variance of the random batch size is not included);
* amplified banded MF (Choquette-Choo et al. NeurIPS 2023, "(Amplified) banded matrix
  factorization", Thm 4): for a b-banded C, the data split into b partitions visited
  cyclically and each partition Poisson-sampled at rate p = q·b, ``C x + z`` with
  s = σ_p·max_j ‖C_{:,j}‖ is as private as DP-SGD with sampling rate p and noise multiplier
  σ_p run for ⌈n/b⌉ steps (the b-banded structure makes the rounds touching one partition
  independent). σ_p is calibrated by the same helper (the default accountant, certified).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dpcalc import _validate as v
from dpcalc.accounting.base import isolated
from dpcalc.accounting.calibrate import calibrate_dpsgd
from dpcalc.accounting.registry import default_accountant, get_accountant
from dpcalc.errors import DpcalcError, ParameterError
from dpcalc.mechanisms.correlated import (
    Participation,
    ToeplitzStrategy,
    identity_strategy,
    prefix_error,
    sensitivity,
)
from dpcalc.mechanisms.correlated.sensitivity import Sensitivity
from dpcalc.mechanisms.gaussian import SOURCE_ANALYTIC, analytic_noise_std, gaussian_epsilon
from dpcalc.results import MechanismResult

__all__ = ["MfPrivacy", "mf_privacy", "mf_compare", "SOURCE_AMPLIFIED"]

#: the largest ε at which the DP-SGD rows are calibrated (the range of ``dpcalc sigma --eps``)
MAX_COMPARED_EPSILON = 1e4

SOURCE_AMPLIFIED = ("Choquette-Choo et al. NeurIPS 2023, Thm 4 — assumes the data split into b fixed, disjoint, "
                    "equal partitions, partition i mod b visited at step i, each record of it included "
                    "independently (Poisson, rate q·b), add/remove; Δ column: C's largest column norm, the "
                    "noise scale of the reduction, not a multi-participation sensitivity")


@dataclass(frozen=True)
class MfPrivacy:
    """σ, ε and μ of one matrix-factorization mechanism.

    Attributes:
        noise_multiplier: σ = s/Δ (noise std over the sensitivity).
        epsilon: ε at ``delta`` (an upper bound).
        delta: δ.
        mu: the GDP parameter 1/σ.
        sensitivity: the :class:`Sensitivity` used.
    """

    noise_multiplier: float
    epsilon: float
    delta: float
    mu: float
    sensitivity: Sensitivity

    @property
    def noise_std(self) -> float:
        """s = σ·Δ, the std of the noise added to ``C x`` (clip norm 1)."""
        return self.noise_multiplier * self.sensitivity.value


def mf_privacy(strategy, participation: Participation, *, delta: float,
               noise_multiplier: float | None = None, epsilon: float | None = None) -> MfPrivacy:
    """ε for a given σ, or the smallest σ for a target ε, of a matrix-factorization mechanism.

    Args:
        strategy: a strategy of :mod:`dpcalc.mechanisms.correlated`.
        participation: steps n, epochs k, min-separation b.
        delta: δ in (0, 1).
        noise_multiplier: σ > 0 (noise std over the sensitivity), or None.
        epsilon: target ε > 0, or None (exactly one of the two).

    Returns:
        :class:`MfPrivacy` (σ verified: the exact Gaussian curve at μ = 1/σ meets (ε, δ)).

    Raises:
        ParameterError: bad δ, σ or ε, both or neither given, or a strategy/participation
            mismatch.
    """
    delta = v.open_unit("delta", delta)
    if (noise_multiplier is None) == (epsilon is None):
        raise ParameterError("noise_multiplier", "given, or --eps given (exactly one)", noise_multiplier,
                             message="give exactly one of --sigma and --eps")
    sens = sensitivity(strategy, participation)
    if noise_multiplier is not None:
        sigma = v.positive("noise_multiplier", noise_multiplier)
        eps = gaussian_epsilon(delta=delta, mu=1.0 / sigma)
    else:
        eps = v.positive("epsilon", epsilon)
        sigma = analytic_noise_std(epsilon=eps, delta=delta, sensitivity=1.0)
    return MfPrivacy(sigma, eps, delta, 1.0 / sigma, sens)


def _row(method: str, priv: MfPrivacy, error, *, source: str, kind: str) -> MechanismResult:
    s = priv.noise_std
    values = {
        "noise_multiplier": priv.noise_multiplier,
        "noise_std": s,
        "sensitivity": priv.sensitivity.value,
        "sensitivity_exact": priv.sensitivity.exact,
        "epsilon": priv.epsilon,
        "delta": priv.delta,
        "rmse": s * math.sqrt(error.mean),
        "max_error": s * math.sqrt(error.max),
        "total_squared_error": s * s * error.total,
    }
    details = {"kind": kind, "mu": priv.mu, "decoder": error.decoder,
               "sensitivity": priv.sensitivity.to_json(), "privacy_source": SOURCE_ANALYTIC}
    return MechanismResult(method=method, values=values, certified=True, source=source, details=details)


def _unavailable(method: str, reason: str, source: str) -> MechanismResult:
    return MechanismResult(method=method, values={"epsilon": None}, applicable=False, reason=reason,
                           source=source)


def _poisson_row(method: str, *, epsilon: float, delta: float, sample_rate: float, steps: int,
                 column_norm: float, error, source: str, kind: str) -> MechanismResult:
    """A row whose σ comes from DP-SGD with Poisson sampling (rate, steps) at (ε, δ)."""
    name = default_accountant()
    acc = get_accountant(name)
    res = isolated(acc, lambda a: calibrate_dpsgd(a, target_epsilon=epsilon, delta=delta,
                                                  sample_rate=sample_rate, steps=steps),
                   also=(DpcalcError,))
    if not res.applicable or res.noise_multiplier is None:
        return _unavailable(method, res.reason or "not evaluated", source)
    sigma = float(res.noise_multiplier)
    s = sigma * column_norm
    values = {
        "noise_multiplier": sigma,
        "noise_std": s,
        "sensitivity": column_norm,
        "sensitivity_exact": True,
        "epsilon": float(res.epsilon),
        "delta": delta,
        "rmse": s * math.sqrt(error.mean),
        "max_error": s * math.sqrt(error.max),
        "total_squared_error": s * s * error.total,
    }
    details = {"kind": kind, "accountant": name, "sample_rate": sample_rate, "steps": steps,
               "decoder": error.decoder}
    return MechanismResult(method=method, values=values, certified=bool(res.certified), source=source,
                           details=details)


def mf_compare(strategy, participation: Participation, *, delta: float,
               noise_multiplier: float | None = None, epsilon: float | None = None,
               sample_rate: float | None = None, poisson: bool = True) -> list[MechanismResult]:
    """The mechanism's row and the DP-SGD rows at the same (ε, δ) (module docstring).

    Args:
        strategy, participation, delta, noise_multiplier, epsilon: as :func:`mf_privacy`.
        sample_rate: q in (0, 1], the Poisson rate of the DP-SGD comparison (default k/n); the
            amplified banded row samples each of its b partitions at q·b (must be ≤ 1).
        poisson: include the rows that need a DP-SGD calibration (Poisson, amplified).

    Returns:
        Rows (:class:`MechanismResult`): the strategy, ``dp-sgd`` (without amplification),
        ``dp-sgd poisson`` and, for a banded Toeplitz strategy with bands ≤ the separation,
        its amplified version. ``values``: noise_multiplier, noise_std, sensitivity,
        sensitivity_exact, epsilon, delta, rmse, max_error, total_squared_error (errors per
        gradient coordinate, clip norm 1).

    Raises:
        ParameterError: as :func:`mf_privacy`; q outside (0, 1].
    """
    n, k = participation.steps, participation.epochs
    q = k / n if sample_rate is None else v.half_open_unit("sample_rate", sample_rate)
    priv = mf_privacy(strategy, participation, delta=delta, noise_multiplier=noise_multiplier,
                      epsilon=epsilon)
    err = prefix_error(strategy)
    rows = [_row(strategy.name, priv, err, source=strategy.source, kind="strategy")]
    if not 0 < priv.epsilon <= MAX_COMPARED_EPSILON:
        why = (f"ε = {priv.epsilon:.6g} is outside (0, {MAX_COMPARED_EPSILON:g}], where the DP-SGD "
               "rows are calibrated")
        rows.append(_unavailable("dp-sgd", why, "C = I"))
        if poisson:
            rows.append(_unavailable("dp-sgd poisson", why, "Poisson-sampled Gaussian"))
        return rows
    ident = identity_strategy(n)
    ident_priv = mf_privacy(ident, participation, delta=priv.delta, epsilon=priv.epsilon)
    ident_err = prefix_error(ident)
    rows.append(_row("dp-sgd", ident_priv, ident_err,
                     source="C = I, Δ = √k; Balle & Wang 2018 Thm 8", kind="dpsgd"))
    if not poisson:
        return rows
    rows.append(_poisson_row("dp-sgd poisson", epsilon=priv.epsilon, delta=priv.delta,
                             sample_rate=q, steps=n, column_norm=1.0, error=ident_err,
                             source=f"Poisson-sampled Gaussian at q = {q:.4g}, {default_accountant()} accountant",
                             kind="dpsgd_poisson"))
    if isinstance(strategy, ToeplitzStrategy) and 1 < strategy.bands <= participation.min_separation \
            and strategy.bands < n:
        b = strategy.bands
        p = q * b
        method = f"{strategy.name} amplified"
        if p > 1:
            rows.append(_unavailable(method, f"partition rate q·b = {p:.4g} > 1", SOURCE_AMPLIFIED))
        else:
            col = float(math.sqrt(float(strategy.coefs @ strategy.coefs))) * (1 + 1e-15 * b)
            rows.append(_poisson_row(method, epsilon=priv.epsilon, delta=priv.delta, sample_rate=p,
                                     steps=-(-n // b), column_norm=col, error=err,
                                     source=f"{SOURCE_AMPLIFIED}, partition rate p = q·b = {p:.4g}, {-(-n // b)} rounds",
                                     kind="amplified"))
    return rows
