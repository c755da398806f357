r"""Correlated noise for ``dpcalc train --noise correlated --strategy S``: a matrix-factorization
mechanism (MF-SGD / DP-FTRL) in place of DP-SGD's independent noise.

The stream of clipped gradient sums x_1, …, x_n (n steps) is released as the prefix sums
``A x + B z`` with ``A = B C`` (A the all-ones lower triangle), z ~ N(0, s²) per coordinate:
the noisy gradient of step t is

.. math::
    \tilde g_t = x_t + (B z)_t − (B z)_{t−1} = x_t + (C^{-1} z)_t

(Denisov, McMahan, Rush, Smith, Thakurta, NeurIPS 2022, §2 and Alg. 1 "MF-SGD";
Choquette-Choo et al. ICML 2023 §2; Kairouz et al. ICML 2021 for the tree). The second form is
what :class:`~dpcalc.mechanisms.correlated.stream.NoiseStream` yields, one step at a time:
``w_t = s·(C⁻¹ z)_t`` for a Toeplitz/BLT C, and, for the tree, the difference of consecutive
dyadic prefix-sum noises (the same identity with B the dyadic decoder). Dividing by the batch
size and handing the result to the optimiser is post-processing, as in DP-SGD.

Noise scale: ``s = σ·clip`` per coordinate, σ the run's noise multiplier (as for DP-SGD: the
std of one draw of z over the clipping norm). The release ``C x + z`` is the Gaussian mechanism
with sensitivity Δ·clip (Δ of :func:`dpcalc.mechanisms.correlated.sensitivity` for the
participation pattern), i.e. μ-GDP with μ = Δ/σ, and its (ε, δ) is the exact Gaussian curve
(:func:`dpcalc.accounting.correlated.mf_privacy` with noise multiplier σ/Δ). With C = I
(``banded:1``) this is DP-SGD without amplification: Δ = √k for k epochs, μ = √k/σ.

Participation: the batches are a fixed epoch order (``--sampling cyclic``: one seeded permutation
cut into T = ⌈N/B⌉ batches, the same every epoch), so a record is in exactly one batch per epoch,
at steps j, j + T, j + 2T, …: k = epochs participations at min-separation b = T (Choquette-Choo
et al. ICML 2023, "Multi-epoch matrix factorization mechanisms", §2). Zero-out adjacency (a
record's gradients replaced by zero), as in :mod:`dpcalc.accounting.correlated`.

ε after t steps (the ledger's): the first t releases are a function of the leading
m×m block of C's release, m = k_t·T the end of the epoch step t lies in (k_t = ⌈t/T⌉), whose
sensitivity with k_t participations at separation T bounds theirs (fewer rows and columns:
never larger). Steps of interrupted runs after their last checkpoint (``orphaned``) are counted
as one more Gaussian release with the full plan's Δ per pass over the data they touched
(μ² adds up: Dong, Roth, Su 2019 Cor 3.3), as for the epoch samplers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from dpcalc import _validate as v
from dpcalc.accounting.correlated import mf_privacy
from dpcalc.errors import InfeasibleError, ParameterError
from dpcalc.mechanisms.correlated import Participation, ToeplitzStrategy, sensitivity
from dpcalc.mechanisms.correlated.spec import parse_strategy
from dpcalc.mechanisms.correlated.strategies import TreeStrategy
from dpcalc.mechanisms.correlated.stream import NoiseStream
from dpcalc.mechanisms.gaussian import SOURCE_ANALYTIC, gaussian_epsilon
from dpcalc.results import AccountingResult

__all__ = ["CorrelatedPlan", "CorrelatedNoise", "check_strategy_spec", "MF_ACCOUNTANT", "SOURCE_MF_SGD"]

#: the name under which the mechanism's ε is reported (the "accountant" column)
MF_ACCOUNTANT = "mf-gaussian"
SOURCE_MF_SGD = ("Denisov et al. NeurIPS 2022 (MF-SGD); Choquette-Choo et al. ICML 2023 (k participations, "
                 "min-separation b); exact Gaussian curve, Balle & Wang 2018 Thm 8")

_ONLINE = ("tree", "sqrt", "banded", "blt", "identity")


def check_strategy_spec(spec: str | None) -> str:
    """The ``--strategy`` text of a correlated-noise run, checked for a form that can be generated
    online (the numbers are checked once n is known, by :func:`parse_strategy`).

    Raises:
        ParameterError: missing, ``tree-honaker`` (re-weights past nodes), ``dense:FILE`` (needs the
            whole history), or an unknown form.
    """
    if spec is None or not str(spec).strip():
        raise ParameterError("strategy", "", spec, message=(
            "--noise correlated needs --strategy: tree, sqrt, banded:B, blt:DECAYS/SCALES or identity"))
    kind = str(spec).strip().partition(":")[0].lower()
    if kind in ("tree-honaker", "dense"):
        raise ParameterError("strategy", "", spec, message=(
            f"--strategy {spec} cannot be generated online during training (tree-honaker re-weights past "
            "nodes, dense needs the whole history); use tree, sqrt, banded:B, blt:DECAYS/SCALES or identity"))
    if kind not in _ONLINE:
        raise ParameterError("strategy", "", spec, message=(
            f"--strategy must be one of tree, sqrt, banded:B, blt:DECAYS/SCALES, identity, got {spec!r}"))
    return str(spec).strip()


def _leading(strategy, steps: int, epochs: int):
    """The strategy of the first ``steps`` steps (``epochs`` whole epochs): the leading block of C."""
    if isinstance(strategy, TreeStrategy):
        return TreeStrategy(steps, honaker=strategy.honaker, restarts=epochs)
    return ToeplitzStrategy(strategy.name, strategy.coefs, steps, strategy.source, strategy.blt_params)


@dataclass
class CorrelatedPlan:
    """The mechanism of a correlated-noise run and its privacy accounting.

    Args:
        spec: the ``--strategy`` text.
        steps_per_epoch: T = ⌈N/B⌉ ≥ 1 (the min-separation).
        epochs: E ≥ 1 whole epochs planned (n = E·T steps).

    Attributes:
        strategy: the strategy for the n planned steps (trees restart every epoch).
        full: its :class:`~dpcalc.mechanisms.correlated.sensitivity.Sensitivity` for E
            participations at separation T.

    Raises:
        ParameterError: a strategy that is not valid for these steps (e.g. bands > n).
    """

    spec: str
    steps_per_epoch: int
    epochs: int
    name: str = MF_ACCOUNTANT
    certified: bool = True
    source: str = SOURCE_MF_SGD
    _sens: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.steps_per_epoch = v.count("steps_per_epoch", self.steps_per_epoch)
        self.epochs = v.count("epochs", self.epochs)
        self.steps = self.steps_per_epoch * self.epochs
        self.strategy = parse_strategy(check_strategy_spec(self.spec), steps=self.steps, epochs=self.epochs)
        self.full = self.sensitivity_for(self.epochs)

    def sensitivity_for(self, epochs: int):
        """Δ of the first ``epochs`` epochs (cached): k = epochs participations, separation T."""
        if epochs not in self._sens:
            n = epochs * self.steps_per_epoch
            self._sens[epochs] = sensitivity(_leading(self.strategy, n, epochs),
                                             Participation(n, epochs, self.steps_per_epoch))
        return self._sens[epochs]

    def calibrate(self, *, target_epsilon: float, delta: float) -> AccountingResult:
        """The smallest σ (noise std over the clipping norm, 8 significant digits, rounded up) whose
        ε for the whole plan is ≤ ``target_epsilon`` at ``delta``: σ = Δ·σ_MF, σ_MF from
        :func:`mf_privacy` (verified), then checked again at the rounded σ.

        Raises:
            InfeasibleError: the check fails (never expected; no σ is returned then).
        """
        priv = mf_privacy(self.strategy, Participation(self.steps, self.epochs, self.steps_per_epoch),
                          delta=delta, epsilon=target_epsilon)
        raw = priv.noise_multiplier * self.full.value
        sigma = float(f"{raw:.7e}")
        for _ in range(100):
            if sigma >= raw and self._epsilon(sigma, self.epochs, 0, delta) <= target_epsilon:
                break
            sigma = float(f"{sigma * (1 + 1e-7):.7e}")
        else:  # pragma: no cover - the curve is monotone
            raise InfeasibleError(f"no σ verified for ε = {target_epsilon:g}")
        res = self.result(sigma, steps=self.steps, delta=delta)
        return AccountingResult(res.accountant, res.epsilon, delta, True,
                                details={**res.details, "target_epsilon": target_epsilon},
                                noise_multiplier=sigma, source=self.source)

    def _epsilon(self, sigma: float, epochs: int, orphaned_passes: int, delta: float) -> float:
        if epochs == 0 and orphaned_passes == 0:
            return 0.0
        main = self.sensitivity_for(epochs).value if epochs else 0.0
        mu = math.sqrt(main**2 + orphaned_passes * self.full.value**2) / sigma
        return gaussian_epsilon(delta=delta, mu=mu)

    def result(self, sigma: float, *, steps: int, delta: float, orphaned_steps: int = 0,
               orphaned_passes: int = 0) -> AccountingResult:
        """ε at δ after ``steps`` steps (orphaned ones included) of noise multiplier σ (module
        docstring): μ = √(Δ_{k_t}² + orphaned_passes·Δ²)/σ, k_t = ⌈model steps/T⌉ (at most E)."""
        model_steps = max(steps - orphaned_steps, 0)
        k = min(-(-model_steps // self.steps_per_epoch), self.epochs)
        eps = self._epsilon(sigma, k, orphaned_passes, delta)
        sens = self.sensitivity_for(k) if k else None
        mu = (math.sqrt((sens.value if sens else 0.0) ** 2 + orphaned_passes * self.full.value**2) / sigma)
        details = {"noise": "correlated", "strategy": self.strategy.name, "mu": mu,
                   "sensitivity": sens.value if sens else 0.0,
                   "sensitivity_exact": bool(sens.exact) if sens else True,
                   "sensitivity_method": sens.method if sens else "no steps",
                   "participations": k, "min_separation": self.steps_per_epoch,
                   "orphaned_passes": orphaned_passes, "privacy_source": SOURCE_ANALYTIC}
        return AccountingResult(self.name, eps, delta, True, details=details, source=self.source)

    def ledger_record(self) -> dict:
        """What the privacy ledger records about the mechanism (a resumed run must match it)."""
        return {"noise": "correlated", "strategy": self.spec, "steps_per_epoch": self.steps_per_epoch,
                "epochs": self.epochs, "sensitivity": self.full.value}


class CorrelatedNoise:
    """The noise of each step, ``σ·clip·(C⁻¹ z)_t`` as a float32 tensor of shape (P,), drawn from
    a torch generator (checkpointed with the run) through a
    :class:`~dpcalc.mechanisms.correlated.stream.NoiseStream` (float64 state: ``buffers`` arrays of
    P numbers, O(bands·P) memory, never O(steps·P)).

    Args:
        plan: the run's :class:`CorrelatedPlan`.
        num_parameters: P.
        noise_std: σ·clip > 0.
        generator: the torch generator that owns z (standard normal, float32 draws as DP-SGD's, so
            ``banded:1`` adds exactly DP-SGD's noise).
    """

    def __init__(self, plan: CorrelatedPlan, *, num_parameters: int, noise_std: float,
                 generator: torch.Generator) -> None:
        self.generator = generator
        self.stream = NoiseStream(plan.strategy, shape=(int(num_parameters),), noise_std=noise_std,
                                  normal=self._normal)

    def _normal(self, shape: tuple) -> np.ndarray:
        return torch.randn(shape, generator=self.generator).to(torch.float64).numpy()

    @property
    def buffers(self) -> int:
        """The arrays of P numbers the stream holds."""
        return self.stream.buffers

    def __call__(self) -> torch.Tensor:
        """The next step's noise (float32, shape (P,))."""
        return torch.from_numpy(self.stream()).to(torch.float32)

    def state_dict(self) -> dict:
        """The stream's state as tensors (a checkpoint loads it with ``weights_only``)."""
        return {k: (torch.from_numpy(np.array(x)) if isinstance(x, np.ndarray) else
                    [torch.from_numpy(np.array(a)) for a in x] if isinstance(x, list) else
                    {int(h): torch.from_numpy(np.array(a)) for h, a in x.items()} if isinstance(x, dict) else x)
                for k, x in self.stream.state().items()}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` (the generator is restored by the caller)."""
        def arr(t):
            return t.detach().cpu().numpy().astype(np.float64)

        self.stream.restore({k: ([arr(a) for a in x] if isinstance(x, list) else
                                 {int(h): arr(a) for h, a in x.items()} if isinstance(x, dict) else x)
                             for k, x in state.items()})
