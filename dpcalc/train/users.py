r"""User-level DP-SGD (``dpcalc train --privacy-unit user``): users sampled, each user's update clipped.

The privacy unit is the *user*: neighbouring datasets differ in all the records of one user. Each
step samples users — Poisson sampling at rate q = B/U over the U users, the trainer's own Poisson
sampler run over user indices — and every sampled user u contributes one update, the mean of its
records' gradients clipped to norm C:

.. math::
    \bar g_u = \frac{1}{n_u}\sum_{i \in u} \nabla \ell_i, \qquad
    \tilde g = \frac{1}{qU}\Big(\sum_{u \in B} \bar g_u \min\big(1, C/\lVert \bar g_u\rVert_2\big)
               + \mathcal N(0, \sigma^2 C^2 I)\Big).

Adding or removing a user adds or removes one term of norm ≤ C: the user-level sensitivity is C,
and the run is DP-SGD with users in place of records — the accountant's ε at (σ, q = B/U, steps)
is the user-level ε (McMahan, Ramage, Talwar, Zhang, "Learning differentially private recurrent
language models", ICLR 2018, Algorithm 1: sample users with probability q, clip each user's update
to S, add N(0, σ²S²); here the user's update is one gradient step on its mean loss, DP-FedSGD).
The per-record gradients are not clipped: only the user's mean is (a user's records never count
more than C together, whatever their number).

A user with one record contributes exactly that record's clipped gradient; such users are clipped
by :meth:`DPSGDStep.clipped_sum` itself, so a run whose users all hold one record — ``--records-per-user
1``, or ``--user-ids`` with a distinct id per record — is the record-level run, bit for bit.

Users come from a file of user ids, one per training record in dataset order (:func:`read_user_ids`),
or from a synthetic grouping (:func:`consecutive_users`): the records are put in a seeded random
order and cut into users of k consecutive records (the last user holds the N mod k left over, when
k does not divide N); k = 1 keeps the dataset order (each record its own user).
"""

from __future__ import annotations

import hashlib
import io

import numpy as np
import torch

from dpcalc._files import read_input_file
from dpcalc.errors import ParameterError
from dpcalc.train.dpsgd import DPSGDStep, PoissonSampler
from dpcalc.train.ghost import NORM_EPS

__all__ = ["UserGroups", "read_user_ids", "users_from_ids", "consecutive_users", "plan_users", "UserSampler",
           "UserDPSGDStep", "users_note", "USER_IDS_MAX_BYTES", "grouping_seed"]

#: the largest ``--user-ids`` file read (bytes): about 20 million ids as text
USER_IDS_MAX_BYTES = 256 * 2**20


class UserGroups:
    """Which records belong to which user: user u holds ``records[offsets[u]:offsets[u + 1]]``.

    Args:
        offsets: int64 array (U + 1,), non-decreasing from 0 to N, every user non-empty.
        records: int64 array (N,), a permutation of the record indices 0 … N − 1.
        record: what the grouping is, for the privacy ledger (``grouping``, ``users``, ``records``,
            ``max_records_per_user`` and ``sha256`` or ``seed``).
    """

    def __init__(self, offsets: np.ndarray, records: np.ndarray, record: dict) -> None:
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.records = np.asarray(records, dtype=np.int64)
        counts = np.diff(self.offsets)
        self.counts = counts
        self.record = {**record, "users": int(len(counts)), "records": int(len(self.records)),
                       "max_records_per_user": int(counts.max()) if len(counts) else 0}

    @property
    def users(self) -> int:
        """U, the number of users."""
        return len(self.counts)

    @property
    def max_records(self) -> int:
        """The most records one user holds."""
        return self.record["max_records_per_user"]

    @property
    def singletons(self) -> bool:
        """True when every user holds exactly one record (the record-level run)."""
        return self.max_records == 1


def grouping_seed(seed: int) -> int:
    """The seed of the synthetic grouping: child 4 of ``numpy.random.SeedSequence(seed)`` (children
    0 … 3 seed the model, the sampling, the noise and the canaries; :func:`dpcalc.train.loop._seeds`)."""
    child = np.random.SeedSequence(seed).spawn(5)[4]
    return int(child.generate_state(1, dtype=np.uint64)[0] & ((1 << 63) - 1))


def consecutive_users(n_records: int, k: int, *, seed: int) -> UserGroups:
    """Synthetic users of k records: the records in a random order (numpy ``default_rng(seed)``
    permutation; dataset order for k = 1) cut into ⌈N/k⌉ users of k consecutive records, the last
    one holding N − (⌈N/k⌉ − 1)k.

    Raises:
        ParameterError: k < 1 or k > N.
    """
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1 or k > n_records:
        raise ParameterError("records_per_user", f"a whole number in [1, {n_records}] (the training records)", k)
    order = (np.arange(n_records, dtype=np.int64) if k == 1
             else np.random.default_rng(seed).permutation(n_records).astype(np.int64))
    users = -(-n_records // k)
    offsets = np.minimum(np.arange(users + 1, dtype=np.int64) * k, n_records)
    for u in range(users):  # each user's records in dataset order (the order inside a user is immaterial)
        order[offsets[u]:offsets[u + 1]].sort()
    return UserGroups(offsets, order, {"grouping": "consecutive", "records_per_user": int(k), "seed": int(seed)})


def _bad(path: str, what: str) -> ParameterError:
    return ParameterError("user_ids", "whole numbers >= 0, one per training record", path,
                          message=f"--user-ids {path!r}: {what}")


def read_user_ids(path: str, *, records: int) -> np.ndarray:
    """The user id of each training record, in dataset order, from ``path``.

    Formats: ``.npy`` (a 1-D array of integers, read with ``allow_pickle=False``), or text (also
    ``.csv``): one id per line, blank lines and ``#`` comments skipped. An id is a whole number ≥ 0.
    The file is read by the one safe reader (:func:`dpcalc._files.read_input_file`, at most
    :data:`USER_IDS_MAX_BYTES`).

    Args:
        path: the file name.
        records: N, the number of training records (the ids must be exactly N).

    Returns:
        int64 array (N,).

    Raises:
        ParameterError: unreadable, too large, not UTF-8 text or not a 1-D integer ``.npy``; an id
            that is not a whole number ≥ 0 (its line); no ids; a number of ids other than N.
    """
    raw = read_input_file(path, option="user_ids", max_bytes=USER_IDS_MAX_BYTES)
    if raw[:6] == b"\x93NUMPY":
        try:
            arr = np.load(io.BytesIO(raw), allow_pickle=False)
        except (ValueError, OSError, EOFError) as e:
            raise _bad(path, f"not a readable .npy array ({' '.join(str(e).split())[:80]})") from None
        if arr.ndim != 1 or not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
            raise _bad(path, f"expected a 1-D array of whole numbers, got shape {arr.shape} of {arr.dtype}")
        if np.issubdtype(arr.dtype, np.floating):
            bad = ~np.isfinite(arr) | (arr != np.round(arr))
            if bad.any():
                i = int(np.argmax(bad))
                raise _bad(path, f"entry {i}: expected a whole number >= 0, got {arr[i]!r}")
        if len(arr) and (arr < 0).any():
            i = int(np.argmax(arr < 0))
            raise _bad(path, f"entry {i}: expected a whole number >= 0, got {arr[i]!r}")
        if len(arr) and float(arr.max()) >= 2.0**63:
            raise _bad(path, "ids must be below 2^63")
        ids = arr.astype(np.int64)
    else:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise _bad(path, "not UTF-8 text (nor a .npy array)") from None
        out = []
        for lineno, line in enumerate(text.splitlines(), start=1):
            item = line.split("#", 1)[0].strip()
            if not item:
                continue
            if not item.isascii() or not item.isdigit() or len(item) > 18:
                raise _bad(path, f"line {lineno}: expected one whole number >= 0 (below 10^18), got "
                                 f"{item[:40]!r}")
            out.append(int(item))
        ids = np.asarray(out, dtype=np.int64)
    if len(ids) == 0:
        raise _bad(path, "holds no user ids")
    if len(ids) != records:
        raise ParameterError("user_ids", f"one id per training record ({records})", len(ids), message=(
            f"--user-ids {path!r} has {len(ids):,} ids, but the training set has {records:,} records "
            "(one id per record, in dataset order)"))
    return ids


def users_from_ids(ids: np.ndarray, *, digest: str) -> UserGroups:
    """The users of an id per record: one user per distinct id (in increasing id order), its
    records in dataset order."""
    _, inverse = np.unique(ids, return_inverse=True)
    inverse = inverse.reshape(-1)
    order = np.argsort(inverse, kind="stable").astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(np.bincount(inverse))]).astype(np.int64)
    return UserGroups(offsets, order, {"grouping": "file", "sha256": digest})


def plan_users(config, n_records: int, *, world_size: int = 1) -> UserGroups | None:
    """The users of a ``--privacy-unit user`` run (None at the record level).

    Raises:
        ParameterError: a bad ``--user-ids`` file (:func:`read_user_ids`), k > N, or several
            processes (the user-level step runs in one process).
    """
    if config.privacy_unit != "user":
        return None
    if world_size > 1:
        raise ParameterError("nproc", "1", world_size, message=(
            f"--privacy-unit user runs in one process (the users' records are gathered per step), got "
            f"{world_size} processes"))
    if config.user_ids is not None:
        ids = read_user_ids(config.user_ids, records=n_records)
        digest = hashlib.sha256(np.ascontiguousarray(ids).tobytes()).hexdigest()
        return users_from_ids(ids, digest=digest)
    return consecutive_users(n_records, config.records_per_user, seed=grouping_seed(config.seed))


class UserSampler:
    """Poisson sampling of users: each of the U users joins a step with probability q (the
    trainer's :class:`PoissonSampler` over user indices, the same generator draws), and the batch
    is the sampled users' records, grouped by user.

    After :meth:`sample`, ``last_counts`` holds the records of each sampled user (int64, in batch
    order), read by :class:`UserDPSGDStep`.
    """

    def __init__(self, users: UserGroups, *, sample_rate: float, generator: torch.Generator) -> None:
        self.users = users
        self.poisson = PoissonSampler(dataset_size=users.users, sample_rate=sample_rate, generator=generator)
        self._offsets = torch.from_numpy(users.offsets)
        self._records = torch.from_numpy(users.records)
        self.last_counts = torch.zeros(0, dtype=torch.int64)

    def sample(self) -> torch.Tensor:
        """The record indices of one step: the sampled users' records, user after user."""
        u = self.poisson.sample()
        starts = self._offsets[u]
        counts = self._offsets[u + 1] - starts
        self.last_counts = counts
        total = int(counts.sum())
        if total == 0:
            return torch.zeros(0, dtype=torch.int64)
        first = torch.repeat_interleave(torch.cumsum(counts, 0) - counts, counts)
        pos = torch.repeat_interleave(starts, counts) + torch.arange(total) - first
        return self._records[pos]


class UserDPSGDStep(DPSGDStep):
    """The DP-SGD step at the user level: the users of ``sampler``'s last draw, each contributing
    its records' mean gradient clipped to C (module docstring); noise N(0, σ²C²), divided by the
    expected number of users qU (``expected_batch_size``). Arguments as :class:`DPSGDStep`, and
    ``sampler``: the :class:`UserSampler` whose last batch each :meth:`step` receives.
    """

    def __init__(self, *args, sampler: UserSampler, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.sampler = sampler

    def clipped_sum(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, float]:
        """Σ over the sampled users of their mean gradient times min(1, C/(‖ḡ_u‖₂ + 10⁻⁶)), flattened
        to (P,), and Σ of the records' losses. ``x``, ``y``: the sampler's last batch (records
        grouped by user, ``sampler.last_counts`` records each).

        Raises:
            ParameterError: as :meth:`DPSGDStep.clipped_sum`; the batch is not the sampler's last one.
        """
        counts = self.sampler.last_counts.to(torch.int64)
        if int(counts.sum()) != x.shape[0]:
            raise ParameterError("batch", "", x.shape[0], message=(
                f"the user-level step got {x.shape[0]} records, but the sampled users hold {int(counts.sum())}"))
        single = counts == 1
        if bool(single.all()):  # every sampled user one record: its clipped gradient (the record-level step)
            return super().clipped_sum(x, y)
        owner = torch.repeat_interleave(torch.arange(len(counts)), counts)
        rec_single = single[owner].to(x.device)
        total, loss_sum = None, 0.0
        if bool(single.any()):
            total, loss_sum = super().clipped_sum(x[rec_single], y[rec_single])
        many = ~rec_single
        multi, multi_loss = self._users_clipped_sum(x[many], y[many], counts[~single])
        total = multi if total is None else total + multi
        return total, loss_sum + multi_loss

    def _users_clipped_sum(self, x: torch.Tensor, y: torch.Tensor,
                           counts: torch.Tensor) -> tuple[torch.Tensor, float]:
        """Σ_u clip_C(mean of user u's records' gradients) over users of ``counts`` records each
        (the records of ``x`` user after user). Whole users are gathered in chunks of about
        ``max_physical_batch`` records; the per-record gradients are computed at most
        ``max_physical_batch`` at a time and summed per user (``index_add_``)."""
        versions = [b._version for b in self.model.buffers()]
        sizes = [self._params[n].numel() for n in self.names]
        out = torch.zeros(self.num_parameters, device=self._device)
        loss_sum = 0.0
        ends = torch.cumsum(counts, 0).tolist()
        u0, r0 = 0, 0
        while u0 < len(ends):
            u1 = u0 + 1  # at least one whole user, then more while they fit
            while u1 < len(ends) and ends[u1] - r0 <= self.max_physical_batch:
                u1 += 1
            r1 = ends[u1 - 1]
            c = counts[u0:u1]
            owner = torch.repeat_interleave(torch.arange(u1 - u0), c).to(self._device)
            sums = [torch.zeros((u1 - u0, s), device=self._device) for s in sizes]
            for s0 in range(r0, r1, self.max_physical_batch):
                s1 = min(r1, s0 + self.max_physical_batch)
                grads, losses = self.per_example_gradients(x[s0:s1], y[s0:s1])
                seg = owner[s0 - r0:s1 - r0]
                for acc, n in zip(sums, self.names, strict=True):
                    acc.index_add_(0, seg, grads[n].reshape(s1 - s0, -1))
                loss_sum += float(losses.sum())
            inv = (1.0 / c.to(torch.float32)).to(self._device).unsqueeze(1)
            means = [acc * inv for acc in sums]
            sq = torch.stack([torch.linalg.vector_norm(m, dim=1) for m in means]).square().sum(0)
            factors = (self.max_grad_norm / (sq.sqrt() + NORM_EPS)).clamp_max(1.0)
            out += torch.cat([factors @ m for m in means])
            u0, r0 = u1, r1
        if [b._version for b in self.model.buffers()] != versions:
            raise ParameterError(
                "model", "", None,
                message="--model: a layer updated its buffers from the training data (running "
                        "statistics), which would be released without clipping or noise")
        return out, loss_sum


def users_note(users: UserGroups) -> str:
    """One line for the run's start: the users and how they were formed."""
    r = users.record
    how = (f"from --user-ids (sha256 {r['sha256'][:12]}…)" if r["grouping"] == "file"
           else f"synthetic: {r['records_per_user']} consecutive records of a seeded permutation each")
    return (f"privacy unit: the user — {r['users']:,} users of at most {r['max_records_per_user']:,} records "
            f"({r['records']:,} records; {how}); q = B/U counts users, each user's mean gradient clipped to C")

