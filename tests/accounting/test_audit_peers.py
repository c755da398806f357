"""Cross-checks against peer accountants (optional: skipped when the peers are absent).

A dpcalc certified ε below a peer's certified LOWER bound would be a privacy bug; a dpcalc
lower bound above a peer's certified UPPER bound would be a bracket bug. Peers are test and
benchmark dependencies only (the ``bench`` extra; docs/design.md §7): prv_accountant (Gopi,
Lee, Wutschitz 2021: returns lower, estimate, upper) and dp_accounting's PLD with the
pessimistic (connect-the-dots) estimate (Doroshenko et al. 2022), an upper bound. Small
tolerance for the peers' own numerics.
"""

from __future__ import annotations

import pytest

from dpcalc.accounting.pld import PldAccountant
from dpcalc.accounting.rdp import RdpAccountant
from dpcalc.events import dpsgd_event

CASES = [  # (q, σ, T, δ): docs/references.md rows and a few harder ones
    (0.01, 4.0, 10_000, 1e-5),      # Abadi et al. 2016: PRV 0.937/0.947/0.957
    (5e-3, 0.8, 1000, 1e-6),        # PRV 1.90/2.00/2.10
    (256 / 60000, 1.1, 14_063, 1e-5),
    (0.04, 1.5, 2250, 1e-5),        # Opacus test: PRV 6.777
    (0.1, 1.0, 100, 1e-7),
]


@pytest.mark.parametrize("q,sigma,steps,delta", CASES)
def test_pld_upper_not_below_prv_lower(q, sigma, steps, delta):
    prv = pytest.importorskip("prv_accountant")
    from prv_accountant.privacy_random_variables import PoissonSubsampledGaussianMechanism

    acc = prv.PRVAccountant(prvs=[PoissonSubsampledGaussianMechanism(noise_multiplier=sigma, sampling_probability=q)],
                            max_self_compositions=[steps], eps_error=0.01, delta_error=delta * 1e-4)
    lo, _, up = acc.compute_epsilon(delta=delta, num_self_compositions=[steps])
    ev = dpsgd_event(noise_multiplier=sigma, sample_rate=q, steps=steps)
    ours = PldAccountant().epsilon(ev, delta=delta)
    assert ours.epsilon >= lo * (1 - 1e-6)
    assert RdpAccountant().epsilon(ev, delta=delta).epsilon >= lo * (1 - 1e-6)
    assert ours.details["epsilon_lower"] <= up * (1 + 1e-6)


@pytest.mark.parametrize("q,sigma,steps,delta", CASES[:3])
def test_pld_lower_not_above_dp_accounting_pessimistic(q, sigma, steps, delta):
    pytest.importorskip("dp_accounting")
    from dp_accounting.pld import privacy_loss_distribution as pldm

    peer = pldm.from_gaussian_mechanism(standard_deviation=sigma, sampling_prob=q, pessimistic_estimate=True,
                                        value_discretization_interval=1e-3)
    peer_up = peer.self_compose(steps).get_epsilon_for_delta(delta)
    ours = PldAccountant().epsilon(dpsgd_event(noise_multiplier=sigma, sample_rate=q, steps=steps), delta=delta)
    assert ours.details["epsilon_lower"] <= peer_up * (1 + 1e-6)
    # both are certified upper bounds of the same quantity: they agree to the requested accuracy
    assert ours.epsilon == pytest.approx(peer_up, rel=0.02)


@pytest.mark.parametrize("q,sigma,steps,delta", [(0.01, 1.0, 100, 1e-5), (0.2, 2.0, 10, 1e-6),
                                                 (0.001, 0.6, 1000, 1e-6)])
def test_replace_one_against_dp_accounting(q, sigma, steps, delta):
    """Replace-one sampled Gaussian (same pair as dp_accounting's REPLACE_ONE): our certified ε
    ≥ dp_accounting's optimistic (privacy-buckets, round-down: a lower bound) ε, and our lower
    bound ≤ its pessimistic (connect-the-dots: an upper bound) ε."""
    pytest.importorskip("dp_accounting")
    from dp_accounting import NeighboringRelation
    from dp_accounting.pld import privacy_loss_distribution as pldm

    def peer(pessimistic):
        kw = {} if pessimistic else {"use_connect_dots": False}
        p = pldm.from_gaussian_mechanism(standard_deviation=sigma, sampling_prob=q, pessimistic_estimate=pessimistic,
                                         value_discretization_interval=1e-4,
                                         neighboring_relation=NeighboringRelation.REPLACE_ONE, **kw)
        return p.self_compose(steps).get_epsilon_for_delta(delta)

    ours = PldAccountant(neighboring="replace").epsilon(dpsgd_event(noise_multiplier=sigma, sample_rate=q,
                                                                    steps=steps), delta=delta)
    assert ours.epsilon >= peer(False) * (1 - 1e-6)
    assert ours.details["epsilon_lower"] <= peer(True) * (1 + 1e-6)
