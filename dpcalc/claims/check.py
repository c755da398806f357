"""Is a published ε right? The verdict of one DP-SGD claim (:class:`~dpcalc.claims.schema.Claim`)
against the certified bracket of the mechanism the claim describes.

Verdicts (:data:`VERDICTS`):

* ``holds`` — the claimed ε is at least the certified upper bound (the tightest certified
  accountant with a proof for the stated sampler and adjacency, ``pld`` by default);
* ``does not hold`` — the claimed ε is below a *proven lower bound* on the true ε of the stated
  mechanism: the claim is false for it. Lower bounds come from the accountant's dominating pair
  where it is attained (Poisson sampling and no subsampling under add/remove: the pld bracket's
  lower end) and from Chua et al.'s explicit pairs for shuffled and balls-in-bins batches
  (:mod:`dpcalc.accounting.shuffling`); elsewhere there is none and a claim below the certified
  bound is *inconclusive*;
* ``inconclusive`` — between the lower bound and the certified upper bound;
* ``not checkable`` — a field is missing (named) or no certified accountant models the setting.

Flags (:data:`FLAG_CODES`) name what a reader should look at: a Poisson ε claimed for a shuffled
or fixed-size run (with the sampler's certified ε, its lower bound and the factor), δ ≥ 1/N, a
verdict that changes with the convention turning epochs into steps, an adjacency mismatch, a
loose accountant ("you could claim …"), and tuning runs not accounted. The mathematics is the
accountants'; this module only compares their numbers.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, ClassVar

from dpcalc._rounding import format_bound
from dpcalc.accounting import shuffling
from dpcalc.accounting._sampling import default_accountant_for
from dpcalc.accounting.dpsgd import epsilon_by_accountant, noise_multiplier_by_accountant
from dpcalc.accounting.registry import default_accountant
from dpcalc.claims.schema import Claim
from dpcalc.errors import DpcalcError, ParameterError
from dpcalc.events import EPOCH_SAMPLINGS
from dpcalc.results import Result
from dpcalc.schedule import Schedule, resolve_schedule

__all__ = ["Bracket", "ClaimCheck", "certified_bracket", "check_claim", "check_claims", "exit_status", "VERDICTS", "FLAG_CODES", "LOOSE_FACTOR"]

HOLDS, FAILS, INCONCLUSIVE, NOT_CHECKABLE = "holds", "does not hold", "inconclusive", "not checkable"
VERDICTS = (HOLDS, FAILS, INCONCLUSIVE, NOT_CHECKABLE)
#: flag codes, in the order they are listed
FLAG_CODES = ("sampler", "delta", "steps", "adjacency", "loose", "tuning")
#: a claim more than this factor above the certified ε is flagged as loose ("you could claim …")
LOOSE_FACTOR = 1.10


@dataclass(frozen=True)
class ClaimCheck(Result):
    """The verdict on one claim.

    Attributes:
        claim: the claim as stated.
        verdict: one of :data:`VERDICTS`.
        epsilon: the certified upper bound on ε of the stated mechanism at the claim's δ (None
            when not checkable).
        epsilon_lower: a proven lower bound on that mechanism's true ε (None where none is known).
        steps, sample_rate: the T and q checked.
        neighboring: the adjacency checked (``zero-out`` for shuffle / balls-in-bins).
        accountant: what certified ``epsilon`` (a registry name, or ``e-fold-gaussian``).
        poisson_epsilon: the Poisson (pld) ε of the same (σ, q, T), for a run that did not use
            Poisson sampling.
        flags: ``[{"flag": code, "message": text}, ...]`` (codes: :data:`FLAG_CODES`).
        certified, applicable, reason, source, details: as every :class:`~dpcalc.results.Result`.
    """

    claim: Claim
    verdict: str
    epsilon: float | None = None
    epsilon_lower: float | None = None
    steps: int | None = None
    sample_rate: float | None = None
    neighboring: str | None = None
    accountant: str | None = None
    poisson_epsilon: float | None = None
    flags: tuple[dict, ...] = ()
    certified: bool = True
    applicable: bool = True
    reason: str | None = None
    source: str = ""
    details: dict = field(default_factory=dict)

    _bounded: ClassVar[tuple[str, ...]] = ()

    def _head(self) -> dict[str, Any]:
        c = self.claim
        return {"claim": c.name, "verdict": self.verdict, "claimed_epsilon": c.claimed_epsilon,
                "epsilon": self.epsilon, "epsilon_lower": self.epsilon_lower, "delta": c.delta,
                "noise_multiplier": c.noise_multiplier, "sample_rate": self.sample_rate, "steps": self.steps,
                "sampling": c.sampling, "neighboring": self.neighboring, "accountant": self.accountant,
                "poisson_epsilon": self.poisson_epsilon, "flags": [dict(f) for f in self.flags],
                "stated": c.stated()}


@dataclass(frozen=True)
class Bracket:
    """The certified ε of a stated run and what is known below it (:func:`certified_bracket`).

    Attributes:
        upper: the certified upper bound on ε (None: no certified accountant models the run).
        lower: a proven lower bound on the run's true ε (None where none is implemented).
        accountant: what certified ``upper`` (a registry name, or ``e-fold-gaussian``).
        source: the paper and theorem behind ``upper`` (and ``lower``).
        certified: True iff ``upper`` is a proven bound.
        reason: why ``upper`` is None.
        poisson: the Poisson ε of the same (σ, q, T), for a run that did not use Poisson sampling.
        steps, sample_rate: the T and q of the run.
        neighboring: the adjacency accounted (``zero-out`` for shuffle / balls-in-bins).
    """

    upper: float | None
    lower: float | None
    accountant: str
    source: str
    certified: bool
    reason: str | None = None
    poisson: float | None = None
    steps: int | None = None
    sample_rate: float | None = None
    neighboring: str | None = None


def _verdict(claimed: float, b: Bracket) -> str:
    if b.upper is None or not math.isfinite(b.upper):
        return NOT_CHECKABLE if b.upper is None else INCONCLUSIVE
    if claimed >= b.upper:
        return HOLDS
    if b.lower is not None and claimed < b.lower:
        return FAILS
    return INCONCLUSIVE


def _schedule(c: Claim, steps: int | None = None) -> Schedule:
    """The claim's schedule (T overridden by ``steps`` when given)."""
    kw: dict[str, Any] = {"sample_rate": c.sample_rate, "batch_size": c.batch_size, "dataset_size": c.dataset_size,
                          "sampling": c.sampling, "max_batch_size": c.max_batch_size}
    if steps is not None:
        kw["steps"] = steps
    else:
        kw["steps"], kw["epochs"] = c.steps, (None if c.steps is not None else c.epochs)
    return resolve_schedule(**kw)


def _convention_steps(c: Claim) -> dict[str, int]:
    """T under each convention turning E epochs into steps, for a claim stating epochs (not steps)
    of a Poisson run with B and N: ⌈E·N/B⌉, ⌈E·⌈N/B⌉⌉, ⌈E·⌊N/B⌋⌉ (and ⌈E/q⌉ with q given)."""
    if c.steps is not None or c.epochs is None or c.sampling != "poisson":
        return {}
    e = Fraction(repr(c.epochs))
    if c.sample_rate is not None:
        return {"epochs-over-q": math.ceil(e / Fraction(repr(c.sample_rate)))}
    if c.batch_size is None or c.dataset_size is None:
        return {}
    n, b = c.dataset_size, c.batch_size
    return {"ceil": math.ceil(e * n / b), "epochs-times-batches": math.ceil(e * -(-n // b)),
            "epochs-times-floor": max(1, math.ceil(e * (n // b)))}


_CONVENTION_TEXT = {"ceil": "⌈E·N/B⌉", "epochs-times-batches": "E·⌈N/B⌉", "epochs-times-floor": "E·⌊N/B⌋",
                    "epochs-over-q": "⌈E/q⌉"}


def _accounted_neighboring(c: Claim) -> str:
    """The accountants' ``neighboring`` for the stated adjacency (zero-out's pair is add/remove's)."""
    return "replace" if c.neighboring == "replace" else "add-remove"


def _bracket(c: Claim, schedule: Schedule) -> Bracket:
    """The certified upper bound and a proven lower bound (if known) of the stated mechanism."""
    b = _bracket_of(c, schedule)
    neighboring = c.neighboring or ("zero-out" if c.sampling in EPOCH_SAMPLINGS else "add-remove")
    return dataclasses.replace(b, steps=schedule.steps, sample_rate=schedule.sample_rate, neighboring=neighboring)


def _bracket_of(c: Claim, schedule: Schedule) -> Bracket:
    sigma, delta = c.noise_multiplier, c.delta
    if c.sampling in EPOCH_SAMPLINGS and c.neighboring != "replace":
        res = shuffling.steps_bracket(sampler=c.sampling, noise_multiplier=sigma, batch_size=schedule.batch_size,
                                      dataset_size=schedule.dataset_size, steps=schedule.steps, delta=delta)
        return Bracket(res.epsilon, res.epsilon_lower, shuffling.EPOCH_ACCOUNTANT, res.source, True,
                        poisson=res.poisson_epsilon)
    neighboring = _accounted_neighboring(c)
    if c.sampling == "poisson":
        name = default_accountant()
    else:
        name = default_accountant_for(schedule.event(sigma), neighboring)
    row = epsilon_by_accountant(noise_multiplier=sigma, schedule=schedule, delta=delta, accountants=[name],
                                neighboring=neighboring)[0]
    lower = None
    # the pld pair of a Poisson-sampled (or unsampled) Gaussian under add/remove is attained
    # (Zhu, Dong, Wang 2022; Koskela et al. 2020): its bracket's lower end bounds the true ε
    if c.sampling == "poisson" and neighboring == "add-remove" and row.applicable:
        lower = (row.details or {}).get("epsilon_lower")
    if not row.applicable or row.epsilon is None:
        return Bracket(None, None, name, row.source, bool(row.certified), reason=row.reason or "not applicable")
    poisson = _poisson(c, schedule) if c.sampling != "poisson" else None
    return Bracket(row.epsilon, lower, name, row.source, bool(row.certified), poisson=poisson)


def _sigma_needed(c: Claim) -> float | None:
    """The smallest σ (certified, the default accountant) for which a Poisson claim without σ holds;
    None for other samplers, adjacencies other than add/remove, or a target no σ reaches."""
    if c.sampling != "poisson" or c.neighboring == "replace" or not c.claimed_epsilon:
        return None
    try:
        row = noise_multiplier_by_accountant(target_epsilon=c.claimed_epsilon, delta=c.delta, schedule=_run_schedule(c),
                                             accountants=[default_accountant()])[0]
    except DpcalcError:
        return None
    return row.noise_multiplier if row.applicable else None


def _poisson(c: Claim, schedule: Schedule) -> float | None:
    """The certified Poisson ε (default accountant, add/remove) of the same (σ, q, T)."""
    sched = Schedule(schedule.sample_rate, schedule.steps, "sample_rate")
    row = epsilon_by_accountant(noise_multiplier=c.noise_multiplier, schedule=sched, delta=c.delta,
                                accountants=[default_accountant()])[0]
    return row.epsilon if row.applicable else None


def _flag(code: str, message: str) -> dict:
    return {"flag": code, "message": message}


def _sampler_flag(c: Claim, b: Bracket) -> dict | None:
    """A Poisson ε claimed for a run that did not use Poisson sampling."""
    if c.sampling == "poisson" or b.upper is None or c.claimed_epsilon >= b.upper:
        return None
    claimed = c.claimed_epsilon
    text = (f"the run used {c.sampling} batches, but the claimed ε {claimed:g} is below this sampler's certified "
            f"ε {format_bound(b.upper)}")
    if b.poisson is not None:
        text += f" (the Poisson ε of the same σ, q, T is {format_bound(b.poisson)}: the number usually reported)"
    if b.lower is not None and claimed < b.lower:
        factor = "an unbounded factor" if claimed == 0 else f"≥ {format_bound(b.lower / claimed, 'down')}×"
        text += f"; its proven lower bound is {format_bound(b.lower, 'down')}: the claim under-reports ε by {factor}"
    elif b.lower is not None:
        text += f"; its proven lower bound is {format_bound(b.lower, 'down')}"
    else:
        text += f"; no proven lower bound on its ε is implemented for {c.sampling}"
        if claimed > 0:
            text += f" (the claim may under-report ε by up to {format_bound(b.upper / claimed)}×)"
    return _flag("sampler", text + " (Chua et al. ICML 2024)")


def _steps_flag(c: Claim, schedule: Schedule, verdict: str) -> tuple[dict | None, dict]:
    """The verdict under each other convention for T, flagged when one differs."""
    alts = _convention_steps(c)
    out: dict[str, Any] = {}
    differs = []
    for conv, t in alts.items():
        if t == schedule.steps:
            out[conv] = {"steps": t, "verdict": verdict}
            continue
        b = _bracket(c, _schedule(c, steps=t))
        v = _verdict(c.claimed_epsilon, b)
        out[conv] = {"steps": t, "verdict": v, "epsilon": b.upper, "epsilon_lower": b.lower}
        if v != verdict:
            differs.append(f"T = {_CONVENTION_TEXT[conv]} = {t:,}: {v} (certified ε {format_bound(b.upper)})")
    if not differs:
        return None, out
    here = f"T = {schedule.steps:,}"
    if c.steps_convention:
        here += f" ({_CONVENTION_TEXT[c.steps_convention]}, as stated)"
    return _flag("steps", f"the verdict depends on how epochs become steps: {here}: {verdict}; "
                          + "; ".join(differs)), out


def certified_bracket(claim: Claim) -> Bracket:
    """The certified bracket of the run a claim states, whatever ε it claims (``claimed_epsilon``
    may be absent): the numbers ``dpcalc report`` states.

    Raises:
        ParameterError: a field the bracket needs is missing (named), or a schedule the fields
            cannot give.
        UnsupportedEventError: no accountant has a proof for the stated sampler and adjacency.
    """
    missing = [m for m in claim.missing if m != "claimed_epsilon"]
    if missing:
        raise ParameterError(missing[0].split(",")[0].split(" ")[0], "", None,
                             message="the run is incomplete: missing " + ", ".join(missing))
    if claim.sampling in EPOCH_SAMPLINGS and claim.neighboring == "add-remove":
        raise ParameterError("neighboring", "", "add-remove", message=(
            f"add/remove adjacency has no proof for {claim.sampling} batches; state zero-out or replace"))
    return _bracket(claim, _run_schedule(claim))


def _run_schedule(c: Claim) -> Schedule:
    """The claim's schedule, with T from its stated convention when it gives epochs."""
    schedule = _schedule(c)
    if c.steps_convention and c.steps is None and c.epochs is not None:
        alts = _convention_steps(c)
        if c.steps_convention in alts:
            schedule = _schedule(c, steps=alts[c.steps_convention])
    return schedule


def check_claim(claim: Claim) -> ClaimCheck:
    """Check one claim: its certified bracket, verdict and flags.

    Args:
        claim: from :func:`dpcalc.claims.schema.claim_from_mapping` or
            :func:`~dpcalc.claims.schema.load_claims`.

    Returns:
        A :class:`ClaimCheck` (verdict ``not checkable`` with the reason for a claim that lacks a
        field or that no certified accountant models).

    Raises:
        ParameterError: a schedule the options cannot give (conflicting fields, B > N, ...).
    """
    c = claim
    if c.missing:
        reason, details = "missing: " + ", ".join(c.missing), {}
        sigma = _sigma_needed(c) if c.missing == ("noise_multiplier",) else None
        if sigma is not None:
            reason += f" (the claim holds for σ ≥ {format_bound(sigma)}: pld, Poisson sampling)"
            details["noise_multiplier_needed"] = sigma
        return ClaimCheck(c, NOT_CHECKABLE, applicable=False, reason=reason, details=details)
    if c.sampling in EPOCH_SAMPLINGS and c.neighboring == "add-remove":
        return ClaimCheck(c, NOT_CHECKABLE, applicable=False, reason=(
            f"add/remove adjacency has no proof for {c.sampling} batches (the batch layout changes with N); "
            "state zero-out or replace"))
    schedule = _run_schedule(c)
    try:
        b = _bracket(c, schedule)
    except ParameterError:  # bad input stays bad input (exit 2), never a verdict
        raise
    except DpcalcError as e:  # an unsupported (sampler, adjacency) pair, an infeasible request
        return ClaimCheck(c, NOT_CHECKABLE, steps=schedule.steps, sample_rate=schedule.sample_rate,
                          applicable=False, reason=str(e))
    neighboring = c.neighboring or ("zero-out" if c.sampling in EPOCH_SAMPLINGS else "add-remove")
    verdict = _verdict(c.claimed_epsilon, b)
    if verdict == NOT_CHECKABLE:
        return ClaimCheck(c, NOT_CHECKABLE, steps=schedule.steps, sample_rate=schedule.sample_rate,
                          neighboring=neighboring, accountant=b.accountant, applicable=False, reason=b.reason)
    flags: list[dict] = []
    details: dict[str, Any] = {}
    f = _sampler_flag(c, b)
    if f:
        flags.append(f)
    warn = schedule.small_delta_warning(c.delta)
    if warn:
        flags.append(_flag("delta", warn))
    f, alts = _steps_flag(c, schedule, verdict)
    if alts:
        details["steps_conventions"] = alts
    if f:
        flags.append(f)
    reason = None
    if verdict == HOLDS and c.steps_convention is None and c.steps is None \
            and any(a["verdict"] != HOLDS for a in alts.values()):
        # the claim does not say how epochs became steps, and another reading makes it false or
        # unproven: "holds" would rest on the reading most favourable to the claim
        verdict = INCONCLUSIVE
        reason = ("holds only for some readings of epochs as steps; state steps or steps_convention "
                  "(see the steps flag)")
    if verdict == HOLDS and not b.certified:  # a verdict "holds" needs a proven upper bound
        verdict, reason = INCONCLUSIVE, f"{b.accountant}'s number is not certified"
    f = _adjacency_flag(c, neighboring)
    if f:
        flags.append(f)
    if b.upper is not None and b.upper > 0 and c.claimed_epsilon > LOOSE_FACTOR * b.upper:
        acc = f" ({c.accountant_used})" if c.accountant_used else ""
        flags.append(_flag("loose", f"the claimed ε {c.claimed_epsilon:g}{acc} is {format_bound(c.claimed_epsilon / b.upper, 'down')}× "
                                    f"the certified ε: you could claim ε = {format_bound(b.upper)} at δ = {c.delta:g} "
                                    f"({b.accountant})"))
    if c.tuning_runs is not None and c.tuning_runs > 1 and c.tuning_accounted is not True:
        flags.append(_flag("tuning", f"{c.tuning_runs:,} training runs were made on the private data while "
                                     "tuning, and the claimed ε covers one: the released model's ε is larger "
                                     "(Papernot & Steinke 2022; dpcalc tune gives the cost)"))
    return ClaimCheck(c, verdict, epsilon=b.upper, epsilon_lower=b.lower, steps=schedule.steps,
                      sample_rate=schedule.sample_rate, neighboring=neighboring, accountant=b.accountant,
                      poisson_epsilon=b.poisson, flags=tuple(flags), certified=b.certified, source=b.source,
                      reason=reason, details=details)


def _adjacency_flag(c: Claim, neighboring: str) -> dict | None:
    acc = c.accounted_neighboring
    if acc is None:
        return None
    same = {"add-remove", "zero-out"} if c.sampling == "poisson" else {acc}
    if acc == neighboring or (acc in same and neighboring in same):
        return None
    if neighboring == "replace":
        return _flag("adjacency", f"the guarantee is stated for replace-one but the ε was computed for {acc}: "
                                  "replacing a record moves the sum by up to 2C, so it costs more; the verdict "
                                  "above is for replace-one")
    return _flag("adjacency", f"the guarantee is stated for {neighboring} but the ε was computed for {acc}: the "
                              f"verdict above is for {neighboring}")


def check_claims(claims: list[Claim], *, name_claims: bool = True) -> list[ClaimCheck]:
    """:func:`check_claim` for each claim, in order.

    Raises:
        ParameterError: a claim whose fields give no schedule (conflicting fields, B > N, ...);
            with ``name_claims`` the message starts with the claim (``claim 3 (id): ...``).
    """
    out = []
    for c in claims:
        try:
            out.append(check_claim(c))
        except ParameterError as e:
            if not name_claims:
                raise
            where = f"claim {c.index + 1}" + (f" ({c.id})" if c.id else "")
            raise ParameterError(e.name, e.allowed, e.value, message=f"{where}: {e.message}") from None
    return out


def exit_status(checks: list[ClaimCheck]) -> int:
    """0 when every claim holds, else 1 (bad input never gets here: it is exit 2)."""
    return 0 if checks and all(ch.verdict == HOLDS for ch in checks) else 1

