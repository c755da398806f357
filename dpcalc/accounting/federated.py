r"""Federated learning and user-level DP-SGD as the existing samplers at the level of the person
(issue 28): DP-FedAvg (McMahan, Ramage, Talwar, Zhang 2018, "Learning differentially private
recurrent language models", ICLR) and adaptive clipping (Andrew, Thakkar, McMahan, Ramaswamy 2021,
"Differentially private learning with adaptive clipping", NeurIPS).

**User-level sampling.** Each round (step) samples clients (users), each sampled client sends one
update clipped to norm C — the mean of its records' clipped gradients, or their sum clipped again
to C (McMahan et al. 2018 §2) — the server adds N(0, z²C²) to the sum. Adding or removing one
user moves the sum by at most C: the step is the DP-SGD step at the user level, so every sampler
and accountant of dpcalc applies with users in place of records: Poisson client sampling at
q = m/N (each client joins a round with probability q; m the expected clients per round), or
fixed-size sampling of exactly m of the N clients without replacement (:func:`fl_schedule`).
The records per user only matter without the second clipping: a sum of k clipped gradients has
norm ≤ kC, i.e. the noise multiplier z/k.

**Adaptive clipping.** Andrew et al. 2021 (Thm 1 there, in our words) estimate the unclipped
fraction each round with the noisy count Σ_i (b_i − ½) + N(0, σ_b²), b_i ∈ {0, 1} (sensitivity
½), released with the noisy update sum N(0, z_Δ²C²) on the same sampled clients. The pair is one
Gaussian query on the vector (Σ Δ_i/(z_Δ C), Σ (b_i − ½)/σ_b) with unit noise and ℓ₂ sensitivity
√(z_Δ⁻² + (2σ_b)⁻²): exactly the Gaussian step with the effective noise multiplier

    z = (z_Δ⁻² + (2σ_b)⁻²)^{−1/2},   and back:  z_Δ = (z⁻² − (2σ_b)⁻²)^{−1/2}  (needs 2σ_b > z),

composed over the rounds like any DP-SGD step (:func:`effective_noise_multiplier`,
:func:`update_noise_multiplier`). Both directions are rounded so as never to under-report: the
effective z down, the update noise z_Δ up.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dpcalc import _validate as v
from dpcalc._files import read_input_file
from dpcalc._numerics import round_down, round_up
from dpcalc.accounting._sampling import default_accountant_for
from dpcalc.accounting.dpsgd import (
    epsilon_by_accountant,
    noise_multiplier_by_accountant,
    resolve_accountants,
)
from dpcalc.errors import InfeasibleError, ParameterError
from dpcalc.results import AccountingResult
from dpcalc.schedule import Schedule, resolve_schedule

__all__ = ["ADAPTIVE_CLIPPING_SOURCE", "DP_FEDAVG_SOURCE", "CLIENT_SAMPLINGS", "fl_schedule",
           "effective_noise_multiplier", "update_noise_multiplier", "read_records_per_user",
           "COUNTS_MAX_BYTES", "FederatedAccounting", "federated_accounting"]

DP_FEDAVG_SOURCE = "McMahan, Ramage, Talwar, Zhang 2018 (ICLR), DP-FedAvg"
ADAPTIVE_CLIPPING_SOURCE = "Andrew, Thakkar, McMahan, Ramaswamy 2021 (NeurIPS), Thm 1"

#: client samplers: name -> dpcalc sampler
CLIENT_SAMPLINGS = {"poisson": "poisson", "fixed": "without-replacement"}

#: the largest records-per-user file read (bytes): 10⁷ users at ~6 bytes a line
COUNTS_MAX_BYTES = 64 * 2**20


def fl_schedule(*, clients_per_round: int, total_clients: int, rounds: int, client_sampling: str = "poisson"
                ) -> Schedule:
    """The DP-SGD schedule of a DP-FedAvg run at the client level.

    Args:
        clients_per_round: m ≥ 1, the (expected, for Poisson) clients per round.
        total_clients: N ≥ m, the clients of the population.
        rounds: R ≥ 1 rounds.
        client_sampling: ``"poisson"`` (each client joins a round with probability q = m/N) or
            ``"fixed"`` (exactly m of the N clients, uniformly without replacement).

    Returns:
        a :class:`~dpcalc.schedule.Schedule` with q = m/N and T = R.

    Raises:
        ParameterError: m < 1, N < 1, m > N, R < 1, or an unknown sampler.
    """
    sampling = v.choice("client_sampling", client_sampling, tuple(CLIENT_SAMPLINGS))
    n = v.count("total_clients", total_clients, minimum=1)
    m = v.count("clients_per_round", clients_per_round, minimum=1)
    if m > n:
        raise ParameterError("clients_per_round", f"at most the total clients N = {n}", m)
    r = v.count("rounds", rounds, minimum=1)
    return resolve_schedule(batch_size=m, dataset_size=n, steps=r, sampling=CLIENT_SAMPLINGS[sampling])


def effective_noise_multiplier(update_noise: float, count_stddev: float | None) -> float:
    """z = (z_Δ⁻² + (2σ_b)⁻²)^{−1/2} (module docstring), rounded down (a smaller z never
    under-reports ε); ``count_stddev`` None (fixed clipping): z_Δ itself.

    Args:
        update_noise: z_Δ > 0, the noise multiplier of the clipped update sum.
        count_stddev: σ_b > 0, the std of the clipped-count noise (count units), or None.
    """
    z = v.positive("noise_multiplier", update_noise)
    if count_stddev is None:
        return z
    sb = v.positive("count_stddev", count_stddev)
    return float(round_down(1.0 / math.sqrt(z ** -2 + (2.0 * sb) ** -2)))


def update_noise_multiplier(effective: float, count_stddev: float | None) -> float:
    """z_Δ = (z⁻² − (2σ_b)⁻²)^{−1/2}, rounded up: the update noise whose combination with the
    count noise has effective multiplier ≥ ``effective`` (module docstring).

    Raises:
        InfeasibleError: 2σ_b ≤ z: the count query alone spends the budget.
    """
    z = v.positive("noise_multiplier", effective)
    if count_stddev is None:
        return z
    sb = v.positive("count_stddev", count_stddev)
    rest = z ** -2 - (2.0 * sb) ** -2
    if rest <= 0:
        raise InfeasibleError(f"the clipped-count noise σ_b = {sb:g} alone needs an effective noise multiplier "
                              f"below 2σ_b = {2 * sb:g}, but the target needs {z:.6g}: raise --count-stddev")
    zd = float(round_up(1.0 / math.sqrt(rest), 64))
    while effective_noise_multiplier(zd, sb) < z:  # the rounded-down check must meet the target
        zd = math.nextafter(zd, math.inf)
    return zd


@dataclass(frozen=True)
class FederatedAccounting:
    """The answer of :func:`federated_accounting`.

    Attributes:
        schedule: the client-level schedule (q = m/N, T = R).
        results: one row per accountant (ε at the given z, or the calibrated z).
        adaptive_clipping: with count noise, one entry per usable row, in row order:
            ``{"accountant", "update_noise_multiplier" (z_Δ, None where that row's z ≤ 2σ_b),
            "effective_noise_multiplier" (z), "reason"}``; empty without count noise.
    """

    schedule: Schedule
    results: list[AccountingResult]
    adaptive_clipping: list[dict[str, Any]]


def federated_accounting(
    *, clients_per_round: int, total_clients: int, rounds: int, delta: float,
    client_sampling: str = "poisson", noise_multiplier: float | None = None,
    target_epsilon: float | None = None, count_stddev: float | None = None,
    accountant: str | None = None, options: Mapping[str, Mapping[str, Any]] | None = None,
) -> FederatedAccounting:
    """ε of a DP-FedAvg run at the client level, or the noise multiplier it needs (module
    docstring: DP-SGD with clients in place of records, add-remove one client's whole data).

    Give exactly one of ``noise_multiplier`` (→ ε per accountant) or ``target_epsilon`` (→ the
    effective multiplier z per accountant, and with ``count_stddev`` the update noise z_Δ each
    row needs, rounded up).

    Args:
        clients_per_round, total_clients, rounds, client_sampling: as :func:`fl_schedule`.
        delta: δ in (0, 1).
        noise_multiplier: z_Δ > 0, the update-sum noise over the clipping norm C.
        target_epsilon: ε > 0 to calibrate for.
        count_stddev: σ_b > 0, adaptive clipping's count noise (count units), or None.
        accountant: a registry name, ``"all"``, or None (the tightest certified accountant with
            a proof for the client sampler; calibration then falls back if it cannot answer).
        options: per-accountant settings.

    Raises:
        ParameterError: both or neither of ``noise_multiplier``/``target_epsilon``; bad m, N, R.
        InfeasibleError: the count noise alone exceeds the target in every row
            (:func:`update_noise_multiplier`).
    """
    if (noise_multiplier is None) == (target_epsilon is None):
        raise ParameterError("noise_multiplier", "", None,
                             message="give exactly one of --sigma (for ε) or --eps (for σ)")
    schedule = fl_schedule(clients_per_round=clients_per_round, total_clients=total_clients, rounds=rounds,
                           client_sampling=client_sampling)
    if accountant is None:
        chosen = [default_accountant_for(schedule.event(1.0), "add-remove")]
    else:
        chosen = resolve_accountants(accountant, default_all=False)
    adaptive: list[dict[str, Any]] = []
    if noise_multiplier is not None:
        z = effective_noise_multiplier(noise_multiplier, count_stddev)
        results = epsilon_by_accountant(noise_multiplier=z, schedule=schedule, delta=delta, accountants=chosen,
                                        neighboring="add-remove", options=options)
        if count_stddev is not None:
            adaptive = [{"accountant": r.accountant, "update_noise_multiplier": noise_multiplier,
                         "effective_noise_multiplier": z, "reason": None} for r in results if r.applicable]
    else:
        results = noise_multiplier_by_accountant(target_epsilon=target_epsilon, delta=delta, schedule=schedule,
                                                 accountants=chosen, neighboring="add-remove", options=options,
                                                 fallback=accountant is None)
        if count_stddev is not None:
            failure: InfeasibleError | None = None
            for r in results:
                if not (r.applicable and r.noise_multiplier):
                    continue
                try:
                    zd: float | None = update_noise_multiplier(r.noise_multiplier, count_stddev)
                    reason = None
                except InfeasibleError as e:  # this row's z is below 2σ_b; another row's may not be
                    failure, zd, reason = failure or e, None, str(e)
                adaptive.append({"accountant": r.accountant, "update_noise_multiplier": zd,
                                 "effective_noise_multiplier": r.noise_multiplier, "reason": reason})
            if failure is not None and all(a["update_noise_multiplier"] is None for a in adaptive):
                raise failure
    return FederatedAccounting(schedule=schedule, results=results, adaptive_clipping=adaptive)


def read_records_per_user(path: str, *, users: int | None = None) -> tuple[int, ...]:
    """Records per user from a file: one whole number ≥ 1 per line (blank lines and ``#``
    comments skipped), read by the one safe reader (:func:`dpcalc._files.read_input_file`).

    Args:
        path: the file name (``-``: standard input).
        users: the number of users stated elsewhere (``--dataset-size``), or None.

    Returns:
        the counts, one per user, in file order.

    Raises:
        ParameterError: unreadable file, a line that is not a whole number ≥ 1 (its line number
            and text), no counts, or a number of counts other than ``users``.
    """
    raw = read_input_file(path, option="records_per_user", max_bytes=COUNTS_MAX_BYTES)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ParameterError("records_per_user", "a UTF-8 text file", path,
                             message=f"--records-per-user {path!r} is not UTF-8 text") from None
    counts = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        item = line.split("#", 1)[0].strip()
        if not item:
            continue
        if not item.isdigit() or int(item) == 0:
            # a user with no record is not a user of the data: counting it in U would lower q = B/U
            # below the rate at which users that hold data are sampled (review finding)
            raise ParameterError("records_per_user", "whole numbers ≥ 1, one per line", item, message=(
                f"--records-per-user {path!r} line {lineno}: expected a whole number >= 1 (a user holds at "
                f"least one record), got {item[:40]!r}"))
        counts.append(int(item))
    if not counts:
        raise ParameterError("records_per_user", "at least one count", path,
                             message=f"--records-per-user {path!r} holds no counts")
    if users is not None and len(counts) != users:
        raise ParameterError("records_per_user", f"one count per user ({users})", len(counts), message=(
            f"--records-per-user {path!r} has {len(counts)} counts, but --dataset-size says {users} users"))
    return tuple(counts)
