"""What a ``dpcalc train`` run gives back and reports as it goes: the result types
(:class:`TrainResult`, one :class:`EpochRecord` per epoch, the :class:`CanaryOutcome` of an
audit) and the :class:`Reporter` protocol the progress display implements (``dpcalc.cli.progress``;
the library default, :class:`SilentReporter`, shows nothing).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from dpcalc.results import AccountingResult, jsonable
from dpcalc.train.config import TrainConfig

__all__ = ["EpochRecord", "CanaryOutcome", "TrainResult", "Reporter", "SilentReporter"]


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
    ``users``: ``--privacy-unit user``: the users' record (:mod:`dpcalc.train.users`); then
    ``dataset_size`` is the number of users U, q = B/U and ε is user-level. None at the record level.
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
    notes: list[str] = field(default_factory=list)
    users: dict | None = None

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
        if self.users is not None:  # user level: dataset_size and q count users (dpcalc/train/users.py)
            details.update(privacy_unit="user", users=self.users["users"], records=self.users["records"],
                           max_records_per_user=self.users["max_records_per_user"],
                           user_grouping=self.users)
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


class SilentReporter:
    """The library default: a :class:`Reporter` that shows nothing."""

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
