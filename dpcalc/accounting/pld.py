r"""Certified privacy-loss-distribution (PLD) accountant: tight ε with a proven bracket.

Layers (docs/contributing.md §4): the history as checked segments (``_pld_history``) →
privacy-loss pairs per mechanism (``_pld_mechanisms``) → discretisation on a uniform grid of
losses, pessimistic and optimistic (``_pld_grid``) → composition by FFT (``_pld_compose``;
randomized response exactly, ``_pld_rr``) → ε/δ read-out (here).

Mathematics and sources
-----------------------
* Privacy loss distributions and their composition by convolution: Meiser &
  Mohammadi 2018 ("privacy buckets"); Koskela, Jälkö, Honkela 2020 (FFT
  accountant); Gopi, Lee, Wutschitz 2021 (PRV accountant); Doroshenko, Ghazi,
  Kamath, Kumar, Manurangsi 2022 ("Connect the dots").
* δ(ε) = E_P[(1 − e^{ε−L})₊] + P(L = ∞) for each neighbouring ordering; a history is
  (ε, δ)-DP iff it holds for both orderings, so the reported ε is the max over them
  (the Gaussian, Laplace, randomized-response and replace-one pairs are symmetric; the sampled
  Gaussian's add pair is its remove pair swapped, bounded by duality: ``Composed``).
* **Upper bound** (the certified ``epsilon``): connect-the-dots discretisation
  (Doroshenko et al. 2022, §3) — a pair that dominates the true pair for every ε,
  hence after any number of compositions; truncated tails are moved upward or to
  +∞, aliasing and floating-point error are added to δ.
* **Lower bound** (``details["epsilon_lower"]``): merging the outcomes of each grid
  bin and pooling neighbours (post-processing, hence dominated), labelled with a
  grid value ≤ its true loss; truncated mass is dropped, aliasing subtracted.
* Both discretisations are second-order accurate in the grid step h (no T·h/2
  drift). The grid step is chosen automatically (refined until the upper and lower ε
  are within the requested accuracy) unless given as ``discretization``.

Dominating pairs used (docs/design.md §4, docs/numerical-accounting.md §2): Gaussian μ = Δ/σ (Balle & Wang
2018); Poisson-sampled Gaussian add/remove (Mironov, Talwar, Zhang 2019 §3.3; Zhu,
Dong, Wang 2022); Poisson-sampled Gaussian replace-one, P = (1−q)N(0,σ²) + qN(1,σ²)
vs Q = (1−q)N(0,σ²) + qN(−1,σ²) (Koskela, Jälkö, Honkela 2020, "substitute
relation"; the same pair as dp_accounting's REPLACE_ONE; at q = 1 it is the
Gaussian with sensitivity 2); Laplace (sensitivity 2 under replace-one); an
(ε, δ)-DP mechanism through generalised randomized response (Kairouz, Oh,
Viswanath 2015 §2–3), valid under either relation; an ε-bounded-range mechanism (the
exponential mechanism) through the dominating pair of the ε-BR class (derived from Dong,
Durfee, Rogers 2020 §4 in ``_pld_mechanisms.BoundedRangeLoss``; ε taken as given under
either relation).
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import partial
from typing import ClassVar

import numpy as np

from dpcalc import _validate as v
from dpcalc.accounting._pld_cache import upper_cache_get, upper_cache_put, warm_allocator
from dpcalc.accounting._pld_compose import (
    Composed,
    convolve,
    delta_for_epsilon,
    epsilon_for_delta_both,
    identity,
    self_compose,
)
from dpcalc.accounting._pld_grid import DiscretePLD, GridTooLargeError, tail_points
from dpcalc.accounting._pld_history import check_sampler_step, segments
from dpcalc.accounting._pld_mechanisms import (
    BoundedRangeLoss,
    GaussianLoss,
    LaplaceLoss,
    LossPair,
    RandomizedResponseLoss,
    SampledGaussianLoss,
    SampledGaussianReplaceLoss,
)
from dpcalc.accounting._pld_mixture import discretize_pair
from dpcalc.accounting._pld_queries import ETA_REL as _ETA_REL
from dpcalc.accounting._pld_queries import delta_eta, privacy_profile
from dpcalc.accounting._pld_rr import rr_parts
from dpcalc.accounting._sampling import is_sampler_event
from dpcalc.accounting._sampling_pld import fixed_size_loss_edge, fixed_size_pair
from dpcalc.accounting._truncated_pld import truncated_poisson_pair, truncated_spread
from dpcalc.accounting.base import Accountant
from dpcalc.accounting.group import is_mixture_step, mixture_loss_edge, mixture_pair, mixture_spread
from dpcalc.errors import ParameterError, UnsupportedEventError
from dpcalc.events import (
    EpsilonDeltaEvent,
    Event,
    ExponentialMechanismEvent,
    GaussianEvent,
    LaplaceEvent,
    PoissonSampledEvent,
    TruncatedPoissonSampledEvent,
)
from dpcalc.results import AccountingResult

__all__ = ["PldAccountant", "DEFAULT_ACCURACY", "DEFAULT_MAX_GRID_POINTS"]

#: default relative accuracy: upper and lower ε within 0.5% of each other
DEFAULT_ACCURACY = 0.005
#: default memory cap on any grid (2^22 float64 points = 32 MiB per array)
DEFAULT_MAX_GRID_POINTS = 2 ** 22
_MAX_ROUNDS = 6
#: a refinement whose composed grid, extrapolated from the last round (length ∝ 1/h), exceeds
#: max_grid_points by this factor is not attempted
_SKIP_GRID = 1.0
#: a Poisson-sampled Gaussian segment is "rarely sampled" when T·q (the expected number of
#: steps that sample the differing record) is below this; its first grid is then capped at
_RARE_SAMPLED = 10.0
#: ... this many points across its one-step loss range (:meth:`PldAccountant._step_h`)
_RARE_POINTS = 2 ** 17
#: a result is polished by one more round at h/2 if that round's grid (~2x) stays within this
_POLISH_POINTS = 2 ** 15

_SOURCE = "Doroshenko et al. 2022 (connect the dots); Koskela et al. 2020"


def _ladder(h: float) -> float:
    """Round a grid step down to the ladder 2^(j/4): the automatic grid is then a piecewise
    constant function of the event (wide pieces), so ε(σ) is smooth between rare switches."""
    return 2.0 ** (math.floor(4.0 * math.log2(h)) / 4.0)


class PldAccountant(Accountant):
    r"""Numerical accountant on privacy loss distributions with certified upper and lower bounds.

    Args:
        neighboring: ``"add-remove"`` (default) or ``"replace"`` (replace-one).
        discretization: grid step h of the privacy loss (nats), > 0; default: chosen
            automatically to meet ``accuracy``.
        accuracy: requested relative gap between the upper and the lower ε (default
            0.005; the absolute gap floor is 0.2·accuracy, i.e. 1e-3 by default, for tiny ε).
        max_grid_points: memory cap on any grid (default 2²²). If the accuracy cannot be
            met within it, the bounds obtained are reported with a warning in
            ``details["warnings"]``.

    Raises:
        ParameterError: an option out of range.
    """

    name = "pld"
    certified = True
    source = _SOURCE
    short_source = "KJH20; DGKKM22"
    #: polish small results by one more round at h/2 (off for the internal calibration copies)
    _polish: ClassVar[bool] = True
    description = ("privacy loss distributions (connect-the-dots upper bound, certified; "
                   "lower bound reported)")
    grid_evaluations = 5  # --steps-grid: one full evaluation per point, so few points
    options = ("discretization", "accuracy")  # --discretization, --accuracy
    plotted_curve = True
    curve_by_epsilon = True  # ε is read off the composed distribution directly
    max_distinct = 64
    distinct_cost = ("pld composes each distinct mechanism with its own FFT convolution, so its time grows "
                     "with their number")

    def __init__(self, *, neighboring: str = "add-remove", discretization: float | None = None,
                 accuracy: float | None = None, max_grid_points: int = DEFAULT_MAX_GRID_POINTS) -> None:
        super().__init__(neighboring=neighboring)
        self.discretization = None if discretization is None else v.positive("discretization", discretization)
        acc = DEFAULT_ACCURACY if accuracy is None else v.positive("accuracy", accuracy)
        if acc >= 1:
            raise ParameterError("accuracy", "in (0, 1)", acc)
        self.accuracy = acc
        self.max_grid_points = v.count("max_grid_points", max_grid_points, minimum=1024)

    # ------------------------------------------------------------------ events → pairs
    def check(self, event: Event) -> None:
        for step, _ in segments(event, self.neighboring, self.name):
            check_sampler_step(step, self.neighboring, self.name)

    def _pair(self, step: Event, direction: str) -> LossPair:
        replace = self.neighboring == "replace"
        if isinstance(step, GaussianEvent):
            return GaussianLoss((2.0 if replace else 1.0) / step.noise_multiplier)
        if isinstance(step, PoissonSampledEvent):
            sigma, q = step.event.noise_multiplier, step.sample_rate
            if replace:
                return SampledGaussianReplaceLoss(sigma, q)
            return SampledGaussianLoss(sigma, q, direction)
        if isinstance(step, TruncatedPoissonSampledEvent):
            check_sampler_step(step, self.neighboring, self.name)
            return truncated_poisson_pair(step, direction)
        if is_sampler_event(step):
            check_sampler_step(step, self.neighboring, self.name)
            return fixed_size_pair(step, self.neighboring, direction)
        if is_mixture_step(step):  # mixture of Gaussians, group of records (dpcalc/accounting/group.py)
            return mixture_pair(step, direction)
        if isinstance(step, LaplaceEvent):
            return LaplaceLoss(step.scale / 2.0 if replace else step.scale)
        if isinstance(step, EpsilonDeltaEvent):
            return RandomizedResponseLoss(step.epsilon, step.delta)
        if isinstance(step, ExponentialMechanismEvent):
            return BoundedRangeLoss(step.epsilon)
        raise UnsupportedEventError(f"pld cannot account for {type(step).__name__}")  # pragma: no cover

    @staticmethod
    def _spread(step: Event, replace: bool) -> float:
        """Rough std of one step's privacy loss (sets the initial grid step)."""
        if isinstance(step, GaussianEvent):
            return (2.0 if replace else 1.0) / step.noise_multiplier
        if isinstance(step, PoissonSampledEvent):
            s = step.event.noise_multiplier
            k = 2.0 if replace else 1.0
            return min(k / s, k * step.sample_rate * math.sqrt(math.expm1(min(1.0 / s ** 2, 700.0))))
        if isinstance(step, TruncatedPoissonSampledEvent):
            return truncated_spread(step)
        if is_mixture_step(step):
            return mixture_spread(step)
        if is_sampler_event(step):  # without replacement: the remove pair at σ/2 on ℓ > 0, mirrored
            s = step.event.noise_multiplier / 2.0
            return min(1.0 / s, step.sample_rate * math.sqrt(math.expm1(min(1.0 / s ** 2, 700.0))))
        if isinstance(step, LaplaceEvent):
            return (2.0 if replace else 1.0) / step.scale
        if isinstance(step, ExponentialMechanismEvent):
            return max(step.epsilon / 2.0, 1e-3)  # loss spread over [−ε, ε], std ≈ ε/√3
        return max(step.epsilon, 1e-3)  # EpsilonDeltaEvent

    def _step_h(self, step: Event, count: int, total: int, eta: float, replace: bool,
                edge: bool = True) -> float:
        """Initial grid step for one segment: 2·spread·√accuracy, except for a rarely sampled
        Gaussian (see :data:`_RARE_SAMPLED`), whose grid starts at most ``_RARE_POINTS`` points
        across its one-step loss range (and, with ``edge`` under add/remove, with the edge
        ln(1−q) inside bin 0, which only the lower bound needs).

        With a tiny sample rate q (or few steps), the loss is ≈ 0 except for the rare sampled-in
        outcomes, whose loss is of order one: the std of the loss (q·√(e^{1/σ²} − 1)) is tiny
        while the range the grid must cover (up to the 1 − η tail quantile) is not, so a grid
        step tied to the std needs millions of points (q = 1e-6, σ = 0.5: 3.5M points, ~10 s)
        although ε is set by the rare outcomes and is resolved by a much coarser grid. The
        grid is then refined as usual until the bracket meets the accuracy.
        """
        h = 2.0 * self._spread(step, replace) * math.sqrt(self.accuracy)
        if isinstance(step, PoissonSampledEvent) and step.sample_rate * count < _RARE_SAMPLED:
            pair = self._pair(step, "remove")
            lo, hi = tail_points(pair, eta / (8.0 * total))
            if math.isfinite(lo) and math.isfinite(hi):
                h = max(h, (hi - lo) / _RARE_POINTS)
            if edge and not replace:
                # and with the edge ln(1−q) inside bin 0, so that the bulk (loss within ~q of 0)
                # is one atom, which the shifted lower grid labels without bias (_lump_offset)
                h = max(h, -4.0 * math.log1p(-step.sample_rate))
        return h

    def _initial_h(self, segs: list[tuple[Event, int]], eta: float) -> float:
        replace = self.neighboring == "replace"
        total = sum(c for _, c in segs)
        h = min(self._step_h(step, count, total, eta, replace) for step, count in segs)
        return self._align(_ladder(h), segs, replace)

    def _start_h(self, segs, eta: float) -> float:
        if self.discretization is not None:
            # honour an explicit step: align only when that changes it by less than half
            h = self._align(self.discretization, segs, self.neighboring == "replace")
            return h if h >= 0.5 * self.discretization else self.discretization
        return self._initial_h(segs, eta)

    @staticmethod
    def _align(h: float, segs: list[tuple[Event, int]], replace: bool) -> float:
        """Shrink h slightly so that the lower edge ln(1−q) of the first sampled Gaussian's
        loss is a bin boundary (g_k − h/2): the optimistic construction then has a pooling
        partner for the edge bin, where the loss mass piles up (see ``_pld_grid``).

        When the edge lies inside bin 0 (|ln(1−q)| < h/2: a tiny q on a coarse grid), h is
        left alone: aligning would force h ≤ ⅔|ln(1−q)| ≈ ⅔q, i.e. millions of grid points for
        q = 1e-6; the edge bin is then handled by ``_fix_edge_bins`` (any partition of the
        outcomes is a valid merge, so the lower bound stays valid either way)."""
        for step, _ in segs:
            edge = math.log1p(-step.sample_rate) if isinstance(step, PoissonSampledEvent) and not replace \
                else fixed_size_loss_edge(step) or mixture_loss_edge(step)  # mixtures: their edge, the same way
            if edge is not None:
                k = math.floor(edge / h + 0.5)
                if k == 0:
                    return h
                return edge / (k - 0.5)
            if isinstance(step, (LaplaceEvent, EpsilonDeltaEvent)):
                # atoms at ±ε: put them on grid points (ε = k·h) so neither bound rounds them
                eps = (1.0 / step.scale) * (2.0 if replace else 1.0) if isinstance(step, LaplaceEvent) \
                    else step.epsilon
                if eps > 0:
                    return eps / math.ceil(eps / h - 1e-9)
        return h

    # ------------------------------------------------------------------ composition
    def _combine(self, steps: list[tuple[DiscretePLD, int]], h: float, eta: float, upper: bool,
                 extra_slack: float, lams: list[list] = ()) -> DiscretePLD:
        """Self-compose each (pmf, count), then convolve the results pairwise (a balanced tree:
        many segments cost about as much as a few). ``lams[i]``: step i's Chernoff λ's, shared
        by its upper and lower compositions (``self_compose``)."""
        n = max(len(steps), 1)
        composed = [self_compose(p, c, eta=eta / (4.0 * n), max_points=self.max_grid_points,
                                 lams=lams[i] if i < len(lams) else None) for i, (p, c) in enumerate(steps)]
        if not composed:
            composed = [identity(h, upper)]
        while len(composed) > 1:
            nxt = [convolve(composed[i], composed[i + 1], eta=eta / (8.0 * n), max_points=self.max_grid_points)
                   for i in range(0, len(composed) - 1, 2)]
            if len(composed) % 2:
                nxt.append(composed[-1])
            composed = nxt
        out = composed[0]
        return replace(out, slack=out.slack + extra_slack) if extra_slack else out

    def _compose(self, segs, h: float, eta: float, lower: bool = True,
                 directions: tuple[str, ...] | None = None, memo: dict | None = None) -> Composed:
        """Upper and lower (None unless ``lower``) composed PMFs per neighbouring ordering needed, a
        :class:`Composed`: only the remove one when the add pairs are its pairs swapped (the add
        ordering on demand, sharing ``memo``). ``directions``: compose exactly those orderings."""
        warm_allocator()  # once per process: keeps the FFT buffers in the heap (see its docstring)
        total = sum(c for _, c in segs)
        snap_max = 0.45 * self.max_grid_points * h
        dp = [(s, c) for s, c in segs if isinstance(s, EpsilonDeltaEvent) and s.epsilon <= snap_max]
        other = [(s, c) for s, c in segs if not (isinstance(s, EpsilonDeltaEvent) and s.epsilon <= snap_max)]
        pairs = {d: [self._pair(s, d) for s, _ in other] for d in ("remove", "add")}
        pending, memo = None, {} if memo is None else memo  # memo: Φ values shared by the orderings
        if directions is None:
            swap = all(p.symmetric or isinstance(p, SampledGaussianLoss) for p in pairs["remove"])
            directions = ("remove",) if swap else ("remove", "add")
            if swap and not all(p.symmetric for p in pairs["remove"]):
                pending = partial(self._compose, segs, h, eta, lower, ("add",), memo)
        # rarely sampled Gaussians: lower PMF on a grid shifted onto the bulk atom (_lump_offset)
        rare_steps = [isinstance(s, PoissonSampledEvent) and self.neighboring != "replace"
                      and s.sample_rate * c < _RARE_SAMPLED for s, c in other]
        bounds = (True, False) if lower else (True,)
        # the upper PMFs depend on nothing else: a calibration verifies at a σ whose upper bound
        # on this grid its stand-in has just computed (_FixedGridPld)
        key = (tuple(segs), h, eta, self.neighboring, self.max_grid_points, directions)
        cached = upper_cache_get(key)
        if cached is not None and not lower:
            return Composed({d: (cached[d], None) for d in directions}, pending)
        dp_parts = {b: rr_parts(dp, h, b, eta) for b in bounds if not (b and cached)} if dp else {}
        # the Chernoff λ's of each step's upper composition, reused by its lower one (kept with
        # the cached upper PMFs: the lower PMFs are the same whether the uppers were cached or not)
        lams = (cached or {}).get("chernoff") or {d: [[] for _ in other] for d in directions}
        out = Composed({}, pending)
        for d in directions:
            disc = [discretize_pair(pair, h, tail=eta / (8.0 * total), max_points=self.max_grid_points, lower=lower,
                                    shift_lower=rare, memo=memo, upper=cached is None)
                    for pair, rare in zip(pairs[d], rare_steps, strict=True)]
            res = []
            for b in bounds:
                if b and cached:
                    res.append(cached[d])
                    continue
                steps = [(pmfs[0] if b else pmfs[1], count) for pmfs, (_, count) in zip(disc, other, strict=True)]
                extra = 0.0
                if dp:
                    parts, extra = dp_parts[b]
                    steps += parts
                res.append(self._combine(steps, h, eta, b, extra, lams[d]))
            out[d] = (res[0], res[1] if lower else None)
        if cached is None:
            upper_cache_put(key, {**{d: pair[0] for d, pair in out.items()}, "chernoff": lams})
        return out

    def _refine(self, segs, h0: float, eta: float, readout, aim: float = 0.8, polish_lower: bool = True):
        """Run the composition at h0, refining h until ``readout`` says the accuracy is met.

        ``readout(composed) -> (upper, lower, gap_ratio, at_floor)``; the next step is h times
        ``aim``/√gap_ratio (at most ½), then a "polish" round at h/2 if its grid stays within
        ``_POLISH_POINTS`` (the two certified brackets intersected). Returns the last successful
        (upper, lower, h, points, warnings, rounds). ``polish_lower`` False: the polish round
        composes the upper PMFs only (its lower PMFs are None; the lower bound is the previous
        round's).
        """
        replace = self.neighboring == "replace"
        h = h0
        best = None
        # distinct ε's of (ε, δ)-DP steps are rounded to the grid (first order in h)
        first_order = len({s.epsilon for s, _ in segs if isinstance(s, EpsilonDeltaEvent)}) > 1
        warnings: list[str] = []
        rounds = 0
        for _ in range(_MAX_ROUNDS):
            rounds += 1
            if best is not None and best[3] * (best[2] / h) > _SKIP_GRID * self.max_grid_points:
                # the composed window's length in grid points scales like 1/h: this round would end
                # in GridTooLargeError after the costly one-step discretisation (issue 17)
                warnings.append(
                    f"requested accuracy {self.accuracy:g} not met within max_grid_points="
                    f"{self.max_grid_points} (a grid of about {int(best[3] * best[2] / h)} points was "
                    "needed); the certified upper bound and the lower bound obtained are reported")
                break
            try:
                comp = self._compose(segs, h, eta)  # the read-out may compose more (Composed)
                upper, lower, gap_ratio, at_floor = readout(comp)
                comp.pending = None  # read: the add ordering (and its memo) no longer needed
            except GridTooLargeError as exc:
                if best is None:
                    # even the first grid does not fit: coarsen until it does
                    h *= 2.0 * max(1.0, (exc.points / self.max_grid_points) ** 0.5)
                    if self.discretization is not None:
                        warnings.append(f"discretization {self.discretization:g} needs more than "
                                        f"max_grid_points={self.max_grid_points} points; coarsened")
                    continue
                warnings.append(
                    f"requested accuracy {self.accuracy:g} not met within max_grid_points="
                    f"{self.max_grid_points} (a grid of {exc.points} points was needed); "
                    "the certified upper bound and the lower bound obtained are reported")
                break
            points = max(p.probs.size for pair in comp.values() for p in pair)
            best = (upper, lower, h, points)
            if self.discretization is not None and gap_ratio > 1.0:
                warnings.append(f"requested accuracy {self.accuracy:g} not met at discretization "
                                f"{h:g}: the bracket is wider; use a finer --discretization")
            if self.discretization is not None or gap_ratio <= 1.0:
                break
            if at_floor:
                warnings.append(
                    f"requested accuracy {self.accuracy:g} not met: at this delta the bracket is set by "
                    "the numerical allowance of FFT composition (truncation and round-off, "
                    "details.slack), not by the grid; a finer grid cannot help")
                break
            if not math.isfinite(gap_ratio):
                factor = 0.25
            elif first_order:  # snapped (ε, δ) steps: the bracket shrinks like h, not h²
                factor = min(0.5, aim / gap_ratio)
            else:
                factor = min(0.5, aim / math.sqrt(gap_ratio))
            h = self._align(_ladder(h * factor), segs, replace)
        else:
            warnings.append(f"requested accuracy {self.accuracy:g} not met after {_MAX_ROUNDS} refinements")
        if best is None:
            raise UnsupportedEventError(  # pragma: no cover - max_grid_points ≥ 1024 always fits something
                f"no grid within max_grid_points={self.max_grid_points} fits this history")
        if (self.discretization is None and self._polish and not warnings
                and 2 * best[3] <= _POLISH_POINTS and math.isfinite(best[0])):
            # Cheap case: one more round at h/2, the two certified brackets intersected. Beyond
            # _POLISH_POINTS the accuracy is met and it would cost twice the whole computation
            # (issue 31: 2/3 of bench_pld's slow cases) for a fraction of the tolerance.
            h2 = self._align(best[2] / 2.0, segs, replace)
            try:
                comp = self._compose(segs, h2, eta, lower=polish_lower)
                upper, lower, _, _ = readout(comp)
            except GridTooLargeError:  # pragma: no cover - cap far above _POLISH_POINTS
                comp = None
            if comp is not None:
                rounds += 1
                points = max(p.probs.size for pair in comp.values() for p in pair if p is not None)
                best = (min(best[0], upper), max(best[1], lower), h2, points)
        return (*best, warnings, rounds)

    def _tolerance(self, eps_upper: float) -> float:
        return max(self.accuracy * eps_upper, 0.2 * self.accuracy)

    # ------------------------------------------------------------------ public API
    def epsilon(self, event: Event, *, delta: float) -> AccountingResult:
        r"""Certified ε (upper bound) at ``delta``, with the lower bound in ``details``.

        Args:
            event: the mechanism history (Gaussian, Poisson-sampled Gaussian, Laplace,
                (ε, δ)-DP events, self-composed and composed).
            delta: δ in (0, 1).

        Returns:
            ``AccountingResult(accountant="pld", epsilon=upper, certified=True, details=
            {"epsilon_lower", "discretization", "grid_points", "slack", "rounds", ...})``.
            ``epsilon`` is ``inf`` (with a reason) when no finite ε is certified at this δ.

        Raises:
            ParameterError: ``delta`` not in (0, 1).
            UnsupportedEventError: an event pld cannot account for.
        """
        return self._epsilon(event, delta, polish_lower=True)

    def calibration_probe(self, event: Event, *, delta: float) -> AccountingResult:
        """:meth:`epsilon` without the lower bound of its last (polish) round: the same ε, bitwise
        (the upper PMFs are the same), and the same grid (``calibration_search``'s key);
        ``epsilon_lower`` is the previous round's, still a proven lower bound. Hook of
        :meth:`Accountant.calibration_probe` (a calibration's first evaluation)."""
        return self._epsilon(event, delta, polish_lower=False)

    def _epsilon(self, event: Event, delta: float, polish_lower: bool) -> AccountingResult:
        delta = v.open_unit("delta", delta)
        segs = segments(event, self.neighboring, self.name)
        if not segs:
            return self._result(0.0, delta, {"epsilon_lower": 0.0, "note": "empty history"})
        eta = _ETA_REL * delta
        h0 = self._start_h(segs, eta)
        info: dict = {}

        def readout(comp):
            # with the truncation/round-off slack, and without it (what a finer grid can improve)
            ups = comp.read_uppers(lambda up: epsilon_for_delta_both(up, delta),
                                   lambda v: comp.covers(max(u[0] for u in v), delta))
            los = [epsilon_for_delta_both(lo, delta) for _, lo in comp.values() if lo is not None]
            eu, eu0 = max(u[0] for u in ups), max(u[1] for u in ups)
            el, el0 = max((x[0] for x in los), default=-math.inf), max((x[1] for x in los), default=-math.inf)
            info["slack"] = max(up.slack for up, _ in comp.values())
            if math.isinf(eu):
                # no finite ε: mass at +∞ (or the numerical allowance) reaches δ — a finer grid
                # does not change that (the grid tail moved to +∞ is ≤ η/8)
                return eu, el, 0.0, False
            tol = self._tolerance(eu)
            ratio = (eu - el) / tol
            return eu, el, ratio, ratio > 1.0 and (eu0 - el0) <= 0.5 * tol

        eu, el, h, points, warnings, rounds = self._refine(segs, h0, eta, readout, polish_lower=polish_lower)
        slack = info.get("slack", 0.0)
        if slack > 0.1 * delta:
            warnings.append(
                f"numerical allowance {slack:.3g} (truncation + floating-point round-off) is "
                + (f"{slack / delta:.0%} of delta" if slack < 10 * delta else f"{slack / delta:.3g} times delta")
                + "; the certified epsilon is loose at this delta")
        details = {"epsilon_lower": el, "discretization": h, "grid_points": points,
                   "accuracy": self.accuracy, "slack": slack, "rounds": rounds,
                   "neighboring": self.neighboring}
        if warnings:
            details["warnings"] = warnings
        reason = None
        if math.isinf(eu):
            reason = ("no finite epsilon is certified at this delta: the mass at infinite privacy loss "
                      "(per-step losses above 700 nats count as infinite) plus the numerical allowance "
                      "of FFT composition (details.slack) reaches delta")
        return self._result(eu, delta, details, reason=reason)

    def delta(self, event: Event, *, epsilon: float) -> AccountingResult:
        r"""Certified δ (upper bound) at ``epsilon``, with the lower bound in ``details["delta_lower"]``.

        Raises:
            ParameterError: ``epsilon`` negative or not finite.
            UnsupportedEventError: an event pld cannot account for.
        """
        eps = v.nonnegative("epsilon", epsilon)
        segs = segments(event, self.neighboring, self.name)
        if not segs:
            return AccountingResult(self.name, eps, 0.0, True, {"delta_lower": 0.0}, source=self.source)
        eta = delta_eta(self, segs, eps)
        h0 = self._start_h(segs, eta)
        info: dict = {}

        def readout(comp):
            du = max(comp.read_uppers(lambda up: delta_for_epsilon(up, eps), lambda v: comp.covers(eps, max(v))))
            info["slack"] = max(up.slack for up, _ in comp.values())
            dl = max(delta_for_epsilon(lo, eps) for _, lo in comp.values())
            du0 = max(delta_for_epsilon(replace(up, slack=0.0), eps) for up, _ in comp.values())
            dl0 = max(delta_for_epsilon(replace(lo, slack=0.0), eps) for _, lo in comp.values())
            # accuracy on δ: relative gap, or tiny absolute gap for δ near the floor
            tol = max(self.accuracy * du, 1e-12)
            ratio = (du - dl) / tol
            return du, dl, ratio, ratio > 1.0 and (du0 - dl0) <= 0.5 * tol

        # the δ gap shrinks more slowly than h² near the lower bound's edge bins: aim lower than
        # epsilon() does, so that one refinement usually suffices
        du, dl, h, points, warnings, rounds = self._refine(segs, h0, eta, readout, aim=0.6)
        details = {"delta_lower": dl, "discretization": h, "grid_points": points,
                   "accuracy": self.accuracy, "slack": info.get("slack", 0.0), "rounds": rounds,
                   "neighboring": self.neighboring}
        if dl == 0.0 and 0.0 < du <= 2.0 * details["slack"]:
            warnings.append(f"delta {du:.3g} is mostly the numerical allowance of FFT composition "
                            f"(details.slack = {details['slack']:.3g}) and the lower bound is 0: the "
                            "true delta may be far smaller than this certified bound")
        if warnings:
            details["warnings"] = warnings
        return AccountingResult(self.name, eps, du, True, details, source=self.source)

    def privacy_profile(self, event: Event, epsilons) -> tuple[np.ndarray, np.ndarray]:
        r"""δ(ε) at every ε of ``epsilons`` from one composition (per grid refinement round):
        certified upper bounds from the pessimistic composed PMF and proven lower bounds from
        the optimistic one, each read out exactly as :meth:`delta` reads its one ε
        (``delta_for_epsilon``: Σ_{ℓ > ε} p (1 − e^{ε − ℓ}) + p∞, ± the truncation and FFT
        round-off allowance ``slack``), maximised over the neighbouring orderings.

        The truncation mass η is the one :meth:`delta` would use at the largest ε (the smallest
        δ, so the tightest need); the grid is refined as in :meth:`delta` until every point's
        bracket meets the accuracy (or a floor/grid limit is reached). Every round's brackets
        are valid, so their intersection over the rounds is returned.

        Args / Returns / Raises: as :meth:`Accountant.privacy_profile` (``delta_lower`` is
        always an array here).
        """
        return privacy_profile(self, event, epsilons)

    def _result(self, eps: float, delta: float, details: dict, reason: str | None = None) -> AccountingResult:
        return AccountingResult(self.name, eps, delta, True, details, reason=reason, source=self.source)

    def calibration_search(self, result: AccountingResult):
        """Hook of :func:`dpcalc.accounting.calibrate.calibrate_noise_multiplier`: the function
        the root finder should search, given this accountant's ``result`` at some σ.

        The automatic grid makes ε(σ) only piecewise smooth (the grid is chosen per σ), so the
        root finder would stop at different σ on different search paths. The search instead
        runs on a fixed-grid accountant (:class:`_FixedGridPld`) on the grid this accountant
        settled on (its final ``discretization``): a smooth, monotone function of σ whose value
        is the upper bound this accountant computes on that grid (this accountant reports the
        minimum over its grids, so it is never larger where it settles on the same grid).
        Returns ``(grid, accountant)``; the helper repeats the search if this accountant settles
        on another grid at the σ found, and verifies the final σ with this accountant.
        None when the grid is already fixed (explicit ``discretization``).
        """
        h = (result.details or {}).get("discretization")
        if self.discretization is not None or not h:
            return None
        return float(h), _FixedGridPld(float(h), neighboring=self.neighboring, accuracy=self.accuracy,
                                       max_grid_points=self.max_grid_points)

    @property
    def calibrates_by_stand_in(self) -> bool:
        """True without an explicit ``discretization``: :meth:`calibration_search` then gives
        the fixed-grid stand-in (``dpcalc plan`` warm-starts each cell from its neighbour)."""
        return self.discretization is None

    def quick_stand_in(self, event: Event, *, delta: float) -> tuple[float, Accountant] | None:
        """The stand-in of ``dpcalc plan --quick`` (:mod:`dpcalc.planning._quick`): this
        accountant's upper bound on one grid step fixed from ``event`` alone (the upper bound
        the automatic accountant would compute on that grid, certified on any grid; no refinement
        rounds, no lower bound).

        The step is half the variance-based first step 2·spread·√accuracy (:meth:`_step_h`
        without its floors; not put on the 2^(j/4) ladder, so that the upper bound, hence σ,
        moves smoothly from cell to cell), i.e. the step of the automatic accountant's polish
        round when its first round at 2·spread·√accuracy meets the accuracy. On ``dpcalc
        plan``'s benchmark grid (``benchmarks/bench_plan.py``) it certifies σ within 0.08% of
        ``dpcalc sigma``'s. Never finer than 1/64 of a rarely sampled Gaussian's first step
        without the edge term, i.e. at most 64·``_RARE_POINTS`` = 2^23 points across its
        one-step loss range (a grid beyond ``max_grid_points`` is refused and the plan cell
        takes the exact path). It is then aligned
        (:meth:`_align`) to a fixed point, so that ``PldAccountant(discretization=key)``
        (``dpcalc epsilon --discretization key``) composes the same grid and reports the same
        upper bound.

        Returns ``(key, accountant)``, or None with an explicit ``discretization``, an empty
        history, or no fixed point of the alignment within 4 steps. Raises ParameterError for
        ``delta`` outside (0, 1).
        """
        delta = v.open_unit("delta", delta)
        segs = segments(event, self.neighboring, self.name)
        if self.discretization is not None or not segs:
            return None
        replace_ = self.neighboring == "replace"
        h_std = min(2.0 * self._spread(step, replace_) * math.sqrt(self.accuracy) for step, _ in segs)
        total = sum(c for _, c in segs)
        floor = min(self._step_h(step, count, total, _ETA_REL * delta, replace_, edge=False)
                    for step, count in segs)
        h = max(h_std / 2.0, floor / 64.0)
        for _ in range(4):  # to a fixed point of the alignment (an explicit step is aligned again)
            aligned = self._align(h, segs, replace_)
            if aligned == h:
                break
            h = aligned
        else:  # about 1e-4 of (q, h) pairs (tests/planning/test_plan_quick.py): no quick answer
            return None
        return h, _FixedGridPld(h, neighboring=self.neighboring, accuracy=self.accuracy,
                                max_grid_points=self.max_grid_points)

    def profile_stand_in(self, head: AccountingResult) -> tuple[Accountant, str] | None:
        """For the many δ(ε) points of a risk curve: pld with the grid step fixed to twice the one
        ``head`` settled on (one composition per point, on a grid half as fine: every δ is still
        a certified upper bound with a proven lower bound), and the note ``"grid step … nats"``.
        None when the grid step is explicit or ``head`` has none."""
        h = (head.details or {}).get("discretization")
        if self.discretization is not None or not h:
            return None
        coarse = type(self)(neighboring=self.neighboring, discretization=2.0 * h, accuracy=self.accuracy,
                            max_grid_points=self.max_grid_points)
        return coarse, f"grid step {coarse.discretization:.3g} nats"

    def calibration_hint(self, *, target_epsilon: float, delta: float, make_event) -> float | None:
        """A cheap first guess of the noise multiplier for ``calibrate_noise_multiplier``.

        For (Poisson-sampled) Gaussian histories under add/remove: the CLT's σ
        (:func:`~dpcalc.accounting.calibrate.clt_noise_multiplier`, no evaluation; it tends to
        be low, e.g. 1.8% for the README quick start), corrected by one Newton step on ln ε from
        one coarse pld evaluation (:class:`_CoarsePld`: accuracy 5%) with the CLT's slope
        (:func:`~dpcalc.accounting.calibrate.clt_log_slope`): within ~0.3% there. When the CLT
        does not apply or is far off (the coarse ε more than 25% from the target), and for
        other histories: a coarse pld search (rough_noise_multiplier, relative tolerance 1e-2,
        unverified) from that σ or from the ``rdp`` σ, in steps of 5%, 10%, ..., so that no
        coarse evaluation lands far from the answer (a far, small σ needs a huge grid; from
        σ = 1 the quick-start case spent 0.43 s at σ = 0.25). Only a starting point: the
        returned σ is always verified with this accountant. Returns None when the coarse search
        fails (the helper then searches from σ = 1).

        Raises:
            InfeasibleError: even at σ = ``SIGMA_MAX`` the coarse pld certifies no finite ε
                (its numerical allowance alone reaches δ): an early refusal with the reason
                (e.g. δ = 1e-12 with T = 10⁶ steps).
        """
        from dpcalc.accounting.calibrate import (
            SIGMA_MAX,
            SIGMA_MIN,
            clt_log_slope,
            clt_noise_multiplier,
            rough_noise_multiplier,
        )
        from dpcalc.errors import InfeasibleError

        common = dict(target_epsilon=target_epsilon, delta=delta, make_event=make_event)
        coarse = _CoarsePld(neighboring=self.neighboring, accuracy=max(0.05, self.accuracy),
                            max_grid_points=min(self.max_grid_points, 2 ** 20))
        seen: dict[float, AccountingResult] = {}
        seed = clt_noise_multiplier(neighboring=self.neighboring, **common)
        if seed is not None and SIGMA_MIN < seed < SIGMA_MAX:
            at = seen[seed] = coarse.epsilon(make_event(seed), delta=delta)
            eps = math.inf if at.epsilon is None else at.epsilon
            if 0 < eps < math.inf and abs(math.log(eps / target_epsilon)) <= 0.25:
                slope = clt_log_slope(seed, delta=delta, make_event=make_event, neighboring=self.neighboring)
                if slope is not None and slope < 0:
                    return seed * math.exp(max(min(math.log(eps / target_epsilon) / -slope, 0.2), -0.2))
        else:
            from dpcalc.accounting.rdp import RdpAccountant

            seed = rough_noise_multiplier(RdpAccountant(neighboring=self.neighboring), rtol=1e-3, **common)
        guess = rough_noise_multiplier(coarse, start=seed, rtol=1e-2, cache=seen, **common)
        at_max = seen.get(SIGMA_MAX)
        if guess is None and at_max is not None and at_max.epsilon == math.inf:
            # no finite ε even at the largest σ: the numerical allowance (FFT round-off and
            # truncation, details.slack) alone reaches δ, and a finer grid only adds round-off
            raise InfeasibleError(
                f"no noise multiplier up to {SIGMA_MAX:g} reaches epsilon <= {target_epsilon:g} at "
                f"delta={delta:g} under accountant 'pld': even at sigma={SIGMA_MAX:g} its numerical "
                f"allowance for FFT round-off and truncation ({at_max.details.get('slack', 0.0):.3g}, "
                "growing with the number of steps; checked at accuracy 5%) reaches delta, so no finite "
                "epsilon is certified; raise delta or use rdp")
        return seed if guess is None else guess

    def infeasible_hint(self, target_epsilon: float, *, delta: float) -> str:
        """Why ``target_epsilon`` at ``delta`` may be out of reach under pld."""
        return ("the target is below what pld certifies at any noise level up to the search limit "
                "(at a tiny delta, pld's numerical allowance for FFT round-off and truncation, which "
                "grows with the number of steps, can alone exceed delta); raise epsilon or delta, "
                "or use rdp")


class _CoarsePld(PldAccountant):
    """pld at a coarse accuracy for :meth:`PldAccountant.calibration_hint` (internal): searched
    as it is (no fixed-grid stand-in, no polish, no hint of its own)."""

    _polish = False

    def calibration_hint(self, *, target_epsilon: float, delta: float, make_event) -> float | None:
        return None

    def calibration_search(self, result: AccountingResult):
        return None

    @property
    def calibrates_by_stand_in(self) -> bool:
        return False


class _FixedGridPld(PldAccountant):
    """pld's upper bound on one fixed grid ``grid`` (one round, no lower bound, no polish): the
    smooth, monotone stand-in for ε(σ) of :meth:`PldAccountant.calibration_search` (internal).

    Its ε is exactly the upper bound the automatic accountant computes on that grid; where the
    grid does not fit in ``max_grid_points`` it falls back to the automatic accountant.
    """

    _polish = False

    def __init__(self, grid: float, **options) -> None:
        super().__init__(**options)
        self.grid = v.positive("grid", grid)

    def epsilon(self, event: Event, *, delta: float) -> AccountingResult:
        delta = v.open_unit("delta", delta)
        segs = segments(event, self.neighboring, self.name)
        if segs:
            try:
                comp = self._compose(segs, self.grid, _ETA_REL * delta, lower=False)
                eu = max(comp.read_uppers(lambda up: epsilon_for_delta_both(up, delta)[0],
                                          lambda v: comp.covers(max(v), delta)))
            except GridTooLargeError:
                comp = None
            if comp is not None:
                details = {"discretization": self.grid, "fixed_grid": True, "neighboring": self.neighboring,
                           "slack": max(up.slack for up, _ in comp.values())}
                return self._result(eu, delta, details)
        return super().epsilon(event, delta=delta)

    def calibration_hint(self, *, target_epsilon: float, delta: float, make_event) -> float | None:
        return None

    def calibration_search(self, result: AccountingResult):
        return None

    @property
    def calibrates_by_stand_in(self) -> bool:
        return False

    def calibration_probe(self, event: Event, *, delta: float) -> AccountingResult:
        return self.epsilon(event, delta=delta)
