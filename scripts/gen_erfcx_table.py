"""Generate dpcalc/_erfcx_table.py: the piecewise-polynomial erfcx(z) = e^{z²}·erfc(z) of
dpcalc._erfc, with a certified bound per interval on the approximation error and on the
rounding of its Horner evaluation (issue 31).

Run (about a minute):  python scripts/gen_erfcx_table.py [--check]
``--check`` regenerates in memory and fails if the committed table differs (reproducibility).

Intervals (see dpcalc/_erfc.py): interval 0 is [0, 1/16); then each binade [2^{e−1}, 2^e),
e = −3…5 (z from 1/16 to 32), is cut into ``SUB`` equal pieces. On each interval
[z_lo, z_hi] with centre c and half-width w the polynomial is p(t) = Σ c_k t^k of degree
``DEG`` in t = (z − c)/(2w) ∈ [−½, ½] (the evaluation computes t exactly in the binades).

Construction and error bound (all in mpmath at 40 digits):
1. f(u) = erfcx(c + w·u), u ∈ [−1, 1], is interpolated at the N + 1 = ``NCHEB`` + 1 Chebyshev
   points of the second kind: coefficients a_0…a_N of Σ a_k T_k(u).
2. Interpolation error (Trefethen, Approximation Theory and Approximation Practice, Thm 8.2):
   f is entire, so for any ρ > 1, |f − p_N| ≤ 4·M_ρ·ρ^{−N}/(ρ − 1), M_ρ = max |f| on the
   Bernstein ellipse E_ρ (maximum principle: on its boundary); M_ρ is taken as 2× the maximum
   over 256 boundary points (mpmath's complex erfc); ρ is the best of three ellipses, with
   semi-major axis 0.9c, c + ½ and c + 1 in z.
3. Truncation to degree DEG: |Σ_{k>DEG} a_k T_k| ≤ Σ_{k=DEG+1}^{N} |a_k|.
4. The truncated series is converted exactly (mpmath) to monomials in t = u/2 and each
   coefficient rounded to the nearest double; the rounding moves p by at most
   Σ_k |c_k^double − c_k^exact|·2^{−k} on |t| ≤ ½.
   Approximation error, absolute: (2) + (3) + (4); relative: divided by min f on the
   interval (erfcx is decreasing on [0, ∞): f(z_hi)).
5. Horner rounding without FMA (Higham, Accuracy and Stability of Numerical Algorithms,
   2nd ed., 2002, eq. (5.3)): p̂ = Σ_k (1 + θ_{2k+1}) c_k t^k (θ_{2·DEG} for the last),
   |θ_n| ≤ γ_n = n·2^{−53}/(1 − n·2^{−53}), so |p̂ − p| ≤ Σ_k γ_{2k+1}|c_k|2^{−k}; relative:
   divided by (min f − the approximation error).
6. The dense check: max over 1001 points per interval of |p(t) − f| / f, p evaluated exactly
   from the stored doubles (mpmath), must be ≤ the bound of 1–4 (it always is by far).
The script prints, per interval, the bounds in units of u = 2^{−52}, and writes the table and
the two maxima into dpcalc/_erfcx_table.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import mpmath
from mpmath import mp, mpf

mp.dps = 40

SUB = 16          # pieces per binade
DEG = 8           # polynomial degree
DENSE = 1000      # points per interval of the dense check
NCHEB = 28        # degree of the Chebyshev interpolant the truncation starts from
E_MIN, E_MAX = -3, 5  # binades [2^{e-1}, 2^e): z from 1/16 to 32
U = mpf(2) ** -52
OUT = Path(__file__).resolve().parents[1] / "dpcalc" / "_erfcx_table.py"


def erfcx(z):
    return mpmath.erfc(z) * mpmath.exp(z * z)


def intervals():
    out = [(mpf(0), mpf(1) / 16)]
    for e in range(E_MIN, E_MAX + 1):
        lo = mpf(2) ** (e - 1)
        step = lo / SUB
        out += [(lo + j * step, lo + (j + 1) * step) for j in range(SUB)]
    return out


def cheb_coeffs(f, n):
    """Coefficients a_0..a_n of the Chebyshev interpolant of f on [-1, 1] at the n + 1
    Chebyshev points of the second kind (Trefethen ATAP, ch. 3)."""
    xs = [mpmath.cos(mp.pi * j / n) for j in range(n + 1)]
    fs = [f(x) for x in xs]
    a = []
    for k in range(n + 1):
        s = mpf(0)
        for j in range(n + 1):
            w = mpf(1) / 2 if j in (0, n) else mpf(1)
            s += w * fs[j] * mpmath.cos(mp.pi * j * k / n)
        s *= mpf(2) / n
        if k in (0, n):
            s /= 2
        a.append(s)
    return a


def cheb_to_monomial(a):
    """Σ a_k T_k(u) as Σ b_k u^k (exact in mpmath)."""
    n = len(a) - 1
    t_prev, t_cur = [mpf(1)], [mpf(0), mpf(1)]
    b = [mpf(0)] * (n + 1)
    for k in range(n + 1):
        tk = t_prev if k == 0 else t_cur if k == 1 else None
        if k >= 2:
            nxt = [mpf(0)] * (k + 1)
            for i, c in enumerate(t_cur):
                nxt[i + 1] += 2 * c
            for i, c in enumerate(t_prev):
                nxt[i] -= c
            t_prev, t_cur = t_cur, nxt
            tk = t_cur
        for i, c in enumerate(tk):
            b[i] += a[k] * c
    return b


def ellipse_bound(c, w, rho):
    """2 × max |erfcx| over 256 points of the Bernstein ellipse E_ρ mapped to z = c + w·u."""
    m = mpf(0)
    for j in range(256):
        th = 2 * mp.pi * j / 256
        u = (rho * mpmath.expj(th) + mpmath.expj(-th) / rho) / 2
        m = max(m, abs(erfcx(c + w * u)))
    return 2 * m


def interp_bound(c, w, a_z):
    """Step 2's bound for the ellipse whose semi-major axis in z is a_z (ρ + 1/ρ = 2a_z/w)."""
    s = a_z / w
    rho = s + mpmath.sqrt(s * s - 1)
    return 4 * ellipse_bound(c, w, rho) * rho ** (-NCHEB) / (rho - 1)


def gamma(n):
    e = n * mpf(2) ** -53
    return e / (1 - e)


def build_row(i):
    """(coefficients as doubles, approximation bound, Horner bound, dense max) of interval i."""
    lo, hi = intervals()[i]
    c, w = (lo + hi) / 2, (hi - lo) / 2
    a = cheb_coeffs(lambda u: erfcx(c + w * u), NCHEB)
    interp = min(interp_bound(c, w, a_z) for a_z in (c * 0.9, c + 0.5, c + 1) if a_z > 2 * w)
    trunc = sum(abs(x) for x in a[DEG + 1:])
    b_u = cheb_to_monomial(a[: DEG + 1])
    exact = [b_u[k] * mpf(2) ** k for k in range(DEG + 1)]  # in t = u/2
    dbl = [float(x) for x in exact]
    rnd = sum(abs(mpf(d) - x) * mpf(2) ** -k for k, (d, x) in enumerate(zip(dbl, exact, strict=True)))
    fmin = erfcx(hi)
    approx = (interp + trunc + rnd) / fmin
    horner = sum(gamma(2 * k + 1 if k < DEG else 2 * DEG) * abs(mpf(d)) * mpf(2) ** -k
                 for k, d in enumerate(dbl)) / (fmin * (1 - approx))
    dense = mpf(0)
    for j in range(DENSE + 1):
        t = mpf(j) / DENSE - mpf(1) / 2
        p = mpf(0)
        for d in reversed(dbl):
            p = p * t + mpf(d)
        f = erfcx(c + 2 * w * t)
        dense = max(dense, abs(p - f) / f)
    assert dense <= approx, (i, dense, approx)
    return dbl, approx, horner, dense


def build(verbose=True):
    rows, approx_max, horner_max, dense_max = [], mpf(0), mpf(0), mpf(0)
    for i, (lo, hi) in enumerate(intervals()):
        dbl, approx, horner, dense = build_row(i)
        approx_max, horner_max = max(approx_max, approx), max(horner_max, horner)
        dense_max = max(dense_max, dense)
        rows.append(dbl)
        if verbose:
            print(f"{i:3d} [{float(lo):9.6f}, {float(hi):9.6f}]  approx ≤ {float(approx / U):.2e} u"
                  f" (dense {float(dense / U):.2e})  horner ≤ {float(horner / U):.4f} u", flush=True)
    return rows, approx_max, horner_max, dense_max


def measure_exp(n, seed=0):
    """Max relative error of ``np.exp`` on n points of [−708.3, 0] (where the result is a normal
    double: 90% uniform on the range, 10% on [−1, 0]) against mpmath, in units of u — the
    allowance dpcalc._erfc makes for it (EXP_ERROR_UNITS) must be well above."""
    import numpy as np

    rng = np.random.default_rng(seed)
    x = np.concatenate([-rng.uniform(0.0, 708.3, n - n // 10), -rng.uniform(0.0, 1.0, n // 10)])
    got = np.exp(x)
    worst = mpf(0)
    mp.dps = 30
    for xi, gi in zip(x.tolist(), got.tolist(), strict=True):
        ref = mpmath.exp(xi)
        worst = max(worst, abs(gi - ref) / ref)
    mp.dps = 40
    return float(worst / U)


def render(rows, approx_max, horner_max, dense_max):
    lines = [
        '"""Coefficients of dpcalc._erfc\'s erfcx(z) = e^{z²}·erfc(z): GENERATED by',
        "scripts/gen_erfcx_table.py (do not edit; rerun it). Row i: the monomial coefficients",
        "c_0…c_DEG of the interval's polynomial in t ∈ [−½, ½] (see dpcalc._erfc).",
        '"""',
        "",
        f"SUB = {SUB}  # pieces per binade",
        f"DEG = {DEG}",
        f"E_MIN, E_MAX = {E_MIN}, {E_MAX}",
        "#: max over intervals of the certified relative approximation error (units of u = 2⁻⁵²)",
        f"APPROX_UNITS = {float(approx_max / U)!r}",
        "#: max over intervals of the certified relative Horner rounding error (units of u)",
        f"HORNER_UNITS = {float(horner_max / U)!r}",
        "#: the largest relative error seen on the dense check (units of u)",
        f"DENSE_UNITS = {float(dense_max / U)!r}",
        "",
        "ROWS = (",
    ]
    for r in rows:
        chunks = [", ".join(repr(x) for x in r[k:k + 3]) for k in range(0, len(r), 3)]
        lines.append("    (" + ",\n     ".join(chunks) + "),")
    lines.append(")")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail if the committed table differs")
    ap.add_argument("--exp", type=int, metavar="N", default=0,
                    help="only measure np.exp's relative error against mpmath on N points")
    args = ap.parse_args()
    if args.exp:
        print(f"np.exp on [-708.3, 0]: max relative error {measure_exp(args.exp):.3f} u")
        return 0
    text = render(*build(verbose=not args.check))
    if args.check:
        if OUT.read_text() != text:
            print("dpcalc/_erfcx_table.py differs from the generator's output", file=sys.stderr)
            return 1
        print("table reproduced")
        return 0
    OUT.write_text(text)
    print("wrote", OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
