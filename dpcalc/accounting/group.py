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

from dpcalc.accounting._pld_mixture import (
    MIXTURE_TAIL,
    MixtureOfGaussiansLoss,
    binomial_mixture,
    mixture_pairs,
)
from dpcalc.accounting.mixture_steps import (
    GROUP_SOURCE,
    MOG_SOURCE,
    binomial_components,
    check_mixture_step,
    convert_group_delta,
    convert_group_epsilon,
    is_mixture_step,
    mog_components,
    rdp_mixture_step,
)
from dpcalc.events import Event, GroupEvent

# pld's pairs are defined here; the rest (no pld import: the rdp accountant and the DP-SGD tables
# use it) lives in dpcalc.accounting.mixture_steps and is re-exported
__all__ = ["GROUP_SOURCE", "MOG_SOURCE", "is_mixture_step", "check_mixture_step", "mixture_pair",
           "mixture_loss_edge", "mixture_spread", "rdp_mixture_step", "group_components",
           "convert_group_epsilon", "convert_group_delta"]


@functools.lru_cache(maxsize=256)
def group_components(group_size: int, sample_rate: float, *, full: bool = False
                     ) -> tuple[np.ndarray, np.ndarray, float, float]:
    """The binomial mixture of a group step: shifts j (units of C), log Bin(k, q)(j), their error
    bound and the tail mass dropped.

    Args:
        group_size: k ≥ 1.
        sample_rate: q in (0, 1).
        full: every j = 0..k (RDP, :func:`~dpcalc.accounting.mixture_steps.binomial_components`),
            else j ≤ K with tail ≤ MIXTURE_TAIL (pld).

    Returns:
        ``(shifts, log_weights, log_err, tail_bound)``; ``tail_bound`` 0 when nothing is dropped.
    """
    if full:
        return (*binomial_components(group_size, sample_rate), 0.0)
    lw, err, k = binomial_mixture(group_size, sample_rate, tail=MIXTURE_TAIL)
    return np.arange(k + 1, dtype=float), lw, float(err), (0.0 if k >= group_size else MIXTURE_TAIL)


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
    shifts, up, down = mog_components(step)
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
