"""What every command shares at the command line: option bundles (decorators with glossary
names), the one numeric option type, the one-value-per-option command class and the one
safe file reader.

Numbers (:class:`Number`) are parsed once, where options are parsed: plain ASCII decimal or
scientific notation only (``0.5``, ``1e-5``, ``-3``, ``1E6``), no ``1_0``, no Unicode digits,
no hexadecimal; ``inf``/``nan`` are recognised only to be refused. Each option has a domain
(where the quantity makes sense, e.g. δ in (0, 1)) and a supported range (what dpcalc computes
reliably, e.g. δ ≥ 1e-300); a value outside either is one line naming the flag, the range and
the value, exit status 2 (docs/design.md §5). The library (``dpcalc._validate`` and the events)
keeps its own checks for Python callers.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

import click

from dpcalc._files import read_input_file  # noqa: F401 - the one safe reader, re-exported
from dpcalc._validate import NUMBER_TEXT

__all__ = ["json_option", "sampling_options", "sampler_options", "delta_option", "neighboring_option", "pld_options",
           "accountant_settings", "example_epilog", "Number", "Interval", "number_option", "RANGES",
           "StrictCommand", "StrictGroup", "read_input_file", "check_planned_steps", "MAX_STEPS",
           "AccountantChoice", "accountant_option", "parse_number_text", "NumberList", "OnlyWith",
           "check_only_with", "given", "accountant_takes", "target_epsilon_option", "target_delta_option"]

F = Callable[..., Any]

#: ASCII decimal or scientific notation; the words inf/infinity/nan are recognised so that
#: they get a range message, not a syntax message (shared with the file readers)
_NUMBER = NUMBER_TEXT


@dataclass(frozen=True)
class Interval:
    """A real interval written as in mathematics: ``"(0, 1]"``, ``"[1e-300, 1)"``, ``"[0, inf)"``."""

    text: str
    lo: float
    hi: float
    lo_open: bool
    hi_open: bool

    @classmethod
    def parse(cls, text: str) -> Interval:
        m = re.fullmatch(r"([\[(])\s*([^,]+?)\s*,\s*([^\]]+?)\s*([\])])", text)
        if m is None:  # pragma: no cover - programming error
            raise ValueError(f"bad interval {text!r}")
        return cls(text, float(m.group(2)), float(m.group(3)), m.group(1) == "(", m.group(4) == ")")

    def __contains__(self, x: float) -> bool:
        above = x > self.lo if self.lo_open else x >= self.lo
        below = x < self.hi if self.hi_open else x <= self.hi
        return above and below

    def contains_exactly(self, d: Decimal) -> bool:
        """Membership of an exact decimal (whole numbers beyond 2^53, e.g. a seed of 2^63)."""
        lo_t, hi_t = (t.strip() for t in self.text[1:-1].split(","))
        lo = None if math.isinf(self.lo) else Decimal(lo_t)
        hi = None if math.isinf(self.hi) else Decimal(hi_t)
        above = lo is None or (d > lo if self.lo_open else d >= lo)
        below = hi is None or (d < hi if self.hi_open else d <= hi)
        return above and below


class _OneLineError(click.BadParameter):
    """A bad option value, shown as ``Error: <message>`` (no "Invalid value for" prefix)."""

    def format_message(self) -> str:
        return self.message


def _flag(param: click.Parameter | None, ctx: click.Context | None) -> str:
    """The flag the user typed for ``param`` (its longest name when unknown)."""
    if param is None:
        return "value"
    opts = getattr(param, "opts", None) or [param.name or "value"]
    return next((o for o in opts if o.startswith("--")), opts[0])


class Number(click.ParamType):
    """A number option with a domain and a supported range, parsed strictly.

    Args:
        domain: where the quantity makes sense, e.g. ``"(0, 1)"`` for δ.
        supported: the range dpcalc supports (inside ``domain``), e.g. ``"[1e-300, 1)"``;
            None: the domain itself (must then be finite or the value is still refused when
            not finite).
        domain_text: how to say the domain in a message (default ``"in <domain>"``).
        whole: a whole number (``1e6`` accepted); the value is returned as ``int``.
        text: return the user's text (validated, stripped) instead of a number, for options
            whose exact decimal value matters (``--release``, ``--granularity``).
        magnitude: check ``|x|`` against the supported range (``--release``).
        zero: also accept exactly 0 (an "off" value such as δ = 0 for pure DP) although it is
            outside the supported range.

    Messages: ``--delta must be in (0, 1), got 1.5`` (outside the domain),
    ``--delta must be in [1e-300, 1) (the supported range), got 1e-320`` (outside the supported
    range), ``--sigma must be a plain decimal number such as 0.5 or 1e-5, got '1_0'`` (syntax).
    """

    name = "number"

    def __init__(self, domain: str, supported: str | None = None, *, domain_text: str | None = None,
                 whole: bool = False, text: bool = False, magnitude: bool = False,
                 zero: bool = False) -> None:
        self.domain = Interval.parse(domain)
        self.supported = Interval.parse(supported) if supported else None
        self.domain_text = domain_text or f"in {domain}"
        self.whole = whole
        self.text = text
        self.magnitude = magnitude
        self.zero = zero
        self.name = "integer" if whole else "number"

    @property
    def range_text(self) -> str:
        """The supported range, for --help and the docs' table (docs/reference/input-ranges.md)."""
        r = self.supported or self.domain
        kind = "whole number" if self.whole else "number"
        if self.magnitude:
            return f"|x| in {r.text}"
        return f"0 or {kind} in {r.text}" if self.zero else f"{kind} in {r.text}"

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:  # noqa: D102
        return "INTEGER" if self.whole else ("TEXT" if self.text else "FLOAT")

    def _fail(self, flag: str, allowed: str, raw: str, param, ctx) -> None:
        shown = raw if _NUMBER.fullmatch(raw) else repr(raw)
        raise _OneLineError(f"{flag} must be {allowed}, got {shown}", ctx=ctx, param=param)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return self.check(value, _flag(param, ctx), param, ctx)

    def check(self, value: Any, flag: str, param: click.Parameter | None = None,
              ctx: click.Context | None = None) -> Any:
        """:meth:`convert` with the subject of the message given (``"--epochs values"``)."""
        if isinstance(value, bool):  # pragma: no cover - not a click input
            self.fail(f"{flag} must be a number", param, ctx)
        if isinstance(value, (int, float)) and not self.text:  # a default given in code
            raw = repr(value)
        else:
            raw = str(value)
        stripped = raw.strip(" \t")
        if not _NUMBER.fullmatch(stripped):
            kind = "a whole number such as 100 or 1e6" if self.whole else (
                "a number in plain decimal notation such as 0.5 or 1e-5")
            self._fail(flag, f"{kind} (ASCII digits, no '_')", raw, param, ctx)
        x = float(stripped)
        shown = stripped
        check = abs(x) if self.magnitude else x
        if math.isnan(x) or (check not in self.domain) or (not math.isfinite(x)):
            self._fail(flag, self.domain_text, shown, param, ctx)
        if self.whole:
            try:
                d = Decimal(stripped)
            except InvalidOperation:  # pragma: no cover - the pattern admits only valid text
                self._fail(flag, self.domain_text, shown, param, ctx)
            if d != d.to_integral_value():
                self._fail(flag, self.domain_text, shown, param, ctx)
        if self.zero and x == 0:
            return 0.0
        outside = self.supported is not None and (
            check not in self.supported
            or (self.whole and not self.supported.contains_exactly(Decimal(stripped))))
        if outside:
            what = (f"a number with |value| <= {self.supported.text.split(',')[1].strip(' ])')}"
                    if self.magnitude else f"{'0 or ' if self.zero else ''}in {self.supported.text}")
            self._fail(flag, f"{what} (the supported range)", shown, param, ctx)
        if self.text:
            return stripped
        if self.whole:
            return int(Decimal(stripped))
        return x + 0.0  # -0.0 -> 0.0


def parse_number_text(kind: Number, flag: str, text: str) -> Any:
    """:class:`Number`'s strict parsing for a value click does not parse itself (the mechanism
    flags of ``dpcalc compose``, read in command-line order).

    Raises:
        ParameterError: the same one-line message a ``Number`` option gives.
    """
    from dpcalc.errors import ParameterError

    try:
        return kind.convert(text, click.Option([flag]), None)
    except click.BadParameter as e:
        raise ParameterError(flag.lstrip("-").replace("-", "_"), "", text, message=e.format_message()) from None


class NumberList(click.ParamType):
    """Several values of one quantity: ``a,b,c`` or a log-spaced range ``lo:hi`` / ``lo:hi:count``.

    Every value (and lo, hi) is read as the :class:`Number` ``kind`` (same syntax, domain and
    supported range; messages say ``--epochs values must be …``); ``count`` is read as
    ``points`` (a whole number in its supported range, default :attr:`default_points`).
    ``lo:hi:count`` gives ``count`` values spaced evenly on a log scale from lo to hi (both
    included); whole-number kinds are rounded and duplicates dropped. Returns the sorted list.
    """

    name = "values"

    def __init__(self, kind: Number, points: Number, *, default_points: int = 10) -> None:
        self.kind = kind
        self.points = points
        self.default_points = default_points

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:  # noqa: D102
        return "LIST"

    def _error(self, message: str, param, ctx) -> None:
        raise _OneLineError(message, ctx=ctx, param=param)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> list:  # noqa: D102
        if isinstance(value, list):  # already converted (a default given in code)
            return value
        flag = _flag(param, ctx)
        text = str(value)
        raw = text.strip()
        if not raw:
            self._error(f"{flag} needs at least one value, got {text!r}", param, ctx)

        def num(tok: str) -> float:
            return self.kind.check(tok, f"{flag} values", param, ctx)

        if ":" in raw:
            parts = raw.split(":")
            if len(parts) not in (2, 3) or not all(p.strip() for p in parts):
                self._error(f"{flag} range must be 'lo:hi' or 'lo:hi:count', got {text!r}", param, ctx)
            lo, hi = num(parts[0]), num(parts[1])
            count = self.default_points
            if len(parts) == 3:
                count = self.points.check(parts[2], f"{flag} range count", param, ctx)
            if lo > hi:
                self._error(f"{flag} range {text!r} is empty: lo > hi", param, ctx)
            if count == 1 or lo == hi:
                vals = [float(lo)]
            elif math.isfinite(hi / lo):
                r = (hi / lo) ** (1 / (count - 1))
                vals = [lo * r**k for k in range(count - 1)] + [float(hi)]
            else:  # hi/lo overflows (lo subnormal): the same points in log space
                step = (math.log(hi) - math.log(lo)) / (count - 1)
                vals = [math.exp(math.log(lo) + k * step) for k in range(count - 1)] + [float(hi)]
        else:
            toks = [t.strip() for t in raw.split(",")]
            if not all(toks):
                self._error(f"{flag} has an empty value in {text!r}", param, ctx)
            vals = [float(num(t)) for t in toks]
        if self.kind.whole:
            return sorted({int(round(x)) for x in vals})
        return sorted({float(f"{x:.6g}") for x in vals})


def number_option(*decls: str, kind: Number, help: str, **kw: Any) -> Callable[[F], F]:  # noqa: A002
    """``click.option`` with a :class:`Number` type and its supported range stated in --help."""
    return click.option(*decls, type=kind, help=f"{help} [{kind.range_text}]", **kw)


#: Supported ranges of every numeric option (docs/reference/input-ranges.md lists them).
#: Accounting (epsilon, delta, sigma):
MAX_STEPS = 10**12
RANGES: dict[str, Number] = {
    "noise_multiplier": Number("(0, inf)", "[1e-3, 1e8]", domain_text="a finite number > 0"),
    "sample_rate": Number("(0, 1]", "[1e-12, 1]"),
    "steps": Number("[0, inf)", f"[0, {MAX_STEPS:.0e}]".replace("+", ""), whole=True,
                    domain_text="a whole number >= 0"),
    "rounds": Number("[1, inf)", f"[1, {MAX_STEPS:.0e}]".replace("+", ""), whole=True,
                     domain_text="a whole number >= 1"),
    "batch_size": Number("[1, inf)", "[1, 1e12]", whole=True, domain_text="a whole number >= 1"),
    "dataset_size": Number("[1, inf)", "[1, 1e12]", whole=True, domain_text="a whole number >= 1"),
    "epochs": Number("(0, inf)", "(0, 1e9]", domain_text="a finite number > 0"),
    "delta": Number("(0, 1)", "[1e-300, 1)"),
    "epsilon_target": Number("(0, inf)", "[1e-6, 1e4]", domain_text="a finite number > 0"),
    "epsilon_at": Number("[0, inf)", "[0, 1e4]", domain_text="a finite number >= 0"),
    "max_grad_norm": Number("(0, inf)", "[1e-100, 1e100]", domain_text="a finite number > 0"),
    # tune (repeat-and-select)
    "mean_runs": Number("(0, inf)", "[1e-6, 1e6]", domain_text="a finite number in (0, inf)"),
    "eta": Number("(-1, inf)", "(-1, 1e3]", domain_text="a finite number in (-1, inf)"),
    "fixed_runs": Number("[1, inf)", "[1, 1e9]", whole=True, domain_text="a whole number >= 1"),
    "discretization": Number("(0, inf)", "(0, 10]", domain_text="a finite number > 0"),
    "pld_accuracy": Number("(0, 1)", "[1e-6, 1)"),
    # mechanism calculators
    "epsilon_mech": Number("(0, inf)", "[1e-100, 1e100]", domain_text="a finite number > 0"),
    "epsilon_gaussian": Number("(0, inf)", "[1e-100, 1e4]", domain_text="a finite number > 0"),
    "epsilon_rr": Number("(0, inf)", "[1e-100, 1e4]", domain_text="a finite number > 0"),
    "sensitivity": Number("(0, inf)", "[1e-100, 1e100]", domain_text="a finite number > 0"),
    "accuracy": Number("(0, inf)", "[1e-100, 1e100]", domain_text="a finite number > 0"),
    "beta": Number("(0, 1)", "[1e-300, 1)"),
    "dims": Number("[1, inf)", "[1, 1e9]", whole=True, domain_text="a whole number >= 1"),
    "top": Number("[0, inf)", "[0, 1e9]", whole=True, domain_text="a whole number >= 0"),
    "categories": Number("[2, inf)", "[2, 1e9]", whole=True, domain_text="a whole number >= 2"),
    "release": Number("[0, inf)", "[0, 1e100]", text=True, magnitude=True,
                      domain_text="a finite number with |value| in [0, 1e100]"),
    "granularity": Number("(0, inf)", "[1e-100, 1e100]", text=True, domain_text="a finite number > 0"),
    # convert
    "epsilon_dp": Number("[0, inf)", "[0, 1e4]", domain_text="a finite number >= 0"),
    "epsilon_pure": Number("[0, inf)", "[0, 1e100]", domain_text="a finite number >= 0"),
    "delta_closed": Number("[0, 1]", "[0, 1]"),
    "group_size": Number("[1, inf)", "[1, 1e9]", whole=True, domain_text="a whole number >= 1"),
    "sample_rate_convert": Number("(0, 1]", "[1e-300, 1]"),
    "rho": Number("(0, inf)", "[1e-100, 1e100]", domain_text="a finite number > 0"),
    # compose: the sequence flags (parsed in order by cli/compose.py) and the grid
    "count": Number("[1, inf)", "[1, 1e15]", whole=True, domain_text="a whole number >= 1"),
    "compose_steps_grid": Number("[2, inf)", "[2, 1e9]", whole=True, domain_text="a whole number >= 2"),


    # noisy-max and svt (measured: every combination of the extremes answers, < 2 s)
    "noise_scale": Number("(0, inf)", "[1e-100, 1e100]", domain_text="a finite number > 0"),
    "candidates": Number("[1, inf)", "[1, 1e12]", whole=True, domain_text="a whole number >= 1"),
    # Gumbel top-k sums k tail terms per bisection step: k = 1e5 takes 1.5 s
    "top_k": Number("[1, inf)", "[1, 1e5]", whole=True, domain_text="a whole number >= 1"),
    # β of a union bound over up to 1e12 queries or candidates: ln(k/β) must stay finite
    "beta_union": Number("(0, 1)", "[1e-100, 1)"),
    "gap": Number("[0, inf)", "[0, 1e100]", domain_text="a finite number >= 0"),
    "queries": Number("[1, inf)", "[1, 1e12]", whole=True, domain_text="a whole number >= 1"),
    "answers": Number("[1, inf)", "[1, 1e9]", whole=True, domain_text="a whole number >= 1"),
    # svt's δ for DR14's advanced-composition versions: 0 (pure ε-DP) or ln(1/δ) finite
    "delta_svt": Number("[0, 1)", "[1e-300, 1)", zero=True, domain_text="in [0, 1)"),
    # erm (calculator: every combination of the extremes answers; the fit reads a CSV)
    "delta_erm": Number("[0, 1)", "[1e-300, 1)", zero=True, domain_text="in [0, 1)"),
    "lambda_erm": Number("(0, inf)", "[1e-12, 1e6]", domain_text="a finite number > 0"),
    "lipschitz": Number("(0, inf)", "[1e-100, 1e100]", domain_text="a finite number > 0"),
    "smoothness": Number("[0, inf)", "[0, 1e100]", domain_text="a finite number >= 0"),
    "norm_bound": Number("(0, inf)", "[1e-100, 1e100]", domain_text="a finite number > 0"),
    "test_fraction": Number("(0, 1)"),
    # pate (noise in votes; teachers and classes of a vote matrix)
    "pate_noise": Number("(0, inf)", "[1e-3, 1e8]", domain_text="a finite number > 0"),
    "pate_threshold": Number("[0, inf)", "[0, 1e15]", domain_text="a finite number >= 0"),
    "pate_teachers": Number("[1, inf)", "[1, 1e15]", whole=True, domain_text="a whole number >= 1"),
    "pate_classes": Number("[1, inf)", "[1, 1e6]", whole=True, domain_text="a whole number >= 1"),
    "pate_answered": Number("[0, inf)", "[0, 1e12]", whole=True, domain_text="a whole number >= 0"),
    "pate_order": Number("(1, inf)", "[1.01, 1e4]", domain_text="a finite number > 1"),
    "pate_beta": Number("(0, inf)", "[1e-6, 0.5)", domain_text="a finite number > 0"),
    "pate_sigma_ss": Number("(0, inf)", "[1e-6, 1e8]", domain_text="a finite number > 0"),
    # plan (grid values use epsilon_target, batch_size, epochs, steps; a range has at most as
    # many points as a grid has cells, planning.plan.MAX_CELLS)
    "grid_points": Number("[1, inf)", "[1, 2500]", whole=True, domain_text="a whole number >= 1"),
    "plan_steps": Number("[1, inf)", f"[1, {MAX_STEPS:.0e}]".replace("+", ""), whole=True,
                         domain_text="a whole number >= 1"),
    "examples_budget": Number("(0, inf)", "(0, 1e30]", domain_text="a finite number > 0"),
    "rows": Number("[0, inf)", "[0, 1e9]", whole=True, domain_text="a whole number >= 0"),
    # risk (--eps uses epsilon_dp; --delta 0 is pure ε-DP, --gdp needs no δ)
    "delta_risk": Number("[0, 1)", "[1e-300, 1)", zero=True, domain_text="in [0, 1)"),
    "mu": Number("[0, inf)", "[0, 1e100]", domain_text="a finite number >= 0"),
    "fpr": Number("(0, 1)"),
    "prior": Number("(0, 1)"),
    "baseline": Number("(0, 1)"),
    # audit
    "delta_audit": Number("[0, 1)", "[0, 1)"),
    "k_guesses": Number("[0, inf)", "[0, 1e12]", whole=True, domain_text="a whole number >= 0"),
    "threshold": Number("[0, inf)", "[0, 1e308]", magnitude=True, domain_text="a finite number"),
    "seed": Number("[0, inf)", f"[0, {2**63 - 1}]", whole=True, domain_text="a whole number >= 0"),
    "epsilon_certified": Number("[0, inf)", "[0, 1e100]", domain_text="a finite number >= 0"),
    # train: the ranges of dpcalc.train.config.RANGES / INT_RANGES (its docstring gives the reasons;
    # tests/train/test_train_options.py checks they agree), read here once where options are parsed
    "noise_multiplier_train": Number("(0, inf)", "[0.05, 1e6]", domain_text="a finite number > 0"),
    "epsilon_target_train": Number("(0, inf)", "(0, 1000]", domain_text="a finite number > 0"),
    "delta_train": Number("(0, 1)", "[1e-30, 1)"),
    "audit_canaries": Number("[0, inf)", "[0, 1e6]", whole=True, domain_text="a whole number >= 0"),
    "epochs_train": Number("(0, inf)", "(0, 1e7]", domain_text="a finite number > 0"),
    "lr": Number("(0, inf)", "(0, 1e6]", domain_text="a finite number > 0"),
    "momentum": Number("[0, 1)", "[0, 1)"),
    "max_grad_norm_train": Number("(0, inf)", "(0, 1e6]", domain_text="a finite number > 0"),
    "max_epsilon": Number("(0, inf)", domain_text="a finite number > 0"),
    "max_physical_batch": Number("[1, inf)", "[1, 1e12]", whole=True, domain_text="a whole number >= 1"),
    "threads": Number("[1, inf)", "[1, 1024]", whole=True, domain_text="a whole number >= 1"),
    # sampling-cost, convert shuffle (issue 12)
    "epochs_whole": Number("[1, inf)", "[1, 1e5]", whole=True, domain_text="a whole number >= 1"),
    "mc_samples": Number("[100, inf)", "[100, 1e8]", whole=True, domain_text="a whole number >= 100"),
    "eps0": Number("(0, inf)", "[1e-6, 100]", domain_text="a finite number > 0"),
    "reports": Number("[1, inf)", "[1, 1e7]", whole=True, domain_text="a whole number >= 1"),
    "nproc": Number("[1, inf)", "[1, 1024]", whole=True, domain_text="a whole number >= 1"),
}


def check_planned_steps(schedule) -> None:
    """Refuse a schedule whose derived number of steps T exceeds :data:`MAX_STEPS` (e.g.
    ``--epochs 1e9 --dataset-size 1e12 --batch-size 1``), naming the options it came from."""
    from dpcalc.errors import ParameterError

    if schedule.steps > MAX_STEPS:
        raise ParameterError("epochs", "", schedule.steps, message=(
            f"--epochs gives T = ceil(epochs·N/B) = {schedule.steps:.3g} steps, outside the supported "
            f"range [0, {MAX_STEPS:.0e}] of --steps; use fewer epochs or a larger batch".replace("+", "")))


def noise_multiplier_option(*, help: str, **kw: Any) -> Callable[[F], F]:  # noqa: A002
    """``--sigma`` / ``--noise-multiplier`` (Opacus' name) → parameter ``noise_multiplier``: σ, the
    noise std over the clipping norm, in its supported range; one spelling for every command."""
    return number_option("--sigma", "--noise-multiplier", "noise_multiplier", kind=RANGES["noise_multiplier"],
                         help=help, **kw)


def tuning_options(f: F) -> F:
    """``--tuning-runs`` and ``--tuning-accounted``: the hyperparameter search a claim or a
    statement must account for (``check``, ``report``)."""
    f = click.option("--tuning-accounted", is_flag=True, default=None,
                     help="The stated ε already includes the tuning runs.")(f)
    return number_option("--tuning-runs", kind=RANGES["fixed_runs"], default=None,
                         help="Training runs made on the private data while tuning hyperparameters.")(f)


def json_option(f: F) -> F:
    return click.option("--json", "json_output", is_flag=True,
                        help="Print one JSON object (docs/design.md §5) instead of a table.")(f)


def delta_option(f: F) -> F:
    return number_option("--delta", kind=RANGES["delta"], required=True, help="δ, in (0, 1).")(f)


def target_epsilon_option(*, required: bool, help: str, kind: str = "epsilon_target") -> Callable[[F], F]:  # noqa: A002
    """The target ε of a command that calibrates σ: ``--eps``, also spelled ``--epsilon`` and
    ``--target-epsilon`` (Opacus's and dp_accounting's name); the command receives ``epsilon``."""
    given_default: dict[str, Any] = {"required": True} if required else {"default": None}
    return number_option("--eps", "--epsilon", "--target-epsilon", "epsilon", kind=RANGES[kind],
                         help=help, **given_default)


def target_delta_option(f: F) -> F:
    """δ of a command that calibrates σ: ``--delta``, also spelled ``--target-delta`` (Opacus's
    name); the command receives ``delta``."""
    return number_option("--delta", "--target-delta", "delta", kind=RANGES["delta"], required=True,
                         help="δ, in (0, 1).")(f)


def neighboring_option(f: F) -> F:
    return click.option(
        "--neighboring", type=click.Choice(["add-remove", "replace"]), default="add-remove",
        show_default=True,
        help="Adjacency: add/remove one record, or replace one record's value.")(f)


def sampling_options(f: F) -> F:
    """-q/--sample-rate with --steps, or --batch-size --dataset-size --epochs (or --steps)."""
    opts = [
        number_option("-q", "--sample-rate", kind=RANGES["sample_rate"], default=None,
                      help="q: Poisson sampling probability per step, in (0, 1], with --steps, or with --epochs "
                           "(T = ceil(epochs/q), Opacus's sample_rate and epochs). Omit with --steps alone for "
                           "q = 1 (no subsampling)."),
        number_option("--steps", kind=RANGES["steps"], default=None,
                      help="T: number of steps (compositions), a whole number; 1e6 notation accepted."),
        number_option("--batch-size", kind=RANGES["batch_size"], default=None,
                      help="Expected batch size B (q = B/N)."),
        number_option("--dataset-size", kind=RANGES["dataset_size"], default=None, help="Dataset size N."),
        number_option("--epochs", kind=RANGES["epochs"], default=None,
                      help="Epochs (T = ceil(epochs·N/B), or ceil(epochs/q) with --sample-rate)."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def sampler_options(f: F) -> F:
    """--sampling (the batch sampler, docs/design.md §3 glossary) and --max-batch-size (B_max of
    truncated Poisson); the command receives ``sampling`` and ``max_batch_size``."""
    from dpcalc.events import SAMPLINGS

    f = number_option("--max-batch-size", kind=RANGES["batch_size"], default=None,
                      help="B_max: cap of --sampling truncated-poisson (a random B_max of the sampled "
                           "records are kept when more were drawn).")(f)
    return click.option(
        "--sampling", type=click.Choice(list(SAMPLINGS)), default="poisson", show_default=True,
        help="Batch sampler the run used: poisson (each record joins a step with probability q = B/N), "
             "without-replacement / with-replacement (exactly B of the N records each step), "
             "truncated-poisson (Poisson capped at --max-batch-size), shuffle / balls-in-bins (each record in "
             "one of ceil(N/B) batches per epoch: certified as the Gaussian composed once per epoch, zero-out "
             "adjacency, with the bracket [lower, upper]). Accountants without a proof for the sampler are shown "
             "as not applicable, with the reason.")(f)


def pld_options(f: F) -> F:
    """--discretization and --accuracy of the PLD accountant."""
    f = number_option("--accuracy", kind=RANGES["pld_accuracy"], default=None,
                      help="pld: requested relative gap between its upper and lower ε (default 0.005).")(f)
    return number_option("--discretization", kind=RANGES["discretization"], default=None,
                         help="pld: grid step of the privacy loss in nats (default: chosen from --accuracy).")(f)


def accountant_settings(**flags: Any) -> dict[str, dict[str, Any]]:
    """Per-accountant constructor options from the accountant flags (e.g. ``discretization=``,
    ``accuracy=``; validated by the accountant): each flag given (not None) goes to every
    registered accountant that declares it in
    :attr:`~dpcalc.accounting.base.Accountant.options`.

    Returns:
        ``{accountant name: {option: value}}``, only accountants with at least one option set
        (``{}`` when no flag is given; no accountant module is then imported).
    """
    given = {k: val for k, val in flags.items() if val is not None}
    if not given:
        return {}
    from dpcalc.accounting.registry import available, get_class

    out = {}
    for name in available():
        try:
            declared = get_class(name).options
        except ImportError:  # an accountant module that cannot be loaded: its row says so
            continue
        opts = {k: val for k, val in given.items() if k in declared}
        if opts:
            out[name] = opts
    return out


def accountant_takes(option: str, accountant_param: str = "accountant") -> Callable[[dict[str, Any]], bool]:
    """An :class:`OnlyWith` test: the accountant chosen (parameter ``accountant_param``) declares
    constructor option ``option`` in :attr:`~dpcalc.accounting.base.Accountant.options` (pld's
    ``discretization`` and ``accuracy``)."""
    def applies(params: dict[str, Any]) -> bool:
        from dpcalc.accounting.registry import get_class

        name = params.get(accountant_param)
        try:
            return bool(name) and option in get_class(name).options
        except (ImportError, KeyError, ValueError):
            return True  # an unknown accountant is refused by its own check
    return applies


def example_epilog(*examples: str) -> str:
    """A --help epilog that ends with runnable examples (docs/contributing.md §10)."""
    lines = "\n".join(f"  {e}" for e in examples)
    return f"\b\nExample{'s' if len(examples) > 1 else ''}:\n{lines}"


# ---------------------------------------------------------------------------------------------
# accountants, from the registry


class AccountantChoice(click.ParamType):
    """An accountant name from :mod:`dpcalc.accounting.registry`, looked up when the command runs
    (not when this module is imported), so an accountant registered later is a valid choice and
    is listed in ``--help``; ``extra`` adds words such as ``all``.

    Args:
        extra: further accepted words (e.g. ``("all",)``).
        certified_only: accept only accountants whose numbers are proven bounds.
    """

    name = "accountant"

    def __init__(self, extra: tuple[str, ...] = (), *, certified_only: bool = False) -> None:
        self.extra = tuple(extra)
        self.certified_only = certified_only

    def choices(self) -> list[str]:
        from dpcalc.accounting.registry import available, get_class

        names = [n for n in available() if not self.certified_only or get_class(n).certified]
        return [*names, *self.extra]

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:  # noqa: D102
        return "[" + "|".join(self.choices()) + "]"

    def shell_complete(self, ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
        """The choices starting with ``incomplete``, for click's shell completion
        (docs/getting-started.md, "Shell completion")."""
        from click.shell_completion import CompletionItem

        return [CompletionItem(c) for c in self.choices() if c.startswith(incomplete)]

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        """The registry name of ``value``; a peer's name (:data:`~dpcalc.accounting.registry.ALIASES`,
        e.g. ``prv``) becomes the accountant that runs, with a one-line note on stderr naming it."""
        from dpcalc.accounting.registry import resolve_alias

        choices = self.choices()
        if value in choices:
            return value
        target, note = resolve_alias(str(value))
        if note is not None and target in choices:
            click.echo(f"Note: {note}", err=True)
            return target
        raise _OneLineError(f"{_flag(param, ctx)} must be one of {', '.join(choices)}, got {value!r}")


class _LazyDefaultOption(click.Option):
    """An option whose default is computed when the command runs or its help is shown (e.g. read
    from the registry), and shown in ``--help`` as the value itself (not click's "(dynamic)")."""

    def __init__(self, *args: Any, lazy_default: Callable[[], Any], **kwargs: Any) -> None:
        self.lazy_default = lazy_default
        super().__init__(*args, **kwargs)

    def get_default(self, ctx: click.Context, call: bool = True) -> Any:  # noqa: D102
        return self.lazy_default()


def accountant_option(*, default: str | Callable[[], str] | None, extra: tuple[str, ...] = (),
                      help: str, certified_only: bool = False) -> Callable[[F], F]:  # noqa: A002
    """``--accountant``: a registry name (checked when the command runs, see :class:`AccountantChoice`).

    Args:
        default: a word of ``extra`` (e.g. ``"all"``), None, or a function returning a registry
            name when the command runs (e.g. :func:`dpcalc.accounting.registry.default_accountant`:
            no command names an accountant).
        extra: further accepted words. help: the help text.
        certified_only: accept only accountants whose numbers are proven bounds.
    """
    from dpcalc.accounting.registry import ALIASES

    kind = AccountantChoice(extra, certified_only=certified_only)
    if ALIASES:
        help += " Peers' names: " + ", ".join(f"{a} (runs {t})" for a, (t, _) in ALIASES.items()) + "."  # noqa: A001
    if callable(default):
        return click.option("--accountant", cls=_LazyDefaultOption, lazy_default=default, type=kind,
                            show_default=True, help=help)
    return click.option("--accountant", type=kind, default=default, show_default=default is not None, help=help)


# ---------------------------------------------------------------------------------------------
# one value per option


def _duplicate_check(command: click.Command, ctx: click.Context, args: list[str]) -> None:
    """Refuse a single-valued option given twice (``--sigma 1 --sigma 2``, ``--eps 1 --epsilon 2``),
    scanning the arguments the way click's parser does (a value-taking option consumes the next
    argument, even one starting with ``-``; ``--`` ends the options)."""
    by_opt: dict[str, click.Option] = {}
    for p in command.get_params(ctx):
        if isinstance(p, click.Option) and not p.multiple and not p.count and not p.is_flag:
            for o in p.opts:
                by_opt[o] = p
    seen: dict[str, str] = {}
    i = 0
    while i < len(args):
        tok = args[i]
        i += 1
        if tok == "--":
            break
        if tok.startswith("--"):
            name, eq, _ = tok.partition("=")
            attached = bool(eq)
        elif tok.startswith("-") and len(tok) > 1:
            name, attached = tok[:2], len(tok) > 2
        else:
            continue
        p = by_opt.get(name)
        if p is None:
            continue
        if p.name in seen:
            first = seen[p.name]
            also = "" if first == name else f" (as {first} and {name})"
            raise click.UsageError(f"{name} given more than once{also}: give each option once", ctx)
        seen[p.name] = name
        if not attached:
            i += 1  # its value


@dataclass(frozen=True)
class OnlyWith:
    """A rule of a command's option table: the option is used only in some modes of the command.

    Args:
        where: the modes in words, completing "used only …" (``"with --fit"``,
            ``"with --sigma (a DP-SGD run)"``).
        applies: given the command's parsed parameters (``ctx.params``, by parameter name),
            True when the option is used.
    """

    where: str
    applies: Callable[[dict[str, Any]], bool]


def given(ctx: click.Context, name: str) -> bool:
    """Whether the user gave parameter ``name`` (on the command line or through the environment),
    as opposed to its default."""
    from click.core import ParameterSource

    return ctx.get_parameter_source(name) in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT,
                                              ParameterSource.PROMPT)


def check_only_with(command: click.Command, ctx: click.Context, rules: dict[str, OnlyWith]) -> None:
    """Refuse an option the user gave in a mode that does not use it (it would be silently ignored
    or contradicted): ``--X is used only <where>; it has no effect here (got --X V): leave it out``.

    Args:
        command: the command (its parameters give the flags as typed).
        ctx: the context after parsing (``ctx.params`` holds the converted values).
        rules: parameter name → :class:`OnlyWith`, checked in the command's option order.

    Raises:
        ParameterError: naming the first such option, where it applies and its value.
    """
    from dpcalc.errors import ParameterError

    for p in command.get_params(ctx):
        rule = rules.get(p.name or "")
        if rule is None or not given(ctx, p.name or "") or rule.applies(ctx.params):
            continue
        flag = _flag(p, ctx)
        value = ctx.params.get(p.name or "")
        if isinstance(p, click.Option) and p.is_flag:
            got = flag
        elif isinstance(value, (tuple, list)):
            got = " ".join(f"{flag} {x}" for x in value)
        else:
            got = f"{flag} {value}"
        raise ParameterError((p.name or "value"), rule.where, value, message=(
            f"{flag} is used only {rule.where}; it would have no effect here (got {got}): leave it out"))


class StrictCommand(click.Command):
    """A click command that refuses a single-valued option given more than once
    (click would silently keep the last value), and an option given in a mode that does not
    use it.

    Args:
        only_with: the command's option table, parameter name → :class:`OnlyWith` (checked
            after parsing, before the command runs: :func:`check_only_with`).
    """

    def __init__(self, *args: Any, only_with: dict[str, OnlyWith] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.only_with: dict[str, OnlyWith] = dict(only_with or {})

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:  # noqa: D102
        _duplicate_check(self, ctx, args)
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:  # noqa: D102
        if self.only_with:
            check_only_with(self, ctx, self.only_with)
        return super().invoke(ctx)


class StrictGroup(click.Group):
    """A click group whose sub-commands are :class:`StrictCommand`."""

    command_class = StrictCommand

