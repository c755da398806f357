"""The trainer's side of the ledger: reserve a DP-SGD run before its first step, record its
steps as they are taken (docs/design.md §11).

:class:`LedgerHooks` plugs into :func:`dpcalc.train.loop.train` through the hooks it already
has — the progress reporter's ``start`` (called with σ, q, N and the planned steps T before the
first step) and ``on_step`` (called with the trainer's privacy-ledger step count, after that
count is written and before the step's gradient is computed) — so the training loop itself
does not change. The step count is the trainer's own (:mod:`dpcalc.train.checkpoint`:
a step is counted before anything of it is computed).

Every ``--sampling`` with a sound charge on the dataset's adjacency is recorded, as the step
:func:`dpcalc.ledger.api.training_step` builds (per step; for ``shuffle`` / ``balls-in-bins`` each
epoch touched is one Gaussian run, counted from the epoch's first step); the others are refused
with the reason when the hooks are made, before any data is loaded
(:data:`dpcalc.ledger.api.SAMPLER_REASONS`, docs/design.md §11).
"""

from __future__ import annotations

from typing import Any

from dpcalc.errors import ParameterError
from dpcalc.ledger.api import Ledger, TrainingRun, check_training_sampling, training_step

__all__ = ["LedgerHooks"]


class LedgerHooks:
    """Reporter wrapper + ``on_step`` callback that keep a ledger row for one training run.

    Args:
        ledger: the open ledger.
        dataset: the dataset's name in the ledger.
        inner: the reporter to forward progress to (None: silent).
        params: extra parameters to record (model, batch size, C, N, ...).
        command: the command line (default ``sys.argv``).
        sampling: the trainer's ``--sampling``.

    Raises:
        ParameterError: an unknown dataset, or a sampler without a sound charge on its adjacency
            (checked here, before any work).
    """

    def __init__(self, ledger: Ledger, dataset: str, inner: Any = None, *,
                 params: dict | None = None, command: list[str] | None = None,
                 sampling: str = "poisson") -> None:
        self.ledger, self.dataset, self.inner = ledger, dataset, inner
        self.params, self.command = dict(params or {}), command
        self.sampling = sampling
        self.run: TrainingRun | None = None
        check_training_sampling(sampling, ledger.dataset(dataset))  # fails before any work

    # -- reporter protocol ----------------------------------------------------------------------

    def start(self, **kwargs: Any) -> None:
        """Reserve the run (σ, q, T from the trainer) before its first step.

        Raises:
            BudgetExceededError: the filter refuses the planned steps: the run stops here.
        """
        config = kwargs.get("config")
        sigma, q = kwargs["noise_multiplier"], kwargs["sample_rate"]
        n = kwargs.get("dataset_size")
        batch = getattr(config, "batch_size", None)
        cap = getattr(config, "max_batch_size", None)
        ds = self.ledger.dataset(self.dataset)
        step = training_step(self.sampling, ds, noise_multiplier=sigma, sample_rate=q, batch_size=batch,
                             dataset_size=n, max_batch_size=cap)
        params = dict(self.params)
        if self.sampling != "poisson":  # (a Poisson run's row is as before)
            params.update(sampling=self.sampling, adjacency=ds.adjacency, dataset_size=n,
                          **({"max_batch_size": cap} if cap is not None else {}))
        self.run = self.ledger.start_training(
            self.dataset, noise_multiplier=sigma, sample_rate=q, steps=kwargs["planned_steps"],
            params=params, command=self.command, step_event=step)
        if self.inner is not None:
            self.inner.start(**kwargs)

    def start_epoch(self, *args: Any, **kwargs: Any) -> None:
        if self.inner is not None:
            self.inner.start_epoch(*args, **kwargs)

    def step(self, **kwargs: Any) -> None:
        if self.inner is not None:
            self.inner.step(**kwargs)

    def end_epoch(self, record: Any) -> None:
        if self.inner is not None:
            self.inner.end_epoch(record)

    def message(self, text: str) -> None:
        if self.inner is not None:
            self.inner.message(text)

    # -- steps ----------------------------------------------------------------------------------

    def on_step(self, steps: int) -> None:
        """The trainer counted step ``steps`` (before computing it): record it.

        Raises:
            ParameterError: no reservation yet, or more steps than reserved.
        """
        if self.run is None:
            raise ParameterError("ledger", "", None, message="a training step before the run was reserved")
        self.run.step(steps)

    def finish(self, steps: int) -> None:
        """The run ended after ``steps`` steps: count those from now on."""
        if self.run is not None:
            self.run.finish(steps)

    def summary(self) -> dict:
        """The run's row and its dataset's spending (JSON-ready)."""
        ds = self.ledger.dataset(self.dataset)
        eps, left = self.ledger.epsilon_now(ds)  # O(1) in the ledger's size
        rec = None if self.run is None else self.ledger.record(self.run.event_id)
        return {"file": str(self.ledger.path), "dataset": ds.name,
                "event": None if rec is None else rec.id,
                "steps_reserved": None if rec is None else rec.steps_reserved,
                "steps_taken": None if rec is None else rec.steps_taken,
                "filter_epsilon": eps, "budget_epsilon": ds.budget_epsilon, "delta": ds.delta,
                "left": left, "filter": "rdp-filter"}
