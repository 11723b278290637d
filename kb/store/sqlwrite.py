"""Writes in plain SQL, and how values go to the driver as the models' column types store them.

Importing SQLAlchemy's ORM costs about a quarter of a second, most of a `record`. The
few rows a lesson needs are written here with DB-API statements against the schema of
``kb/store/models.py`` (tests/kb/store/test_sqlwrite.py reads them back through the ORM). The value
conversions below are the ones every plain-SQL writer uses (``SqlWriter``, the bulk
``Recorder``, the reader's query-vector cache), so SQLAlchemy's storage formats are
written down once: datetimes as naive UTC (SQLite: its DATETIME text), JSON as text on
SQLite and JSONB on PostgreSQL, with None stored as JSON null as SQLAlchemy's JSON does.
"""

from __future__ import annotations

import datetime as dt
import json
from contextlib import contextmanager
from typing import Any, Callable, Iterator

_UTC = dt.timezone.utc


def sqlite_time(value: dt.datetime | None) -> str | None:
    """UTCDateTime, then SQLAlchemy's SQLite DATETIME text: isoformat with microseconds is
    the same text (year zero-padded), and for a UTC time the same 26 characters followed
    by '+00:00'."""
    if value is None:
        return None
    zone = value.tzinfo
    if zone is None:
        return value.isoformat(" ", "microseconds")
    if zone is not _UTC:
        value = value.astimezone(_UTC)
    return value.isoformat(" ", "microseconds")[:26]


def naive_utc(value: dt.datetime | None) -> dt.datetime | None:
    """UTCDateTime on PostgreSQL: naive UTC."""
    if value is None or value.tzinfo is None:
        return value
    return value.astimezone(_UTC).replace(tzinfo=None)


def time_binder(dialect: str) -> Callable[[dt.datetime | None], Any]:
    return sqlite_time if dialect == "sqlite" else naive_utc


def json_binder(dialect: str) -> Callable[[Any], Any]:
    """A JSON column's value; None becomes JSON null (SQLAlchemy's none_as_null=False)."""
    if dialect == "postgresql":
        from psycopg.types.json import Jsonb

        return Jsonb
    return json.dumps


class SqlWriter:
    """One transaction on a DB-API connection of either dialect."""

    def __init__(self, conn: Any, dialect: str) -> None:
        self.conn = conn
        self.dialect = dialect
        self._time = time_binder(dialect)
        self._json = json_binder(dialect)

    def _sql(self, sql: str) -> str:
        return sql.replace("?", "%s") if self.dialect == "postgresql" else sql

    def value(self, value: Any) -> Any:
        """A parameter as the driver takes it (JSON columns are named to ``insert``)."""
        return self._time(value) if isinstance(value, dt.datetime) else value

    def insert(self, table: str, row: dict[str, Any], *, json_columns: tuple[str, ...] = (),
               returning: str | None = None) -> Any:
        """INSERT one row; the value of the ``returning`` column (e.g. a new id)."""
        columns = ", ".join(row)
        marks = ", ".join("?" * len(row))
        sql = f"INSERT INTO {table} ({columns}) VALUES ({marks})"
        if returning:
            sql += f" RETURNING {returning}"
        values = tuple(self._json(v) if c in json_columns else self.value(v) for c, v in row.items())
        cur = self.conn.cursor()
        try:
            cur.execute(self._sql(sql), values)
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

    def execute(self, sql: str, params: tuple = ()) -> None:
        cur = self.conn.cursor()
        try:
            cur.execute(self._sql(sql), tuple(self.value(p) for p in params))
        finally:
            cur.close()

    def executemany(self, sql: str, rows: list[tuple]) -> None:
        if not rows:
            return
        value = self.value
        cur = self.conn.cursor()
        try:
            cur.executemany(self._sql(sql), [tuple(value(p) for p in row) for row in rows])
        finally:
            cur.close()

    def stream(self, sql: str, size: int = 5000) -> Iterator[tuple]:
        """The rows of ``sql``, fetched ``size`` at a time (a table too large to hold)."""
        cur = self.conn.cursor()
        try:
            cur.execute(self._sql(sql))
            while True:
                batch = cur.fetchmany(size)
                if not batch:
                    return
                yield from batch
        finally:
            cur.close()


@contextmanager
def write_transaction(store: Any) -> Iterator[SqlWriter]:  # store: hpcmem.kb.store.database.Store
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
    from hpcmem.kb.store.reader import StoreReader

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
