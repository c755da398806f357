"""Shared helpers of the ledger tests."""

from __future__ import annotations

import sqlite3

import pytest

from dpcalc.ledger import store


def _write_v2_ledger(path) -> None:
    """A ledger file as schema version 2 wrote it: dataset 'census' (budget ε 1, δ 1e-6) with one
    released ε = 0.5 event (the migration and read-only tests read it)."""
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute(f"PRAGMA application_id={store.APPLICATION_ID}")
    for version in (1, 2):
        for statement in store.MIGRATIONS[version]:
            con.execute(statement)
    con.execute("INSERT INTO datasets VALUES (1, 'census', 1.0, 1e-6, 'add-remove', '2026-01-01T00:00:00+00:00')")
    con.execute("INSERT INTO events (dataset_id, kind, mechanism, params, event, status, created, updated, command, "
                "version) VALUES (1, 'release', 'discrete-laplace', '{\"epsilon\":0.5}', "
                "'{\"delta\":0.0,\"epsilon\":0.5,\"type\":\"epsilon-delta\"}', 'released', 't', 't', '[]', '0.0.9')")
    con.execute("PRAGMA user_version=2")
    con.close()


@pytest.fixture
def write_v2_ledger():
    """``write_v2_ledger(path)``: write a schema-version-2 ledger file at ``path``."""
    return _write_v2_ledger
