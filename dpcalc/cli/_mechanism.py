"""What the noise calculators ``dpcalc gaussian`` and ``dpcalc laplace`` share: the request's
mode (noise for an ε, or ``--accuracy``: the ε an accuracy target needs) and the table of an
exact-sampler release (``--release``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dpcalc.cli.ledger import ReleaseGuard, with_ledger
from dpcalc.cli.render import Column, emit, fmt
from dpcalc.errors import ParameterError

__all__ = ["DEFAULT_ACCURACY_BETA", "calculator_beta", "require_release_epsilon", "emit_release"]

#: β of ``--accuracy`` when ``--beta`` is not given
DEFAULT_ACCURACY_BETA = 0.05


def calculator_beta(epsilon: float | None, accuracy: float | None, beta: float | None) -> float | None:
    """Check that exactly one of ``--eps`` and ``--accuracy`` is given and return β: with
    ``--accuracy`` (the inverse: the ε needed) β defaults to 0.05; otherwise it stays as given
    (None: no error bounds).

    Raises:
        ParameterError: both or neither of ε and the accuracy target given.
    """
    if accuracy is not None:
        if epsilon is not None:
            raise ParameterError("accuracy", "given without --eps (it computes the ε)", accuracy)
        return DEFAULT_ACCURACY_BETA if beta is None else beta
    if epsilon is None:
        raise ParameterError("epsilon", "given", None,
                             message="epsilon is required (or --accuracy for the inverse)")
    return beta


def require_release_epsilon(epsilon: float | None) -> float:
    """ε of a ``--release`` (required there).

    Raises:
        ParameterError: ε not given.
    """
    if epsilon is None:
        raise ParameterError("epsilon", "given", None, message="epsilon is required with --release")
    return epsilon


def emit_release(command: str, res: Any, *, inputs: dict[str, Any], guard: ReleaseGuard | None,
                 json_output: bool, title: str, columns: Sequence[Column]) -> None:
    """Print an exact-sampler release (a :class:`dpcalc.results.MechanismResult` whose details
    carry ``guarantee``, ``note`` and ``released_exact``) and mark the ledger reservation
    released.

    The table: mechanism, ε, then ``columns`` (the sampler's own), then the released value; the
    notes: the guarantee, the sampler's note, the source and, with a ledger, the budget left.
    """
    notes = [f"Guarantee: {res.details['guarantee']}.", res.details["note"] + ".",
             "Source: " + res.source + "."]
    emit(command=command, inputs=inputs, results=[with_ledger(res.to_json(), guard, notes)],
         json_output=json_output, title=title,
         columns=[Column("mechanism", lambda r: r["method"], "left"),
                  Column("ε", lambda r: fmt(r["epsilon"], rounding="up")),
                  *columns,
                  Column("released", lambda r: r["details"]["released_exact"])],
         notes=notes)
    if guard is not None:
        guard.released()
