"""The pages of ``dpcalc serve``: which CLI command each page runs and its form, generated
from the click command's own options (name, label, help, choices, default, required).

A field's name is the option's first long flag without the dashes (``--batch-size`` →
``batch-size``); output-only options (``--json``, ``--plot``, ``--output``, ``--ledger``,
``--per-query``, ...) are not shown; a file option is either the page's one upload (passed to
the command as standard input, ``-``) or not shown at all, so no field ever names a file.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import click

__all__ = ["Field", "Page", "PAGES", "page_for", "fields_of", "command_of"]

#: options never shown: they only choose where output goes (the web page shows it)
OUTPUT_ONLY = ("--json", "--plot", "--plot-curve", "--output", "--ledger", "--ledger-dataset",
               "--per-query", "--save-model", "--save-run")

#: options that release a noisy value of private data: not on the web page — the raw value would sit
#: in the URL, the browser's history, the share link and the result cache, and no ledger would be
#: charged; a release belongs on the command line (`dpcalc laplace --release V --ledger FILE`)
RELEASE_OPTIONS = ("--release", "--granularity")

#: hard cap of one upload (bytes), whatever the command's own cap (the multipart body is cut here)
UPLOAD_CAP = 2 * 10**6


@dataclass(frozen=True)
class Page:
    """One page: its URL path, the CLI command it runs and how its form and plot look.

    Attributes:
        path: URL path without the leading slash (``"sigma"``, ``"mechanisms/laplace"``).
        command: the CLI words (``("sigma",)``, ``("ldp", "mean")``).
        title: the page heading.
        summary: one sentence for the index.
        hidden: further long flags not shown (file options that are not the upload).
        upload: the field whose value is an uploaded file (sent as the command's stdin), or None.
        upload_cap: the size limit of that upload in bytes (the CLI's own cap, at most
            :data:`UPLOAD_CAP`).
        plot: the plot builder's key in :mod:`dpcalc.web.views` (None: no plot).
        curve: True iff the command's ``--plot`` series can be fetched as a curve
            (``GET /api/<path>/plot``: ε against epochs, σ against the target ε).
        long: runs as a job (progress, cancel) from the browser.
        example: a query that gives a result (the index links to it).
    """

    path: str
    command: tuple[str, ...]
    title: str
    summary: str
    hidden: tuple[str, ...] = ()
    upload: str | None = None
    upload_cap: int = UPLOAD_CAP
    plot: str | None = None
    curve: bool = False
    long: bool = False
    example: tuple[tuple[str, str], ...] = field(default_factory=tuple)


def _q(text: str) -> tuple[tuple[str, str], ...]:
    pairs = []
    for part in text.split("&"):
        k, _, v = part.partition("=")
        pairs.append((k, v))
    return tuple(pairs)


PAGES: tuple[Page, ...] = (
    Page("sigma", ("sigma",), "σ for a DP-SGD run",
         "The noise multiplier σ a DP-SGD run needs for a target (ε, δ).", plot="sigma", curve=True,
         example=_q("eps=3&delta=1e-5&batch-size=256&dataset-size=60000&epochs=60")),
    Page("epsilon", ("epsilon",), "ε of a DP-SGD run",
         "The ε a DP-SGD run spent, by every accountant.", plot="epsilon", curve=True,
         example=_q("sigma=1&delta=1e-5&batch-size=256&dataset-size=60000&epochs=10")),
    Page("samplers", ("sampling-cost",), "Which sampler? ε per batch sampler",
         "ε of one run under each batch sampler (Poisson, shuffle, fixed-size), with brackets.",
         plot="samplers", long=True,
         example=_q("sigma=1&batch-size=256&dataset-size=60000&epochs=10&delta=1e-5&no-monte-carlo=on")),
    Page("risk", ("risk",), "What does my ε mean?",
         "Membership-inference bounds: the trade-off curve, TPR at a chosen FPR.",
         hidden=("--spec",), plot="risk", example=_q("eps=1&delta=1e-5&fpr=0.01")),
    Page("plan", ("plan",), "Plan a run",
         "σ for every (batch size, epochs) cell, ranked, with the Pareto front.",
         plot="plan", long=True,
         example=_q("eps=3&delta=1e-5&dataset-size=50000&batch-size=256,1024,4096&epochs=10,30&accountant=rdp")),
    Page("compose", ("compose",), "Compose mechanisms",
         "Every composition bound for a sequence of mechanisms, the tightest marked.",
         upload="spec", upload_cap=UPLOAD_CAP, plot="compose", long=True,
         example=_q("dp=0.1&count=100&delta=1e-5")),
    Page("mechanisms/laplace", ("laplace",), "Laplace mechanism",
         "Scale, noise and accuracy of the Laplace mechanism for ε-DP.", plot="laplace",
         example=_q("eps=1&sensitivity=1&beta=0.05&dims=10000")),
    Page("mechanisms/gaussian", ("gaussian",), "Gaussian mechanism",
         "Noise of the Gaussian mechanism for (ε, δ)-DP (analytic and classical).", plot="gaussian",
         example=_q("eps=1&delta=1e-5&sensitivity=1")),
    Page("mechanisms/exponential", ("exponential",), "Exponential mechanism",
         "Selection probabilities of the exponential mechanism for uploaded scores.",
         upload="scores", plot="exponential"),
    Page("mechanisms/rr", ("rr",), "Randomized response",
         "Randomized response probabilities and unbiased estimates.", plot="rr",
         example=_q("eps=1&categories=3&observed=500,300,200")),
    Page("pate", ("pate",), "PATE",
         "ε of PATE answers from an uploaded votes file (or data-independent).",
         hidden=("--answered",), upload="votes", plot="pate", long=True,
         example=_q("mechanism=gnmax&sigma=40&queries=1000&delta=1e-5")),
    Page("mf", ("mf",), "Correlated noise (matrix factorization)",
         "Error of correlated-noise strategies against DP-SGD at the same privacy.",
         plot="mf", long=True,
         example=_q("strategy=sqrt&steps=1000&eps=3&delta=1e-5&no-poisson=on")),
    Page("ldp", ("ldp",), "Local DP: which frequency oracle?",
         "Variance, standard error and report size of every frequency oracle at (ε, k, n); the best marked.",
         example=_q("eps=1&domain-size=1024&users=100000")),
    Page("ldp/rappor", ("ldp", "rappor"), "Local DP: RAPPOR",
         "ε of a RAPPOR configuration (f, p, q).", example=_q("f=0.5&p=0.5&q=0.75&hashes=2")),
    Page("ldp/mean", ("ldp", "mean"), "Local DP: mean estimation",
         "Standard error of locally private mean estimators.", plot="ldp-mean",
         example=_q("eps=1&users=100000")),
)

_BY_PATH = {p.path: p for p in PAGES}


def page_for(path: str) -> Page | None:
    """The page at URL path ``path`` (no leading slash), or None."""
    return _BY_PATH.get(path)


@dataclass(frozen=True)
class Field:
    """One form field = one CLI option.

    Attributes:
        name: the field name (the first long flag without dashes).
        flag: that flag (``--batch-size``).
        aliases: every flag of the option (``--eps``, ``--epsilon``, ...), for error mapping.
        label: a short label (the name with spaces).
        help: the option's help text.
        kind: ``"number"``, ``"text"``, ``"choice"``, ``"flag"`` or ``"file"``.
        choices: the allowed words of a choice.
        default: the default as text ("" when none), shown as a placeholder.
        required: the command needs it.
        multiple: the option may be repeated.
    """

    name: str
    flag: str
    aliases: tuple[str, ...]
    label: str
    help: str
    kind: str
    choices: tuple[str, ...] = ()
    default: str = ""
    required: bool = False
    multiple: bool = False


def command_of(page: Page) -> click.Command:
    """The click command a page runs (imported from :data:`dpcalc.cli.COMMANDS`)."""
    from dpcalc.cli import COMMANDS

    module, _, attr = COMMANDS[page.command[0]].partition(":")
    cmd = getattr(importlib.import_module(module), attr)
    for word in page.command[1:]:
        cmd = cmd.commands[word]  # type: ignore[attr-defined]
    return cmd


def _default_text(param: click.Option) -> str:
    d = param.default
    if d is None or callable(d) or isinstance(d, bool) or type(d).__name__ == "Sentinel":
        return ""
    if isinstance(d, (list, tuple)):
        return ""
    return str(d)


def _choices(t: click.ParamType) -> tuple[str, ...]:
    ch = getattr(t, "choices", None)
    if callable(ch):
        ch = ch()
    return tuple(str(c) for c in ch) if ch else ()


@functools.cache
def fields_of(page: Page) -> tuple[Field, ...]:
    """The form fields of ``page``, in the command's option order."""
    cmd = command_of(page)
    out = []
    hidden = set(OUTPUT_ONLY) | set(RELEASE_OPTIONS) | set(page.hidden)
    for p in cmd.params:
        if not isinstance(p, click.Option) or p.hidden:
            continue
        longs = [o for o in p.opts if o.startswith("--")]
        if not longs or any(o in hidden for o in p.opts) or any(o.startswith("--save-") for o in p.opts):
            continue
        name = longs[0][2:]
        if p.is_flag and not p.secondary_opts:
            kind = "flag"
        elif name == page.upload:
            kind = "file"
        elif _choices(p.type):
            kind = "choice"
        elif type(p.type).__name__ in ("Number", "NumberList") or isinstance(
                p.type, (click.types.IntParamType, click.types.FloatParamType)):
            kind = "number"
        else:
            kind = "text"
        if p.is_flag and p.secondary_opts:  # --x/--no-x: a choice of the two flags
            kind = "choice"
        help_text = " ".join((p.help or "").split())
        out.append(Field(name=name, flag=longs[0], aliases=tuple(p.opts) + tuple(p.secondary_opts),
                         label=name.replace("-", " "), help=help_text, kind=kind,
                         choices=_choices(p.type) if kind == "choice" and not p.is_flag
                         else (tuple(p.opts[:1] + p.secondary_opts[:1]) if kind == "choice" else ()),
                         default=_default_text(p), required=bool(p.required), multiple=bool(p.multiple)))
    return tuple(out)


def field_index(page: Page) -> dict[str, Field]:
    """Field name → field."""
    return {f.name: f for f in fields_of(page)}


def alias_index(page: Page) -> dict[str, str]:
    """Every flag of every shown option → its field name (``--epsilon`` → ``eps``, ``-q`` →
    ``sample-rate``)."""
    return {a: f.name for f in fields_of(page) for a in f.aliases}


def example_query(page: Page) -> str:
    """The example query string of ``page`` (URL-encoded)."""
    from urllib.parse import urlencode

    return urlencode(list(page.example))


def sections(pages: Sequence[Page] = PAGES) -> list[tuple[str, list[Page]]]:
    """The index's sections: pages grouped by the first part of their path."""
    groups: dict[str, list[Page]] = {}
    names = {"mechanisms": "Mechanisms", "ldp": "Local DP"}
    for p in pages:
        head = p.path.split("/")[0]
        groups.setdefault(names.get(head, "DP-SGD and composition"), []).append(p)
    return list(groups.items())
