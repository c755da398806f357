"""Published deployment parameters of local DP reproduced with dpcalc (issue 27, "Must show").

Only numbers read in a stored copy of a public source are used; the quotes are in
docs/references.md §10. RAPPOR's example and the emoji setting are in tests/mechanisms/test_ldp.py.

* [registry] OpenDP Deployments Registry, http://registry.opendp.org/deployments-registry, row
  "AutoPlay Intent by Apple" (2017, pure DP, local, ε 8.0), quoting Apple's paper: "For this use
  case, we set the parameters for CMS to be m = 1024, k = 65,536, and ε = 8." (Apple
  Differential Privacy Team, "Learning with privacy at scale", Apple ML Journal 1(8), 2017.)
* [ted] D. Desfontaines, "A list of real-world uses of differential privacy",
  https://desfontain.es/privacy/real-world-differential-privacy.html, section Apple: ε-DP "with a
  privacy unit of user-day" — QuickType suggestions ε = 16, Emoji suggestions ε = 4, Lookup
  hints ε = 8, Health Type Usage ε = 2; "The documented privacy unit is each data collection
  event. The devices send a limited number of such events per day: I translated all guarantees
  to use a privacy unit of user-day."
* [overview] Apple, "Differential Privacy Overview" (2017),
  https://www.apple.com/privacy/docs/Differential_Privacy_Overview.pdf: ε per donation and
  donations per day. The PDF itself was not in the stored corpus; the figures used are those
  quoted from it in stored public notes ("For emoji, Apple uses a privacy budget with epsilon of
  4, and submits one donation per day."; QuickType ε = 8, two donations per day; Lookup Hints
  ε = 4, two per day; Health Type Usage ε = 2, one per day). Secondary: see the report.
* [tang] Tang, Korolova, Bai, Wang, Wang 2017, "Privacy loss in Apple's implementation of
  differential privacy on MacOS 10.12", arXiv:1709.02753, abstract: the privacy loss "per each
  datum submitted to its servers is 1 or 2", the overall loss "as high as 16 per day for the
  four initially announced applications", and "a possible privacy loss of 16 times the number of
  days since user opt-in".
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

from dpcalc.composition.basic import basic_composition
from dpcalc.mechanisms.ldp import make_rng
from dpcalc.mechanisms.ldp.cms import APPLE_EMOJI, CountMeanSketch

#: [registry] Apple 2017, Safari auto-play intent: CMS, m = 1024, k (hash functions) = 65,536, ε = 8
APPLE_AUTOPLAY = {"width": 1024, "hashes": 65536, "epsilon": 8.0}
GRID = 2**53  # the sampler's probability grid (dpcalc.mechanisms.ldp._core.GRID)

#: [overview] ε per donation, donations per day; [ted] ε per user-day
PER_DAY = {
    "emoji": (4.0, 1, 4.0),
    "quicktype": (8.0, 2, 16.0),
    "lookup_hints": (4.0, 2, 8.0),
    "health_type_usage": (2.0, 1, 2.0),
}


def _cms(params: dict, k: int = 1000) -> CountMeanSketch:
    # the domain size does not enter ε, the flip probability or the report size
    return CountMeanSketch(params["epsilon"], k, width=params["width"], hashes=params["hashes"])


def test_apple_autoplay_cms_parameters():
    """[registry] m = 1024, k = 65,536, ε = 8: each of the 1,024 bits is flipped with probability
    1/(1 + e^{ε/2}) = 1/(1 + e⁴) ≈ 0.01799 (Apple 2017, Algorithm 1), rounded towards more noise;
    a report is the hash index (log₂ 65,536 = 16 bits) and the 1,024-bit vector."""
    o = _cms(APPLE_AUTOPLAY)
    phi = o._tflip / GRID
    assert phi == pytest.approx(1 / (1 + math.exp(4)), rel=1e-15)
    assert phi >= 1 / (1 + math.exp(4))
    assert f"{phi:.5f}" == "0.01799"
    assert o.bits == 1024 + 16
    assert (o.m, o.kh) == (1024, 65536)


@pytest.mark.parametrize("params", [APPLE_EMOJI, APPLE_AUTOPLAY], ids=["emoji", "autoplay"])
def test_cms_report_attains_its_epsilon(params):
    """Achievable lower bound: for inputs x, x′ hashed by the (public, input-independent) row j to
    a ≠ b, the report with ṽ[a] = +1, ṽ[b] = −1 (all else equal) has likelihood ratio
    ((1 − φ)/φ)² — the sampler's exact φ, computed in 60-digit arithmetic: ≤ e^ε (never an
    under-reported ε) and ≥ e^ε·(1 − 10⁻¹²) (the stated ε is the real one)."""
    o = _cms(params)
    with mpmath.workdps(60):
        phi = mpmath.mpf(o._tflip) / GRID
        ratio = ((1 - phi) / phi) ** 2
        bound = mpmath.e ** params["epsilon"]
        assert ratio <= bound
        assert ratio >= bound * (1 - mpmath.mpf("1e-12"))


def test_apple_autoplay_flip_rate_by_simulation():
    """The implemented CMS sampler at the auto-play parameters: over 2,000 reports (2,048,000
    bits) the share of bits differing from the noiseless one-hot vector is inside the 99.9 %
    binomial interval around 1/(1 + e⁴), and every report is 16 + 1,024 bits of hash index and
    vector."""
    o = _cms(APPLE_AUTOPLAY)
    rng = make_rng(27)
    x = rng.integers(0, o.k, size=2000)
    r = o.randomize(x, rng)
    assert r.shape == (2000, 1 + 1024) and r[:, 0].max() < 2**16
    clean = np.zeros((2000, 1024), dtype=np.int64)
    clean[np.arange(2000), o.hash(r[:, 0], x)] = 1
    n_bits = clean.size
    flips = int((r[:, 1:] != clean).sum())
    p = 1 / (1 + math.exp(4))
    half = 3.2905 * math.sqrt(n_bits * p * (1 - p))  # 0.9995 normal quantile
    assert abs(flips - n_bits * p) <= half, (flips, n_bits * p, half)


@pytest.mark.parametrize("use_case", sorted(PER_DAY))
def test_apple_user_day_epsilon_is_basic_composition_of_donations(use_case):
    """[ted]'s user-day ε = [overview]'s ε per donation × donations per day: basic composition
    (Dwork & Roth 2014, Thm 3.16) of the day's ε-LDP reports, which is also exact for pure ε-DP
    (two reports that each attain ε multiply their worst-case likelihood ratios)."""
    eps, count, per_day = PER_DAY[use_case]
    total, delta = basic_composition([eps], [0.0], [count], decimal=True)
    assert (total, delta) == (per_day, 0.0)


def test_tang_daily_loss_over_days():
    """[tang]: ε per datum 1 or 2, at most 16 per day for the four applications, the budget
    renewed daily — "16 times the number of days since user opt-in" is basic composition of
    the daily 16 over the days; and at ε ≤ 2 per datum, 16 per day takes at least 8 data."""
    for days in (1, 7, 30, 365):
        assert basic_composition([16.0], [0.0], [days], decimal=True) == (16.0 * days, 0.0)
    assert basic_composition([2.0], [0.0], [8], decimal=True)[0] == 16.0
    assert basic_composition([2.0], [0.0], [7], decimal=True)[0] < 16.0
