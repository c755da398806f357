"""Checkpoints and the privacy ledger, written atomically (temp file + fsync + rename).

A checkpoint directory holds:

* ``checkpoint.pt`` — written at the end of every epoch: model and optimiser state,
  the sampling and noise generator states, the training configuration it belongs to,
  the per-epoch history, and the ledger as it stood when that model was saved.
* ``ledger.json`` — the privacy ledger (σ, q, C, N, steps, orphaned steps). It is written
  when a run starts and rewritten **before** every noisy step is computed, so however the
  process dies, the ledger never shows fewer steps than the data was used in.

``steps`` counts every step the data was used in: the steps applied to the current model
plus the *orphaned* ones — steps an interrupted run took after its last checkpoint, whose
updates were lost with the process. A resumed run restores the model and generator states
of the last checkpoint and continues from there; the steps the ledger records beyond the
checkpoint's become orphaned steps and stay in the accounting (their outputs were never
released, but the data was used in them, so the ε reported covers them too). Hence a
resumed run never reports fewer steps than the ledger it found.

Files are replaced with ``os.replace`` after an ``fsync`` (:func:`dpcalc._files.atomic_write`):
a reader sees the old file or the new one, never a half-written one.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dpcalc._files import atomic_write
from dpcalc.errors import ParameterError

__all__ = ["PrivacyLedger", "CheckpointError", "LedgerError", "atomic_write_bytes",
           "atomic_torch_save", "CHECKPOINT_NAME", "LEDGER_NAME", "read_ledger", "write_ledger",
           "save_checkpoint", "load_checkpoint", "MAX_LEDGER_STEPS"]

CHECKPOINT_NAME = "checkpoint.pt"
LEDGER_NAME = "ledger.json"
FORMAT = "dpcalc-train-checkpoint/1"
#: the most steps a ledger may record (twice the trainer's cap on planned steps, so that
#: orphaned steps of interrupted runs fit); anything larger is taken as corrupt
MAX_LEDGER_STEPS = 20_000_000
#: a ledger is a few hundred bytes; larger files (or non-regular ones) are refused unread
_MAX_LEDGER_BYTES = 65536


class CheckpointError(ParameterError):
    """A checkpoint directory cannot be used (unreadable, damaged, or from a different run).

    Bad input, like a bad option value: a :class:`ParameterError`, so the CLI prints the one-line
    message and exits with status 2 (a ``DpcalcError`` as before).
    """

    def __init__(self, message: str) -> None:
        ParameterError.__init__(self, "checkpoint_file", "", None, message=message)


class LedgerError(CheckpointError, ParameterError):
    """A privacy ledger that is corrupt, out of range, or inconsistent with its checkpoint.

    A :class:`ParameterError` (bad input: the CLI exits with status 2) and a
    :class:`CheckpointError`. The message is one line naming the file and the field.
    """

    def __init__(self, message: str) -> None:
        ParameterError.__init__(self, "ledger", "", None, message=message)


def _whole(data: dict, key: str, minimum: int, maximum: int) -> int:
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise LedgerError(f"{key} must be a whole number in [{minimum:,}, {maximum:,}], got {value!r}")
    return value


def _real(data: dict, key: str, low: float, high: float, *, low_open: bool = True) -> float:
    value = data[key]
    ok = (not isinstance(value, bool) and isinstance(value, (int, float))
          and math.isfinite(value) and (low < value if low_open else low <= value) and value <= high)
    if not ok:
        raise LedgerError(f"{key} must be a number in {'(' if low_open else '['}{low:g}, {high:g}], "
                          f"got {value!r}")
    return float(value)


@dataclass
class PrivacyLedger:
    """What the accountant needs about a DP-SGD run: σ, q and the steps the data was used in.

    Attributes:
        noise_multiplier: σ (noise std / clipping norm).
        sample_rate: q, the Poisson sampling probability per step.
        max_grad_norm: C, the per-example clipping norm.
        dataset_size: N, the number of training examples.
        steps: every step the data was used in, counted as soon as its batch is drawn —
            before its noisy update is applied — so the ledger can only over-count. It
            includes ``orphaned_steps``; the steps applied to the current model are
            ``steps - orphaned_steps``.
        orphaned_steps: steps taken by interrupted runs after their last checkpoint (their
            updates were lost; they stay in the accounting).
        canaries: with ``--audit-canaries``, what the canaries are (``count``, ``included``,
            ``seed``, ``kind``, ``sha256``; :mod:`dpcalc.train.canaries`) — ``dataset_size``
            then counts the included ones — else None (the key is then absent from the JSON).
        sampling: the batch sampler (``--sampling``, :mod:`dpcalc.train.samplers`); ``poisson``
            (the default) keeps the ledger's old JSON form (the sampler keys absent).
        batch_size: B of a non-Poisson sampler (None for Poisson).
        max_batch_size: B_max of ``truncated-poisson`` (else None).
        orphaned_passes: ``shuffle`` / ``balls-in-bins``: the passes over the data (epochs of
            ⌈N/B⌉ steps) touched by the orphaned steps, each counted as one more whole epoch in
            the accounting (a record is in at most one batch of an orphaned segment per pass it
            touches); 0 for the other samplers.
        mechanism: ``--noise correlated``: the matrix-factorization mechanism (``noise``,
            ``strategy``, ``steps_per_epoch``, ``epochs``, ``sensitivity``;
            :mod:`dpcalc.train.correlated`); None for DP-SGD's independent noise (the key is then
            absent from the JSON).
        users: ``--privacy-unit user``: the users (``grouping`` — ``file`` or ``consecutive`` —,
            ``users``, ``records``, ``max_records_per_user``, and ``sha256`` of the ids or the
            grouping's ``seed`` and ``records_per_user``; :mod:`dpcalc.train.users`): then
            ``dataset_size`` is the number of users U and q is the users' sampling rate; None at the
            record level (the key is then absent from the JSON).
    """

    noise_multiplier: float
    sample_rate: float
    max_grad_norm: float
    dataset_size: int
    steps: int = 0
    orphaned_steps: int = 0
    canaries: dict | None = None
    sampling: str = "poisson"
    batch_size: int | None = None
    max_batch_size: int | None = None
    orphaned_passes: int = 0
    mechanism: dict | None = None
    users: dict | None = None

    @property
    def model_steps(self) -> int:
        """Steps applied to the current model (``steps - orphaned_steps``)."""
        return self.steps - self.orphaned_steps

    def to_json(self) -> dict:
        out = asdict(self)
        if self.canaries is None:
            del out["canaries"]  # ledgers of runs without canaries keep their old form
        if self.mechanism is None:
            del out["mechanism"]
        if self.users is None:
            del out["users"]
        else:
            out["privacy_unit"] = "user"
        if self.sampling == "poisson":  # Poisson ledgers keep their old form
            for key in ("sampling", "batch_size", "max_batch_size", "orphaned_passes"):
                del out[key]
        elif self.max_batch_size is None:
            del out["max_batch_size"]
        return out

    @classmethod
    def from_json(cls, data: Any) -> PrivacyLedger:
        """A ledger from its JSON form, every field checked.

        Raises:
            LedgerError: not an object, a field missing, of the wrong type or out of range
                (e.g. negative steps, more orphaned steps than steps, σ not finite).
        """
        if not isinstance(data, dict):
            raise LedgerError(f"a privacy ledger must be a JSON object, got {type(data).__name__}")
        try:
            steps = _whole(data, "steps", 0, MAX_LEDGER_STEPS)
            return cls(
                noise_multiplier=_real(data, "noise_multiplier", 0.0, math.inf),
                sample_rate=_real(data, "sample_rate", 0.0, 1.0),
                max_grad_norm=_real(data, "max_grad_norm", 0.0, math.inf),
                dataset_size=_whole(data, "dataset_size", 1, 2**63 - 1),
                steps=steps,
                orphaned_steps=_whole(data, "orphaned_steps", 0, steps) if "orphaned_steps" in data else 0,
                canaries=_canaries(data.get("canaries")),
                mechanism=_mechanism(data.get("mechanism")),
                users=_users(data.get("users")),
                **_sampler_fields(data),
            )
        except KeyError as e:
            raise LedgerError(f"privacy ledger lacks the field {e.args[0]!r}") from None


#: the samplers a ledger may record (:data:`dpcalc.train.samplers.SAMPLERS`)
LEDGER_SAMPLINGS = ("poisson", "without-replacement", "with-replacement", "truncated-poisson", "shuffle",
                    "balls-in-bins", "cyclic")


def _sampler_fields(data: dict) -> dict:
    """The sampler fields of a ledger, checked (absent: Poisson, the ledgers of before ``--sampling``)."""
    sampling = data.get("sampling", "poisson")
    if sampling not in LEDGER_SAMPLINGS:
        raise LedgerError(f"sampling must be one of {', '.join(LEDGER_SAMPLINGS)}, got {sampling!r}")
    if sampling == "poisson":
        return {}
    out = {"sampling": sampling, "batch_size": _whole(data, "batch_size", 1, 2**63 - 1),
           "orphaned_passes": _whole(data, "orphaned_passes", 0, MAX_LEDGER_STEPS)
           if "orphaned_passes" in data else 0}
    if sampling == "truncated-poisson":
        out["max_batch_size"] = _whole(data, "max_batch_size", 1, 2**63 - 1)
    return out


def _mechanism(value: Any) -> dict | None:
    """The ledger's correlated-noise record, every field checked (None: independent noise)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise LedgerError(f"mechanism must be an object, got {type(value).__name__}")
    try:
        strategy = value["strategy"]
        if value["noise"] != "correlated" or not isinstance(strategy, str) or not 0 < len(strategy) <= 200:
            raise LedgerError(f"mechanism must be correlated noise with a strategy, got {str(value)[:80]!r}")
        return {"noise": "correlated", "strategy": strategy,
                "steps_per_epoch": _whole(value, "steps_per_epoch", 1, MAX_LEDGER_STEPS),
                "epochs": _whole(value, "epochs", 1, MAX_LEDGER_STEPS),
                "sensitivity": _real(value, "sensitivity", 0.0, math.inf)}
    except KeyError as e:
        raise LedgerError(f"mechanism lacks the field {e.args[0]!r}") from None


def _canaries(value: Any) -> dict | None:
    """The ledger's canary record, every field checked (None: no canaries)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise LedgerError(f"canaries must be an object, got {type(value).__name__}")
    try:
        count = _whole(value, "count", 1, 2**31)
        record = {"count": count, "included": _whole(value, "included", 0, count),
                  "seed": _whole(value, "seed", 0, 2**63 - 1), "kind": value["kind"],
                  "sha256": value["sha256"]}
    except KeyError as e:
        raise LedgerError(f"canaries lacks the field {e.args[0]!r}") from None
    if not isinstance(record["kind"], str) or len(record["kind"]) > 200:
        raise LedgerError(f"canaries kind must be a short string, got {str(record['kind'])[:40]!r}")
    digest = record["sha256"]
    if not (isinstance(digest, str) and len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)):
        raise LedgerError(f"canaries sha256 must be 64 hex digits, got {str(digest)[:70]!r}")
    return record


def _users(value: Any) -> dict | None:
    """The ledger's user record of a user-level run, every field checked (None: record level)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise LedgerError(f"users must be an object, got {type(value).__name__}")
    try:
        grouping = value["grouping"]
        users = _whole(value, "users", 1, 2**63 - 1)
        record = {"grouping": grouping, "users": users, "records": _whole(value, "records", users, 2**63 - 1),
                  "max_records_per_user": _whole(value, "max_records_per_user", 1, 2**63 - 1)}
        if grouping == "file":
            record["sha256"] = value["sha256"]
            digest = record["sha256"]
            if not (isinstance(digest, str) and len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)):
                raise LedgerError(f"users sha256 must be 64 hex digits, got {str(digest)[:70]!r}")
        elif grouping == "consecutive":
            record.update(records_per_user=_whole(value, "records_per_user", 1, 2**63 - 1),
                          seed=_whole(value, "seed", 0, 2**63 - 1))
        else:
            raise LedgerError(f"users grouping must be 'file' or 'consecutive', got {str(grouping)[:40]!r}")
    except KeyError as e:
        raise LedgerError(f"users lacks the field {e.args[0]!r}") from None
    return record


def atomic_write_bytes(path: str | os.PathLike, data: bytes, *, sync: bool = True,
                       option: str | None = None) -> None:
    """Write ``data`` to ``path`` atomically (:func:`dpcalc._files.atomic_write`; missing parent
    directories are created)."""
    atomic_write(path, lambda f: f.write(data), sync=sync, option=option, make_parents=True)


def atomic_torch_save(obj: Any, path: str | os.PathLike, *, option: str | None = None) -> None:
    """``torch.save(obj)`` to ``path`` atomically (:func:`dpcalc._files.atomic_write`)."""
    import torch

    atomic_write(path, lambda f: torch.save(obj, f), option=option, make_parents=True)


def write_ledger(directory: str | os.PathLike, ledger: PrivacyLedger) -> None:
    """Rewrite ``ledger.json`` atomically (no fsync: this runs every step; a killed
    process's writes survive in the page cache, which is what matters here)."""
    data = json.dumps(ledger.to_json(), sort_keys=True).encode()
    atomic_write_bytes(Path(directory) / LEDGER_NAME, data, sync=False)


def read_ledger(directory: str | os.PathLike) -> PrivacyLedger | None:
    """The ledger in ``directory``, or None if there is none.

    Raises:
        LedgerError: not a regular file, too large, not JSON, or a field invalid
            (:meth:`PrivacyLedger.from_json`); the message names the file.
    """
    path = Path(directory) / LEDGER_NAME
    if not path.exists() and not path.is_symlink():
        return None
    try:
        if not path.is_file():
            raise LedgerError("not a regular file")
        if path.stat().st_size > _MAX_LEDGER_BYTES:
            raise LedgerError(f"larger than {_MAX_LEDGER_BYTES:,} bytes")
        data = json.loads(path.read_bytes().decode("utf-8"))
        return PrivacyLedger.from_json(data)
    except LedgerError as e:
        raise LedgerError(f"privacy ledger {path} is unusable: {e.message}") from None
    except (OSError, ValueError, RecursionError) as e:
        first = (str(e).strip().splitlines() or [""])[0][:160]
        raise LedgerError(f"privacy ledger {path} is unusable: {type(e).__name__}: {first}") from None


def save_checkpoint(directory: str | os.PathLike, state: dict) -> Path:
    """Write ``checkpoint.pt`` atomically; ``state`` is the dict built by the training loop."""
    path = Path(directory) / CHECKPOINT_NAME
    atomic_torch_save({"format": FORMAT, **state}, path)
    return path


def load_checkpoint(directory: str | os.PathLike) -> dict | None:
    """The checkpoint in ``directory`` (None if there is none).

    Raises:
        CheckpointError: unreadable or not a dpcalc checkpoint.
    """
    import torch

    path = Path(directory) / CHECKPOINT_NAME
    if not path.exists():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - torch raises several types for corrupt files
        first = (str(e).strip().splitlines() or [""])[0][:160]
        raise CheckpointError(f"cannot read checkpoint {path} ({type(e).__name__}: {first})") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a dpcalc train checkpoint")
    return state
