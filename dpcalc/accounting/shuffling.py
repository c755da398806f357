r"""DP-SGD with shuffled and balls-in-bins batches: a certified upper bound, a lower bound,
and (balls-in-bins) a Monte Carlo estimate — a *bracket* on ε, beside the Poisson number.

Setting (Chua, Ghazi, Kamath, Kumar, Manurangsi, Sinha, Zhang, "How private are DP-SGD
implementations?", ICML 2024, §2): DP-SGD is post-processing of ABLQ (adaptive batch linear
queries): T = ⌈N/B⌉ steps per epoch, step t releases the sum over batch t of the clipped
gradients (norm ≤ C) plus N(0, σ²C²·I). **Adjacency: zero-out** (ibid.; Kairouz et al. 2021):
D′ is D with one record replaced by a ghost ⊥ whose gradient is 0. Under zero-out the batch
layout (which position falls in which batch) does not depend on the data, which is what the
arguments below need; under add/remove the layout itself changes (N ± 1 records, ⌈N/B⌉ may
change) and no analysis is claimed here. For Poisson sampling, zero-out and add/remove give
the same dominating pair (ibid. §2), so the Poisson number printed beside the bracket (the
``pld`` accountant, add/remove) is the one a user would have reported.

* ``shuffle`` — one uniformly random permutation per epoch, cut into T batches;
  ``balls-in-bins`` — each record put in one of T batches uniformly at random, per epoch
  (Chua et al., "Balls-and-bins sampling for DP-SGD", AISTATS 2025).

**Certified upper bound** (both samplers). Condition on the batch layout of all E epochs:
it is drawn independently of the data, and for a fixed layout the differing record is in
exactly one batch per epoch, so the release is the E-fold composition of the Gaussian
mechanism with sensitivity C and noise σC: exactly μ-GDP with μ = √E/σ (Dong, Roth, Su 2019
Cor 3.3; the ABLQ_D "deterministic" sampler of Chua et al. 2024). The mixture over layouts
is the same for D and D′, and the hockey-stick divergence is jointly convex, so every δ(ε)
of the sampled release is ≤ the μ-GDP curve (Balle & Wang 2018 Thm 8):
ε_upper = ε_GDP(δ; μ = √E/σ), computed by :func:`dpcalc.mechanisms.gaussian.gaussian_epsilon`.

**Lower bound** (Chua et al. 2024 §4 for one epoch, extended to E epochs by Chua et al.,
"Scalable DP-SGD: shuffling vs. Poisson subsampling", NeurIPS 2024 §3). A specific pair of
adjacent datasets in one dimension: for ``shuffle`` every other record has gradient −1 and the
differing one +1 (D) or ⊥ (D′); subtracting the known batch sums, one epoch's release is
P = (1/T)Σ_t N(2e_t, σ²I) under D and Q = (1/T)Σ_t N(e_t, σ²I) under D′ (the weights of the
mixture do not matter below). For ``balls-in-bins`` the others are 0: P = (1/T)Σ_t N(e_t, σ²I)
and Q = N(0, σ²I). Post-processing to M = max_t x_t (the "cube" sets of Chua et al. 2024) can
only lower the divergence; M has distribution function F_m(c) = Φ((c − m)/σ)·Φ(c/σ)^{T−1}.
We cut M into slices, compute each slice's exact P- and Q-mass, round its privacy loss down
onto a grid, and compose E independent epochs (reshuffled) with the PLD machinery of
:mod:`dpcalc.accounting._pld_compose` as a *lower* PMF — every step (slicing, dropping the
far tails, rounding down, the aliasing/round-off slack) lowers δ(ε), so the ε read off is a
lower bound on the sampler's true ε at δ. It is never shown as ε.

**Monte Carlo estimate** (balls-in-bins only; approximate, ``certified: false``). Chua et al.
2025 analyse the pair P_B = (1/T)Σ_t N(e_t, σ²I), Q_B = N(0, σ²I) per epoch (E-fold product),
whose privacy loss is L(x) = ln Σ_t e^{x_t/σ²} − ln T − 1/(2σ²). We draw one-epoch losses by
importance sampling (a defensive mixture of P, its exponential tilt P·e^{L}/Z — a Gaussian
mixture, sampled exactly — and laws with the true batch shifted up or down; exact weights),
histogram them as the law of L under P and, reweighted by e^{−L}, of −L under Q, compose E
epochs by FFT and read ε at δ (the larger direction), with a percentile-bootstrap confidence
interval. It is an estimate: its interval holds with the stated probability, not always.

Figures: docs/references.md; design: docs/design.md §4.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from dpcalc import _validate as v
from dpcalc._numerics import log_ndtr, round_up
from dpcalc.accounting._pld_compose import epsilon_for_delta, self_compose
from dpcalc.accounting._pld_grid import DiscretePLD, GridTooLargeError
from dpcalc.accounting.base import Accountant
from dpcalc.accounting.registry import default_accountant
from dpcalc.errors import InfeasibleError, ParameterError, UnsupportedEventError
from dpcalc.events import Event, GaussianEvent, flatten
from dpcalc.mechanisms.gaussian import gaussian_delta, gaussian_epsilon
from dpcalc.results import AccountingResult, Result

__all__ = [
    "EPOCH_ACCOUNTANT",
    "EpochGaussianAccountant",
    "SamplerResult",
    "BatchLayout",
    "batch_layout",
    "certified_upper_epsilon",
    "max_statistic_lower_epsilon",
    "shuffle_lower_epsilon",
    "balls_in_bins_lower_epsilon",
    "balls_in_bins_estimate",
    "poisson_epsilon",
    "sampler_bracket",
    "steps_bracket",
]

SOURCE_UPPER = ("each record in one batch per epoch ⇒ E-fold Gaussian, μ = √E/σ "
                "(Chua et al. 2024 §3, ABLQ_D; Dong, Roth, Su 2019 Cor 3.3)")
SOURCE_SHUFFLE_LOWER = "Chua et al. ICML 2024 §4 (cube sets), multi-epoch: Chua et al. NeurIPS 2024 §3"
SOURCE_BNB = "Chua et al. AISTATS 2025 (balls-and-bins)"
SOURCE_POISSON = "pld accountant, Poisson sampling, add/remove (= zero-out for Poisson)"
ADJACENCY = "zero-out (one record replaced by a ghost with zero gradient; Chua et al. 2024 §2)"

#: the name the certified ε of shuffled / balls-in-bins runs is reported under (``dpcalc train``):
#: :class:`EpochGaussianAccountant`, not a registry accountant
EPOCH_ACCOUNTANT = "e-fold-gaussian"

#: loss grid step (nats) of the lower-bound PMF
_H = 2e-3
#: most slices of the max statistic / FFT points of the lower bound
_MAX_SLICES = 200_000
_MAX_POINTS = 2**22
#: most bins of the one-epoch loss histogram of the Monte Carlo estimate (8 MiB of float64)
_MAX_HIST = 2**20
#: default Monte Carlo work cap: Gaussian draws (samples × epochs × steps per epoch), pilot included
DEFAULT_MC_WORK = 4e7


@dataclass(frozen=True)
class BatchLayout:
    """The schedule a trainer has: B, N, E and what follows (T = ⌈N/B⌉ steps per epoch, q = B/N)."""

    batch_size: int
    dataset_size: int
    epochs: int

    @property
    def steps_per_epoch(self) -> int:
        return -(-self.dataset_size // self.batch_size)

    @property
    def steps(self) -> int:
        return self.steps_per_epoch * self.epochs

    @property
    def sample_rate(self) -> float:
        return self.batch_size / self.dataset_size


def batch_layout(*, batch_size: Any, dataset_size: Any, epochs: Any) -> BatchLayout:
    """Validate (B, N, E) of a shuffled / balls-in-bins run.

    Args:
        batch_size: B, records per batch (expected, for balls-in-bins), 1 ≤ B ≤ N.
        dataset_size: N ≥ 1 records.
        epochs: E ≥ 1 whole passes (one permutation / one assignment per epoch).

    Raises:
        ParameterError: B = 0, B > N, E ≤ 0 or not whole.
    """
    n = v.count("dataset_size", dataset_size)
    b = v.count("batch_size", batch_size)
    if b > n:
        raise ParameterError("batch_size", f"at most dataset_size ({n:,})", b)
    e = v.count("epochs", epochs)
    return BatchLayout(b, n, e)


# ----------------------------------------------------------------------------- upper bound

def certified_upper_epsilon(*, noise_multiplier: float, epochs: int, delta: float) -> float:
    r"""Certified ε of E epochs of shuffled or balls-in-bins DP-SGD (zero-out adjacency).

    ε = ε_GDP(δ; μ = √E/σ), the exact ε of the E-fold Gaussian mechanism (Balle & Wang 2018
    Thm 8; Dong, Roth, Su 2019 Cor 3.3); an upper bound for every sampler that puts each
    record in exactly one batch per epoch with a data-independent layout (module docstring).

    Args:
        noise_multiplier: σ > 0 (noise std / clipping norm).
        epochs: E ≥ 1.
        delta: δ in (0, 1).

    Raises:
        ParameterError: a parameter out of range.
    """
    sigma = v.positive("noise_multiplier", noise_multiplier)
    e = v.count("epochs", epochs)
    delta = v.open_unit("delta", delta)
    return gaussian_epsilon(delta=delta, mu=math.sqrt(e) / sigma)


def _gaussian_runs(event: Event) -> list[tuple[float, int]]:
    """(σ, runs) of every step of ``event`` (:func:`dpcalc.events.flatten`: an epoch of a shuffled
    or balls-in-bins run is one run of its mechanism).

    Raises:
        UnsupportedEventError: a step that is not an unsampled Gaussian mechanism.
    """
    out = []
    for step, count in flatten(event):
        if not isinstance(step, GaussianEvent):
            raise UnsupportedEventError(
                f"{EPOCH_ACCOUNTANT} accounts for Gaussian mechanisms without sampling (each record in one "
                f"batch per epoch: shuffle, balls-in-bins) only, not {type(step).__name__}")
        out.append((step.noise_multiplier, count))
    return out


class EpochGaussianAccountant(Accountant):
    r"""The certified bound of the epoch samplers as an accountant: the exact ε of a composition
    of Gaussian mechanisms without sampling, which is what E epochs of ``shuffle`` or
    ``balls-in-bins`` DP-SGD are at most (:class:`dpcalc.events.EpochSampledEvent`: each epoch
    one Gaussian run; module docstring).

    The composition of E_i runs at noise multiplier σ_i is exactly μ-GDP with
    μ = Δ·√(Σ E_i/σ_i²) (Dong, Roth, Su 2019 Cor 3.3; one σ: μ = Δ√E/σ), Δ = 1 under
    ``add-remove`` (for these pairs the zero-out pair, N(0, σ²) vs N(1, σ²)) and 2 under
    ``replace``; ε(δ) and δ(ε) are read off the μ-GDP curve exactly (Balle & Wang 2018 Thm 8):
    ε = :func:`certified_upper_epsilon` for one σ, bit for bit.

    Not in :mod:`dpcalc.accounting.registry`: it answers histories of unsampled Gaussian runs
    only (anything sampled is refused with the reason), for which every registered accountant
    answers too, so it is no ``--accountant`` choice. ``dpcalc train`` reports the ε of shuffled
    and balls-in-bins runs with it and calibrates σ for them through
    :func:`dpcalc.accounting.calibrate.calibrate_dpsgd` like any accountant (no calibration
    hook: bracket, Brent's method, σ rounded up and verified).

    Result ``details``: ``passes`` (Σ E_i, the Gaussian runs), ``adjacency``, ``mu``
    (``note`` instead of ``mu`` when there is no run).
    """

    name: ClassVar[str] = EPOCH_ACCOUNTANT
    certified: ClassVar[bool] = True
    source: ClassVar[str] = SOURCE_UPPER
    short_source: ClassVar[str] = "Chua+24 §3; DRS19"
    description: ClassVar[str] = "exact E-fold Gaussian mechanism: each record in one batch per epoch"

    def _sensitivity(self) -> float:
        return 2.0 if self.neighboring == "replace" else 1.0

    def _mu(self, runs: list[tuple[float, int]]) -> float:
        sens = self._sensitivity()
        if len(runs) == 1:  # as certified_upper_epsilon computes it: √E/σ
            sigma, count = runs[0]
            return sens * math.sqrt(count) / sigma
        return sens * math.sqrt(sum(count * (1.0 / sigma) ** 2 for sigma, count in runs))

    def _details(self, runs: list[tuple[float, int]], mu: float) -> dict[str, Any]:
        details: dict[str, Any] = {"passes": sum(c for _, c in runs),
                                   "adjacency": ADJACENCY if self.neighboring == "add-remove"
                                   else "replace-one (sensitivity 2)"}
        if runs:
            details["mu"] = mu
        else:
            details["note"] = "no steps taken"
        return details

    def check(self, event: Event) -> None:
        """Raise :class:`UnsupportedEventError` unless every step of ``event`` is an unsampled
        Gaussian mechanism (an epoch of a shuffled / balls-in-bins run is one)."""
        _gaussian_runs(event)

    def epsilon(self, event: Event, *, delta: float) -> AccountingResult:
        """ε at ``delta`` of ``event``: ε_GDP(δ; μ) (Balle & Wang 2018 Thm 8; verified, errs high).

        Raises:
            ParameterError: ``delta`` not in (0, 1).
            UnsupportedEventError: a step that is not an unsampled Gaussian.
        """
        delta = v.open_unit("delta", delta)
        runs = _gaussian_runs(event)
        mu = self._mu(runs) if runs else 0.0
        eps = 0.0 if not runs else math.inf if math.isinf(mu) else gaussian_epsilon(delta=delta, mu=mu)
        return AccountingResult(self.name, eps, delta, True, details=self._details(runs, mu), source=self.source)

    def delta(self, event: Event, *, epsilon: float) -> AccountingResult:
        """δ at ``epsilon`` of ``event``: δ_GDP(ε; μ) (Balle & Wang 2018 Thm 8), rounded up.

        Raises:
            ParameterError: ``epsilon`` negative or not finite.
            UnsupportedEventError: a step that is not an unsampled Gaussian.
        """
        epsilon = v.nonnegative("epsilon", epsilon)
        runs = _gaussian_runs(event)
        mu = self._mu(runs) if runs else 0.0
        # gaussian_delta is rounded up already; 4504 ulps (≈ 1e-12 relative) more for its exp()
        d = 0.0 if not runs else 1.0 if math.isinf(mu) else min(
            1.0, round_up(gaussian_delta(epsilon=epsilon, mu=mu), 4504.0))
        return AccountingResult(self.name, epsilon, d, True, details=self._details(runs, mu), source=self.source)


# ----------------------------------------------------------------------------- lower bound

def _log_cdf_max(c: np.ndarray, m: float, sigma: float, t: int) -> np.ndarray:
    """ln F_m(c), F_m(c) = Φ((c − m)/σ)·Φ(c/σ)^{T−1}: the law of max_t x_t under (1/T)Σ N(m e_t, σ²I)."""
    out = log_ndtr((c - m) / sigma)
    if t > 1:
        out = out + (t - 1) * log_ndtr(c / sigma)
    return out


def _slice_log_mass(lf: np.ndarray) -> np.ndarray:
    """ln(F(c_{j+1}) − F(c_j)) from ln F at the cut points (both tails accurate)."""
    a, b = lf[:-1], lf[1:]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        # lower side: ln F(b) + ln(1 − F(a)/F(b)); upper side: ln(S(a) − S(b)), S = 1 − F
        low = b + np.log(-np.expm1(a - b))
        sa, sb = -np.expm1(a), -np.expm1(b)
        high = np.log(sa - sb)
    use_high = a > math.log(0.5)
    out = np.where(use_high, high, low)
    return np.where(np.isfinite(out), out, -np.inf)


def _edge(lf_fun, target: float, lo: float, hi: float, increasing_to: str) -> float:
    """Bisection for the cut point where ln F (``"cdf"``) or ln S (``"sf"``) crosses ``target``."""
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        val = lf_fun(mid)
        if increasing_to == "cdf":
            inside = val <= target  # ln F(mid) ≤ target: mid is below the bulk
            lo, hi = (mid, hi) if inside else (lo, mid)
        else:
            s = math.log(-math.expm1(val)) if val < 0 else -math.inf
            inside = s <= target  # ln S(mid) ≤ target: mid is above the bulk
            lo, hi = (lo, mid) if inside else (mid, hi)
        if hi - lo <= 1e-12 * max(1.0, abs(mid)):
            break
    return lo if increasing_to == "cdf" else hi


def max_statistic_lower_epsilon(*, noise_multiplier: float, steps_per_epoch: int, epochs: int,
                                delta: float, mean_upper: float, mean_lower: float) -> float:
    r"""A lower bound on ε from the max statistic of the mixture pair (Chua et al. 2024 §4).

    One epoch: P = (1/T)Σ_t N(a·e_t, σ²I), Q = (1/T)Σ_t N(b·e_t, σ²I) (a = ``mean_upper``,
    b = ``mean_lower``; b = 0 is Q = N(0, σ²I)), post-processed to M = max_t x_t; E epochs are
    independent (reshuffled) and compose. Slicing M, rounding each slice's privacy loss
    ln(P(slice)/Q(slice)) down to a grid of step 2e-3 and composing a lower PMF gives a
    δ_low(ε) ≤ the true δ(ε) of the pair, hence ε_low ≤ the pair's ε — a lower bound on the
    ε of any mechanism that releases this pair on some adjacent datasets.

    Args:
        noise_multiplier: σ > 0.
        steps_per_epoch: T ≥ 1.
        epochs: E ≥ 1.
        delta: δ in (0, 1).
        mean_upper, mean_lower: a > b ≥ 0.

    Returns:
        ε_low ≥ 0.

    Raises:
        ParameterError: out of range.
        InfeasibleError: the composed grid would exceed its memory cap.
    """
    sigma = v.positive("noise_multiplier", noise_multiplier)
    t = v.count("steps_per_epoch", steps_per_epoch)
    e = v.count("epochs", epochs)
    delta = v.open_unit("delta", delta)
    a, b = float(mean_upper), float(mean_lower)
    if not a > b >= 0:
        raise ParameterError("mean_upper", f"> mean_lower ({b}) ≥ 0", a)
    # Tails of M dropped below: their mass only lowers δ (valid), kept ≪ δ (tight).
    log_tail = math.log(delta) - math.log(1e6 * e)

    def lf_p(c: float) -> float:
        return float(_log_cdf_max(np.array([c]), a, sigma, t)[0])

    span = 60.0 * sigma + a + 10.0
    lo = _edge(lf_p, log_tail, -span, a, "cdf")
    hi = _edge(lf_p, log_tail, lo, a + span, "sf")
    gap = _H * sigma * sigma / (a - b) / 2.0  # the loss moves ≤ (a − b)/σ² per unit of c in the tails
    count = int(math.ceil((hi - lo) / gap))
    if count > _MAX_SLICES:
        count = _MAX_SLICES
    cuts = np.linspace(lo, hi, count + 1)
    lp = _slice_log_mass(_log_cdf_max(cuts, a, sigma, t))
    lq = _slice_log_mass(_log_cdf_max(cuts, b, sigma, t))
    keep = np.isfinite(lp)
    lp, lq = lp[keep], lq[keep]
    loss = np.where(np.isfinite(lq), lp - lq, np.inf)
    # every P-mass at an infinite loss counts fully in δ; none expected (Q has full support)
    finite = np.isfinite(loss)
    if not finite.any():  # every slice's Q-mass underflowed (σ tiny): 0 is the lower bound we can prove
        return 0.0
    # round-off: masses carry ~1e-13 relative error; shave them and the losses on the safe side
    probs = np.exp(lp[finite]) * (1.0 - 1e-10)
    k = np.floor((loss[finite] - 1e-9 * (1.0 + np.abs(loss[finite]))) / _H).astype(np.int64)
    k0 = int(k.min())
    pmf = np.bincount(k - k0, weights=probs)
    pld = DiscretePLD(_H, k0, pmf, 0.0, 0.0, False)
    try:
        composed = self_compose(pld, e, eta=delta * 1e-3, max_points=_MAX_POINTS)
    except GridTooLargeError as err:
        raise InfeasibleError(f"the shuffling lower bound needs {err.points:,} grid points "
                              f"(more than {_MAX_POINTS:,}) at {e:,} epochs") from None
    return max(0.0, float(epsilon_for_delta(composed, delta)))


def shuffle_lower_epsilon(*, noise_multiplier: float, steps_per_epoch: int, epochs: int, delta: float) -> float:
    """Lower bound on ε of ``shuffle`` (zero-out): :func:`max_statistic_lower_epsilon` with the
    pair MoG(2) vs MoG(1) of Chua et al. 2024 §4 (others −1, the record +1 or ⊥)."""
    return max_statistic_lower_epsilon(noise_multiplier=noise_multiplier, steps_per_epoch=steps_per_epoch,
                                       epochs=epochs, delta=delta, mean_upper=2.0, mean_lower=1.0)


def balls_in_bins_lower_epsilon(*, noise_multiplier: float, steps_per_epoch: int, epochs: int,
                                delta: float) -> float:
    """Lower bound on ε of ``balls-in-bins`` (zero-out): :func:`max_statistic_lower_epsilon`
    with the pair MoG(1) vs N(0, σ²I) of Chua et al. 2025 (others 0, the record +1 or ⊥)."""
    return max_statistic_lower_epsilon(noise_multiplier=noise_multiplier, steps_per_epoch=steps_per_epoch,
                                       epochs=epochs, delta=delta, mean_upper=1.0, mean_lower=0.0)


# ----------------------------------------------------------------------------- Monte Carlo

def _log_z(sigma: float, t: int) -> float:
    """ln E_P[e^{L}] of one epoch = ln((e^{1/σ²} + T − 1)/T) (the normaliser of the tilt R₁)."""
    a = 1.0 / (sigma * sigma)
    return (float(np.logaddexp(a, math.log(t - 1))) if t > 1 else a) - math.log(t)


#: the one-epoch proposal (defensive mixture, Hesterberg 1995): (weight, kind, k) — P itself, the
#: tilt R₁, laws whose true-batch coordinate has mean c = 1 + kσ (the remove direction's tail) and
#: c = −kσ (k = 0 is Q itself; the add direction's tail)
_PROPOSAL = ((0.3, "p", 0.0), (0.2, "tilt", 0.0), (0.1, "shift", 2.0), (0.1, "shift", 4.0),
             (0.15, "low", 0.0), (0.15, "low", 2.0))


def _centre(kind: str, k: float, sigma: float) -> float:
    return 1.0 + k * sigma if kind == "shift" else -k * sigma


def _epoch_draws(rng: np.random.Generator, sigma: float, t: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` one-epoch draws from the defensive mixture R = Σ_k a_k R_k of :data:`_PROPOSAL`:
    (L, ln dP/dR), the weights exact. Densities relative to N(0, σ²I): P → e^{L}; R₁ = P e^{L}/Z
    → e^{2L}/Z; a shifted law (1/T)Σ_t N(c·e_t, σ²I) → (1/T)Σ_t e^{(c·x_t − c²/2)/σ²} (c = 0: Q → 1)."""
    s2 = sigma * sigma
    kinds = rng.choice(len(_PROPOSAL), size=n, p=[a for a, _, _ in _PROPOSAL])
    loss = np.empty(n)
    logw = np.empty(n)
    log_z = _log_z(sigma, t)
    p_same = math.exp(1.0 / s2 - (log_z + math.log(t)))
    chunk = max(1, int(4e6 // t))
    for start in range(0, n, chunk):
        kk = kinds[start:start + chunk]
        m = kk.size
        x = rng.standard_normal((m, t)) * sigma
        for j, (_, kind, shift) in enumerate(_PROPOSAL):
            rows = np.nonzero(kk == j)[0]
            if kind == "p":
                x[rows, 0] += 1.0
            elif kind == "tilt":  # mean 2e₁ (probability p_same) or e₁ + e_t, t ≠ 1
                x[rows, 0] += 1.0
                if t > 1:
                    other = rng.integers(1, t, size=rows.size)
                    same = rng.random(rows.size) < p_same
                    x[rows, np.where(same, 0, other)] += 1.0
                else:
                    x[rows, 0] += 1.0
            else:
                x[rows, 0] += _centre(kind, shift, sigma)
        big_l = _logsumexp_rows((x - 0.5) / s2) - math.log(t)
        dens = [math.log(_PROPOSAL[0][0]) + big_l, math.log(_PROPOSAL[1][0]) + 2.0 * big_l - log_z]
        for a, kind, shift in _PROPOSAL[2:]:
            c = _centre(kind, shift, sigma)
            dens.append(math.log(a) + _logsumexp_rows((c * x - 0.5 * c * c) / s2) - math.log(t))
        loss[start:start + m] = big_l
        logw[start:start + m] = big_l - np.logaddexp.reduce(np.stack(dens), axis=0)
    return loss, logw


def _logsumexp_rows(z: np.ndarray) -> np.ndarray:
    zmax = z.max(axis=-1, keepdims=True)
    return np.log(np.exp(z - zmax).sum(axis=-1)) + zmax[:, 0]


def _estimate_epsilon(loss: np.ndarray, logw: np.ndarray, epochs: int, delta: float, h: float) -> float:
    """ε at δ of the E-fold composition of the one-epoch loss distribution given by weighted
    draws (self-normalised), both directions, on a loss grid of step ``h`` (nearest rounding:
    an estimate, not a bound)."""
    out = 0.0
    w = np.exp(logw - logw.max())
    for sign in (1.0, -1.0):  # remove: losses L under P; add: losses −L under Q (mass ∝ e^{−L} P)
        with np.errstate(divide="ignore"):  # a weight that underflowed to 0 has log −∞: no mass
            lw = np.log(w) if sign > 0 else np.log(w) - loss
        lw = lw - lw.max()
        mass = np.exp(lw)
        mass /= mass.sum()
        k = np.rint(sign * loss / h).astype(np.int64)
        k0 = int(k.min())
        pmf = np.bincount(k - k0, weights=mass)
        pld = DiscretePLD(h, k0, pmf, 0.0, 0.0, True)
        if epochs > 1:
            pld = self_compose(pld, epochs, eta=delta * 1e-3, max_points=_MAX_POINTS)
            pld = DiscretePLD(pld.h, pld.start, pld.probs, pld.p_inf, 0.0, True, pld.offset)
        out = max(out, float(epsilon_for_delta(pld, delta)))
    return out


def balls_in_bins_estimate(*, noise_multiplier: float, steps_per_epoch: int, epochs: int, delta: float,
                           samples: int = 200_000, seed: int = 0, confidence: float = 0.95,
                           max_work: float = DEFAULT_MC_WORK, bootstrap: int = 20) -> dict:
    r"""Monte Carlo estimate of ε for E epochs of balls-in-bins DP-SGD (approximate, not certified).

    The pair of Chua et al. 2025 (module docstring) is a product over epochs, so its privacy
    loss is a sum of E independent one-epoch losses. We draw one-epoch losses by importance
    sampling from a defensive mixture of P, the exponentially tilted law R₁ = P·e^{L}/Z (a
    Gaussian mixture, sampled exactly) and two laws with the true batch shifted further (weights
    exact; :func:`_epoch_draws`), histogram them on a
    loss grid (step 1e-3) as the distribution of L under P and, reweighted by e^{−L}, of −L
    under Q (the add direction), compose E epochs by FFT (:mod:`dpcalc.accounting._pld_compose`)
    and read ε at δ, the larger of both directions. The confidence interval is the percentile
    bootstrap over the draws (``bootstrap`` resamples). Deterministic for a given ``seed``.

    Args:
        noise_multiplier: σ > 0.
        steps_per_epoch: T ≥ 1 (number of bins).
        epochs: E ≥ 1.
        delta: δ in (0, 1).
        samples: one-epoch draws (capped so that draws × T ≤ ``max_work``).
        seed: seed of the numpy generator (PCG64).
        confidence: two-sided level of the interval, in (0, 1).
        max_work: cap on Gaussian draws.
        bootstrap: number of bootstrap resamples (≥ 10).

    Returns:
        ``{"epsilon": ε̂, "ci": [lo, hi], "confidence", "samples", "seed", "bootstrap", "method"}``.

    Raises:
        ParameterError: out of range.
    """
    sigma = v.positive("noise_multiplier", noise_multiplier)
    t = v.count("steps_per_epoch", steps_per_epoch)
    e = v.count("epochs", epochs)
    delta = v.open_unit("delta", delta)
    samples = v.count("samples", samples, minimum=100)
    seed = v.count("seed", seed, minimum=0)
    confidence = v.open_unit("confidence", confidence)
    bootstrap = v.count("bootstrap", bootstrap, minimum=10)
    n = int(max(100, min(samples, max_work / t)))
    loss, logw = _epoch_draws(np.random.default_rng([seed, 7]), sigma, t, n)
    # grid step 1e-3, coarsened so the one-epoch histogram has at most _MAX_HIST bins (a tiny σ
    # spreads the losses over ~1/σ²: σ = 1e-3 would need 2·10⁹ bins, 15 GiB)
    span = float(loss.max() - loss.min()) if n else 0.0
    h = max(1e-3, span / _MAX_HIST) if math.isfinite(span) else 1e-3
    est = _estimate_epsilon(loss, logw, e, delta, h)
    rng = np.random.default_rng([seed, 8])
    boots = []
    for _ in range(bootstrap):
        idx = rng.integers(0, n, n)
        boots.append(_estimate_epsilon(loss[idx], logw[idx], e, delta, h))
    a = (1.0 - confidence) / 2.0
    lo, hi = (float(x) for x in np.quantile(np.array(boots), [a, 1.0 - a]))
    return {"epsilon": est, "ci": [min(lo, est), max(hi, est)], "confidence": confidence, "samples": n,
            "seed": seed, "bootstrap": bootstrap,
            "method": "importance sampling of one epoch (defensive tilt), FFT composition, percentile bootstrap"}


# ----------------------------------------------------------------------------- Poisson and the bracket

def poisson_epsilon(*, noise_multiplier: float, layout: BatchLayout, delta: float):
    """The certified ε of the same (σ, q = B/N, T = E·⌈N/B⌉) under Poisson sampling: the
    registry's default accountant (the tightest certified one, ``pld``; add/remove), run as
    ``dpcalc epsilon`` runs it (a
    numerical failure at extreme inputs becomes a not-applicable row with the reason, numpy
    warnings are collected in its details). Returns its :class:`AccountingResult`."""
    from dpcalc.accounting.dpsgd import epsilon_by_accountant
    from dpcalc.schedule import Schedule

    schedule = Schedule(layout.sample_rate, layout.steps, "batches", layout.batch_size, layout.dataset_size,
                        layout.epochs)
    return epsilon_by_accountant(noise_multiplier=noise_multiplier, schedule=schedule, delta=delta,
                                 accountants=[default_accountant()])[0]


@dataclass(frozen=True)
class SamplerResult(Result):
    """One sampler's row: certified ε (upper bound), a lower bound, the width, and beside them
    the Poisson ε a user might have reported for the same run.

    Attributes:
        sampler: ``poisson``, ``shuffle``, ``balls-in-bins`` (or a later sampler).
        epsilon: the certified upper bound on ε (None where the sampler has none).
        epsilon_lower: a proven lower bound on the sampler's ε (None where none is known) — a
            lower bound, never shown as ε.
        delta: δ.
        poisson_epsilon: the Poisson (pld) ε of the same (σ, q = B/N, T).
        estimate: Monte Carlo estimate (approximate): ``{"epsilon", "ci", "confidence", ...}``.
        certified: True iff ``epsilon`` is a proven upper bound.
        applicable, reason, source, details: as every :class:`dpcalc.results.Result`.
    """

    sampler: str
    epsilon: float | None
    epsilon_lower: float | None
    delta: float
    poisson_epsilon: float | None = None
    estimate: dict | None = None
    certified: bool = True
    applicable: bool = True
    reason: str | None = None
    source: str = ""
    details: dict = field(default_factory=dict)

    _bounded: ClassVar[tuple[str, ...]] = ("epsilon",)

    @property
    def width(self) -> float | None:
        """ε_upper − ε_lower (None without both)."""
        if self.epsilon is None or self.epsilon_lower is None:
            return None
        return max(0.0, self.epsilon - self.epsilon_lower)

    def _head(self) -> dict[str, Any]:
        out: dict[str, Any] = {"sampler": self.sampler, "epsilon": self.epsilon,
                               "epsilon_lower": self.epsilon_lower, "width": self.width,
                               "delta": self.delta, "poisson_epsilon": self.poisson_epsilon}
        if self.estimate is not None:
            out["estimate"] = dict(self.estimate, approximate=True)
        return out


def sampler_bracket(*, sampler: str, noise_multiplier: float, layout: BatchLayout, delta: float,
                    poisson: float | None = None, monte_carlo: bool = True, samples: int = 20_000,
                    seed: int = 0, confidence: float = 0.95, max_work: float = DEFAULT_MC_WORK) -> SamplerResult:
    """The bracket of one sampler (``shuffle`` or ``balls-in-bins``) for (σ, B, N, E, δ).

    Args:
        sampler: ``shuffle`` or ``balls-in-bins``.
        noise_multiplier: σ > 0.
        layout: from :func:`batch_layout`.
        delta: δ in (0, 1).
        poisson: the Poisson ε to print beside (computed with :func:`poisson_epsilon` if None).
        monte_carlo: run the balls-in-bins estimate.
        samples, seed, confidence, max_work: see :func:`balls_in_bins_estimate`.

    Raises:
        ParameterError: unknown sampler or a parameter out of range.
    """
    sampler = v.choice("sampling", sampler, ("shuffle", "balls-in-bins"))
    sigma = v.positive("noise_multiplier", noise_multiplier)
    delta = v.open_unit("delta", delta)
    t, e = layout.steps_per_epoch, layout.epochs
    if poisson is None:
        poisson = poisson_epsilon(noise_multiplier=sigma, layout=layout, delta=delta).epsilon
    upper = certified_upper_epsilon(noise_multiplier=sigma, epochs=e, delta=delta)
    details: dict[str, Any] = {"adjacency": ADJACENCY, "steps_per_epoch": t, "epochs": e,
                               "mu": math.sqrt(e) / sigma, "source_upper": SOURCE_UPPER}
    estimate = None
    if sampler == "shuffle":
        lower = shuffle_lower_epsilon(noise_multiplier=sigma, steps_per_epoch=t, epochs=e, delta=delta)
        details["source_lower"] = SOURCE_SHUFFLE_LOWER
        source = "upper: " + SOURCE_UPPER + "; lower: " + SOURCE_SHUFFLE_LOWER
    else:
        lower = balls_in_bins_lower_epsilon(noise_multiplier=sigma, steps_per_epoch=t, epochs=e, delta=delta)
        details["source_lower"] = SOURCE_BNB + ", max-statistic pair"
        source = "upper: " + SOURCE_UPPER + "; lower and estimate: " + SOURCE_BNB
        if monte_carlo and t * 10_000 > max_work:
            estimate = {"epsilon": None, "skipped": (
                f"Monte Carlo skipped: 10,000 one-epoch draws of T = {t:,} Gaussians exceed the work cap "
                f"({max_work:.3g} draws)")}
        elif monte_carlo:
            try:
                estimate = balls_in_bins_estimate(noise_multiplier=sigma, steps_per_epoch=t, epochs=e,
                                                  delta=delta, samples=samples, seed=seed,
                                                  confidence=confidence, max_work=max_work)
            except GridTooLargeError as err:  # memory is bounded: the estimate is left out, said why
                estimate = {"epsilon": None, "skipped": (
                    f"Monte Carlo skipped: composing E = {e:,} epochs of the one-epoch loss needs a grid of "
                    f"{err.points:,} points, more than the cap of {_MAX_POINTS:,}")}
    # the lower bound can only exceed the certified bound by round-off; never print it above
    lower = min(lower, upper)
    return SamplerResult(sampler=sampler, epsilon=upper, epsilon_lower=lower, delta=delta,
                         poisson_epsilon=poisson, estimate=estimate, source=source, details=details)


def steps_bracket(*, sampler: str, noise_multiplier: float, batch_size: int, dataset_size: int, steps: int,
                  delta: float, poisson: float | None = None) -> SamplerResult:
    """The bracket of ``steps`` consecutive steps of a shuffled / balls-in-bins run (zero-out),
    as ``dpcalc epsilon --sampling shuffle`` prints it: a whole number of epochs is
    :func:`sampler_bracket` (no Monte Carlo); a partial last epoch is rounded *up* for the
    certified bound (E_up = ⌈T/T_e⌉: the record is in at most one of its batches) and *down*
    for the lower bound (E_low = ⌊T/T_e⌋ whole epochs: dropping the last steps is
    post-processing), so the bracket stays valid.

    Args:
        sampler: ``shuffle`` or ``balls-in-bins``.
        noise_multiplier: σ > 0.
        batch_size, dataset_size: B ≤ N (T_e = ⌈N/B⌉ steps per epoch).
        steps: T ≥ 1.
        delta: δ in (0, 1).
        poisson: the Poisson ε of the same (σ, q = B/N, T) if already known (else the registry
            default accountant's, Poisson sampling).

    Raises:
        ParameterError: a parameter out of range.
    """
    t = v.count("steps", steps)
    per_epoch = batch_layout(batch_size=batch_size, dataset_size=dataset_size, epochs=1).steps_per_epoch
    e_up, e_low = -(-t // per_epoch), t // per_epoch
    layout = batch_layout(batch_size=batch_size, dataset_size=dataset_size, epochs=e_up)
    if poisson is None:
        from dpcalc.accounting.dpsgd import epsilon_by_accountant
        from dpcalc.schedule import Schedule

        sched = Schedule(layout.sample_rate, t, "batches", layout.batch_size, layout.dataset_size, None)
        poisson = epsilon_by_accountant(noise_multiplier=noise_multiplier, schedule=sched, delta=delta,
                                        accountants=[default_accountant()])[0].epsilon
    if e_up == e_low:
        return sampler_bracket(sampler=sampler, noise_multiplier=noise_multiplier, layout=layout, delta=delta,
                               poisson=poisson, monte_carlo=False)
    res = sampler_bracket(sampler=sampler, noise_multiplier=noise_multiplier,
                          layout=batch_layout(batch_size=batch_size, dataset_size=dataset_size,
                                              epochs=max(e_low, 1)),
                          delta=delta, poisson=poisson, monte_carlo=False)
    upper = certified_upper_epsilon(noise_multiplier=noise_multiplier, epochs=e_up, delta=delta)
    lower = min(res.epsilon_lower, upper) if e_low >= 1 else None
    details = dict(res.details, epochs=e_up, epochs_lower=e_low, mu=math.sqrt(e_up) / noise_multiplier,
                   partial_epoch=(f"T = {t:,} steps is {t / per_epoch:.4g} epochs of {per_epoch:,} steps: "
                                  f"certified bound over {e_up} epochs (rounded up), lower bound over "
                                  f"{e_low} whole epochs"))
    return SamplerResult(sampler=res.sampler, epsilon=upper, epsilon_lower=lower, delta=res.delta,
                         poisson_epsilon=poisson, source=res.source, details=details)
