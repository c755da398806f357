"""The DP statement of a ledger dataset as a whole (``dpcalc ledger report``): its privacy unit and
adjacency as recorded at ``dpcalc ledger init``, its budget (ε, δ), every recorded event with its own
ε at the ledger's δ, the total the ledger's privacy filter certifies for the whole history (valid
under fully adaptive composition), what is left, and the reporting checklist of Ponomareva et al.,
"How to DP-fy ML", JAIR 77 (2023), §5.3 — the items that apply to a dataset, answered from the
ledger or marked "not recorded".

Nothing here computes a privacy number: the total is :meth:`dpcalc.ledger.api.Ledger.spent` (the
figure ``dpcalc ledger show`` prints) and each event's own ε is the same filter applied to that
event alone (:class:`dpcalc.ledger.filter.FilterState` with its one charge). The ledger is opened
for reading only (:class:`dpcalc.ledger.Ledger` with ``read_only=True, migrate=False``: SQLite's
``mode=ro``, no write lock, an older schema read as it is, not migrated) and the connection is set
``query_only``: the statement never writes to the file.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from typing import Any

from dpcalc._rounding import format_bound
from dpcalc._version import __version__
from dpcalc.claims.statement import (
    NOT_RECORDED,
    _md,
    markdown_checklist,
    markdown_section,
)
from dpcalc.events import TuningEvent, is_data_dependent, walk
from dpcalc.ledger import Dataset, Ledger
from dpcalc.ledger import filter as flt

__all__ = ["ledger_statements", "dataset_statement", "render_ledger_markdown"]

_ADJACENCY_TEXT = {
    "add-remove": "add/remove one record (the neighbouring dataset has one record more or less)",
    "replace": "replace one record (same size; one record's value changed)",
}
#: parameters shown in the events table (all of them are in the JSON form)
_PARAM_KEYS = ("epsilon", "delta", "sensitivity", "noise_multiplier", "sample_rate", "steps", "sampling",
               "batch_size", "dataset_size", "max_grad_norm", "top", "queries", "sigma", "scale")


def ledger_statements(path: str | os.PathLike, dataset: str | None = None) -> list[dict[str, Any]]:
    """The statement of ``dataset`` (or of every dataset, in the order they were added) of the
    ledger at ``path``, read without writing to it.

    Args:
        path: the ledger file (``dpcalc ledger init``).
        dataset: a dataset's name; None: every dataset.

    Returns:
        One statement per dataset (:func:`dataset_statement`).

    Raises:
        LedgerFileError: the file is missing, not a ledger, corrupt, or changed while read
            (a :class:`~dpcalc.errors.ParameterError`: one line, exit 2).
        ParameterError: no dataset of that name (the message lists the ledger's datasets).
    """
    with Ledger(path, read_only=True, migrate=False) as led:  # never migrated, no write lock
        led.con.execute("PRAGMA query_only=1")  # a statement never writes
        datasets = [led.dataset(dataset)] if dataset is not None else led.datasets()
        return [dataset_statement(led, ds) for ds in datasets]


def _params_text(params: Mapping[str, Any]) -> str:
    def num(x: Any) -> str:
        return f"{x:g}" if isinstance(x, float) else str(x)
    return ", ".join(f"{k}={num(params[k])}" for k in _PARAM_KEYS if params.get(k) is not None)


def dataset_statement(led: Ledger, ds: Dataset) -> dict[str, Any]:
    """The statement of one dataset of an open ledger.

    Args:
        led: the ledger (open; only read). ds: its :class:`~dpcalc.ledger.api.Dataset`.

    Returns:
        A JSON-ready dict: ``dataset``, ``ledger`` (the file), ``guarantee`` (budget ε and δ, adjacency,
        privacy unit, ``epsilon_spent`` — the filter's ε for the whole history, equal to ``ledger
        show``'s — ``epsilon_left``, the method and its source), ``events`` (each with ``epsilon_alone``:
        its own ε at the dataset's δ by the same filter, ``certified``, ``data_dependent``, ``label``),
        ``checklist``, ``provenance`` and ``summary``.
    """
    spent = led.spent(ds)
    events = []
    for rec, charge in zip(spent.records, spent.charges, strict=True):
        alone = flt.FilterState(ds.delta, [charge], ds.orders).epsilon()
        dependent = is_data_dependent(rec.event)
        events.append({
            "id": rec.id, "kind": rec.kind, "mechanism": rec.mechanism, "params": rec.params,
            "status": rec.status, "steps_reserved": rec.steps_reserved, "steps_taken": rec.steps_taken,
            "counted_steps": rec.counted_steps, "epsilon_alone": alone, "delta": ds.delta,
            "certified": not dependent, "data_dependent": dependent,
            "label": "data-dependent (not a guarantee)" if dependent else "data-independent",
            "created": rec.created, "dpcalc_version": rec.version})
    adjacency = _ADJACENCY_TEXT.get(ds.adjacency, ds.adjacency)
    guarantee = {
        "budget_epsilon": ds.budget_epsilon, "delta": ds.delta, "neighboring": ds.adjacency,
        "adjacency": adjacency,
        "privacy_unit": (f"one record of dataset {ds.name!r} (what a record is — an example, a person — "
                         f"is {NOT_RECORDED} in the ledger)"),
        "epsilon_spent": spent.filter_epsilon, "epsilon_left": spent.left,
        "method": flt.FILTER_NAME, "adaptive": True, "certified": not any(e["data_dependent"] for e in events),
        "source": flt.source(ds.orders), "orders": list(ds.orders),
    }
    st: dict[str, Any] = {
        "title": f"Differential privacy statement of dataset {ds.name!r}", "dataset": ds.name,
        "ledger": str(led.path), "created": ds.created, "guarantee": guarantee, "events": events,
        "provenance": {"dpcalc_version": __version__, "source": f"ledger {led.path}, read-only",
                       "recheck_command": (f"dpcalc ledger show {shlex.quote(str(led.path))} "
                                           f"--dataset {shlex.quote(ds.name)}")},
    }
    st["checklist"] = _checklist(st, spent.records)
    st["summary"] = _summary(st)
    return st


def _checklist(st: Mapping[str, Any], recs: list) -> list[dict[str, Any]]:
    """The items of Ponomareva et al. 2023 §5.3 that apply to a dataset, from the ledger."""
    g, events = st["guarantee"], st["events"]

    def item(name: str, answer: str | None) -> dict[str, Any]:
        return {"item": name, "answer": answer if answer else NOT_RECORDED, "recorded": bool(answer)}

    kinds = {k: sum(e["kind"] == k for e in events) for k in ("release", "train")}
    tuned = [r.id for r in recs if any(isinstance(e, TuningEvent) for e in walk(r.event))]
    running = [e["id"] for e in events if e["kind"] == "train" and e["status"] != "finished"]
    reserved = [e["id"] for e in events if e["kind"] == "release" and e["status"] == "reserved"]
    assumptions = ["each event's mechanism and parameters were fixed before it ran (its RDP curve, computed "
                   "by dpcalc's accountants, is what the filter charged)",
                   f"the filter's {len(g['orders'])} Rényi orders were fixed when the dataset was created"]
    if running:
        assumptions.append("unfinished training runs (#" + ", #".join(map(str, running))
                           + ") are counted at all their reserved steps")
    if reserved:
        assumptions.append("releases still marked reserved (#" + ", #".join(map(str, reserved))
                           + ") are counted in full, as released ones")
    return [
        item("DP setting", "central DP: a trusted curator holds the data and runs every recorded mechanism"),
        item("Data accesses covered", f"the {len(events)} event(s) recorded in the ledger for dataset "
                                      f"{st['dataset']!r} ({kinds['release']} release(s), {kinds['train']} "
                                      "training run(s)); an access not recorded there is not covered"),
        item("Final mechanism output", "every recorded release's value and every recorded training run's models"
             if events else None),
        item("Unit of privacy", g["privacy_unit"]),
        item("Adjacency definition", g["adjacency"]),
        item("Type of accounting", f"{g['method']}: valid under fully adaptive composition (each event may be "
                                   f"chosen after seeing the earlier outputs); certified upper bound; dpcalc "
                                   f"{__version__}; {g['source']}"),
        item("Accounting assumptions", "; ".join(assumptions)),
        item("Formal DP statement", f"the recorded history is ({format_bound(g['epsilon_spent'])}, {g['delta']:g})-DP; "
                                    f"budget ({g['budget_epsilon']:g}, {g['delta']:g})"),
        item("Hyperparameter tuning", None if not tuned else (
            "tuning recorded and accounted in event(s) #" + ", #".join(map(str, tuned)))),
        item("Empirical audit", None),
        item("Transparency and verifiability", f"recomputed by dpcalc {__version__}: "
                                               f"{st['provenance']['recheck_command']}; the full record: "
                                               f"dpcalc ledger export {shlex.quote(st['ledger'])}"),
    ]


def _summary(st: Mapping[str, Any]) -> str:
    g = st["guarantee"]
    adjacency = {"add-remove": "add/remove", "replace": "replace-one"}.get(g["neighboring"], g["neighboring"])
    n = len(st["events"])
    if n == 0:
        return (f"No release or training run is recorded for dataset {st['dataset']!r} yet: ε spent 0 of its budget "
                f"ε = {g['budget_epsilon']:g} at δ = {g['delta']:g} ({adjacency} adjacency).")
    return (f"The {n} release(s) and training run(s) recorded for dataset {st['dataset']!r} together satisfy "
            f"({format_bound(g['epsilon_spent'])}, {g['delta']:g})-differential privacy for one record under {adjacency} "
            f"adjacency, also when each was chosen after seeing the earlier outputs ({g['method']}, certified). "
            f"Budget ε = {g['budget_epsilon']:g}; left ε = {format_bound(g['epsilon_left'], 'down')}.")


def _event_rows(events: list[Mapping[str, Any]]) -> list[str]:
    out = ["| # | kind | mechanism | parameters | status | own ε at δ | certified | data |",
           "|---|---|---|---|---|---|---|---|"]
    for e in events:
        status = e["status"] + (f" ({e['steps_taken']}/{e['steps_reserved']} steps)" if e["kind"] == "train" else "")
        out.append(f"| {e['id']} | {e['kind']} | {_md(e['mechanism'])} | {_md(_params_text(e['params']))} | "
                   f"{status} | {format_bound(e['epsilon_alone'])} | {'yes' if e['certified'] else 'no'} | {e['label']} |")
    return out


def render_ledger_markdown(st: Mapping[str, Any]) -> str:
    """A dataset's statement as Markdown (the same sections and checklist table as
    :func:`dpcalc.claims.statement.render_markdown`), ending in a newline."""
    g = st["guarantee"]
    out = [f"# {st['title']}", "", st["summary"], ""]
    out += markdown_section("Guarantee", [
        ("privacy unit", g["privacy_unit"]), ("adjacency", g["adjacency"]),
        ("budget", f"ε = {g['budget_epsilon']:g} at δ = {g['delta']:g}"),
        ("spent", f"ε = {format_bound(g['epsilon_spent'])} at δ = {g['delta']:g} (certified upper bound for the whole "
                  "recorded history, valid under fully adaptive composition)"),
        ("left", f"ε = {format_bound(g['epsilon_left'], 'down')}"),
        ("accounting", f"{g['method']}, dpcalc {st['provenance']['dpcalc_version']}; {g['source']}")])
    out += ["## Recorded events", ""]
    if st["events"]:
        out += _event_rows(st["events"])
        out += ["", "Own ε at δ: the event alone, by the same filter at the dataset's δ; the events' own ε do not "
                    "add up to the total, which the filter composes in Rényi DP.", ""]
    else:
        out += ["No event recorded yet.", ""]
    out += markdown_checklist(st["checklist"])
    p = st["provenance"]
    out += ["", "## Provenance", "",
            f"Written by dpcalc {p['dpcalc_version']} from {p['source']}. Re-check the total: "
            f"`{p['recheck_command']}`", ""]
    return "\n".join(out)

