"""Small writes in plain SQL, for commands that must start fast (``hpcmem record``).

Importing SQLAlchemy's ORM costs about a quarter of a second, most of a `record`. The
few rows a lesson needs are written here with DB-API statements against the schema of
``kb/models.py`` (tests/kb/test_sqlwrite.py checks the rows read back through the ORM
equal what the ORM would have written). Values are converted the way the models'
column types store them: JSON as text on SQLite and JSONB on PostgreSQL, datetimes as
naive UTC.
"""

from __future__ import annotations

import datetime as dt
import json
from contextlib import contextmanager
from typing import Any, Iterator

# SQLAlchemy's SQLite DateTime storage format; ORM reads of these rows depend on it.
_SQLITE_TIME = "%Y-%m-%d %H:%M:%S.%f"


class SqlWriter:
    """One transaction on a DB-API connection of either dialect."""

    def __init__(self, conn: Any, dialect: str) -> None:
        self.conn = conn
        self.dialect = dialect

    def _sql(self, sql: str) -> str:
        return sql.replace("?", "%s") if self.dialect == "postgresql" else sql

    def value(self, value: Any) -> Any:
        """A Python value as the column types of kb/types.py store it."""
        if isinstance(value, dt.datetime):
            if value.tzinfo is not None:
                value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
            return value.strftime(_SQLITE_TIME) if self.dialect == "sqlite" else value
        if isinstance(value, (dict, list)):
            if self.dialect == "postgresql":
                from psycopg.types.json import Jsonb

                return Jsonb(value)
            return json.dumps(value)
        return value

    def insert(self, table: str, row: dict[str, Any], returning: str | None = None) -> Any:
        """INSERT one row; the value of the ``returning`` column (e.g. a new id)."""
        columns = ", ".join(row)
        marks = ", ".join("?" * len(row))
        sql = f"INSERT INTO {table} ({columns}) VALUES ({marks})"
        if returning:
            sql += f" RETURNING {returning}"
        cur = self.conn.cursor()
        try:
            cur.execute(self._sql(sql), tuple(self.value(v) for v in row.values()))
            return cur.fetchone()[0] if returning else None
        finally:
            cur.close()

    def query(self, sql: str, params: tuple = ()) -> list[tuple]:
        cur = self.conn.cursor()
        try:
            cur.execute(self._sql(sql), tuple(self.value(p) for p in params))
            return cur.fetchall()
        finally:
            cur.close()


@contextmanager
def write_transaction(store: Any) -> Iterator[SqlWriter]:  # store: hpcmem.kb.store.Store
    """A SqlWriter in one transaction: committed on success, rolled back on any error.

    Uses the store's engine when this process already made one (so a long-running
    caller such as ``learn`` does not connect per lesson), else a plain connection
    through ``StoreReader`` (which creates or migrates the store when it is behind).
    """
    if store._engine is not None:
        conn = store.engine.raw_connection()
        try:
            writer = SqlWriter(conn.driver_connection, store.dialect)
            if store.dialect == "sqlite":
                conn.driver_connection.execute("BEGIN IMMEDIATE")
            yield writer
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
        finally:
            conn.close()
        return
    from hpcmem.kb.reader import StoreReader

    reader = StoreReader.open(store)
    try:
        if reader.dialect == "sqlite":
            # Python's sqlite3 would otherwise begin lazily, after the first read; IMMEDIATE
            # takes the write lock up front so two writers wait rather than deadlock.
            reader.conn.execute("BEGIN IMMEDIATE")
            try:
                yield SqlWriter(reader.conn, "sqlite")
                reader.conn.commit()
            except BaseException:
                reader.conn.rollback()
                raise
        else:
            with reader.conn.transaction():  # the reader's connection is autocommit
                yield SqlWriter(reader.conn, "postgresql")
    finally:
        reader.close()
