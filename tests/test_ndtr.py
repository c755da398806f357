"""dpcalc._numerics.ndtr (Φ without scipy.special: libm's erfc on small arrays, dpcalc._erfc's
vectorised erfc on large ones) against mpmath, and pld's FFT length helper against scipy.fft
(issue 17: start-up of the quick-start pld `sigma`; issue 31: speed of large grids)."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

from dpcalc import _numerics
from dpcalc._numerics import UNIT_ROUNDOFF as U
from dpcalc._numerics import ndtr, ndtr_pair
from dpcalc.accounting._pld_compose import _next_fast_len

mpmath.mp.dps = 40


def _phi(x: float) -> float:
    """Φ(x) from mpmath at 40 digits (the reference), rounded to a double."""
    return float(mpmath.ncdf(mpmath.mpf(float(x))))


def _points(lo: float, hi: float, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.uniform(lo, hi, n), np.linspace(lo, hi, 101)])


def test_lower_tail_relative_error_within_4u():
    # the side pld's grids use for small masses: Φ(x), x < 0, down to the last normal double;
    # _pld_grid allows 4u per value (e_edge = 4u·min(le, gt))
    xs = _points(-37.5, 0.0, 1500, 1)
    got = ndtr(xs)
    ref = np.array([_phi(x) for x in xs])
    rel = np.abs(got - ref) / ref
    assert rel.max() <= 4 * U, rel.max() / U


def test_near_half_error_relative_to_the_small_side():
    # 0 ≤ x < 1: Φ ∈ [½, 0.84]; a mixture CDF ≤ ½ can hold a term with a small positive
    # argument, so the error is measured against 1 − Φ (the smaller side)
    xs = _points(0.0, 1.0, 500, 2)
    got = ndtr(xs)
    ref = np.array([_phi(x) for x in xs])
    small = np.array([_phi(-x) for x in xs])
    assert (np.abs(got - ref) / small).max() <= 4 * U


def test_upper_side_relative_error():
    xs = _points(1.0, 37.5, 500, 3)
    got = ndtr(xs)
    ref = np.array([_phi(x) for x in xs])
    assert (np.abs(got - ref) / ref).max() <= 2 * U


def test_argument_rounding_is_corrected():
    # Φ(−20) with the argument −20/√2 rounded costs ~z²u = 200u in erfc (scipy.special.ndtr shows
    # it); corrected here to a few u. Reference: mpmath.
    x = np.array([-20.0, -12.345, -7.0, -5.0])
    ref = np.array([_phi(v) for v in x])
    assert np.all(np.abs(ndtr(x) - ref) / ref <= 4 * U)


def test_special_values_and_shape():
    x = np.array([[np.nan, np.inf], [-np.inf, 0.0], [-0.0, 1e308], [-1e308, -40.0]])
    got = ndtr(x)
    assert got.shape == x.shape
    assert math.isnan(got[0, 0])
    assert got[0, 1] == 1.0 and got[1, 0] == 0.0 and got[1, 1] == 0.5 and got[2, 0] == 0.5
    assert got[2, 1] == 1.0 and got[3, 0] == 0.0
    assert got[3, 1] == 0.0  # Φ(−40) = 3.66e-350 (mpmath) is below the smallest subnormal
    assert ndtr(np.float64(-1.0)).shape == ()
    assert abs(float(ndtr(-1.0)) - _phi(-1.0)) <= 2 * U * _phi(-1.0)


def test_monotone():
    xs = np.sort(np.random.default_rng(4).uniform(-38, 38, 5000))
    assert np.all(np.diff(ndtr(xs)) >= 0)


@pytest.mark.parametrize("n", [1, 7, 1000, _numerics._NDTR_LIBM_MAX + 3])
def test_pair_is_the_two_calls_bitwise(n):
    # pld's sampled Gaussian takes Φ(±y) from one erfc per point: the same floats as two calls
    rng = np.random.default_rng(n)
    x = np.concatenate([rng.uniform(-40, 40, n), [0.0, -0.0, np.inf, -np.inf, np.nan]])
    lo, hi = ndtr_pair(x)
    assert np.array_equal(lo, ndtr(x), equal_nan=True)
    assert np.array_equal(hi, ndtr(-x), equal_nan=True)


def test_large_arrays_use_the_vectorised_erfc_without_scipy():
    """Above _NDTR_LIBM_MAX points Φ comes from dpcalc._erfc (tests/test_erfc.py: certified
    within NDTR_VECTOR_ERROR_UNITS), not scipy.special.ndtr (~10³u near x = −37; 0.2 s import)."""
    from dpcalc._erfc import erfc_abs_scaled

    xs = np.linspace(-30, 30, _numerics._NDTR_LIBM_MAX + 1)
    e = erfc_abs_scaled(xs)
    assert np.array_equal(ndtr(xs), np.where(xs < 0, 0.5 * e, 1.0 - 0.5 * e))
    assert np.array_equal(ndtr(xs[:-1]), ndtr(xs[:-1], False))
    assert 8 <= _numerics.NDTR_VECTOR_ERROR_UNITS <= 16


@pytest.mark.parametrize("vector", [False, True])
def test_lower_tail_both_paths(vector):
    # the 4u of the libm path and half the vector path's allowance (its measured margin)
    xs = _points(-37.5, 0.0, 1500, 8)
    got = ndtr(xs, vector)
    ref = np.array([_phi(x) for x in xs])
    rel = np.abs(got - ref) / ref
    limit = _numerics.NDTR_VECTOR_ERROR_UNITS / 2 if vector else 4
    assert rel.max() <= limit * U, rel.max() / U


def test_next_fast_len_matches_scipy():
    fft = pytest.importorskip("scipy.fft")
    rng = np.random.default_rng(5)
    for n in [*range(1, 3000), *rng.integers(3000, 2 ** 26, 300).tolist()]:
        assert _next_fast_len(n) == fft.next_fast_len(int(n), real=True), n
