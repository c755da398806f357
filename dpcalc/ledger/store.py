"""The ledger file: an SQLite database (standard-library :mod:`sqlite3`), docs/design.md §11.

* WAL journal, ``synchronous=FULL``: a committed reservation survives the process being
  killed (and a power cut); readers never block the writer.
* Every change is one ``BEGIN IMMEDIATE`` transaction: the write lock is taken *before*
  the budget is read, so two processes can never both decide on the same remaining budget.
* The schema is versioned (``PRAGMA user_version``) and marked as dpcalc's
  (``PRAGMA application_id``); :data:`MIGRATIONS` upgrades older ledgers in one
  transaction. A file that is not an SQLite database, another application's database, a
  ledger written by a newer dpcalc, a corrupt one (``PRAGMA quick_check``), a locked one or
  one on a read-only file system is refused with a one-line :class:`LedgerFileError`
  (exit status 2) **before anything is written**: the checks only read.
"""

from __future__ import annotations

import os
import sqlite3
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from dpcalc.errors import ParameterError

__all__ = ["APPLICATION_ID", "SCHEMA_VERSION", "MIGRATIONS", "LedgerFileError", "connect", "connect_for_reading",
           "transaction", "timeout_seconds"]

#: ``PRAGMA application_id`` of a dpcalc ledger: the bytes "dpLg"
APPLICATION_ID = 0x64704C67
#: the schema this dpcalc writes (``PRAGMA user_version``)
SCHEMA_VERSION = 4

#: the oldest schema a read-only open can read without migrating it
READABLE_VERSION = 2

#: schema version -> the statements that bring a ledger from the version before to it.
#: 1: datasets and release events. 2: training runs (steps reserved / taken), the (ε, δ)
#: event used by the non-adaptive accountants, and an index for per-dataset reads.
#: 3: each dataset's filter orders Λ (JSON list; NULL: the default 21 orders).
#: 4: each dataset's filter running totals (:class:`dpcalc.ledger.filter.RunningTotals`), with the
#: number of events and the last event id they cover (recomputed when they do not match).
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "CREATE TABLE datasets (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, "
        "budget_epsilon REAL NOT NULL, delta REAL NOT NULL, adjacency TEXT NOT NULL, "
        "created TEXT NOT NULL)",
        "CREATE TABLE events (id INTEGER PRIMARY KEY, dataset_id INTEGER NOT NULL "
        "REFERENCES datasets(id), kind TEXT NOT NULL, mechanism TEXT NOT NULL, "
        "params TEXT NOT NULL, event TEXT NOT NULL, status TEXT NOT NULL, created TEXT NOT NULL, "
        "updated TEXT NOT NULL, command TEXT NOT NULL, version TEXT NOT NULL)",
    ),
    2: (
        "ALTER TABLE events ADD COLUMN steps_reserved INTEGER",
        "ALTER TABLE events ADD COLUMN steps_taken INTEGER",
        "ALTER TABLE events ADD COLUMN dp_event TEXT",
        "CREATE INDEX events_by_dataset ON events (dataset_id, id)",
    ),
    3: (
        "ALTER TABLE datasets ADD COLUMN orders TEXT",
    ),
    4: (
        "CREATE TABLE filter_state (dataset_id INTEGER PRIMARY KEY REFERENCES datasets(id), "
        "events INTEGER NOT NULL, last_id INTEGER NOT NULL, state TEXT NOT NULL)",
    ),
}

_HEADER = b"SQLite format 3\x00"


class LedgerFileError(ParameterError):
    """The ledger file cannot be used: missing, not a ledger, newer, corrupt, locked or not
    writable. One line naming the file; the CLI exits with status 2 and writes nothing."""

    def __init__(self, message: str) -> None:
        # one line whatever the file name holds: control characters shown escaped
        message = "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)
        super().__init__("ledger_file", "", None, message=message)


def timeout_seconds() -> float:
    """How long a writer waits for the lock: ``$DPCALC_LEDGER_TIMEOUT`` seconds (default 30)."""
    text = os.environ.get("DPCALC_LEDGER_TIMEOUT", "30")
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 3600:
        raise LedgerFileError(f"DPCALC_LEDGER_TIMEOUT must be a number of seconds in [0, 3600], got {text!r}")
    return value


def _first_line(err: BaseException) -> str:
    return " ".join(str(err).split())[:200] or type(err).__name__


def describe(err: sqlite3.Error, path: str | os.PathLike) -> LedgerFileError:
    """A one-line :class:`LedgerFileError` for an :mod:`sqlite3` error on ``path``."""
    text = _first_line(err)
    low = text.lower()
    if "locked" in low or "busy" in low:
        return LedgerFileError(f"ledger {path} is locked by another process (waited "
                               f"{timeout_seconds():g} s; set DPCALC_LEDGER_TIMEOUT to wait longer)")
    if "readonly" in low or "read-only" in low or "unable to open" in low:
        return LedgerFileError(f"ledger {path} cannot be written (read-only file system or no "
                               f"permission: {text}); nothing was recorded")
    if "disk i/o error" in low or "disk is full" in low:
        return LedgerFileError(f"ledger {path} cannot be written (file system full or failing: {text}); "
                               "nothing was recorded")
    if "malformed" in low or "not a database" in low or "corrupt" in low:
        return LedgerFileError(f"ledger {path} is corrupt ({text}); nothing was written")
    return LedgerFileError(f"ledger {path}: {type(err).__name__}: {text}")


def _check_file(path: Path, create: bool) -> bool:
    """Refuse what is certainly not a ledger before SQLite opens it; True if the file exists
    and is non-empty."""
    import stat

    shown = str(path)[:200]
    if not str(path).strip():
        raise LedgerFileError("ledger file name is empty")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if not create:
            raise LedgerFileError(f"no ledger at {shown}: create it with `dpcalc ledger init {shown} "
                                  "--dataset NAME --budget-eps EPS --delta DELTA`") from None
        if not path.parent.is_dir():
            raise LedgerFileError(f"ledger {shown}: the directory {str(path.parent)[:200]} does not exist") from None
        return False
    except (OSError, ValueError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise LedgerFileError(f"ledger {shown} cannot be used: {why}") from None
    if not stat.S_ISREG(st.st_mode):
        raise LedgerFileError(f"ledger {shown} is not a regular file")
    try:
        with open(path, "rb") as f:
            head = f.read(len(_HEADER))
    except OSError as e:
        raise LedgerFileError(f"ledger {shown} cannot be read: {e.strerror}") from None
    if not head:
        if not create:
            raise LedgerFileError(f"ledger {shown} is an empty file, not a dpcalc ledger")
        return False
    if head != _HEADER:
        raise LedgerFileError(f"{shown} is not a dpcalc ledger (not an SQLite database); nothing was written")
    return True


def connect(path: str | os.PathLike, *, create: bool = False) -> sqlite3.Connection:
    """Open (or with ``create``, create) the ledger at ``path``, checked and migrated.

    Args:
        path: the ledger file.
        create: create a new ledger if ``path`` does not exist (or is empty).

    Returns:
        An autocommit connection (transactions are explicit: :func:`transaction`).

    Raises:
        LedgerFileError: see the module docstring; nothing is written in those cases.
    """
    p = Path(path)
    exists = _check_file(p, create)
    uri = "file:" + urllib.parse.quote(str(p.absolute())) + ("?mode=rwc" if create else "?mode=rw")
    timeout = timeout_seconds()
    try:
        con = sqlite3.connect(uri, uri=True, timeout=timeout, isolation_level=None,
                              check_same_thread=False)
    except sqlite3.Error as e:
        raise describe(e, p) from None
    try:
        _check_schema(con, p, exists)
        con.execute("PRAGMA foreign_keys=ON")
        con.execute("PRAGMA synchronous=FULL")
        if con.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
            mode = con.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if mode.lower() != "wal":
                raise LedgerFileError(f"ledger {p}: cannot use write-ahead logging (journal mode {mode})")
        _migrate(con, p)
    except sqlite3.Error as e:
        con.close()
        raise describe(e, p) from None
    except BaseException:
        con.close()
        raise
    return con


def _writable(path: Path) -> bool:
    """Whether ``path`` and its directory (where SQLite keeps the -wal and -shm files) can be written."""
    return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)


def _write_failure(err: LedgerFileError) -> bool:
    """Whether opening for writing failed only because nothing can be written there (a read-only
    or full file system, an I/O error writing the shared-memory file): a reader then opens the
    ledger read-only instead."""
    low = err.message.lower()
    return "cannot be written" in low


def _stamp(path: Path) -> tuple[int, int, int, int]:
    st = os.stat(path)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def connect_for_reading(path: str | os.PathLike, *, migrate: bool = True
                        ) -> tuple[sqlite3.Connection, Callable[[], None] | None]:
    """Open the ledger at ``path`` for reading only (``ledger show``, ``ledger export``).

    A writable ledger is opened as :func:`connect` opens it (and migrated). A ledger that
    cannot be written (a read-only file system, a read-only file or directory) is opened
    read-only instead of being refused:

    * ``mode=ro`` first: SQLite reads the database and its write-ahead log through the shared
      memory file, so every committed change is seen;
    * when that fails — on a read-only file system SQLite cannot create the -shm file — and
      there is no write-ahead log with content (``FILE-wal`` absent or empty: every committed
      change is in the database file itself), with ``immutable=1``. That flag makes SQLite read
      without any locking, which would be unsafe if the file changed meanwhile (a writer on
      another mount of the same directory), so the file's device, inode, size and modification
      time are recorded before and checked by the returned callable after reading;
    * a non-empty ``FILE-wal`` that cannot be read through ``mode=ro`` is refused: reading the
      database file alone would miss committed events (under-report ε).

    With ``migrate=False`` (``dpcalc ledger report``) even a writable ledger is opened the read-only
    way: it is never migrated and no write lock is taken.

    Returns:
        (connection, check): ``check`` is None, or a callable raising :class:`LedgerFileError`
        if the file changed since it was opened (call it after the last read).

    Raises:
        LedgerFileError: everything :func:`connect` refuses; a write-ahead log that cannot be
            read; a ledger of an older schema on a read-only file system (it needs a migration).
    """
    p = Path(path)
    _check_file(p, False)
    if migrate and _writable(p):
        try:
            return connect(p), None
        except LedgerFileError as e:
            if not _write_failure(e):
                raise
    uri = "file:" + urllib.parse.quote(str(p.absolute()))
    timeout = timeout_seconds()
    check = None
    con = None
    try:
        con = sqlite3.connect(uri + "?mode=ro", uri=True, timeout=timeout, isolation_level=None,
                              check_same_thread=False)
        con.execute("PRAGMA schema_version").fetchone()  # opens the file (and its WAL) now
    except sqlite3.Error as err:
        if con is not None:
            con.close()
        if "locked" in str(err).lower() or "busy" in str(err).lower():
            raise describe(err, p) from None
        wal = Path(str(p) + "-wal")
        try:
            wal_size = os.stat(wal).st_size
        except FileNotFoundError:
            wal_size = 0
        except OSError as e:
            raise LedgerFileError(f"ledger {p}: its write-ahead log {wal.name} cannot be read ({e.strerror})") from None
        if wal_size > 0:
            raise LedgerFileError(
                f"ledger {p} cannot be written and its write-ahead log {wal.name} holds changes not yet in the "
                "file, which SQLite cannot read without writing its shared-memory file: copy the ledger with "
                "its -wal and -shm files to a writable directory and read the copy") from None
        before = _stamp(p)

        def check() -> None:
            try:  # an empty -wal left by the failed writable open is not a change
                changed = os.stat(wal).st_size > 0
            except FileNotFoundError:
                changed = False
            if changed or _stamp(p) != before:
                raise LedgerFileError(f"ledger {p} changed while it was being read (a writer elsewhere); "
                                      "nothing was written: run the command again")
        try:
            con = sqlite3.connect(uri + "?mode=ro&immutable=1", uri=True, timeout=timeout,
                                  isolation_level=None, check_same_thread=False)
        except sqlite3.Error as e:
            raise describe(e, p) from None
    try:
        _check_schema(con, p, True)
        version = con.execute("PRAGMA user_version").fetchone()[0]
        if version < READABLE_VERSION:  # v2 lacks only v3's orders column (read as the default)
            raise LedgerFileError(f"ledger {p} has schema version {version} and cannot be written to upgrade it "
                                  f"to version {SCHEMA_VERSION}: read a writable copy")
        con.execute("PRAGMA query_only=ON")
    except sqlite3.Error as e:
        con.close()
        raise describe(e, p) from None
    except BaseException:
        con.close()
        raise
    return con, check


def _check_schema(con: sqlite3.Connection, path: Path, exists: bool) -> None:
    """Read-only checks: ours, not newer, not corrupt (or a brand-new empty database)."""
    app = con.execute("PRAGMA application_id").fetchone()[0]
    version = con.execute("PRAGMA user_version").fetchone()[0]
    tables = con.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
    if app == 0 and version == 0 and tables == 0:
        if exists:  # an SQLite database with nothing in it: another program's, keep out
            raise LedgerFileError(f"{path} is an empty SQLite database, not a dpcalc ledger; "
                                  "nothing was written")
        return
    if app != APPLICATION_ID:
        raise LedgerFileError(f"{path} is not a dpcalc ledger (an SQLite database of another "
                              f"application, application_id {app:#x}); nothing was written")
    if version > SCHEMA_VERSION:
        raise LedgerFileError(f"ledger {path} has schema version {version}, written by a newer dpcalc; "
                              f"this dpcalc reads versions 1 to {SCHEMA_VERSION}: upgrade dpcalc")
    if version < 1:
        raise LedgerFileError(f"ledger {path} is corrupt (schema version {version}); nothing was written")
    check = con.execute("PRAGMA quick_check").fetchall()
    if check != [("ok",)]:
        first = " ".join(" ".join(str(r[0]).split()) for r in check[:2])[:160]  # one line
        raise LedgerFileError(f"ledger {path} is corrupt (integrity check: {first}); nothing was written")


def _migrate(con: sqlite3.Connection, path: Path) -> None:
    version = con.execute("PRAGMA user_version").fetchone()[0]
    if version >= SCHEMA_VERSION:
        return
    with transaction(con, path):
        version = con.execute("PRAGMA user_version").fetchone()[0]  # another process may have won
        if version == 0:
            con.execute(f"PRAGMA application_id={APPLICATION_ID}")
        for target in range(version + 1, SCHEMA_VERSION + 1):
            for statement in MIGRATIONS[target]:
                con.execute(statement)
        if version < SCHEMA_VERSION:
            con.execute(f"PRAGMA user_version={SCHEMA_VERSION}")


@contextmanager
def transaction(con: sqlite3.Connection, path: str | os.PathLike) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` … ``COMMIT`` (``ROLLBACK`` on any exception): the write lock is held
    from the first read, so decisions taken inside see every committed change and no other
    writer can interleave.

    Raises:
        LedgerFileError: the lock was not obtained in time, the file is read-only, or SQLite
            failed (the transaction is rolled back: nothing is written).
    """
    try:
        con.execute("BEGIN IMMEDIATE")
    except sqlite3.Error as e:
        raise describe(e, path) from None
    try:
        yield con
        con.execute("COMMIT")
    except BaseException as exc:
        try:
            con.execute("ROLLBACK")
        except sqlite3.Error:
            pass
        if isinstance(exc, sqlite3.Error):
            raise describe(exc, path) from None
        raise
