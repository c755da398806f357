"""The rich progress display of ``dpcalc train`` (on stderr, so ``--json`` stdout stays clean).

The trainer (``dpcalc.train``) knows nothing of the display: it reports through the
:class:`dpcalc.train.results.Reporter` protocol, which :class:`RichReporter` implements here in
the CLI layer (layers import only downward: cli → train; docs/design.md §2).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from dpcalc.cli.render import fmt

if TYPE_CHECKING:  # type hints only: importing this module does not import torch
    from dpcalc.train.config import TrainConfig
    from dpcalc.train.results import EpochRecord

__all__ = ["RichReporter"]


class RichReporter:
    """One progress bar per epoch (loss, batch size, ε so far) and one summary line per epoch.

    Args:
        console: where to print (default: a rich console on stderr; the bar is shown only
            on a terminal, the per-epoch lines always).
    """

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True, highlight=False)
        self.progress: Progress | None = None
        self.task: Any = None
        self.epsilon: float | None = None
        self.accountant = ""

    def start(self, *, config: TrainConfig, noise_multiplier: float, sample_rate: float,
              planned_steps: int, accountant: str, note: str | None, dataset_size: int | None = None) -> None:
        self.accountant = accountant
        how = "calibrated for ε = " + fmt(config.target_epsilon) if config.target_epsilon else "given"
        self.console.print(
            f"DP-SGD on {config.dataset} ({config.model}): σ = {fmt(noise_multiplier)} ({how}), "
            f"q = {fmt(sample_rate)}, C = {fmt(config.max_grad_norm)}, {planned_steps:,} steps planned, "
            f"δ = {config.delta:g}, accountant {accountant}")
        if note:
            self.console.print(note)

    def start_epoch(self, epoch: int, epochs: int, steps: int, epsilon: float) -> None:
        self.epsilon = epsilon
        if not self.console.is_terminal:  # logs get the per-epoch lines only
            return
        self.progress = Progress(
            TextColumn(f"epoch {epoch + 1}/{epochs}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"), TimeElapsedColumn(),
            console=self.console, transient=True)
        self.progress.start()
        self.task = self.progress.add_task("train", total=max(steps, 0), info=self._info(None, None))

    def _info(self, loss: float | None, batch: int | None) -> str:
        return (f"loss {fmt(loss, 4)}  batch {fmt(batch)}  "
                f"ε so far {fmt(self.epsilon, 4)} ({self.accountant})")

    def step(self, *, loss: float | None, batch_size: int) -> None:
        if self.progress is not None:
            self.progress.update(self.task, advance=1, info=self._info(loss, batch_size))

    def end_epoch(self, record: EpochRecord) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
        self.console.print(
            f"epoch {record.epoch}: steps {record.steps:,}  train loss {fmt(record.train_loss, 4)} "
            f"(not private)  test accuracy {record.test_accuracy:.2%}  "
            f"ε = {fmt(record.epsilon, 4)} at δ = {record.delta:g} ({record.accountant})  "
            f"{record.seconds:.0f} s")

    def message(self, text: str) -> None:
        self.console.print(text)
