"""Cross-checks against DeepMind's jax_privacy 2.0 ``matrix_factorization`` (float64): banded,
Toeplitz, BLT and dense sensitivity under b-min-separation and the per-prefix squared error,
on 12 settings (7 by default, the 5 whose jax reference materialises C with ``-m slow``). jax_privacy is a peer in the ``bench`` extra; without it the module is skipped.
"""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = pytest.importorskip("jax.numpy")
mf = pytest.importorskip("jax_privacy.matrix_factorization")
from jax_privacy.matrix_factorization import buffered_toeplitz as jbt  # noqa: E402
from jax_privacy.matrix_factorization import dense as jdense  # noqa: E402
from jax_privacy.matrix_factorization import sensitivity as jsens  # noqa: E402
from jax_privacy.matrix_factorization import toeplitz as jtoe  # noqa: E402

from dpcalc.mechanisms.correlated import (  # noqa: E402
    DenseStrategy,
    Participation,
    banded_sqrt_strategy,
    banded_strategy,
    blt_strategy,
    prefix_error,
    sensitivity,
    sqrt_strategy,
)
from dpcalc.mechanisms.correlated.optimize import optimize_banded  # noqa: E402


def _dense(s) -> np.ndarray:
    n = s.steps
    col = np.zeros(n)
    m = min(n, s.coefs.size)
    col[:m] = s.coefs[:m]
    return np.asarray(jtoe.materialize_lower_triangular(jnp.asarray(col)))


def _blt(decay, scale):
    return jbt.BufferedToeplitz.build(buf_decay=jnp.asarray(decay), output_scale=jnp.asarray(scale))


# (name, strategy maker, n, k, b, jax reference of Δ², "exact" or "bound")
SETTINGS = [
    ("sqrt k=5", lambda: sqrt_strategy(500), 500, 5, 100,
     lambda s, k, b: jtoe.minsep_sensitivity_squared(jnp.asarray(s.coefs), b, k), "exact"),
    ("sqrt k=10 b=50", lambda: sqrt_strategy(1000), 1000, 10, 50,
     lambda s, k, b: jtoe.minsep_sensitivity_squared(jnp.asarray(s.coefs), b, k), "exact"),
    ("sqrt single", lambda: sqrt_strategy(777), 777, 1, 777,
     lambda s, k, b: jtoe.sensitivity_squared(jnp.asarray(s.coefs)), "exact"),
    ("banded 8, b=100", lambda: banded_sqrt_strategy(400, 8), 400, 4, 100,
     lambda s, k, b: jsens.get_sensitivity_banded(jnp.asarray(_dense(s)), b, k) ** 2, "exact"),
    ("banded 50, b=100", lambda: banded_sqrt_strategy(300, 50), 300, 3, 100,
     lambda s, k, b: jsens.get_sensitivity_banded(jnp.asarray(_dense(s)), b, k) ** 2, "exact"),
    ("banded 20 > b=10", lambda: banded_sqrt_strategy(500, 20), 500, 5, 10,
     lambda s, k, b: jtoe.minsep_sensitivity_squared(jnp.asarray(s.coefs), b, k, n=500), "exact"),
    ("blt 2 buffers", lambda: blt_strategy(800, decay=[0.9, 0.5], scale=[0.2, 0.1]), 800, 4, 200,
     lambda s, k, b: jtoe.minsep_sensitivity_squared(jnp.asarray(s.coefs), b, k), "exact"),
    ("blt single", lambda: blt_strategy(1000, decay=[0.99, 0.7], scale=[0.05, 0.2]), 1000, 1, 1000,
     lambda s, k, b: jbt.sensitivity_squared(_blt([0.99, 0.7], [0.05, 0.2]), 1000), "exact"),
    ("optimized banded 16", lambda: optimize_banded(Participation(400, 4), 16), 400, 4, 100,
     lambda s, k, b: jsens.get_sensitivity_banded(jnp.asarray(_dense(s)), b, k) ** 2, "exact"),
    ("signed banded 3 > b=2", lambda: banded_strategy(120, [1.0, -0.3, 0.2]), 120, 5, 2,
     lambda s, k, b: jsens.get_min_sep_sensitivity_upper_bound(jnp.asarray(_dense(s)), b, k) ** 2, "bound"),
    ("blt b=20", lambda: blt_strategy(400, decay=[0.95], scale=[0.3]), 400, 8, 20,
     lambda s, k, b: jtoe.minsep_sensitivity_squared(jnp.asarray(s.coefs), b, k), "exact"),
    ("dense random", lambda: DenseStrategy(np.tril(np.random.default_rng(3).normal(size=(100, 100)))
                                           + 4 * np.eye(100)), 100, 4, 20,
     lambda s, k, b: jsens.get_min_sep_sensitivity_upper_bound(jnp.asarray(s.matrix), b, k) ** 2, "bound"),
]


#: the settings whose jax reference works on the dense n×n C: 10–15 s each in jax (per-op
#: dispatch on 2 shared cores), so behind the slow marker; the Toeplitz ones run by default
_SLOW = {"banded 8, b=100", "banded 50, b=100", "optimized banded 16", "signed banded 3 > b=2", "dense random"}
PARAMS = [pytest.param(*s, id=s[0], marks=[pytest.mark.slow] if s[0] in _SLOW else []) for s in SETTINGS]


@pytest.mark.parametrize("name, make, n, k, b, ref, kind", PARAMS)
def test_sensitivity_against_jax_privacy(name, make, n, k, b, ref, kind):
    s = make()
    res = sensitivity(s, Participation(n, k, b))
    theirs = float(np.sqrt(float(ref(s, k, b))))
    if kind == "exact":
        assert res.exact
        assert res.value == pytest.approx(theirs, rel=1e-10)
        assert res.value >= theirs * (1 - 1e-15)
    else:  # both upper bounds: ours is the smaller of Alg. 4 and the triangle inequality
        assert res.achieved <= res.value <= theirs * (1 + 1e-10)


@pytest.mark.parametrize("name, make, n, k, b, ref, kind", PARAMS)
def test_prefix_error_against_jax_privacy(name, make, n, k, b, ref, kind):
    s = make()
    ours = prefix_error(s).per_step
    if isinstance(s, DenseStrategy):
        theirs = np.asarray(jdense.per_query_error(strategy_matrix=jnp.asarray(s.matrix)))
    else:
        theirs = np.asarray(jtoe.per_query_error(strategy_coef=jnp.asarray(s.coefs), n=n))
    np.testing.assert_allclose(ours, theirs, rtol=1e-9)


def test_blt_coefficients_match_jax_privacy():
    ours = blt_strategy(300, decay=[0.9, 0.5, 0.1], scale=[0.2, 0.1, 0.05]).coefs
    theirs = np.asarray(_blt([0.9, 0.5, 0.1], [0.2, 0.1, 0.05]).toeplitz_coefs(300))
    np.testing.assert_allclose(ours, theirs, rtol=1e-14)


@pytest.mark.slow
def test_optimized_banded_matches_jax_privacy_optimum():
    # jax_privacy optimize_banded_toeplitz minimises the same single-participation objective
    # (Δ²·mean error; ~15 s in jax on 2 shared cores)
    n, bands = 1000, 8
    p = Participation(n, 1)
    ours = optimize_banded(p, bands)
    theirs = np.asarray(jtoe.optimize_banded_toeplitz(n=n, bands=bands))

    def loss(c):
        s = banded_strategy(n, c)
        return sensitivity(s, p).value ** 2 * prefix_error(s).total

    assert loss(ours.coefs) <= loss(theirs) * (1 + 1e-6)
