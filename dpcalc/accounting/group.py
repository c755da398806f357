r"""Mixture-of-Gaussians steps for the accountants (issue 28): the general
:class:`~dpcalc.events.MixtureOfGaussiansEvent` and group-level DP-SGD
(:class:`~dpcalc.events.GroupEvent` of a Poisson-sampled Gaussian).

**Group-level DP-SGD (theorem).** A DP-SGD step: each record joins the batch independently with
probability q (Poisson sampling), the clipped per-record gradients (‖g‖ ≤ C) are summed and
N(0, σ²C²I) is added. Let D′ = D ∪ G with a group G of k records (add/remove of a group). Then
the step on (D′, D) is dominated, in both orderings, by the pair

    ( Σ_{j=0..k} Bin(k, q)(j) · N(j, σ²),  N(0, σ²) )    (units of C)

i.e. the mixture-of-Gaussians mechanism with shifts j and weights Bin(k, q)(j) — and the pair
is attained, so its privacy curve is the exact group-level curve of T steps.

Proof. Couple the two runs on the sampling of D's records (shared). Given it, D′'s batch adds
the set J ⊆ G of the group's records that were sampled, |J| = j ~ Bin(k, q), and the noisy sum
shifts by v_J = Σ_{x∈J} g(x), ‖v_J‖ ≤ jC. So the conditional pair is N(s, σ²C²) against the
vector mixture Σ_J w_J N(s + v_J, σ²C²), dominated in both orderings by the scalar mixture with
shifts ‖v_J‖/C ≤ |J| (Choquette-Choo, Ganesh, Steinke, Thakurta 2023, "Privacy amplification for
matrix mechanisms", arXiv:2310.15526, Cor. 4.7; lowering a shift gives a dominated pair), and by
the joint convexity of the hockey-stick divergence the unconditioned step is dominated too.
Adaptive composition keeps domination (Zhu, Dong, Wang 2022, AISTATS, Thm 10). Attained: 1-D,
every record of G contributes +C, every other record 0. This is the group-level analysis of
Ganesh 2024 ("Tight group-level privacy guarantees for DP-SGD with sampling via mixture of
Gaussians mechanisms"; statement from its abstract and the
construction above, the paper's text was not checked offline) and the mechanism of
dp_accounting's ``MixtureOfGaussiansDpEvent``. Special cases: k = 1 is the Poisson-sampled
Gaussian (shifts 0, 1; weights 1−q, q); q = 1 is the Gaussian with shift k, i.e. μ-GDP with
μ = k/σ per step and k√T/σ over T steps (Dong, Roth, Su 2022, Cor. 3.3).

Weights: Bin(k, q)(j) from :func:`dpcalc._numerics.log_binomial_pmf` with its error bound; the
components beyond K (tail mass ≤ :data:`~dpcalc.accounting._pld_mixture.MIXTURE_TAIL`, certified
bound of :func:`~dpcalc.accounting._pld_mixture.binomial_mixture`) go to +∞ in pld's upper pair
and to the shift 0 in its optimistic pair (:func:`~dpcalc.accounting._pld_mixture.mixture_pairs`),
so pld's PMF has at most K + 1 components (K ≈ 20 for k = 100, q = 0.01): fast for k ~ 100 and
beyond. The RDP curve keeps every component (:mod:`dpcalc.accounting.mixture_rdp`: the far ones
bounded alone, in closed form).

A general :class:`~dpcalc.events.MixtureOfGaussiansEvent` (σ, shifts c_i, weights p_i summing to
s = 1 within 1e-9) is read as the normalised mixture; its pld pair uses the weights of the
positive shifts multiplied by max(1, 1/s) (rounded up, pessimistic both for the stated and the
normalised weights) and gives the rest to the smallest shift (or to ⊥); RDP uses weights
p_i·max(1, 1/s) rounded up (remove) and p_i·min(1, 1/s) rounded down (add).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from dpcalc._numerics import log_binomial_pmf
from dpcalc.accounting._pld_mixture import (
    MIXTURE_TAIL,
    MixtureOfGaussiansLoss,
    binomial_mixture,
    mixture_pairs,
)
from dpcalc.accounting.mixture_rdp import rdp_mixture
from dpcalc.errors import UnsupportedEventError
from dpcalc.events import (
    Event,
    GaussianEvent,
    GroupEvent,
    MixtureOfGaussiansEvent,
    PoissonSampledEvent,
)
from dpcalc.mechanisms.conversions import group_privacy

__all__ = ["GROUP_SOURCE", "MOG_SOURCE", "is_mixture_step", "check_mixture_step", "mixture_pair",
           "mixture_loss_edge", "mixture_spread", "rdp_mixture_step", "group_components",
           "convert_group_epsilon", "convert_group_delta"]

GROUP_SOURCE = ("Ganesh 2024; Choquette-Choo, Ganesh, Steinke, Thakurta 2023 "
                "(arXiv:2310.15526) Cor. 4.7")
MOG_SOURCE = "Choquette-Choo, Ganesh, Steinke, Thakurta 2023 (arXiv:2310.15526)"

#: relative rounding allowed on the log of a user's weight (log, division by s: a few ulps)
_LOG_WEIGHT_ERR = 1e-14


def is_mixture_step(step: Event) -> bool:
    """Whether ``step`` is a mixture-of-Gaussians event or a group event (this module's steps)."""
    return isinstance(step, (MixtureOfGaussiansEvent, GroupEvent))


def check_mixture_step(step: Event, neighboring: str, accountant: str) -> None:
    """Raise :class:`UnsupportedEventError` unless ``step`` is a MoG event or a group of a
    Poisson-sampled Gaussian, under add/remove (a group of one record or of an unsampled
    Gaussian/Laplace mechanism is replaced by :func:`dpcalc.events.flatten` before this).

    Args:
        step: a :class:`MixtureOfGaussiansEvent` or :class:`GroupEvent`.
        neighboring: ``"add-remove"`` or ``"replace"``.
        accountant: the registry name for the message.
    """
    if neighboring == "replace":
        what = "a group of records" if isinstance(step, GroupEvent) else "the mixture-of-Gaussians mechanism"
        raise UnsupportedEventError(
            f"{accountant}: {what} is accounted under add/remove adjacency only (the mixture pair of "
            "Choquette-Choo et al. 2023 compares adding or removing), not replace-one")
    if isinstance(step, GroupEvent):
        inner = step.event
        if not (isinstance(inner, PoissonSampledEvent) and isinstance(inner.event, GaussianEvent)):
            raise UnsupportedEventError(
                f"{accountant}: group-level accounting is implemented for Poisson-sampled Gaussian steps "
                f"(the binomial mixture of Gaussians) and unsampled Gaussian/Laplace mechanisms, not for a group "
                f"of {type(inner).__name__}; use `dpcalc convert group` on its (epsilon, delta)")


@functools.lru_cache(maxsize=256)
def group_components(group_size: int, sample_rate: float, *, full: bool = False
                     ) -> tuple[np.ndarray, np.ndarray, float, float]:
    """The binomial mixture of a group step: shifts j (units of C), log Bin(k, q)(j), their error
    bound and the tail mass dropped.

    Args:
        group_size: k ≥ 1.
        sample_rate: q in (0, 1).
        full: every j = 0..k (RDP), else j ≤ K with tail ≤ MIXTURE_TAIL (pld).

    Returns:
        ``(shifts, log_weights, log_err, tail_bound)``; ``tail_bound`` 0 when nothing is dropped.
    """
    if full:
        j = np.arange(group_size + 1, dtype=float)
        lw, err = log_binomial_pmf(j, group_size, math.log(sample_rate), math.log1p(-sample_rate))
        return j, lw, float(err), 0.0
    lw, err, k = binomial_mixture(group_size, sample_rate, tail=MIXTURE_TAIL)
    return np.arange(k + 1, dtype=float), lw, float(err), (0.0 if k >= group_size else MIXTURE_TAIL)


def _mog_components(event: MixtureOfGaussiansEvent) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Shifts (increasing, merged, 0 first), log weights rounded up and down (module docstring)."""
    law: dict[float, float] = {0.0: 0.0}
    for c, p in zip(event.sensitivities, event.sampling_probs, strict=True):
        law[c] = law.get(c, 0.0) + p
    shifts = np.array(sorted(law))
    s = math.fsum(event.sampling_probs)
    with np.errstate(divide="ignore"):
        lw = np.log(np.array([law[c] for c in shifts]))
    err = _LOG_WEIGHT_ERR * (np.abs(lw) + 1.0)
    err = np.where(np.isfinite(lw), err, 0.0)
    up = lw - min(0.0, math.log(s)) + err
    down = lw - max(0.0, math.log(s)) - err
    return shifts, up, down


@functools.lru_cache(maxsize=64)
def mixture_pair(step: Event, direction: str) -> MixtureOfGaussiansLoss:
    """pld's pair of a checked mixture step (:func:`check_mixture_step`): the certified upper pair,
    its ``optimistic`` attribute the lower one (:func:`~dpcalc.accounting._pld_mixture.mixture_pairs`).

    Args:
        step: a :class:`MixtureOfGaussiansEvent`, or a :class:`GroupEvent` of a Poisson-sampled
            Gaussian with k ≥ 2 and q < 1.
        direction: ``"remove"`` (P = the mixture) or ``"add"``.
    """
    if isinstance(step, GroupEvent):
        q, sigma = step.event.sample_rate, step.event.event.noise_multiplier
        shifts, lw, err, tail = group_components(step.group_size, q)
        return mixture_pairs(sigma, shifts, lw, err, tail_bound=tail, direction=direction)
    shifts, up, down = _mog_components(step)
    # mixture_pairs takes one log weight with one error: the midpoint and half the spread
    fin = np.isfinite(up)
    mid = np.full(up.shape, -np.inf)
    mid[fin] = 0.5 * (up[fin] + down[fin])
    half = float(np.max(0.5 * (up[fin] - down[fin])))
    return mixture_pairs(step.standard_deviation, shifts, mid, half, tail_bound=0.0, direction=direction)


def mixture_loss_edge(step: Event) -> float | None:
    """The lower edge log p_0 of the remove-ordering loss of the optimistic pair (pld aligns its
    grid on it, as on a Poisson-sampled Gaussian's ln(1 − q)); None when it is −∞ or 0."""
    if not is_mixture_step(step):
        return None
    pair = mixture_pair(step, "remove")
    edge = (pair.optimistic or pair).support[0]
    return edge if math.isfinite(edge) and edge < 0 else None


def mixture_spread(step: Event) -> float:
    """A rough std of one step's privacy loss (pld's initial grid step): that of the Gaussian
    with the mean shift, capped by the largest shift's."""
    if isinstance(step, GroupEvent):
        q, sigma, k = step.event.sample_rate, step.event.event.noise_multiplier, step.group_size
        c_max, mean = k, k * q
    else:
        sigma, c = step.standard_deviation, np.asarray(step.sensitivities)
        c_max, mean = float(np.max(c)), float(np.dot(c, step.sampling_probs))
    s = math.sqrt(math.expm1(min((c_max / sigma) ** 2, 700.0)))
    return max(min(c_max / sigma, (mean / max(c_max, 1e-300)) * s), 1e-6)


@functools.lru_cache(maxsize=128)
def _rdp_cached(step: Event, orders: tuple) -> np.ndarray:
    if isinstance(step, GroupEvent):
        sigma = step.event.event.noise_multiplier
        shifts, lw, err, _ = group_components(step.group_size, step.event.sample_rate, full=True)
        up, down = lw + err, lw - err
    else:
        sigma = step.standard_deviation
        shifts, up, down = _mog_components(step)
    return rdp_mixture(shifts / sigma, up, down, np.asarray(orders))


def rdp_mixture_step(step: Event, orders) -> np.ndarray:
    """The certified RDP curve of a checked mixture step at ``orders`` (both orderings,
    :func:`dpcalc.accounting.mixture_rdp.rdp_mixture`), shape of ``orders``."""
    orders = np.asarray(orders, dtype=float)
    return _rdp_cached(step, tuple(orders.reshape(-1).tolist())).reshape(orders.shape).copy()


def _conversion_factor(e1: float, k: int) -> float:
    """(e^{kε₁} − 1)/(e^{ε₁} − 1) (= k at ε₁ = 0): the group conversion's factor on δ₁."""
    return float(k) if e1 == 0 else math.expm1(min(k * e1, 700.0)) / math.expm1(e1)


def convert_group_epsilon(accountant, record_event: Event, *, group_size: int, delta: float) -> float:
    """The ε that the group-privacy conversion (``dpcalc convert group``: (ε₁, δ₁) ⇒ (kε₁,
    δ₁(e^{kε₁} − 1)/(e^{ε₁} − 1)), Vadhan 2017 Lemma 2.2) certifies for a group of k at ``delta``
    from the record-level history — what a user without the mixture analysis would report.

    δ₁ is found by the fixed point δ₁ = δ/factor(ε₁(δ₁)) (four rounds from δ/k, ε₁(·) the
    accountant's certified record-level ε), then made valid: with δ₁* = δ/factor(1.02·ε₁),
    ε₁* = ε₁(δ₁*) ≤ 1.02·ε₁ proves δ₁*·factor(ε₁*) ≤ δ (the factor increases with ε₁); the
    margin doubles until it does.

    Args:
        accountant: a certified accountant.
        record_event: the record-level history.
        group_size: k ≥ 1.
        delta: the group's δ in (0, 1).

    Returns:
        kε₁* (a valid conversion), or ``inf`` when none is found.
    """
    k = group_size
    d1 = delta / k
    e1 = 0.0
    for _ in range(4):
        e1 = accountant.epsilon(record_event, delta=d1).epsilon
        if e1 is None or not math.isfinite(e1):
            return math.inf
        d1 = delta / _conversion_factor(e1, k)
    margin = 1.02
    for _ in range(6):
        cap = e1 * margin
        d_star = delta / _conversion_factor(cap, k)
        e_star = accountant.epsilon(record_event, delta=d_star).epsilon if d_star > 0 else None
        if e_star is not None and math.isfinite(e_star) and e_star <= cap:
            return k * e_star
        margin = 1.0 + 2.0 * (margin - 1.0)
    return math.inf


def convert_group_delta(accountant, record_event: Event, *, group_size: int, epsilon: float) -> float:
    """The δ the group-privacy conversion certifies for a group of k at ``epsilon``: the
    record-level δ₁ at ε/k, times (e^{ε} − 1)/(e^{ε/k} − 1) (Vadhan 2017 Lemma 2.2; capped at 1)."""
    d1 = accountant.delta(record_event, epsilon=epsilon / group_size).delta
    if d1 is None or not math.isfinite(d1):
        return math.inf
    return group_privacy(epsilon=epsilon / group_size, delta=min(d1, 1.0), group_size=group_size)["delta"]
