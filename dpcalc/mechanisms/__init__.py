"""Mechanism calculators: noise scale for a privacy target, the accuracy it buys,
the other way round, and exact-sampler release of a noisy value.

* :mod:`~dpcalc.mechanisms.laplace` — Laplace mechanism (Dwork & Roth 2014 Thm 3.6, 3.8).
* :mod:`~dpcalc.mechanisms.gaussian` — Gaussian mechanism, classical (DR14 Thm A.1) and
  analytic (Balle & Wang 2018 Thm 8); the exact (ε, δ) curve of μ-GDP
  (:func:`~dpcalc.mechanisms.gaussian.gaussian_delta`,
  :func:`~dpcalc.mechanisms.gaussian.gaussian_epsilon`).
* :mod:`~dpcalc.mechanisms.exponential` — exponential mechanism (McSherry & Talwar 2007).
* :mod:`~dpcalc.mechanisms.randomized_response` — binary and k-ary randomized response.
* :mod:`~dpcalc.mechanisms.conversions` — group privacy, amplification by Poisson
  subsampling, pure DP → zCDP → (ε, δ).
* :mod:`~dpcalc.mechanisms.discrete` — exact discrete Laplace / discrete Gaussian
  samplers (Canonne, Kamath, Steinke 2020) and the safe release of a value.

Importing this package is cheap: scipy is imported inside the functions that need it.
"""

from __future__ import annotations

from dpcalc.results import MechanismResult

__all__ = ["MechanismResult"]
