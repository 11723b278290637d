"""Re-redact a store with the rules in effect (`hpcmem db scrub`).

Every path into a store normalises and redacts its text (``kb.safety.normalise.scrub``),
but only with the rules of the hpcmem that wrote it: a token format a later release
recognises, or a secret an older release let through behind a colour code, stays in the
rows written before. ``scrub`` passes every stored text through today's normaliser and
redactor, in one transaction:

- lessons: context, cause, fix, excerpt, status reason, and every string of the actions,
  safety flags and job context; their aliases (template, excerpt), conditions (name, value) and
  evidence (note); signatures (template);
- occurrences (message, log excerpt, submit line, job name, work dir, log path, job
  context) and job records (job name, work dir, submit line);
- the audit log (reason, and every string of the before/after copies). audit_log is
  append-only: database triggers refuse UPDATE. Its triggers are dropped, the rows
  updated and the triggers re-created *from the definitions the database holds*, inside
  the same transaction (SQLite and PostgreSQL both run DDL transactionally), so no other
  connection ever sees the table without them, and a failure anywhere leaves everything
  as it was. On PostgreSQL this needs the schema's owner (who runs migrations).

A row is rewritten only when the redactor finds a secret in its normalised text (then it
gets the normalised and redacted text); text that normalisation alone would change is left
as it was written. When anything changed, one audit entry (object_type ``store``, action
``scrub``) records the counts. The report gives counts per table, never a value; a second
run changes nothing. ``dry_run`` only counts.

Vectors: an embedding is computed from text, and one computed from a secret keeps
something of it (embeddings can be inverted back to much of their text). In the same
transaction:

- a rewritten signature loses its vector (``embedding``, ``embedding_model``,
  ``embedding_hash`` set to NULL) and the index generations are bumped, so every FAISS
  index of the store is rebuilt, without it, when next loaded;
- the query-vector cache (``query_vectors``) is emptied: its rows are keyed by a hash of
  the text, so which ones came from a rewritten lesson's excerpt or cause, or from a query
  that carried a secret before queries were scrubbed, cannot be told. It is a cache:
  recall encodes again what it needs.

Nothing is lost if the process stops afterwards: a signature without a vector is what a
new lesson has until it is embedded (recall embeds the user's own store; ``hpcmem lessons
embed`` a shared one). ``hpcmem db scrub`` embeds the cleared signatures again right after
the commit, from their new text, and rebuilds the caller's index of the store
(``cli/db.py``); a rerun after an interruption does what was left.

Old copies: on SQLite the scrub runs with ``PRAGMA secure_delete`` (the bytes of replaced
values are overwritten with zeros) and checkpoints the write-ahead log afterwards, so the
file no longer holds the secret. On PostgreSQL the replaced row versions stay in the
table's files until VACUUM reclaims them (and in WAL archives and backups): run
``VACUUM FULL`` on the tables the report names when that matters.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

from hpcmem.kb.errors import PermissionDenied, StoreError
from hpcmem.kb.safety.normalise import scrub, scrub_value
from hpcmem.kb.store.sqlwrite import SqlWriter, json_binder, time_binder

PAGE = 2000  # rows read per query (keyset pagination on id: memory stays bounded)
MEMO_KEPT, MEMO_LONGEST = 65536, 1024  # scrub results remembered: short values repeat

# table -> (text columns, JSON columns). The order is the report's.
TABLES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "lessons": (("context", "cause", "fix", "excerpt", "status_reason"), ("actions", "safety_flags", "job_context")),
    "lesson_aliases": (("template", "excerpt"), ()),
    "lesson_conditions": (("name", "value"), ()),
    "lesson_evidence": (("note",), ()),
    "signatures": (("template",), ()),
    "occurrences": (("message", "log_excerpt", "submit_line", "job_name", "work_dir", "log_path"), ("job_context",)),
    "job_records": (("job_name", "work_dir", "submit_line"), ()),
    "audit_log": (("reason",), ("before", "after")),
}
AUDIT_REASON = "stored text re-redacted with the current rules (hpcmem db scrub)"
# Columns a rewritten row loses: a vector computed from the text it had.
CLEARED = {"signatures": ("embedding", "embedding_model", "embedding_hash")}
ID_CHUNK = 500  # ids per IN (...) list


@dataclass
class TableCounts:
    rows: int = 0  # rows read
    changed: int = 0  # rows rewritten (or that would be, with dry_run)
    secrets: int = 0  # secrets redacted in them


@dataclass
class ScrubReport:
    store: str
    dry_run: bool
    tables: dict[str, TableCounts] = field(default_factory=dict)
    audit_entry: bool = False
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    vectors_cleared: int = 0  # signature vectors computed from text that held a secret
    query_vectors_dropped: int = 0  # the query-vector cache, emptied (see the module docstring)
    vectors_recomputed: int = 0  # set by the caller that embeds the cleared signatures again

    @property
    def changed(self) -> int:
        return sum(t.changed for t in self.tables.values())

    @property
    def secrets(self) -> int:
        return sum(t.secrets for t in self.tables.values())

    def as_dict(self) -> dict[str, Any]:
        return {"store": self.store, "dry_run": self.dry_run, "changed": self.changed, "secrets": self.secrets,
                "tables": {name: vars(counts) for name, counts in self.tables.items()},
                "vectors": {"cleared": self.vectors_cleared, "recomputed": self.vectors_recomputed,
                            "query_cache_dropped": self.query_vectors_dropped},
                "audit_entry": self.audit_entry, "notes": list(self.notes), "seconds": self.seconds}

    def summary(self) -> str:
        verb = "would re-redact" if self.dry_run else "re-redacted"
        parts = ", ".join(f"{name} {t.changed}/{t.rows}" for name, t in self.tables.items())
        text = (f"{self.store}: {verb} {self.changed} row(s), {self.secrets} secret(s) "
                f"(rows changed/read: {parts}) ({self.seconds:.2f} s)")
        vectors = (f"vectors: {self.vectors_cleared} cleared, {self.vectors_recomputed} recomputed, "
                   f"{self.query_vectors_dropped} cached query vector(s) dropped")
        return "; ".join([text, vectors, *self.notes])


def scrub_store(store: Any, *, dry_run: bool = False, actor: str = "hpcmem") -> ScrubReport:
    """Re-redact every stored text of ``store`` (a ``kb.store.database.Store``)."""
    store.open(create=False)
    started = time.perf_counter()
    report = ScrubReport(store.name, dry_run)
    raw = store.engine.raw_connection()
    conn = raw.driver_connection
    sqlite = store.dialect == "sqlite"
    secure_delete = None
    try:
        db = SqlWriter(conn, store.dialect)
        if sqlite:
            secure_delete = conn.execute("PRAGMA secure_delete").fetchone()[0]
            conn.execute("PRAGMA secure_delete = ON")
            conn.execute("BEGIN IMMEDIATE")  # the write lock first: writers wait, nobody deadlocks
        elif not dry_run:
            # Writers wait until the scrub commits (no update is lost); readers go on reading.
            db.execute(f"LOCK TABLE {', '.join(TABLES)} IN SHARE ROW EXCLUSIVE MODE")
        run = _Run(db, store.dialect)
        for table, (texts, jsons) in TABLES.items():
            report.tables[table] = run.table(table, texts, jsons, write=not dry_run)
        report.vectors_cleared = run.vectors_cleared
        _drop_vectors(db, report, write=not dry_run)
        if report.changed and not dry_run:
            _audit(db, actor, store.name, report)
            report.audit_entry = True
        if dry_run:
            raw.rollback()
        else:
            raw.commit()
    except BaseException as exc:
        raw.rollback()
        if isinstance(exc, Exception):
            from hpcmem.kb.store.access import as_permission_denied

            denied = as_permission_denied(exc)
            if denied is not None:
                raise PermissionDenied(f"{denied} (db scrub of store '{store.name}': nothing was changed)",
                                       hint="run it as the store's owner, who runs `hpcmem db upgrade`") from None
            if _is_db_error(exc):
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise StoreError(f"db scrub of store '{store.name}' failed, nothing was changed: {first}") from None
        raise
    else:
        if sqlite and report.changed and not dry_run:
            _checkpoint(conn, report)
    finally:
        if secure_delete is not None:
            conn.execute(f"PRAGMA secure_delete = {int(secure_delete)}")
        raw.close()
    report.seconds = round(time.perf_counter() - started, 3)
    return report


class _Run:
    def __init__(self, db: SqlWriter, dialect: str) -> None:
        self.db, self.dialect = db, dialect
        self.json = json_binder(dialect)
        self.limits = _column_limits()
        self.memo: dict[str, tuple[str, int]] = {}
        self.vectors_cleared = 0

    def text(self, value: str) -> tuple[str, int]:
        """The scrubbed value and its secrets; values repeat (submit lines, work dirs)."""
        found = self.memo.get(value)
        if found is None:
            result = scrub(value)
            found = (result.text, result.count)
            if len(value) <= MEMO_LONGEST:
                if len(self.memo) >= MEMO_KEPT:
                    self.memo.clear()
                self.memo[value] = found
        return found

    def table(self, table: str, texts: tuple[str, ...], jsons: tuple[str, ...], *, write: bool) -> TableCounts:
        counts = TableCounts()
        columns = texts + jsons
        updates: list[tuple[Any, ...]] = []
        last = None
        while True:
            where, params = ("WHERE id > ? ", (last,)) if last is not None else ("", ())
            rows = self.db.query(f"SELECT id, {', '.join(columns)} FROM {table} {where}ORDER BY id LIMIT {PAGE}",
                                 params)
            for row in rows:
                counts.rows += 1
                new, secrets = self._row(table, texts, jsons, row[1:])
                if secrets:
                    counts.changed += 1
                    counts.secrets += secrets
                    updates.append((*new, row[0]))
            if len(rows) < PAGE:
                break
            last = rows[-1][0]
        cleared = CLEARED.get(table, ())
        if cleared and updates:
            ids = [row[-1] for row in updates]
            for start in range(0, len(ids), ID_CHUNK):
                chunk = ids[start:start + ID_CHUNK]
                self.vectors_cleared += self.db.query(
                    f"SELECT count(*) FROM {table} WHERE {cleared[0]} IS NOT NULL "
                    f"AND id IN ({', '.join('?' * len(chunk))})", tuple(chunk))[0][0]
        if write and updates:
            assignments = ", ".join([*(f"{c} = ?" for c in columns), *(f"{c} = NULL" for c in cleared)])
            statement = f"UPDATE {table} SET {assignments} WHERE id = ?"
            if table == "audit_log":
                with audit_triggers_lifted(self.db):
                    self.db.executemany(statement, updates)
            else:
                self.db.executemany(statement, updates)
        return counts

    def _row(self, table: str, texts: tuple[str, ...], jsons: tuple[str, ...],
             values: tuple[Any, ...]) -> tuple[list[Any], int]:
        """The row's values scrubbed, as they are stored if it has secrets, and the number
        of secrets found in them."""
        out: list[Any] = []
        secrets = 0
        for column, value in zip(texts, values):
            if isinstance(value, str) and value:
                clean, n = self.text(value)
                limit = self.limits.get((table, column))
                value = clean[:limit] if limit else clean
                secrets += n
            out.append(value)
        for value in values[len(texts):]:
            if value is None:  # SQL NULL (not JSON null) stays so
                out.append(None)
                continue
            if isinstance(value, str):  # SQLite: JSON text
                try:
                    parsed = json.loads(value)
                except ValueError:  # not JSON (written by hand?): scrubbed as the text it is
                    clean, n = self.text(value)
                    secrets += n
                    out.append(clean)
                    continue
            else:
                parsed = value
            clean, n = scrub_value(parsed)
            secrets += n
            out.append(self.json(clean))
        return out, secrets


def _column_limits() -> dict[tuple[str, str], int]:
    """VARCHAR lengths of the scrubbed columns (PostgreSQL enforces them)."""
    from hpcmem.kb.store.models import Base

    limits = {}
    for table, (texts, _jsons) in TABLES.items():
        for column in texts:
            length = getattr(Base.metadata.tables[table].c[column].type, "length", None)
            if length:
                limits[(table, column)] = length
    return limits


@contextmanager
def audit_triggers_lifted(db: SqlWriter) -> Iterator[None]:
    """Inside the caller's transaction: audit_log's append-only triggers dropped, and
    re-created on the way out from the definitions the database held. On an error the
    caller's rollback restores them with everything else."""
    if db.dialect == "sqlite":
        definitions = db.query("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' "
                               "AND tbl_name = 'audit_log' ORDER BY name")
        drop = 'DROP TRIGGER "{}"'
    else:
        definitions = db.query("SELECT t.tgname, pg_get_triggerdef(t.oid) FROM pg_trigger t "
                               "WHERE t.tgrelid = 'audit_log'::regclass AND NOT t.tgisinternal ORDER BY t.tgname")
        drop = 'DROP TRIGGER "{}" ON audit_log'
    for name, _sql in definitions:
        db.execute(drop.format(name))
    yield
    for _name, sql in definitions:
        db.execute(sql)


def _drop_vectors(db: SqlWriter, report: ScrubReport, *, write: bool) -> None:
    """Empty the query-vector cache; bump the index generations when a signature lost its
    vector (as ``embed.bump_rebuild_generation``: every index of the store rebuilds)."""
    report.query_vectors_dropped = db.query("SELECT count(*) FROM query_vectors")[0][0]
    if not write:
        return
    if report.query_vectors_dropped:
        db.execute("DELETE FROM query_vectors")
    if report.vectors_cleared:
        from hpcmem.kb.store.index_keys import GENERATION_KEY, REBUILD_GENERATION_KEY

        cast = "CAST(CAST(store_meta.value AS INTEGER) + 1 AS TEXT)"
        for key in (GENERATION_KEY, REBUILD_GENERATION_KEY):
            db.execute(f"INSERT INTO store_meta (key, value) VALUES (?, '1') "
                       f"ON CONFLICT (key) DO UPDATE SET value = {cast}", (key,))


def _audit(db: SqlWriter, actor: str, store_name: str, report: ScrubReport) -> None:
    now = time_binder(db.dialect)(dt.datetime.now(dt.timezone.utc))
    after = {"tables": {name: {"changed": t.changed, "secrets": t.secrets}
                        for name, t in report.tables.items() if t.changed}}
    db.execute("INSERT INTO audit_log (at, actor, action, object_type, object_id, before, after, reason) "
               "VALUES (?, ?, 'scrub', 'store', ?, ?, ?, ?)",
               (now, actor[:64], store_name[:64], json_binder(db.dialect)(None), json_binder(db.dialect)(after),
                AUDIT_REASON))


def _checkpoint(conn: Any, report: ScrubReport) -> None:
    """Move the write-ahead log into the file and empty it: its frames hold old pages."""
    mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    if str(mode).lower() != "wal":
        return
    busy, _log, _done = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    if busy:
        report.notes.append("the write-ahead log was busy: old page copies stay in the -wal file until the "
                            "next checkpoint (rerun when no hpcmem process has the store open)")


def _is_db_error(exc: Exception) -> bool:
    module = type(exc).__module__ or ""
    return module.startswith(("sqlite3", "psycopg", "sqlalchemy"))
