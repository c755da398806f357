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
path and its numbers unchanged) and the run is accounted for exactly that sampler
(:mod:`dpcalc.train.privacy`: the accountant, the history it is asked about, the calibration).

The run: :class:`~dpcalc.train.config.TrainConfig` checked, then :class:`_Run` — ``setup``
(data, N, sampler and accountant, σ, model, a checkpoint resumed, tensors, the step, the
budget), ``train_epoch`` (draw, count in the ledger, step), ``end_epoch`` (test accuracy, ε,
checkpoint, log), ``finish`` (the :class:`~dpcalc.train.results.TrainResult`).

Privacy notes: the accountant certifies the released model(s) — checkpoints, the saved
model and the test accuracy (the test set is not training data). The per-epoch training
loss shown in the progress display and the log is *not* privatised; do not publish it
as part of a DP release.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict
from fractions import Fraction
from pathlib import Path

import numpy as np
import torch

from dpcalc._version import __version__
from dpcalc.errors import InfeasibleError, ParameterError
from dpcalc.results import AccountingResult, jsonable
from dpcalc.schedule import resolve_schedule
from dpcalc.train import checkpoint as ckpt
from dpcalc.train.canaries import canary_scores, make_canaries
from dpcalc.train.config import MAX_STEPS, OPTIMIZERS, TrainConfig
from dpcalc.train.correlated import CorrelatedNoise, CorrelatedPlan
from dpcalc.train.data import DATASETS, IdxDataset, download_dataset, load_dataset
from dpcalc.train.distributed import (
    Context,
    DistributedDPSGDStep,
    ShardSampler,
    context_from_environment,
    shard_bounds,
)
from dpcalc.train.dpsgd import DPSGDStep, PoissonSampler
from dpcalc.train.memory import available_memory, keep_freed_memory
from dpcalc.train.models import build_model
from dpcalc.train.privacy import (
    SamplerSpec,
    budget_steps,
    calibrate_sigma,
    epsilon_for_steps,
    run_accountant,
    sampler_record,
    touched_passes,
)
from dpcalc.train.results import CanaryOutcome, EpochRecord, Reporter, SilentReporter, TrainResult
from dpcalc.train.runfiles import check_same_ledger, save_model
from dpcalc.train.samplers import make_sampler
from dpcalc.train.scatternet import SCATTERNET_MODELS, scattered_inputs
from dpcalc.train.users import UserDPSGDStep, UserSampler, plan_users, users_note

__all__ = ["train", "prepare_images", "evaluate", "load_data", "save_model", "OPTIMIZERS"]


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


def load_data(config: TrainConfig) -> IdxDataset:
    """The dataset of ``config``: downloaded (``--download``), or found in ``--data-dir`` or the
    usual places (:func:`dpcalc.train.data.load_dataset`)."""
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


def _check_canary_memory(config: TrainConfig, n_data: int) -> None:
    """Refuse ``--audit-canaries m`` when the canaries cannot fit in memory (issue 33): each is
    drawn as 784 bytes, then held as the model's float32 input twice (all canaries for their
    scores, the included half in the training set, which is copied once with the data).

    Raises:
        ParameterError: more than :func:`~dpcalc.train.memory.available_memory` (one line, with
            the most canaries that fit).
    """
    avail = available_memory()
    if avail is None:
        return
    per = 4 * (3969 if config.model in SCATTERNET_MODELS else 784)  # float32 model input per image
    fixed = 2 * n_data * per  # the data, and its copy when the included canaries are appended
    each = 784 + 2 * per
    need = fixed + config.audit_canaries * each
    if need > avail:
        fit = max(0, (avail - fixed) // each)
        raise ParameterError(
            "audit_canaries", "", config.audit_canaries,
            message=f"--audit-canaries {config.audit_canaries:,} needs about {need / 2**30:.2f} GiB of memory "
                    f"(each canary is held as {per:,} bytes of model input twice, beside the {n_data:,} training "
                    f"images), more than the {avail / 2**30:.2f} GiB available to this process; use at most "
                    f"about {fit:,} canaries")


class NonFiniteLossError(InfeasibleError):
    """A training step's loss was NaN or infinite (exit status 1; ``--allow-non-finite-loss`` goes on)."""


def _digest(obj: torch.nn.Module | torch.Generator) -> str:
    """SHA-256 of a model's parameters and buffers or a generator's state (to check that every
    rank starts from the same state)."""
    h = hashlib.sha256()
    if isinstance(obj, torch.Generator):
        h.update(obj.get_state().numpy().tobytes())
    else:
        for name, t in obj.state_dict().items():
            h.update(name.encode())
            h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())  # 0-dim too
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
    """One run in this process (:func:`train` has checked ``config`` and joined the ranks):
    set up (every rank agreeing on the result), then epoch by epoch, then the result."""
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    keep_freed_memory()  # no page faults for each step's tensors (dpcalc/train/memory.py)
    run = _Run(config, reporter or SilentReporter(), on_step, context)
    with context.agreement() as agreed:
        run.setup(data)
        agreed.update(run.agreement())
    with context.agreement():  # rank 0 reserves the run in --ledger: a refusal stops every rank, printed once
        run.start()
    for epoch in run.epochs():
        if run.end_epoch(epoch, *run.train_epoch(epoch)):
            break
    return run.finish()


class _Run:
    """The state of one training run, in the order :func:`_train` builds and uses it.

    :meth:`setup` fixes everything before the first step: the data and N (:meth:`_plan_privacy`
    also takes the sampler, the schedule, the accountant and σ), the model, optimizer, generators
    and privacy ledger (:meth:`_build`), a checkpoint to continue (:meth:`_resume`), the tensors
    (:meth:`_load_tensors`), the DP-SGD step and the batch draw (:meth:`_make_step`), and the
    steps the ``--max-epsilon`` budget allows (:meth:`_plan_budget`). Then :meth:`start` reports
    the run, :meth:`train_epoch` takes the steps of one epoch, :meth:`end_epoch` evaluates,
    checkpoints and logs it, and :meth:`finish` returns the :class:`TrainResult`.
    """

    def __init__(self, config: TrainConfig, rep: Reporter, on_step: Callable[[int], None] | None,
                 context: Context) -> None:
        self.config, self.rep, self.on_step, self.context = config, rep, on_step, context
        self.writes = context.is_main  # rank 0 owns the files
        self._eps_cache: dict[int, AccountingResult] = {}

    # ------------------------------------------------------------------ setup

    def setup(self, data: IdxDataset | None) -> None:
        """Everything before the first step, in this order (each part reads the earlier ones).

        Raises:
            ParameterError, InfeasibleError, DataError, CheckpointError: as :func:`train`.
        """
        if data is None:
            data = load_data(self.config)
        self._plan_privacy(data)
        self._build()
        self._resume()
        self._load_tensors(data)
        self._make_step()
        self._plan_budget()

    def _plan_privacy(self, data: IdxDataset) -> None:
        """N (the data and the included canaries) and its limits, the sampler, the planned steps,
        the accountant and σ (given, or calibrated for the target ε)."""
        config = self.config
        self.seeds = _seeds(config.seed)  # model, sampling, noise, canaries
        if config.audit_canaries:
            _check_canary_memory(config, data.dataset_size)
        canaries = (make_canaries(config.audit_canaries, seed=self.seeds[3]) if config.audit_canaries
                    else None)
        # the real N: the data plus the included canaries (they are training records); U users at the user level
        self.users = users = plan_users(config, data.dataset_size, world_size=self.context.world_size)
        n = data.dataset_size + (canaries.included_count if canaries is not None else 0)
        with_canaries = (f" ({data.dataset_size} data + {canaries.included_count} included canaries)"
                         if canaries is not None else "")
        unit = "training examples" if users is None else "users"
        if users is not None:
            n, with_canaries = users.users, f" ({data.dataset_size} records)"
        if config.delta >= 1.0 / n:
            raise ParameterError(
                "delta", f"below 1/N = {1.0 / n:.3g} (N = {n} {unit})", config.delta,
                message=f"--delta must be below 1/N = {1.0 / n:.3g} for N = {n} {unit}"
                        f"{with_canaries}, got {config.delta:g}: a δ that large allows a mechanism that "
                        f"publishes a whole {'training record' if users is None else 'user'}")
        if self.context.world_size > n:
            raise ParameterError(
                "nproc", f"at most the number of training records N = {n}", self.context.world_size,
                message=f"--nproc must be at most the number of training records N = {n}{with_canaries} "
                        f"(each process samples its own shard of them), got {self.context.world_size}")
        if config.batch_size > n:
            raise ParameterError("batch_size", f"at most the dataset size ({n}{with_canaries})" if users is None
                                 else f"at most the number of users ({n}: --batch-size counts users)",
                                 config.batch_size)
        spec = SamplerSpec(config.sampling, n, config.batch_size, config.max_batch_size, config.neighboring)
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
        self.mf = None
        if config.noise == "correlated":  # the mechanism's own accounting (dpcalc/train/correlated.py)
            if self.context.distributed:
                raise ParameterError("nproc", "1", self.context.world_size, message=(
                    "--noise correlated runs in one process: the noise stream is not shared between "
                    f"processes (got {self.context.world_size})"))
            self.mf = CorrelatedPlan(config.strategy, spec.steps_per_epoch, int(config.epochs))
            accountant = self.mf
        else:
            accountant = run_accountant(config, spec, q)
        calibration = None
        if config.noise_multiplier is not None:
            sigma = float(config.noise_multiplier)
        elif self.mf is not None:
            calibration = self.mf.calibrate(target_epsilon=config.target_epsilon, delta=config.delta)
            sigma = float(calibration.noise_multiplier)
        else:
            calibration = calibrate_sigma(accountant, spec=spec, target_epsilon=config.target_epsilon,
                                          delta=config.delta, sample_rate=q, steps=planned)
            sigma = float(calibration.noise_multiplier)
        self.canaries, self.n, self.with_canaries = canaries, n, with_canaries
        self.spec, self.poisson, self.q, self.planned = spec, spec.sampling == "poisson", q, planned
        self.accountant, self.sigma, self.calibration = accountant, sigma, calibration

    def _build(self) -> None:
        """The model, its optimizer, the sampling and noise generators and a fresh privacy ledger."""
        config, spec, canaries = self.config, self.spec, self.canaries
        model_seed, sampling_seed, noise_seed, _ = self.seeds
        self.model = build_model(config.model, seed=model_seed).to(self.context.device)
        self.optimizer = _make_optimizer(config, self.model)
        self.sampling_gen = torch.Generator().manual_seed(sampling_seed)
        self.noise_gen = torch.Generator().manual_seed(noise_seed)
        self.ledger = ckpt.PrivacyLedger(self.sigma, self.q, config.max_grad_norm, self.n, 0,
                                         canaries=canaries.ledger_record() if canaries is not None else None,
                                         sampling=spec.sampling, batch_size=None if self.poisson else spec.batch_size,
                                         max_batch_size=spec.max_batch_size,
                                         mechanism=self.mf.ledger_record() if self.mf is not None else None,
                                         users=self.users.record if self.users is not None else None)
        self.history: list[EpochRecord] = []
        self.elapsed_before, self.resumed_from, self.found_steps, self.lost = 0.0, None, 0, 0
        self.state = None
        self.ckdir = Path(config.checkpoint) if config.checkpoint else None

    def _resume(self) -> None:
        """With ``--checkpoint``: refuse a directory that holds another run, or one the ledger
        does not cover; with ``--resume``, load the checkpoint (model, optimizer, generators,
        history) and turn the steps the ledger records beyond it into orphaned steps."""
        config, ckdir, ledger, spec = self.config, self.ckdir, self.ledger, self.spec
        if ckdir is None:
            return
        state = self.state = ckpt.load_checkpoint(ckdir) if ckdir.exists() else None
        previous = ckpt.read_ledger(ckdir) if ckdir.exists() else None
        if (state is not None or previous is not None) and not config.resume:
            raise ParameterError(
                "checkpoint", "", str(ckdir),
                message=f"--checkpoint {ckdir} already holds a run; pass --resume to continue it, "
                        "or choose another directory")
        hint = ("; σ was calibrated for --target-epsilon, perhaps by another accountant: pass "
                "--noise-multiplier with the σ of the run to continue it") if self.calibration else ""
        if state is not None and previous is None:
            raise ckpt.LedgerError(
                f"--resume: {ckdir} holds {ckpt.CHECKPOINT_NAME} but no {ckpt.LEDGER_NAME}: the "
                "steps taken after the checkpoint cannot be counted; refusing to resume")
        if previous is not None:
            check_same_ledger(previous, ledger, ckdir, hint)
            self.found_steps = previous.steps
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
            check_same_ledger(saved, ledger, ckdir, hint)
            if previous.steps < saved.steps or previous.orphaned_steps < saved.orphaned_steps:
                raise ckpt.LedgerError(
                    f"--resume: {ckdir / ckpt.LEDGER_NAME} records {previous.steps} steps "
                    f"({previous.orphaned_steps} orphaned) but the checkpoint it must cover has "
                    f"{saved.steps} ({saved.orphaned_steps} orphaned): the ledger is inconsistent; "
                    "refusing to resume")
            try:
                self.model.load_state_dict(state["model"])
                self.optimizer.load_state_dict(state["optimizer"])
                self.sampling_gen.set_state(state["rng"]["sampling"])
                self.noise_gen.set_state(state["rng"]["noise"])
                self.elapsed_before = float(state["seconds"])
                self.history = [EpochRecord(**r) for r in state["history"]]
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
            self.lost = previous.steps - ledger.steps
            ledger.steps += self.lost
            ledger.orphaned_steps += self.lost
            self.resumed_from = ledger.model_steps

    def _prepare(self, images: np.ndarray) -> torch.Tensor:
        """The model's inputs: normalised pixels, or fixed per-example features."""
        if self.config.model in SCATTERNET_MODELS:  # no parameters, no data statistic: scatternet.py
            return scattered_inputs(images, notify=self.rep.message)
        return prepare_images(images, self.config.dataset)

    def _load_tensors(self, data: IdxDataset) -> None:
        """Training inputs and labels (the included canaries appended: indices N_data … N − 1)
        and the test set, on the CPU."""
        canaries = self.canaries
        self.x_train = self._prepare(data.train_images)
        self.y_train = torch.from_numpy(data.train_labels)
        if canaries is not None:
            self.x_canary = self._prepare(canaries.images)
            self.y_canary = torch.from_numpy(canaries.labels)
            keep = torch.from_numpy(canaries.included)
            self.x_train = torch.cat([self.x_train, self.x_canary[keep]])
            self.y_train = torch.cat([self.y_train, self.y_canary[keep]])
        self.x_test = self._prepare(data.test_images)
        self.y_test = torch.from_numpy(data.test_labels)

    def _make_step(self) -> None:
        """The DP-SGD step (one noise draw per step; several processes: this rank's shard, one
        all-reduce) and :meth:`draw`, the batch of a step; then the tensors go to the device."""
        config, context, spec, n, q = self.config, self.context, self.spec, self.n, self.q
        step_args = dict(noise_multiplier=self.sigma, max_grad_norm=config.max_grad_norm,
                         expected_batch_size=q * n, max_physical_batch=config.max_physical_batch,
                         noise_generator=self.noise_gen)
        self.lo, self.hi = 0, n
        if context.distributed:  # this rank's shard; global Poisson sampling, one noise draw per step
            self.lo, self.hi = shard_bounds(n, context.world_size, context.rank)
            self.x_train = self.x_train[self.lo:self.hi].clone()
            self.y_train = self.y_train[self.lo:self.hi].clone()
            self.dp = DistributedDPSGDStep(self.model, self.optimizer, context=context, **step_args)
            self.poisson_sampler = ShardSampler(dataset_size=n, sample_rate=q, generator=self.sampling_gen,
                                                lo=self.lo, hi=self.hi)
        elif self.users is not None:  # users sampled, each user's mean gradient clipped (dpcalc/train/users.py)
            self.poisson_sampler = UserSampler(self.users, sample_rate=q, generator=self.sampling_gen)
            self.dp = UserDPSGDStep(self.model, self.optimizer, sampler=self.poisson_sampler, **step_args)
        else:
            self.dp = DPSGDStep(self.model, self.optimizer, **step_args)
            self.poisson_sampler = PoissonSampler(dataset_size=n, sample_rate=q, generator=self.sampling_gen)
        if self.mf is not None:  # the mechanism's noise, continued from the checkpoint's stream state
            self.mf_noise = CorrelatedNoise(self.mf, num_parameters=self.dp.num_parameters,
                                            noise_std=self.sigma * config.max_grad_norm, generator=self.noise_gen)
            if self.state is not None:
                try:
                    self.mf_noise.load_state_dict(self.state["noise_stream"])
                    ok = self.mf_noise.stream._t == self.ledger.model_steps
                except (KeyError, TypeError, AttributeError, ParameterError):
                    ok = False
                if not ok:
                    raise ckpt.CheckpointError(f"checkpoint in {self.ckdir} lacks a matching noise stream state")
            self.dp.noise_source = self.mf_noise
        if not self.poisson:  # the sampler seeded by (seed, step | epoch): every rank draws the same global batch
            self.batch_sampler = make_sampler(spec.sampling, dataset_size=n, batch_size=spec.batch_size,
                                              seed=self.seeds[1], max_batch_size=spec.max_batch_size)
        self.x_train, self.y_train = self.x_train.to(context.device), self.y_train.to(context.device)
        self.x_test, self.y_test = self.x_test.to(context.device), self.y_test.to(context.device)

    def draw(self, step: int) -> torch.Tensor:
        """The indices (into this rank's shard) of the batch of model step ``step``."""
        if self.poisson:
            return self.poisson_sampler.sample()
        idx = self.batch_sampler.batch(step)
        if self.context.distributed:  # keep this rank's shard, indices relative to it
            idx = idx[(idx >= self.lo) & (idx < self.hi)] - self.lo
        return idx

    def eps_at(self, t: int) -> AccountingResult:
        """The accountant's ε after ``t`` steps, orphaned steps included (cached)."""
        if t not in self._eps_cache and self.mf is not None:  # the mechanism's ε (dpcalc/train/correlated.py)
            self._eps_cache[t] = self.mf.result(self.sigma, steps=t, delta=self.config.delta,
                                                orphaned_steps=self.ledger.orphaned_steps,
                                                orphaned_passes=self.ledger.orphaned_passes)
        if t not in self._eps_cache:
            ledger = self.ledger
            self._eps_cache[t] = epsilon_for_steps(
                self.accountant, self.spec, noise_multiplier=self.sigma, sample_rate=self.q, steps=t,
                delta=self.config.delta, orphaned_steps=ledger.orphaned_steps,
                orphaned_passes=ledger.orphaned_passes)
        return self._eps_cache[t]

    def eps_now(self) -> AccountingResult:
        """ε of every step the ledger counts so far."""
        return self.eps_at(self.ledger.steps)

    def _plan_budget(self) -> None:
        """The epoch layout, and the most model steps ``--max-epsilon`` allows (else the plan).
        ε is evaluated at the total steps if the plan completes (orphaned steps included) before
        the first step, so an accountant that cannot answer fails before any data is used."""
        config, ledger, planned = self.config, self.ledger, self.planned
        self.n_epochs = _n_epochs(config.epochs)
        self.layout = dict(n_epochs=self.n_epochs, dataset_size=self.n, batch_size=config.batch_size,
                           planned=planned)
        if self.spec.per_epoch:  # an epoch is exactly T = ⌈N/B⌉ steps
            self.layout.update(dataset_size=self.spec.steps_per_epoch, batch_size=1)
        self.orphaned = ledger.orphaned_steps
        final_total = max(planned, ledger.model_steps) + self.orphaned
        self.budget_model = planned  # most model steps the budget allows
        self.eps_beyond = None
        if config.max_epsilon is not None:
            budget_total, self.eps_beyond = budget_steps(self.eps_at, max_epsilon=config.max_epsilon,
                                                         planned=final_total)
            self.budget_model = budget_total - self.orphaned
        else:
            self.eps_at(final_total)

    def agreement(self) -> dict:
        """What every rank must have computed alike before the first step."""
        ledger = self.ledger
        return dict(n=self.n, sigma=self.sigma, q=self.q, planned=self.planned, budget_model=self.budget_model,
                    steps=ledger.steps, orphaned=ledger.orphaned_steps, model_state=_digest(self.model),
                    generators=(_digest(self.sampling_gen), _digest(self.noise_gen)))

    # ------------------------------------------------------------------ the run

    def start(self) -> None:
        """Write the ledger (the run is known to be feasible: a checkpoint is never without its
        ledger) and report the run's settings and notes."""
        config, context, ckdir, ledger = self.config, self.context, self.ckdir, self.ledger
        if ckdir is not None:
            context.ledger_note = (f"; the privacy ledger {ckdir / ckpt.LEDGER_NAME} counts every step taken "
                                   "(--resume continues the run)")
        if ckdir is not None and self.writes:
            ckpt.write_ledger(ckdir, ledger)
        notes = [users_note(self.users)] if self.users is not None else []
        if self.canaries is not None:
            notes.append(f"{self.canaries.count} audit canaries, {self.canaries.included_count} included: "
                         f"N = {self.n} training records{self.with_canaries}")
        if config.resume and self.resumed_from is None:
            notes.append(f"--resume: no run in {ckdir} yet; starting a new one")
        if self.resumed_from is not None:
            where = (f"resumed at step {self.resumed_from} "
                     f"(epoch {_first_epoch(self.resumed_from, **self.layout) + 1})"
                     if self.state is not None else "resumed: no checkpoint yet, so training restarts at step 0")
            notes.append(f"{where}; the ledger shows {self.found_steps} steps taken before the interruption")
            if self.lost:
                notes.append(f"{self.lost} orphaned steps (taken after the last checkpoint, their updates "
                             f"lost) stay in the accounting: ε covers all steps the data is used in")
            if ledger.model_steps >= self.planned:
                notes.append(f"the checkpoint already holds {ledger.model_steps} steps, the {self.planned} "
                             "planned included: no step to take")
        self.rep.start(config=config, noise_multiplier=self.sigma, sample_rate=self.q, planned_steps=self.planned,
                       accountant=self.accountant.name, note="; ".join(notes) or None, dataset_size=self.n)
        self.t0 = time.perf_counter()
        self.model.train()

    def _budget_stops(self) -> bool:
        """True when the budget stops the run before the plan is complete."""
        return self.budget_model < self.planned

    def epochs(self) -> range:
        """The epochs left to train (none if the budget allows no further step)."""
        first = _first_epoch(self.ledger.model_steps, **self.layout)
        if self.budget_model <= self.ledger.model_steps and self._budget_stops():
            first = self.n_epochs  # the budget allows no further step
        return range(first, self.n_epochs)

    def train_epoch(self, epoch: int) -> tuple[float, int, int]:
        """The steps of epoch ``epoch`` (up to the budget). Each step is counted in the ledger (and
        the ledger written) before anything of it is computed. Returns (loss sum, examples, batches)."""
        ledger, context, rep = self.ledger, self.context, self.rep
        end = min(_epoch_end(epoch, **self.layout), self.budget_model)
        rep.start_epoch(epoch, self.n_epochs, end - ledger.model_steps, self.eps_now().epsilon)
        loss_sum, examples, batches = 0.0, 0, 0
        while ledger.model_steps < end:
            idx = self.draw(ledger.model_steps).to(context.device)
            ledger.steps += 1  # count the step before anything of it is computed or applied
            context.step = ledger.steps
            if self.ckdir is not None and self.writes:  # before rank 0 joins the step's all-reduce
                ckpt.write_ledger(self.ckdir, ledger)
            if self.on_step is not None:
                self.on_step(ledger.steps)
            context.maybe_kill(ledger.steps)
            out = self.dp.step(self.x_train[idx], self.y_train[idx])
            if not math.isfinite(out.loss_sum):
                self._non_finite(out.loss_sum)
            loss_sum += out.loss_sum
            examples += out.batch_size
            batches += 1
            rep.step(loss=out.loss_sum / out.batch_size if out.batch_size else None,
                     batch_size=out.batch_size)
        return loss_sum, examples, batches

    def _non_finite(self, loss: float) -> None:
        """A step whose training loss is NaN or infinite: stop the run (exit status 1; the step is
        counted), unless ``--allow-non-finite-loss``, then count it for the result's note."""
        self.non_finite_steps = getattr(self, "non_finite_steps", 0) + 1
        if not self.config.allow_non_finite_loss:
            raise NonFiniteLossError(
                f"step {self.ledger.steps}: the training loss is {loss} (non-finite: the model's logits are not "
                "finite, or training diverged); the run stopped, its steps are counted. Lower --lr, fix the "
                "model, or pass --allow-non-finite-loss to train on")

    def end_epoch(self, epoch: int, loss_sum: float, examples: int, batches: int) -> bool:
        """Test accuracy and ε of the epoch's end, its checkpoint and log line, its report.
        Returns True when the budget stops the run here."""
        config, ledger, model = self.config, self.ledger, self.model
        self.context.same_weights(model)
        acc = _evaluate(self.context, model, self.x_test, self.y_test)
        eps = self.eps_now()
        record = EpochRecord(
            epoch=epoch + 1, steps=ledger.steps, epsilon=eps.epsilon, delta=config.delta,
            accountant=self.accountant.name, train_loss=loss_sum / examples if examples else None,
            mean_batch_size=examples / batches if batches else None, test_accuracy=acc,
            seconds=self.elapsed_before + time.perf_counter() - self.t0)
        self.history.append(record)
        if self.ckdir is not None and self.writes:
            ckpt.save_checkpoint(self.ckdir, {
                "fingerprint": config.fingerprint(),
                "epoch": _first_epoch(ledger.model_steps, **self.layout),  # informational
                "ledger": ledger.to_json(),
                "model": model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "rng": {"sampling": self.sampling_gen.get_state(), "noise": self.noise_gen.get_state()},
                **({"noise_stream": self.mf_noise.state_dict()} if self.mf is not None else {}),
                "history": [asdict(r) for r in self.history],
                "seconds": record.seconds,
                "dpcalc_version": __version__,
            })
        if config.log and self.writes:
            _append_log(config.log, record)
        self.rep.end_epoch(record)
        return ledger.model_steps >= self.budget_model and self._budget_stops()

    def _stop_message(self) -> str:
        config, ledger, name = self.config, self.ledger, self.accountant.name
        also = f" ({self.orphaned} orphaned steps also counted)" if self.orphaned else ""
        if self.budget_model < ledger.model_steps:
            spent = self.eps_now().epsilon
            return (f"no step taken: the {ledger.steps} steps already recorded{also} give "
                    f"ε ({name}) = {spent:.4g} > --max-epsilon {config.max_epsilon:g}")
        return (f"stopped after {ledger.model_steps} of {self.planned} planned steps{also}: the next step "
                f"would raise ε ({name}) to {self.eps_beyond:.4g} > --max-epsilon "
                f"{config.max_epsilon:g}")

    def finish(self) -> TrainResult:
        """The result: the model, ε of every step taken, the test accuracy, the sampler's record,
        the canaries' scores; the model saved with ``--save-model``."""
        config, ledger, spec = self.config, self.ledger, self.spec
        stopped = None
        if config.max_epsilon is not None and self._budget_stops() and (
                ledger.model_steps < self.planned or self.budget_model < ledger.model_steps):
            stopped = self._stop_message()
            self.rep.message(stopped)
        steps = ledger.steps
        final = self.eps_now()
        test_accuracy = (self.history[-1].test_accuracy if self.history
                         else _evaluate(self.context, self.model, self.x_test, self.y_test))
        seconds = self.elapsed_before + time.perf_counter() - self.t0
        if self.mf is not None:
            sampler = {"sampling": spec.sampling, "batch_size": spec.batch_size, "adjacency": "zero-out",
                       "steps_per_epoch": spec.steps_per_epoch, **self.mf.ledger_record(),
                       "noise_buffers": self.mf_noise.buffers, "orphaned_passes": ledger.orphaned_passes}
        else:
            sampler = None if self.poisson else sampler_record(spec, ledger, sigma=self.sigma, q=self.q,
                                                                 delta=config.delta, epsilon=final.epsilon)
        result = TrainResult(
            model=self.model, accounting=final, noise_multiplier=self.sigma, sample_rate=self.q, steps=steps,
            planned_steps=self.planned,
            epochs=steps / spec.steps_per_epoch if spec.per_epoch else steps * self.q,
            test_accuracy=test_accuracy, seconds=seconds,
            dataset_size=self.n, stopped=stopped, history=self.history, calibration=self.calibration,
            resumed_from_steps=self.resumed_from, orphaned_steps=ledger.orphaned_steps, sampler=sampler,
            users=self.users.record if self.users is not None else None)
        bad = getattr(self, "non_finite_steps", 0)
        if bad:
            result.notes.append(f"Warning: the training loss was non-finite in {bad} step(s) "
                                "(--allow-non-finite-loss): the model is probably useless.")
        if self.x_test.shape[0] == 0:
            result.notes.append("The dataset has no test images: the test accuracy shown (0.00%) measures nothing.")
        if self.canaries is not None:
            device = self.context.device
            result.canaries = CanaryOutcome(self.canaries.ledger_record(), self.canaries.included.copy(),
                                            canary_scores(self.model, self.x_canary.to(device),
                                                          self.y_canary.to(device)))
        if config.save_model and self.writes:
            save_model(result, config)
        return result
