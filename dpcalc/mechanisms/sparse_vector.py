r"""The sparse vector technique (SVT): noise scales, budget split and (α, β)-accuracy.

SVT answers a stream of k queries q₁, q₂, … (each of sensitivity Δ) against a threshold T,
reporting only whether each is above (⊤) or below (⊥) T, and halts after c answers ⊤; it pays
for the ⊤ answers only.

Variants calculated (all ε-DP, pure, unless δ > 0 is asked for):

* ``lyu`` (default) — Lyu, Su, Li 2017 ("Understanding the sparse vector technique for
  differential privacy", PVLDB 10(6)), Alg. 1 with the optimised budget split of their Alg. 7:
  one threshold noise ρ ~ Lap(Δ/ε₁) drawn once, query noise ν_i ~ Lap(2cΔ/ε₂) (Lap(cΔ/ε₂)
  when the queries are *monotonic*: all move in the same direction between neighbours),
  ε₁ + ε₂ = ε. The split minimising Var(ν − ρ) = 2Δ²(1/ε₁² + (2c)²/ε₂²) is
  ε₁ : ε₂ = 1 : (2c)^{2/3} (1 : c^{2/3} monotonic) — Lagrange: ε₂³/ε₁³ = 4c² (c²). ``split
  ="equal"`` gives their Alg. 1 with ε₁ = ε₂ = ε/2.
* ``dwork-roth`` — Dwork & Roth 2014 Alg. 2 ("Sparse"; Alg. 1 "AboveThreshold" when c = 1):
  σ = 2cΔ/ε (δ = 0) or √(32c·ln(1/δ))·Δ/ε (δ > 0); threshold noise Lap(σ), refreshed after
  every ⊤; query noise Lap(2σ). Privacy Thm 3.23 / 3.25; accuracy Thm 3.24 / 3.26:
  α = 8cΔ(ln k + ln(2c/β))/ε (δ = 0), α = Δ(ln k + ln(2c/β))·√(512c·ln(1/δ))/ε (δ > 0).
* ``numeric`` — Dwork & Roth 2014 Alg. 3 ("NumericSparse"): Sparse at ε₁ and each ⊤ answered
  by q_i + Lap(σ(ε₂)). δ = 0: ε₁ = 8ε/9, ε₂ = 2ε/9, σ(ε) = 2cΔ/ε. δ > 0 (Alg. 3's other
  branch): ε₁ = √512/(√512 + 1)·ε, ε₂ = 2/(√512 + 1)·ε, σ(ε) = √(32c·ln(2/δ))·Δ/ε — Thm 3.27's
  proof: Sparse at (ε₁, δ/2) composed with the answers at δ/2. Accuracy: the threshold part
  (Thm 3.26 at ε₁ with β/2) is Thm 3.28's closed form, α = 9cΔ(ln k + ln(4c/β))/ε (δ = 0) and
  α = Δ(ln k + ln(4c/β))·√(c·ln(2/δ))·(√512 + 1)/ε (δ > 0); the released answers miss by at
  most σ(ε₂)·ln(2c/β) except with probability β/2 (c Laplace tails). dpcalc reports the larger
  of the two: for δ = 0 that is the closed form; for δ > 0 the answers' term can be the larger
  one (σ(ε₂) is √8·(√512 + 1)·√(c·ln(2/δ))·Δ/ε there) and Thm 3.28's proof omits it — one query
  far above T already misses the closed form with probability e^{−ln(4/β)/√8} (0.21 at β = 0.05).

With δ > 0 DR14 rely on advanced composition (Cor 3.21, stated for ε < 1); dpcalc computes the
composed ε by DR14 Thm 3.20 (√(2c·ln(1/δ))·ε' + c·ε'(e^{ε'} − 1) for c runs of ε'-DP) and
refuses (exit 1) when it exceeds the target.

**(α, β)-accuracy** (DR14 Def. 3.9 for k queries): with probability ≥ 1 − β, every query
answered before halting is classified within α — ⊤ only if q_i ≥ T − α, ⊥ only if q_i ≤ T + α.
For ``lyu`` dpcalc proves it from the noise: a wrong answer needs |ν_i − ρ| ≥ α, and
Pr[∃i ≤ k: |ν_i − ρ| ≥ α] ≤ min( min_{a₁+a₂=α} e^{−a₁/b_ρ} + k·e^{−a₂/b_ν},
2k·Pr[X − Y > α] ) for X ~ Lap(b_ν), Y ~ Lap(b_ρ), where (for b_ν ≠ b_ρ)
Pr[X − Y > t] = (b_ν²e^{−t/b_ν} − b_ρ²e^{−t/b_ρ})/(2(b_ν² − b_ρ²)) — union bounds over the
noise events; the second is exact for k = 1.

**Refused variants.** Lyu, Su, Li 2017 show that several published SVT variants are not ε-DP;
dpcalc names them and refuses (exit 2) rather than calculate for them (see :data:`REFUSED`).
"""

from __future__ import annotations

import math

from dpcalc import _validate as v
from dpcalc.errors import InfeasibleError, ParameterError
from dpcalc.results import MechanismResult

__all__ = ["VARIANTS", "REFUSED", "budget_split", "svt_failure_probability", "sparse_vector",
           "sparse_vector_epsilon_for_accuracy", "advanced_composition_epsilon", "check_variant"]

VARIANTS = ("lyu", "dwork-roth", "numeric")

_LYU = "Lyu, Su, Li 2017 (PVLDB 10(6))"

#: variant name (and aliases describing them) -> why it is refused
REFUSED: dict[str, str] = {
    "no-query-noise": (
        f"SVT without noise on the query answers (Stoddard et al. 2014) is not ε-DP for any finite ε: "
        f"{_LYU} show an answer pattern possible on one dataset and impossible on a neighbour (∞-DP)"),
    "unscaled-query-noise": (
        f"query noise not scaled with the number c of ⊤ answers (Lee & Clifton 2014: Lap(Δ/ε₂)) is only "
        f"((1 + 6c)/4)·ε-DP, not ε-DP ({_LYU}); the query noise must be Lap(2cΔ/ε₂) (cΔ/ε₂ monotonic)"),
    "no-cutoff": (
        f"SVT with no limit c on the ⊤ answers (Chen et al. 2015) is not ε-DP for any finite ε ({_LYU}, ∞-DP); "
        "give the cut-off c (--answers)"),
    "output-noisy-answer": (
        f"releasing the noisy answer q_i + ν_i that was compared with the threshold (Roth 2011 lecture notes) "
        f"is not ε-DP for any finite ε ({_LYU}, ∞-DP); use --variant numeric (DR14 Alg. 3: fresh noise "
        "for the released value)"),
}
_ALIASES = {"stoddard-2014": "no-query-noise", "lee-clifton-2014": "unscaled-query-noise",
            "chen-2015": "no-cutoff", "roth-2011": "output-noisy-answer"}
REFUSED.update({alias: REFUSED[target] for alias, target in _ALIASES.items()})

SOURCES = {
    "lyu": f"{_LYU}, Alg. 1 with the Alg. 7 budget split",
    "lyu-equal": f"{_LYU}, Alg. 1 (ε₁ = ε₂ = ε/2)",
    "dwork-roth": "Dwork & Roth 2014, Alg. 1–2, Thm 3.23–3.26",
    "numeric": "Dwork & Roth 2014, Alg. 3 (NumericSparse), Thm 3.27–3.28",
}


def check_variant(variant: str) -> str:
    """Return ``variant`` if it is a calculated one; refuse the non-private ones with the reason.

    Raises:
        ParameterError: a refused variant (message: the finding of Lyu, Su, Li 2017) or an
            unknown name.
    """
    if variant in REFUSED:
        raise ParameterError("variant", "a private variant", variant,
                             message=f"variant {variant!r} is refused: {REFUSED[variant]}")
    return v.choice("variant", variant, VARIANTS)


def budget_split(*, epsilon: float, answers: int = 1, monotonic: bool = False,
                 split: str = "optimal") -> tuple[float, float]:
    r"""(ε₁, ε₂): threshold and query budgets of Lyu et al.'s SVT, ε₁ + ε₂ = ε.

    ``optimal``: ε₁ : ε₂ = 1 : (2c)^{2/3}, or 1 : c^{2/3} for monotonic queries (Lyu, Su, Li
    2017, Alg. 7: minimises the variance of ν − ρ). ``equal``: ε/2 each (their Alg. 1).

    Args:
        epsilon: ε > 0.
        answers: c ≥ 1, the cut-off on ⊤ answers.
        monotonic: monotonic queries.
        split: ``optimal`` or ``equal``.

    Returns:
        (ε₁, ε₂).

    Raises:
        ParameterError: bad parameters.
    """
    epsilon = v.positive("epsilon", epsilon)
    c = v.count("answers", answers)
    split = v.choice("split", split, ("optimal", "equal"))
    if split == "equal":
        return epsilon / 2, epsilon / 2
    r = (c if monotonic else 2 * c) ** (2.0 / 3.0)
    e1 = epsilon / (1 + r)
    return e1, epsilon - e1


def _laplace_diff_tail(t: float, a: float, b: float) -> float:
    """Pr[X − Y > t], X ~ Lap(a), Y ~ Lap(b) independent, t ≥ 0 (an upper bound when a ≈ b)."""
    if abs(a - b) <= 1e-4 * max(a, b):  # the tail grows with either scale: use the larger for both
        s = max(a, b)
        return 0.5 * (1 + t / (2 * s)) * math.exp(-t / s)
    den = 2 * (a * a - b * b)
    if den == 0 or not math.isfinite(den):  # a², b² under- or overflow: the tail depends on t/s, a/s, b/s
        s = max(a, b)
        t, a, b = t / s, a / s, b / s
        den = 2 * (a * a - b * b)
    return (a * a * math.exp(-t / a) - b * b * math.exp(-t / b)) / den


def svt_failure_probability(*, accuracy: float, threshold_scale: float, query_scale: float,
                            queries: int, thresholds: int = 1) -> float:
    r"""An upper bound on Pr[some of k queries is misclassified by more than α].

    With one threshold noise ρ ~ Lap(b_ρ) (``thresholds`` = 1, Lyu et al.) and query noises
    ν_i ~ Lap(b_ν): min( min_{a₁+a₂=α} e^{−a₁/b_ρ} + k·e^{−a₂/b_ν}, 2k·Pr[ν − ρ > α] ). With
    ``thresholds`` = c refreshed threshold noises (DR14 Sparse) the first term becomes
    c·e^{−a₁/b_ρ} and the second bound still holds (each query meets one threshold noise).

    Args:
        accuracy: α > 0.
        threshold_scale: b_ρ > 0.
        query_scale: b_ν > 0.
        queries: k ≥ 1.
        thresholds: number of threshold noises drawn (1, or c for DR14 Sparse).

    Returns:
        β in [0, 1].

    Raises:
        ParameterError: bad parameters.
    """
    alpha = v.positive("accuracy", accuracy)
    A = v.positive("threshold_scale", threshold_scale)
    B = v.positive("query_scale", query_scale)
    k = v.count("queries", queries)
    n_thr = v.count("thresholds", thresholds)
    # optimal split: d/da [n e^{−a/A} + k e^{−(α−a)/B}] = 0
    a1 = (alpha / B - math.log(k * A / (n_thr * B))) / (1 / A + 1 / B)
    a1 = min(max(a1, 0.0), alpha)
    split = n_thr * math.exp(-a1 / A) + k * math.exp(-(alpha - a1) / B)
    pair = 2 * k * _laplace_diff_tail(alpha, B, A)
    return min(1.0, split, pair)


def _accuracy_for_beta(beta: float, A: float, B: float, k: int, n_thr: int) -> float:
    def fail(alpha: float) -> float:
        return svt_failure_probability(accuracy=alpha, threshold_scale=A, query_scale=B,
                                       queries=k, thresholds=n_thr)

    hi = (A * math.log(2 * n_thr / beta) + B * math.log(2 * k / beta)) * 1.01  # split bound ≤ β here
    lo = 0.0
    while hi - lo > 1e-12 * hi:
        mid = (lo + hi) / 2
        if mid > 0 and fail(mid) <= beta:
            hi = mid
        else:
            lo = mid
    return hi


def advanced_composition_epsilon(*, epsilon: float, count: int, delta: float) -> float:
    r"""ε of the c-fold composition of ε'-DP mechanisms at δ (DR14 Thm 3.20):
    √(2c·ln(1/δ))·ε' + c·ε'·(e^{ε'} − 1)."""
    epsilon = v.positive("epsilon", epsilon)
    c = v.count("count", count)
    delta = v.open_unit("delta", delta)
    growth = math.expm1(epsilon) if epsilon < 709.0 else math.inf  # e^ε' − 1 overflows past 709.78
    return math.sqrt(2 * c * math.log(1 / delta)) * epsilon + c * epsilon * growth


def sparse_vector(
    *,
    epsilon: float,
    queries: int,
    answers: int = 1,
    sensitivity: float = 1.0,
    monotonic: bool = False,
    beta: float = 0.05,
    variant: str = "lyu",
    split: str = "optimal",
    delta: float = 0.0,
) -> MechanismResult:
    r"""SVT calculator: noise scales for ε and the (α, β)-accuracy over k queries.

    Args:
        epsilon: ε > 0 (the whole run).
        queries: k ≥ 1, the number of queries the accuracy covers.
        answers: c, 1 ≤ c ≤ k: the run halts after c ⊤ answers.
        sensitivity: Δ > 0 of every query.
        monotonic: queries move in the same direction between neighbours (halves the query
            noise of ``lyu``; DR14's algorithms are stated without it and ignore it).
        beta: β in (0, 1).
        variant: ``lyu``, ``dwork-roth`` or ``numeric``; refused variants raise (see
            :func:`check_variant`).
        split: ``optimal`` or ``equal`` (``lyu`` only).
        delta: δ ∈ [0, 1): > 0 only for ``dwork-roth``/``numeric`` (DR14's advanced-composition
            versions).

    Returns:
        A result with ``epsilon``, ``delta``, ``threshold_scale`` (b_ρ), ``query_scale`` (b_ν),
        ``answer_scale`` (NumericSparse), ``epsilon_threshold``/``epsilon_queries``
        (ε₁/ε₂), ``accuracy`` (α), ``beta``, ``queries``, ``answers``; details: how α is
        bounded, the equal-split α (``lyu``), the composed ε (δ > 0).

    Raises:
        ParameterError: bad parameters, c > k, a refused variant, δ > 0 with ``lyu``.
        InfeasibleError: δ > 0 and advanced composition does not reach ε (ε too large).
    """
    variant = check_variant(variant)
    epsilon = v.positive("epsilon", epsilon)
    k = v.count("queries", queries)
    c = v.count("answers", answers)
    if c > k:
        raise ParameterError("answers", f"at most the number of queries ({k})", c)
    D = v.positive("sensitivity", sensitivity)
    beta = v.open_unit("beta", beta)
    delta = float(delta)
    if delta != 0.0:
        delta = v.open_unit("delta", delta)
        if variant == "lyu":
            raise ParameterError("delta", "0 for --variant lyu (pure ε-DP); δ > 0 is DR14's "
                                 "dwork-roth/numeric", delta)
    values: dict = {"epsilon": epsilon, "delta": delta, "sensitivity": D, "monotonic": bool(monotonic),
                    "queries": k, "answers": c, "beta": beta}
    details: dict = {}
    if variant == "lyu":
        e1, e2 = budget_split(epsilon=epsilon, answers=c, monotonic=monotonic, split=split)
        A = D / e1
        B = (1 if monotonic else 2) * c * D / e2
        alpha = _accuracy_for_beta(beta, A, B, k, 1)
        values.update({"epsilon_threshold": e1, "epsilon_queries": e2, "threshold_scale": A,
                       "query_scale": B, "accuracy": alpha})
        if split == "optimal":
            f1, f2 = budget_split(epsilon=epsilon, answers=c, monotonic=monotonic, split="equal")
            details["accuracy_equal_split"] = _accuracy_for_beta(
                beta, D / f1, (1 if monotonic else 2) * c * D / f2, k, 1)
        if split == "equal":
            details["ratio"] = "1 : 1 (ε₁ = ε₂ = ε/2)"
        else:
            details["ratio"] = "1 : c^(2/3)" if monotonic else "1 : (2c)^(2/3)"
        details["bound"] = ("union bound over the noise events (module docstring): "
                            "min(split e^{−a₁/b_ρ} + k·e^{−a₂/b_ν}, 2k·Pr[ν − ρ > α])")
        method = "lyu" if split == "optimal" else "lyu-equal"
    else:
        if split != "optimal":
            raise ParameterError("split", "optimal (the default) unless --variant lyu", split)
        if monotonic:
            details["monotonic"] = "ignored: DR14's algorithms are stated for general queries"
        L = math.log(k)
        if variant == "dwork-roth":
            if delta == 0:
                sigma = 2 * c * D / epsilon
                alpha = 8 * c * D * (L + math.log(2 * c / beta)) / epsilon
            else:
                sigma = math.sqrt(32 * c * math.log(1 / delta)) * D / epsilon
                alpha = D * (L + math.log(2 * c / beta)) * math.sqrt(512 * c * math.log(1 / delta)) / epsilon
                per_run = 2 * D / sigma
                composed = advanced_composition_epsilon(epsilon=per_run, count=c, delta=delta)
                details["epsilon_per_run"] = per_run
                details["epsilon_advanced_composition"] = composed
                if composed > epsilon:  # the composed ε must not exceed the target, not even by rounding
                    raise InfeasibleError(
                        f"DR14 Alg. 2 with δ > 0 is not proven at ε = {epsilon:g}: advanced composition (Thm 3.20) "
                        f"of its c = {c} runs gives ε = {composed:.6g} (Cor 3.21 assumes ε < 1); use δ = 0 "
                        "or --variant lyu")
            values.update({"threshold_scale": sigma, "query_scale": 2 * sigma, "accuracy": alpha})
            details["accuracy_theorem"] = "Dwork & Roth 2014 Thm 3.24 (c = 1) / 3.26"
            details["threshold"] = "threshold noise refreshed after every ⊤ answer"
        else:  # numeric
            e1, e2, s1, s2, alpha, parts = _numeric_sparse(epsilon=epsilon, queries=k, answers=c, sensitivity=D,
                                                           beta=beta, delta=delta)
            if delta == 0:
                details["split"] = "ε₁ = 8ε/9, ε₂ = 2ε/9 (DR14 Alg. 3, δ = 0)"
                details["accuracy_theorem"] = "Dwork & Roth 2014 Thm 3.28 (also bounds |released − q_i| ≤ α)"
            else:
                details["split"] = "ε₁ = √512/(√512 + 1)·ε, ε₂ = 2/(√512 + 1)·ε (DR14 Alg. 3, δ > 0)"
                details["accuracy_threshold_part"], details["accuracy_answers_part"] = parts
                details["accuracy_theorem"] = (
                    "max(threshold part: Dwork & Roth 2014 Thm 3.26 at (ε₁, δ/2, β/2) = Thm 3.28's closed form; "
                    "released answers: σ(ε₂)·ln(2c/β), c Laplace tails, which Thm 3.28's proof omits)")
                comp = (advanced_composition_epsilon(epsilon=2 * D / s1, count=c, delta=delta / 2)
                        + advanced_composition_epsilon(epsilon=D / s2, count=c, delta=delta / 2))
                details["epsilon_advanced_composition"] = comp
                if comp > epsilon:  # the composed ε must not exceed the target, not even by rounding
                    raise InfeasibleError(
                        f"DR14 Alg. 3 with δ > 0 is not proven at ε = {epsilon:g}: advanced composition (Thm 3.20) "
                        f"gives ε = {comp:.6g} (Cor 3.21 assumes ε < 1); use δ = 0")
            values.update({"epsilon_threshold": e1, "epsilon_queries": e2, "threshold_scale": s1,
                           "query_scale": 2 * s1, "answer_scale": s2, "accuracy": alpha})
            details["threshold"] = "threshold noise refreshed after every ⊤ answer"
        method = variant
    return MechanismResult(method=method, values=values, source=SOURCES[method], details=details)


def sparse_vector_epsilon_for_accuracy(*, accuracy: float, **kwargs) -> MechanismResult:
    r"""The ε at which :func:`sparse_vector` reaches accuracy α (same keyword arguments but
    ``epsilon``). Every variant's α is proportional to 1/ε (all noise scales are), so
    ε = α(ε = 1)/α; the result is recomputed at that ε (which re-checks the δ > 0 composition).

    Raises:
        ParameterError: bad parameters (α ≤ 0, ...).
        InfeasibleError: as :func:`sparse_vector`.
    """
    accuracy = v.positive("accuracy", accuracy)
    kwargs.pop("epsilon", None)
    if float(kwargs.get("delta", 0.0)) == 0.0:
        alpha1 = sparse_vector(epsilon=1.0, **kwargs)["accuracy"]
    else:  # α ∝ 1/ε too, but ε = 1 may fail the composition check: α(ε = 1) from the closed form
        alpha1 = _unit_alpha_delta(**kwargs)
    eps = alpha1 / accuracy
    res = sparse_vector(epsilon=eps, **kwargs)
    return MechanismResult(method=res.method, values={**res.values, "accuracy": accuracy,
                                                      "accuracy_at_epsilon": res["accuracy"]},
                           source=res.source, details=res.details)


def _unit_alpha_delta(*, queries, answers=1, sensitivity=1.0, beta=0.05, variant="lyu", delta=0.0,
                      **_ignored) -> float:
    """α at ε = 1 from the DR14 closed forms with δ > 0 (no composition check)."""
    variant = check_variant(variant)
    k, c = v.count("queries", queries), v.count("answers", answers)
    D, beta = v.positive("sensitivity", sensitivity), v.open_unit("beta", beta)
    delta = v.open_unit("delta", delta)
    L = math.log(k)
    if variant == "dwork-roth":
        return D * (L + math.log(2 * c / beta)) * math.sqrt(512 * c * math.log(1 / delta))
    if variant == "numeric":
        return _numeric_sparse(epsilon=1.0, queries=k, answers=c, sensitivity=D, beta=beta, delta=delta)[4]
    raise ParameterError("delta", "0 for --variant lyu", delta)


def _numeric_sparse(*, epsilon: float, queries: int, answers: int, sensitivity: float, beta: float,
                    delta: float) -> tuple[float, float, float, float, float, tuple[float, float]]:
    r"""DR14 Alg. 3 (NumericSparse): (ε₁, ε₂, threshold scale σ(ε₁), answer scale σ(ε₂), α,
    (threshold part of α, answers' part of α)) for validated parameters (module docstring).

    The split is Alg. 3's: 8/9 and 2/9 of ε for δ = 0, √512/(√512 + 1) and 2/(√512 + 1) for
    δ > 0. α = max(threshold part, answers' part): the threshold part is DR14 Thm 3.26 for
    Sparse at (ε₁, δ/2) with β/2 (equal to Thm 3.28's closed form), the answers' part is
    σ(ε₂)·ln(2c/β), so that c Laplace answers all land within it except with probability β/2.
    """
    k, c, D = queries, answers, sensitivity
    L = math.log(k) + math.log(4 * c / beta)
    if delta == 0:
        e1, e2 = 8 * epsilon / 9, 2 * epsilon / 9
        s1, s2 = 2 * c * D / e1, 2 * c * D / e2
        thr = 9 * c * D * L / epsilon  # = 8cΔ(ln k + ln(2c/(β/2)))/ε₁, Thm 3.26 at ε₁
    else:
        r512 = math.sqrt(512)
        e1, e2 = r512 / (r512 + 1) * epsilon, 2 / (r512 + 1) * epsilon
        root = math.sqrt(32 * c * math.log(2 / delta))
        s1, s2 = root * D / e1, root * D / e2
        thr = D * L * math.sqrt(c * math.log(2 / delta)) * (r512 + 1) / epsilon  # Thm 3.26 at (ε₁, δ/2, β/2)
    ans = s2 * math.log(2 * c / beta)
    return e1, e2, s1, s2, max(thr, ans), (thr, ans)
