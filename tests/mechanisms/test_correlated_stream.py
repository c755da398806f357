"""Online correlated noise (dpcalc.mechanisms.correlated.stream): the stream w equals C⁻¹z
(dense solve) for the same normal draws, its running sums equal the decoder's B·z, and the
memory is the stated number of arrays."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.linalg import toeplitz

from dpcalc.errors import ParameterError
from dpcalc.mechanisms.correlated import (
    TreeStrategy,
    banded_sqrt_strategy,
    banded_strategy,
    blt_strategy,
    identity_strategy,
    sqrt_strategy,
)
from dpcalc.mechanisms.correlated.stream import NoiseStream


def _c(s) -> np.ndarray:
    col = np.zeros(s.steps)
    m = min(s.coefs.size, s.steps)
    col[:m] = s.coefs[:m]
    return np.tril(toeplitz(col))


@pytest.mark.parametrize("make, buffers", [
    (lambda n: banded_sqrt_strategy(n, 6), 5),
    (lambda n: banded_strategy(n, [2.0, -0.7, 0.3]), 2),
    (lambda n: blt_strategy(n, decay=[0.9, 0.4], scale=[0.25, 0.1]), 2),
    (lambda n: identity_strategy(n), 0),
])
def test_stream_is_c_inverse_z(make, buffers):
    n, shape, s = 50, (3, 2), 1.7
    strat = make(n)
    stream = NoiseStream(strat, shape=shape, noise_std=s, seed=5)
    assert stream.buffers == buffers
    w = np.stack([stream() for _ in range(n)]).reshape(n, -1)
    z = s * np.random.default_rng(5).standard_normal((n, *shape)).reshape(n, -1)
    np.testing.assert_allclose(w, np.linalg.solve(_c(strat), z), rtol=1e-9, atol=1e-12)
    # the trainer's running sums of noise are the decoder's B·z = A C⁻¹ z
    np.testing.assert_allclose(np.cumsum(w, axis=0), np.tril(np.ones((n, n))) @ np.linalg.solve(_c(strat), z),
                               rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("n, restarts", [(37, 1), (48, 3), (64, 1)])
def test_tree_stream_prefix_sums_are_dyadic_node_sums(n, restarts):
    stream = NoiseStream(TreeStrategy(n, restarts=restarts), shape=4, noise_std=1.0, seed=2)
    m = n // restarts
    assert stream.buffers == m.bit_length()
    w = np.stack([stream() for _ in range(n)])
    z = np.random.default_rng(2).standard_normal((n, 4))  # one new node per step, drawn in order
    ref = np.zeros((n, 4))
    for e in range(restarts):
        for t in range(1, m + 1):
            total = np.zeros(4)
            end = 0
            for h in range(t.bit_length() - 1, -1, -1):  # dyadic decomposition of t
                if t & (1 << h):
                    end += 1 << h
                    total += z[e * m + end - 1]  # the node ending at `end` was drawn at step `end`
            completed = sum((ref[(f + 1) * m - 1] - (ref[f * m - 1] if f else 0)) for f in range(e)) if e else 0
            ref[e * m + t - 1] = completed + total
    np.testing.assert_allclose(np.cumsum(w, axis=0), ref, atol=1e-12)


def test_stream_refuses_history_strategies():
    with pytest.raises(ParameterError, match="tree-honaker"):
        NoiseStream(TreeStrategy(8, honaker=True), shape=2, noise_std=1.0)
    with pytest.raises(ParameterError, match="non-zero coefficients"):
        NoiseStream(sqrt_strategy(5000), shape=2, noise_std=1.0)
    with pytest.raises(ParameterError, match="noise_std"):
        NoiseStream(identity_strategy(5), shape=2, noise_std=0.0)
