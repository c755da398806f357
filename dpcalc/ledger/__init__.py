"""A durable privacy budget: ``dpcalc ledger`` on SQLite (docs/design.md §11).

* :mod:`dpcalc.ledger.store` — the file: standard-library :mod:`sqlite3`, WAL, ``BEGIN
  IMMEDIATE`` transactions, a versioned schema with migrations, refusal of what is not a
  ledger of this dpcalc.
* :mod:`dpcalc.ledger.records` — events as JSON data, rebuilt into :mod:`dpcalc.events`.
* :mod:`dpcalc.ledger.filter` — the privacy filter (Rényi filter, Feldman & Zrnic 2021)
  that enforces a budget under fully adaptive composition.
* :mod:`dpcalc.ledger.api` — datasets, reserve-then-release, training runs.
* :mod:`dpcalc.ledger.transfer` — export and import as JSON lines.

This layer sits under the trainer and the CLI and above the composition/accounting layers;
it never imports torch, click, rich or matplotlib.
"""

from dpcalc.ledger.api import (
    BudgetExceededError,
    Dataset,
    Ledger,
    Record,
    TrainingRun,
    open_ledger,
    set_status_retrying,
)
from dpcalc.ledger.store import SCHEMA_VERSION, LedgerFileError
from dpcalc.ledger.transfer import export_lines, import_lines

__all__ = ["BudgetExceededError", "Dataset", "Ledger", "LedgerFileError", "Record", "SCHEMA_VERSION",
           "TrainingRun", "export_lines", "import_lines", "open_ledger",
           "set_status_retrying"]
