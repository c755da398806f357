"""The DP-SGD training job behind ``dpcalc train``: data -> calibrated σ -> training -> certified ε.

The ε reported is computed by a dpcalc accountant from (σ, q, steps actually taken) —
exactly what ``dpcalc epsilon --sigma σ --sample-rate q --steps T --delta δ
--accountant NAME`` prints for the same numbers. ``--target-epsilon`` calibrates σ with
:func:`dpcalc.accounting.calibrate.calibrate_dpsgd`, the helper behind ``dpcalc sigma``,
for the planned schedule q = B/N, T = ⌈epochs·N/B⌉ (:func:`dpcalc.schedule.resolve_schedule`).

Every decision about privacy — the σ calibrated for ``--target-epsilon`` and the step at
which ``--max-epsilon`` stops the run — is taken by a *certified* accountant
(``Accountant.certified``); an approximate one (``gdp``) may report ε but is refused for
these decisions (docs/design.md §1).

A resumed run continues from its last checkpoint; the steps the interrupted run took after
that checkpoint ("orphaned" steps, recorded in the privacy ledger before each step) stay
in the accounting, so the ε reported covers every step the data was used in
(:mod:`dpcalc.train.checkpoint`).

``audit_canaries = m`` inserts m audit canaries (:mod:`dpcalc.train.canaries`: uniform-noise
images with a random fixed label, each included with probability ½ from a seeded generator the
ledger records). The included ones are training records: N, q = B/N and the accounting use
N = N_data + included canaries, so the certified ε covers them; each canary's negative loss
under the final model is returned for the one-run audit (run by the CLI).

``sampling`` chooses the batch sampler (:mod:`dpcalc.train.samplers`; Poisson by default, the
path and its numbers unchanged) and the run is accounted for exactly that sampler:

* ``without-replacement`` — exactly B records per step; replace-one adjacency by default (N is
  public): pld (Dong, Roth, Su 2022 §4.1) or rdp (Wang, Balle, Kasiviswanathan 2019 Thm 9); with
  ``neighboring="add-remove"`` (``--neighboring``), rdp (Birrell, Ebrahimi, Behnia, Pacheco 2024
  Thm 3.1/3.3; pld has no add/remove pair);
* ``with-replacement`` — B independent uniform draws per step (duplicates kept); add/remove
  adjacency, rdp only (Birrell, Ebrahimi, Behnia, Pacheco 2024 Thm 3.6; pld has no pair for it):
  the default accountant is the first certified one that supports the sampler;
* ``truncated-poisson`` — Poisson at q = B/N capped at ``max_batch_size``; add/remove; rdp
  only (pld refuses it): the default accountant is the first certified one that supports the
  sampler (:func:`dpcalc.accounting._sampling.default_accountant_for`);
* ``shuffle`` / ``balls-in-bins`` — each record in one batch per epoch of T = ⌈N/B⌉ steps;
  zero-out adjacency; ε is the certified upper bound ε_GDP(δ; √E/σ) of
  :func:`dpcalc.accounting.shuffling.certified_upper_epsilon`, E the passes over the data (a
  partial epoch counts as a whole one; each orphaned segment adds the passes it touches), with a
  proven lower bound and the Poisson ε of the same (σ, q, T) reported beside it (docs/design.md §6).

Privacy notes: the accountant certifies the released model(s) — checkpoints, the saved
model and the test accuracy (the test set is not training data). The per-epoch training
loss shown in the progress display and the log is *not* privatised; do not publish it
as part of a DP release.
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from dpcalc import _validate as v
from dpcalc._version import __version__
from dpcalc.accounting import shuffling
from dpcalc.accounting._pld_grid import GridTooLargeError
from dpcalc.accounting._sampling import check_sampler_adjacency, default_accountant_for
from dpcalc.accounting.calibrate import calibrate_dpsgd
from dpcalc.accounting.registry import available, default_accountant, get_accountant, get_class
from dpcalc.errors import DpcalcError, InfeasibleError, ParameterError, UnsupportedEventError
from dpcalc.events import dpsgd_event
from dpcalc.mechanisms.gaussian import analytic_noise_std
from dpcalc.results import AccountingResult, jsonable
from dpcalc.schedule import resolve_schedule
from dpcalc.train import checkpoint as ckpt
from dpcalc.train.canaries import MAX_CANARIES, canary_scores, make_canaries
from dpcalc.train.data import DATASETS, IdxDataset, download_dataset, load_dataset
from dpcalc.train.distributed import (
    DEVICES,
    Context,
    DistributedDPSGDStep,
    ShardSampler,
    context_from_environment,
    resolve_device,
    shard_bounds,
)
from dpcalc.train.dpsgd import DPSGDStep, PoissonSampler
from dpcalc.train.memory import keep_freed_memory
from dpcalc.train.models import build_model, validate_model_name
from dpcalc.train.samplers import SAMPLERS, make_sampler
from dpcalc.train.scatternet import SCATTERNET_MODELS, scattered_inputs

__all__ = ["TrainConfig", "TrainResult", "CanaryOutcome", "EpochRecord", "Reporter", "train", "prepare_images",
           "evaluate", "epsilon_for_steps", "OPTIMIZERS", "MAX_STEPS", "RANGES", "SAMPLINGS", "SamplerSpec",
           "epoch_sampler_epsilon", "EPOCH_ACCOUNTANT"]

#: ``--sampling`` of ``dpcalc train`` (:mod:`dpcalc.train.samplers`)
SAMPLINGS = tuple(SAMPLERS)
#: samplers that lay out whole epochs (each record in exactly one batch per epoch)
EPOCH_SAMPLINGS = ("shuffle", "balls-in-bins")
#: the adjacency under which each sampler is accounted (module docstring)
SAMPLING_ADJACENCY = {"poisson": "add-remove", "without-replacement": "replace", "with-replacement": "add-remove",
                      "truncated-poisson": "add-remove", "shuffle": "zero-out", "balls-in-bins": "zero-out"}
#: ``--neighboring`` values, and the samplers it applies to (the per-step fixed-size / truncated samplers,
#: accounted by the registry under the adjacency given; a pair without a proof is refused,
#: :func:`dpcalc.accounting._sampling.check_sampler_adjacency`)
NEIGHBORINGS = ("add-remove", "replace")
SAMPLING_NEIGHBORINGS = ("without-replacement", "with-replacement", "truncated-poisson")
#: the name the ε of shuffle / balls-in-bins runs is reported under (not a registry accountant)
EPOCH_ACCOUNTANT = "e-fold-gaussian"

OPTIMIZERS = ("sgd", "momentum", "adam")

#: The most training steps a run may plan (T = ⌈epochs·N/B⌉): far beyond any CPU training
#: run, and where every certified accountant still answers in about a second.
MAX_STEPS = 10_000_000

#: Supported range of each numeric option: (low, high, low inclusive, high inclusive).
#: σ: below 0.05 the certified accountants overflow at large T (and no useful model is
#: private there); above 1e6 the noise swamps any gradient. Target ε: above 1000 the
#: calibration bracket fails (and ε > 1000 certifies nothing). δ below 1e-30 leaves the
#: range the accountants are tested on (the upper limit, 1/N, is checked against the data).
#: lr and C: at most 1e6, so that lr·gradient and σ·C stay finite in float32.
RANGES: dict[str, tuple[float, float, bool, bool]] = {
    "noise_multiplier": (0.05, 1e6, True, True),
    "target_epsilon": (0.0, 1000.0, False, True),
    "delta": (1e-30, 1.0, True, False),
    "epochs": (0.0, float(MAX_STEPS), False, True),
    "lr": (0.0, 1e6, False, True),
    "momentum": (0.0, 1.0, True, False),
    "max_grad_norm": (0.0, 1e6, False, True),
    "max_epsilon": (0.0, math.inf, False, False),
}
#: whole-number options: (low, high or None for no upper limit)
INT_RANGES: dict[str, tuple[int, int | None]] = {
    "batch_size": (1, None),  # at most N, checked against the data
    "max_physical_batch": (1, None),
    "seed": (0, 2**63 - 1),
    "threads": (1, 1024),
    "audit_canaries": (0, MAX_CANARIES),  # 0: no canaries
    "max_batch_size": (1, None),
}


def _show_bound(x: float) -> str:
    if math.isinf(x):
        return "∞"
    return f"{x:g}".replace("e+0", "e").replace("e+", "e").replace("e-0", "e-")


def _range_text(name: str) -> str:
    lo, hi, lo_in, hi_in = RANGES[name]
    return (f"a number in {'[' if lo_in else '('}{_show_bound(lo)}, {_show_bound(hi)}"
            f"{']' if hi_in else ')'}")


def _check_real(name: str, value: Any) -> float:
    lo, hi, lo_in, hi_in = RANGES[name]
    allowed = _range_text(name)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ParameterError(name, allowed, value)
    x = float(value)
    ok = (lo <= x if lo_in else lo < x) and (x <= hi if hi_in else x < hi)
    if not ok or math.isnan(x):
        raise ParameterError(name, allowed, x)
    return x


def _check_int(name: str, value: Any) -> int:
    lo, hi = INT_RANGES[name]
    if hi is None:
        allowed = f"a whole number >= {lo}"
    else:
        allowed = f"a whole number in [{lo}, {'2^63 - 1' if hi == 2**63 - 1 else hi}]"
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if (isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < lo
            or (hi is not None and value > hi)):
        raise ParameterError(name, allowed, value)
    return int(value)


def _check_path(name: str, value: str | None, *, directory: bool) -> None:
    """A path the run will write: not empty, of the right kind if it exists, and under a
    directory (the nearest existing ancestor must be one)."""
    if value is None:
        return
    flag = "--" + name.replace("_", "-")
    if str(value) == "":
        raise ParameterError(name, "", value, message=f"{flag} must not be empty")
    path = Path(value)
    if path.exists():
        if directory and not path.is_dir():
            raise ParameterError(name, "", value, message=f"{flag} {value} is not a directory")
        if not directory and path.is_dir():
            raise ParameterError(name, "", value, message=f"{flag} {value} is a directory")
    for parent in path.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise ParameterError(name, "", value,
                                     message=f"{flag} {value}: {parent} is not a directory")
            break


@dataclass(frozen=True)
class TrainConfig:
    """Everything that defines a ``dpcalc train`` run (glossary names).

    Exactly one of ``noise_multiplier`` and ``target_epsilon`` is given.
    """

    dataset: str = "mnist"
    data_dir: str | None = None
    download: bool = False
    model: str = "tanh-cnn"
    epochs: float = 10.0
    batch_size: int = 512
    lr: float = 0.5
    optimizer: str = "momentum"
    momentum: float = 0.9
    max_grad_norm: float = 0.1
    noise_multiplier: float | None = None
    target_epsilon: float | None = None
    delta: float = 1e-5
    accountant: str | None = None
    max_epsilon: float | None = None
    max_physical_batch: int = 512
    seed: int = 0
    checkpoint: str | None = None
    resume: bool = False
    log: str | None = None
    save_model: str | None = None
    threads: int | None = None
    audit_canaries: int = 0
    device: str = "auto"
    sampling: str = "poisson"
    max_batch_size: int | None = None
    neighboring: str | None = None

    def validated(self) -> TrainConfig:
        """The config with every field checked.

        Every numeric option is checked against its supported range (:data:`RANGES`,
        :data:`INT_RANGES`) here, once; the limits that depend on the data (δ < 1/N,
        B ≤ N, T ≤ :data:`MAX_STEPS`) are checked by :func:`train` after loading it.

        Raises:
            ParameterError: a field out of its range (the message names the option, the
                range and the value); both or neither of σ and target ε; an approximate
                accountant asked to decide (``--max-epsilon``, ``--target-epsilon``); an
                output path under a file.
        """
        v.choice("dataset", self.dataset, tuple(DATASETS))
        validate_model_name(self.model)  # a user factory is imported and checked here
        v.choice("optimizer", self.optimizer, OPTIMIZERS)
        _check_real("epochs", self.epochs)
        _check_int("batch_size", self.batch_size)
        _check_real("lr", self.lr)
        _check_real("momentum", self.momentum)
        _check_real("max_grad_norm", self.max_grad_norm)
        if (self.noise_multiplier is None) == (self.target_epsilon is None):
            raise ParameterError(
                "noise_multiplier", "", None,
                message="give exactly one of --noise-multiplier and --target-epsilon")
        if self.noise_multiplier is not None:
            _check_real("noise_multiplier", self.noise_multiplier)
        if self.target_epsilon is not None:
            _check_real("target_epsilon", self.target_epsilon)
        _check_real("delta", self.delta)
        if self.max_epsilon is not None:
            _check_real("max_epsilon", self.max_epsilon)
        _check_int("max_physical_batch", self.max_physical_batch)
        _check_int("seed", self.seed)
        if self.threads is not None:
            _check_int("threads", self.threads)
        _check_int("audit_canaries", self.audit_canaries)
        v.choice("device", self.device, DEVICES)
        resolve_device(self.device)  # --device cuda without CUDA: refused here
        v.choice("sampling", self.sampling, SAMPLINGS)
        if self.max_batch_size is not None:
            _check_int("max_batch_size", self.max_batch_size)
        if self.sampling == "truncated-poisson":
            if self.max_batch_size is None:
                raise ParameterError("max_batch_size", "", None, message=(
                    "--sampling truncated-poisson needs --max-batch-size B_max (the cap on the Poisson batch)"))
        elif self.max_batch_size is not None:
            raise ParameterError("max_batch_size", "", self.max_batch_size, message=(
                f"--max-batch-size applies to --sampling truncated-poisson only, not --sampling {self.sampling}"))
        if self.neighboring is not None:
            v.choice("neighboring", self.neighboring, NEIGHBORINGS)
            if self.sampling not in SAMPLING_NEIGHBORINGS:
                raise ParameterError("neighboring", "", self.neighboring, message=(
                    f"--neighboring applies to --sampling {', '.join(SAMPLING_NEIGHBORINGS)} only, not --sampling "
                    f"{self.sampling} (accounted under {SAMPLING_ADJACENCY[self.sampling]} adjacency)"))
            check_sampler_adjacency(self.sampling, self.neighboring)  # a pair without a proof: refused, the reason
        if self.accountant is not None and self.sampling in EPOCH_SAMPLINGS:
            raise ParameterError("accountant", "", self.accountant, message=(
                f"--accountant does not apply to --sampling {self.sampling}: its ε is the certified E-fold "
                "Gaussian bound (each record in one batch per epoch); omit --accountant"))
        if self.accountant is not None:
            v.choice("accountant", self.accountant, available())
            _check_certified_for_decisions(self)
        if self.resume and self.checkpoint is None:
            raise ParameterError("resume", "", None, message="--resume needs --checkpoint DIR")
        if self.download and self.data_dir is not None:
            raise ParameterError("download", "", None,
                                 message="give either --download or --data-dir, not both")
        _check_path("checkpoint", self.checkpoint, directory=True)
        _check_path("log", self.log, directory=False)
        _check_path("save_model", self.save_model, directory=False)
        return self

    def decides(self) -> str | None:
        """The option that makes the accountant take a decision (None: it only reports)."""
        if self.max_epsilon is not None:
            return "--max-epsilon"
        if self.target_epsilon is not None:
            return "--target-epsilon"
        return None

    def fingerprint(self) -> dict:
        """The settings a resumed run must share with the checkpoint it continues."""
        keys = ("dataset", "model", "batch_size", "lr", "optimizer", "momentum", "max_grad_norm",
                "seed", "max_physical_batch")
        if self.sampling != "poisson":  # Poisson checkpoints keep their old fingerprint
            keys += ("sampling", "max_batch_size")
        return {k: getattr(self, k) for k in keys}


@dataclass(frozen=True)
class SamplerSpec:
    """The batch sampler of a run, as the accounting needs it.

    Attributes:
        sampling: one of :data:`SAMPLINGS`.
        dataset_size: N (data plus included canaries).
        batch_size: B (expected, for the Poisson samplers and balls-in-bins).
        max_batch_size: B_max of ``truncated-poisson`` (else None).
    """

    sampling: str
    dataset_size: int
    batch_size: int
    max_batch_size: int | None = None
    adjacency: str | None = None

    @property
    def per_epoch(self) -> bool:
        """True for the samplers that lay out whole epochs (``shuffle``, ``balls-in-bins``)."""
        return self.sampling in EPOCH_SAMPLINGS

    @property
    def steps_per_epoch(self) -> int:
        """T = ⌈N/B⌉, the batches of one epoch of the epoch samplers."""
        return -(-self.dataset_size // self.batch_size)

    @property
    def neighboring(self) -> str:
        """The adjacency the sampler is accounted under: ``--neighboring`` when given, else
        :data:`SAMPLING_ADJACENCY`."""
        return self.adjacency or SAMPLING_ADJACENCY[self.sampling]

    def event_args(self) -> dict:
        """Keyword arguments of :func:`dpcalc.events.dpsgd_event` for the per-step samplers."""
        if self.sampling == "poisson":
            return {}
        out: dict[str, Any] = {"sampling": self.sampling, "batch_size": self.batch_size,
                               "dataset_size": self.dataset_size}
        if self.max_batch_size is not None:
            out["max_batch_size"] = self.max_batch_size
        return out

    def passes(self, model_steps: int, orphaned_passes: int = 0) -> int:
        """E: the epochs touched by ``model_steps`` steps (a partial epoch counts as a whole
        one) plus ``orphaned_passes`` — the most batches of the epoch samplers a record is in."""
        return -(-model_steps // self.steps_per_epoch) + orphaned_passes


def touched_passes(start: int, count: int, steps_per_epoch: int) -> int:
    """The epochs of ``steps_per_epoch`` steps that the steps start … start + count − 1 touch
    (0 for count ≤ 0)."""
    if count <= 0:
        return 0
    return -(-(start + count) // steps_per_epoch) - start // steps_per_epoch


class _EpochAccountant:
    """Stands in for an accountant in the loop for ``shuffle`` / ``balls-in-bins`` (ε is
    :func:`epoch_sampler_epsilon`)."""

    name = EPOCH_ACCOUNTANT
    certified = True
    source = shuffling.SOURCE_UPPER


def epoch_sampler_epsilon(*, noise_multiplier: float, passes: int, delta: float) -> AccountingResult:
    """Certified ε of E passes of shuffled or balls-in-bins DP-SGD at δ (zero-out adjacency):
    ε_GDP(δ; μ = √E/σ), :func:`dpcalc.accounting.shuffling.certified_upper_epsilon` (Chua et al.
    2024 §3; Dong, Roth, Su 2019 Cor 3.3; docs/design.md §6). E = 0 spends nothing.

    Args:
        noise_multiplier: σ > 0. passes: E ≥ 0 (epochs touched). delta: δ in (0, 1).
    """
    details: dict[str, Any] = {"passes": passes, "adjacency": shuffling.ADJACENCY}
    if passes == 0:
        return AccountingResult(EPOCH_ACCOUNTANT, 0.0, delta, True, details={**details, "note": "no steps taken"},
                                source=shuffling.SOURCE_UPPER)
    eps = shuffling.certified_upper_epsilon(noise_multiplier=noise_multiplier, epochs=passes, delta=delta)
    details["mu"] = math.sqrt(passes) / noise_multiplier
    return AccountingResult(EPOCH_ACCOUNTANT, eps, delta, True, details=details, source=shuffling.SOURCE_UPPER)


def _calibrate_epochs(*, target_epsilon: float, delta: float, passes: int) -> AccountingResult:
    """The smallest σ (errs high) with ε_GDP(δ; √E/σ) ≤ target: the Gaussian mechanism of L2
    sensitivity √E (E-fold composition; Balle & Wang 2018 Thm 8), verified by
    :func:`epoch_sampler_epsilon`."""
    try:
        sigma = analytic_noise_std(epsilon=target_epsilon, delta=delta, sensitivity=math.sqrt(passes))
    except ParameterError:
        raise InfeasibleError(f"no σ reaches ε = {target_epsilon:g} at δ = {delta:g} over {passes} epochs") from None
    sigma = float(f"{sigma:.8g}")
    for _ in range(100):  # the 8-digit rounding may land just below: step up until verified
        res = epoch_sampler_epsilon(noise_multiplier=sigma, passes=passes, delta=delta)
        if res.epsilon <= target_epsilon:
            break
        sigma = float(f"{sigma * (1 + 1e-7):.8g}")
    else:  # pragma: no cover - analytic_noise_std is verified
        raise InfeasibleError(f"could not verify a σ for ε = {target_epsilon:g}")
    return AccountingResult(EPOCH_ACCOUNTANT, res.epsilon, delta, True,
                            details={**res.details, "target_epsilon": target_epsilon},
                            noise_multiplier=sigma, source=shuffling.SOURCE_UPPER)


def _check_certified_for_decisions(config: TrainConfig) -> None:
    """Refuse an approximate accountant where it would decide (a budget stop, a calibration):
    an approximation may fall below the true ε (docs/design.md §1)."""
    option = config.decides()
    if option is None or get_class(config.accountant).certified:
        return
    certified = [name for name in available() if get_class(name).certified]
    raise ParameterError(
        "accountant", "a certified accountant", config.accountant,
        message=f"--accountant {config.accountant} is an approximation, not a certified bound, and "
                f"cannot decide {option}; use a certified accountant ({', '.join(certified)}) or "
                f"omit --accountant (default {default_accountant()})")


@dataclass
class EpochRecord:
    """One line of the ``--log`` JSONL file."""

    epoch: int
    steps: int
    epsilon: float
    delta: float
    accountant: str
    train_loss: float | None
    mean_batch_size: float | None
    test_accuracy: float
    seconds: float


@dataclass(frozen=True)
class CanaryOutcome:
    """The canaries of a ``--audit-canaries`` run after training (:mod:`dpcalc.train.canaries`).

    Attributes:
        record: the ledger's canary record (count, included, seed, kind, sha256).
        included: bool array (m,), the inclusion coins.
        scores: float64 array (m,), each canary's negative loss under the final model.
    """

    record: dict
    included: np.ndarray
    scores: np.ndarray


@dataclass
class TrainResult:
    """The outcome of a run: the model, its test accuracy and the certified ε.

    ``accounting`` is the accountant's own result for (σ, q, steps) at δ. ``steps`` counts
    every step the data was used in: those applied to ``model`` plus ``orphaned_steps``
    (taken by interrupted runs after their last checkpoint; see
    :mod:`dpcalc.train.checkpoint`). ``resumed_from_steps`` is the model's step count at
    the checkpoint a resumed run continued from (0 without a checkpoint; None if not resumed).
    ``dataset_size`` is the real N the sampling rate and the accounting use: the data plus
    the included canaries of ``--audit-canaries`` (``canaries``: their inclusion and scores).
    ``sampler``: None for Poisson sampling; otherwise the sampler's record (``sampling``,
    ``batch_size``, ``adjacency``, …; for ``shuffle`` / ``balls-in-bins`` also ``passes``,
    ``epsilon_lower`` — a proven lower bound, never an ε — and ``poisson_epsilon``, the Poisson
    number of the same (σ, q, steps)).
    """

    model: torch.nn.Module
    accounting: AccountingResult
    noise_multiplier: float
    sample_rate: float
    steps: int
    planned_steps: int
    epochs: float
    test_accuracy: float
    seconds: float
    dataset_size: int
    stopped: str | None = None
    history: list[EpochRecord] = field(default_factory=list)
    calibration: AccountingResult | None = None
    resumed_from_steps: int | None = None
    orphaned_steps: int = 0
    canaries: CanaryOutcome | None = None
    sampler: dict | None = None

    def to_json(self) -> dict:
        """The ``results[0]`` entry of ``dpcalc train --json`` (docs/design.md §5)."""
        acc = self.accounting
        details: dict[str, Any] = dict(acc.details)
        details.update(planned_steps=self.planned_steps, dataset_size=self.dataset_size,
                       expected_batch_size=self.sample_rate * self.dataset_size)
        if self.stopped:
            details["stopped"] = self.stopped
        if self.sampler is not None:
            details.update(self.sampler)
        if self.calibration is not None:
            details["calibrated_for_epsilon"] = self.calibration.details.get("target_epsilon")
        if self.canaries is not None:
            details["canaries"] = {**self.canaries.record,
                                   "data_records": self.dataset_size - self.canaries.record["included"]}
        if self.resumed_from_steps is not None or self.orphaned_steps:
            details["resumed_from_steps"] = self.resumed_from_steps
            details["orphaned_steps"] = self.orphaned_steps
            details["model_steps"] = self.steps - self.orphaned_steps
        out = {
            "accountant": acc.accountant,
            "epsilon": acc.epsilon,
            "delta": acc.delta,
            "certified": acc.certified,
            "noise_multiplier": self.noise_multiplier,
            "sample_rate": self.sample_rate,
            "steps": self.steps,
            "test_accuracy": self.test_accuracy,
            "epochs": self.epochs,
            "seconds": self.seconds,
            "source": acc.source,
            "details": details,
        }
        if acc.reason:
            out["reason"] = acc.reason
        return jsonable(out)


class Reporter(Protocol):
    """Receives progress (the CLI shows a rich progress bar; the library default is silent)."""

    def start(self, *, config: TrainConfig, noise_multiplier: float, sample_rate: float,
              planned_steps: int, accountant: str, note: str | None, dataset_size: int) -> None: ...

    def start_epoch(self, epoch: int, epochs: int, steps: int, epsilon: float) -> None: ...

    def step(self, *, loss: float | None, batch_size: int) -> None: ...

    def end_epoch(self, record: EpochRecord) -> None: ...

    def message(self, text: str) -> None: ...


class _Silent:
    def start(self, **kwargs: Any) -> None:
        pass

    def start_epoch(self, epoch: int, epochs: int, steps: int, epsilon: float) -> None:
        pass

    def step(self, **kwargs: Any) -> None:
        pass

    def end_epoch(self, record: EpochRecord) -> None:
        pass

    def message(self, text: str) -> None:
        pass


def prepare_images(images: np.ndarray, dataset: str) -> torch.Tensor:
    """uint8 (N, 28, 28) -> float32 (N, 1, 28, 28), scaled to [0, 1] and standardised with the
    dataset's public mean/std constants (no statistic of the private data is used)."""
    info = DATASETS[dataset]
    x = torch.from_numpy(images).to(torch.float32).div_(255.0)
    return x.sub_(info.mean).div_(info.std).unsqueeze(1)


@torch.no_grad()
def evaluate(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, *, batch: int = 2000) -> float:
    """Accuracy in [0, 1] of ``model`` on (x, y); 0 examples give 0."""
    if len(y) == 0:
        return 0.0
    was_training = model.training
    model.eval()
    correct = 0
    for start in range(0, len(y), batch):
        logits = model(x[start:start + batch])
        correct += int((logits.argmax(1) == y[start:start + batch]).sum())
    model.train(was_training)
    return correct / len(y)


def epsilon_for_steps(accountant, *, noise_multiplier: float, sample_rate: float, steps: int,
                      delta: float, sampler: SamplerSpec | None = None) -> AccountingResult:
    """The accountant's ε for a DP-SGD history (σ, q, T) at δ (T = 0 spends nothing).

    Args:
        accountant: an :class:`dpcalc.accounting.base.Accountant`.
        noise_multiplier: σ. sample_rate: q (Poisson). steps: T ≥ 0. delta: δ in (0, 1).
        sampler: a per-step batch sampler (``without-replacement``, ``truncated-poisson``;
            :meth:`SamplerSpec.event_args`); None or ``poisson``: Poisson at rate q.

    Raises:
        InfeasibleError: the accountant's arithmetic fails for these numbers (an overflow
            or a division by zero inside it): said in one line instead of a traceback.
    """
    if steps == 0:
        return AccountingResult(accountant.name, 0.0, delta, accountant.certified,
                                details={"note": "no steps taken"}, source=accountant.source)
    event = dpsgd_event(noise_multiplier=noise_multiplier, sample_rate=sample_rate, steps=steps,
                        **(sampler.event_args() if sampler is not None else {}))
    try:
        return accountant.epsilon(event, delta=delta)
    except (OverflowError, ZeroDivisionError, FloatingPointError) as e:
        raise InfeasibleError(
            f"accountant {accountant.name} cannot evaluate epsilon for sigma={noise_multiplier:g}, "
            f"q={sample_rate:g}, {steps:,} steps, delta={delta:g} ({type(e).__name__}: {e}); "
            "try another --accountant") from None


def _n_epochs(epochs: float) -> int:
    """Number of (possibly partial) epochs in the plan: ⌈epochs⌉, at least 1."""
    return max(1, math.ceil(Fraction(repr(epochs))))


def _epoch_end(epoch: int, *, n_epochs: int, dataset_size: int, batch_size: int, planned: int) -> int:
    """Model step count at the end of epoch ``epoch`` (0-based; an epoch is N/B expected steps;
    the last epoch ends with the plan)."""
    if epoch >= n_epochs - 1:
        return planned
    return min(planned, -(-(epoch + 1) * dataset_size // batch_size))


def _first_epoch(model_steps: int, *, n_epochs: int, dataset_size: int, batch_size: int,
                 planned: int) -> int:
    """The epoch a run with ``model_steps`` steps applied continues in: the first whose end
    lies beyond them (⌊steps·B/N⌋), or ``n_epochs`` if the plan is already complete. Derived
    from the steps, not from a stored epoch index, so a resumed run may change ``--epochs``."""
    if model_steps >= planned:
        return n_epochs
    return min(model_steps * batch_size // dataset_size, n_epochs - 1)


def _budget_steps(eps_at: Callable[[int], AccountingResult], *, max_epsilon: float,
                  planned: int) -> tuple[int, float | None]:
    """The most steps ≤ planned whose ε stays ≤ max_epsilon, and the ε one step beyond it
    (None if the whole plan fits). ε is non-decreasing in T, so bisection applies.
    ``eps_at(T)`` is a certified accountant's result for T steps."""

    def eps(t: int) -> float:
        e = eps_at(t).epsilon
        return math.inf if e is None else e

    if eps(planned) <= max_epsilon:
        return planned, None
    lo, hi = 0, planned  # eps(lo) <= max (eps(0) = 0), eps(hi) > max
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if eps(mid) <= max_epsilon:
            lo = mid
        else:
            hi = mid
    return lo, eps(lo + 1)


def _make_optimizer(config: TrainConfig, model: torch.nn.Module) -> torch.optim.Optimizer:
    if config.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=config.lr)
    momentum = config.momentum if config.optimizer == "momentum" else 0.0
    return torch.optim.SGD(model.parameters(), lr=config.lr, momentum=momentum)


def _seeds(seed: int) -> tuple[int, int, int, int]:
    """Independent seeds for model initialisation, sampling, noise and the audit canaries
    (numpy SeedSequence children 0…3; child i does not depend on how many are spawned)."""
    children = np.random.SeedSequence(seed).spawn(4)
    s = [int(c.generate_state(1, dtype=np.uint64)[0] & ((1 << 63) - 1)) for c in children]
    return s[0], s[1], s[2], s[3]


def _append_log(path: str, record: EpochRecord) -> None:
    line = json.dumps(jsonable(asdict(record)), allow_nan=False) + "\n"  # a diverged loss -> null
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


def _load_data(config: TrainConfig) -> IdxDataset:
    if config.download:
        directory = download_dataset(config.dataset)
        return load_dataset(config.dataset, directory)
    return load_dataset(config.dataset, config.data_dir)


def train(
    config: TrainConfig,
    *,
    reporter: Reporter | None = None,
    on_step: Callable[[int], None] | None = None,
    data: IdxDataset | None = None,
    context: Context | None = None,
) -> TrainResult:
    """Train ``config.model`` with DP-SGD and return it with its test accuracy and certified ε.

    Args:
        config: the run (see :class:`TrainConfig`).
        reporter: progress receiver (None: silent).
        on_step: called with the ledger's step count (every step the data was used in,
            orphaned steps included) after the ledger is written and before that step's
            gradient is computed (tests use it to simulate a kill).
        data: an already loaded dataset (else found/loaded/downloaded per ``config``).

    Returns:
        :class:`TrainResult`; its ``accounting`` is the accountant's ε for
        (σ, q, steps) at ``config.delta``, where steps counts every step the data was
        used in — a resumed run adds the orphaned steps its ledger records beyond the
        checkpoint (``orphaned_steps``).

    Raises:
        ParameterError: bad settings, δ ≥ 1/N, more than :data:`MAX_STEPS` planned steps,
            a checkpoint of a different run; :class:`~dpcalc.train.checkpoint.LedgerError`
            (a ParameterError) for a corrupt ledger or one behind its checkpoint.
        InfeasibleError: ``target_epsilon`` unreachable; the accountant cannot evaluate ε.
        DataError: dataset missing or corrupt.
        CheckpointError: unusable checkpoint file.
        PeerLostError: (several processes) another rank died or stopped mid-run.
        SilentError: (several processes, rank ≠ 0) the run stopped for an error rank 0 reports.

    Several processes (``torchrun``; :mod:`dpcalc.train.distributed`): ``context`` is the
    process group (default: joined from torchrun's environment, or one process). Every rank
    returns the same result; only rank 0 writes files and reports progress.

    Process-wide settings, as for ``torch.set_num_threads`` (``config.threads``): glibc keeps
    freed memory in the process from the first call on (:func:`dpcalc.train.memory.
    keep_freed_memory`; no value changes, only speed and the memory kept between steps).
    """
    config = config.validated()
    own = context is None
    if context is None:
        context = context_from_environment(config.device)
    finished = False
    try:
        result = _train(config, reporter=reporter if context.is_main else None, on_step=on_step,
                        data=data, context=context)
        finished = True
        return result
    finally:
        if own:
            context.close(finished=finished)


def _digest(obj: torch.nn.Module | torch.Generator) -> str:
    """SHA-256 of a model's parameters and buffers or a generator's state (to check that every
    rank starts from the same state)."""
    h = hashlib.sha256()
    if isinstance(obj, torch.Generator):
        h.update(obj.get_state().numpy().tobytes())
    else:
        for name, t in obj.state_dict().items():
            h.update(name.encode())
            h.update(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _evaluate(context: Context, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """:func:`evaluate` on the whole test set, each rank counting its shard of it."""
    if not context.distributed:
        return evaluate(model, x, y)
    lo, hi = shard_bounds(len(y), context.world_size, context.rank)
    correct = round(evaluate(model, x[lo:hi], y[lo:hi]) * (hi - lo))
    total = torch.tensor([float(correct)], dtype=torch.float64, device=x.device)
    context.all_reduce_(total)
    return float(total.item()) / len(y) if len(y) else 0.0


def _train(config: TrainConfig, *, reporter: Reporter | None, on_step: Callable[[int], None] | None,
           data: IdxDataset | None, context: Context) -> TrainResult:
    rep: Reporter = reporter or _Silent()
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    keep_freed_memory()  # no page faults for each step's tensors (dpcalc/train/memory.py)
    with context.agreement() as agreed:
        if data is None:
            data = _load_data(config)
        model_seed, sampling_seed, noise_seed, canary_seed = _seeds(config.seed)
        canaries = (make_canaries(config.audit_canaries, seed=canary_seed) if config.audit_canaries
                    else None)
        # the real N: the data plus the included canaries (they are training records)
        n = data.dataset_size + (canaries.included_count if canaries is not None else 0)
        with_canaries = (f" ({data.dataset_size} data + {canaries.included_count} included canaries)"
                         if canaries is not None else "")
        if config.delta >= 1.0 / n:
            raise ParameterError(
                "delta", f"below 1/N = {1.0 / n:.3g} (N = {n} training examples)", config.delta,
                message=f"--delta must be below 1/N = {1.0 / n:.3g} for N = {n} training examples"
                        f"{with_canaries}, got {config.delta:g}: a δ that large allows a mechanism that "
                        "publishes a whole training record")
        if context.world_size > n:
            raise ParameterError(
                "nproc", f"at most the number of training records N = {n}", context.world_size,
                message=f"--nproc must be at most the number of training records N = {n}{with_canaries} "
                        f"(each process samples its own shard of them), got {context.world_size}")
        if config.batch_size > n:
            raise ParameterError("batch_size", f"at most the dataset size ({n}{with_canaries})",
                                 config.batch_size)
        spec = SamplerSpec(config.sampling, n, config.batch_size, config.max_batch_size, config.neighboring)
        poisson = spec.sampling == "poisson"
        schedule = resolve_schedule(batch_size=config.batch_size, dataset_size=n, epochs=config.epochs)
        q, planned = schedule.sample_rate, schedule.steps
        if spec.per_epoch:  # whole epochs of T = ⌈N/B⌉ batches: T' = ⌈epochs·T⌉
            planned = math.ceil(Fraction(repr(config.epochs)) * spec.steps_per_epoch)
        if planned > MAX_STEPS:
            raise ParameterError(
                "epochs", f"at most {MAX_STEPS:,} steps", planned,
                message=f"--epochs {config.epochs:g} plans T = ceil(epochs·N/B) = {planned:,} steps "
                        f"(N = {n}, B = {config.batch_size}); at most {MAX_STEPS:,} steps are supported")
        # every decision (calibration, budget stop) is taken by a certified accountant: the default
        # is the tightest certified one, and validated() refused an approximate one for decisions
        if poisson:
            accountant = get_accountant(config.accountant or default_accountant())
        elif spec.per_epoch:
            accountant = _EpochAccountant()
        else:
            accountant = _sampler_accountant(config, spec, q)

        calibration = None
        if config.noise_multiplier is not None:
            sigma = float(config.noise_multiplier)
        elif spec.per_epoch:
            calibration = _calibrate_epochs(target_epsilon=config.target_epsilon, delta=config.delta,
                                            passes=spec.passes(planned))
            sigma = float(calibration.noise_multiplier)
        else:
            calibration = calibrate_dpsgd(accountant, target_epsilon=config.target_epsilon,
                                          delta=config.delta, sample_rate=q, steps=planned,
                                          **({} if poisson else {"sampler": spec.event_args()}))
            sigma = float(calibration.noise_multiplier)

        model = build_model(config.model, seed=model_seed).to(context.device)
        optimizer = _make_optimizer(config, model)
        sampling_gen = torch.Generator().manual_seed(sampling_seed)
        noise_gen = torch.Generator().manual_seed(noise_seed)
        ledger = ckpt.PrivacyLedger(sigma, q, config.max_grad_norm, n, 0,
                                    canaries=canaries.ledger_record() if canaries is not None else None,
                                    sampling=spec.sampling, batch_size=None if poisson else spec.batch_size,
                                    max_batch_size=spec.max_batch_size)
        history: list[EpochRecord] = []
        elapsed_before, resumed_from, found_steps, lost = 0.0, None, 0, 0

        state = None
        ckdir = Path(config.checkpoint) if config.checkpoint else None
        if ckdir is not None:
            state = ckpt.load_checkpoint(ckdir) if ckdir.exists() else None
            previous = ckpt.read_ledger(ckdir) if ckdir.exists() else None
            if (state is not None or previous is not None) and not config.resume:
                raise ParameterError(
                    "checkpoint", "", str(ckdir),
                    message=f"--checkpoint {ckdir} already holds a run; pass --resume to continue it, "
                            "or choose another directory")
            hint = ("; σ was calibrated for --target-epsilon, perhaps by another accountant: pass "
                    "--noise-multiplier with the σ of the run to continue it") if calibration else ""
            if state is not None and previous is None:
                raise ckpt.LedgerError(
                    f"--resume: {ckdir} holds {ckpt.CHECKPOINT_NAME} but no {ckpt.LEDGER_NAME}: the "
                    "steps taken after the checkpoint cannot be counted; refusing to resume")
            if previous is not None:
                _check_same_ledger(previous, ledger, ckdir, hint)
                found_steps = previous.steps
            if state is not None:
                saved_print = state.get("fingerprint")
                if saved_print != config.fingerprint():
                    saved_print = saved_print if isinstance(saved_print, dict) else {}
                    diff = {k: (saved_print.get(k), val) for k, val in config.fingerprint().items()
                            if saved_print.get(k) != val}
                    raise ParameterError(
                        "resume", "", None,
                        message=f"--resume: {ckdir} was written with different settings "
                                + ", ".join(f"{k}={a!r} (now {b!r})" for k, (a, b) in diff.items()))
                try:
                    saved = ckpt.PrivacyLedger.from_json(state.get("ledger"))
                except ckpt.LedgerError as e:
                    raise ckpt.LedgerError(f"the ledger inside {ckdir / ckpt.CHECKPOINT_NAME} is "
                                           f"unusable: {e.message}") from None
                _check_same_ledger(saved, ledger, ckdir, hint)
                if previous.steps < saved.steps or previous.orphaned_steps < saved.orphaned_steps:
                    raise ckpt.LedgerError(
                        f"--resume: {ckdir / ckpt.LEDGER_NAME} records {previous.steps} steps "
                        f"({previous.orphaned_steps} orphaned) but the checkpoint it must cover has "
                        f"{saved.steps} ({saved.orphaned_steps} orphaned): the ledger is inconsistent; "
                        "refusing to resume")
                try:
                    model.load_state_dict(state["model"])
                    optimizer.load_state_dict(state["optimizer"])
                    sampling_gen.set_state(state["rng"]["sampling"])
                    noise_gen.set_state(state["rng"]["noise"])
                    elapsed_before = float(state["seconds"])
                    history = [EpochRecord(**r) for r in state["history"]]
                except (KeyError, TypeError, ValueError, RuntimeError) as e:
                    raise ckpt.CheckpointError(
                        f"checkpoint in {ckdir} is incomplete or damaged ({type(e).__name__})") from None
                ledger.steps, ledger.orphaned_steps = saved.steps, saved.orphaned_steps
                ledger.orphaned_passes = saved.orphaned_passes
            if previous is not None:
                # The steps the ledger records beyond the checkpoint were taken by the interrupted
                # run and lost with it: they become orphaned steps and stay in the accounting.
                if spec.per_epoch:  # the last run's segment (from the checkpoint on) adds the passes it
                    # touched; earlier interruptions' passes are in previous.orphaned_passes
                    ledger.orphaned_passes = previous.orphaned_passes + touched_passes(
                        ledger.model_steps, previous.model_steps - ledger.model_steps, spec.steps_per_epoch)
                lost = previous.steps - ledger.steps
                ledger.steps += lost
                ledger.orphaned_steps += lost
                resumed_from = ledger.model_steps

        def prepare(images):  # the model's inputs: normalised pixels, or fixed per-example features
            if config.model in SCATTERNET_MODELS:  # no parameters, no data statistic: scatternet.py
                return scattered_inputs(images, notify=rep.message)
            return prepare_images(images, config.dataset)

        x_train = prepare(data.train_images)
        y_train = torch.from_numpy(data.train_labels)
        if canaries is not None:  # the included canaries are appended: indices N_data … N − 1
            x_canary = prepare(canaries.images)
            y_canary = torch.from_numpy(canaries.labels)
            keep = torch.from_numpy(canaries.included)
            x_train = torch.cat([x_train, x_canary[keep]])
            y_train = torch.cat([y_train, y_canary[keep]])
        x_test = prepare(data.test_images)
        y_test = torch.from_numpy(data.test_labels)

        step_args = dict(noise_multiplier=sigma, max_grad_norm=config.max_grad_norm,
                         expected_batch_size=q * n, max_physical_batch=config.max_physical_batch,
                         noise_generator=noise_gen)
        lo, hi = 0, n
        if context.distributed:  # this rank's shard; global Poisson sampling, one noise draw per step
            lo, hi = shard_bounds(n, context.world_size, context.rank)
            x_train, y_train = x_train[lo:hi].clone(), y_train[lo:hi].clone()
            dp = DistributedDPSGDStep(model, optimizer, context=context, **step_args)
            sampler = ShardSampler(dataset_size=n, sample_rate=q, generator=sampling_gen, lo=lo, hi=hi)
        else:
            dp = DPSGDStep(model, optimizer, **step_args)
            sampler = PoissonSampler(dataset_size=n, sample_rate=q, generator=sampling_gen)
        if poisson:
            def draw(step: int) -> torch.Tensor:
                return sampler.sample()
        else:  # the sampler seeded by (seed, step | epoch): every rank draws the same global batch
            batch_sampler = make_sampler(spec.sampling, dataset_size=n, batch_size=spec.batch_size, seed=sampling_seed,
                                   max_batch_size=spec.max_batch_size)

            def draw(step: int) -> torch.Tensor:
                idx = batch_sampler.batch(step)
                if context.distributed:  # keep this rank's shard, indices relative to it
                    idx = idx[(idx >= lo) & (idx < hi)] - lo
                return idx
        x_train, y_train = x_train.to(context.device), y_train.to(context.device)
        x_test, y_test = x_test.to(context.device), y_test.to(context.device)
        n_epochs = _n_epochs(config.epochs)
        layout = dict(n_epochs=n_epochs, dataset_size=n, batch_size=config.batch_size, planned=planned)
        if spec.per_epoch:  # an epoch is exactly T = ⌈N/B⌉ steps
            layout.update(dataset_size=spec.steps_per_epoch, batch_size=1)

        eps_cache: dict[int, AccountingResult] = {}

        def eps_at(t: int) -> AccountingResult:
            if t not in eps_cache:
                if spec.per_epoch:  # t counts the orphaned steps, accounted as their passes
                    eps_cache[t] = epoch_sampler_epsilon(
                        noise_multiplier=sigma, delta=config.delta,
                        passes=spec.passes(t - ledger.orphaned_steps, ledger.orphaned_passes))
                else:
                    eps_cache[t] = epsilon_for_steps(accountant, noise_multiplier=sigma, sample_rate=q,
                                                     steps=t, delta=config.delta,
                                                     sampler=None if poisson else spec)
            return eps_cache[t]

        def eps_now() -> AccountingResult:
            return eps_at(ledger.steps)

        # Total steps if the plan completes (orphaned steps included); evaluated before the first
        # step, so an accountant that cannot answer fails before any data is used.
        orphaned = ledger.orphaned_steps
        final_total = max(planned, ledger.model_steps) + orphaned
        budget_model = planned  # most model steps the budget allows
        eps_beyond = None
        if config.max_epsilon is not None:
            budget_total, eps_beyond = _budget_steps(eps_at, max_epsilon=config.max_epsilon,
                                                     planned=final_total)
            budget_model = budget_total - orphaned
        else:
            eps_at(final_total)
        agreed.update(n=n, sigma=sigma, q=q, planned=planned, budget_model=budget_model,
                      steps=ledger.steps, orphaned=ledger.orphaned_steps,
                      model_state=_digest(model), generators=(_digest(sampling_gen), _digest(noise_gen)))
    writes = context.is_main  # rank 0 owns the files
    if ckdir is not None:
        context.ledger_note = (f"; the privacy ledger {ckdir / ckpt.LEDGER_NAME} counts every step taken "
                               "(--resume continues the run)")
    if ckdir is not None and writes:  # written once the run is known to be feasible; a
        ckpt.write_ledger(ckdir, ledger)  # checkpoint is never without its ledger

    notes = []
    if canaries is not None:
        notes.append(f"{canaries.count} audit canaries, {canaries.included_count} included: "
                     f"N = {n} training records{with_canaries}")
    if config.resume and resumed_from is None:
        notes.append(f"--resume: no run in {ckdir} yet; starting a new one")
    if resumed_from is not None:
        where = (f"resumed at step {resumed_from} (epoch {_first_epoch(resumed_from, **layout) + 1})"
                 if state is not None else "resumed: no checkpoint yet, so training restarts at step 0")
        notes.append(f"{where}; the ledger shows {found_steps} steps taken before the interruption")
        if lost:
            notes.append(f"{lost} orphaned steps (taken after the last checkpoint, their updates "
                         f"lost) stay in the accounting: ε covers all steps the data is used in")
        if ledger.model_steps >= planned:
            notes.append(f"the checkpoint already holds {ledger.model_steps} steps, the {planned} "
                         "planned included: no step to take")
    rep.start(config=config, noise_multiplier=sigma, sample_rate=q, planned_steps=planned,
              accountant=accountant.name, note="; ".join(notes) or None, dataset_size=n)

    def stop_message() -> str:
        also = f" ({orphaned} orphaned steps also counted)" if orphaned else ""
        if budget_model < ledger.model_steps:
            spent = eps_now().epsilon
            return (f"no step taken: the {ledger.steps} steps already recorded{also} give "
                    f"ε ({accountant.name}) = {spent:.4g} > --max-epsilon {config.max_epsilon:g}")
        return (f"stopped after {ledger.model_steps} of {planned} planned steps{also}: the next step "
                f"would raise ε ({accountant.name}) to {eps_beyond:.4g} > --max-epsilon "
                f"{config.max_epsilon:g}")

    stopped = None
    t0 = time.perf_counter()
    model.train()
    first = _first_epoch(ledger.model_steps, **layout)
    if budget_model <= ledger.model_steps and budget_model < planned:
        first = n_epochs  # the budget allows no further step
    for epoch in range(first, n_epochs):
        end = min(_epoch_end(epoch, **layout), budget_model)
        rep.start_epoch(epoch, n_epochs, end - ledger.model_steps, eps_now().epsilon)
        loss_sum, examples, batches = 0.0, 0, 0
        while ledger.model_steps < end:
            idx = draw(ledger.model_steps).to(context.device)
            ledger.steps += 1  # count the step before anything of it is computed or applied
            context.step = ledger.steps
            if ckdir is not None and writes:  # before rank 0 joins the step's all-reduce
                ckpt.write_ledger(ckdir, ledger)
            if on_step is not None:
                on_step(ledger.steps)
            context.maybe_kill(ledger.steps)
            out = dp.step(x_train[idx], y_train[idx])
            loss_sum += out.loss_sum
            examples += out.batch_size
            batches += 1
            rep.step(loss=out.loss_sum / out.batch_size if out.batch_size else None,
                     batch_size=out.batch_size)
        context.same_weights(model)
        acc = _evaluate(context, model, x_test, y_test)
        eps = eps_now()
        record = EpochRecord(
            epoch=epoch + 1, steps=ledger.steps, epsilon=eps.epsilon, delta=config.delta,
            accountant=accountant.name, train_loss=loss_sum / examples if examples else None,
            mean_batch_size=examples / batches if batches else None, test_accuracy=acc,
            seconds=elapsed_before + time.perf_counter() - t0)
        history.append(record)
        if ckdir is not None and writes:
            ckpt.save_checkpoint(ckdir, {
                "fingerprint": config.fingerprint(),
                "epoch": _first_epoch(ledger.model_steps, **layout),  # informational
                "ledger": ledger.to_json(),
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "rng": {"sampling": sampling_gen.get_state(), "noise": noise_gen.get_state()},
                "history": [asdict(r) for r in history],
                "seconds": record.seconds,
                "dpcalc_version": __version__,
            })
        if config.log and writes:
            _append_log(config.log, record)
        rep.end_epoch(record)
        if ledger.model_steps >= budget_model and budget_model < planned:
            break
    if config.max_epsilon is not None and budget_model < planned and (
            ledger.model_steps < planned or budget_model < ledger.model_steps):
        stopped = stop_message()
        rep.message(stopped)

    steps = ledger.steps
    final = eps_now()
    test_accuracy = history[-1].test_accuracy if history else _evaluate(context, model, x_test, y_test)
    seconds = elapsed_before + time.perf_counter() - t0
    result = TrainResult(
        model=model, accounting=final, noise_multiplier=sigma, sample_rate=q, steps=steps,
        planned_steps=planned, epochs=steps / spec.steps_per_epoch if spec.per_epoch else steps * q,
        test_accuracy=test_accuracy, seconds=seconds,
        dataset_size=n, stopped=stopped, history=history, calibration=calibration,
        resumed_from_steps=resumed_from, orphaned_steps=ledger.orphaned_steps,
        sampler=None if poisson else _sampler_record(spec, ledger, sigma=sigma, q=q, delta=config.delta))
    if canaries is not None:
        result.canaries = CanaryOutcome(canaries.ledger_record(), canaries.included.copy(),
                                        canary_scores(model, x_canary.to(context.device),
                                                      y_canary.to(context.device)))
    if config.save_model and writes:
        save_model(result, config)
    return result


def _sampler_accountant(config: TrainConfig, spec: SamplerSpec, q: float):
    """The accountant of a per-step non-Poisson sampler under its adjacency: ``--accountant`` if it
    has a proof for the sampler (else refused with the reason), by default the first certified
    one that has (:func:`~dpcalc.accounting._sampling.default_accountant_for`)."""
    probe = dpsgd_event(noise_multiplier=1.0, sample_rate=q, steps=1, **spec.event_args())
    name = config.accountant or default_accountant_for(probe, spec.neighboring)
    accountant = get_accountant(name, neighboring=spec.neighboring)
    try:
        accountant.check(probe)
    except UnsupportedEventError as e:
        raise ParameterError("accountant", "", name, message=(
            f"--accountant {name} cannot account for --sampling {spec.sampling} ({spec.neighboring} adjacency): "
            f"{e}")) from None
    return accountant


def _sampler_record(spec: SamplerSpec, ledger: ckpt.PrivacyLedger, *, sigma: float, q: float,
                    delta: float) -> dict:
    """The ``details`` a non-Poisson run adds to its result: the sampler, its adjacency and, for
    the epoch samplers, the bracket (proven lower bound, certified ε) and the Poisson ε."""
    out: dict[str, Any] = {"sampling": spec.sampling, "batch_size": spec.batch_size, "adjacency": spec.neighboring}
    if spec.max_batch_size is not None:
        out["max_batch_size"] = spec.max_batch_size
    if not spec.per_epoch:
        return out
    t = spec.steps_per_epoch
    passes = spec.passes(ledger.model_steps, ledger.orphaned_passes)
    # the lower bound holds for the whole epochs applied to the model (an adversary may ignore
    # the other steps); never above the certified number
    full = ledger.model_steps // t
    lower = pois = None
    # the bracket and the Poisson number are shown beside ε; the training is done, so a numerical
    # failure of either (extreme σ or T) leaves it out with the reason rather than losing the run
    if full >= 1:
        low = (shuffling.shuffle_lower_epsilon if spec.sampling == "shuffle"
               else shuffling.balls_in_bins_lower_epsilon)
        try:
            lower = low(noise_multiplier=sigma, steps_per_epoch=t, epochs=full, delta=delta)
        except (DpcalcError, GridTooLargeError, OverflowError, FloatingPointError) as e:
            out["epsilon_lower_reason"] = f"lower bound not computed: {e}"
        else:
            upper = epoch_sampler_epsilon(noise_multiplier=sigma, passes=passes, delta=delta).epsilon
            lower = min(lower, upper)
    if ledger.steps:
        try:
            pois = epsilon_for_steps(get_accountant("pld"), noise_multiplier=sigma, sample_rate=q,
                                     steps=ledger.steps, delta=delta).epsilon
        except (DpcalcError, GridTooLargeError, OverflowError, FloatingPointError) as e:
            out["poisson_epsilon_reason"] = f"Poisson ε not computed: {e}"
    out.update(adjacency="zero-out", steps_per_epoch=t, passes=passes, orphaned_passes=ledger.orphaned_passes,
               epsilon_lower=lower, lower_bound_epochs=full, poisson_epsilon=pois,
               poisson_accountant="pld",
               source_lower=(shuffling.SOURCE_SHUFFLE_LOWER if spec.sampling == "shuffle"
                             else shuffling.SOURCE_BNB + ", max-statistic pair"))
    return out


def _check_same_ledger(old: ckpt.PrivacyLedger, new: ckpt.PrivacyLedger, ckdir: Path,
                       hint: str = "") -> None:
    if old.canaries != new.canaries:
        def said(c):
            return "no canaries" if c is None else f"{c['count']} canaries (seed {c['seed']})"
        raise ParameterError(
            "resume", "", None,
            message=f"--resume: {ckdir} was trained with {said(old.canaries)}, this run has "
                    f"{said(new.canaries)}: the canaries are training records and must stay the same")
    for key in ("sampling", "batch_size", "max_batch_size", "noise_multiplier", "sample_rate", "max_grad_norm",
                "dataset_size"):
        a, b = getattr(old, key), getattr(new, key)
        if a != b:
            raise ParameterError(
                "resume", "", None,
                message=f"--resume: {ckdir} was trained with {key}={a!r}, this run has {b!r}"
                        + (hint if key == "noise_multiplier" else ""))


def save_model(result: TrainResult, config: TrainConfig) -> tuple[Path, Path]:
    """Write the state dict to ``config.save_model`` and a JSON sidecar ``<file>.json`` with
    the privacy parameters (both atomically)."""
    path = Path(config.save_model)
    sidecar = path.with_name(path.name + ".json")
    ckpt.atomic_torch_save(result.model.state_dict(), path, option="--save-model")
    meta = {
        "dpcalc_version": __version__,
        "model": config.model,
        "dataset": config.dataset,
        "max_grad_norm": config.max_grad_norm,
        "batch_size": config.batch_size,
        "optimizer": config.optimizer,
        "lr": config.lr,
        "seed": config.seed,
        **{k: val for k, val in result.to_json().items() if k != "source"},
    }
    ckpt.atomic_write_bytes(sidecar, (json.dumps(meta, indent=2, allow_nan=False) + "\n").encode(),
                            option="--save-model")
    return path, sidecar
