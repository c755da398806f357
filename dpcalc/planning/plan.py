r"""Choose a DP-SGD run before running it: batch size × epochs × σ.

Three questions, one per function:

* :func:`plan_grid` — the noise multiplier σ of every (batch size B, epochs E) cell for a
  target (ε, δ) on N records (or every (B, steps T) cell), each from the calibration helper
  :func:`dpcalc.accounting.calibrate.calibrate_dpsgd_many` or, under pld, warm-started from
  the neighbouring cell (:mod:`dpcalc.planning._warm`) — per cell the contract of
  ``dpcalc sigma``: σ rounded up and verified with the accountant — ranked by utility proxies with the Pareto
  front marked; optionally only the cells under a compute budget (examples processed B·T).
* :func:`max_steps_for_sigma` — at a fixed σ, the most steps (and whole epochs) each batch
  size allows.
* :func:`max_batch_size_for_sigma` — at a fixed σ and epochs (or steps), the largest batch
  size allowed.

**Schedule.** As everywhere in dpcalc (:func:`dpcalc.schedule.resolve_schedule`): Poisson
sampling with q = B/N and T = ⌈E·N/B⌉ steps; the run processes B·T examples in expectation.

**Utility proxies** (per cell, C the clipping norm):

* ``mean_noise_std`` = σ·C/B — the std of the noise on the *averaged* clipped gradient of
  one step (the sum carries noise std σ·C, Abadi et al. 2016 Alg. 1, and is divided by
  the expected batch size B);
* ``tan`` = η = σ/(q·√T) — the "total amount of noise" of Sander, Stock, Sablayrolles 2023
  ("TAN without a burn: scaling laws of DP-SGD", ICML), :func:`total_amount_of_noise`.

**Pareto front.** A cell is on the front when no other cell processes at most as many
examples with at most as much TAN (one of them strictly): less total noise for fewer
examples processed (:func:`pareto_front`).

**Monotonicity used** (for the true ε(σ, q, T) at any δ; docs/design.md §4):

1. ε is non-decreasing in T at fixed (σ, q): T + 1 steps contain the first T, and
   dropping a step's output is post-processing.
2. ε is non-decreasing in q at fixed (σ, T): one step's hockey-stick divergence
   H(q) = H_{e^ε}((1−q)P + qQ ‖ P) (and the reverse order) is convex in q with H(0) = 0 and
   H ≥ 0, hence non-decreasing; a pointwise-dominated pair stays dominated under
   composition (Zhu, Dong, Wang 2022, "Optimal accounting of differential privacy via
   characteristic function", dominating pairs compose).
3. ε is non-increasing in σ at fixed (q, T).

Hence the calibrated σ*(q, T) is non-decreasing in T and in q: σ* grows with the epochs
at a fixed batch size (T = ⌈E·N/B⌉ grows with E), and with the batch size at a fixed number
of steps. At a fixed number of *epochs* no order in B is a theorem (q grows while T falls);
numerically σ* grows with B in every regime we measured. This module uses (1) and (2)
only to bracket the inverse solvers; every reported σ, step count and batch size is checked with the accountant
itself, so a violation of (1)–(3) by an accountant's upper bound can cost speed, never
a guarantee.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dpcalc import _validate as v
from dpcalc.accounting.calibrate import calibrate_dpsgd
from dpcalc.accounting.registry import default_accountant, get_accountant
from dpcalc.errors import InfeasibleError, ParameterError
from dpcalc.events import EpochSampledEvent
from dpcalc.planning._parallel import calibrate_cells, check_verified
from dpcalc.results import AccountingResult, jsonable
from dpcalc.schedule import Schedule, resolve_schedule

__all__ = ["PlanCell", "Plan", "plan_grid", "max_steps_for_sigma", "max_batch_size_for_sigma",
           "pareto_front", "total_amount_of_noise", "MAX_CELLS", "MAX_STEPS"]

#: largest grid :func:`plan_grid` accepts (each cell is one calibration)
MAX_CELLS = 2500
#: the step solver stops here and reports the cap
MAX_STEPS = 10**8


def total_amount_of_noise(noise_multiplier: float, sample_rate: float, steps: int) -> float:
    r"""The total amount of noise (TAN) of a DP-SGD run, η = σ/(q·√T).

    Sander, Stock, Sablayrolles 2023 ("TAN without a burn", ICML, §3) show that once σ is
    not small (σ ≳ 2 in their experiments) the privacy budget depends on (σ, q, T) only
    through this quantity; the authors' code keeps it fixed by holding σ/B constant at a
    fixed number of steps (facebookresearch/tan, ``src/utils/utils.py``,
    ``get_noise_from_bs``: "the noise necessary to keep our 'physical constant' η
    constant"). We implement η = σ/(q√T), the noise std of the single Gaussian mechanism
    that T steps approximate in the central-limit regime (μ-GDP with μ ≈ q√T/σ, Bu et al.
    2020 eq. (6) for large σ, and μ-GDP is the Gaussian mechanism with noise 1/μ). Only
    the scaling η ∝ σ/(q√T) was verified against the authors' code; if the paper's
    definition carries a constant factor, every η here is off by that factor, which changes
    neither the ranking nor the Pareto front. Equivalently η/N = σ/(B√T): the noise std of
    the mean, over the T steps, of the averaged noisy gradients (clipping norm 1).

    Args:
        noise_multiplier: σ (noise std / clipping norm), > 0.
        sample_rate: q in (0, 1].
        steps: T ≥ 1.

    Returns:
        η (dimensionless; in units of the clipping norm).

    Raises:
        ParameterError: a parameter out of range.
    """
    sigma = v.positive("noise_multiplier", noise_multiplier)
    q = v.half_open_unit("sample_rate", sample_rate)
    t = v.count("steps", steps, minimum=1)
    return sigma / (q * math.sqrt(t))


def pareto_front(examples: Sequence[float], noise: Sequence[float]) -> list[bool]:
    """Which points are Pareto-optimal when both coordinates are to be minimised.

    Point i is on the front iff no j has examples[j] ≤ examples[i] and noise[j] ≤ noise[i]
    with one of the two strict (equal points are all on the front). Non-finite noise is
    never on the front.

    Args:
        examples: cost of each point (examples processed B·T), length n.
        noise: noise of each point (TAN), length n.

    Returns:
        n booleans.
    """
    n = len(examples)
    if len(noise) != n:
        raise ParameterError("noise", f"of length {n}", len(noise))
    order = sorted((i for i in range(n) if math.isfinite(noise[i])), key=lambda i: (examples[i], noise[i]))
    on = [False] * n
    best = math.inf  # least noise among strictly cheaper points
    k = 0
    while k < len(order):
        # the points with the same cost form a block: the block's least noise is on the front
        # if it beats every strictly cheaper point
        j = k
        while j < len(order) and examples[order[j]] == examples[order[k]]:
            j += 1
        block = order[k:j]
        low = min(noise[i] for i in block)
        if low < best:
            for i in block:
                on[i] = noise[i] == low
            best = low
        k = j
    return on


@dataclass(frozen=True)
class PlanCell:
    """One candidate run of a plan.

    Attributes:
        batch_size: expected batch size B (q = B/N).
        steps: T; for the step solver, the most steps σ allows (0 if even one step exceeds ε).
        sample_rate: q = B/N.
        epochs: the epochs asked for, or T·B/N (expected passes) when steps were given.
        result: the accountant's result at the cell's σ (ε achieved ≤ target, verified), or
            a not-applicable result with the reason.
        examples: B·T, the expected number of examples processed (the compute cost).
        mean_noise_std: σ·C/B, the noise std on the averaged gradient of one step.
        tan: η = σ/(q√T) (:func:`total_amount_of_noise`).
        pareto: on the Pareto front of (examples, tan).
        rank: 1 = best (front first, then by TAN).
        extra: mode-specific fields (whole epochs, ε one step/epoch/batch beyond, ...).
    """

    batch_size: int
    steps: int
    sample_rate: float
    epochs: float | None
    result: AccountingResult
    examples: int
    mean_noise_std: float | None = None
    tan: float | None = None
    pareto: bool = False
    rank: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def noise_multiplier(self) -> float | None:
        return self.result.noise_multiplier

    @property
    def epsilon(self) -> float | None:
        return self.result.epsilon

    @property
    def feasible(self) -> bool:
        return self.result.applicable and self.result.noise_multiplier is not None

    def to_json(self, ranked: bool = True) -> dict:
        """Every field of the cell and of its accountant result, JSON-ready (``pareto`` and
        ``rank`` only when ``ranked``)."""
        out: dict[str, Any] = {"batch_size": self.batch_size, "epochs": self.epochs,
                               "steps": self.steps, "sample_rate": self.sample_rate,
                               "examples": self.examples}
        out.update(self.extra)
        out.update({"mean_noise_std": self.mean_noise_std, "tan": self.tan})
        if ranked:
            out.update({"pareto": self.pareto, "rank": self.rank})
        out.update(self.result.to_json())
        return jsonable(out)


@dataclass(frozen=True)
class Plan:
    """The answer of one planning question.

    Attributes:
        mode: ``"grid"``, ``"max_steps"`` or ``"max_batch_size"``.
        accountant: registry name of the accountant used.
        certified: whether its ε are proven upper bounds.
        source: the accountant's source.
        cells: the cells, best first (grid) or in input order (solvers).
        notes: sentences for the reader (assumptions, caps, skipped cells).
        best: index into ``cells`` of the best cell under the examples budget, if one was given.
    """

    mode: str
    accountant: str
    certified: bool
    source: str
    cells: tuple[PlanCell, ...]
    notes: tuple[str, ...] = ()
    best: int | None = None

    def results_json(self) -> list[dict]:
        """One JSON object per cell (docs/design.md §5 ``results``)."""
        rows = [c.to_json(ranked=self.mode == "grid") for c in self.cells]
        if self.best is not None:
            rows[self.best]["best"] = True
        return rows


# ---------------------------------------------------------------------------- helpers
def _accountant(name: str | None, neighboring: str, options: Mapping[str, Mapping[str, Any]] | None,
                sampling: str = "poisson", dataset_size: int = 2):
    if name is None and sampling != "poisson":  # the tightest certified one with a proof for the sampler
        from dpcalc.accounting._sampling import default_accountant_for

        probe = resolve_schedule(batch_size=1, dataset_size=max(dataset_size, 1), steps=1, sampling=sampling)
        name = default_accountant_for(probe.event(1.0), neighboring)
    name = default_accountant() if name is None else name
    return get_accountant(name, neighboring=neighboring, **dict((options or {}).get(name, {})))


def _check_plan_sampling(sampling: str, neighboring: str) -> str:
    """The samplers ``plan`` varies B for: Poisson and the fixed-size ones (truncated Poisson
    has a cap per run: use ``dpcalc sigma``); a sampler/adjacency pair without a proof is refused."""
    from dpcalc.accounting._sampling import check_sampler_adjacency
    from dpcalc.events import SAMPLINGS

    sampling = v.choice("sampling", sampling, SAMPLINGS)
    if sampling == "truncated-poisson":
        raise ParameterError("sampling", "", sampling, message=(
            "plan varies the batch size; truncated-poisson has a cap B_max per run: use dpcalc sigma "
            "--sampling truncated-poisson --max-batch-size B_max for one schedule"))
    from dpcalc.events import EPOCH_SAMPLINGS

    # shuffle / balls-in-bins: the accountants' add/remove Gaussian pair is zero-out's (dpcalc.events.EpochSampledEvent)
    check_sampler_adjacency(sampling, "zero-out" if sampling in EPOCH_SAMPLINGS and neighboring == "add-remove"
                            else neighboring)
    return sampling


def _values(name: str, values: Sequence[Any] | None, convert: Callable[[str, Any], Any]) -> list:
    if values is None:
        return []
    vals = [convert(name, x) for x in values]
    if not vals:
        raise ParameterError(name, "", None, message=f"{name} needs at least one value")
    return sorted(set(vals))


def _batch_sizes(batch_sizes, n: int) -> list[int]:
    out = _values("batch_size", batch_sizes, lambda nm, x: v.count(nm, x, minimum=1))
    if out and out[-1] > n:
        raise ParameterError("batch_size", f"at most dataset_size ({n})", out[-1])
    return out


def _not_applicable(acc, reason: str) -> AccountingResult:
    return acc.not_applicable(reason)


def _cell(schedule: Schedule, res: AccountingResult, c: float, epochs: float | None,
          extra: Mapping[str, Any] | None = None) -> PlanCell:
    b, q, t = schedule.batch_size, schedule.sample_rate, schedule.steps
    sigma = res.noise_multiplier if res.applicable else None
    return PlanCell(
        batch_size=b, steps=t, sample_rate=q, epochs=epochs, result=res, examples=b * t,
        mean_noise_std=None if sigma is None else sigma * c / b,
        tan=None if sigma is None or t < 1 else total_amount_of_noise(sigma, q, t),
        extra=dict(extra or {}))


def _rank(cells: list[PlanCell]) -> list[PlanCell]:
    """Mark the Pareto front of (examples, TAN) and sort: front first, then by TAN, fewer
    examples, smaller batch; infeasible cells last."""
    import dataclasses

    feas = [c.feasible for c in cells]
    front = pareto_front([c.examples for c in cells],
                         [c.tan if f else math.inf for c, f in zip(cells, feas, strict=True)])
    marked = [dataclasses.replace(c, pareto=p) for c, p in zip(cells, front, strict=True)]
    marked.sort(key=lambda c: (not c.feasible, not c.pareto, c.tan if c.feasible else math.inf,
                               c.examples, c.batch_size))
    return [dataclasses.replace(c, rank=k + 1 if c.feasible else None) for k, c in enumerate(marked)]


# ---------------------------------------------------------------------------- the grid
def plan_grid(
    *,
    target_epsilon: float,
    delta: float,
    dataset_size: int,
    batch_sizes: Sequence[int],
    epochs: Sequence[float] | None = None,
    steps: Sequence[int] | None = None,
    accountant: str | None = None,
    neighboring: str = "add-remove",
    options: Mapping[str, Mapping[str, Any]] | None = None,
    max_grad_norm: float = 1.0,
    examples_budget: float | None = None,
    progress: Callable[[int, int], None] | None = None,
    sampling: str = "poisson",
    workers: int | None = None,
    group_size: int = 1,
    quick: bool = False,
) -> Plan:
    r"""σ for every (batch size, epochs) — or (batch size, steps) — cell, ranked.

    With ``group_size`` k > 1 (Poisson sampling only) each cell is calibrated for a group of k
    records (:class:`dpcalc.events.GroupEvent`, :mod:`dpcalc.accounting.group`), cell by cell.

    Each cell's σ comes from :func:`dpcalc.accounting.calibrate.calibrate_dpsgd_many`: the
    smallest σ to 1e-6 relative, rounded up to 8 significant digits, with ε(σ) ≤
    ``target_epsilon`` verified by the accountant at that σ — the contract of ``dpcalc sigma``
    (the same call per cell, except under rdp, whose cells are searched in step, and pld,
    whose cells are warm-started from their neighbours (:mod:`dpcalc.planning._warm`): both
    settle on the smallest such 8-digit σ of the function ``dpcalc sigma`` searches, never
    above ``dpcalc sigma``'s, at most 1e-6 below; a pld cell without a neighbour or whose
    warm search does not settle is ``dpcalc sigma``'s own call).

    Args:
        target_epsilon: ε target, > 0.
        delta: δ in (0, 1).
        dataset_size: N ≥ 1.
        batch_sizes: expected batch sizes B (each 1 ≤ B ≤ N); duplicates removed, sorted.
        epochs: epochs E > 0 (T = ⌈E·N/B⌉), or
        steps: step counts T ≥ 1 (exactly one of the two).
        accountant: registry name (default: the tightest certified one, as ``dpcalc sigma``).
        neighboring: ``add-remove`` or ``replace``.
        options: per-accountant constructor options, e.g. ``{"pld": {"accuracy": 1e-3}}``.
        max_grad_norm: clipping norm C > 0 for ``mean_noise_std`` = σ·C/B.
        examples_budget: optional compute budget X > 0: only the cells with B·T ≤ X are
            calibrated; the others are reported not applicable; :attr:`Plan.best` is the
            ranked-first cell under the budget.
        progress: optional callback ``progress(done, total)`` after each calibration (cells
            with the same (q, T) share one).
        workers: processes calibrating cells in parallel (default: the CPUs this process may
            use, at most :data:`dpcalc.planning._parallel.MAX_WORKERS`; 1 = in this process). Each cell's calibration
            is verified the same way either way (pld: whole rows per worker, the first cell of
            each worker started from the central-limit σ, the others from their neighbours, so
            a σ may move by one 8-digit step, or to ``dpcalc sigma``'s value for a cell the warm
            search hands to it); fewer than
            :data:`~dpcalc.planning._parallel.PARALLEL_MIN_CELLS` calibrations always run in this process.
        quick: certify each pld cell on one grid step fixed per cell instead of calibrating it
            as ``dpcalc sigma`` (:mod:`dpcalc.planning._quick`): every σ still has a certified
            ε ≤ target (``details["discretization"]`` is the step), within 0.1% below the
            target; σ may differ from ``dpcalc sigma``'s by the two grids' upper bounds
            (≤ 0.08% on ``benchmarks/bench_plan.py``'s grid); ~5x faster there. The grid step
            and the point of the window depend on the search path (the neighbouring cells, the
            number of workers), so a cell's σ may move within the window between runs with
            other grids or workers; each is certified either way. Poisson sampling, group
            size 1 and pld only (otherwise ignored).
        sampling: the batch sampler (``"poisson"`` default, or a fixed-size one:
            :data:`dpcalc.events.SAMPLINGS`; truncated Poisson is refused); the default
            accountant is then the tightest certified one with a proof for it.

    Returns:
        A :class:`Plan` with ``mode="grid"``: every cell, front first then by TAN; cells the
        accountant cannot calibrate (target out of reach) are not applicable with the reason.

    Raises:
        ParameterError: bad or empty inputs (B > N, ε ≤ 0, ...), more than :data:`MAX_CELLS`
            cells.
        InfeasibleError: no cell can be calibrated, or none is under the budget.
    """
    target = v.positive("epsilon", target_epsilon)
    delta = v.open_unit("delta", delta)
    n = v.count("dataset_size", dataset_size, minimum=1)
    c = v.positive("max_grad_norm", max_grad_norm)
    budget = None if examples_budget is None else v.positive("examples_budget", examples_budget)
    bs = _batch_sizes(batch_sizes, n)
    if not bs:
        raise ParameterError("batch_size", "", None, message="batch_size needs at least one value")
    if (epochs is None) == (steps is None):
        raise ParameterError("epochs", "", None, message="give either epochs or steps (one of the two)")
    steps_columns = steps is not None
    cols = (_values("steps", steps, lambda nm, x: v.count(nm, x, minimum=1)) if steps_columns
            else _values("epochs", epochs, v.positive))
    if len(bs) * len(cols) > MAX_CELLS:
        raise ParameterError("batch_size", "", len(bs) * len(cols),
                             message=f"the grid has {len(bs)} x {len(cols)} = {len(bs) * len(cols)} cells; "
                                     f"at most {MAX_CELLS} are allowed")
    sampling = _check_plan_sampling(sampling, neighboring)
    acc = _accountant(accountant, neighboring, options, sampling, n)

    schedules = {}
    for i, b in enumerate(bs):
        for j, x in enumerate(cols):
            schedules[i, j] = (resolve_schedule(batch_size=b, dataset_size=n, steps=x, sampling=sampling,
                                                group_size=group_size)
                               if steps_columns else
                               resolve_schedule(batch_size=b, dataset_size=n, epochs=x, sampling=sampling,
                                                group_size=group_size))
    todo = [k for k, s in schedules.items() if budget is None or s.batch_size * s.steps <= budget]
    if not todo:
        cheapest = min(s.batch_size * s.steps for s in schedules.values())
        raise InfeasibleError(f"no cell is under the examples budget {budget:g} (the cheapest "
                              f"processes {cheapest:,} examples)")

    by_schedule: dict[tuple[float, int], AccountingResult] = {}
    if sampling == "poisson" and group_size == 1:  # the batched search (rdp in step, workers); else per cell below
        keys = sorted({(schedules[k].sample_rate, schedules[k].steps) for k in todo})
        by_schedule = calibrate_cells(acc, keys, target, delta, workers,
                                     None if progress is None else (lambda done: progress(done, len(keys))),
                                     quick=quick)
    cells = []
    infeasible = 0
    for i, j in sorted(todo):
        s = schedules[i, j]
        key = (s.sample_rate, s.steps)
        res = by_schedule.get(key)
        if res is None:
            try:
                res = calibrate_dpsgd(acc, target_epsilon=target, delta=delta,
                                      sample_rate=s.sample_rate, steps=s.steps, sampler=s.sampler_args())
            except InfeasibleError as e:
                res = _not_applicable(acc, str(e))
            if res.applicable:
                check_verified(res, target)
            by_schedule[key] = res
            if progress is not None:
                progress(len(by_schedule), len({(s2.sample_rate, s2.steps) for s2 in map(schedules.get, todo)}))
        if not res.applicable:
            infeasible += 1
        e = None if steps_columns else cols[j]
        extra = {} if not steps_columns else {"epochs_expected": s.steps * s.batch_size / n}
        cells.append(_cell(s, res, c, e, extra))
    if infeasible == len(cells):
        raise InfeasibleError(f"no cell reaches epsilon <= {target:g} at delta={delta:g} under "
                              f"accountant '{acc.name}': " + cells[0].result.reason)
    ranked = _rank(cells)
    notes = []
    best = None
    skipped = [k for k in schedules if k not in set(todo)]
    if budget is not None:
        best = 0
        over = [_cell(schedules[k], _not_applicable(acc, f"over the examples budget {budget:g}"), c,
                      None if steps_columns else cols[k[1]], {"over_budget": True}) for k in sorted(skipped)]
        ranked += over
        if over:
            notes.append(f"{len(over)} cell(s) over the examples budget {budget:g} were not calibrated.")
    if quick and not (acc.calibrates_by_stand_in and sampling == "poisson" and group_size == 1):
        notes.append("quick applies to pld with its automatic grid step (no explicit discretization), "
                     "Poisson sampling and group size 1: every σ here is calibrated as `dpcalc sigma`.")
    elif quick:
        n_quick = sum(1 for cell in cells if cell.result.details.get("quick"))
        if n_quick < len(cells) - infeasible:
            notes.append(f"{len(cells) - infeasible - n_quick} cell(s) were calibrated as `dpcalc sigma` "
                         "(the quick search had no start there, or did not settle).")
    if infeasible:
        notes.append(f"{infeasible} cell(s) cannot reach the target under {acc.name} (see reason).")
    return Plan("grid", acc.name, acc.certified, acc.source, tuple(ranked), tuple(notes), best)


# ---------------------------------------------------------------------------- inverse solvers
def _last_ok(f: Callable[[int], float], target: float, lo: int, hi: int | None, cap: int) -> tuple[int, bool]:
    """The largest integer x with f(x) ≤ target, searching upward from ``lo`` (f(lo) ≤ target
    already checked) with ``hi`` a first guess of a point above the boundary (or None).

    Returns (x, capped): f(x) ≤ target and f(x + 1) > target, both evaluated — an exact
    boundary of the accountant's answers — unless ``capped`` (f(cap) ≤ target, x = cap).
    The search interpolates log f against log x (f ≈ c·x^p) inside the bracket, falling
    back to bisection when the bracket does not halve.
    """
    vals: dict[int, float] = {}

    def ev(x: int) -> float:
        if x not in vals:
            vals[x] = f(x)
        return vals[x]

    # bracket [lo ok, hi not ok]
    if hi is not None and hi <= lo:
        hi = None
    if hi is not None and ev(hi) <= target:
        lo, hi = hi, None
    while hi is None:
        if lo >= cap:
            return cap, True
        fl = ev(lo)
        # guess from f ∝ x^(1/2) (ε grows about like √T, and like √B at fixed epochs), at
        # least doubling
        step = (target / fl) ** 2 if fl > 0 else 4.0
        cand = min(cap, max(2 * lo, int(lo * min(step, 1e6)) + 1))
        if ev(cand) <= target:
            lo = cand
        else:
            hi = cand
    slow = 0
    while hi - lo > 1:
        width = hi - lo
        fl, fh = ev(lo), ev(hi)
        mid = None
        if slow < 2 and fl > 0 and math.isfinite(fh) and fh > fl:
            # secant on (log x, log f): where log f crosses log target
            t = (math.log(target) - math.log(fl)) / (math.log(fh) - math.log(fl))
            mid = int(math.exp(math.log(lo) + t * (math.log(hi) - math.log(lo))))
            mid = min(max(mid, lo + 1), hi - 1)
        if mid is None:
            mid = (lo + hi) // 2
        if ev(mid) <= target:
            lo = mid
        else:
            hi = mid
        slow = slow + 1 if hi - lo > width // 2 else 0
    return lo, False


def _fixed_sigma_inputs(noise_multiplier, target_epsilon, delta, dataset_size, max_grad_norm
                        ) -> tuple[float, float, float, int, float]:
    """The validated inputs shared by the fixed-σ solvers: (σ, target ε, δ, N, C).

    Raises:
        ParameterError: σ, ε or C not positive, δ outside (0, 1), N not a whole number ≥ 1.
    """
    return (v.positive("noise_multiplier", noise_multiplier), v.positive("epsilon", target_epsilon),
            v.open_unit("delta", delta), v.count("dataset_size", dataset_size, minimum=1),
            v.positive("max_grad_norm", max_grad_norm))


def _at_sigma(res: AccountingResult, sigma: float) -> AccountingResult:
    """The accountant's result of a fixed-σ solver's cell, with the σ it was computed at."""
    return AccountingResult(res.accountant, res.epsilon, res.delta, res.certified, res.details,
                            noise_multiplier=sigma, applicable=res.applicable, reason=res.reason,
                            source=res.source)


def max_steps_for_sigma(
    *,
    noise_multiplier: float,
    target_epsilon: float,
    delta: float,
    dataset_size: int,
    batch_sizes: Sequence[int],
    accountant: str | None = None,
    neighboring: str = "add-remove",
    options: Mapping[str, Mapping[str, Any]] | None = None,
    max_grad_norm: float = 1.0,
    sampling: str = "poisson",
) -> Plan:
    r"""At a fixed σ: the most steps T* (and whole epochs) each batch size allows.

    Granularity: **steps**. T* is an exact boundary of the accountant: ε(σ, B/N, T*) ≤ target
    and ε(σ, B/N, T* + 1) > target, both computed by the accountant. The whole epochs
    E* = ⌊T*·B/N⌋ are the most epochs whose T = ⌈E*·N/B⌉ ≤ T*; one more epoch needs more than
    T* steps, and its ε is computed and reported (``epsilon_next_epoch``).

    Batch sizes are solved in increasing order; by property 2 of the module docstring T*
    cannot grow with B, so the previous T* + 1 seeds the bracket (checked, not assumed).

    Args:
        noise_multiplier: σ > 0.
        target_epsilon: ε target > 0; delta: δ in (0, 1); dataset_size: N.
        batch_sizes: B values (1 ≤ B ≤ N).
        accountant, neighboring, options, max_grad_norm: as :func:`plan_grid`.

    Returns:
        A :class:`Plan` with ``mode="max_steps"``, one cell per batch size (increasing), with
        ``steps`` = T*, ``epochs`` = T*·B/N and extra keys ``max_steps``, ``max_epochs``
        (whole), ``epsilon_next_step``, ``epsilon_next_epoch``; a batch size for which even one
        step exceeds ε is not applicable (T* = 0). T* is capped at :data:`MAX_STEPS` (noted).

    Raises:
        ParameterError: bad inputs.
    """
    sigma, target, delta, n, c = _fixed_sigma_inputs(noise_multiplier, target_epsilon, delta, dataset_size,
                                                     max_grad_norm)
    bs = _batch_sizes(batch_sizes, n)
    if not bs:
        raise ParameterError("batch_size", "", None, message="batch_size needs at least one value")
    sampling = _check_plan_sampling(sampling, neighboring)
    acc = _accountant(accountant, neighboring, options, sampling, n)

    cells, notes = [], []
    prev_hi: int | None = None
    for b in bs:
        one = resolve_schedule(batch_size=b, dataset_size=n, steps=1, sampling=sampling)
        q = one.sample_rate
        cache: dict[int, AccountingResult] = {}

        def res_at(t: int, one=one, cache=cache) -> AccountingResult:
            if t not in cache:
                cache[t] = acc.epsilon(one.event(sigma, t), delta=delta)
            return cache[t]

        def eps_at(t: int) -> float:
            e = res_at(t).epsilon
            return math.inf if e is None else e

        if eps_at(1) > target:
            s0 = Schedule(q, 0, "batches", b, n, 0.0, sampling=sampling)
            na = acc.not_applicable(f"one step at sigma={sigma:g} and q={q:g} already exceeds "
                                    f"epsilon={target:g} (epsilon={eps_at(1):.6g})")
            cells.append(_cell(s0, na, c, 0.0, {"max_steps": 0, "max_epochs": 0}))
            prev_hi = 1
            continue
        t_star, capped = _last_ok(eps_at, target, 1, prev_hi, MAX_STEPS)
        prev_hi = t_star + 1
        if isinstance(one.event(sigma, 1).event, EpochSampledEvent):  # an epoch is ⌈N/B⌉ steps
            per_epoch = -(-n // b)
            e_whole, next_epoch_steps = t_star // per_epoch, (t_star // per_epoch + 1) * per_epoch
        else:
            e_whole = (t_star * b) // n
            next_epoch_steps = math.ceil((e_whole + 1) * n / b)
        extra = {"max_steps": t_star, "max_epochs": e_whole,
                 "epsilon_next_step": None if capped else eps_at(t_star + 1),
                 "epsilon_next_epoch": None if capped else eps_at(next_epoch_steps)}
        if capped:
            notes.append(f"batch size {b}: the step search stops at {MAX_STEPS:,} steps (still within epsilon).")
        res = res_at(t_star)
        res = _at_sigma(res, sigma)
        epochs_run = t_star / -(-n // b) if isinstance(one.event(sigma, 1).event, EpochSampledEvent) else t_star * b / n
        s = Schedule(q, t_star, "batches", b, n, epochs_run, sampling=sampling)
        cells.append(_cell(s, res, c, epochs_run, extra))
    return Plan("max_steps", acc.name, acc.certified, acc.source, tuple(cells), tuple(notes))


def max_batch_size_for_sigma(
    *,
    noise_multiplier: float,
    target_epsilon: float,
    delta: float,
    dataset_size: int,
    epochs: Sequence[float] | None = None,
    steps: Sequence[int] | None = None,
    batch_range: tuple[int, int] | None = None,
    accountant: str | None = None,
    neighboring: str = "add-remove",
    options: Mapping[str, Mapping[str, Any]] | None = None,
    max_grad_norm: float = 1.0,
    sampling: str = "poisson",
) -> Plan:
    r"""At a fixed σ and epochs (or steps): the largest batch size B* allowed.

    At a fixed σ and number of epochs ε *grows* with B (q = B/N grows faster than
    T = ⌈E·N/B⌉ shrinks: ε ≈ √(B·E/N)/σ in the central-limit regime), so privacy bounds
    the batch size from above and the answer is the largest B, never the smallest.
    Granularity: one example. B* is an exact boundary of the accountant: B* meets ε and
    B* + 1 does not (both computed; ``epsilon_next_batch``). With ``steps`` instead of
    epochs the order in B is a theorem (property 2 of the module docstring) and B* is the
    largest feasible batch size; with epochs it is not (T falls as B grows), so a larger B
    could in principle meet ε again beyond the boundary found.

    Args:
        noise_multiplier: σ > 0; target_epsilon: ε > 0; delta: δ in (0, 1); dataset_size: N.
        epochs: epochs values (E > 0), or steps: step counts (T ≥ 1) — one of the two.
        batch_range: (lowest, highest) batch size searched, 1 ≤ lowest ≤ highest ≤ N
            (default (1, N)).
        accountant, neighboring, options, max_grad_norm: as :func:`plan_grid`.

    Returns:
        A :class:`Plan` with ``mode="max_batch_size"``, one cell per epochs (or steps) value,
        with extra keys ``max_batch_size`` and ``epsilon_next_batch``; a value for which even
        the lowest batch size exceeds ε is not applicable.

    Raises:
        ParameterError: bad inputs.
    """
    sigma, target, delta, n, c = _fixed_sigma_inputs(noise_multiplier, target_epsilon, delta, dataset_size,
                                                     max_grad_norm)
    if (epochs is None) == (steps is None):
        raise ParameterError("epochs", "", None, message="give either epochs or steps (one of the two)")
    by_steps = steps is not None
    cols = (_values("steps", steps, lambda nm, x: v.count(nm, x, minimum=1)) if by_steps
            else _values("epochs", epochs, v.positive))
    lo_b, hi_b = batch_range if batch_range is not None else (1, n)
    lo_b = v.count("batch_size", lo_b, minimum=1)
    hi_b = v.count("batch_size", hi_b, minimum=1)
    if hi_b > n:
        raise ParameterError("batch_size", f"at most dataset_size ({n})", hi_b)
    if lo_b > hi_b:
        raise ParameterError("batch_size", "", (lo_b, hi_b),
                             message=f"batch_size range is empty: lowest {lo_b} > highest {hi_b}")
    sampling = _check_plan_sampling(sampling, neighboring)
    acc = _accountant(accountant, neighboring, options, sampling, n)

    cells, notes = [], []
    for x in cols:
        cache: dict[int, tuple[Schedule, AccountingResult]] = {}

        def at(b: int, x=x, cache=cache) -> tuple[Schedule, AccountingResult]:
            if b not in cache:
                s = (resolve_schedule(batch_size=b, dataset_size=n, steps=x, sampling=sampling) if by_steps
                     else resolve_schedule(batch_size=b, dataset_size=n, epochs=x, sampling=sampling))
                r = acc.epsilon(s.event(sigma), delta=delta)
                cache[b] = (s, r)
            return cache[b]

        def eps_at(b: int) -> float:
            e = at(b)[1].epsilon
            return math.inf if e is None else e

        label = {"steps_asked": x} if by_steps else {}
        if eps_at(lo_b) > target:
            s, _ = at(lo_b)
            na = acc.not_applicable(f"even batch size {lo_b} exceeds epsilon={target:g} at sigma={sigma:g} "
                                    f"(epsilon={eps_at(lo_b):.6g})")
            cells.append(_cell(s, na, c, None if by_steps else x, {"max_batch_size": None, **label}))
            continue
        b_star, capped = _last_ok(eps_at, target, lo_b, None, hi_b)
        s, res = at(b_star)
        extra = {"max_batch_size": b_star,
                 "epsilon_next_batch": None if capped else eps_at(b_star + 1), **label}
        if capped:
            notes.append(f"{'steps' if by_steps else 'epochs'}={x:g}: every batch size up to {hi_b} "
                         "meets epsilon (the top of the range is reported).")
        res = _at_sigma(res, sigma)
        cells.append(_cell(s, res, c, s.steps * s.batch_size / n if by_steps else x, extra))
    if not by_steps:
        notes.append("At a fixed number of epochs, epsilon is not provably monotone in the batch size "
                     "(T = ceil(E*N/B) falls as B grows); the boundary reported is exact (B* meets "
                     "epsilon, B*+1 does not) but a larger batch size could in principle meet it again.")
    return Plan("max_batch_size", acc.name, acc.certified, acc.source, tuple(cells), tuple(notes))
