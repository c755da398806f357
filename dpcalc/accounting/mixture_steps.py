"""Mixture-of-Gaussians and group steps without the PLD machinery: recognising and checking them,
their RDP curve, and the group-privacy conversion of a record-level guarantee that
``dpcalc epsilon --group-size`` prints beside them.

The mathematics (the dominating pair of a group-level DP-SGD step, the reading of a
:class:`~dpcalc.events.MixtureOfGaussiansEvent`'s weights) is in the docstring of
:mod:`dpcalc.accounting.group`, which adds pld's pairs and re-exports this module. The two are
apart so that the ``rdp`` accountant and the DP-SGD tables (:mod:`dpcalc.accounting.dpsgd`) do
not import pld's grid and loss modules (start-up time, docs/design.md §2.3).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from dpcalc._numerics import log_binomial_pmf
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

__all__ = ["GROUP_SOURCE", "MOG_SOURCE", "is_mixture_step", "check_mixture_step", "binomial_components",
           "mog_components", "rdp_mixture_step", "convert_group_epsilon", "convert_group_delta"]

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
def binomial_components(group_size: int, sample_rate: float) -> tuple[np.ndarray, np.ndarray, float]:
    """Every component of a group step's binomial mixture: shifts j = 0..k (units of C),
    log Bin(k, q)(j) and its error bound (:func:`dpcalc._numerics.log_binomial_pmf`).

    Args:
        group_size: k ≥ 1.
        sample_rate: q in (0, 1).

    Returns:
        ``(shifts, log_weights, log_err)``.
    """
    j = np.arange(group_size + 1, dtype=float)
    lw, err = log_binomial_pmf(j, group_size, math.log(sample_rate), math.log1p(-sample_rate))
    return j, lw, float(err)


def mog_components(event: MixtureOfGaussiansEvent) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Shifts (increasing, merged, 0 first), log weights rounded up and down
    (:mod:`dpcalc.accounting.group`'s docstring: the user's weights over their sum s).

    Args:
        event: the mixture (σ, shifts c_i, weights p_i).

    Returns:
        ``(shifts, log_weights_up, log_weights_down)``, arrays of one length.
    """
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


@functools.lru_cache(maxsize=128)
def _rdp_cached(step: Event, orders: tuple) -> np.ndarray:
    if isinstance(step, GroupEvent):
        sigma = step.event.event.noise_multiplier
        shifts, lw, err = binomial_components(step.group_size, step.event.sample_rate)
        up, down = lw + err, lw - err
    else:
        sigma = step.standard_deviation
        shifts, up, down = mog_components(step)
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
