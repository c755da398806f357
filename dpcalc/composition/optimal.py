r"""Optimal (exact) composition of differentially private mechanisms.

Every (ε, δ)-DP mechanism is dominated by the generalised randomized response
pair (Kairouz, Oh, Viswanath 2015, Thm 2.1), so the worst case over all
sequences of (ε_i, δ_i)-DP mechanisms is the composition of randomized-response
pairs. Its privacy curve is (Murtagh & Vadhan 2016, Thm 1.5; KOV 2015 Thm 3.3 for
identical ε_i):

.. math::

    \tilde\delta(\varepsilon') = \prod_i (1+e^{\varepsilon_i})^{-1}
        \sum_{S\subseteq[k]} \max\bigl(0, e^{\sum_{i\in S}\varepsilon_i}
        - e^{\varepsilon'} e^{\sum_{i\notin S}\varepsilon_i}\bigr),

and the composition is (ε', 1 − (1 − δ̃(ε'))·∏(1 − δ_i))-DP, and no better. Equivalently
δ̃(ε') = E[(1 − e^{ε'−L})₊] where the privacy loss L = Σ_i ±ε_i takes the sign +
with probability e^{ε_i}/(1 + e^{ε_i}) independently.

Two evaluations are provided:

* **exact** (:func:`exact_loss_atoms`): when the ε_i take few distinct values the
  loss is a sum of independent scaled binomials; its atoms are enumerated in log
  space (``gammaln``, ``logsumexp``) and δ̃ is summed term by term without
  cancellation. Homogeneous composition (one value, k up to 10⁶) is the special
  case of KOV Thm 3.3.
* **numeric** (:func:`grid_bracket`): otherwise (computing δ̃ exactly is #P-hard,
  MV 2016) each ε_i is rounded *up* to a multiple of a grid step h — an ε_i-DP
  pair is dominated by the RR pair of any larger ε, so this is a certified upper
  bound — and *down* for a certified lower bound; the rounded losses lie on the
  grid and are composed by FFT with the truncation (Hoeffding) and floating-point
  error bounds added to δ. h is halved until the two bounds are within the
  requested relative accuracy.

All rounding errs on the pessimistic side for the reported (upper) value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from dpcalc._numerics import log_binomial_pmf, round_down
from dpcalc.composition.slack import slack_delta
from dpcalc.composition.slack import total_delta as _total_delta
from dpcalc.errors import ParameterError

__all__ = [
    "LossAtoms",
    "exact_loss_atoms",
    "grid_bracket",
    "delta_tilde_target",
    "total_delta",
    "OptimalResult",
    "optimal_epsilon",
    "optimal_delta",
    "homogeneous_epsilon",
    "homogeneous_delta",
    "EXACT_ATOM_LIMIT",
]

_U = np.finfo(float).eps  # unit round-off (2.2e-16)
#: the exact method is used while the number of loss atoms (∏(k_m + 1)) stays below this
EXACT_ATOM_LIMIT = 2_000_000


@dataclass(frozen=True)
class LossAtoms:
    """A discrete privacy-loss distribution: atoms ``loss`` (sorted ascending) with
    log-probabilities ``logp`` under P, plus a relative error bound ``log_err`` on the
    probabilities (δ computed from these atoms is multiplied by ``exp(log_err)``) and
    an absolute error ``abs_err`` added to δ (truncated/aliased mass, FFT round-off).

    Shapes: ``loss`` and ``logp`` are 1-D arrays of the same length n.
    """

    loss: np.ndarray
    logp: np.ndarray
    log_err: float = 0.0
    abs_err: float = 0.0
    loss_err: float = 0.0  # absolute error bound on each loss value

    def hockey_stick(self, epsilon: float) -> float:
        r"""δ̃(ε) = Σ_{ℓ_j > ε} p_j (1 − e^{ε − ℓ_j}), summed without cancellation,
        rounded up (multiplied by ``exp(log_err)``, plus ``abs_err``)."""
        from scipy.special import logsumexp

        start = int(np.searchsorted(self.loss, epsilon, side="right"))
        if start >= self.loss.size:
            return self.abs_err
        terms = self.logp[start:] + np.log(-np.expm1(epsilon - self.loss[start:]))
        s = float(logsumexp(terms))
        if s == -math.inf:
            return self.abs_err
        return math.exp(s + self.log_err + 4 * _U * (abs(s) + 1)) + self.abs_err

    def curve(self, epsilons: np.ndarray) -> np.ndarray:
        """δ̃ at many ε (for plots; the same sum, one evaluation per ε)."""
        return np.array([self.hockey_stick(float(e)) for e in np.atleast_1d(epsilons)])

    def epsilon_for(self, delta_tilde: float) -> float:
        """The smallest ε ≥ 0 (rounded up) with ``hockey_stick(ε) ≤ delta_tilde``.

        Binary search over the atoms for the segment, the closed form
        ε = ln(A − δ̃) − ln B on the segment (A = Σ p_j, B = Σ p_j e^{−ℓ_j} over the
        atoms above it), then verification with the cancellation-free sum and a
        nudge upwards until it holds.

        Returns ``inf`` when no finite ε reaches ``delta_tilde`` (e.g. it is below
        the error bound ``abs_err``).
        """
        from scipy.special import logsumexp

        if delta_tilde <= self.abs_err:
            return math.inf
        if self.hockey_stick(0.0) <= delta_tilde:
            return 0.0
        loss = self.loss
        first_pos = int(np.searchsorted(loss, 0.0, side="right"))
        # smallest index j >= first_pos with hockey_stick(loss[j]) <= delta_tilde (exists: the last atom)
        lo, hi = first_pos, loss.size - 1
        while lo < hi:
            mid = (lo + hi) // 2
            if self.hockey_stick(float(loss[mid])) <= delta_tilde:
                hi = mid
            else:
                lo = mid + 1
        j = lo
        # all atoms with loss >= loss[j] count on the segment (left, loss[j])
        start = int(np.searchsorted(loss, loss[j], side="left"))
        left = 0.0 if start <= first_pos else float(loss[start - 1])
        left = max(left, 0.0)
        target = (delta_tilde - self.abs_err) * math.exp(-self.log_err)
        log_a = float(logsumexp(self.logp[start:]))
        log_b = float(logsumexp(self.logp[start:] - loss[start:]))
        ratio = target / math.exp(log_a) if log_a > -700 else math.inf
        if ratio < 1:
            eps = log_a + math.log1p(-ratio) - log_b
        else:
            eps = float(loss[j])
        eps = min(max(eps, left), float(loss[j]))
        step = 4 * _U * max(1.0, abs(eps))
        while self.hockey_stick(eps) > delta_tilde and eps < float(loss[j]):
            eps = min(eps + step, float(loss[j]))
            step *= 2
        return eps + self.loss_err


def _log_binom_pmf(count: int, epsilon: float) -> tuple[np.ndarray, float]:
    """log Pr[J = j], J ~ Bin(count, e^ε/(1+e^ε)), j = 0..count, and an error bound on it."""
    return _log_pmf_at(np.arange(count + 1, dtype=float), float(count), epsilon)


def exact_loss_atoms(epsilons, counts) -> LossAtoms:
    """The exact privacy-loss atoms of the composition of randomized-response pairs.

    Args:
        epsilons: distinct ε_m ≥ 0, shape (g,).
        counts: how many mechanisms have ε_m, shape (g,), whole numbers ≥ 1.

    Returns:
        :class:`LossAtoms` with ∏(k_m + 1) atoms ℓ = Σ_m ε_m (2 j_m − k_m),
        j_m ~ Bin(k_m, e^{ε_m}/(1+e^{ε_m})) (Murtagh & Vadhan 2016, Thm 1.5).

    Raises:
        ParameterError: more than :data:`EXACT_ATOM_LIMIT` atoms.
    """
    epsilons = [float(e) for e in epsilons]
    counts = [int(k) for k in counts]
    size = math.prod(k + 1 for k in counts)
    if size > EXACT_ATOM_LIMIT:
        raise ParameterError("count", f"such that the exact method has at most {EXACT_ATOM_LIMIT} atoms", size)
    loss = np.zeros(1)
    logp = np.zeros(1)
    log_err = 0.0
    for eps, k in zip(epsilons, counts, strict=True):
        lp, err = _log_binom_pmf(k, eps)
        lv = eps * (2 * np.arange(k + 1, dtype=float) - k)
        loss = (loss[:, None] + lv[None, :]).ravel()
        logp = (logp[:, None] + lp[None, :]).ravel()
        log_err += err
    log_err += 4 * _U * len(counts)
    if len(counts) > 1:
        order = np.argsort(loss, kind="stable")
        loss, logp = loss[order], logp[order]
    total = sum(e * k for e, k in zip(epsilons, counts, strict=True))
    return LossAtoms(loss, logp, log_err=log_err, loss_err=64 * _U * (1.0 + total))


#: Fourier components whose modulus is provably below e^{_LOG_NEGLIGIBLE} are set to zero
_LOG_NEGLIGIBLE = -80.0
#: groups of equal n processed together while pruning negligible frequencies
_CF_CHUNK = 16


def _log_cf(n_values: np.ndarray, counts: np.ndarray, p: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    r"""log φ(θ_j) of S = Σ_m n_m·Bin(k_m, p_m) at θ_j = 2πj/size (j = 0 … size/2), for the
    frequencies where φ is not negligible.

    Each factor is (1 − p + p e^{−iα})^k with α = θ_j·n reduced exactly in integers
    (j·n mod size); its log is evaluated in real arithmetic:
    |1 − p + p e^{−iα}|² = 1 − 4p(1−p) sin²(α/2) and arg = atan2(−p sin α, 1 − 2p sin²(α/2)).
    Every factor has modulus ≤ 1, so a partial product bounds |φ| from above: a frequency
    is dropped as soon as that bound is below e^{_LOG_NEGLIGIBLE} (the groups that decay
    fastest go first, so most frequencies are dropped after a few groups).

    Returns:
        (indices j kept, shape (r,); log φ at them, complex, shape (r,)).
    """
    order = np.argsort(-(counts * p * (1 - p)), kind="stable")
    alive = np.arange(size // 2 + 1, dtype=np.int64)
    re = np.zeros(alive.size)
    im = np.zeros(alive.size)
    two_pi = 2.0 * math.pi / size
    for s in range(0, order.size, _CF_CHUNK):
        idx = order[s: s + _CF_CHUNK]
        r = np.mod(np.outer(n_values[idx].astype(np.int64), alive), size).astype(float)
        alpha = np.where(r > size / 2, r - size, r) * two_pi
        pm = p[idx][:, None]
        s2 = np.sin(0.5 * alpha) ** 2
        k = counts[idx].astype(float)[:, None]
        with np.errstate(divide="ignore"):
            re += np.sum(k * 0.5 * np.log1p(-4.0 * pm * (1.0 - pm) * s2), axis=0)
        im += np.sum(k * np.arctan2(-pm * np.sin(alpha), 1.0 - 2.0 * pm * s2), axis=0)
        keep = re > _LOG_NEGLIGIBLE
        if not keep.all():
            alive, re, im = alive[keep], re[keep], im[keep]
            if alive.size == 0:
                break
    return alive, re + 1j * im


def _fft_atoms(n_values: np.ndarray, counts: np.ndarray, h: float, eta: float) -> LossAtoms:
    """Atoms of L = h·(2S − Σn) with S = Σ n_m·Bin(k_m, p_m), p_m = e^{h n_m}/(1 + e^{h n_m}),
    computed by FFT on a window that holds S up to mass ``eta`` (Hoeffding); the
    window's missing/aliased mass, the dropped negligible frequencies and the FFT
    round-off go into ``abs_err``."""
    p = 1.0 / (1.0 + np.exp(-h * n_values))  # e^{x}/(1+e^{x})
    mean = float(np.sum(counts * n_values * p))
    var_bound = float(np.sum(counts * n_values.astype(float) ** 2))  # Σ (range)² for Hoeffding
    half = math.sqrt(var_bound * math.log(2.0 / eta) / 2.0) if var_bound > 0 else 0.0
    from scipy.fft import irfft, next_fast_len

    size = next_fast_len(int(2 * math.ceil(half) + 3), real=True)
    if size > 2**23:
        raise ParameterError("count", "small enough for the numeric grid (window over 2^23 points)", size)
    offset = int(round(mean)) - size // 2  # window holds S in [offset, offset + size)
    j, logphi = _log_cf(n_values, counts, p, size)
    # shift so that index r of the inverse transform is S = offset + r (phase reduced exactly)
    r = np.mod(j * (offset % size), size).astype(float)
    logphi = logphi + 1j * (np.where(r > size / 2, r - size, r) * (2 * np.pi / size))
    spec = np.zeros(size // 2 + 1, dtype=complex)
    spec[j] = np.exp(logphi)
    pmf = irfft(spec, n=size)
    n_ops = float(np.sum(counts)) + 8 * math.log2(size) + 8
    fft_err = 8 * _U * n_ops * math.sqrt(size)  # bound on Σ|pmf error|
    # dropped components: each |φ_j| ≤ e^{_LOG_NEGLIGIBLE}, so Σ_r |Δpmf_r| ≤ (size + 2)·e^{_LOG_NEGLIGIBLE}
    fft_err += (size + 2) * math.exp(_LOG_NEGLIGIBLE) * 2
    pmf = np.clip(pmf, 0.0, None)
    total_n = float(np.sum(counts * n_values))
    s_values = offset + np.arange(size, dtype=float)
    loss = h * (2 * s_values - total_n)
    with np.errstate(divide="ignore"):
        logp = np.log(pmf)
    return LossAtoms(loss, logp, log_err=8 * _U, abs_err=eta + fft_err,
                     loss_err=64 * _U * (1.0 + abs(h) * (abs(total_n) + size)))


def _grid_atoms(epsilons: np.ndarray, counts: np.ndarray, h: float, *, upper: bool, eta: float) -> LossAtoms:
    scaled = epsilons / h
    n = np.ceil(scaled * (1 - 4 * _U)) if upper else np.floor(scaled * (1 + 4 * _U))
    if upper:
        n = np.where(n * h < epsilons, n + 1, n)  # make sure n·h ≥ ε_i after rounding
    else:
        n = np.where(n * h > epsilons, n - 1, n)
    n = np.maximum(n, 0).astype(np.int64)
    values, inverse = np.unique(n, return_inverse=True)
    grouped = np.bincount(inverse, weights=counts).astype(np.int64)
    return _fft_atoms(values, grouped, h, eta)


@dataclass(frozen=True)
class OptimalResult:
    """Result of an optimal-composition evaluation.

    Attributes:
        value: the certified upper bound (ε, or δ in δ mode).
        lower: a certified lower bound on the exact optimal value (equal to ``value``
            up to rounding for the exact method).
        method: ``"exact"`` or ``"numeric"``.
        details: diagnostics (grid step, number of atoms, ...).
    """

    value: float
    lower: float
    method: str
    details: dict

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", float(self.value))
        object.__setattr__(self, "lower", float(self.lower))
        object.__setattr__(self, "details", {k: (v.item() if hasattr(v, "item") else v)
                                             for k, v in self.details.items()})


def delta_tilde_target(*, delta: float, deltas: np.ndarray, counts: np.ndarray) -> float:
    """δ̃ such that 1 − (1 − δ̃)·∏(1 − δ_i) = ``delta``, rounded down; ≤ 0 if the δ_i alone
    exceed it (:func:`dpcalc.composition.slack.slack_delta`)."""
    return float(slack_delta(delta=delta, deltas=deltas, counts=counts))


def total_delta(*, delta_tilde: float, deltas: np.ndarray, counts: np.ndarray) -> float:
    """1 − (1 − δ̃)·∏(1 − δ_i), rounded up (:func:`dpcalc.composition.slack.total_delta`)."""
    return float(_total_delta(delta_tilde=delta_tilde, deltas=deltas, counts=counts))


def _group(epsilons, counts) -> tuple[np.ndarray, np.ndarray]:
    eps = np.asarray(epsilons, dtype=float)
    cnt = np.asarray(counts, dtype=np.int64)
    values, inverse = np.unique(eps, return_inverse=True)
    grouped = np.bincount(inverse, weights=cnt).astype(np.int64)
    keep = (grouped > 0) & (values > 0)  # a 0-DP mechanism has privacy loss 0: it adds nothing
    return values[keep], grouped[keep]


def _rough_epsilon(eps: np.ndarray, cnt: np.ndarray, delta_tilde: float) -> float:
    """KOV 2015 Thm 3.5-style estimate of ε (used to size the grid)."""
    mean = float(np.sum(cnt * eps * np.tanh(eps / 2)))
    sq = float(np.sum(cnt * eps**2))
    return max(mean + math.sqrt(2 * sq * math.log(1 / delta_tilde)), 1e-6)


def grid_bracket(epsilons, counts, *, delta_tilde: float | None = None, epsilon: float | None = None,
                 rtol: float = 0.01, max_halvings: int = 8) -> OptimalResult:
    """Certified lower and upper bounds on the optimal composition, numerically.

    Each ε_i is rounded up (upper bound) and down (lower bound) to a multiple of the
    grid step h; the rounded randomized-response pairs dominate / are dominated by the
    exact ones, so the two FFT compositions bracket the Murtagh–Vadhan optimum. h is
    halved until (upper − lower) ≤ ``rtol``·upper.

    Args:
        epsilons: ε_i ≥ 0, shape (n,).
        counts: multiplicities, shape (n,).
        delta_tilde: δ̃ target (ε mode), or
        epsilon: ε' (δ̃ mode). Exactly one.
        rtol: relative accuracy of the bracket.
        max_halvings: stop refining after this many halvings (the bracket is still certified).

    Returns:
        :class:`OptimalResult` with method ``"numeric"``.
    """
    eps, cnt = _group(epsilons, counts)
    eps_mode = delta_tilde is not None
    if eps_mode:
        scale = _rough_epsilon(eps, cnt, delta_tilde)
        eta = delta_tilde * 1e-4
    else:
        scale = max(float(epsilon), 1e-3)
        eta = 1e-18
    sum_eps = float(np.sum(cnt * eps))
    sq = math.sqrt(float(np.sum(cnt * eps**2)))
    # composed ε moves by about Σ ε_i·(rounding) + (ε_i/√Σε²)·(...): start with a bracket width ≈ rtol
    h = rtol * scale / (2.0 * (sum_eps + sum_eps / max(sq, 1e-12)))
    h = min(h, float(eps.max()) / 4 if eps.max() > 0 else 1.0)
    details: dict = {}
    hi = lo = None
    for attempt in range(max_halvings + 1):
        up = _grid_atoms(eps, cnt, h, upper=True, eta=eta)
        down = _grid_atoms(eps, cnt, h, upper=False, eta=eta)
        if eps_mode:
            hi = up.epsilon_for(delta_tilde)
            # lower bound: optimistic δ from the dominated grid, minus its error terms
            lo = _lower_epsilon(down, delta_tilde)
        else:
            hi = min(1.0, up.hockey_stick(float(epsilon)))
            base = down.hockey_stick(float(epsilon)) - down.abs_err
            lo = max(0.0, base * math.exp(-2 * down.log_err) - down.abs_err)
        details = {"grid_step": h, "grid_points": int(up.loss.size), "halvings": attempt}
        if math.isfinite(hi) and hi - lo <= rtol * hi:
            break
        h /= 2
    return OptimalResult(hi, lo, "numeric", details)


def _lower_epsilon(atoms: LossAtoms, delta_tilde: float) -> float:
    """A lower bound on ε at δ̃ from atoms of a dominated pair: the largest ε whose
    optimistic δ (atoms' δ minus their error terms) is still above δ̃."""
    optimistic = LossAtoms(atoms.loss, atoms.logp, log_err=-atoms.log_err - 8 * _U, abs_err=0.0)
    eps = optimistic.epsilon_for(delta_tilde + atoms.abs_err)
    if not math.isfinite(eps):
        return 0.0
    return max(0.0, eps * (1 - 1e-12) - atoms.loss_err - 1e-15)


def _check_inputs(epsilons, deltas, counts):
    eps = np.asarray(epsilons, dtype=float)
    dl = np.asarray(deltas, dtype=float)
    cnt = np.asarray(counts, dtype=np.int64)
    if eps.ndim != 1 or eps.shape != dl.shape or eps.shape != cnt.shape or eps.size == 0:
        raise ParameterError("epsilons", "1-D arrays of equal, non-zero length (epsilons, deltas, counts)", eps.shape)
    if not np.all(np.isfinite(eps)) or np.any(eps < 0):
        raise ParameterError("epsilon", "finite and >= 0", float(eps[~(np.isfinite(eps) & (eps >= 0))][0]))
    if np.any(dl < 0) or np.any(dl >= 1) or not np.all(np.isfinite(dl)):
        raise ParameterError("delta", "in [0, 1)", float(dl[~((dl >= 0) & (dl < 1))][0]))
    if np.any(cnt < 1):
        raise ParameterError("count", "a whole number >= 1", int(cnt[cnt < 1][0]))
    return eps, dl, cnt


def _atom_count(cnt: np.ndarray) -> float:
    return math.prod(float(k) + 1 for k in cnt)


def optimal_epsilon(epsilons: ArrayLike, deltas: ArrayLike, counts: ArrayLike, *, delta: float,
                    rtol: float = 0.01) -> OptimalResult:
    r"""The optimal composition ε of a sequence of (ε_i, δ_i)-DP mechanisms at total δ.

    Murtagh & Vadhan 2016, Thm 1.5 (KOV 2015 Thm 3.3 when all ε_i are equal): the
    smallest ε' with 1 − (1 − δ̃(ε'))∏(1 − δ_i) ≤ δ.

    Args:
        epsilons: ε_i ≥ 0, shape (n,) (repeated values are grouped).
        deltas: δ_i in [0, 1), shape (n,).
        counts: how many times mechanism i runs, shape (n,), whole numbers ≥ 1.
        delta: the target total δ in (0, 1).
        rtol: relative accuracy of the numeric bracket (used only when the exact
            enumeration would exceed :data:`EXACT_ATOM_LIMIT` atoms).

    Returns:
        :class:`OptimalResult`: ``value`` is the certified ε (``inf`` if the δ_i alone
        exceed ``delta``), ``lower`` a certified lower bound, ``method`` ``"exact"``
        (binomial convolution over the groups of equal ε_i) or ``"numeric"``.

    Raises:
        ParameterError: bad inputs.
    """
    eps, dl, cnt = _check_inputs(epsilons, deltas, counts)
    dt = delta_tilde_target(delta=delta, deltas=dl, counts=cnt)
    if dt <= 0:
        return OptimalResult(math.inf, math.inf, "exact", {"reason": "the mechanisms' own delta_i exceed the target delta"})
    g_eps, g_cnt = _group(eps, cnt)
    if g_eps.size == 0:  # every ε_i = 0: the pure part is 0-DP (δ̃(0) = 0 ≤ δ̃)
        return OptimalResult(0.0, 0.0, "exact", {"atoms": 1, "delta_tilde": dt, "distinct_epsilons": 0})
    if _atom_count(g_cnt) <= EXACT_ATOM_LIMIT:
        atoms = exact_loss_atoms(g_eps, g_cnt)
        value = atoms.epsilon_for(dt)
        # value is rounded up; the exact optimum is within float error of it (≪ 1e-9 relative)
        return OptimalResult(value, value * (1 - 1e-9), "exact", {"atoms": int(atoms.loss.size), "delta_tilde": dt,
                                                       "distinct_epsilons": int(g_eps.size)})
    res = grid_bracket(g_eps, g_cnt, delta_tilde=dt, rtol=rtol)
    res.details.update(delta_tilde=dt, distinct_epsilons=int(g_eps.size))
    return res


def optimal_delta(epsilons: ArrayLike, deltas: ArrayLike, counts: ArrayLike, *, epsilon: float,
                  rtol: float = 0.01) -> OptimalResult:
    """The optimal composition's total δ at ε' (Murtagh & Vadhan 2016, Thm 1.5).

    Same arguments as :func:`optimal_epsilon` with ``epsilon`` = ε' ≥ 0 instead of δ.
    """
    eps, dl, cnt = _check_inputs(epsilons, deltas, counts)
    g_eps, g_cnt = _group(eps, cnt)
    if g_eps.size == 0:  # every ε_i = 0: δ̃(ε') = 0 for every ε' ≥ 0
        value = total_delta(delta_tilde=0.0, deltas=dl, counts=cnt)
        return OptimalResult(value, round_down(value, 64), "exact", {"atoms": 1, "distinct_epsilons": 0})
    if _atom_count(g_cnt) <= EXACT_ATOM_LIMIT:
        atoms = exact_loss_atoms(g_eps, g_cnt)
        dt = min(1.0, atoms.hockey_stick(float(epsilon) - atoms.loss_err))
        value = total_delta(delta_tilde=dt, deltas=dl, counts=cnt)
        return OptimalResult(value, value * (1 - 1e-9), "exact", {"atoms": int(atoms.loss.size),
                                                       "distinct_epsilons": int(g_eps.size)})
    res = grid_bracket(g_eps, g_cnt, epsilon=float(epsilon), rtol=rtol)
    hi = total_delta(delta_tilde=res.value, deltas=dl, counts=cnt)
    lo = total_delta(delta_tilde=res.lower, deltas=dl, counts=cnt) * (1 - 64 * _U)
    res.details.update(distinct_epsilons=int(g_eps.size))
    return OptimalResult(hi, lo, "numeric", res.details)


def homogeneous_epsilon(*, epsilon: float, delta: float, count: int, target_delta: float) -> float:
    """KOV 2015 Thm 3.3: optimal ε of the k-fold composition of (ε, δ)-DP mechanisms at total δ.

    Exact (log space, k up to 10⁶), rounded up. ``inf`` if kδ-type terms alone exceed the target.
    """
    return optimal_epsilon([epsilon], [delta], [count], delta=target_delta).value


def homogeneous_delta(*, epsilon: float, delta: float, count: int, target_epsilon: float) -> float:
    """KOV 2015 Thm 3.3: optimal total δ of the k-fold composition at ε' = ``target_epsilon``."""
    return optimal_delta([epsilon], [delta], [count], epsilon=target_epsilon).value


# --------------------------------------------------------------------------- many k at once


def _log_pmf_at(j: np.ndarray, k, eps) -> tuple[np.ndarray, np.ndarray]:
    """log Pr[J = j] for J ~ Bin(k, e^ε/(1+e^ε)) elementwise, with an error bound: the one
    binomial pmf (:func:`dpcalc._numerics.log_binomial_pmf`) with log p = ε − ln(1 + e^ε) and
    log(1 − p) = −ln(1 + e^ε) (Murtagh & Vadhan 2016: the randomized-response pair)."""
    log_norm = np.logaddexp(0.0, eps)
    return log_binomial_pmf(j, k, eps - log_norm, -log_norm)


def _upper_tail_index(k: np.ndarray, p: np.ndarray, log_eta: np.ndarray) -> np.ndarray:
    """Smallest integer a > k·p with the Chernoff bound exp(−k·KL(a/k ‖ p)) ≤ e^{log_eta}
    (so Pr[J ≥ a] ≤ e^{log_eta}, J ~ Bin(k, p); Chernoff 1952 / Hoeffding 1963 eq. (2.1));
    k + 1 when even a = k does not reach it. Vectorised bisection on integers."""
    def log_bound(a):
        x = np.clip(a / k, 0.0, 1.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            kl = np.where(x > 0, x * (np.log(x) - np.log(p)), 0.0) + np.where(
                x < 1, (1 - x) * (np.log1p(-x) - np.log1p(-p)), 0.0)
        # rounded up by a relative 1e-9 (and 1e-12 absolute): the bound stays an upper bound
        return -k * kl * (1 - 1e-9) + 1e-12

    lo = np.floor(k * p)  # the bound is ≥ ... here (KL = 0 at the mean): not accepted
    hi = k.astype(float).copy()
    ok_hi = log_bound(hi) <= log_eta
    lo = np.minimum(lo, hi)
    for _ in range(64):
        if np.all(hi - lo <= 1):
            break
        mid = np.floor((lo + hi) / 2)
        good = log_bound(mid) <= log_eta
        hi = np.where(good, mid, hi)
        lo = np.where(good, lo, mid)
    return np.where(ok_hi, hi, k + 1.0)


def _windows(k: np.ndarray, start: np.ndarray, stop: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Atom indices j = start … stop−1 of each row, padded into a (m, width) matrix
    (padding marked by ``valid`` False)."""
    n = np.maximum(stop - start, 0).astype(np.int64)
    width = max(int(n.max()) if n.size else 0, 1)
    j = start[:, None] + np.arange(width)[None, :]
    valid = np.arange(width)[None, :] < n[:, None]
    return np.where(valid, j, start[:, None]).astype(float), valid


def _window_hockey(eps, k, j, valid, at) -> np.ndarray:
    """Σ over the window atoms with ℓ_j > at of p_j (1 − e^{at − ℓ_j}), rows at once, summed
    without cancellation and rounded up (pmf error bound, summation and log/exp rounding)."""
    e, kk = eps[:, None], k[:, None]
    logp, err = _log_pmf_at(j, kk, e)
    loss = e * (2 * j - kk)
    use = valid & (loss > at[:, None])
    with np.errstate(divide="ignore"):
        terms = np.where(use, logp + np.log(-np.expm1(np.minimum(at[:, None] - loss, 0.0))), -np.inf)
    mx = terms.max(axis=1)
    fin = np.isfinite(mx)
    shift = np.where(fin, mx, 0.0)
    with np.errstate(under="ignore"):
        s = np.exp(terms - shift[:, None]).sum(axis=1)
    logs = np.log(np.where(fin, s, 1.0)) + shift
    nrm = use.sum(axis=1)
    logs = logs + err.max(axis=1) + _U * (nrm + 8) + 4 * _U * (np.abs(logs) + 1)
    return np.where(fin, np.exp(logs), 0.0)


def homogeneous_epsilon_many(*, epsilons, counts, delta_tildes) -> np.ndarray:
    r"""Optimal ε' of k-fold composition of ε-DP randomized response at many (ε, k, δ̃) at once
    (KOV 2015 Thm 3.3): for each entry the smallest ε' with δ̃_k(ε') ≤ ``delta_tildes[i]``,
    rounded up — the vectorised counterpart of :func:`exact_loss_atoms` + ``epsilon_for``,
    used by ``--steps-grid``.

    Method: the loss is ℓ_J = ε(2J − k), J ~ Bin(k, e^ε/(1+e^ε)). Only a window of atoms
    matters: from the larger of k/2 (ℓ ≤ 0 never counts) and a lower Chernoff point, up to
    an upper Chernoff point beyond which Pr[J ≥ a] ≤ 1e-9·δ̃ (added to δ̃). On the window,
    suffix log-sums A_j = Σ_{j'≥j} p_{j'} and B_j = Σ_{j'≥j} p_{j'}e^{−ℓ_{j'}} give δ̃ at
    every atom (δ̃(ℓ_j) = A_{j+1} − e^{ℓ_j}B_{j+1}, whose relative cancellation is at most
    1/(1 − e^{−2ε})), the segment holding the answer and the closed form
    ε' = ln(A_i − δ̃) − ln B_i on it (KOV Thm 3.3) — a *candidate*, aimed slightly below
    the target. The candidate is then **verified** with the cancellation-free sum
    Σ_{ℓ_j > ε'} p_j(1 − e^{ε'−ℓ_j}) plus the tail allowance, nudged up if needed, and
    computed by the scalar exact method if it still fails (or if the answer lies below the
    window). Every returned value is therefore certified.

    Args:
        epsilons: ε ≥ 0 per entry, shape (m,).
        counts: k ≥ 1 per entry, shape (m,).
        delta_tildes: δ̃ targets per entry, shape (m,) (``inf`` is returned where ≤ 0).

    Returns:
        ε' per entry, shape (m,).
    """
    eps, k, dt = np.broadcast_arrays(np.asarray(epsilons, dtype=float).ravel(),
                                     np.asarray(counts, dtype=float).ravel(),
                                     np.asarray(delta_tildes, dtype=float).ravel())
    eps, k, dt = eps.astype(float), np.round(k).astype(float), dt.astype(float)
    out = np.full(eps.size, np.inf)
    out[(dt > 0) & (eps == 0)] = 0.0
    todo = np.flatnonzero((dt > 0) & (eps > 0))
    if todo.size == 0:
        return out
    e, kk, d = eps[todo], k[todo], np.minimum(dt[todo], 1.0)
    p = 1.0 / (1.0 + np.exp(-e))
    log_eta = np.log(d) + math.log(1e-9)
    stop = np.minimum(_upper_tail_index(kk, p, log_eta), kk + 1)
    tail_mass = np.where(stop <= kk, np.exp(log_eta), 0.0)
    # window start: δ̃(ℓ_i) ≥ (1 − e^{−2ε})·Pr[J > i], so the answer is at or above the first i
    # with (1 − e^{−2ε})·Pr[J > i] ≤ δ̃ (located with bdtrc; if that is off, the check below
    # sends the entry to the scalar method)
    from scipy.special import bdtrc

    lo_i, hi_i = np.ceil(kk / 2) - 1, kk.copy()
    fac = -np.expm1(-2 * e)
    for _ in range(64):
        if np.all(hi_i - lo_i <= 1):
            break
        mid = np.floor((lo_i + hi_i) / 2)
        good = (fac * bdtrc(mid, kk.astype(np.int64), p) <= d * (1 - 1e-6)) & (mid > lo_i)
        hi_i = np.where(good, mid, hi_i)
        lo_i = np.where(good | (mid <= lo_i), lo_i, mid)
    first = np.maximum(np.ceil(kk / 2) - 1, lo_i - 2)
    first = np.minimum(first, stop - 1)
    j, valid = _windows(kk, first, stop)
    ee, kc = e[:, None], kk[:, None]
    logp, err = _log_pmf_at(j, kc, ee)
    loss = ee * (2 * j - kc)
    lp = np.where(valid, logp, -np.inf)
    with np.errstate(invalid="ignore"):
        a_suf = np.flip(np.logaddexp.accumulate(np.flip(lp, 1), axis=1), 1)          # log A_j
        b_suf = np.flip(np.logaddexp.accumulate(np.flip(lp - loss, 1), axis=1), 1)   # log B_j
    # δ̃ at atom j (atoms above it): A_{j+1} − e^{ℓ_j} B_{j+1}; aim at a target a little below d
    margin = 4e-9 + 4 * err.max(axis=1) + 4 * _U * j.shape[1]
    log_aim = (np.log(d) + np.log1p(-margin))[:, None]
    a_next = np.concatenate([a_suf[:, 1:], np.full((e.size, 1), -np.inf)], axis=1)
    b_next = np.concatenate([b_suf[:, 1:], np.full((e.size, 1), -np.inf)], axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_delta_at = a_next + np.log(-np.expm1(np.minimum(loss + b_next - a_next, 0.0)))
    log_delta_at = np.where(np.isnan(log_delta_at), -np.inf, log_delta_at)
    meets = valid & (log_delta_at <= log_aim) & (loss >= 0)
    # the answer segment: first atom index c (in the window) with δ̃(ℓ_c) ≤ aim
    c = np.where(meets.any(axis=1), np.argmax(meets, axis=1), np.maximum(valid.sum(axis=1) - 1, 0))
    rows = np.arange(e.size)
    right = loss[rows, c]
    left = np.where(c > 0, loss[rows, np.maximum(c - 1, 0)], -np.inf)
    left = np.maximum(left, 0.0)
    la, lb = a_suf[rows, c], b_suf[rows, c]
    with np.errstate(divide="ignore", invalid="ignore"):
        cand = la + np.log(-np.expm1(np.minimum(log_aim[:, 0] - la, 0.0))) - lb
    cand = np.where(np.isfinite(cand), cand, right)
    cand = np.clip(cand, left, right)
    # below the window: δ̃ at the atom under the first one is A_first − e^{ℓ_first − 2ε}·B_first;
    # if that already meets the aim, the answer lies below the window (scalar method)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_under = a_suf[:, 0] + np.log(-np.expm1(np.minimum(loss[:, 0] - 2 * e + b_suf[:, 0] - a_suf[:, 0], 0.0)))
    below = (c == 0) & (first > np.ceil(kk / 2) - 1) & ~(log_under > log_aim[:, 0])
    val = cand
    ok = np.zeros(e.size, dtype=bool)
    for attempt in range(5):
        pend = np.flatnonzero(~ok & ~below)
        if pend.size == 0:
            break
        got = _window_hockey(e[pend], kk[pend], j[pend], valid[pend], val[pend]) + tail_mass[pend]
        good = got <= d[pend]
        ok[pend[good]] = True
        bad = pend[~good]
        if bad.size:
            excess = (got[~good] - d[bad]) / d[bad]
            val[bad] = np.minimum(val[bad] + (4.0 ** attempt) * (2 * excess + 1e-12) * np.maximum(val[bad], 1.0),
                                  right[bad])
    loss_err = 64 * _U * (1.0 + kk * e)
    res = np.where(val > 0, val + loss_err, 0.0)
    for t in np.flatnonzero(~ok):  # rare: the scalar exact method
        res[t] = exact_loss_atoms([e[t]], [int(kk[t])]).epsilon_for(float(d[t]))
    out[todo] = res
    return out


def homogeneous_delta_tilde_many(*, epsilons, counts, epsilon: float) -> np.ndarray:
    r"""δ̃_k(ε') of k-fold ε-DP randomized response at one ε' for many (ε, k) at once (KOV 2015
    Thm 3.3), rounded up: the cancellation-free sum over the atoms above ε' (log-space
    binomial pmf), the upper tail beyond a Chernoff point bounded and added.

    Args:
        epsilons: ε ≥ 0 per entry, shape (m,).
        counts: k ≥ 1 per entry, shape (m,).
        epsilon: ε' ≥ 0.

    Returns:
        δ̃ per entry in [0, 1], shape (m,).
    """
    from scipy.special import bdtrc

    eps = np.asarray(epsilons, dtype=float).ravel()
    k = np.asarray(counts, dtype=float).ravel()
    eps, k = np.broadcast_arrays(eps, k)
    eps, k = eps.astype(float), k.astype(float)
    out = np.zeros(eps.size)
    todo = np.flatnonzero(eps > 0)
    if todo.size == 0:
        return out
    e, kk = eps[todo], k[todo]
    at = np.full(e.size, float(epsilon))
    # rounding of the loss values (as exact_loss_atoms.loss_err): evaluate slightly below ε'
    at = at - 64 * _U * (1.0 + kk * e)
    p = 1.0 / (1.0 + np.exp(-e))
    start = np.maximum(np.floor((at / e + kk) / 2), np.ceil(kk / 2) - 1)
    start = np.maximum(start, 0)
    # atoms strictly above ``at`` only
    start = np.where(e * (2 * start - kk) <= at, start + 1, start)
    mass = np.maximum(bdtrc(start - 1, kk.astype(np.int64), p), 1e-300)  # ≈ Pr[J ≥ start]: sets the tail allowance
    log_eta = np.log(mass) + math.log(1e-12)
    stop = _upper_tail_index(kk, p, log_eta)
    tail_mass = np.where(stop <= kk, np.exp(log_eta), 0.0)
    stop = np.minimum(np.maximum(stop, start), kk + 1)
    j, valid = _windows(kk, start, stop)
    got = _window_hockey(e, kk, j, valid, at) + tail_mass
    out[todo] = np.minimum(got, 1.0)
    return out
