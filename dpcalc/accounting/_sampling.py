"""Which accountant can account for which batch sampler, and why not (issue 12).

The sampler events (:class:`~dpcalc.events.FixedSizeSampledEvent`,
:class:`~dpcalc.events.TruncatedPoissonSampledEvent`) carry their own adjacency
requirements: a proof exists for some (sampler, adjacency) pairs only. Accountants call
:func:`refuse_sampler` in their ``check`` so that a sampler they have no analysis for is
shown as not applicable *with the reason*, never computed as if it were Poisson.

Supported today (docs/design.md §3, glossary "sampler"):

==================== ============ =====================================================
sampler              adjacency    accountant (source)
==================== ============ =====================================================
without-replacement  replace      pld (Dong, Roth, Su 2022 §4.1: the symmetric pair of
                                  C_γ(f), dpcalc/accounting/_sampling_pld.py);
                                  rdp (Wang, Balle, Kasiviswanathan 2019 Thm 9)
without-replacement  add-remove   pld (the Poisson-sampled Gaussian at q = B/N, σ/2: it
                                  dominates the step and is attained, issue 32,
                                  dpcalc/accounting/_sampling_pld.py); rdp (Birrell,
                                  Ebrahimi, Behnia, Pacheco 2024 Thm 3.1/3.3, the same
                                  pair; dpcalc/accounting/_fixed_size_rdp.py)
truncated-poisson    add-remove   rdp (branch decomposition of dp_accounting's truncated
                                  subsampled Gaussian; Mironov, Talwar, Zhang 2019)
with-replacement     add-remove   pld (N(0, σ²) against the binomial mixture
                                  Σ_j Bin(B, 1/N)(j) N(2j, σ²): dominates the step and
                                  is attained, issue 32, dpcalc/accounting/_sampling_pld.py);
                                  rdp (Birrell et al. 2024 Thm 3.6,
                                  dpcalc/accounting/_fixed_size_rdp.py)
with-replacement     replace      none: refused (Birrell et al. prove add/remove only)
shuffle,             zero-out,    every accountant of the unsampled Gaussian: an epoch is
balls-in-bins        replace      at most one Gaussian run (dpcalc.events.flatten; upper
                                  bound μ = √E/σ under zero-out, Chua et al. 2024 §3);
                                  add/remove refused (the layout depends on N)
==================== ============ =====================================================

Zero-out adjacency (one record replaced by a ghost with zero gradient) is not an option of
the accountants: for an unsampled Gaussian its pair is the add/remove pair N(0, σ²) vs
N(1, σ²), so the commands account zero-out with ``neighboring="add-remove"`` and say so
(:func:`sampler_adjacency`).
"""

from __future__ import annotations

from dpcalc.accounting.registry import available, default_accountant, get_accountant, get_class
from dpcalc.errors import UnsupportedEventError
from dpcalc.events import Event, FixedSizeSampledEvent, GaussianEvent, TruncatedPoissonSampledEvent

__all__ = ["SAMPLER_EVENTS", "SAMPLER_ADJACENCY", "WITH_REPLACEMENT_REASON", "WITH_REPLACEMENT_REPLACE_REASON",
           "is_sampler_event", "refuse_sampler", "check_rdp_sampler",
           "check_sampler_adjacency", "default_accountant_for", "sampler_accountant", "sampler_adjacency",
           "ZERO_OUT", "EPOCH_ADD_REMOVE_REASON"]

#: step events of the non-Poisson batch samplers
SAMPLER_EVENTS = (FixedSizeSampledEvent, TruncatedPoissonSampledEvent)

WITH_REPLACEMENT_REASON = (
    "fixed-size sampling with replacement is accounted by the pld accountant (the binomial mixture of "
    "Gaussians, add/remove adjacency) and the rdp accountant (Birrell, Ebrahimi, Behnia, Pacheco 2024 Thm 3.6) "
    "only; no other accountant has an analysis of it in dpcalc; do not report the Poisson number for it")

WITH_REPLACEMENT_REPLACE_REASON = (
    "fixed-size sampling with replacement is accounted under add/remove adjacency only (the Rényi-DP bound of "
    "Birrell, Ebrahimi, Behnia, Pacheco 2024 Thm 3.6 is proven for add/remove); omit --neighboring or use "
    "--neighboring add-remove")

TRUNCATED_REPLACE_REASON = (
    "truncated Poisson sampling is accounted under add/remove adjacency only (the branch decomposition "
    "of dp_accounting's truncated subsampled Gaussian); use --neighboring add-remove")

EPOCH_ADD_REMOVE_REASON = (
    "shuffled and balls-in-bins batches are accounted under zero-out adjacency (a record replaced by a "
    "ghost with zero gradient; Chua et al. 2024 §2) or replace-one: under add/remove the batch layout "
    "itself changes (N ± 1 records, ceil(N/B) batches), and no bound is proven; omit --neighboring "
    "(zero-out) or use --neighboring replace")

#: the adjacency the shuffle / balls-in-bins certified bound is stated under by default
ZERO_OUT = "zero-out"


def is_sampler_event(event: Event) -> bool:
    """True iff ``event`` is one step of a non-Poisson batch sampler."""
    return isinstance(event, SAMPLER_EVENTS)


def _name(event: Event) -> str:
    return getattr(event, "sampling", type(event).__name__)


def sampler_accountant() -> str:
    """The first registered accountant with an analysis of every batch sampler (its class
    declares :attr:`~dpcalc.accounting.base.Accountant.all_batch_samplers`), "" if none."""
    return next((n for n in available() if get_class(n).all_batch_samplers), "")


def refuse_sampler(event: Event, accountant: str, *, alternative: str | None = None) -> None:
    """Raise :class:`UnsupportedEventError` with the reason when ``event`` (one step) is a
    non-Poisson batch sampler: ``accountant`` has no analysis for it.

    Args:
        event: one step of a history (``flatten`` output).
        accountant: the refusing accountant's name (for the message).
        alternative: the accountant to suggest (default: :func:`sampler_accountant`).
    """
    if not is_sampler_event(event):
        return
    if isinstance(event, FixedSizeSampledEvent) and event.replacement:
        raise UnsupportedEventError(f"{accountant}: {WITH_REPLACEMENT_REASON}")
    alternative = sampler_accountant() if alternative is None else alternative
    raise UnsupportedEventError(
        f"{accountant} has no analysis implemented for {_name(event)} sampling; see --accountant {alternative}")


def check_rdp_sampler(event: Event, neighboring: str) -> None:
    """The rdp accountant's check of one sampler step (module table): fixed-size without
    replacement under either adjacency, with replacement under add/remove, truncated Poisson
    under add/remove, each of a Gaussian.

    Raises:
        UnsupportedEventError: a sampler/adjacency pair without a proof, or a sampled
            mechanism other than the Gaussian.
    """
    if isinstance(event, FixedSizeSampledEvent):
        if event.replacement and neighboring != "add-remove":
            raise UnsupportedEventError(f"rdp: {WITH_REPLACEMENT_REPLACE_REASON}")
    elif isinstance(event, TruncatedPoissonSampledEvent) and neighboring != "add-remove":
        raise UnsupportedEventError(f"rdp: {TRUNCATED_REPLACE_REASON}")
    if not isinstance(event.event, GaussianEvent):
        raise UnsupportedEventError(
            f"rdp: {_name(event)} sampling is accounted for the Gaussian mechanism only, "
            f"got a sampled {type(event.event).__name__}")


#: sampler → {adjacency: None if some accountant has a proof, else the reason it is refused}.
#: A sampler added to :data:`dpcalc.events.SAMPLINGS` adds its row here.
SAMPLER_ADJACENCY: dict[str, dict[str, str | None]] = {
    "poisson": {"add-remove": None, "replace": None},
    "without-replacement": {"add-remove": None, "replace": None},
    "with-replacement": {"add-remove": None, "replace": WITH_REPLACEMENT_REPLACE_REASON},
    "truncated-poisson": {"add-remove": None, "replace": TRUNCATED_REPLACE_REASON},
    "shuffle": {ZERO_OUT: None, "replace": None, "add-remove": EPOCH_ADD_REMOVE_REASON},
    "balls-in-bins": {ZERO_OUT: None, "replace": None, "add-remove": EPOCH_ADD_REMOVE_REASON},
}


def sampler_adjacency(sampling: str, neighboring: str, *, explicit: bool = True) -> str:
    """The adjacency a command states for ``sampling``: ``"zero-out"`` for shuffle /
    balls-in-bins when ``--neighboring`` was not given (accounted with the accountants'
    add/remove Gaussian pair, which equals zero-out's), else ``neighboring`` — refused with
    the reason when no proof exists (:func:`check_sampler_adjacency`).

    Args:
        sampling: a ``--sampling`` name.
        neighboring: ``"add-remove"`` or ``"replace"`` (the accountants' relation).
        explicit: whether the user gave ``--neighboring`` (a default add-remove means zero-out
            for the epoch samplers).

    Raises:
        ParameterError: the pair has no certified analysis in dpcalc.
    """
    from dpcalc.events import EPOCH_SAMPLINGS

    stated = ZERO_OUT if sampling in EPOCH_SAMPLINGS and neighboring == "add-remove" and not explicit else neighboring
    check_sampler_adjacency(sampling, stated)
    return stated


def check_sampler_adjacency(sampling: str, neighboring: str) -> None:
    """Refuse, before any accounting, a (sampler, adjacency) pair no accountant has a proof for.

    Args:
        sampling: a ``--sampling`` name.
        neighboring: ``"add-remove"``, ``"replace"`` or ``"zero-out"``.

    Raises:
        ParameterError: the pair has no certified analysis in dpcalc (the message says why).
    """
    from dpcalc.errors import ParameterError

    reason = SAMPLER_ADJACENCY.get(sampling, {}).get(neighboring)
    if reason is not None:
        raise ParameterError("sampling", "", sampling,
                             message=f"--sampling {sampling} under {neighboring} adjacency: {reason}")


def default_accountant_for(event: Event, neighboring: str) -> str:
    """The first certified registered accountant (registry order: tightest first) that supports
    ``event`` under ``neighboring``; the registry default when none does (its row then says why)."""
    for name in available():
        acc = get_accountant(name, neighboring=neighboring)
        if acc.certified and acc.supports(event):
            return name
    return default_accountant()
