"""dpcalc._numerics: the one root finder, the one bounded minimiser, the round-up policy and
the scalar log_expm1 (references: scipy.optimize, which _numerics replaces on the CLI paths,
and mpmath)."""

from __future__ import annotations

import math
import subprocess
import sys

import mpmath
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcalc._numerics import (
    UNIT_ROUNDOFF,
    brentq,
    log_expm1,
    minimize_bounded,
    round_down,
    round_up,
)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(c=st.floats(-3, 3), k=st.floats(0.1, 10), left=st.floats(0.01, 5), right=st.floats(0.01, 5),
       kind=st.integers(0, 2), xtol=st.sampled_from([2e-12, 1e-15, 1e-7]))
def test_brentq_is_scipys_algorithm_float_for_float(c, k, left, right, kind, xtol):
    from scipy.optimize import brentq as scipy_brentq

    f = [lambda x: (x - c) ** 3, lambda x: math.tanh(k * (x - c)), lambda x: math.exp(x) - math.exp(c)][kind]
    a, b = c - left, c + right
    assert brentq(f, a, b, xtol=xtol, maxiter=500) == scipy_brentq(f, a, b, xtol=xtol, maxiter=500)


def test_brentq_errors():
    with pytest.raises(ValueError, match="different signs"):
        brentq(lambda x: x * x + 1, -1.0, 1.0)
    with pytest.raises(RuntimeError, match="did not converge"):
        brentq(lambda x: math.tanh(10 * (x - 0.3)), 0.0, 1.0, xtol=0.0, rtol=0.0, maxiter=3)


def test_minimize_bounded_matches_scipy():
    from scipy.optimize import minimize_scalar

    for f, lo, hi in ((lambda x: (x - 1.3) ** 2, 0.0, 4.0), (lambda x: math.cosh(x - 0.2) + 0.1 * x, -2.0, 3.0)):
        x, fx = minimize_bounded(f, lo, hi, xatol=1e-8)
        ref = minimize_scalar(f, bounds=(lo, hi), method="bounded", options={"xatol": 1e-8})
        assert x == pytest.approx(ref.x, abs=1e-7) and fx <= ref.fun + 1e-15


@pytest.mark.parametrize("x", [1e-300, 1e-12, 0.5, 1.0, 1.0000001, 3.0, 700.0, 1e5])
def test_log_expm1_scalar_and_array_paths_agree_with_mpmath(x):
    import numpy as np

    with mpmath.workdps(50):
        exact = float(mpmath.log(mpmath.expm1(mpmath.mpf(x))))
    assert log_expm1(x) == pytest.approx(exact, rel=4 * UNIT_ROUNDOFF, abs=1e-300)
    assert float(log_expm1(np.array([x]))[0]) == pytest.approx(exact, rel=4 * UNIT_ROUNDOFF, abs=1e-300)
    assert log_expm1(0.0) == -math.inf


def test_round_up_and_down_are_exact_powers_of_two_steps():
    assert round_up(1.0, 16) == 1.0 + 2.0 ** -48 and round_down(1.0, 4) == 1.0 - 2.0 ** -50
    assert round_up(0.0) == 0.0 and round_up(math.inf) == math.inf
    assert round_up(3.0, 4504) >= 3.0 * (1 + 1e-12)


def test_importing_numerics_loads_neither_numpy_nor_scipy():
    code = "import sys, dpcalc._numerics; print('numpy' in sys.modules, 'scipy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_sigma_and_gaussian_commands_do_not_import_scipy_optimize():
    code = ("import sys\nfrom dpcalc.cli import cli\n"
            "cli.main(['sigma', '--eps', '3', '--delta', '1e-5', '--steps', '100', '-q', '0.01', '--json'],"
            " standalone_mode=False)\n"
            "cli.main(['gaussian', '--eps', '1', '--delta', '1e-5', '--json'], standalone_mode=False)\n"
            "print('scipy.optimize' in sys.modules, file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stderr.strip().splitlines()[-1] == "False"
