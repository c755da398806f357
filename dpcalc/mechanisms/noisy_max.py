r"""Report noisy max and its relatives: Laplace, exponential (permute-and-flip) and Gumbel
(exponential mechanism) noise, and one-shot top-k with Gumbel noise.

**Mechanism.** Given m candidate scores q₁, …, q_m whose sensitivity is Δ (one record moves
any score by at most Δ), add i.i.d. noise Z_r of scale b to every score and release
argmax_r (q_r + Z_r) — the index only, never the noisy value.

**Privacy** (scale b for a target ε):

* *monotonic* scores (for every pair of neighbours all scores move in the same direction,
  e.g. counts under adding/removing one record): b = Δ/ε is ε-DP;
* general scores: b = 2Δ/ε is ε-DP.

For Laplace noise this is Dwork & Roth 2014 Claim 3.9 (stated there for counting queries,
Lap(1/ε)); its proof uses only that the noise's survival function S satisfies
S(x + s) ≥ e^{−s/b}·S(x) for shifts s ≥ 0 — the noisy winner's threshold moves by at most Δ
(monotonic) or 2Δ (general) — which holds for the Laplace, exponential and Gumbel laws alike.
With exponential noise Exp(b) the mechanism *is* permute-and-flip (McKenna & Sheldon 2020,
Alg. 1, with exp(ε(q_r − q*)/(2Δ)) = exp((q_r − q*)/b); Ding, Kifer, Saghaian, Steinke,
Wang, Xiao, Zhang 2021, "The permute-and-flip mechanism is identical to report-noisy-max with
exponential noise"). With Gumbel noise it *is* the exponential mechanism
Pr[r] ∝ exp(q_r/b) (the Gumbel-max trick; McSherry & Talwar 2007; Durfee & Rogers 2019 §4.1).

**One-shot top-k with Gumbel noise** (Durfee & Rogers 2019, §4.1): releasing the k indices of
the largest q_r + Z_r, Z_r ~ Gumbel(b), in order, has the same distribution as k rounds of
"peeling" — the exponential mechanism with Pr[r] ∝ exp(q_r/b) on the candidates not chosen
yet. Each round is ε₀-DP with ε₀ = Δ/b (monotonic) or 2Δ/b, so the ordered top-k is
(k·ε₀)-DP (pure) by basic composition (DR14 Thm 3.16). dpcalc implements exactly this
guarantee: b = 2kΔ/ε (kΔ/ε monotonic) for a total ε. (Tighter (ε, δ) accounting of the k
rounds, e.g. bounded-range composition, is not claimed here.)

**Utility** (derived here; every step is elementary). Call a candidate *bad* if its score is
below q* − t (q* the best score). The released index is bad iff the largest noisy bad score
beats every noisy good score; raising a bad score, adding a bad candidate or removing a good
one only makes that likelier. So over all score vectors with m candidates the supremum of
Pr[gap > t] (gap = q* − q_released) is attained in the limit of one candidate at q* and
m − 1 at q* − t:

    P_m(t) = Pr[max_{j ≤ m−1} Z_j ≥ Z₀ + t],  Z_j i.i.d. noise.

* Gumbel: P_m(t) = n·e^{−t/b}/(1 + n·e^{−t/b}), n = m − 1 (≤ m·e^{−t/b}, DR14 Thm 3.11).
* exponential: P_m(t) = 1 − (1 − (1 − a)^m)/(m·a), a = e^{−t/b} (integrate over Z₀).
* Laplace: P_m(t) = 1 − ∫ f(z) F(z + t)^{m−1} dz, by Gauss–Legendre quadrature on panels of
  width b (the integrand is smooth between the kinks at z = −t and 0); the pairwise union
  bound (m − 1)·(1 + t/(2b))·e^{−t/b}/2 is given beside it (DESIGN §4, PATE's q bound).

Expected gap: E[gap] = ∫₀^∞ Pr[gap > t] dt ≤ ∫₀^∞ P_m(t) dt = E[(max_{j<m} Z_j − Z₀)₊]
= ∫ F(y)(1 − F(y)^{m−1}) dy, which is b·ln m for Gumbel (Frullani), b·(H_{m−1} − 1 + 1/m)
for exponential noise (H the harmonic numbers), and a quadrature for Laplace.

Top-k (Gumbel): in round i the best remaining score is ≥ q_(i), the i-th largest score, so
the i-th released index has score ≥ q_(i) − t except with probability P_{m−i+1}(t); all k
hold except with probability Σ_{i=1}^k P_{m−i+1}(t) (union bound), and
E[q_(i) − q_{released i}] ≤ b·ln(m − i + 1).

For given scores (``--scores``) the exact selection probabilities are computed where they
have a closed form: Gumbel (the exponential-mechanism formula) and exponential noise
(Pr[r] = p_r ∫₀¹ Π_{s≠r}(1 − p_s x) dx with p_s = e^{(q_s − q*)/b}, a polynomial of degree
m − 1 integrated exactly by ⌈m/2⌉-point Gauss–Legendre; up to :data:`MAX_EXACT_PROBABILITIES`
candidates). They use the data: publishing them is not private.

**Release.** :func:`release_noisy_max` draws from the OS CSPRNG (:class:`secrets.SystemRandom`)
with exact rational arithmetic for exponential noise (permute-and-flip with exact
Bernoulli(e^{−γ}) coins, Canonne, Kamath, Steinke 2020 Alg. 1) and Gumbel noise (exact
rejection sampling of the exponential mechanism with the same coins; top-k by exact peeling,
equal in distribution to one-shot Gumbel top-k). Laplace noise is drawn in floating point
(see the function's docstring).
"""

from __future__ import annotations

import math
import random
import secrets
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpcalc import _validate as v
from dpcalc.errors import ParameterError
from dpcalc.results import MechanismResult

__all__ = ["NOISES", "ScoresFile", "read_scores_file", "noise_scale", "noise_epsilon", "worst_case_tail",
           "worst_case_tail_union", "worst_case_expected_gap", "gap_for_beta", "topk_tail", "topk_gap_for_beta",
           "selection_probabilities", "noisy_max", "release_noisy_max", "check_release", "MAX_SCORES_BYTES",
           "MAX_EXACT_PROBABILITIES"]

NOISES = ("laplace", "exponential", "gumbel")

#: largest scores file read (bytes); beyond it the file is refused
MAX_SCORES_BYTES = 64 * 1024 * 1024
#: largest candidate count for the exact per-candidate probabilities of exponential noise
MAX_EXACT_PROBABILITIES = 4000

SOURCES = {
    "laplace": "Dwork & Roth 2014, Claim 3.9 (report noisy max)",
    "exponential": "McKenna & Sheldon 2020 (permute-and-flip); Ding et al. 2021 (= noisy max, exponential noise)",
    "gumbel": "McSherry & Talwar 2007; Dwork & Roth 2014 Thm 3.10/3.11 (Gumbel-max = exponential mechanism)",
    "gumbel-top-k": "Durfee & Rogers 2019 §4.1 (one-shot Gumbel = peeling exponential mechanism); DR14 Thm 3.16",
}


# ---------------------------------------------------------------------------------------------
# Reading a scores file safely (the one safe reader, dpcalc._files.read_input_file).


@dataclass(frozen=True)
class ScoresFile:
    """Scores read from a file.

    Attributes:
        labels: candidate labels, or None when the lines carry no labels.
        values: the scores as float64, shape (m,).
        texts: the scores' decimal texts as written (exact values for the exact samplers).
    """

    labels: list[str] | None
    values: np.ndarray
    texts: list[str]


def _read_bytes(path: str, max_bytes: int) -> bytes:
    from dpcalc._files import read_input_file

    return read_input_file(path, option="scores", max_bytes=max_bytes)

def read_scores_file(path: str, *, max_bytes: int = MAX_SCORES_BYTES) -> ScoresFile:
    """Read candidate scores from a text file (or ``-`` for stdin), refusing unsafe input.

    Format: one score per line, or ``label,score`` per line (all lines alike); blank lines
    and lines starting with ``#`` are skipped. Scores are decimal numbers (``12``, ``-1.5``,
    ``2e3``), kept exactly as written for the exact samplers.

    Refused with a one-line :class:`ParameterError`: a missing or unreadable file; anything
    that is not a regular file (``/dev/zero``, a FIFO, a directory); more than ``max_bytes``
    bytes; binary content (a NUL byte or invalid UTF-8); no scores; a non-numeric or
    non-finite score; mixed labelled and unlabelled lines.

    Args:
        path: file path, or ``-`` for standard input.
        max_bytes: size limit in bytes (default :data:`MAX_SCORES_BYTES`, 64 MiB).

    Returns:
        A :class:`ScoresFile` (labels or None, float64 scores of shape (m,), decimal texts).

    Raises:
        ParameterError: as above.
    """
    data = _read_bytes(path, max_bytes)
    nul = data.find(b"\x00")
    if nul >= 0:
        raise ParameterError("scores", "a text file", path,
                             message=f"scores file looks binary (NUL byte at offset {nul}): {path!r}")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ParameterError("scores", "UTF-8 text", path, message=(
            f"scores file is not UTF-8 text (invalid byte at offset {e.start}): {path!r}")) from None
    from dpcalc.mechanisms.exponential import parse_scores

    labels, texts, values = parse_scores(text.splitlines())
    return ScoresFile(labels, values, texts)


# ---------------------------------------------------------------------------------------------
# Privacy: scale <-> epsilon


def _noise(noise: str) -> str:
    return v.choice("noise", noise, NOISES)


def noise_scale(*, epsilon: float, sensitivity: float = 1.0, monotonic: bool = False,
                top: int = 1) -> float:
    r"""Noise scale b for an ε-DP noisy max (any of the three noises) or Gumbel top-k.

    b = c·k·Δ/ε with c = 1 for monotonic scores and 2 otherwise (DR14 Claim 3.9 and its
    proof for general noise; McKenna & Sheldon 2020; top-k: Durfee & Rogers 2019 §4.1 with
    basic composition of the k peeling rounds). For Laplace noise b is the Laplace scale,
    for exponential noise the mean of Exp(b), for Gumbel noise the Gumbel scale β.

    Args:
        epsilon: target ε > 0 (total, over the k released indices).
        sensitivity: Δ > 0, the most one record moves any score.
        monotonic: all scores move in the same direction between neighbours.
        top: k ≥ 1 indices released (k > 1 only for Gumbel noise).

    Returns:
        b > 0, in score units.

    Raises:
        ParameterError: ε ≤ 0, Δ ≤ 0, k < 1.
    """
    epsilon = v.positive("epsilon", epsilon)
    sensitivity = v.positive("sensitivity", sensitivity)
    k = v.count("top", top)
    return (1.0 if monotonic else 2.0) * k * sensitivity / epsilon


def noise_epsilon(*, scale: float, sensitivity: float = 1.0, monotonic: bool = False,
                  top: int = 1) -> float:
    r"""The ε of noisy max (or Gumbel top-k) with noise scale b: ε = c·k·Δ/b (inverse of
    :func:`noise_scale`; c = 1 monotonic, 2 general).

    Args:
        scale: b > 0.
        sensitivity: Δ > 0.
        monotonic: monotonic scores.
        top: k ≥ 1.

    Returns:
        ε (pure DP).

    Raises:
        ParameterError: b ≤ 0, Δ ≤ 0, k < 1.
    """
    scale = v.positive("scale", scale)
    sensitivity = v.positive("sensitivity", sensitivity)
    k = v.count("top", top)
    return (1.0 if monotonic else 2.0) * k * sensitivity / scale


# ---------------------------------------------------------------------------------------------
# Utility: the worst-case tail P_m(t) and the expected gap


def _laplace_log_cdf(x: np.ndarray) -> np.ndarray:
    return np.where(x < 0, math.log(0.5) + np.minimum(x, 0.0), np.log1p(-0.5 * np.exp(-np.maximum(x, 0.0))))


_GL_NODES = 24


def _panels(lo: float, hi: float, breaks: list[float], width: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Gauss–Legendre nodes and weights over [lo, hi], panels of at most ``width`` split at ``breaks``."""
    x0, w0 = np.polynomial.legendre.leggauss(_GL_NODES)
    cuts = sorted({lo, hi, *[b for b in breaks if lo < b < hi]})
    edges: list[float] = []
    for a, c in zip(cuts[:-1], cuts[1:], strict=True):
        n = max(1, int(math.ceil((c - a) / width)))
        edges.extend(np.linspace(a, c, n + 1)[:-1].tolist())
    edges.append(cuts[-1])
    e = np.asarray(edges)
    half = (e[1:] - e[:-1]) / 2
    mid = (e[1:] + e[:-1]) / 2
    nodes = (mid[:, None] + half[:, None] * x0[None, :]).ravel()
    weights = (half[:, None] * w0[None, :]).ravel()
    return nodes, weights


def _laplace_tail_unit(t: float, n: int) -> float:
    """P_{n+1}(t) for Lap(1) noise: ∫ f(z)(1 − F(z + t)^n) dz by panel Gauss–Legendre."""
    if n == 0:
        return 0.0
    if t > 1000.0:  # the union bound n(1 + t/2)e^{−t}/2 ≥ P underflows to 0 (quadrature would need t panels)
        return min(1.0, n * (1 + t / 2) * math.exp(-t) / 2)
    hi = max(0.0, math.log(n)) + 60.0
    lo = -t - 60.0
    z, w = _panels(lo, hi, [-t, 0.0])
    f = 0.5 * np.exp(-np.abs(z))
    one_minus = -np.expm1(n * _laplace_log_cdf(z + t))
    return float(min(1.0, max(0.0, np.dot(w, f * one_minus))))


def _exponential_tail_unit(t: float, m: int) -> float:
    """P_m(t) for Exp(1) noise: 1 − (1 − (1 − a)^m)/(m a), a = e^{−t}, without cancellation."""
    if m == 1:
        return 0.0
    a = math.exp(-t)
    if a == 0.0:  # t > 745: P_m(t) ≤ (m − 1)·a/2 underflows
        return 0.0
    if m * a < 0.1:  # numerator Σ_{k≥2} C(m,k)(−a)^k: alternating, |ratio| ≤ m·a < 0.1
        term = m * (m - 1) / 2 * a * a
        total = 0.0
        k = 2
        while k <= m:
            total += term
            if abs(term) <= 1e-18 * abs(total):
                break
            term *= -a * (m - k) / (k + 1)
            k += 1
        return total / (m * a)
    return 1.0 - (-math.expm1(m * math.log1p(-a)) if a < 1 else 1.0) / (m * a)


def _gumbel_tail_unit(t: float, m: int) -> float:
    n = m - 1
    if n == 0:
        return 0.0
    x = n * math.exp(-t)
    return x / (1.0 + x)


def worst_case_tail(*, noise: str, scale: float, candidates: int, gap: float) -> float:
    r"""P_m(t): the supremum over all score vectors with m candidates of Pr[q* − q_released > t].

    Closed forms (module docstring): Gumbel n·e^{−t/b}/(1 + n·e^{−t/b}) (n = m − 1);
    exponential 1 − (1 − (1 − a)^m)/(m·a), a = e^{−t/b}; Laplace by quadrature
    (relative accuracy ~1e-10; a utility number, not a privacy one).

    Args:
        noise: ``laplace``, ``exponential`` or ``gumbel``.
        scale: b > 0.
        candidates: m ≥ 1.
        gap: t ≥ 0, in score units.

    Returns:
        P_m(t) in [0, 1]; Pr[released index within t of the best] ≥ 1 − P_m(t).

    Raises:
        ParameterError: bad parameters.
    """
    noise = _noise(noise)
    b = v.positive("scale", scale)
    m = v.count("candidates", candidates)
    t = v.nonnegative("gap", gap) / b
    if noise == "gumbel":
        return _gumbel_tail_unit(t, m)
    if noise == "exponential":
        return _exponential_tail_unit(t, m)
    return _laplace_tail_unit(t, m - 1)


def worst_case_tail_union(*, scale: float, candidates: int, gap: float) -> float:
    r"""The union bound on P_m(t) for Laplace noise: min(1, (m − 1)·(1 + t/(2b))·e^{−t/b}/2).

    Pr[Z₁ − Z₀ > t] = (1 + t/(2b))·e^{−t/b}/2 for independent Lap(b) (the difference's
    exact tail; the same term as PATE's data-dependent q, DESIGN §4).
    """
    b = v.positive("scale", scale)
    m = v.count("candidates", candidates)
    t = v.nonnegative("gap", gap) / b
    return min(1.0, (m - 1) * (1 + t / 2) * math.exp(-t) / 2)


def _harmonic(n: int) -> float:
    if n < 10_000:
        return math.fsum(1.0 / i for i in range(1, n + 1))
    x = float(n)
    return math.log(x) + 0.5772156649015329 + 1 / (2 * x) - 1 / (12 * x * x) + 1 / (120 * x ** 4)


def worst_case_expected_gap(*, noise: str, scale: float, candidates: int) -> float:
    r"""An upper bound on E[q* − q_released] over all score vectors with m candidates.

    ∫₀^∞ P_m(t) dt = ∫ F(y)(1 − F(y)^{m−1}) dy: b·ln m (Gumbel), b·(H_{m−1} − 1 + 1/m)
    (exponential), quadrature (Laplace).

    Args:
        noise: the noise.
        scale: b > 0.
        candidates: m ≥ 1.

    Returns:
        The bound, in score units.

    Raises:
        ParameterError: bad parameters.
    """
    noise = _noise(noise)
    b = v.positive("scale", scale)
    m = v.count("candidates", candidates)
    if m == 1:
        return 0.0
    if noise == "gumbel":
        return b * math.log(m)
    if noise == "exponential":
        return b * (_harmonic(m - 1) - 1 + 1 / m)
    n = m - 1
    y, w = _panels(-60.0, math.log(n) + 60.0, [0.0])
    logF = _laplace_log_cdf(y)
    return b * float(np.dot(w, np.exp(logF) * -np.expm1(n * logF)))


def _solve_decreasing(fun, beta: float, hi: float) -> float:
    """Smallest t ≥ 0 with fun(t) ≤ β for a non-increasing fun (bisection to 1e-12 relative)."""
    if fun(0.0) <= beta:
        return 0.0
    while fun(hi) > beta:
        hi *= 2
    lo = 0.0
    while hi - lo > 1e-12 * hi:
        mid = (lo + hi) / 2
        if fun(mid) <= beta:
            hi = mid
        else:
            lo = mid
    return hi


def gap_for_beta(*, noise: str, scale: float, candidates: int, beta: float) -> float:
    r"""The smallest t with P_m(t) ≤ β: with probability ≥ 1 − β (for every score vector)
    the released index's score is within t of the best.

    Gumbel: t = b·ln((m − 1)(1 − β)/β) (0 if that is negative); otherwise bisection.

    Args:
        noise: the noise.
        scale: b > 0.
        candidates: m ≥ 1.
        beta: β in (0, 1).

    Returns:
        t ≥ 0 in score units (rounded up by the bisection tolerance).

    Raises:
        ParameterError: bad parameters.
    """
    noise = _noise(noise)
    b = v.positive("scale", scale)
    m = v.count("candidates", candidates)
    beta = v.open_unit("beta", beta)
    if noise == "gumbel":
        x = (m - 1) * (1 - beta) / beta
        return b * math.log(x) if x > 1 else 0.0
    unit = _exponential_tail_unit if noise == "exponential" else (lambda t, mm: _laplace_tail_unit(t, mm - 1))
    return b * _solve_decreasing(lambda t: unit(t, m), beta, 2 * math.log(m / beta) + 4)


def topk_tail(*, scale: float, candidates: int, top: int, gap: float) -> float:
    r"""Gumbel top-k: Σ_{i=1}^k P_{m−i+1}(t), bounding the probability that some i-th released
    index scores below q_(i) − t (q_(i) the i-th largest score; union bound over the rounds).

    Args:
        scale: b > 0 (the Gumbel scale of every round).
        candidates: m ≥ k.
        top: k ≥ 1.
        gap: t ≥ 0.

    Returns:
        The bound (capped at 1).

    Raises:
        ParameterError: bad parameters, k > m.
    """
    b = v.positive("scale", scale)
    m = v.count("candidates", candidates)
    k = v.count("top", top)
    if k > m:
        raise ParameterError("top", f"at most the number of candidates ({m})", k)
    t = v.nonnegative("gap", gap) / b
    return min(1.0, math.fsum(_gumbel_tail_unit(t, m - i + 1) for i in range(1, k + 1)))


def topk_gap_for_beta(*, scale: float, candidates: int, top: int, beta: float) -> float:
    """The smallest t with :func:`topk_tail` ≤ β (bisection)."""
    b = v.positive("scale", scale)
    m = v.count("candidates", candidates)
    k = v.count("top", top)
    beta = v.open_unit("beta", beta)
    if k > m:
        raise ParameterError("top", f"at most the number of candidates ({m})", k)
    return b * _solve_decreasing(lambda t: topk_tail(scale=1.0, candidates=m, top=k, gap=t),
                                 beta, math.log(k * m / beta) + 4)


# ---------------------------------------------------------------------------------------------
# Exact selection probabilities for given scores


def selection_probabilities(*, noise: str, scores, scale: float) -> np.ndarray | None:
    r"""Pr[released index = r] for the given scores (input order), or None when not computed.

    * Gumbel: p_r ∝ exp(q_r/b) (the exponential mechanism), any m.
    * exponential: Pr[r] = p_r ∫₀¹ Π_{s≠r}(1 − p_s x) dx, p_s = e^{(q_s − q*)/b}: the
      integrand is a polynomial of degree m − 1, integrated exactly (up to rounding) by
      ⌈m/2⌉ + 1 Gauss–Legendre nodes; m ≤ :data:`MAX_EXACT_PROBABILITIES`, else None.
    * Laplace: None (no closed form; the worst-case bounds apply).

    Args:
        noise: the noise.
        scores: q, shape (m,), finite.
        scale: b > 0.

    Returns:
        probabilities, shape (m,), or None.

    Raises:
        ParameterError: bad parameters.
    """
    noise = _noise(noise)
    b = v.positive("scale", scale)
    q = np.asarray(scores, dtype=np.float64).reshape(-1)
    if q.size == 0 or not np.all(np.isfinite(q)):
        raise ParameterError("scores", "at least one finite score", q.size)
    z = (q - q.max()) / b
    if noise == "gumbel":
        from dpcalc._numerics import logsumexp

        return np.exp(z - logsumexp(z))
    if noise == "laplace" or q.size > MAX_EXACT_PROBABILITIES:
        return None
    m = q.size
    p = np.exp(z)
    x, w = np.polynomial.legendre.leggauss(m // 2 + 1)
    x, w = (x + 1) / 2, w / 2
    with np.errstate(divide="ignore"):
        logs = np.log1p(-np.outer(p, x))          # (m, nodes): log(1 − p_s x_j)
    total = logs.sum(axis=0)                      # log Π_s
    probs = p * (np.exp(total[None, :] - logs) @ w)
    return probs / probs.sum()  # sums to 1 up to rounding; renormalise the rounding away


# ---------------------------------------------------------------------------------------------
# The calculator


def noisy_max(
    *,
    noise: str,
    epsilon: float | None = None,
    scale: float | None = None,
    sensitivity: float = 1.0,
    monotonic: bool = False,
    candidates: int | None = None,
    scores=None,
    top: int = 1,
    beta: float = 0.05,
    gap: float | None = None,
) -> MechanismResult:
    r"""Report noisy max with one noise: ε ↔ scale, and the utility guarantee.

    Give exactly one of ``epsilon`` (→ the scale) and ``scale`` (→ the ε it gives), and one of
    ``candidates`` (m) and ``scores`` (m = len(scores), plus data-dependent numbers).

    Args:
        noise: ``laplace``, ``exponential`` (= permute-and-flip) or ``gumbel`` (= exponential
            mechanism; with ``top`` > 1 one-shot top-k).
        epsilon: target ε > 0 (total over the k indices).
        scale: noise scale b > 0.
        sensitivity: Δ > 0.
        monotonic: scores move in the same direction between neighbours.
        candidates: m ≥ 1.
        scores: the candidates' scores, shape (m,).
        top: k ≥ 1 (k > 1 only with ``gumbel``).
        beta: β in (0, 1): ``gap_at_beta`` is the t with Pr[gap > t] ≤ β for every score vector.
        gap: optional t ≥ 0: ``prob_within`` = 1 − P_m(t), a lower bound on
            Pr[released within t of the best].

    Returns:
        A result with ``epsilon``, ``scale``, ``noise_std``, ``candidates``, ``top``,
        ``gap_at_beta``, ``beta``, ``expected_gap`` (upper bound), with ``gap``:
        ``prob_within``; details: ``epsilon_per_index`` (top-k), the union bound (Laplace),
        and with scores the data-dependent ``probabilities``, ``data_prob_within_gap``,
        ``data_expected_gap`` (where computed; not private to publish).

    Raises:
        ParameterError: bad or missing parameters, top > 1 without Gumbel noise, top > m.
    """
    noise = _noise(noise)
    k = v.count("top", top)
    if k > 1 and noise != "gumbel":
        raise ParameterError("top", "1 unless the noise is gumbel (one-shot top-k is proven for "
                             "Gumbel noise: Durfee & Rogers 2019)", k)
    if (epsilon is None) == (scale is None):
        raise ParameterError("epsilon", "given (or --scale, not both)", epsilon,
                             message="give exactly one of epsilon (→ noise scale) and scale (→ ε)")
    if epsilon is not None:
        b = noise_scale(epsilon=epsilon, sensitivity=sensitivity, monotonic=monotonic, top=k)
        eps = float(epsilon)
    else:
        eps = noise_epsilon(scale=scale, sensitivity=sensitivity, monotonic=monotonic, top=k)
        b = float(scale)
    q = None
    if scores is not None:
        q = np.asarray(scores, dtype=np.float64).reshape(-1)
        if candidates is not None and candidates != q.size:
            raise ParameterError("candidates", f"equal to the number of scores ({q.size})", candidates)
        m = int(q.size)
    else:
        if candidates is None:
            raise ParameterError("candidates", "given (or scores)", None,
                                 message="candidates is required (or a scores file)")
        m = v.count("candidates", candidates)
    if k > m:
        raise ParameterError("top", f"at most the number of candidates ({m})", k)
    beta = v.open_unit("beta", beta)
    std = {"laplace": math.sqrt(2) * b, "exponential": b, "gumbel": math.pi * b / math.sqrt(6)}[noise]
    method = "gumbel-top-k" if k > 1 else noise
    values: dict = {"epsilon": eps, "delta": 0.0, "sensitivity": float(sensitivity),
                    "monotonic": bool(monotonic), "scale": b, "noise_std": std, "candidates": m,
                    "top": k, "beta": beta}
    details: dict = {"mechanism": {"laplace": "report noisy max, Laplace noise",
                                   "exponential": "permute-and-flip (report noisy max, exponential noise)",
                                   "gumbel": "exponential mechanism (report noisy max, Gumbel noise)"}[noise]}
    if k > 1:
        values["gap_at_beta"] = topk_gap_for_beta(scale=b, candidates=m, top=k, beta=beta)
        values["expected_gap"] = b * math.log(m)
        details["epsilon_per_index"] = eps / k
        details["guarantee"] = (f"each of the k = {k} released indices (in order) is an exponential-mechanism "
                                f"draw among the remaining candidates, ε₀ = {eps / k:.6g} each; total ε = {eps:.6g} "
                                "by basic composition")
        details["utility"] = ("the i-th released index scores ≥ q_(i) − gap_at_beta for all i with "
                              "probability ≥ 1 − β; E[q_(i) − score] ≤ b·ln(m − i + 1) ≤ expected_gap")
        if gap is not None:
            values["gap"] = v.nonnegative("gap", gap)
            values["prob_within"] = 1 - topk_tail(scale=b, candidates=m, top=k, gap=gap)
    else:
        values["gap_at_beta"] = gap_for_beta(noise=noise, scale=b, candidates=m, beta=beta)
        values["expected_gap"] = worst_case_expected_gap(noise=noise, scale=b, candidates=m)
        if gap is not None:
            values["gap"] = v.nonnegative("gap", gap)
            values["prob_within"] = 1 - worst_case_tail(noise=noise, scale=b, candidates=m, gap=gap)
        if noise == "laplace":
            details["quadrature"] = "P_m(t) and the expected gap by Gauss–Legendre quadrature (~1e-10 relative)"
            if gap is not None:
                details["prob_within_union_bound"] = 1 - worst_case_tail_union(scale=b, candidates=m, gap=gap)
        details["utility"] = ("for every score vector with m candidates: Pr[q* − q_released > gap_at_beta] ≤ β; "
                              "E[q* − q_released] ≤ expected_gap")
    if q is not None:
        probs = selection_probabilities(noise=noise, scores=q, scale=b) if k == 1 else None
        if probs is not None:
            g = q.max() - q
            details["probabilities"] = probs
            details["data_expected_gap"] = float(np.dot(probs, g))
            if gap is not None:
                details["data_prob_within_gap"] = float(probs[g <= gap].sum())
            details["note"] = "data-dependent numbers use the scores: publishing them is not private"
        else:
            details["note"] = ("exact data-dependent probabilities not computed for this noise/size; "
                               "the worst-case bounds apply")
    return MechanismResult(method=method, values=values, source=SOURCES[method], details=details)


# ---------------------------------------------------------------------------------------------
# Release


def _system_rng() -> random.Random:
    return secrets.SystemRandom()


def _exact(name: str, x) -> Fraction:
    """An exact rational: ints/Fractions as is, decimal text exactly, floats via their shortest repr."""
    if isinstance(x, bool):
        raise ParameterError(name, "a number", x)
    if isinstance(x, (int, Fraction)):
        return Fraction(x)
    if isinstance(x, float):
        if not math.isfinite(x):
            raise ParameterError(name, "a finite number", x)
        return Fraction(repr(x))
    try:
        return Fraction(str(x).strip())
    except (ValueError, ZeroDivisionError):
        raise ParameterError(name, "a number", str(x)) from None


def check_release(*, noise: str, scores, epsilon, sensitivity=1, top: int = 1, labels=None) -> None:
    """Every check of :func:`release_noisy_max` (same arguments), drawing nothing: run it before a
    ledger records the release. Raises ParameterError exactly as :func:`release_noisy_max` would."""
    _checked_release(noise, scores, epsilon, sensitivity, top, labels)


def _score_float(t) -> float:
    try:
        x = float(t)
    except (TypeError, ValueError):
        x = float(_exact("scores", t))
    if not math.isfinite(x):
        raise ParameterError("scores", "finite numbers", t)
    return x


def _checked_release(noise, scores, epsilon, sensitivity, top, labels):
    """The validated inputs of a release: (noise, k, ε, Δ, score texts, float scores)."""
    noise = _noise(noise)
    k = v.count("top", top)
    eps_f = v.positive("epsilon", float(_exact("epsilon", epsilon)))
    delta_f = v.positive("sensitivity", float(_exact("sensitivity", sensitivity)))
    if k > 1 and noise != "gumbel":
        raise ParameterError("top", "1 unless the noise is gumbel", k)
    texts = list(scores)
    if not texts:
        raise ParameterError("scores", "at least one score", 0, message="scores is empty: give at least one score")
    m = len(texts)
    if k > m:
        raise ParameterError("top", f"at most the number of candidates ({m})", k)

    floats = np.array([_score_float(t) for t in texts], dtype=np.float64)
    if labels is not None and len(labels) != m:
        raise ParameterError("labels", f"one per score ({m})", len(labels))
    return noise, k, eps_f, delta_f, texts, floats


def release_noisy_max(
    *,
    noise: str,
    scores,
    epsilon,
    sensitivity=1,
    monotonic: bool = False,
    top: int = 1,
    labels: list[str] | None = None,
    rng: random.Random | None = None,
) -> MechanismResult:
    r"""Release the index of the (noisy) best score — or the ordered top-k with Gumbel noise.

    Randomness: the OS CSPRNG (:class:`secrets.SystemRandom`) unless a seeded ``rng`` is
    passed (tests only). Scores, ε and Δ are taken as exact rationals (decimal text exactly,
    floats through their shortest repr), so γ_r = (q* − q_r)/b is exact.

    * ``exponential``: permute-and-flip (McKenna & Sheldon 2020 Alg. 1): visit the candidates
      in a uniformly random order (lazy Fisher–Yates) and return the first r whose exact
      Bernoulli(e^{−γ_r}) coin (Canonne, Kamath, Steinke 2020 Alg. 1) comes up heads. Exact.
    * ``gumbel``: the exponential mechanism Pr[r] ∝ e^{−γ_r}, drawn exactly by rejection
      (uniform proposal, exact Bernoulli(e^{−γ_r}) acceptance); top-k by k rounds of peeling
      on the remaining candidates (re-centred each round), which is equal in distribution to
      one-shot Gumbel top-k (Durfee & Rogers 2019 §4.1). Exact.
    * ``laplace``: floating point remains here. Lap(b) noise is drawn as b·(E₁ − E₂) with
      E = −ln(U), U a 53-bit uniform from the CSPRNG, and the argmax taken over floats. Only
      the index is released (not a noisy value, so the low-order-bit attack of Mironov 2012
      does not apply directly), but the proof of Claim 3.9 is for real-valued noise; prefer
      ``exponential`` (at least as accurate in expectation, McKenna & Sheldon 2020) for an
      exact release.

    Args:
        noise: the noise.
        scores: the scores (decimal texts, ints, Fractions or floats), length m.
        epsilon: ε > 0 (total over the k indices).
        sensitivity: Δ > 0.
        monotonic: monotonic scores (b = Δ/ε instead of 2Δ/ε).
        top: k ≥ 1 (k > 1 only for ``gumbel``).
        labels: optional candidate labels.
        rng: uniform-integer source; None = OS CSPRNG.

    Returns:
        A result with ``epsilon``, ``scale``, ``released`` (the 0-based indices, in order),
        ``released_labels`` (when labels are given) and details ``guarantee``, ``exact``.

    Raises:
        ParameterError: bad parameters.
    """
    noise, k, eps_f, delta_f, texts, floats = _checked_release(noise, scores, epsilon, sensitivity, top, labels)
    rng = rng or _system_rng()
    m = len(texts)
    cache: dict[int, Fraction] = {}

    def exact(r: int) -> Fraction:  # exact scores only for the candidates a sampler touches
        if r not in cache:
            cache[r] = _exact("scores", texts[r])
        return cache[r]

    def exact_max(alive: list[int] | None = None) -> Fraction:
        # rounding to float is monotone, so the exact maximum is among the float maxima
        idx = np.arange(m) if alive is None else np.asarray(alive)
        top_f = floats[idx].max()
        return max(exact(int(r)) for r in idx[floats[idx] == top_f])

    eps = _exact("epsilon", epsilon)
    delta = _exact("sensitivity", sensitivity)
    b = (1 if monotonic else 2) * k * delta / eps  # exact rational scale
    released: list[int] = []
    exact_sampler = True
    if noise == "exponential":
        from dpcalc.mechanisms.discrete import bernoulli_exp

        qmax = exact_max()
        order = list(range(m))
        for i in range(m):  # lazy Fisher–Yates: position i gets a uniform remaining candidate
            j = rng.randrange(i, m)
            order[i], order[j] = order[j], order[i]
            r = order[i]
            if bernoulli_exp((qmax - exact(r)) / b, rng):
                released.append(r)
                break
    elif noise == "gumbel":
        from dpcalc.mechanisms.discrete import bernoulli_exp

        alive = list(range(m))
        for _ in range(k):
            qmax = exact_max(alive)
            while True:  # exact EM: uniform proposal, accept with probability exp(−γ) (CKS20 Alg. 1 coins)
                pos = rng.randrange(len(alive))
                if bernoulli_exp((qmax - exact(alive[pos])) / b, rng):
                    break
            released.append(alive[pos])
            alive[pos] = alive[-1]
            alive.pop()
    else:
        exact_sampler = False
        bits = rng.getrandbits(128 * m).to_bytes(16 * m, "little")  # one call: 2 × 64 bits per candidate
        u = (np.frombuffer(bits, dtype="<u8") >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
        e = -np.log1p(-u.reshape(m, 2))  # Exp(1) pairs; u < 1 so 1 − u > 0
        released.append(int(np.argmax(floats + float(b) * (e[:, 0] - e[:, 1]))))
    values: dict = {"epsilon": eps_f, "delta": 0.0, "sensitivity": delta_f, "monotonic": bool(monotonic),
                    "scale": float(b), "candidates": m, "top": k, "released": released}
    if labels is not None:
        values["released_labels"] = [labels[r] for r in released]
    method = "gumbel-top-k" if k > 1 else noise
    guarantee = (f"ε = {eps_f:.6g} pure DP (δ = 0) for scores that change by at most Δ = {delta_f:.6g}"
                 + (" in the same direction" if monotonic else "") + " between neighbouring datasets")
    details = {"guarantee": guarantee, "exact": exact_sampler,
               "sampler": {"exponential": "permute-and-flip with exact Bernoulli(exp(−γ)) coins, OS CSPRNG",
                           "gumbel": "exact exponential-mechanism rejection sampler (peeling for top-k), OS CSPRNG",
                           "laplace": "floating-point Laplace noise from 53-bit CSPRNG uniforms (not exact)"}[noise]}
    return MechanismResult(method=method, values=values, source=SOURCES[method], details=details)
