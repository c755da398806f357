r"""The exponential mechanism: selection probabilities and the utility guarantee.

Given scores u(x, h) for candidates h ∈ H with sensitivity Δu (the most any one
record can change any score), the exponential mechanism selects h with
probability ∝ exp(ε·u(x, h)/(2Δu)); it is ε-DP (McSherry & Talwar 2007;
Dwork & Roth 2014 Thm 3.10). When the scores are *monotonic* — for every pair of
neighbouring datasets all scores move in the same direction (e.g. counts under
adding/removing one record) — the factor 2 can be dropped: probability
∝ exp(ε·u/Δu) is ε-DP (McSherry & Talwar 2007; DR14 remark after Thm 3.10).

Utility (DR14 Thm 3.11): Pr[u(M(x)) ≤ OPT − (2Δu/ε)(ln(|H|/|H_OPT|) + t)] ≤ e^{−t};
with |H_OPT| ≥ 1 this gives the familiar OPT − (2Δu/ε)(ln|H| + t) (Δu/ε when monotonic).

The normaliser is a log-sum-exp over scores shifted by their maximum, so scores of
size 10⁶ and 10⁶ candidates are handled without overflow.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from dpcalc import _validate as v
from dpcalc.errors import ParameterError
from dpcalc.results import MechanismResult

__all__ = ["read_scores", "exponential_probabilities", "exponential_mechanism"]

SOURCE = "McSherry & Talwar 2007; Dwork & Roth 2014, Thm 3.10/3.11"


def _clip(text: str, n: int = 40) -> str:
    """``text`` cut to ``n`` characters for an error message."""
    return text if len(text) <= n else text[:n] + "…"


def read_scores(lines: Iterable[str]) -> tuple[list[str] | None, np.ndarray]:
    """Parse candidate scores: one number per line, or ``label,score`` per line.

    Blank lines and lines starting with ``#`` are skipped. Labels are optional but
    must be all-or-nothing.

    Args:
        lines: the text lines (e.g. an open file).

    Returns:
        (labels or None, scores as a float64 array of shape (n,)).

    Raises:
        ParameterError: no scores, a non-numeric or non-finite score, or mixed
            labelled/unlabelled lines.
    """
    labels, _, scores = parse_scores(lines)
    return labels, scores


def parse_scores(lines: Iterable[str]) -> tuple[list[str] | None, list[str], np.ndarray]:
    """:func:`read_scores`, also returning each score's text as written (for exact decimal
    arithmetic in the exact samplers).

    Returns:
        (labels or None, score texts (n,), scores as a float64 array of shape (n,)).

    Raises:
        ParameterError: as :func:`read_scores`.
    """
    labels: list[str] = []
    texts: list[str] = []
    scores: list[float] = []
    labelled: bool | None = None
    for lineno, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        label, sep, text = line.rpartition(",")
        has_label = bool(sep)
        if labelled is None:
            labelled = has_label
        elif labelled != has_label:
            raise ParameterError("scores", "all 'score' lines or all 'label,score' lines",
                                 f"line {lineno}: {_clip(line)!r}")
        try:
            x = v.parse_number(text)
        except ValueError:
            x = math.nan
        if not math.isfinite(x):
            raise ParameterError("scores", "a finite number on every line", line, message=(
                f"scores must be a finite number on every line, got {_clip(text.strip())!r} on line {lineno}"))
        scores.append(x)
        texts.append(text.strip())
        if has_label:
            labels.append(label.strip())
    if not scores:
        raise ParameterError("scores", "at least one score", 0,
                             message="scores is empty: give at least one score")
    return (labels if labelled else None), texts, np.asarray(scores, dtype=np.float64)


def _scores_array(scores: Sequence[float] | np.ndarray) -> np.ndarray:
    try:
        u = np.asarray(scores, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise ParameterError("scores", "a sequence of finite numbers", scores) from None
    if u.size == 0:
        raise ParameterError("scores", "at least one score", 0,
                             message="scores is empty: give at least one score")
    if not np.all(np.isfinite(u)):
        bad = int(np.flatnonzero(~np.isfinite(u))[0])
        raise ParameterError("scores", "finite numbers", float(u[bad]),
                             message=f"scores must be finite numbers, got {u[bad]} at position {bad + 1}")
    return u


def exponential_probabilities(
    *, scores: Sequence[float] | np.ndarray, epsilon: float, sensitivity: float = 1.0,
    monotonic: bool = False,
) -> np.ndarray:
    r"""Selection probabilities of the exponential mechanism (McSherry & Talwar 2007).

    p_h = exp(c·u_h) / Σ_g exp(c·u_g) with c = ε/(2Δu), or ε/Δu for monotonic scores,
    computed as exp(c·(u_h − max u) − logsumexp(c·(u − max u))). Invariant under adding a
    constant to every score.

    Args:
        scores: u, shape (n,), finite.
        epsilon: ε > 0.
        sensitivity: Δu > 0.
        monotonic: scores are monotonic in the dataset (see module docstring).

    Returns:
        probabilities, shape (n,), aligned with ``scores``, summing to 1.

    Raises:
        ParameterError: empty/non-finite scores, ε ≤ 0, Δu ≤ 0.
    """
    from scipy.special import logsumexp

    epsilon = v.positive("epsilon", epsilon)
    sensitivity = v.positive("sensitivity", sensitivity)
    u = _scores_array(scores)
    c = epsilon / (sensitivity if monotonic else 2 * sensitivity)
    # u − max u and c·(u − max u) may overflow to −inf for scores of size ~1e308 or c ~ 1e200:
    # the probability ratio to the best candidate is then below e^{−1e308}, i.e. exactly 0.0
    with np.errstate(over="ignore"):
        z = c * (u - u.max())
    return np.exp(z - logsumexp(z))


def exponential_mechanism(
    *,
    scores: Sequence[float] | np.ndarray,
    epsilon: float,
    sensitivity: float = 1.0,
    monotonic: bool = False,
    beta: float = 0.05,
    labels: Sequence[str] | None = None,
) -> MechanismResult:
    r"""Exponential mechanism: probabilities and the utility guarantee (DR14 Thm 3.10/3.11).

    Args:
        scores: u(x, h) for each candidate, shape (n,).
        epsilon: ε > 0 (the mechanism is ε-DP).
        sensitivity: Δu > 0, the utility sensitivity.
        monotonic: use exp(ε·u/Δu) — valid only when, for every pair of neighbouring
            datasets, all scores move in the same direction.
        beta: failure probability e^{−t} of the utility guarantee, in (0, 1).
        labels: optional candidate names, aligned with ``scores``.

    Returns:
        A result with ``epsilon``, ``probabilities`` (aligned with the input order),
        ``opt`` (max score), ``utility_bound`` = OPT − (c'Δu/ε)(ln|H| + t) where c' = 2
        (1 if monotonic) and t = ln(1/β), ``beta``; details carry the tighter bound with
        |H_OPT| (DR14 Thm 3.11), the argmax and the candidate count.

    Raises:
        ParameterError: bad parameters.
    """
    beta = v.open_unit("beta", beta)
    u = _scores_array(scores)
    probs = exponential_probabilities(scores=u, epsilon=epsilon, sensitivity=sensitivity,
                                      monotonic=monotonic)
    if labels is not None and len(labels) != u.size:
        raise ParameterError("labels", f"one per score ({u.size})", len(labels))
    opt = float(u.max())
    n_opt = int(np.count_nonzero(u == opt))
    t = -math.log(beta)
    factor = (1.0 if monotonic else 2.0) * sensitivity / epsilon
    values = {"epsilon": float(epsilon), "delta": 0.0, "sensitivity": float(sensitivity),
              "monotonic": bool(monotonic), "candidates": int(u.size), "opt": opt,
              "utility_bound": opt - factor * (math.log(u.size) + t), "beta": beta,
              "probabilities": probs}
    details = {
        "utility_bound_opt_count": opt - factor * (math.log(u.size / n_opt) + t),
        "optimal_candidates": n_opt,
        "argmax": int(np.argmax(u)),
        "note": "the utility bound depends on the data (OPT); publishing it is not private",
    }
    if labels is not None:
        values["labels"] = list(labels)
    return MechanismResult(method="exponential", values=values, source=SOURCE, details=details)
