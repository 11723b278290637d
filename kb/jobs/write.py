"""Write observed jobs and failures into a store, in batches, idempotently.

Every reader (sacct, job logs, epilog spool) hands the recorder plain dicts: a compact
job row for every job, and an occurrence row plus a failure message for failed jobs.
The recorder fingerprints the message, upserts signatures, job records and occurrences
keyed on (cluster, job_id), and keeps each signature's count equal to the number of
occurrences pointing at it. Re-recording the same input changes nothing.

A message from a job log is more specific than one synthesised from a sacct state, so
an occurrence that already has a log excerpt keeps its log-derived signature when sacct
data for the same job arrives later; the log wins in either order.

Bulk rows (job records, new occurrences) go to the database as tuples through the
driver's own ``executemany`` on the session's connection, inside its transaction: a
million sacct rows must ingest at a small multiple of reading the file (issue 14), and
SQLAlchemy's per-row parameter processing cost more than SQLite's inserts. Values are
converted the way the models' column types store them (``_binders``: datetimes as naive
UTC, SQLite's text form on SQLite; JSON as text or JSONB; booleans as bool);
tests/kb/jobs/test_recorder.py checks the rows against what SQLAlchemy writes. The few
per-batch statements (signature lookups, counts, updates) stay SQLAlchemy Core.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from operator import itemgetter
from typing import Any, Callable, Iterable

from sqlalchemy import JSON, Boolean, bindparam, select, update
from sqlalchemy.dialects import postgresql, sqlite

from hpcmem.kb.store.models import JobRecord, Occurrence, Signature, StoreMeta
from hpcmem.kb.safety.normalise import scrub
from hpcmem.kb.signatures.fingerprint import FailureSignature as SignatureKey
from hpcmem.kb.signatures.rules_digest import site_rules_path
from hpcmem.kb.signatures.fingerprint import signature_of_block
from hpcmem.kb.store.sqlwrite import json_binder, time_binder
from hpcmem.kb.store.database import Store
from hpcmem.kb.store.column_types import UTCDateTime, utcnow

# What readers give; change_seq is the recorder's own (one value per flush).
JOB_COLUMNS = tuple(c.name for c in JobRecord.__table__.columns if c.name not in ("id", "change_seq"))
CHANGE_SEQ_KEY = "job_records.change_seq"  # store_meta: the last write counter handed out
OCCURRENCE_COLUMNS = tuple(
    c.name for c in Occurrence.__table__.columns if c.name not in ("id", "signature_id", "observed_at")
)
_job_values = itemgetter(*JOB_COLUMNS)
# What a new occurrence row holds, in this order.
_NEW_OCCURRENCE_COLUMNS = (*OCCURRENCE_COLUMNS, "signature_id", "observed_at")
# Free text that can carry secrets (tokens in submit lines, passwords in logs): each is
# normalised, then redacted (kb.safety.normalise.scrub) before it is stored or fingerprinted.
REDACTED_FIELDS = ("message", "log_excerpt", "submit_line", "job_name", "work_dir", "log_path")
# Message shapes whose signature a RowPreparer keeps (a dump has a few hundred).
_SHAPES_KEPT = 65536
# Ids per IN (...) query; well under SQLite's variable limit.
CHUNK = 900


def _signature(message: str) -> SignatureKey:
    return _signature_under(message, site_rules_path())


@lru_cache(maxsize=65536)
def _signature_under(message: str, site_rules: str | None) -> SignatureKey:
    # Failure messages repeat heavily across jobs; fingerprinting each once is enough (the
    # site's rules file is part of the key: signature_of_block reads it).
    return signature_of_block(message)


@lru_cache(maxsize=65536)
def _redact_cached(value: str) -> tuple[str, int]:
    # Submit lines, work dirs and job names repeat across a user's many jobs.
    result = scrub(value)
    return result.text, result.count


def _binder(column, dialect: str) -> Callable[[Any], Any] | None:
    """How a Python value of ``column`` goes to the driver, as its SQLAlchemy type would
    bind it; None when it goes as it is."""
    kind = column.type
    if isinstance(kind, UTCDateTime):
        return time_binder(dialect)
    if isinstance(kind, JSON) or isinstance(getattr(kind, "impl", None), JSON):
        return json_binder(dialect)
    if isinstance(kind, Boolean):
        return bool  # job_records.failed: a row that does not say is not a failure
    return None


def _binders(table, columns: tuple[str, ...], dialect: str) -> list[tuple[int, Callable[[Any], Any]]]:
    found = ((i, _binder(table.c[name], dialect)) for i, name in enumerate(columns))
    return [(i, bind) for i, bind in found if bind is not None]


@dataclass
class RecordStats:
    jobs: int = 0
    failures: int = 0
    occurrences_new: int = 0
    occurrences_updated: int = 0
    redactions: int = 0
    new_signatures: set[str] = field(default_factory=set)
    seen_signatures: set[str] = field(default_factory=set)

    def add_to(self, summary: Any) -> None:
        """Add these counts to the fields of an ingest/drain summary that has them."""
        for key, value in self.as_dict().items():
            if hasattr(summary, key):
                setattr(summary, key, getattr(summary, key) + value)

    def as_dict(self) -> dict[str, int]:
        return {
            "jobs": self.jobs,
            "failures": self.failures,
            "occurrences_new": self.occurrences_new,
            "occurrences_updated": self.occurrences_updated,
            "signatures_new": len(self.new_signatures),
            "signatures_known": len(self.seen_signatures - self.new_signatures),
            "redactions": self.redactions,
        }


# What RowPreparer hands the Recorder: ((cluster, job_id), job values in JOB_COLUMNS order,
# bound as the driver takes them) and ((cluster, job_id), the redacted occurrence row,
# its signature, the values of a new occurrence in OCCURRENCE_COLUMNS order, bound).
PreparedJob = tuple[tuple[str, str], list[Any]]
PreparedFailure = tuple[tuple[str, str], dict[str, Any], SignatureKey, list[Any]]


class RowPreparer:
    """The database-free part of recording: redact rows, fingerprint failure messages and
    convert values to what the driver binds. It needs no store, only its dialect, so it
    can run in other processes (ingest/sacct_parallel.py) while a Recorder writes;
    redactions are counted into ``stats``."""

    def __init__(self, dialect: str, stats: RecordStats | None = None) -> None:
        self.stats = stats if stats is not None else RecordStats()
        self._job_binders = _binders(JobRecord.__table__, JOB_COLUMNS, dialect)
        binders = _binders(Occurrence.__table__, _NEW_OCCURRENCE_COLUMNS, dialect)
        self._occurrence_binders = [(i, bind) for i, bind in binders if i < len(OCCURRENCE_COLUMNS)]
        self._state_at = OCCURRENCE_COLUMNS.index("state")
        self._shapes: dict[str, SignatureKey] = {}

    def job(self, job: dict[str, Any]) -> PreparedJob:
        self._redacted(job)
        try:
            values = list(_job_values(job))
        except KeyError:  # a reader that leaves columns out: they are unknown
            values = [job.get(c) for c in JOB_COLUMNS]
        for i, bind in self._job_binders:
            values[i] = bind(values[i])
        return (job["cluster"], job["job_id"]), values

    def failure(self, failure: dict[str, Any]) -> PreparedFailure:
        shape = failure.pop("message_shape", None)
        message = failure.get("message")
        self._redacted(failure)
        if shape is not None and failure.get("message") is message:
            signature = self._signature_of_shape(shape, message)
        else:
            signature = _signature(failure.get("message") or f"job state {failure.get('state') or 'FAILED'}")
        values = [failure.get(c) for c in OCCURRENCE_COLUMNS]
        values[self._state_at] = values[self._state_at] or "FAILED"  # a log alone says the job failed
        for i, bind in self._occurrence_binders:
            values[i] = bind(values[i])
        return (failure["cluster"], failure["job_id"]), failure, signature, values

    def _signature_of_shape(self, shape: str, message: str) -> SignatureKey:
        """The signature of ``message``, fingerprinted once per shape: a message that sacct
        data implies (ingest/failure_message.py) has its job id and time in it, which
        normalization masks, so every message of one shape has the same signature."""
        signature = self._shapes.get(shape)
        if signature is None:
            if len(self._shapes) >= _SHAPES_KEPT:
                self._shapes.clear()
            signature = self._shapes[shape] = _signature(message)
        return signature

    def _redacted(self, row: dict[str, Any]) -> dict[str, Any]:
        if row.get("job_context"):
            from hpcmem.kb.safety.normalise import scrub_value

            row["job_context"], count = scrub_value(row["job_context"])
            self.stats.redactions += count
        for key in REDACTED_FIELDS:
            value = row.get(key)
            if value:
                clean, count = _redact_cached(value)
                if clean is not value and clean != value:  # a secret, or codes it was hidden by
                    row[key] = clean
                    self.stats.redactions += count
        return row


class Recorder:
    """Buffer jobs and failures; ``flush`` writes a batch in one transaction."""

    def __init__(self, store: Store, batch_size: int = 5000) -> None:
        self.store = store
        self.batch_size = batch_size
        self.stats = RecordStats()
        # job rows as the tuples the upsert binds (JOB_COLUMNS order), failures prepared
        self._jobs: dict[tuple[str, str], list[Any]] = {}
        self._failures: dict[tuple[str, str], PreparedFailure] = {}
        dialect = store.dialect
        self._prepare = RowPreparer(dialect, self.stats)
        self._insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
        self._mark = "%s" if dialect == "postgresql" else "?"  # the driver's paramstyle
        self._observed_at = _binder(Occurrence.__table__.c.observed_at, dialect)
        self._occurrence_table = Occurrence.__table__
        self._dialect = dialect

    # -- input ------------------------------------------------------------------------
    def add(self, job: dict[str, Any] | None, failure: dict[str, Any] | None = None) -> None:
        """Queue one job row and, for a failed job, its occurrence row (with ``message``)."""
        prepare = self._prepare
        self.add_prepared(prepare.job(job) if job is not None else None,
                          prepare.failure(failure) if failure is not None else None)

    def add_prepared(self, job: PreparedJob | None, failure: PreparedFailure | None = None) -> None:
        """Queue rows that a ``RowPreparer`` for this store's dialect made ready (in this
        process or another one); ``add`` is ``add_prepared`` of ``prepare.job/failure``."""
        if job is not None:
            self._jobs[job[0]] = job[1]
            self.stats.jobs += 1
        if failure is not None:
            self._failures[failure[0]] = failure
            self.stats.failures += 1
        if len(self._jobs) + len(self._failures) >= self.batch_size:
            self.flush()

    # -- output -----------------------------------------------------------------------
    def flush(self) -> None:
        if not self._jobs and not self._failures:
            return
        jobs, failures = list(self._jobs.values()), list(self._failures.values())
        # failures of jobs not in this batch: their job rows change too (a new signature)
        orphans = [key for key in self._failures if key not in self._jobs]
        self._jobs, self._failures = {}, {}
        with self.store.transaction() as session:
            conn = session.connection()
            seq = next_change_seq(conn)
            if jobs:
                self._upsert_jobs(conn, [(*row, seq) for row in jobs])
            if failures:
                self._write_failures(conn, failures)
            if orphans:
                table = JobRecord.__table__
                conn.execute(update(table).where(table.c.cluster == bindparam("_c"), table.c.job_id == bindparam("_j"))
                             .values(change_seq=seq), [{"_c": c, "_j": j} for c, j in orphans])

    def _executemany(self, conn, sql: str, rows: list) -> None:
        """``executemany`` on the driver connection inside the session's transaction."""
        cursor = conn.connection.dbapi_connection.cursor()
        try:
            cursor.executemany(sql, rows)
        finally:
            cursor.close()

    def _upsert_jobs(self, conn, jobs: list[tuple[Any, ...]]) -> None:
        self._executemany(conn, _job_upsert_sql(self._mark), jobs)

    def _write_failures(self, conn, failures: list[PreparedFailure]) -> None:
        keys = {key: signature for key, _, signature, _ in failures}
        sig_ids = self._ensure_signatures(conn, failures, keys)
        existing = self._existing_occurrences(conn, keys)
        delta: Counter[int] = Counter()
        inserts, updates = [], []
        observed_at = self._observed_at
        for key, failure, signature, bound in failures:
            sig_id = sig_ids[signature.fingerprint]
            old = existing.get(key)
            if old is None:
                inserts.append([*bound, sig_id, observed_at(utcnow())])
                delta[sig_id] += 1
                continue
            row = {c: failure.get(c) for c in OCCURRENCE_COLUMNS}
            old_id, old_sig, old_has_log = old
            if old_has_log and not row.get("log_excerpt"):
                # Keep the more specific, log-derived signature and text.
                sig_id = old_sig
                for column in ("message", "log_excerpt", "log_path"):
                    row.pop(column, None)
            if sig_id != old_sig:
                delta[sig_id] += 1
                if old_sig is not None:
                    delta[old_sig] -= 1
            # Merge, never erase: a later source that lacks a value keeps the known one.
            row = {k: v for k, v in row.items() if v is not None and k != "source"}
            row["signature_id"] = sig_id
            row["_id"] = old_id
            updates.append(row)
        if inserts:
            self._executemany(conn, _occurrence_insert_sql(self._mark), inserts)
            self.stats.occurrences_new += len(inserts)
        self._update_occurrences(conn, updates)
        self.stats.occurrences_updated += len(updates)
        self._apply_counts(conn, delta, failures, keys, sig_ids)

    def _update_occurrences(self, conn, updates: list[dict[str, Any]]) -> None:
        """UPDATE known occurrences, one executemany per set of columns the rows carry."""
        groups: dict[tuple[str, ...], list[list[Any]]] = {}
        for row in updates:
            oid = row.pop("_id")
            groups.setdefault(tuple(row), []).append([*row.values(), oid])
        table = self._occurrence_table
        for columns, rows in groups.items():
            for i, bind in _binders(table, columns, self._dialect):
                for values in rows:
                    values[i] = bind(values[i])
            assignments = ", ".join(f"{c} = {self._mark}" for c in columns)
            self._executemany(conn, f"UPDATE occurrences SET {assignments} WHERE id = {self._mark}", rows)

    def _ensure_signatures(self, conn, failures, keys: dict[tuple[str, str], SignatureKey]) -> dict[str, int]:
        table = Signature.__table__
        by_fp = {key.fingerprint: key for key in keys.values()}
        ids = self._signature_ids(conn, list(by_fp))
        missing = [fp for fp in by_fp if fp not in ids]
        if missing:
            times = _times_by_fingerprint(failures, keys)
            now = utcnow()
            rows = [
                {"fingerprint": fp, "category": by_fp[fp].category, "template": by_fp[fp].template, "count": 0,
                 "first_seen": times.get(fp, (now, now))[0], "last_seen": times.get(fp, (now, now))[1]}
                for fp in missing
            ]
            stmt = self._insert(table).on_conflict_do_nothing(index_elements=["fingerprint"])
            conn.execute(stmt, rows)
            ids.update(self._signature_ids(conn, missing))
            self.stats.new_signatures.update(missing)
        self.stats.seen_signatures.update(by_fp)
        return ids

    @staticmethod
    def _signature_ids(conn, fingerprints: list[str]) -> dict[str, int]:
        table = Signature.__table__
        ids: dict[str, int] = {}
        for chunk in _chunks(fingerprints):
            for sid, fp in conn.execute(select(table.c.id, table.c.fingerprint).where(table.c.fingerprint.in_(chunk))):
                ids[fp] = sid
        return ids

    @staticmethod
    def _existing_occurrences(conn, keys) -> dict[tuple[str, str], tuple[int, int | None, bool]]:
        table = Occurrence.__table__
        found: dict[tuple[str, str], tuple[int, int | None, bool]] = {}
        by_cluster: dict[str, list[str]] = {}
        for cluster, job_id in keys:
            by_cluster.setdefault(cluster, []).append(job_id)
        for cluster, job_ids in by_cluster.items():
            for chunk in _chunks(job_ids):
                query = select(table.c.id, table.c.job_id, table.c.signature_id, table.c.log_excerpt.is_not(None)).where(
                    table.c.cluster == cluster, table.c.job_id.in_(chunk)
                )
                for oid, job_id, sig, has_log in conn.execute(query):
                    found[(cluster, job_id)] = (oid, sig, bool(has_log))
        return found

    @staticmethod
    def _apply_counts(conn, delta: Counter[int], failures, keys, sig_ids) -> None:
        table = Signature.__table__
        times = _times_by_fingerprint(failures, keys)
        rows = []
        for fp, sid in sig_ids.items():
            first, last = times.get(fp, (None, None))
            rows.append({"_sid": sid, "_delta": delta.get(sid, 0), "_first": first, "_last": last})
        for sid, change in delta.items():  # signatures that only lost occurrences
            if sid not in sig_ids.values() and change:
                rows.append({"_sid": sid, "_delta": change, "_first": None, "_last": None})
        if not rows:
            return
        from sqlalchemy import case, func

        stmt = (
            update(table)
            .where(table.c.id == bindparam("_sid"))
            .values(
                count=table.c.count + bindparam("_delta"),
                first_seen=case((bindparam("_first", type_=table.c.first_seen.type).is_(None), table.c.first_seen),
                                else_=func.min(table.c.first_seen, bindparam("_first", type_=table.c.first_seen.type))
                                if conn.dialect.name == "sqlite"
                                else func.least(table.c.first_seen, bindparam("_first", type_=table.c.first_seen.type))),
                last_seen=case((bindparam("_last", type_=table.c.last_seen.type).is_(None), table.c.last_seen),
                               else_=func.max(table.c.last_seen, bindparam("_last", type_=table.c.last_seen.type))
                               if conn.dialect.name == "sqlite"
                               else func.greatest(table.c.last_seen, bindparam("_last", type_=table.c.last_seen.type))),
            )
        )
        conn.execute(stmt, rows)

    def close(self) -> RecordStats:
        self.flush()
        return self.stats


def next_change_seq(conn) -> int:
    """The next write counter, inside the caller's transaction. Its row stays locked until
    commit (SQLite: the write lock; PostgreSQL: the row lock), so counters become visible
    in the order they were handed out and a reader that saw N has seen every row <= N."""
    from sqlalchemy import Integer, Text, cast

    table = StoreMeta.__table__
    insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
    conn.execute(insert(table).values(key=CHANGE_SEQ_KEY, value="0").on_conflict_do_nothing(index_elements=["key"]))
    conn.execute(update(table).where(table.c.key == CHANGE_SEQ_KEY)
                 .values(value=cast(cast(table.c.value, Integer) + 1, Text)))
    return int(conn.scalar(select(table.c.value).where(table.c.key == CHANGE_SEQ_KEY)))


def current_change_seq(conn) -> int:
    """The last write counter handed out and committed (0: none yet)."""
    table = StoreMeta.__table__
    value = conn.scalar(select(table.c.value).where(table.c.key == CHANGE_SEQ_KEY))
    return int(value) if value is not None else 0


@lru_cache(maxsize=2)
def _job_upsert_sql(mark: str) -> str:
    # Merge, never erase: an epilog event knows less than sacct and may arrive later.
    columns = ", ".join(JOB_COLUMNS + ("change_seq",))
    merge = ", ".join([f"{c} = coalesce(excluded.{c}, job_records.{c})" for c in JOB_COLUMNS
                       if c not in ("cluster", "job_id")] + ["change_seq = excluded.change_seq"])
    marks = ", ".join([mark] * (len(JOB_COLUMNS) + 1))
    return (f"INSERT INTO job_records ({columns}) VALUES ({marks}) "
            f"ON CONFLICT (cluster, job_id) DO UPDATE SET {merge}")


@lru_cache(maxsize=2)
def _occurrence_insert_sql(mark: str) -> str:
    marks = ", ".join([mark] * len(_NEW_OCCURRENCE_COLUMNS))
    return f"INSERT INTO occurrences ({', '.join(_NEW_OCCURRENCE_COLUMNS)}) VALUES ({marks})"


def _times_by_fingerprint(failures, keys) -> dict[str, tuple[dt.datetime, dt.datetime]]:
    times: dict[str, tuple[dt.datetime, dt.datetime]] = {}
    for key, f, _, _ in failures:
        when = f.get("end_time") or f.get("start_time") or f.get("submit_time")
        if when is None:
            continue
        fp = keys[key].fingerprint
        first, last = times.get(fp, (when, when))
        times[fp] = (min(first, when), max(last, when))
    return times


def _chunks(items: list, size: int = CHUNK) -> Iterable[list]:
    for start in range(0, len(items), size):
        yield items[start:start + size]
