"""The settings of a ``dpcalc train`` run (:class:`TrainConfig`) and their checks.

Every option is checked here, once, against its supported range (:data:`RANGES`,
:data:`INT_RANGES`) and against the other options (one of σ and target ε, the sampler's own
options, a certified accountant wherever the accountant decides, writable output paths). The
limits that depend on the data (δ < 1/N, B ≤ N, T ≤ :data:`MAX_STEPS`) are checked by
:func:`dpcalc.train.loop.train` once the data is loaded.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpcalc import _validate as v
from dpcalc.accounting._sampling import check_sampler_adjacency
from dpcalc.accounting.registry import available, default_accountant, get_class
from dpcalc.errors import ParameterError
from dpcalc.train.canaries import MAX_CANARIES
from dpcalc.train.correlated import check_strategy_spec
from dpcalc.train.data import DATASETS
from dpcalc.train.distributed import DEVICES, resolve_device
from dpcalc.train.models import validate_model_name
from dpcalc.train.samplers import SAMPLERS

__all__ = ["TrainConfig", "NOISES", "SAMPLINGS", "EPOCH_SAMPLINGS", "SAMPLING_ADJACENCY", "NEIGHBORINGS",
           "SAMPLING_NEIGHBORINGS", "OPTIMIZERS", "MAX_STEPS", "RANGES", "INT_RANGES", "PRIVACY_UNITS"]

#: ``--sampling`` of ``dpcalc train`` (:mod:`dpcalc.train.samplers`)
SAMPLINGS = tuple(SAMPLERS)
#: samplers that lay out whole epochs (each record in exactly one batch per epoch)
EPOCH_SAMPLINGS = ("shuffle", "balls-in-bins", "cyclic")
#: the adjacency under which each sampler is accounted (module docstring)
SAMPLING_ADJACENCY = {"poisson": "add-remove", "without-replacement": "replace", "with-replacement": "add-remove",
                      "truncated-poisson": "add-remove", "shuffle": "zero-out", "balls-in-bins": "zero-out",
                      "cyclic": "zero-out"}
#: ``--noise``: DP-SGD's independent Gaussian noise, or a matrix-factorization mechanism's correlated
#: noise (:mod:`dpcalc.train.correlated`)
NOISES = ("independent", "correlated")
#: ``--neighboring`` values, and the samplers it applies to (the per-step fixed-size / truncated samplers,
#: accounted by the registry under the adjacency given; a pair without a proof is refused,
#: :func:`dpcalc.accounting._sampling.check_sampler_adjacency`)
NEIGHBORINGS = ("add-remove", "replace")
SAMPLING_NEIGHBORINGS = ("without-replacement", "with-replacement", "truncated-poisson")
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
    "records_per_user": (1, None),  # at most N, checked against the data
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
    allow_non_finite_loss: bool = False
    noise: str = "independent"
    strategy: str | None = None
    privacy_unit: str = "record"
    user_ids: str | None = None
    records_per_user: int | None = None

    def validated(self) -> TrainConfig:
        """The config with every field checked.

        Every numeric option is checked against its supported range (:data:`RANGES`,
        :data:`INT_RANGES`) here, once; the limits that depend on the data (δ < 1/N,
        B ≤ N, T ≤ :data:`MAX_STEPS`) are checked by :func:`dpcalc.train.loop.train` after loading it.

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
        _check_noise(self)
        _check_privacy_unit(self)
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
        if self.noise != "independent":
            keys += ("noise", "strategy")
        if self.privacy_unit != "record":  # the users themselves are in the privacy ledger
            keys += ("privacy_unit", "records_per_user")
        return {k: getattr(self, k) for k in keys}


def _check_noise(config: TrainConfig) -> None:
    """``--noise correlated`` needs ``--strategy`` (one that is generated online), the fixed epoch
    order it is accounted for (``--sampling cyclic``), whole epochs, its own accounting (no
    ``--accountant``); ``--sampling cyclic`` and ``--strategy`` need ``--noise correlated``."""
    v.choice("noise", config.noise, NOISES)
    if config.noise == "independent":
        if config.strategy is not None:
            raise ParameterError("strategy", "", config.strategy, message=(
                "--strategy applies to --noise correlated only (DP-SGD's independent noise has none)"))
        if config.sampling == "cyclic":
            raise ParameterError("sampling", "", "cyclic", message=(
                "--sampling cyclic applies to --noise correlated only; DP-SGD with a fixed epoch order: use "
                "--sampling shuffle"))
        return
    check_strategy_spec(config.strategy)
    if config.sampling != "cyclic":
        raise ParameterError("sampling", "cyclic", config.sampling, message=(
            f"--noise correlated needs the fixed epoch order it is accounted for (--sampling cyclic: each record "
            f"once per epoch, ⌈N/B⌉ steps apart), not --sampling {config.sampling}"))
    if float(config.epochs) != math.floor(config.epochs):
        raise ParameterError("epochs", "a whole number of epochs", config.epochs, message=(
            f"--noise correlated needs a whole number of --epochs (its sensitivity counts whole epochs of a "
            f"fixed order), got {config.epochs:g}"))
    if config.accountant is not None:
        raise ParameterError("accountant", "", config.accountant, message=(
            "--accountant does not apply to --noise correlated: its ε is the Gaussian mechanism's with the "
            "strategy's sensitivity; omit --accountant"))


#: ``--privacy-unit`` of ``dpcalc train`` (:mod:`dpcalc.train.users`)
PRIVACY_UNITS = ("record", "user")


def _check_privacy_unit(config: TrainConfig) -> None:
    """``--privacy-unit user`` needs exactly one of ``--user-ids FILE`` and ``--records-per-user k``
    (neither applies at the record level), and runs with Poisson sampling of users, independent noise
    and no audit canaries (:mod:`dpcalc.train.users`)."""
    v.choice("privacy_unit", config.privacy_unit, PRIVACY_UNITS)
    if config.records_per_user is not None:
        _check_int("records_per_user", config.records_per_user)
    if config.user_ids is not None and str(config.user_ids) == "":
        raise ParameterError("user_ids", "a file name", config.user_ids, message="--user-ids must be a file name, got ''")
    given = [flag for flag, val in (("--user-ids", config.user_ids), ("--records-per-user", config.records_per_user))
             if val is not None]
    if config.privacy_unit == "record":
        if given:
            raise ParameterError(given[0].lstrip("-").replace("-", "_"), "", None, message=(
                f"{given[0]} applies with --privacy-unit user (users sampled, each user's update clipped)"))
        return
    if len(given) != 1:
        raise ParameterError("user_ids", "", None, message=(
            "--privacy-unit user needs exactly one of --user-ids FILE (a user id per training record) and "
            "--records-per-user k (synthetic users of k records)" + (", not both" if given else "")))
    for flag, bad, why in (
            ("--sampling", config.sampling != "poisson", f"--sampling {config.sampling}: users are Poisson-sampled"),
            ("--noise", config.noise != "independent", "--noise correlated"),
            ("--audit-canaries", config.audit_canaries > 0, "--audit-canaries (canaries are records, not users)")):
        if bad:
            raise ParameterError(flag.lstrip("-").replace("-", "_"), "", None, message=(
                f"--privacy-unit user does not support {why}; it samples users by Poisson sampling with "
                "DP-SGD's independent noise"))


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
