"""Audit canaries for ``dpcalc train --audit-canaries m`` (one-run audit, Steinke, Nasr,
Jagielski 2023, "Privacy auditing with one (1) training run", NeurIPS).

**The canaries.** m out-of-distribution images: every pixel independently uniform on
0…255 (uint8), each with a label drawn uniformly from 0…9 (fixed for that canary). Each
canary is **included** in the training set independently with probability ½. Images,
labels and the inclusion coins all come from one numpy ``Generator(PCG64(seed))``, whose
``seed`` is derived from ``--seed`` and recorded in the privacy ledger together with a
SHA-256 digest of the canary set, so the canaries of a run can be regenerated (and a
resumed run is checked to use the same ones).

**They are training records.** The included canaries are appended to the training set
before anything else: N (the dataset size), the Poisson sampling rate q = B/N and therefore
the accounting all use N = N_data + (included canaries). Their gradients are clipped and
noised like every other record's, so the certified ε holds for every record, canaries
included; the test accuracy is that of the model trained with them.

**The score.** After training, every canary (included or not) is scored by its negative
cross-entropy loss under the final model (higher = "more likely in"); the CLI runs the
one-run audit of :mod:`dpcalc.risk.audit` on (included, score). Its result is a *lower*
bound on the true ε of this training run (with confidence 1 − β), never a replacement for
the certified upper bound.

Only numpy and torch; the audit itself lives in the risk layer (called by the CLI).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

__all__ = ["CANARY_KIND", "MAX_CANARIES", "Canaries", "make_canaries", "canary_scores"]

#: the kind of canary, as recorded in the ledger
CANARY_KIND = "uniform-noise images (pixels iid uniform 0..255), uniformly random fixed label"
#: the most canaries a run may insert
MAX_CANARIES = 1_000_000


@dataclass(frozen=True)
class Canaries:
    """A canary set.

    Attributes:
        images: uint8 array (m, 28, 28).
        labels: int64 array (m,), in 0…9.
        included: bool array (m,): the canary is in the training set.
        seed: the seed of the generator that drew everything above.
    """

    images: np.ndarray
    labels: np.ndarray
    included: np.ndarray
    seed: int

    @property
    def count(self) -> int:
        """m, the number of canaries (included or not)."""
        return int(self.labels.shape[0])

    @property
    def included_count(self) -> int:
        """How many canaries are in the training set (they add to N)."""
        return int(self.included.sum())

    def digest(self) -> str:
        """SHA-256 (hex) of the images, labels and inclusion coins (ledger check on resume)."""
        h = hashlib.sha256()
        h.update(np.ascontiguousarray(self.images, dtype=np.uint8).tobytes())
        h.update(np.ascontiguousarray(self.labels, dtype="<i8").tobytes())
        h.update(np.ascontiguousarray(self.included, dtype=np.uint8).tobytes())
        return h.hexdigest()

    def ledger_record(self) -> dict:
        """What the privacy ledger records about the canaries."""
        return {"count": self.count, "included": self.included_count, "seed": int(self.seed),
                "kind": CANARY_KIND, "sha256": self.digest()}


def make_canaries(count: int, *, seed: int) -> Canaries:
    """Draw ``count`` canaries (see the module docstring) from ``Generator(PCG64(seed))``:
    first the images (count·784 integers), then the labels, then the inclusion coins
    (``random() < 0.5``), in that order — the same seed gives the same canaries.

    Args:
        count: m ≥ 1.
        seed: a whole number ≥ 0.
    """
    rng = np.random.Generator(np.random.PCG64(seed))
    images = rng.integers(0, 256, size=(count, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, size=count).astype(np.int64)
    included = rng.random(count) < 0.5
    return Canaries(images, labels, included, int(seed))


@torch.no_grad()
def canary_scores(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, *, batch: int = 2000) -> np.ndarray:
    """Negative cross-entropy loss of each canary under ``model`` (higher = more likely a member).

    Args:
        model: the trained model, (B, 1, 28, 28) -> (B, 10) logits.
        x: prepared canary images (m, 1, 28, 28) float32. y: labels (m,) int64.

    Returns:
        float64 array (m,).
    """
    was_training = model.training
    model.eval()
    out = []
    for start in range(0, len(y), batch):
        logits = model(x[start:start + batch])
        out.append(-F.cross_entropy(logits.double(), y[start:start + batch], reduction="none"))
    model.train(was_training)
    return torch.cat(out).cpu().numpy() if out else np.zeros(0)
