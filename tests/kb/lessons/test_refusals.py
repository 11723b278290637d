"""A refused write is recognised by the database's own answer (SQLite result code,
PostgreSQL SQLSTATE), not by the wording of its message."""

from __future__ import annotations

import sqlite3

import psycopg
import pytest

from hpcmem.kb.store.access import as_permission_denied
from hpcmem.kb.errors import PermissionDenied


def test_sqlite_read_only_database_is_a_refusal(tmp_path):
    path = tmp_path / "store.db"
    sqlite3.connect(path).execute("CREATE TABLE t (x)").connection.commit()
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)  # root ignores file modes; the URI does not
    with pytest.raises(sqlite3.OperationalError) as info:
        conn.execute("INSERT INTO t VALUES (1)")
    assert info.value.sqlite_errorcode & 0xFF == sqlite3.SQLITE_READONLY
    assert isinstance(as_permission_denied(info.value), PermissionDenied)


def test_other_sqlite_errors_are_not_refusals(tmp_path):
    conn = sqlite3.connect(tmp_path / "store.db")
    with pytest.raises(sqlite3.OperationalError) as info:
        conn.execute("INSERT INTO missing VALUES (1)")
    assert as_permission_denied(info.value) is None
    # A message that merely mentions read-only is not the database's answer.
    assert as_permission_denied(RuntimeError("attempt to write a readonly database")) is None


def test_postgres_read_only_transaction_and_missing_grant_are_refusals(pg_schema):
    url, schema = pg_schema
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.execute(f'CREATE TABLE "{schema}".t (x int)')
        role = f"{schema}_reader"
        conn.execute(f'CREATE ROLE "{role}"')
        try:
            conn.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO "{role}"')
            conn.execute(f'GRANT SELECT ON "{schema}".t TO "{role}"')
            with conn.transaction():
                conn.execute("SET TRANSACTION READ ONLY")
                with pytest.raises(psycopg.Error) as read_only:
                    conn.execute(f'INSERT INTO "{schema}".t VALUES (1)')
            assert read_only.value.sqlstate == "25006"
            assert isinstance(as_permission_denied(read_only.value), PermissionDenied)
            conn.execute(f'SET ROLE "{role}"')
            with pytest.raises(psycopg.Error) as no_grant:
                conn.execute(f'INSERT INTO "{schema}".t VALUES (1)')
            assert no_grant.value.sqlstate == "42501"
            assert isinstance(as_permission_denied(no_grant.value), PermissionDenied)
            conn.execute("RESET ROLE")
        finally:
            conn.execute("RESET ROLE")
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
            conn.execute(f'DROP ROLE "{role}"')
