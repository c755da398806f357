r"""Online generation of the correlated noise of a matrix-factorization mechanism.

A trainer that adds ``w_t`` to the sum of clipped gradients of step t, with ``w = C⁻¹ z`` and
z ~ N(0, s²) per coordinate, makes the running sums of its noisy gradients ``A x + B z``
(``B = A C⁻¹``): the mechanism of :mod:`dpcalc.mechanisms.correlated` (Denisov et al. 2022
§4; Choquette-Choo et al. NeurIPS 2023 §5; Dvijotham et al. 2024 §3). :class:`NoiseStream`
yields ``w_1, w_2, …`` one step at a time, holding a few arrays of the parameters' shape:

* banded Toeplitz C (b bands): ``w_t = (z_t − Σ_{j=1}^{b−1} c_j w_{t−j})/c_0`` — b − 1 arrays;
* BLT: C⁻¹ = Q/P is a rational filter with as many states as buffers (direct form II
  transposed) — one array per buffer;
* the tree (dyadic decoder, restarted every epoch): the noisy prefix sum of step t adds the
  fresh noise of the one new node it uses (the node of size 2^{h₀} ending at t, h₀ the lowest
  set bit of t) and drops the h₀ smaller nodes of step t − 1 — at most ⌊log₂ m⌋ + 1 arrays.
  Nodes the dyadic decoder never uses are never drawn (post-processing of the full tree).

The square root and a dense C need the whole history (O(n) arrays) and are refused, as is
Honaker's decoder (it re-weights past nodes). This is the generator ``dpcalc train --noise
correlated`` uses (:mod:`dpcalc.train.correlated`), saving :meth:`NoiseStream.state` in its checkpoints.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from dpcalc import _validate as v
from dpcalc.errors import ParameterError
from dpcalc.mechanisms.correlated.error import blt_polynomials
from dpcalc.mechanisms.correlated.strategies import ToeplitzStrategy, TreeStrategy

__all__ = ["NoiseStream", "MAX_STREAM_BUFFERS"]

#: the most arrays of the parameters' shape a stream may hold
MAX_STREAM_BUFFERS = 4096


class NoiseStream:
    """The correlated noise w_t = s·(C⁻¹ z)_t, one step at a time.

    Args:
        strategy: a banded :class:`ToeplitzStrategy` (at most :data:`MAX_STREAM_BUFFERS` + 1
            bands), a BLT, the identity, or a :class:`TreeStrategy` without Honaker.
        shape: the shape of one step's noise (the parameters').
        noise_std: s > 0 (σ·Δ·clip norm).
        normal: draws standard normal noise of a shape (default: numpy's PCG64 seeded by
            ``seed``; a trainer passes its own cryptographically secure sampler).
        seed: seed of the default sampler.

    Attributes:
        buffers: the number of arrays of ``shape`` the stream holds (its memory).

    Raises:
        ParameterError: a strategy that cannot be generated online, s ≤ 0.
    """

    def __init__(self, strategy, *, shape, noise_std: float,
                 normal: Callable[[tuple], np.ndarray] | None = None, seed: int | None = None) -> None:
        self.shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(d) for d in shape)
        self.noise_std = v.positive("noise_std", noise_std)
        if normal is None:
            rng = np.random.default_rng(seed)
            normal = rng.standard_normal
        self._normal = normal
        self._t = 0
        if isinstance(strategy, TreeStrategy):
            if strategy.honaker:
                raise ParameterError("strategy", "tree (the dyadic decoder) for online noise", "tree-honaker",
                                     message="strategy tree-honaker re-weights past nodes and is not "
                                             "generated online; use tree")
            self._tree_steps = strategy.tree_steps
            self._levels: dict[int, np.ndarray] = {}
            self.buffers = int(self._tree_steps).bit_length()
            self._step = self._tree_step
            return
        if not isinstance(strategy, ToeplitzStrategy):
            raise ParameterError("strategy", "banded:B, blt, identity or tree for online noise",
                                 getattr(strategy, "name", "dense"),
                                 message="strategy dense needs the whole history; online noise takes "
                                         "banded:B, blt, identity or tree")
        poly = blt_polynomials(strategy)
        if poly is not None:
            p, q = poly
            num, den = q, p
        else:
            if strategy.bands > MAX_STREAM_BUFFERS + 1:
                raise ParameterError("strategy", f"at most {MAX_STREAM_BUFFERS + 1} bands for online noise",
                                     strategy.name, message=(
                                         f"strategy {strategy.name} has {strategy.bands} non-zero "
                                         f"coefficients: online noise holds one array per band (at most "
                                         f"{MAX_STREAM_BUFFERS + 1}); use banded:B or blt"))
            num, den = np.ones(1), np.array(strategy.coefs[:strategy.bands], dtype=np.float64)
        den0 = den[0]
        self._num = np.asarray(num, dtype=np.float64) / den0
        self._den = np.asarray(den, dtype=np.float64) / den0
        order = max(self._num.size, self._den.size) - 1
        self._num = np.concatenate([self._num, np.zeros(order + 1 - self._num.size)])
        self._den = np.concatenate([self._den, np.zeros(order + 1 - self._den.size)])
        self._state = [np.zeros(self.shape) for _ in range(order)]
        self.buffers = order
        self._step = self._filter_step

    def __call__(self) -> np.ndarray:
        """The next step's noise w_t (an array of ``shape``)."""
        self._t += 1
        return self._step()

    def state(self) -> dict:
        """The stream's state (the step count and the arrays it holds; copies), for a checkpoint.
        The sampler behind ``normal`` keeps its own state."""
        if self._step == self._tree_step:
            return {"t": self._t, "levels": {h: a.copy() for h, a in self._levels.items()}}
        return {"t": self._t, "state": [a.copy() for a in self._state]}

    def restore(self, state: dict) -> None:
        """Continue from :meth:`state` of a stream of the same strategy and shape.

        Raises:
            ParameterError: a state of another kind of stream or of other shapes.
        """
        try:
            t = int(state["t"])
            if self._step == self._tree_step:
                levels = {int(h): np.asarray(a, dtype=np.float64) for h, a in state["levels"].items()}
                ok = all(a.shape == self.shape for a in levels.values()) and len(levels) <= self.buffers
            else:
                arrays = [np.asarray(a, dtype=np.float64) for a in state["state"]]
                ok = len(arrays) == len(self._state) and all(a.shape == self.shape for a in arrays)
        except (KeyError, TypeError, ValueError, AttributeError):
            ok = False
        if not ok or t < 0:
            raise ParameterError("state", "the state of a stream of the same strategy and shape", "other",
                                 message="noise stream state does not match this strategy and shape")
        self._t = t
        if self._step == self._tree_step:
            self._levels = levels
        else:
            self._state = arrays

    def _draw(self) -> np.ndarray:
        return self.noise_std * np.asarray(self._normal(self.shape), dtype=np.float64)

    def _filter_step(self) -> np.ndarray:
        # direct form II transposed of w = (num/den)(z): y = b0·x + s0; s_i = b_{i+1}·x − a_{i+1}·y + s_{i+1}
        x = self._draw()
        b, a, s = self._num, self._den, self._state
        y = b[0] * x + (s[0] if s else 0.0)
        for i in range(len(s)):
            nxt = s[i + 1] if i + 1 < len(s) else 0.0
            s[i] = b[i + 1] * x - a[i + 1] * y + nxt
        return y

    def _tree_step(self) -> np.ndarray:
        t = (self._t - 1) % self._tree_steps + 1  # step within the current tree
        if t == 1:
            self._levels = {}
        low = (t & -t).bit_length() - 1  # the new node has size 2^low and ends at t
        fresh = self._draw()
        w = fresh.copy()
        for h in range(low):  # the nodes of step t − 1 below the new one leave the sum
            w -= self._levels.pop(h)
        self._levels[low] = fresh
        return w
