"""Correlated-noise (matrix-factorization) mechanisms: DP-FTRL tree aggregation, the Toeplitz
square root, banded Toeplitz, BLT and dense strategies — sensitivity under multi-participation
and prefix-sum error. Privacy and calibration are in :mod:`dpcalc.accounting.correlated`."""

from dpcalc.mechanisms.correlated.error import PrefixError, prefix_error, toeplitz_decoder
from dpcalc.mechanisms.correlated.sensitivity import Sensitivity, pattern_norm, sensitivity
from dpcalc.mechanisms.correlated.strategies import (
    DenseStrategy,
    Participation,
    ToeplitzStrategy,
    TreeStrategy,
    banded_sqrt_strategy,
    banded_strategy,
    blt_strategy,
    identity_strategy,
    sqrt_coefficients,
    sqrt_strategy,
)
from dpcalc.mechanisms.correlated.stream import NoiseStream

__all__ = [
    "DenseStrategy", "Participation", "ToeplitzStrategy", "TreeStrategy", "banded_sqrt_strategy",
    "banded_strategy", "blt_strategy", "identity_strategy", "sqrt_coefficients", "sqrt_strategy",
    "Sensitivity", "sensitivity", "pattern_norm", "PrefixError", "prefix_error", "toeplitz_decoder",
    "NoiseStream",
]
