r"""Empirical privacy audits: lower bounds on the true ε from a membership experiment.

An audit answers "is my ε tight for my model?" from the user's own experiment. Its number is
a **lower bound** on the true ε of the audited run (with confidence 1 − β), never a
replacement for the certified upper bound an accountant proves.

* :func:`one_run_epsilon` — Steinke, Nasr, Jagielski 2023 ("Privacy auditing with one (1)
  training run", NeurIPS; main theorem, (ε, δ) version with abstentions): m canaries, each
  included independently with probability ½; the auditor guesses in/out for r of them
  (abstaining on the rest) from the trained model only, v guesses are right. Under
  (ε, δ)-DP, P[v correct] ≤ β_bin + 2mδ·a with β_bin = P[Binomial(r, p) ≥ v],
  p = e^ε/(1 + e^ε), and a = max_{i=1..v} P[v − i ≤ Binomial(r, p) < v]/i (the p-value
  of their appendix code, as also implemented in google-deepmind/jax_privacy
  ``auditing._one_run_p_value``). ε_lower is the largest ε whose p-value is below β
  (bisection keeping the lower end rejected). Exact binomial tails (scipy.special.bdtr/bdtrc).
* :func:`clopper_pearson_epsilon` — many independent runs (Jagielski, Ullman, Oprea 2020;
  Nasr, Song, Thakurta, Papernot, Carlini 2021): one threshold test's FPR and TPR bounded by
  Clopper–Pearson intervals (exact, β/2 each), then ε ≥ ln((TPR_lo − δ)/FPR_hi) and
  ε ≥ ln((1 − FPR_hi − δ)/(1 − TPR_lo)) (KOV 2015 Thm 2.1: TPR ≤ e^ε FPR + δ and
  1 − FPR ≤ e^ε (1 − TPR) + δ).

Guessing rules must not look at the labels. With scores, the candidate rules (top-k / bottom-k
guesses, thresholds) are a fixed family chosen from the scores alone, and the confidence is
split over them (Bonferroni); for the many-runs method the threshold is chosen on a random
half of the runs and the bound computed on the other half.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpcalc import _validate as v
from dpcalc.errors import ParameterError

__all__ = ["AuditData", "read_guesses", "one_run_p_value", "one_run_epsilon", "one_run_audit",
           "clopper_pearson", "clopper_pearson_epsilon", "MAX_FILE_BYTES", "ONE_RUN_SOURCE", "CP_SOURCE"]

#: largest guesses file read (bytes)
MAX_FILE_BYTES = 64 * 1024 * 1024
ONE_RUN_SOURCE = ("Steinke, Nasr, Jagielski 2023, Privacy auditing with one (1) training run "
                  "(main theorem with abstentions, exact binomial tail)")
CP_SOURCE = ("Jagielski, Ullman, Oprea 2020; Nasr et al. 2021: Clopper–Pearson FPR/TPR of one threshold "
             "test over independent runs")
_TRUE = {"1", "yes", "true", "in", "member", "y", "t", "+1"}
_FALSE = {"0", "no", "false", "out", "nonmember", "non-member", "n", "f", "-1"}


@dataclass(frozen=True)
class AuditData:
    """A membership experiment: per canary (or per run) whether it was included and either a
    score (higher = "more likely in") or a guess (+1 in, −1 out, 0 abstain).

    Attributes:
        included: bool array, shape (m,).
        scores: float array (m,) or None.
        guesses: int array (m,) in {−1, 0, +1} or None.
    """

    included: np.ndarray
    scores: np.ndarray | None = None
    guesses: np.ndarray | None = None


def _text(value: Any) -> str:
    """A label or guess as text: JSON numbers are read as floats, so 1.0 is "1" and −1.0 is "-1"."""
    if isinstance(value, float) and value in (-1.0, 0.0, 1.0):
        return str(int(value))
    if isinstance(value, (list, dict)):
        return repr(value)[:40]
    return str(value)


def _label(value: Any, row: int, column: str) -> bool:
    s = _text(value).strip().lower()
    if isinstance(value, bool):
        return value
    if s in _TRUE:
        return True
    if s in _FALSE:
        return False
    raise ParameterError("guesses", "", value,
                         message=f"--guesses row {row}: {column} must be yes/no (1/0, true/false, in/out), got {str(value)[:40]!r}")


def _guess(value: Any, row: int) -> int:
    s = _text(value).strip().lower()
    if s in ("", "0", "abstain", "none", "?", "null"):
        return 0
    if s in _TRUE:
        return 1
    if s in _FALSE:
        return -1
    raise ParameterError("guesses", "", value,
                         message=f"--guesses row {row}: guess must be in/out/abstain (1/-1/0), got {str(value)[:40]!r}")


def read_guesses(path: str, *, max_bytes: int | None = None) -> AuditData:
    """Read a membership experiment from CSV (header row) or JSON (a list of objects, or an
    object of equal-length lists). Columns: ``included`` (yes/no; also ``member``/``label``)
    and ``score`` or ``guess``.

    Read by the one safe reader (:func:`dpcalc._files.read_input_file`): regular files only,
    at most ``max_bytes`` bytes (default :data:`MAX_FILE_BYTES`, 64 MiB), UTF-8.

    Raises:
        ParameterError: not a regular file, too large, unreadable, malformed, missing
            labels/scores, non-finite scores (one line, naming the row).
    """
    if max_bytes is None:
        max_bytes = MAX_FILE_BYTES
    from dpcalc._files import read_input_file

    raw = read_input_file(path, option="guesses", max_bytes=max_bytes)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ParameterError("guesses", "", path, message=f"--guesses {path} is not UTF-8 text: {e.reason}") from None
    if path.lower().endswith(".json"):
        records = _json_records(text, path)
    else:
        try:
            records = list(csv.DictReader(io.StringIO(text)))
        except csv.Error as e:  # a field beyond csv's limit (128 KiB), a NUL byte, ...
            raise ParameterError("guesses", "", path, message=f"--guesses {path} is not valid CSV: {e}") from None
    return _records(records, path)


def _json_records(text: str, path: str) -> list[dict]:
    """The rows of a JSON guesses file: a list of objects, or an object of equal-length lists.
    Numbers are read as floats (a 5,000-digit integer is a non-finite score, refused by
    :func:`_records`, not an error of Python's int conversion)."""
    try:
        data = json.loads(text, parse_int=float, parse_float=float)
    except json.JSONDecodeError as e:
        raise ParameterError("guesses", "", path, message=f"--guesses {path} is not valid JSON: {e}") from None
    except RecursionError:
        raise ParameterError("guesses", "", path, message=f"--guesses {path} is nested too deeply: a list of "
                             "objects or an object of lists expected") from None
    if isinstance(data, dict):
        cols = list(data.items())
        bad = next((k for k, col in cols if not isinstance(col, list)), None)
        if bad is not None:
            raise ParameterError("guesses", "", path, message=(
                f"--guesses {path}: column {str(bad)[:40]!r} must be a list (an object of equal-length lists)"))
        lengths = {len(col) for _, col in cols}
        if len(lengths) > 1:
            shown = ", ".join(f"{str(k)[:20]}: {len(col):,}" for k, col in cols[:4])
            raise ParameterError("guesses", "", path, message=(
                f"--guesses {path}: the columns must have equal lengths, got {shown}"))
        n = lengths.pop() if lengths else 0
        return [{k: col[i] for k, col in cols} for i in range(n)]
    if isinstance(data, list) and all(isinstance(r, dict) for r in data):
        return data
    raise ParameterError("guesses", "", path,
                         message=f"--guesses {path}: a list of objects or an object of lists expected")


def _records(records: list[dict], path: str) -> AuditData:
    if not records:
        raise ParameterError("guesses", "", path, message=f"--guesses {path} has no rows")
    cols = {str(k).strip().lower(): k for k in records[0] if k is not None}
    label_col = next((cols[c] for c in ("included", "member", "label", "in") if c in cols), None)
    if label_col is None:
        raise ParameterError("guesses", "", path,
                             message=f"--guesses {path}: missing column 'included' (yes/no per canary)")
    score_col = cols.get("score")
    guess_col = cols.get("guess")
    if (score_col is None) == (guess_col is None):
        raise ParameterError("guesses", "", path,
                             message=f"--guesses {path}: give exactly one of the columns 'score' or 'guess'")
    inc, vals = [], []
    for i, r in enumerate(records, start=2 if not path.lower().endswith(".json") else 1):
        lab = r.get(label_col)
        if lab is None or str(lab).strip() == "":
            raise ParameterError("guesses", "", path, message=f"--guesses row {i}: missing label in column {label_col!r}")
        inc.append(_label(lab, i, str(label_col)))
        if score_col is not None:
            raw = r.get(score_col)
            try:
                if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
                    raise TypeError("not a number")
                x = float(raw)
            except (TypeError, ValueError, OverflowError):
                raise ParameterError("guesses", "", path,
                                     message=f"--guesses row {i}: score must be a number, got {str(raw)[:40]!r}") from None
            if not math.isfinite(x):
                raise ParameterError("guesses", "", path, message=f"--guesses row {i}: score must be a finite number (|score| <= 1.8e308), got {str(raw)[:40]!r}")
            vals.append(x)
        else:
            vals.append(_guess(r.get(guess_col), i))
    included = np.array(inc, dtype=bool)
    if score_col is not None:
        return AuditData(included, scores=np.array(vals, dtype=float))
    return AuditData(included, guesses=np.array(vals, dtype=int))


# ---------------------------------------------------------------------- one run
def one_run_p_value(m: int, r: int, v_correct: int, epsilon: float, delta: float) -> float:
    """P-value of v correct guesses out of r (m canaries) under (ε, δ)-DP (Steinke, Nasr,
    Jagielski 2023): P[Bin(r, p) ≥ v] + 2mδ·max_{i=1..v} P[v − i ≤ Bin(r, p) < v]/i,
    p = e^ε/(1 + e^ε); capped at 1.

    Args:
        m: number of canaries (each included with probability ½), ≥ 1.
        r: number of guesses (non-abstentions), 0 ≤ r ≤ m.
        v_correct: correct guesses, 0 ≤ v ≤ r.
        epsilon: ε ≥ 0 of the null hypothesis.
        delta: δ in [0, 1] of the null hypothesis.
    """
    from scipy.special import bdtr, bdtrc, expit

    if not 0 <= v_correct <= r <= m:
        raise ParameterError("guesses", "0 ≤ correct ≤ guesses ≤ canaries", (m, r, v_correct))
    if v_correct == 0:
        return 1.0
    p = float(expit(epsilon))
    tail = float(bdtrc(v_correct - 1, r, p))  # P[X > v−1] = P[X ≥ v]
    if delta == 0:
        return min(1.0, tail)
    i = np.arange(1, v_correct + 1)
    cdf_v = float(bdtr(v_correct - 1, r, p))  # P[X ≤ v−1]
    lower = np.where(v_correct - i - 1 >= 0, bdtr(np.maximum(v_correct - i - 1, 0), r, p), 0.0)
    a = float(np.max((cdf_v - lower) / i))
    return min(1.0, tail + 2.0 * m * delta * a)


def one_run_epsilon(m: int, r: int, v_correct: int, *, delta: float, beta: float) -> float:
    """Largest ε (to 1e-6) such that (ε, δ)-DP is rejected at level β by v correct of r guesses
    (m canaries): the empirical lower bound of Steinke, Nasr, Jagielski 2023. 0 when even
    ε = 0 is not rejected.

    The bisection keeps its lower end rejected (p-value·(1 + 1e-9) < β), so the returned ε is
    one at which the test rejects; and rejecting (ε, δ)-DP rejects every smaller ε.
    """
    beta = v.open_unit("beta", beta)

    def rejected(e: float) -> bool:
        return one_run_p_value(m, r, v_correct, e, delta) * (1 + 1e-9) < beta

    if not rejected(0.0):
        return 0.0
    lo, hi = 0.0, 1.0
    while rejected(hi):
        lo, hi = hi, 2.0 * hi
        if hi > 200:
            return lo
    while hi - lo > 1e-6:
        mid = 0.5 * (lo + hi)
        if rejected(mid):
            lo = mid
        else:
            hi = mid
    return lo


@dataclass(frozen=True)
class OneRunResult:
    """Result of :func:`one_run_audit`: the bound and the rule that gave it."""

    epsilon_lower: float
    canaries: int
    guesses: int
    correct: int
    rule: str
    rules_tried: int
    beta: float
    delta: float
    details: dict = field(default_factory=dict)


def _rules(m: int) -> list[tuple[int, int]]:
    """The fixed family of guessing rules for scores: (k_in, k_out) = top k_in scores guessed in,
    bottom k_out guessed out; k from a geometric ladder of m, symmetric and in-only."""
    ks = sorted({max(1, int(round(m * f))) for f in (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5)})
    out = []
    for k in ks:
        out.append((k, 0))
        if 2 * k <= m:
            out.append((k, k))
    return sorted(set(out))


def one_run_audit(data: AuditData, *, delta: float, beta: float = 0.05,
                  k_in: int | None = None, k_out: int | None = None) -> OneRunResult:
    """One-run audit (Steinke, Nasr, Jagielski 2023) of a membership experiment.

    With guesses: used as given. With scores: the top ``k_in`` scores are guessed "in" and
    the bottom ``k_out`` "out" (abstain on the rest); without k's, a fixed family of rules
    (:func:`_rules`, chosen from m alone) is tried with the confidence split over them
    (Bonferroni: β/rules each) and the largest bound reported.

    Args:
        data: the experiment (each canary included independently with probability ½).
        delta: δ of the audited claim, in [0, 1).
        beta: 1 − confidence, in (0, 1).
        k_in, k_out: optional fixed rule for scores.

    Raises:
        ParameterError: β or δ out of range, k's out of range.
    """
    beta = v.open_unit("beta", beta)
    delta = v.closed_unit("delta", delta)
    m = int(data.included.size)
    s = np.where(data.included, 1, -1)
    if data.guesses is not None:
        g = data.guesses
        r = int(np.count_nonzero(g))
        correct = int(np.count_nonzero(g * s > 0))
        eps = one_run_epsilon(m, r, correct, delta=delta, beta=beta)
        return OneRunResult(eps, m, r, correct, "guesses as given", 1, beta, delta)
    order = np.argsort(-data.scores, kind="stable")
    if k_in is not None or k_out is not None:
        rules = [(v.count("k_in", k_in or 0, minimum=0), v.count("k_out", k_out or 0, minimum=0))]
        if rules[0][0] + rules[0][1] > m or rules[0] == (0, 0):
            raise ParameterError("k_in", f"k_in + k_out in [1, {m}]", rules[0])
    else:
        rules = _rules(m)
    best = None
    for ki, ko in rules:
        g = np.zeros(m, dtype=int)
        g[order[:ki]] = 1
        if ko:
            g[order[m - ko:]] = -1
        r = ki + ko
        correct = int(np.count_nonzero(g * s > 0))
        eps = one_run_epsilon(m, r, correct, delta=delta, beta=beta / len(rules))
        if best is None or eps > best[0]:
            best = (eps, r, correct, f"top {ki} in" + (f", bottom {ko} out" if ko else ""))
    return OneRunResult(best[0], m, best[1], best[2], best[3], len(rules), beta, delta)


# ---------------------------------------------------------------------- many runs
def clopper_pearson(k: int, n: int, beta: float) -> tuple[float, float]:
    """Exact (Clopper–Pearson 1934) two-sided interval for a binomial proportion: each side at
    level β/2: (B⁻¹(β/2; k, n−k+1), B⁻¹(1−β/2; k+1, n−k)), 0 and 1 at the ends."""
    from scipy.special import betaincinv

    if n <= 0:
        return 0.0, 1.0
    lo = 0.0 if k == 0 else float(betaincinv(k, n - k + 1, beta / 2.0))
    hi = 1.0 if k == n else float(betaincinv(k + 1, n - k, 1.0 - beta / 2.0))
    return lo, hi


def _eps_from_rates(tpr_lo: float, fpr_hi: float, delta: float) -> float:
    """ε lower bound from a lower bound on TPR and an upper bound on FPR: (ε, δ)-DP needs
    TPR ≤ e^ε FPR + δ and TNR = 1 − FPR ≤ e^ε (1 − TPR) + δ (KOV 2015 Thm 2.1), so
    ε ≥ ln((TPR − δ)/FPR) and ε ≥ ln((1 − FPR − δ)/(1 − TPR)), each monotone the right way
    in the bounds used."""
    best = 0.0
    if tpr_lo - delta > 0 and fpr_hi > 0:
        best = max(best, math.log((tpr_lo - delta) / fpr_hi))
    if (1 - fpr_hi) - delta > 0 and (1 - tpr_lo) > 0:
        best = max(best, math.log((1 - fpr_hi - delta) / (1 - tpr_lo)))
    return best


def clopper_pearson_epsilon(data: AuditData, *, delta: float, beta: float = 0.05, seed: int = 0,
                            threshold: float | None = None) -> dict[str, Any]:
    """ε lower bound from many independent runs (one row per run: canary included or not,
    and the attack's score), with confidence 1 − β.

    With a ``threshold`` (guess "in" when score ≥ threshold) or guesses, all rows are used.
    Otherwise rows are split at random (``seed``) into halves: the threshold maximising the
    point estimate is chosen on the first, the Clopper–Pearson bound computed on the second.
    The FPR and TPR intervals are taken at β/2 each (union bound, two-sided each: conservative).

    Returns:
        ``{"epsilon_lower", "tpr", "fpr", "tpr_interval", "fpr_interval", "threshold", "runs",
        "rule"}``.

    Raises:
        ParameterError: β or δ out of range, or no runs with or without the canary.
    """
    beta = v.open_unit("beta", beta)
    delta = v.closed_unit("delta", delta)
    inc = data.included
    if data.guesses is not None:
        pred = data.guesses > 0
        use = np.ones(inc.size, dtype=bool)
        rule = "guesses as given (abstentions count as 'out')"
        thr = None
    else:
        sc = data.scores
        use = np.ones(inc.size, dtype=bool)
        if threshold is None:
            rng = np.random.default_rng(seed)
            half = rng.permutation(inc.size) < inc.size // 2
            thr = _best_threshold(sc[half], inc[half], delta)
            use = ~half
            rule = f"threshold {thr:.6g} chosen on a random half (seed {seed}), bound on the other half"
        else:
            thr = v.finite("threshold", threshold)
            rule = f"threshold {thr:.6g} (given)"
        pred = sc >= thr
    pos, neg = inc & use, (~inc) & use
    n_pos, n_neg = int(pos.sum()), int(neg.sum())
    if n_pos == 0 or n_neg == 0:
        raise ParameterError("guesses", "", None,
                             message="--guesses needs runs both with and without the canary (after the split)")
    tp, fp = int((pred & pos).sum()), int((pred & neg).sum())
    tpr_lo, tpr_hi = clopper_pearson(tp, n_pos, beta / 2.0)
    fpr_lo, fpr_hi = clopper_pearson(fp, n_neg, beta / 2.0)
    eps = _eps_from_rates(tpr_lo, fpr_hi, delta)
    return {"epsilon_lower": eps, "tpr": tp / n_pos, "fpr": fp / n_neg, "tpr_interval": [tpr_lo, tpr_hi],
            "fpr_interval": [fpr_lo, fpr_hi], "threshold": thr, "runs": n_pos + n_neg, "rule": rule}


def _best_threshold(scores: np.ndarray, inc: np.ndarray, delta: float) -> float:
    """The threshold with the largest point estimate of the ε bound (plus-one smoothed rates)."""
    cands = np.unique(scores)
    if cands.size > 200:
        cands = np.quantile(scores, np.linspace(0.0, 1.0, 201))
    n_pos, n_neg = max(int(inc.sum()), 1), max(int((~inc).sum()), 1)
    best, thr = -1.0, float(cands[0]) if cands.size else 0.0
    for c in cands:
        pred = scores >= c
        tpr = (np.count_nonzero(pred & inc) + 0.5) / (n_pos + 1)
        fpr = (np.count_nonzero(pred & ~inc) + 0.5) / (n_neg + 1)
        e = _eps_from_rates(tpr, fpr, delta)
        if e > best:
            best, thr = e, float(c)
    return thr


def synthetic_gaussian_scores(m: int, mu: float, seed: int) -> AuditData:
    """Test helper: m canaries included with probability ½; score ~ N(μ, 1) if included, else
    N(0, 1) — each canary's score is then a μ-GDP view of its inclusion (DRS 2022 Def 2.7)."""
    rng = np.random.default_rng(seed)
    inc = rng.random(m) < 0.5
    return AuditData(inc, scores=rng.standard_normal(m) + mu * inc)

