"""Privacy per person on the DP-SGD commands (issue 28): ``--group-size`` and the note comparing
the group-level ε with what ``dpcalc convert group`` certifies (docs/how-to/group-and-user-level.md).
The mathematics is in :mod:`dpcalc.accounting.group`; this module parses and words."""

from __future__ import annotations

import math
from typing import Any

from dpcalc.cli.options import RANGES, number_option
from dpcalc.cli.render import fmt

__all__ = ["group_size_option", "group_notes", "user_options", "resolve_user_unit", "per_user", "train_user_options",
           "check_train_user_processes", "train_user_notes"]


def group_size_option(f):
    """``--group-size k``: account for a group of k records added or removed together."""
    return number_option(
        "--group-size", kind=RANGES["group_size"], default=1,
        help="k ≥ 1: the guarantee for a group of k records added or removed together (one person's records), "
             "by the binomial mixture of Gaussians (Ganesh 2024; Poisson sampling or none). Printed beside what "
             "`dpcalc convert group` gives from the record-level guarantee.")(f)


def group_notes(schedule, comparison: dict[str, Any] | None, quantity: str) -> list[str]:
    """The lines under a table when ``--group-size`` k > 1: what the numbers are and the
    conversion's value (``comparison``: :func:`dpcalc.accounting.dpsgd.convert_group_comparison`)."""
    k = schedule.group_size
    if k <= 1:
        return []
    lines = [f"Group of k = {k} records added or removed together: each step is the mixture of Gaussians "
             f"Σ_j Bin({k}, q)(j)·N(j·C, σ²C²) (Ganesh 2024; Choquette-Choo et al. 2023 Cor. 4.7), which "
             "dominates the step and is attained: pld brackets its exact curve, rdp bounds it."]
    if comparison is not None:
        key = "convert_group_epsilon" if quantity == "epsilon" else "convert_group_delta"
        value = comparison.get(key)
        what = "ε" if quantity == "epsilon" else "δ"
        shown = "∞" if value is None or not math.isfinite(value) else fmt(value, 4, "up")
        lines.append(f"`dpcalc convert group` from the record-level guarantee ({comparison['accountant']}) would "
                     f"certify {what} = {shown} for the same group (Vadhan 2017 Lemma 2.2).")
    return lines


def user_options(f):
    """``--privacy-unit record|user`` and ``--records-per-user k|FILE``."""
    import click

    f = click.option(
        "--records-per-user", type=str, default=None,
        help="With --privacy-unit user: the most records one user holds (a whole number), or a file of counts "
             "(one whole number >= 1 per line, one line per user; then N users = its lines). Per-user clipping "
             "makes ε independent of it; it is checked and reported.")(f)
    return click.option(
        "--privacy-unit", type=click.Choice(["record", "user"]), default="record", show_default=True,
        help="record: neighbouring datasets differ in one record. user: in one user's records — users are "
             "sampled (-q, --batch-size, --dataset-size count users) and each user's update is clipped to C "
             "(the mean of its records' clipped gradients, or their sum clipped again to C: sensitivity C). "
             "For record-level sampling with a user's k records, use --group-size k.")(f)


def resolve_user_unit(privacy_unit: str, records_per_user: str | None, dataset_size, group_size: int
                      ) -> tuple[object, dict[str, Any], list[str]]:
    """Check the privacy-unit options: (dataset size to use, JSON inputs, notes).

    Raises:
        ParameterError: --records-per-user without --privacy-unit user, with --group-size, a
            count < 1, or a bad counts file (:func:`dpcalc.accounting.federated.read_records_per_user`).
    """
    import re

    from dpcalc.errors import ParameterError

    if privacy_unit == "record":
        if records_per_user is not None:
            raise ParameterError("records_per_user", "", records_per_user, message=(
                "--records-per-user applies with --privacy-unit user (users sampled whole); for record-level "
                "sampling and a user's k records use --group-size k"))
        return dataset_size, {}, []
    if group_size > 1:
        raise ParameterError("group_size", "", group_size, message=(
            "--group-size is for record-level sampling; with --privacy-unit user each sampled user is one "
            "clipped update already"))
    inputs: dict[str, Any] = {"privacy_unit": "user"}
    if records_per_user is not None:
        if re.fullmatch(r"[+-]?\d+", records_per_user.strip()):
            k = int(records_per_user)
            if k < 1:
                raise ParameterError("records_per_user", "a whole number >= 1 or a file of counts", k)
            inputs["records_per_user"] = k
        else:
            from dpcalc.accounting.federated import read_records_per_user

            users = None if dataset_size is None else int(dataset_size)
            counts = read_records_per_user(records_per_user, users=users)
            inputs.update(records_per_user=max(counts), users=len(counts), records=sum(counts))
            if dataset_size is None:
                dataset_size = len(counts)
    notes = ["Privacy unit: the user. Users are sampled (the sampling options count users) and each sampled "
             "user's update is clipped to C — the mean of its records' clipped gradients, or their sum clipped "
             "again to C — so adding or removing a user moves the noisy sum by at most C: the accountants run "
             "at the user level (McMahan et al. 2018). Without the second clipping, a sum of k clipped "
             "gradients has sensitivity k·C: use --sigma σ/k."]
    if "users" in inputs:
        notes.append(f"Records per user (file): {inputs['users']:,} users, {inputs['records']:,} records, at most "
                     f"{inputs['records_per_user']:,} per user.")
    return dataset_size, inputs, notes


def per_user(notes: list[str], unit_inputs: dict[str, Any]) -> list[str]:
    """The sampler sentences worded for users when the privacy unit is the user."""
    if unit_inputs.get("privacy_unit") != "user":
        return notes
    return [n.replace("each record joins", "each user joins") for n in notes]


def train_user_options(f):
    """``dpcalc train``'s ``--privacy-unit``, ``--user-ids FILE`` and ``--records-per-user k``."""
    import click

    f = number_option(
        "--records-per-user", kind=RANGES["batch_size"], default=None, metavar="K",
        help="With --privacy-unit user: synthetic users of K records (the records in a seeded random order, cut "
             "into users of K consecutive records; the last holds the rest; K = 1 keeps the dataset order).")(f)
    f = click.option(
        "--user-ids", type=str, default=None, metavar="FILE",
        help="With --privacy-unit user: the user id of each training record, in dataset order (text or .csv: one "
             "whole number >= 0 per line; or a 1-D integer .npy).")(f)
    return click.option(
        "--privacy-unit", type=click.Choice(["record", "user"]), default="record", show_default=True,
        help="record: DP for one training record. user: DP for all records of one user — users are Poisson-"
             "sampled (q = B/U, --batch-size counts users) and each sampled user's mean gradient is clipped to C "
             "(sensitivity C; McMahan et al. 2018 Alg. 1); ε is user-level.")(f)


def check_train_user_processes(config, nproc: int | None) -> None:
    """``--privacy-unit user`` runs in one process: ``--nproc W > 1`` is refused before any process starts.

    Raises:
        ParameterError: the user-level run with W > 1.
    """
    from dpcalc.errors import ParameterError

    if config.privacy_unit == "user" and nproc is not None and nproc > 1:
        raise ParameterError("nproc", "1", nproc, message=(
            f"--privacy-unit user runs in one process (each step gathers the sampled users' records), got --nproc "
            f"{nproc}"))


def train_user_notes(result, config, accountant: str) -> tuple[dict[str, Any], list[str]]:
    """The inputs and the lines under ``dpcalc train``'s table for a user-level run (empty at the record
    level): the unit, the users, and the calculator command that gives the same ε."""
    users = getattr(result, "users", None)
    if users is None:
        return {}, []
    inputs = {"privacy_unit": "user", "users": users["users"], "records_per_user": users["max_records_per_user"]}
    how = ("ids from --user-ids" if users["grouping"] == "file" else
           f"synthetic: a seeded random order cut into users of {users['records_per_user']} consecutive records")
    notes = [f"Privacy unit: the user ({users['users']:,} users, {users['records']:,} records, at most "
             f"{users['max_records_per_user']:,} per user; {how}). Users are Poisson-sampled at q = B/U and each "
             "sampled user's update — the mean of its records' gradients — is clipped to C, so adding or removing "
             "a user moves the noisy sum by at most C: ε is user-level (McMahan, Ramage, Talwar, Zhang 2018, "
             "Alg. 1).",
             f"Same as: dpcalc epsilon --sigma {result.noise_multiplier!r} --sample-rate {result.sample_rate!r} "
             f"--steps {result.steps} --delta {config.delta!r} --accountant {accountant} --privacy-unit user "
             f"--records-per-user {users['max_records_per_user']}"]
    return inputs, notes
