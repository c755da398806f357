"""The one style of every dpcalc picture, and the one way they are written.

Every ``--plot`` (compose, risk, sampling-cost, plan, pate, ledger, and epsilon, sigma, train, tune)
draws through this module: the same fonts and sizes (:data:`RC`, matplotlib's bundled DejaVu Sans,
so nothing is fetched and the output does not depend on the fonts installed), the same colour for
the same thing (an accountant keeps its colour in every plot: :func:`accountant_style`, by its
place in the registry; no accountant is named here), the same figure sizes, axis labels that state
their units, and a title whose second line states the setting (:func:`titled`).

Files: the format follows the extension — ``.png`` or ``.svg`` (:data:`FORMATS`); any other is
refused with a one-line error before any work (:func:`check_target`). Files are written through
:func:`dpcalc._files.atomic_write` (nothing half-written; a device or a directory never replaced)
and are deterministic: the same picture gives the same bytes (SVG: a fixed hash salt and no date;
PNG: no software or date stamp), so tests and the docs' screenshots can be compared.

matplotlib is imported only by :func:`require_matplotlib`, never when this module is imported (the
calculator commands start without it: tests/test_imports.py). The plotting code draws series that
library functions computed; it does no mathematics of its own.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import click

from dpcalc._files import atomic_write, check_output_target
from dpcalc.errors import ParameterError

__all__ = ["FORMATS", "RC", "FIGSIZE", "WIDE_FIGSIZE", "DPI", "COLOURS", "THEOREM_STYLES",
           "ACCOUNTANT_STYLES", "require_matplotlib", "prepare", "plot_option", "check_target", "plot_format", "save_figure",
           "new_axes", "plain_log_ticks", "accountant_style", "finish", "titled", "setting"]

#: file extension -> matplotlib format
FORMATS = {".png": "png", ".svg": "svg"}

#: matplotlib settings of every dpcalc plot (applied by :func:`require_matplotlib`)
RC: dict[str, Any] = {
    "font.family": "DejaVu Sans",
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "legend.fontsize": 8,
    "legend.framealpha": 0.85,
    "grid.alpha": 0.3,
    "lines.linewidth": 1.6,
    "lines.markersize": 4,
    "svg.hashsalt": "dpcalc",  # deterministic SVG ids
    "svg.fonttype": "path",  # text drawn as paths: the same picture without the fonts installed
    "savefig.dpi": 120,
    "savefig.bbox": "tight",
}

#: one panel; two panels side by side
FIGSIZE = (7.5, 4.8)
WIDE_FIGSIZE = (11.0, 4.8)
#: resolution of PNG files (dots per inch)
DPI = 120

#: colours by role (the same role has the same colour in every plot)
COLOURS = {
    "reference": "#7f7f7f",  # baselines: random guessing, one run, a basic theorem
    "target": "#000000",  # the requested value (target ε, the σ given)
    "primary": "#d62728",  # the quantity the command prints
    "secondary": "#1f77b4",  # the second axis of a two-quantity plot
    "allowed": "#ff7f0e",  # a region an (ε, δ) pair allows
    "lower": "#2ca02c",
}

#: (colour, line style) of the composition theorems of ``compose``
THEOREM_STYLES = {
    "basic": ("#7f7f7f", ":"), "advanced": ("#8c564b", "--"), "kov": ("#e377c2", "--"),
    "optimal": ("#1f77b4", "-"),
}

#: (colour, line style, marker) of the registered accountants, in registry order
ACCOUNTANT_STYLES = (("#d62728", "-", "o"), ("#2ca02c", "-", "s"), ("#9467bd", "-.", "D"),
                     ("#ff7f0e", "-.", "^"), ("#17becf", ":", "v"))

#: (colour, line style, marker) of further series (laws of K, samplers ...), in the order drawn
SERIES_STYLES = (("#d62728", "-", "o"), ("#1f77b4", "-", "s"), ("#2ca02c", "--", "^"),
                 ("#9467bd", "-.", "D"), ("#8c564b", ":", "v"), ("#ff7f0e", "-", "P"))


def require_matplotlib() -> Any:
    """Import matplotlib with the non-interactive Agg backend and dpcalc's style (:data:`RC`).

    Returns:
        ``matplotlib.pyplot``.

    Raises:
        ParameterError: matplotlib is missing (one line: install ``dpcalc[plot]``).
    """
    try:
        import matplotlib
    except ImportError:
        raise ParameterError("plot", "", None, message="--plot needs matplotlib: pip install 'dpcalc[plot]'") from None
    matplotlib.use("Agg")
    matplotlib.rcParams.update(RC)
    import matplotlib.pyplot as plt

    return plt


def prepare(path: str | None, option: str = "--plot") -> None:
    """Before any work: refuse a plot target that cannot be written (:func:`check_target`, with the
    directory probed) and a missing matplotlib. Nothing to do for ``path`` None."""
    if path is not None:
        check_target(path, option, probe=True)
        require_matplotlib()


def plot_option(help: str):
    """The ``--plot FILE`` option of a command (a .png or .svg file; checked by :func:`prepare`)."""
    return click.option("--plot", "plot", type=str, default=None, metavar="FILE",
                        help=help + " PNG or SVG by the extension; needs dpcalc[plot] (matplotlib).")


def plot_format(path: str, option: str = "--plot") -> str:
    """The format of a plot file from its extension (``"png"`` or ``"svg"``, any case).

    Raises:
        ParameterError: any other extension (one line naming the option, the allowed
            extensions and the path).
    """
    ext = os.path.splitext(os.fspath(path))[1].lower()
    if ext not in FORMATS:
        name = option.lstrip("-").replace("-", "_")
        raise ParameterError(name, "", path, message=(
            f"{option} must name a .png or .svg file (the format follows the extension), got {path!r}"))
    return FORMATS[ext]


def check_target(path: str, option: str = "--plot", *, probe: bool = False) -> str:
    """Refuse a plot target before any work: not ``.png``/``.svg``, or not writable as a regular file.

    Args:
        path: the file to write.
        option: the option name for messages.
        probe: also create and remove a temporary file in its directory
            (:func:`dpcalc._files.check_output_target`).

    Returns:
        ``path``.

    Raises:
        ParameterError: empty path; a null byte in it; an extension other than .png / .svg; its
            directory missing or not a directory; the path an existing non-regular file (a device,
            a directory, a FIFO, ...); with ``probe``, a directory where no file can be created.
    """
    check_output_target(path, option=option, what="a PNG or SVG file")
    plot_format(path, option)
    if probe:
        check_output_target(path, option=option, what="a PNG or SVG file", probe=True)
    return path


def save_figure(fig, path: str, option: str = "--plot") -> None:
    """Write ``fig`` to ``path`` in the format of its extension, atomically
    (:func:`dpcalc._files.atomic_write`: 0666 minus the umask, nothing half-written, a
    non-regular target refused) and deterministically (no date or software stamp).

    Raises:
        ParameterError: an extension other than .png / .svg (nothing written); the target cannot
            be written (nothing left behind).
    """
    fmt = plot_format(path, option)
    metadata = {"Date": None} if fmt == "svg" else {"Software": None}
    atomic_write(path, lambda f: fig.savefig(f, format=fmt, dpi=DPI, bbox_inches="tight", metadata=metadata),
                 option=option, what="a PNG or SVG file")


def new_axes(plt, *, wide: bool = False, ncols: int = 1, twin: bool = False):
    """``(fig, ax)`` of the standard size (``wide``: two panels side by side; ``ncols`` axes).
    With ``twin``, ``(fig, (ax, ax_right))``: a second y axis sharing x."""
    fig, ax = plt.subplots(1, ncols, figsize=WIDE_FIGSIZE if wide or ncols > 1 else FIGSIZE)
    for a in ax if ncols > 1 else (ax,):
        a.spines[["top", "right"]].set_visible(False)
    if twin:
        right = ax.twinx()
        right.spines["top"].set_visible(False)
        return fig, (ax, right)
    return fig, ax


def accountant_style(name: str) -> tuple[str | None, str, str]:
    """(colour, line style, marker) of an accountant's line: by its place in the registry (no
    accountant is named here); a composition theorem's own; else matplotlib's next colour."""
    if name in THEOREM_STYLES:
        return (*THEOREM_STYLES[name], "o")
    from dpcalc.accounting.registry import available

    names = available()
    if name in names and names.index(name) < len(ACCOUNTANT_STYLES):
        return ACCOUNTANT_STYLES[names.index(name)]
    return None, "-", "o"


def series_style(i: int) -> tuple[str, str, str]:
    """(colour, line style, marker) of the ``i``-th series of a plot that is not per accountant."""
    return SERIES_STYLES[i % len(SERIES_STYLES)]


def setting(*parts: str | None) -> str:
    """The setting line of a title: the non-empty ``parts`` joined by commas."""
    return ", ".join(p for p in parts if p)


def titled(what: str, where: str | None = None) -> str:
    """A title: what is drawn, and on a second line the setting it is drawn for."""
    return what if not where else f"{what}\n{where}"


def finish(ax, *, title: str | None = None, xlabel: str | None = None, ylabel: str | None = None,
           legend: bool | str = True, handles: Sequence | None = None) -> None:
    """Title, axis labels (state their units), the grid and the legend (``legend``: True for the
    best place, or a matplotlib location) of one panel."""
    ax.grid(True, which="both", alpha=RC["grid.alpha"])
    if title is not None:
        ax.set_title(title)
    if xlabel is not None:
        ax.set_xlabel(xlabel)
    if ylabel is not None:
        ax.set_ylabel(ylabel)
    if legend:
        kwargs = {} if handles is None else {"handles": list(handles)}
        ax.legend(loc="best" if legend is True else legend, **kwargs)


def plain_log_ticks(axis) -> None:
    """Log axis labelled with plain numbers (1, 10, 100, 1,000 …) and no minor labels, so
    short ranges do not get overlapping 3×10⁰-style labels."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    lo, hi = axis.get_view_interval()
    if hi / max(lo, 1e-300) < 1e3:  # short range: label 1, 2, 5, 10, 20, 50 …
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x:,.0f}" if x >= 1 else f"{x:g}"))
    axis.set_minor_formatter(NullFormatter())


def fmt_number(x: float) -> str:
    """A number in a title or a label: up to 4 significant digits, thousands separated."""
    if float(x).is_integer() and abs(x) >= 1000:
        return f"{int(x):,}"
    return f"{x:.4g}"
