r"""erfc(|x|/√2) for numpy arrays, vectorised, with a certified relative error bound (issue 31).

:func:`dpcalc._numerics.ndtr` takes Φ from libm's erfc point by point (``math.erfc``, ~0.1 µs a
point with the list round trip); on pld's grids that loop was 35–45 % of an evaluation. This
module computes the same function with numpy array operations only, at a relative error
proven below ``ERFC_ERROR_UNITS``·u (u = 2⁻⁵²), so that large grids need neither the loop nor
scipy.special.ndtr (whose error grows as x²u in the tail: ~10³u, and whose import costs
~0.2 s).

**Method.** For a = |x| ≥ 0 and z = a/√2,

.. math:: \operatorname{erfc}(z) = e^{-a^2/2}\cdot\operatorname{erfcx}(z),
          \qquad \operatorname{erfcx}(z) = e^{z^2}\operatorname{erfc}(z),

1. a² = H + L exactly (Dekker's two-product, a split into 26-bit halves; exact for
   2⁻⁴⁸⁴ ≈ 1e-146 < a ≤ 40, and below that a² < 1e-290 only perturbs e^{−a²/2} = 1 below u), H/2 and
   L/2 exact; e^{−a²/2} = exp(−H/2)·(1 − L/2)·(1 + η), |η| ≤ (L/2)² ≤ 1e-26 since
   |L| ≤ 2⁻⁵³H ≤ 2⁻⁵³·1600. So the exponent, where libm's ``erfc(fl(a/√2))`` and scipy lose
   z²u, is exact here.
2. erfcx(ẑ) at ẑ = fl(a·fl(1/√2)) = z(1 + δ), |δ| ≤ 2⁻⁵³ + 6.9e-17 ≤ 0.81u. erfcx is
   well-conditioned: κ(z) = |z·erfcx′(z)/erfcx(z)| = 2z/(√π erfcx(z)) − 2z² < 1 for z ≥ 0 by
   the bounds 2/(√π(z + √(z²+2))) < erfcx(z) ≤ 2/(√π(z + √(z²+4/π))) (Abramowitz & Stegun
   7.1.13), so the argument costs ≤ 0.82u relative.
3. erfcx on [0, 27.5] from 145 polynomials of degree 8 (``dpcalc/_erfcx_table.py``, GENERATED
   by ``scripts/gen_erfcx_table.py`` with mpmath at 40 digits): interval 0 is [0, 1/16), then
   each binade [2^{e−1}, 2^e), e = −3…5, cut into 16 equal pieces. Row and local variable
   t ∈ [−½, ½) come from ẑ's bits: ẑ = 2^{e−1}(1 + f), the exponent and the top 4 bits of f
   select the piece, its low 48 bits L give t = L·2⁻⁴⁸ − ½ — exact (L < 2⁴⁸ converts exactly,
   the scaling is by a power of 2, and the difference is a multiple of 2⁻⁴⁸ below 1) — and
   below 1/16, t = 16ẑ − ½ is off by ≤ 2⁻⁵⁵ (16ẑ is exact;
   a shift of z by ≤ 2⁻⁵⁹: ≤ 0.01u relative since |erfcx′/erfcx| ≤ 2/√π). Per interval the
   generator bounds (a) the approximation error of the stored double coefficients — Chebyshev
   interpolation error by Trefethen's Bernstein-ellipse bound (ATAP Thm 8.2), truncation by
   the neglected Chebyshev coefficients, the coefficients' rounding by Σ|Δc_k|2⁻ᵏ — max
   ``APPROX_UNITS`` (≤ 0.65u, dominated by the rounding of c₀), and (b) Horner's rounding
   without FMA, |p̂ − p| ≤ Σ_k γ_{2k+1}|c_k|2⁻ᵏ (Higham, Accuracy and Stability of Numerical
   Algorithms, 2nd ed., eq. (5.3)), relative max ``HORNER_UNITS`` (≤ 0.58u). Each bound is
   checked against the stored polynomial evaluated exactly at 1001 points per interval.
4. exp: numpy's ``np.exp`` (glibc's on x86-64 without AVX-512, numpy's own SIMD exp with it).
   Its relative error on [−708.3, 0] (normal results) measured against mpmath on 10⁶ points
   (``scripts/gen_erfcx_table.py --exp 1000000``; tests/test_erfc.py, slow): ≤ 0.500u (glibc
   documents ~0.51 ulp; numpy's AVX-512 exp ≤ 0.77 ulp per its authors); allowed: ``EXP_ERROR_UNITS`` = 2u (4× the measurement; the test
   fails on a machine whose exp is worse than 1u).
5. Three roundings: 1 − L/2, exp·(1 − L/2), the final product: 0.5u each.

Total, to first order (the products of the small terms are ≪ 0.01u; the sum is rounded up by
1 %, :func:`certified_bound_units`):
2 (exp) + 1.5 (three roundings) + 0.82 (argument) + 0.01 + APPROX (0.65) + HORNER (0.58)
≤ 5.6u relative, while erfc(z) is a normal double (z ≤ 26.55); beyond, the result is subnormal
and its error absolute, < 2⁻¹⁰⁷² ≈ 2e-323 (each rounding ≤ 2⁻¹⁰⁷⁵; exp's ≤ 1 subnormal ulp).
For Φ(−a) = ½erfc(z) (halving is exact where normal; < 3e-323 absolute where subnormal) the same; Φ(a) = 1 − ½erfc(z) relative to itself has one
more rounding: ≤ 6.1u; relative to the smaller side 1 − Φ(a) for 0 ≤ a ≤ 1 (Φ(a) ≤ 0.8414,
the case of a mixture's distribution function ≤ ½ holding a term with a small positive
argument): ≤ 5.6u + 0.5u·0.8414/0.1586 ≤ 8.3u. ``ERFC_ERROR_UNITS`` = 12 covers the three.

Measured against mpmath (tests/test_erfc.py; scripts and seeds there): erfc ≤ 2.72u over
1.0·10⁵ points of z ∈ [0, 27.3] (denser near 0 and at every interval end; subnormal results
within 5e-324); Φ ≤ 2.4u relative to itself on 2·10⁴ points of [−37.5, 37.5], ≤ 3.2u relative
to the smaller side on [0, 1] (libm's path: 3.2u there too). The allowance is > 3.7× the
largest.

Bitwise: every operation is elementwise (IEEE arithmetic, integer bit operations, a table
gather, ``exp``; blocks of ``_BLOCK`` points are independent), so a value does not depend on the array's length or its position in it
(numpy's SIMD loops and their tails: tests/test_erfc.py checks lengths 1, 7, 1000, 70000 and
offsets).

Cost (benchmarks/bench_erfc.py, CPU time, shared 2-core machine): ~60 µs a call up to a few
hundred points (≈ 45 numpy calls), ~35 ns a point at 32k points, against 110–250 ns a point
for the libm loop: equal at ~512 points (:data:`dpcalc._numerics._NDTR_LIBM_MAX`), 5× at 32k.
numpy's exp (~9 ns a point, glibc's) and the 9 table gathers of the Horner sum dominate.
"""

from __future__ import annotations

from dpcalc import _erfcx_table as _tab

__all__ = ["ERFC_ERROR_UNITS", "EXP_ERROR_UNITS", "erfc_abs_scaled", "certified_bound_units"]

#: certified relative error of :func:`erfc_abs_scaled` and of Φ from it (see the module
#: docstring), in units of u = 2⁻⁵²: what ``_pld_grid`` allows per value on grids that use it
ERFC_ERROR_UNITS = 12
#: relative error allowed for ``np.exp`` on [−708.3, 0] (measured ≤ ``_EXP_MEASURED_UNITS``)
EXP_ERROR_UNITS = 2.0
#: measured: np.exp against mpmath on 10⁶ points of [−708.3, 0] (scripts/gen_erfcx_table.py --exp)
_EXP_MEASURED_UNITS = 0.5
#: measured: erfc_abs_scaled against mpmath, 10⁵ points of z ∈ [0, 27.3] (tests/test_erfc.py)
_ERFC_MEASURED_UNITS = 2.75

#: the argument's relative error (≤ 2⁻⁵³ + 6.9e-17 ≤ 0.81u) times erfcx's condition number (< 1),
#: with a margin for the second-order term
_ARG_UNITS = 0.82
#: interval 0's local variable t = 16z − ½ is off by ≤ 2⁻⁵⁵: z by 2⁻⁵⁹, erfcx by ≤ (2/√π)·2⁻⁵⁹
_T0_UNITS = 0.01
#: 1/√2 as a double (its relative error 6.8e-17 = 0.31u enters the argument of erfcx only)
_SQRT_HALF = 0.7071067811865476
#: |x| beyond which erfc(|x|/√2) is 0 in double precision (e^{−a²/2} underflows from
#: a ≈ 38.6); arguments are clipped to it so that the splitting cannot overflow
_A_MAX = 38.9
#: z below which interval 0 (t = 16z − ½) is used
_Z0 = 1.0 / 16.0
#: bits >> 48 of z = 2^{e−1}(1 + f) is 16(e − 1 + 1023) + ⌊16f⌋; row 1 is z = 1/16 (e = −3)
_ROW_OFFSET = 16 * (_tab.E_MIN - 1 + 1023) - 1
_ROWS = 1 + (_tab.E_MAX - _tab.E_MIN + 1) * _tab.SUB
_LOW48 = (1 << 48) - 1
#: points per block: long enough to amortise the ~1 µs per numpy call, short enough that the
#: ~10 temporaries of a block (64 KiB each) stay in the L2 cache (measured: benchmarks/bench_erfc.py)
_BLOCK = 8192
_COLUMNS: list = []  # the table's columns c_k (numpy arrays), built on first use


def certified_bound_units() -> dict:
    """The module docstring's bound, in units of u, from its terms (first order; the products
    of the small terms, ≪ 0.01u, are covered by rounding the sum up by 1 %):

    * ``erfc``: :func:`erfc_abs_scaled` relative to erfc where that is a normal double;
    * ``phi``: Φ = ½erfc (exact) or 1 − ½erfc (one more rounding) relative to itself;
    * ``phi_small_side_near_half``: Φ(x), 0 ≤ x ≤ 1, relative to 1 − Φ(x) ≥ 0.1586.
    """
    erfc = 1.01 * (EXP_ERROR_UNITS + 3 * 0.5 + _ARG_UNITS + _T0_UNITS + _tab.APPROX_UNITS
                   + _tab.HORNER_UNITS)
    return {"erfc": erfc, "phi": erfc + 0.5,
            "phi_small_side_near_half": erfc + 0.5 * 0.8414 / 0.1586}


def _columns():
    if not _COLUMNS:
        import numpy as np

        t = np.array(_tab.ROWS, dtype=float)
        _COLUMNS.extend(np.ascontiguousarray(t[:, k]) for k in range(t.shape[1]))
    return _COLUMNS


def erfc_abs_scaled(x):
    """erfc(|x|/√2) elementwise, from numpy operations only, within ``ERFC_ERROR_UNITS``·u
    relative (absolute 2e-323 where the value is subnormal, |x| > 37.5; 0 from |x| ≈ 38.6).

    Args:
        x: array of floats, any shape (the sign is ignored).

    Returns:
        An array of the shape of ``x``, in [0, 1]; NaN where x is NaN.
    """
    import numpy as np

    x = np.asarray(x, dtype=float)
    flat = x.ravel()
    with np.errstate(under="ignore"):  # exp and the last product underflow for |x| > 37.5
        if flat.size <= _BLOCK:
            return _erfc_block(flat).reshape(x.shape)
        out = np.empty(flat.size)
        for k in range(0, flat.size, _BLOCK):
            out[k:k + _BLOCK] = _erfc_block(flat[k:k + _BLOCK])
    return out.reshape(x.shape)


def _erfc_block(x):
    """:func:`erfc_abs_scaled` on a 1-d array (blocks of ``_BLOCK`` points stay in cache)."""
    import numpy as np

    a = np.abs(x)
    np.minimum(a, _A_MAX, out=a)  # NaN stays NaN
    # e^{−a²/2} = exp(−hi/2)·(1 − lo/2), a² = hi + lo exactly (Dekker)
    ah = a * 134217729.0  # 2^27 + 1
    ah -= ah - a
    al = a - ah
    lo = ah * ah
    hi = a * a
    lo -= hi
    ah *= al
    ah *= 2.0
    lo += ah
    al *= al
    lo += al
    hi *= -0.5
    g = np.exp(hi, out=hi)
    lo *= -0.5
    lo += 1.0
    g *= lo
    # erfcx at z = fl(a/√2). Row and local variable from z's bits: z = 2^{e−1}(1 + f) with
    # f = (k + ½ + t)/16, k the top 4 bits of f: row 1 + 16(e − E_MIN) + k, t exact; below 1/16,
    # row 0 and t = 16z − ½
    z = a
    z *= _SQRT_HALF
    bits = z.view(np.int64)
    row = bits >> 48
    row -= _ROW_OFFSET
    np.clip(row, 0, _ROWS - 1, out=row)
    t = (bits & _LOW48).astype(float)
    t *= 2.0 ** -48
    t -= 0.5
    small = z < _Z0
    if small.any():
        t[small] = z[small] * 16.0 - 0.5
    cols = _columns()
    p = cols[-1].take(row, mode="clip")  # (row is in range; "clip" avoids take's buffering)
    for col in cols[-2::-1]:
        p *= t
        p += col.take(row, mode="clip")
    p *= g
    return p
