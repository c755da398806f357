"""What a result page shows, built from the CLI's JSON object only (no mathematics here: every
number shown or drawn is one the CLI printed): the result tables, the Plotly figure, and the curve
of the σ and ε pages (the series their command's ``--plot`` draws, :func:`curve_figure`). The
copy-as-Python snippets are :mod:`dpcalc.web.snippets`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dpcalc.cli.render import fmt
from dpcalc.web.snippets import python_snippet  # the copy-as-Python snippets live there

__all__ = ["tables", "figure", "curve_figure", "python_snippet", "cell"]

#: keys not shown as table columns (shown elsewhere or too long)
_SKIP = {"details", "source"}


def cell(x: Any, key: str = "", *, bound: bool = True) -> str:
    """A table cell: numbers with up to 8 significant digits (the JSON has every digit), through
    the CLI's own :func:`dpcalc.cli.render.fmt`.

    A result's number is rounded OUTWARD, as the CLI's tables do (docs/design.md §8.2): towards
    −∞ for a lower end (a key containing ``lower``), towards +∞ for everything else — an ε or δ
    upper bound, a calibrated σ or noise scale a user may copy is never shown below the computed
    one. ``bound=False`` (the inputs echoed back): to nearest, with 10 digits.
    """
    if isinstance(x, (list, tuple)):
        items = [cell(v, key, bound=bound) for v in x[:12]]
        return ", ".join(items) + (f", … ({len(x)} values)" if len(x) > 12 else "")
    if isinstance(x, Mapping):
        return json.dumps(x)[:200]
    if isinstance(x, float) and not bound:
        return fmt(x, 10)
    if isinstance(x, float):
        return fmt(x, 8, "down" if "lower" in key else "up")
    return fmt(x)


def tables(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The tables of a result: the inputs (one row) and the results (one row per accountant,
    method, sampler or cell; the columns every key the rows have, in first-seen order, but the
    sources and details, which are listed under the table).

    Returns:
        ``[{"title", "columns", "rows"}]`` with cell text.
    """
    out = []
    inputs = {k: v for k, v in (result.get("inputs") or {}).items() if v is not None}
    if inputs:
        out.append({"title": "inputs", "columns": list(inputs), "rows": [[cell(v, k, bound=False) for k, v in inputs.items()]]})
    rows = [r for r in result.get("results") or [] if isinstance(r, Mapping)]
    cols: list[str] = []
    for r in rows:
        for k, v in r.items():
            if k not in _SKIP and k not in cols and not isinstance(v, Mapping):
                cols.append(k)
    if rows:
        out.append({"title": "results", "columns": cols, "rows": [[cell(r.get(c), c) for c in cols] for r in rows]})
    return out


def sources(result: Mapping[str, Any]) -> list[str]:
    """The distinct sources of the result rows, in order."""
    seen: list[str] = []
    for r in result.get("results") or []:
        s = r.get("source") if isinstance(r, Mapping) else None
        if isinstance(s, str) and s not in seen:
            seen.append(s)
    return seen


def notes(result: Mapping[str, Any]) -> list[str]:
    """Reasons (rows not applicable) and notes in the rows' details."""
    out: list[str] = []
    for r in result.get("results") or []:
        if not isinstance(r, Mapping):
            continue
        name = r.get("accountant") or r.get("method") or r.get("sampler") or r.get("quantity") or ""
        if r.get("reason"):
            out.append(f"{name}: {r['reason']}")
        d = r.get("details")
        if isinstance(d, Mapping) and isinstance(d.get("note"), str):
            out.append(f"{name}: {d['note']}")
    return list(dict.fromkeys(out))


# --- plots: Plotly figure dicts from the JSON ------------------------------------------------

def _layout(title: str, xlabel: str, ylabel: str, **kw: Any) -> dict[str, Any]:
    return {"title": {"text": title}, "xaxis": {"title": {"text": xlabel}, **kw.pop("xaxis", {})},
            "yaxis": {"title": {"text": ylabel}, **kw.pop("yaxis", {})}, "margin": {"t": 50}, **kw}


def _bars(rows: Sequence[Mapping[str, Any]], name_key: Callable[[Mapping[str, Any]], str], key: str,
          lower: str | None, title: str, ylabel: str) -> dict[str, Any] | None:
    shown = [r for r in rows if isinstance(r.get(key), (int, float))]
    if not shown:
        return None
    names = [name_key(r) for r in shown]
    data: list[dict[str, Any]] = [{"type": "bar", "x": names, "y": [r[key] for r in shown], "name": key}]
    if lower:  # the certified bracket's lower end, where the row has one
        lows = [(r.get(lower) if isinstance(r.get(lower), (int, float)) else
                 (r.get("details") or {}).get(lower)) for r in shown]
        if any(isinstance(v, (int, float)) for v in lows):
            data.append({"type": "scatter", "mode": "markers", "x": names,
                         "y": [v if isinstance(v, (int, float)) else None for v in lows],
                         "name": "lower end of the bracket", "marker": {"symbol": "line-ew-open", "size": 28,
                                                                          "line": {"width": 3}}})
    return {"data": data, "layout": _layout(title, "", ylabel)}


def _name(r: Mapping[str, Any]) -> str:
    base = str(r.get("accountant") or r.get("method") or r.get("sampler") or "")
    if r.get("analysis"):
        base += f" ({r['analysis']})"
    return base + ("" if r.get("certified", True) else " (approx.)")


def _argv_values(argv: Sequence[str], flag: str) -> list[float]:
    """The values given to ``flag`` in ``argv`` (as the CLI parsed them: plain decimal text)."""
    out = []
    for i, w in enumerate(argv[:-1]):
        if w == flag:
            try:
                out.append(float(argv[i + 1]))
            except ValueError:
                pass
    return out


def _risk(res: Mapping[str, Any], argv: Sequence[str] = ()) -> dict[str, Any] | None:
    pts = sorted((r for r in res["results"] if r.get("quantity") == "tpr_at_fpr"
                  and isinstance(r.get("bound"), (int, float))), key=lambda r: r["fpr"])
    if not pts:
        return None
    fpr = [r["fpr"] for r in pts]
    data = [{"type": "scatter", "mode": "lines+markers", "x": fpr, "y": [r["bound"] for r in pts],
             "name": "TPR bound (certified)"}]
    if all(isinstance(r.get("single_pair"), (int, float)) for r in pts):
        data.append({"type": "scatter", "mode": "lines", "x": fpr, "y": [r["single_pair"] for r in pts],
                     "name": "(ε, δ) pair alone", "line": {"dash": "dash"}})
    want = set(_argv_values(argv, "--fpr"))
    if want:
        marked = [r for r in pts if r["fpr"] in want]
        if marked:
            data.append({"type": "scatter", "mode": "markers", "x": [r["fpr"] for r in marked],
                         "y": [r["bound"] for r in marked], "name": "TPR bound at the chosen FPR",
                         "marker": {"size": 12, "symbol": "star"}})
    return {"data": data, "layout": _layout("Trade-off curve: the largest TPR of any membership test at each "
                                            "FPR (FNR = 1 − TPR)", "false-positive rate (FPR)",
                                            "true-positive rate (TPR) bound", xaxis={"type": "log"},
                                            yaxis={"type": "log"})}


def _plan(res: Mapping[str, Any]) -> dict[str, Any] | None:
    rows = [r for r in res["results"] if isinstance(r.get("batch_size"), int)]
    xkey = "epochs" if any(isinstance(r.get("epochs"), (int, float)) for r in rows) else "steps"
    cells = [r for r in rows if isinstance(r.get(xkey), (int, float))]
    if not cells or not any(isinstance(r.get("noise_multiplier"), (int, float)) for r in cells):
        return _bars(rows, lambda r: f"B={r.get('batch_size')}", "epsilon", None, "ε per row", "ε")
    bs = sorted({r["batch_size"] for r in cells})
    xs = sorted({r[xkey] for r in cells})
    z: list[list[float | None]] = [[None] * len(xs) for _ in bs]
    for r in cells:
        z[bs.index(r["batch_size"])][xs.index(r[xkey])] = r.get("noise_multiplier")
    data: list[dict[str, Any]] = [{"type": "heatmap", "x": [str(x) for x in xs], "y": [str(b) for b in bs],
                                   "z": z, "colorbar": {"title": {"text": "σ"}}, "name": "σ",
                                   "colorscale": "Viridis"}]
    front = [r for r in cells if r.get("pareto")]
    if front:
        data.append({"type": "scatter", "mode": "markers", "x": [str(r[xkey]) for r in front],
                     "y": [str(r["batch_size"]) for r in front], "name": "Pareto front",
                     "marker": {"symbol": "star", "size": 16, "color": "white",
                                "line": {"color": "black", "width": 1.5}}})
    return {"data": data, "layout": _layout("σ for each (batch size, " + xkey + ") cell", xkey, "batch size B",
                                            xaxis={"type": "category"}, yaxis={"type": "category"})}


def _compose(res: Mapping[str, Any]) -> dict[str, Any] | None:
    rows = res["results"]
    key = "epsilon" if "delta" in (res.get("inputs") or {}) or (res.get("inputs") or {}).get("epsilon") is None \
        else "delta"
    return _bars(rows, _name, key, key + "_lower", f"Total {key} per method", key)


def _exponential(res: Mapping[str, Any]) -> dict[str, Any] | None:
    r = res["results"][0] if res.get("results") else {}
    probs = r.get("probabilities")
    if not isinstance(probs, list):
        return None
    labels = r.get("labels") or [str(i) for i in range(len(probs))]
    return {"data": [{"type": "bar", "x": [str(x) for x in labels], "y": probs, "name": "probability"}],
            "layout": _layout("Selection probability per candidate", "candidate", "probability")}


def _rr(res: Mapping[str, Any]) -> dict[str, Any] | None:
    r = res["results"][0] if res.get("results") else {}
    est = r.get("estimates")
    if isinstance(est, list):
        bar = {"type": "bar", "x": [str(i) for i in range(len(est))], "y": est, "name": "estimate"}
        if isinstance(r.get("standard_errors"), list):
            bar["error_y"] = {"type": "data", "array": r["standard_errors"]}
        return {"data": [bar], "layout": _layout("Unbiased estimate of each category's share (± 1 s.e.)",
                                                 "category", "share")}
    if isinstance(r.get("p_truth"), (int, float)):
        return {"data": [{"type": "bar", "x": ["report the truth", "report a given other answer"],
                          "y": [r["p_truth"], r.get("p_other")]}],
                "layout": _layout("Randomized response probabilities", "", "probability")}
    return None


_PLOTS: dict[str, Callable[..., dict[str, Any] | None]] = {
    "sigma": lambda r: _bars(r["results"], _name, "noise_multiplier", None,
                             "Noise multiplier σ for the target, per accountant", "σ"),
    "epsilon": lambda r: _bars(r["results"], _name, "epsilon", "epsilon_lower",
                               "ε per accountant (pld: certified bracket [lower, upper])", "ε"),
    "samplers": lambda r: _bars(r["results"], _name, "epsilon", "epsilon_lower",
                                "ε per batch sampler (bracket [lower, upper])", "ε"),
    "risk": _risk,
    "plan": _plan,
    "compose": _compose,
    "laplace": lambda r: _bars(r["results"], _name, "noise_std", None, "Noise standard deviation", "std"),
    "gaussian": lambda r: _bars(r["results"], _name, "noise_std", None, "Noise standard deviation per method",
                                "std"),
    "exponential": _exponential,
    "rr": _rr,
    "pate": lambda r: _bars(r["results"], _name, "epsilon", "epsilon_lower", "ε per analysis", "ε"),
    "mf": lambda r: _bars(r["results"], _name, "rmse", None, "RMSE of the prefix sums per strategy", "RMSE"),
    "ldp-mean": lambda r: _bars(r["results"], _name, "standard_error", None, "Standard error per estimator",
                                "standard error"),
}


def figure(kind: str | None, result: Mapping[str, Any], argv: Sequence[str] = ()) -> dict[str, Any] | None:
    """The Plotly figure (``{"data", "layout"}``) of a page's result, or None (``argv``: the
    command's words, for what the JSON does not echo, e.g. the ``--fpr`` asked for)."""
    if kind is None or not isinstance(result.get("results"), list):
        return None
    try:
        fig = _PLOTS[kind](result, argv) if kind == "risk" else _PLOTS[kind](result)
    except (KeyError, TypeError, ValueError, IndexError):  # an unexpected JSON shape: no plot
        return None
    if fig is not None:
        fig["layout"].setdefault("showlegend", True)
        fig["layout"]["autosize"] = True
    return fig


# --- curves: the series the command's --plot draws (GET /api/<page>/plot) -------------------

#: line colours of the curves (one per accountant, in the order the series lists them)
_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")


def _rgba(hex_colour: str, alpha: float) -> str:
    r, g, b = (int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def curve_figure(data: Mapping[str, Any]) -> dict[str, Any]:
    """The Plotly figure of a command's plot series (:func:`dpcalc.cli.plot_data.plot_series`):
    one line per accountant that has a value, the certified bracket [lower, upper] as a shaded
    band where the series has one (pld), and a dashed vertical line at the command's own result
    (the run's epochs; the requested ε). Every number drawn is one of the series.

    Raises:
        KeyError, TypeError: ``data`` is not such a series.
    """
    x = list(data["x"])
    traces: list[dict[str, Any]] = []
    for i, c in enumerate(c for c in data["curves"] if c.get("drawn", True)):
        colour = _COLOURS[i % len(_COLOURS)]
        label = c["name"] + ("" if c.get("certified", True) else " (approx.)")
        if c.get("lower") is not None:
            traces.append({"type": "scatter", "mode": "lines", "x": x, "y": list(c["lower"]), "showlegend": False,
                           "line": {"width": 0, "color": colour}, "hoverinfo": "skip", "name": f"{c['name']} lower"})
            traces.append({"type": "scatter", "mode": "lines", "x": x, "y": list(c["values"]), "fill": "tonexty",
                           "fillcolor": _rgba(colour, 0.25), "line": {"width": 0, "color": colour},
                           "hoverinfo": "skip", "name": f"{c['name']}: certified bracket [lower, upper]"})
        traces.append({"type": "scatter", "mode": "lines+markers", "x": x, "y": list(c["values"]), "name": label,
                       "line": {"color": colour, "dash": "solid" if c.get("certified", True) else "dash"}})
    title = data["title"] + (f"<br><sub>{data['setting']}</sub>" if data.get("setting") else "")
    layout = _layout(title, data["xlabel"], data["ylabel"], yaxis={"rangemode": "tozero"})
    layout["margin"] = {"t": 70}
    if isinstance(data.get("marker"), (int, float)):
        what = "requested ε" if data.get("command") == "sigma" else "this run"
        layout["shapes"] = [{"type": "line", "xref": "x", "yref": "paper", "x0": data["marker"], "x1": data["marker"],
                             "y0": 0, "y1": 1, "line": {"dash": "dash", "width": 1, "color": "#555"}}]
        layout["annotations"] = [{"xref": "x", "yref": "paper", "x": data["marker"], "y": 1, "text": what,
                                  "showarrow": False, "yanchor": "bottom", "font": {"size": 11}}]
    layout["showlegend"] = True
    layout["autosize"] = True
    return {"data": traces, "layout": layout}
