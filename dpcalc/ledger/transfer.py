"""Export and import of a ledger as JSON lines (``dpcalc ledger export`` / ``import``,
docs/design.md §11): an audit trail any later dpcalc — or ``jq`` — reads back. An import is
checked line by line like a release (:func:`dpcalc.ledger.records.check_plain`: plain JSON,
finite numbers, bounded depth) and written in one transaction, all or nothing.
"""

from __future__ import annotations

import math

from dpcalc import _validate as v
from dpcalc._version import __version__
from dpcalc.errors import ParameterError
from dpcalc.ledger import filter as flt
from dpcalc.ledger import records
from dpcalc.ledger.api import ADJACENCIES, STATUSES, Ledger, check_name
from dpcalc.ledger.store import transaction

__all__ = ["EXPORT_FORMAT", "export_lines", "import_lines", "parse_export", "import_plan"]


# -- export / import (JSON lines) ------------------------------------------------------------

#: first line of an export
EXPORT_FORMAT = "dpcalc-ledger-export/1"


def export_lines(ledger: Ledger, dataset: str | None = None) -> list[str]:
    """The ledger (or one dataset) as JSON lines: a header, then each dataset followed by its
    events in recording order. Floats are written exactly (shortest repr)."""
    datasets = [ledger.dataset(dataset)] if dataset is not None else ledger.datasets()
    out = [records.dumps({"format": EXPORT_FORMAT, "dpcalc_version": __version__,
                          "source": str(ledger.path)})]
    for ds in datasets:
        out.append(records.dumps({"type": "dataset", **ds.to_json()}))
        for r in ledger.records(ds):
            out.append(records.dumps({"type": "event", **r.to_json()}))
    return out


def _import_error(lineno: int, msg: str) -> ParameterError:
    return ParameterError("input", "", None, message=f"line {lineno} of the import: {msg}")


def import_lines(ledger: Ledger, lines: list[str]) -> tuple[int, int]:
    """Add an export's datasets and events to ``ledger``, all in one transaction.

    Every line is read and every event rebuilt before anything is written
    (:func:`parse_export`). The datasets must not exist in ``ledger`` yet (an import never
    mixes with a history it did not record). Imported events keep their status, steps, times,
    command lines and versions; they are history and are not filtered again.

    Returns:
        (datasets, events) imported.

    Raises:
        ParameterError: a malformed line (its number is named), an unknown format, a dataset
            already in the ledger.
    """
    return import_plan(ledger, parse_export(lines))


def parse_export(lines: list[str]) -> list[tuple[dict, list[dict]]]:
    """Read and check every line of an export (nothing is written).

    Returns:
        [(dataset row, [event rows])] ready for :func:`import_plan`.

    Raises:
        ParameterError: a malformed line (its number is named) or an unknown format.
    """
    if not lines:
        raise _import_error(1, "empty input")
    try:
        head = records.loads(lines[0])
    except RecursionError:
        raise _import_error(1, f"not JSON (nested deeper than {records.MAX_DEPTH} levels)") from None
    except ValueError as e:
        raise _import_error(1, f"not JSON ({str(e)[:80]})") from None
    if not isinstance(head, dict) or head.get("format") != EXPORT_FORMAT:
        raise _import_error(1, f"not a dpcalc ledger export (expected format {EXPORT_FORMAT!r})")
    plan: list[tuple[dict, list[dict]]] = []
    for i, text in enumerate(lines[1:], start=2):
        if not text.strip():
            continue
        try:
            item = records.loads(text)
        except RecursionError:
            raise _import_error(i, f"not JSON (nested deeper than {records.MAX_DEPTH} levels)") from None
        except ValueError as e:
            raise _import_error(i, f"not JSON ({str(e)[:80]})") from None
        if not isinstance(item, dict) or item.get("type") not in ("dataset", "event"):
            raise _import_error(i, "expected an object with type 'dataset' or 'event'")
        try:
            if item["type"] == "dataset":
                ds = {"name": check_name(item["name"]),
                      "budget_epsilon": v.positive("budget_epsilon", item["budget_epsilon"]),
                      "delta": v.open_unit("delta", item["delta"]),
                      "adjacency": v.choice("adjacency", item["adjacency"], ADJACENCIES),
                      "created": str(item["created"]),
                      "orders": None if item.get("orders") is None else records.dumps(
                          list(flt.check_orders(item["orders"])))}
                if not math.isfinite(ds["budget_epsilon"]):
                    raise ParameterError("budget_epsilon", "finite", ds["budget_epsilon"])
                plan.append((ds, []))
                continue
            if not plan or item.get("dataset") != plan[-1][0]["name"]:
                raise _import_error(i, "an event must follow its dataset's line")
            ev = records.event_from_json(item["event"])
            dp = item.get("dp_event")
            dp = None if dp is None else records.event_from_json(dp)
            kind = v.choice("kind", item["kind"], ("release", "train"))
            status = v.choice("status", item["status"], STATUSES)
            sr = st = None
            if kind == "train":
                sr = v.count("steps_reserved", item["steps_reserved"], minimum=0)
                st = v.count("steps_taken", item["steps_taken"], minimum=0)
                if st > sr:
                    raise ParameterError("steps_taken", f"at most steps_reserved ({sr})", st)
            if not isinstance(item["params"], dict) or not isinstance(item["command"], list):
                raise ParameterError("params", "", None, message="params must be an object and command a list")
            records.check_plain(item["params"], "params")
            records.check_plain(item["command"], "command")
            plan[-1][1].append({
                "kind": kind, "mechanism": str(item["mechanism"]), "params": records.dumps(item["params"]),
                "event": records.dumps(records.event_to_json(ev)),
                "dp_event": None if dp is None else records.dumps(records.event_to_json(dp)),
                "status": status, "created": str(item["created"]), "updated": str(item["updated"]),
                "command": records.dumps(item["command"]), "version": str(item["version"]),
                "steps_reserved": sr, "steps_taken": st})
        except KeyError as e:
            raise _import_error(i, f"missing field {e.args[0]!r}") from None
        except ParameterError as e:
            if e.message.startswith("line "):
                raise
            raise _import_error(i, e.message) from None
    return plan


def import_plan(ledger: Ledger, plan: list[tuple[dict, list[dict]]]) -> tuple[int, int]:
    """Write :func:`parse_export`'s rows into ``ledger`` in one transaction (all or nothing).

    Raises:
        ParameterError: a dataset already in the ledger (nothing written).
    """
    n_events = 0
    with transaction(ledger.con, ledger.path):
        for ds, events in plan:
            if ledger.con.execute("SELECT 1 FROM datasets WHERE name = ?", (ds["name"],)).fetchone():
                raise ParameterError("dataset", "", ds["name"], message=(
                    f"dataset {ds['name']!r} is already in ledger {ledger.path}; import into a ledger "
                    "without it"))
            cur = ledger.con.execute(
                "INSERT INTO datasets (name, budget_epsilon, delta, adjacency, created, orders) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (ds["name"], ds["budget_epsilon"], ds["delta"], ds["adjacency"], ds["created"], ds["orders"]))
            for e in events:
                ledger.con.execute(
                    "INSERT INTO events (dataset_id, kind, mechanism, params, event, dp_event, status, "
                    "created, updated, command, version, steps_reserved, steps_taken) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (cur.lastrowid, e["kind"], e["mechanism"], e["params"], e["event"], e["dp_event"],
                     e["status"], e["created"], e["updated"], e["command"], e["version"],
                     e["steps_reserved"], e["steps_taken"]))
                n_events += 1
            imported = ledger.dataset(ds["name"])  # its running totals, recomputed from what was written
            ledger._store_totals(imported, ledger.recomputed_totals(imported))
    return len(plan), n_events
