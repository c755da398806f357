"""The files a ``dpcalc train`` run leaves beside its model: the saved model and its privacy
sidecar (:func:`save_model`), and the check that a resumed run continues the same privacy ledger
(:func:`check_same_ledger`). Moved out of :mod:`dpcalc.train.loop` (its size limit)."""

from __future__ import annotations

import json
from pathlib import Path

from dpcalc._version import __version__
from dpcalc.errors import ParameterError
from dpcalc.train import checkpoint as ckpt
from dpcalc.train.config import TrainConfig
from dpcalc.train.results import TrainResult

__all__ = ["save_model", "check_same_ledger"]


def check_same_ledger(old: ckpt.PrivacyLedger, new: ckpt.PrivacyLedger, ckdir: Path,
                       hint: str = "") -> None:
    if old.canaries != new.canaries:
        def said(c):
            return "no canaries" if c is None else f"{c['count']} canaries (seed {c['seed']})"
        raise ParameterError(
            "resume", "", None,
            message=f"--resume: {ckdir} was trained with {said(old.canaries)}, this run has "
                    f"{said(new.canaries)}: the canaries are training records and must stay the same")
    for key in ("sampling", "batch_size", "max_batch_size", "noise_multiplier", "sample_rate", "max_grad_norm",
                "dataset_size", "mechanism", "users"):
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
        **({"privacy_unit": "user"} if config.privacy_unit == "user" else {}),
        **{k: val for k, val in result.to_json().items() if k != "source"},
    }
    ckpt.atomic_write_bytes(sidecar, (json.dumps(meta, indent=2, allow_nan=False) + "\n").encode(),
                            option="--save-model")
    return path, sidecar
