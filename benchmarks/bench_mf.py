"""Sensitivity and prefix-sum error of the correlated-noise strategies at n = 10⁴ steps: time
per strategy (target < 1 s for every non-optimized strategy) and the ratio of dpcalc's time to
jax_privacy's for the same quantities (float64, after a warm-up call so jit compilation is not
counted), where jax_privacy is installed.

Run: ``PYTHONPATH=$PWD python benchmarks/bench_mf.py [--steps 10000] [--epochs 10] [--repeat 3]``

Per strategy: Δ (dpcalc.mechanisms.correlated.sensitivity, b = n/k min-separation, k epochs)
and the per-prefix error ‖B_{t,:}‖² (prefix_error); the median of ``--repeat`` runs, process
CPU time (steadier than wall time on a shared machine). jax_privacy references: banded and
Toeplitz ``toeplitz.minsep_sensitivity_squared`` + ``toeplitz.per_query_error``; the values are
compared too (relative difference printed). The tree has no jax_privacy counterpart (—).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from dpcalc.mechanisms.correlated import (
    Participation,
    TreeStrategy,
    banded_sqrt_strategy,
    blt_strategy,
    prefix_error,
    sensitivity,
    sqrt_strategy,
)
from dpcalc.mechanisms.correlated.optimize import optimize_banded


def _cpu(fn, repeat: int):
    times, out = [], None
    for _ in range(repeat):
        t = time.process_time()
        out = fn()
        times.append(time.process_time() - t)
    return statistics.median(times), out


def _jax():
    try:
        import jax

        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp
        from jax_privacy.matrix_factorization import toeplitz
    except ImportError:
        return None
    return jnp, toeplitz


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    n, k = args.steps, args.epochs
    p = Participation(n, k)
    strategies = [
        ("tree", TreeStrategy(n, restarts=k)),
        ("tree-honaker", TreeStrategy(n, honaker=True, restarts=k)),
        ("sqrt", sqrt_strategy(n)),
        ("banded:8", banded_sqrt_strategy(n, 8)),
        ("banded:64", banded_sqrt_strategy(n, 64)),
        ("blt (2 buffers)", blt_strategy(n, decay=[0.99, 0.8], scale=[0.1, 0.3])),
    ]
    jx = _jax()
    print(f"n = {n}, k = {k}, b = {p.min_separation}; CPU seconds (median of {args.repeat})")
    print(f"{'strategy':<18}{'dpcalc s':>10}{'< 1 s':>7}{'jax s':>10}{'dpcalc/jax':>12}{'max rel diff':>14}")
    for name, s in strategies:
        t_ours, (sens, err) = _cpu(lambda s=s: (sensitivity(s, p), prefix_error(s)), args.repeat)
        row = f"{name:<18}{t_ours:>10.4f}{'yes' if t_ours < 1 else 'NO':>7}"
        if jx is None or isinstance(s, TreeStrategy):
            print(row + f"{'—':>10}{'—':>12}{'—':>14}")
            continue
        jnp, toeplitz = jx
        coef = jnp.asarray(s.coefs)

        def theirs(coef=coef, toeplitz=toeplitz):
            sq = toeplitz.minsep_sensitivity_squared(coef, p.min_separation, k, n=n)
            pq = toeplitz.per_query_error(strategy_coef=coef, n=n)
            return float(sq), np.asarray(pq)

        theirs()  # compile
        t_jax, (sq, pq) = _cpu(theirs, args.repeat)
        diff = max(abs(sens.value**2 - sq) / sq, float(np.max(np.abs(err.per_step - pq) / pq)))
        print(row + f"{t_jax:>10.4f}{t_ours / t_jax:>12.3g}{diff:>14.2e}")
    t_opt, _ = _cpu(lambda: optimize_banded(p, 64), 1)
    print(f"--optimize banded --bands 64: {t_opt:.2f} CPU s (target < 30 s)")


if __name__ == "__main__":
    main()
