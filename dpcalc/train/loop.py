"""The DP-SGD training job behind ``dpcalc train``: data -> calibrated σ -> training -> certified ε.

The ε reported is computed by a dpcalc accountant from (σ, q, steps actually taken) —
exactly what ``dpcalc epsilon --sigma σ --sample-rate q --steps T --delta δ
--accountant NAME`` prints for the same numbers. ``--target-epsilon`` calibrates σ with
:func:`dpcalc.accounting.calibrate.calibrate_dpsgd`, the helper behind ``dpcalc sigma``,
for the planned schedule q = B/N, T = ⌈epochs·N/B⌉ (:func:`dpcalc.events.resolve_schedule`).

Privacy notes: the accountant certifies the released model(s) — checkpoints, the saved
model and the test accuracy (the test set is not training data). The per-epoch training
loss shown in the progress display and the log is *not* privatised; do not publish it
as part of a DP release.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from dpcalc import __version__
from dpcalc import _validate as v
from dpcalc.accounting.calibrate import calibrate_dpsgd
from dpcalc.accounting.registry import default_accountant, get_accountant
from dpcalc.errors import ParameterError
from dpcalc.events import dpsgd_event, resolve_schedule
from dpcalc.results import AccountingResult
from dpcalc.train import checkpoint as ckpt
from dpcalc.train.data import DATASETS, IdxDataset, download_dataset, load_dataset
from dpcalc.train.dpsgd import DPSGDStep, PoissonSampler
from dpcalc.train.models import MODELS, build_model

__all__ = ["TrainConfig", "TrainResult", "EpochRecord", "Reporter", "train", "prepare_images",
           "evaluate", "epsilon_for_steps", "OPTIMIZERS"]

OPTIMIZERS = ("sgd", "momentum", "adam")


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

    def validated(self) -> TrainConfig:
        """The config with every field checked.

        Raises:
            ParameterError: a field out of range, or both/neither of σ and target ε.
        """
        v.choice("dataset", self.dataset, tuple(DATASETS))
        v.choice("model", self.model, tuple(MODELS))
        v.choice("optimizer", self.optimizer, OPTIMIZERS)
        v.positive("epochs", self.epochs)
        v.count("batch_size", self.batch_size)
        v.positive("lr", self.lr)
        m = v.nonnegative("momentum", self.momentum)
        if m >= 1:
            raise ParameterError("momentum", "in [0, 1)", m)
        v.positive("max_grad_norm", self.max_grad_norm)
        if (self.noise_multiplier is None) == (self.target_epsilon is None):
            raise ParameterError(
                "noise_multiplier", "", None,
                message="give exactly one of --noise-multiplier and --target-epsilon")
        if self.noise_multiplier is not None:
            v.positive("noise_multiplier", self.noise_multiplier)
        if self.target_epsilon is not None:
            v.positive("target_epsilon", self.target_epsilon)
        v.open_unit("delta", self.delta)
        if self.max_epsilon is not None:
            v.positive("max_epsilon", self.max_epsilon)
        v.count("max_physical_batch", self.max_physical_batch)
        v.count("seed", self.seed, minimum=0)
        if self.threads is not None:
            v.count("threads", self.threads)
        if self.resume and self.checkpoint is None:
            raise ParameterError("resume", "", None, message="--resume needs --checkpoint DIR")
        if self.download and self.data_dir is not None:
            raise ParameterError("download", "", None,
                                 message="give either --download or --data-dir, not both")
        return self

    def fingerprint(self) -> dict:
        """The settings a resumed run must share with the checkpoint it continues."""
        keys = ("dataset", "model", "batch_size", "lr", "optimizer", "momentum", "max_grad_norm",
                "seed", "max_physical_batch")
        return {k: getattr(self, k) for k in keys}


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


@dataclass
class TrainResult:
    """The outcome of a run: the model, its test accuracy and the certified ε.

    ``accounting`` is the accountant's own result for (σ, q, steps) at δ.
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

    def to_json(self) -> dict:
        """The ``results[0]`` entry of ``dpcalc train --json`` (docs/design.md §5)."""
        acc = self.accounting
        details: dict[str, Any] = dict(acc.details)
        details.update(planned_steps=self.planned_steps, dataset_size=self.dataset_size,
                       expected_batch_size=self.sample_rate * self.dataset_size)
        if self.stopped:
            details["stopped"] = self.stopped
        if self.calibration is not None:
            details["calibrated_for_epsilon"] = self.calibration.details.get("target_epsilon")
        if self.resumed_from_steps is not None:
            details["resumed_from_steps"] = self.resumed_from_steps
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
        from dpcalc.results import jsonable

        return jsonable(out)


class Reporter(Protocol):
    """Receives progress (the CLI shows a rich progress bar; the library default is silent)."""

    def start(self, *, config: TrainConfig, noise_multiplier: float, sample_rate: float,
              planned_steps: int, accountant: str, note: str | None) -> None: ...

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
                      delta: float) -> AccountingResult:
    """The accountant's ε for a DP-SGD history (σ, q, T) at δ (T = 0 spends nothing)."""
    if steps == 0:
        return AccountingResult(accountant.name, 0.0, delta, accountant.certified,
                                details={"note": "no steps taken"}, source=accountant.source)
    event = dpsgd_event(noise_multiplier=noise_multiplier, sample_rate=sample_rate, steps=steps)
    return accountant.epsilon(event, delta=delta)


def _epoch_ends(*, epochs: float, dataset_size: int, batch_size: int, total_steps: int) -> list[int]:
    """Cumulative step count at the end of each epoch (an epoch is N/B expected steps)."""
    n_epochs = max(1, math.ceil(Fraction(repr(epochs))))
    ends = [min(total_steps, math.ceil(Fraction(e + 1) * dataset_size / batch_size))
            for e in range(n_epochs)]
    ends[-1] = total_steps
    return ends


def _budget_steps(accountant, *, max_epsilon: float, noise_multiplier: float, sample_rate: float,
                  delta: float, planned: int) -> tuple[int, float | None]:
    """The most steps ≤ planned whose ε stays ≤ max_epsilon, and the ε one step beyond it
    (None if the whole plan fits). ε is non-decreasing in T, so bisection applies."""

    def eps(t: int) -> float:
        e = epsilon_for_steps(accountant, noise_multiplier=noise_multiplier, sample_rate=sample_rate,
                              steps=t, delta=delta).epsilon
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


def _seeds(seed: int) -> tuple[int, int, int]:
    """Independent seeds for model initialisation, sampling and noise (numpy SeedSequence)."""
    children = np.random.SeedSequence(seed).spawn(3)
    s = [int(c.generate_state(1, dtype=np.uint64)[0] & ((1 << 63) - 1)) for c in children]
    return s[0], s[1], s[2]


def _append_log(path: str, record: EpochRecord) -> None:
    line = json.dumps(asdict(record), allow_nan=False) + "\n"
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
) -> TrainResult:
    """Train ``config.model`` with DP-SGD and return it with its test accuracy and certified ε.

    Args:
        config: the run (see :class:`TrainConfig`).
        reporter: progress receiver (None: silent).
        on_step: called with the ledger's step count after the ledger is written and
            before that step's gradient is computed (tests use it to simulate a kill).
        data: an already loaded dataset (else found/loaded/downloaded per ``config``).

    Returns:
        :class:`TrainResult`; its ``accounting`` is the accountant's ε for
        (σ, q, steps taken) at ``config.delta``.

    Raises:
        ParameterError: bad settings, δ ≥ 1/N, a checkpoint of a different run.
        InfeasibleError: ``target_epsilon`` unreachable.
        DataError: dataset missing or corrupt.
        CheckpointError: unusable checkpoint directory.
    """
    config = config.validated()
    rep: Reporter = reporter or _Silent()
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    if data is None:
        data = _load_data(config)
    n = data.dataset_size
    if config.delta >= 1.0 / n:
        raise ParameterError(
            "delta", f"below 1/N = {1.0 / n:.3g} (N = {n} training examples)", config.delta,
            message=f"--delta must be below 1/N = {1.0 / n:.3g} for N = {n} training examples, got "
                    f"{config.delta:g}: a δ that large allows a mechanism that publishes a whole "
                    "training record")
    if config.batch_size > n:
        raise ParameterError("batch_size", f"at most the dataset size ({n})", config.batch_size)
    schedule = resolve_schedule(batch_size=config.batch_size, dataset_size=n, epochs=config.epochs)
    q, planned = schedule.sample_rate, schedule.steps
    accountant = get_accountant(config.accountant or default_accountant())

    calibration = None
    if config.noise_multiplier is not None:
        sigma = float(config.noise_multiplier)
    else:
        calibration = calibrate_dpsgd(accountant, target_epsilon=config.target_epsilon,
                                      delta=config.delta, sample_rate=q, steps=planned)
        sigma = float(calibration.noise_multiplier)

    budget_steps, eps_beyond = planned, None
    if config.max_epsilon is not None:
        budget_steps, eps_beyond = _budget_steps(
            accountant, max_epsilon=config.max_epsilon, noise_multiplier=sigma, sample_rate=q,
            delta=config.delta, planned=planned)

    model_seed, sampling_seed, noise_seed = _seeds(config.seed)
    model = build_model(config.model, seed=model_seed)
    optimizer = _make_optimizer(config, model)
    sampling_gen = torch.Generator().manual_seed(sampling_seed)
    noise_gen = torch.Generator().manual_seed(noise_seed)
    ledger = ckpt.PrivacyLedger(sigma, q, config.max_grad_norm, n, 0)
    history: list[EpochRecord] = []
    start_epoch, elapsed_before, ledger_high_water, resumed_from = 0, 0.0, 0, None

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
        if previous is not None:
            _check_same_ledger(previous, ledger, ckdir, hint)
            ledger_high_water = previous.steps
        if state is not None:
            if state["fingerprint"] != config.fingerprint():
                diff = {k: (state["fingerprint"].get(k), val) for k, val in config.fingerprint().items()
                        if state["fingerprint"].get(k) != val}
                raise ParameterError(
                    "resume", "", None,
                    message=f"--resume: {ckdir} was written with different settings "
                            + ", ".join(f"{k}={a!r} (now {b!r})" for k, (a, b) in diff.items()))
            _check_same_ledger(ckpt.PrivacyLedger.from_json(state["ledger"]), ledger, ckdir, hint)
            try:
                model.load_state_dict(state["model"])
                optimizer.load_state_dict(state["optimizer"])
                sampling_gen.set_state(state["rng"]["sampling"])
                noise_gen.set_state(state["rng"]["noise"])
                ledger.steps = int(state["ledger"]["steps"])
                start_epoch = int(state["epoch"])
                elapsed_before = float(state["seconds"])
                history = [EpochRecord(**r) for r in state["history"]]
            except (KeyError, TypeError, ValueError, RuntimeError) as e:
                raise ckpt.CheckpointError(
                    f"checkpoint in {ckdir} is incomplete or damaged ({type(e).__name__})") from None
            resumed_from = ledger.steps
            ledger_high_water = max(ledger_high_water, ledger.steps)
        elif previous is not None:
            resumed_from = 0  # killed during the first epoch: replay from the seed

    x_train = prepare_images(data.train_images, config.dataset)
    y_train = torch.from_numpy(data.train_labels)
    x_test = prepare_images(data.test_images, config.dataset)
    y_test = torch.from_numpy(data.test_labels)

    dp = DPSGDStep(model, optimizer, noise_multiplier=sigma, max_grad_norm=config.max_grad_norm,
                   expected_batch_size=q * n, max_physical_batch=config.max_physical_batch,
                   noise_generator=noise_gen)
    sampler = PoissonSampler(dataset_size=n, sample_rate=q, generator=sampling_gen)
    ends = _epoch_ends(epochs=config.epochs, dataset_size=n, batch_size=config.batch_size,
                       total_steps=planned)

    def reported_steps() -> int:
        return max(ledger.steps, ledger_high_water)

    eps_cache: dict[int, AccountingResult] = {}

    def eps_now() -> AccountingResult:
        t = reported_steps()
        if t not in eps_cache:
            eps_cache[t] = epsilon_for_steps(accountant, noise_multiplier=sigma, sample_rate=q,
                                             steps=t, delta=config.delta)
        return eps_cache[t]

    note = None
    if config.resume and resumed_from is None:
        note = f"--resume: no run in {ckdir} yet; starting a new one"
    if resumed_from is not None:
        note = (f"resumed at step {resumed_from} (epoch {start_epoch}); the ledger shows "
                f"{ledger_high_water} steps taken before the interruption")
    rep.start(config=config, noise_multiplier=sigma, sample_rate=q, planned_steps=planned,
              accountant=accountant.name, note=note)

    stopped = None
    t0 = time.perf_counter()
    model.train()
    for epoch in range(start_epoch, len(ends)):
        end = min(ends[epoch], budget_steps)
        rep.start_epoch(epoch, len(ends), end - ledger.steps, eps_now().epsilon)
        loss_sum, examples, batches = 0.0, 0, 0
        while ledger.steps < end:
            idx = sampler.sample()
            ledger.steps += 1  # count the step before anything of it is computed or applied
            if ckdir is not None:  # (during a replay after resume, keep the high-water mark)
                ckpt.write_ledger(ckdir, dataclasses.replace(ledger, steps=reported_steps()))
            if on_step is not None:
                on_step(ledger.steps)
            out = dp.step(x_train[idx], y_train[idx])
            loss_sum += out.loss_sum
            examples += out.batch_size
            batches += 1
            rep.step(loss=out.loss_sum / out.batch_size if out.batch_size else None,
                     batch_size=out.batch_size)
        acc = evaluate(model, x_test, y_test)
        eps = eps_now()
        record = EpochRecord(
            epoch=epoch + 1, steps=reported_steps(), epsilon=eps.epsilon, delta=config.delta,
            accountant=accountant.name, train_loss=loss_sum / examples if examples else None,
            mean_batch_size=examples / batches if batches else None, test_accuracy=acc,
            seconds=elapsed_before + time.perf_counter() - t0)
        history.append(record)
        finished_epoch = ledger.steps == ends[epoch]
        if ckdir is not None:
            ckpt.save_checkpoint(ckdir, {
                "fingerprint": config.fingerprint(),
                "epoch": epoch + 1 if finished_epoch else epoch,
                "ledger": ledger.to_json(),
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "rng": {"sampling": sampling_gen.get_state(), "noise": noise_gen.get_state()},
                "history": [asdict(r) for r in history],
                "seconds": record.seconds,
                "dpcalc_version": __version__,
            })
        if config.log:
            _append_log(config.log, record)
        rep.end_epoch(record)
        if ledger.steps >= budget_steps and budget_steps < planned:
            stopped = (f"stopped after {ledger.steps} of {planned} planned steps: the next step would "
                       f"raise epsilon to {eps_beyond:.4g} > --max-epsilon {config.max_epsilon:g}")
            rep.message(stopped)
            break

    steps = reported_steps()
    final = eps_now()
    test_accuracy = history[-1].test_accuracy if history else evaluate(model, x_test, y_test)
    seconds = elapsed_before + time.perf_counter() - t0
    result = TrainResult(
        model=model, accounting=final, noise_multiplier=sigma, sample_rate=q, steps=steps,
        planned_steps=planned, epochs=steps * q, test_accuracy=test_accuracy, seconds=seconds,
        dataset_size=n, stopped=stopped, history=history, calibration=calibration,
        resumed_from_steps=resumed_from)
    if config.save_model:
        save_model(result, config)
    return result


def _check_same_ledger(old: ckpt.PrivacyLedger, new: ckpt.PrivacyLedger, ckdir: Path,
                       hint: str = "") -> None:
    for key in ("noise_multiplier", "sample_rate", "max_grad_norm", "dataset_size"):
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
    ckpt.atomic_torch_save(result.model.state_dict(), path)
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
    ckpt.atomic_write_bytes(sidecar, (json.dumps(meta, indent=2, allow_nan=False) + "\n").encode())
    return path, sidecar
