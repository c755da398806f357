r"""Privacy-loss pairs of the Gaussian mechanism on a fixed-size batch drawn without replacement:
replace-one adjacency (issue 12; docs/design.md §9) and add/remove adjacency (issue 32,
:func:`without_replacement_add_remove_step`, at the end of this docstring).

Setting: each step a uniformly random batch of exactly B of the N records (γ = B/N), the sum
of the clipped contributions (norm ≤ C) plus N(0, σ²C²). On the batch, the Gaussian is
G_μ-DP under replace-one with μ = 2/σ (replacing a record moves the sum by ≤ 2C).

**Subsampling theorem** (Dong, Roth, Su 2022, "Gaussian differential privacy", JRSS-B 84(1):3–37,
arXiv:1905.02383: the f-DP subsampling theorem of its section on privacy amplification by
subsampling, §4.1 Thm 4.2 in the arXiv numbering — quoted from memory; the text could not be
checked offline, docs/references.md. Their subsampling is exactly this: a uniformly random
m-subset, neighbours differ in one individual): the step is C_γ(f)-DP with f = G_μ, f_γ = γf + (1−γ)Id and
C_γ(f) = min{f_γ, f_γ⁻¹}** (the convex hull). For symmetric f, DRS give it explicitly: f_γ on
[0, x*], the segment of slope −1 from (x*, f_γ(x*)) to (f_γ(x*), x*), and f_γ⁻¹ beyond, where
f_γ′(x*) = −1. Zhu, Dong, Wang 2022 (AISTATS) state the same in dominating pairs: the pair
R = ((1−γ)N(0, s²) + γN(1, s²), N(0, s²)), s = σ/2, dominates for ε ≥ 0 and its reverse for
ε < 0. Under replace-one consecutive steps may take either orientation (the data decide), so a
single symmetric pair is needed to compose them; this module builds the one whose trade-off
function is C_γ(f):

* f_γ is the trade-off function of R; its part with slope ≤ −1 is R's privacy loss L_R on
  ℓ > 0 (under both distributions), the slope −1 segment is an atom of the loss at 0, and the
  f_γ⁻¹ part is the mirror image. So the pair (P*, Q*) has, for ℓ > 0,
  P*(L > ℓ) = P_R(L_R > ℓ), Q*(L > ℓ) = Q_R(L_R > ℓ), and by symmetry (law of L under P* =
  law of −L under Q*) P*(L ≤ −ℓ) = Q_R(L_R ≥ ℓ), Q*(L ≤ −ℓ) = P_R(L_R ≥ ℓ); the atom at 0
  carries 1 − P_R(L_R > 0) − Q_R(L_R > 0) = (1−γ)(1 − 2Φ̄(1/(2s))) ≥ 0.
* Its privacy profile is δ_R(ε) for ε ≥ 0, which is max(δ_R, δ_{R reversed}) there: the
  explicit form of C_γ(f) holds because R's δ is the larger one for every ε ≥ 0
  (tests/accounting/test_sampling.py checks it on a grid of (σ, γ, ε)).

At γ = 1 (B = N) the pair is the Gaussian with μ = 2/σ. The two-point instance (a record +C in D,
−C in D′, all others 0) is a valid lower bound: its pair is dominated by this one (tests).

**Add/remove adjacency** (issue 32). Theorem: one step on a B-batch drawn without replacement
is, in both orderings, dominated by the Poisson-sampled Gaussian pair at rate q = B/N and
noise multiplier σ/2 (shift 2C), and the instance "x = +C, every other record −C" (1-D) attains
it; so that pair's PLD is the truth, and pld's bracket of it brackets the truth.

Proof. Let D′ = D ∪ {x}, n = |D|, |D′| = n + 1 ∈ {N, N + 1} (the user's dataset is either).
Couple the samplers: draw D's batch b (a uniform B-subset of D); with probability
q = B/(n+1) D′'s batch is b with a uniformly chosen member d_I replaced by x, otherwise b.
This is D′'s sampler: a B-subset S ∌ x gets (1−q)/C(n,B) = 1/C(n+1,B); S = T ∪ {x} gets
q·(n−B+1)/(B·C(n,B)) = 1/C(n+1,B). Given (b, I) the outputs are N(s_b, σ²C²) and
(1−q)N(s_b, σ²C²) + qN(s_b + v_I, σ²C²), v_I = g(x) − g(d_I), ‖v_I‖ ≤ 2C. The pair
(N(0), N(v)) has trade-off function G_{‖v‖/(σC)} ≥ G_{2/σ}, so by Blackwell's theorem
(Dong, Roth, Su 2022 Thm 2.10) it is a post-processing K of (N(0), N(2C·e₁)) in 1-D; the
same K maps ((1−q)N(0) + qN(2C), N(0)) to the conditional pair (after translating by s_b).
So each conditional pair is dominated (both orders) by the Poisson-sampled Gaussian pair at
(q, σ/2) — :class:`~dpcalc.accounting._pld_mechanisms.SampledGaussianLoss` — and by the joint
convexity of the hockey-stick divergence so is their mixture over (b, I), the step itself.
The pair at rate q is dominated by the one at q′ ≥ q (thinning: q = q′·(q/q′), and a shift
t·2C with t ∈ {0, 1} is dominated by 2C as above), so q = B/N covers |D′| ∈ {N, N + 1}.
Adaptive composition keeps domination (Zhu, Dong, Wang 2022, AISTATS, Thm 10). Tightness:
with x = +C and every other record −C (1-D) the outputs are exactly N(−BC, σ²C²) and
(1−q)N(−BC, σ²C²) + qN(−BC + 2C, σ²C²) at q = B/|D′|, every step: with |D′| = N the
T-fold composition is that of the pair, so the pair's PLD is the exact privacy curve of an
actual dataset (an achievable lower bound as well as the upper bound). At B = N (q = 1 would
need |D| = N − 1 < B, so only |D′| = N + 1 is possible) the step is taken as the Gaussian at
σ/2, which dominates every sampled one. The same coupling gives Birrell, Ebrahimi, Behnia,
Pacheco 2024 (Thm 3.1/3.3) their RDP bound (dpcalc/accounting/_fixed_size_rdp.py).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np

from dpcalc._numerics import _NDTR_LIBM_MAX
from dpcalc.accounting._pld_mechanisms import (
    GaussianLoss,
    JointLossPair,
    LossPair,
    SampledGaussianLoss,
)
from dpcalc.accounting._pld_mixture import MIXTURE_TAIL, binomial_mixture, mixture_pairs
from dpcalc.events import Event, FixedSizeSampledEvent, GaussianEvent, PoissonSampledEvent

__all__ = ["WithoutReplacementGaussianLoss", "without_replacement_pair", "without_replacement_add_remove_step",
           "with_replacement_pair", "fixed_size_pair", "fixed_size_loss_edge"]


@dataclass(frozen=True)
class WithoutReplacementGaussianLoss(JointLossPair):
    """The symmetric pair with trade-off function C_γ(G_{2/σ}) (module docstring).

    Args:
        sigma: σ, noise std divided by the clipping norm C; > 0.
        gamma: γ = B/N in (0, 1).
    """

    sigma: float
    gamma: float
    _r: SampledGaussianLoss = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "_r", SampledGaussianLoss(self.sigma / 2.0, self.gamma, "remove"))
        object.__setattr__(self, "symmetric", True)
        object.__setattr__(self, "support", (-math.inf, math.inf))

    def functions(self, ell):
        ell = np.asarray(ell, dtype=float)
        pos = ell >= 0.0
        a = np.abs(ell)
        if 2 <= a.size and pos.any() and not pos.all():
            # pld's grid edges k·h/2 come in ± pairs: R at each |ℓ| once, not twice. R's functions
            # are elementwise, and Φ takes the path of the full array's size (the one
            # _pld_grid.discretize's error bound assumes), so the values are bitwise those of
            # the full call.
            u, inv = np.unique(a, return_inverse=True)
            vector = a.size > _NDTR_LIBM_MAX
            p_le, p_gt, q_le, q_gt = (f[inv].reshape(a.shape) for f in self._r.functions(u, vector))
        else:
            p_le, p_gt, q_le, q_gt = self._r.functions(a)
        # ℓ ≥ 0: R's own functions (no +∞ mass, so P*(L ≤ ℓ) = P_R(L_R ≤ ℓ), atom at 0 included);
        # ℓ < 0: the mirror image, P*(L ≤ ℓ) = Q_R(L_R ≥ −ℓ), Q*(L ≤ ℓ) = P_R(L_R ≥ −ℓ)
        return (np.where(pos, p_le, q_gt), np.where(pos, p_gt, q_le),
                np.where(pos, q_le, p_gt), np.where(pos, q_gt, p_le))


def without_replacement_pair(*, noise_multiplier: float, batch_size: int, dataset_size: int) -> LossPair:
    """The pld pair of one step: :class:`WithoutReplacementGaussianLoss`, or the Gaussian with
    μ = 2/σ when B = N."""
    if batch_size >= dataset_size:
        return GaussianLoss(2.0 / noise_multiplier)
    return WithoutReplacementGaussianLoss(noise_multiplier, batch_size / dataset_size)


def without_replacement_add_remove_step(step: FixedSizeSampledEvent) -> Event:
    """The step pld accounts for one fixed-size step without replacement of a Gaussian under
    add/remove adjacency (module docstring, "Add/remove adjacency"): the Poisson-sampled
    Gaussian at rate q = B/N and noise multiplier σ/2, or the Gaussian at σ/2 when B = N.

    Args:
        step: a :class:`~dpcalc.events.FixedSizeSampledEvent` with ``replacement=False`` whose
            ``event`` is a :class:`~dpcalc.events.GaussianEvent` (noise multiplier σ in units
            of the clipping norm C).

    Returns:
        a :class:`~dpcalc.events.PoissonSampledEvent` of a :class:`~dpcalc.events.GaussianEvent`
        (B < N) or a :class:`~dpcalc.events.GaussianEvent` (B = N).

    Raises:
        ValueError: ``step`` is not such an event (callers check first).
    """
    if not (isinstance(step, FixedSizeSampledEvent) and not step.replacement
            and isinstance(step.event, GaussianEvent)):
        raise ValueError(f"a fixed-size Gaussian step without replacement is needed, got {step!r}")
    half = GaussianEvent(step.event.noise_multiplier / 2.0)
    if step.batch_size >= step.dataset_size:
        return half
    return PoissonSampledEvent(step.batch_size / step.dataset_size, half)


@functools.lru_cache(maxsize=64)
def with_replacement_pair(*, noise_multiplier: float, batch_size: int, dataset_size: int,
                          direction: str) -> LossPair:
    r"""The pld pair of one fixed-size step *with* replacement of a Gaussian under add/remove:
    N(0, σ²) against Σ_j Bin(B, 1/N)(j)·N(2j, σ²) (units of C), ``direction`` "remove" (P the
    mixture) or "add" (P = N(0, σ²)); components beyond K (binomial tail ≤ ``MIXTURE_TAIL``) to
    +∞ in the certified pair, to shift 0 in its optimistic one
    (:mod:`dpcalc.accounting._pld_mixture`).

    Theorem (issue 32; docs/design.md §9). D′ = D ∪ {x}, |D′| = L ∈ {N, N + 1}. Couple the
    samplers draw by draw: D′'s i-th draw is x with probability 1/L, else D's i-th draw (a
    uniform draw from D′). Given D's draws (shared), D′'s clipped sum is D's plus v_J, J the
    set of draws replaced by x, |J| = j ~ Bin(B, 1/L), ‖v_J‖ ≤ 2jC. So, conditionally, the pair
    is N(s, σ²C²) against the vector MoG Σ_J w_J N(s + v_J, σ²C²), dominated in both orders by
    the scalar MoG with shifts 2|J|C (Choquette-Choo, Ganesh, Steinke, Thakurta 2023,
    arXiv:2310.15526, Cor. 4.7), i.e. by the pair above at rate 1/L; by joint convexity of the
    hockey-stick divergence so is the step. Rate 1/(N+1) is dominated by 1/N (thinning: each
    draw that is x at rate 1/N is kept with probability N/(N+1); the kept copies shift by
    ≤ 2C each, the same corollary), so 1/N covers both neighbours. Adaptive composition: Zhu,
    Dong, Wang 2022 Thm 10. Attained: x = +C, every other record −C (1-D), |D′| = N.

    Args:
        noise_multiplier: σ (noise std / C), > 0.
        batch_size: B ≥ 1 draws.
        dataset_size: N ≥ 1 (N = 1: every draw is x: the Gaussian with shift 2B).
        direction: "remove" or "add".
    """
    if dataset_size <= 1:
        return GaussianLoss(2.0 * batch_size / noise_multiplier)
    log_w, err, k = binomial_mixture(batch_size, 1.0 / dataset_size, tail=MIXTURE_TAIL)
    tail = 0.0 if k >= batch_size else MIXTURE_TAIL
    return mixture_pairs(noise_multiplier, 2.0 * np.arange(k + 1), log_w, err, tail_bound=tail,
                         direction=direction)


def fixed_size_pair(step: FixedSizeSampledEvent, neighboring: str, direction: str) -> LossPair:
    """The pld pair of one checked fixed-size Gaussian step (``_pld_history.check_sampler_step``):
    with replacement (add/remove) :func:`with_replacement_pair`; without replacement under
    replace-one :func:`without_replacement_pair` (under add/remove ``_pld_history.segments``
    has already replaced it by :func:`without_replacement_add_remove_step`)."""
    sigma = step.event.noise_multiplier
    if step.replacement:
        return with_replacement_pair(noise_multiplier=sigma, batch_size=step.batch_size,
                                     dataset_size=step.dataset_size, direction=direction)
    if neighboring != "replace":
        raise ValueError("a step without replacement under add/remove is accounted through "
                         "without_replacement_add_remove_step")
    return without_replacement_pair(noise_multiplier=sigma, batch_size=step.batch_size,
                                    dataset_size=step.dataset_size)


def fixed_size_loss_edge(step: Event) -> float | None:
    """The lower edge log p_0 of the remove-ordering loss of a fixed-size step with replacement (the
    loss of the draws that miss the record; pld aligns its grid on it as on a Poisson-sampled
    Gaussian's ln(1 − q)): that of the optimistic pair, whose lower PMF the alignment serves.
    None for any other step."""
    if not (isinstance(step, FixedSizeSampledEvent) and step.replacement and isinstance(step.event, GaussianEvent)):
        return None
    pair = with_replacement_pair(noise_multiplier=step.event.noise_multiplier, batch_size=step.batch_size,
                                 dataset_size=step.dataset_size, direction="remove")
    low = getattr(pair, "optimistic", None) or pair
    edge = low.support[0]
    return edge if math.isfinite(edge) and edge < 0 else None
