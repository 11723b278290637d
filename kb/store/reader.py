"""Read-only access to a store with plain DB-API queries, for the recall hot path.

Agents call ``hpcmem recall`` before every resubmission, so its start-up cost matters:
importing SQLAlchemy's ORM alone costs about a quarter of a second, more than the whole
lookup. Recall therefore reads through the standard library's ``sqlite3`` (or psycopg for
PostgreSQL stores) with a handful of plain SQL statements against the schema that
``kb/store/models.py`` defines. Anything that writes or migrates still goes through ``Store``;
a store whose schema is behind is handed to ``Store.open()`` first.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any, Iterable

from hpcmem.kb.errors import StoreError
from hpcmem.kb.store.schema_version import SCHEMA_HEAD

LESSON_COLUMNS = (
    "id", "signature_id", "fingerprint", "scope", "scope_name", "context", "cause", "fix", "excerpt", "actions", "status",
    "status_reason", "confidence", "confirmations", "contradictions", "source", "author", "safety_flags",
    "created_at", "updated_at", "last_confirmed_at", "valid_until", "previous_status", "job_context",
)
SIGNATURE_COLUMNS = ("id", "fingerprint", "category", "template", "first_seen", "last_seen", "count")
# What recall's advice reads about a stored failure (a subset: the rest is never shown).
OCCURRENCE_COLUMNS = (
    "id", "signature_id", "cluster", "job_id", "job_name", "user_name", "account", "partition", "state", "exit_code",
    "exit_signal", "failed_step", "req_mem_mb", "req_cpus", "req_time_s", "req_gres", "max_rss_mb", "elapsed_s",
    "work_dir", "submit_line", "modules", "message", "log_excerpt", "end_time", "qos", "req_nodes", "constraints",
    "job_context",
)
# These lists are checked against kb/store/models.py by tests/kb/store/test_reader_columns.py, so a
# column added to or dropped from the models cannot silently go missing from recall.
_JSON_COLUMNS = ("actions", "safety_flags", "job_context")
_TIME_COLUMNS = ("created_at", "updated_at", "last_confirmed_at", "valid_until", "first_seen", "last_seen")


def _parse_time(value: Any) -> dt.datetime | None:
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)
    return dt.datetime.fromisoformat(str(value)).replace(tzinfo=dt.timezone.utc)


@dataclass
class StoreReader:
    """A read-mostly connection to one store of the stack."""

    name: str
    scope: str
    conn: Any
    dialect: str
    # An in-memory copy of an empty store, answering for a store not created yet: it holds
    # nothing, and no other connection (the ORM's, a vector index's) can see it.
    empty_copy: bool = False

    # -- opening ----------------------------------------------------------------------
    @classmethod
    def open(cls, store, connect_timeout: float = 5.0) -> "StoreReader":  # noqa: ANN001 - a hpcmem.kb.store.database.Store
        """Connect without SQLAlchemy; migrate through ``Store`` only when behind."""
        reader = cls._connect(store, connect_timeout)
        try:
            revision = reader.revision()
        except StoreError as exc:
            reader.close()
            # A damaged file is often found only by the first query: name the store and why.
            raise store.refusal(exc.__cause__) or exc from None
        except Exception:
            reader.close()
            raise
        if revision != SCHEMA_HEAD:
            reader.close()
            store.open()  # creates or migrates (imports SQLAlchemy and Alembic: rare)
            store.dispose()
            reader = cls._connect(store, connect_timeout)
        return reader

    @classmethod
    def _connect(cls, store, connect_timeout: float = 5.0) -> "StoreReader":  # noqa: ANN001
        if store.dialect == "sqlite":
            import sqlite3

            path = store.sqlite_path
            if path is None:
                raise StoreError(f"store '{store.name}' is in memory; recall needs a file or a server")
            try:
                exists = store.exists()
            except PermissionError as exc:  # a directory this user may not search: not their store
                from hpcmem.kb.store.access import as_permission_denied

                raise as_permission_denied(exc) from None
            from hpcmem.kb.store.database import NOT_YET  # the module that made ``store``

            if not exists and store.if_missing == NOT_YET and store.empty_template is not None:
                # The default store before the first write: an in-memory copy of an empty store,
                # not a migration in memory on every read (Alembic and the ORM: about 0.5 s).
                return cls(store.name, store.scope, _empty_copy(store), "sqlite", empty_copy=True)
            if not exists:
                store.open()  # creates it (and its schema) when this command may, else says it is missing
                if store.stand_in:  # the default store before the first write: read its empty in-memory copy
                    return cls(store.name, store.scope, store.engine.raw_connection().driver_connection, "sqlite")
                store.dispose()
            store.check_file()
            try:
                conn = sqlite3.connect(str(path), timeout=30)
                conn.execute("PRAGMA busy_timeout = 30000")
                # In WAL mode NORMAL is crash-safe and spares the fsync of recall's small
                # evidence insert (DELETE mode keeps its default).
                if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal":
                    conn.execute("PRAGMA synchronous = NORMAL")
            except sqlite3.Error as exc:
                raise store.refusal(exc) or StoreError(f"cannot open store '{store.name}' at {path}: {exc}") from None
            return cls(store.name, store.scope, conn, "sqlite")
        if store.dialect == "postgresql":
            import psycopg

            url = store.url.replace("postgresql+psycopg://", "postgresql://", 1)
            try:
                conn = psycopg.connect(url, connect_timeout=max(2, round(connect_timeout)), autocommit=True)
                if store.schema:
                    conn.execute(f'SET search_path TO "{store.schema}"')
            except psycopg.Error as exc:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise StoreError(f"cannot reach store '{store.name}' at {store.display_url}: {first}") from None
            return cls(store.name, store.scope, conn, "postgresql")
        raise StoreError(f"unsupported store backend '{store.dialect}'")

    def close(self) -> None:
        try:
            self.conn.close()
        except Exception:  # noqa: BLE001 - closing is best effort
            pass

    # -- plumbing ---------------------------------------------------------------------
    def _sql(self, sql: str) -> str:
        return sql.replace("?", "%s") if self.dialect == "postgresql" else sql

    def query(self, sql: str, params: Iterable[Any] = ()) -> list[tuple]:
        cur = self.conn.execute(self._sql(sql), tuple(params))
        return cur.fetchall()

    def execute(self, sql: str, params: Iterable[Any] = ()) -> None:
        self.conn.execute(self._sql(sql), tuple(params))
        if self.dialect == "sqlite":
            self.conn.commit()

    def revision(self) -> str | None:
        try:
            rows = self.query("SELECT version_num FROM alembic_version")
        except Exception as exc:  # noqa: BLE001 - both drivers: a missing table means "empty"
            if "alembic_version" in str(exc) or "no such table" in str(exc):
                return None
            raise StoreError(f"cannot read store '{self.name}': {exc}") from exc
        return rows[0][0] if rows else None

    @staticmethod
    def _placeholders(n: int) -> str:
        return ", ".join("?" * n)

    def _rows(self, columns: tuple[str, ...], rows: list[tuple]) -> list[dict[str, Any]]:
        out = []
        for row in rows:
            record = dict(zip(columns, row))
            for key in _JSON_COLUMNS:
                if key in record and isinstance(record[key], str):
                    record[key] = json.loads(record[key])
            for key in _TIME_COLUMNS:
                if key in record:
                    record[key] = _parse_time(record[key])
            out.append(record)
        return out

    # -- lookups used by recall ----------------------------------------------------------
    def signature_by_fingerprint(self, fingerprint: str) -> dict[str, Any] | None:
        rows = self.query(f"SELECT {', '.join(SIGNATURE_COLUMNS)} FROM signatures WHERE fingerprint = ?", [fingerprint])
        found = self._rows(SIGNATURE_COLUMNS, rows)
        return found[0] if found else None

    def signatures_by_ids(self, ids: list[int]) -> dict[int, dict[str, Any]]:
        if not ids:
            return {}
        rows = self.query(
            f"SELECT {', '.join(SIGNATURE_COLUMNS)} FROM signatures WHERE id IN ({self._placeholders(len(ids))})", ids
        )
        return {r["id"]: r for r in self._rows(SIGNATURE_COLUMNS, rows)}

    def lessons_for_signatures(self, signature_ids: list[int], *, include_expired: bool = False) -> list[dict[str, Any]]:
        if not signature_ids:
            return []
        hidden = ("rejected",) if include_expired else ("rejected", "expired")
        rows = self.query(
            f"SELECT {', '.join('l.' + c for c in LESSON_COLUMNS)} FROM lessons l "
            f"WHERE l.signature_id IN ({self._placeholders(len(signature_ids))}) "
            f"AND l.status NOT IN ({self._placeholders(len(hidden))})",
            [*signature_ids, *hidden],
        )
        return self._attach(self._rows(LESSON_COLUMNS, rows))

    def lessons_for_fingerprint(self, fingerprint: str, *, include_expired: bool = False) -> list[dict[str, Any]]:
        hidden = ("rejected",) if include_expired else ("rejected", "expired")
        rows = self.query(
            f"SELECT {', '.join(LESSON_COLUMNS)} FROM lessons WHERE fingerprint = ? "
            f"AND status NOT IN ({self._placeholders(len(hidden))})",
            [fingerprint, *hidden],
        )
        return self._attach(self._rows(LESSON_COLUMNS, rows))

    def lessons_for_alias(self, fingerprint: str, *, include_expired: bool = False) -> list[dict[str, Any]]:
        """Lessons that learnt this fingerprint as an alias (a confirmed variant)."""
        hidden = ("rejected",) if include_expired else ("rejected", "expired")
        rows = self.query(
            f"SELECT {', '.join('l.' + c for c in LESSON_COLUMNS)} FROM lessons l "
            "WHERE l.id IN (SELECT a.lesson_id FROM lesson_aliases a WHERE a.fingerprint = ?) "
            f"AND l.status NOT IN ({self._placeholders(len(hidden))})",
            [fingerprint, *hidden],
        )
        return self._attach(self._rows(LESSON_COLUMNS, rows))

    def lesson_texts(self, limit: int, *, include_expired: bool = False) -> list[tuple[str, str, str, str | None]]:
        """(lesson id, decisive template, category, excerpt) of the newest visible lessons:
        what the lexical candidate scan reads. Ordered, so a truncated scan is deterministic."""
        hidden = ("rejected",) if include_expired else ("rejected", "expired")
        return [tuple(r) for r in self.query(
            "SELECT l.id, s.template, s.category, l.excerpt FROM lessons l JOIN signatures s ON s.id = l.signature_id "
            f"WHERE l.status NOT IN ({self._placeholders(len(hidden))}) ORDER BY l.updated_at DESC, l.id LIMIT ?",
            [*hidden, limit],
        )]

    def lessons_by_ids(self, ids: list[str]) -> list[dict[str, Any]]:
        if not ids:
            return []
        rows = self.query(
            f"SELECT {', '.join(LESSON_COLUMNS)} FROM lessons WHERE id IN ({self._placeholders(len(ids))})", ids
        )
        return self._attach(self._rows(LESSON_COLUMNS, rows))

    def _attach(self, lessons: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Conditions and evidence of each lesson, two queries for all of them."""
        if not lessons:
            return lessons
        ids = [l["id"] for l in lessons]
        marks = self._placeholders(len(ids))
        conditions: dict[str, list] = {i: [] for i in ids}
        for lesson_id, kind, name, value, op in self.query(
            f"SELECT lesson_id, kind, name, value, op FROM lesson_conditions WHERE lesson_id IN ({marks}) ORDER BY id", ids
        ):
            conditions[lesson_id].append({"kind": kind, "name": name, "value": value, "op": op})
        evidence: dict[str, list] = {i: [] for i in ids}
        for lesson_id, kind, job_id, occurrence_id in self.query(
            f"SELECT lesson_id, kind, job_id, occurrence_id FROM lesson_evidence WHERE lesson_id IN ({marks}) ORDER BY id", ids
        ):
            evidence[lesson_id].append({"kind": kind, "job_id": job_id, "occurrence_id": occurrence_id})
        aliases: dict[str, list] = {i: [] for i in ids}
        for lesson_id, fingerprint, template, category, excerpt in self.query(
            f"SELECT lesson_id, fingerprint, template, category, excerpt FROM lesson_aliases "
            f"WHERE lesson_id IN ({marks}) ORDER BY id", ids
        ):
            aliases[lesson_id].append({"fingerprint": fingerprint, "template": template, "category": category,
                                       "excerpt": excerpt})
        signatures: dict[int, tuple[str, str]] = {}
        sig_ids = sorted({l["signature_id"] for l in lessons if l.get("signature_id") is not None})
        if sig_ids:
            for sid, template, category in self.query(
                f"SELECT id, template, category FROM signatures WHERE id IN ({self._placeholders(len(sig_ids))})",
                sig_ids,
            ):
                signatures[sid] = (template, category)
        for lesson in lessons:
            lesson["conditions"] = conditions[lesson["id"]]
            lesson["evidence"] = evidence[lesson["id"]]
            lesson["aliases"] = aliases[lesson["id"]]
            lesson["template"], lesson["category"] = signatures.get(lesson.get("signature_id"), ("", "unknown"))
        return lessons

    def latest_environment(self, cluster: str | None = None) -> dict[str, Any] | None:
        """The newest environment snapshot as ``EnvSnapshot.to_json``'s parts (partitions,
        modules, nodes, qos, associations, default_accounts: empty when it has none) plus its
        id, taken_at (UTC), source and content_hash, or None: what built-in advice and
        ``hpcmem check`` test a request against."""
        sql = "SELECT id, taken_at, source, content_hash, partitions, modules, site FROM env_snapshots"
        params: list[Any] = []
        if cluster:
            sql += " WHERE cluster = ?"
            params.append(cluster)
        rows = self.query(sql + " ORDER BY taken_at DESC, id DESC LIMIT 1", params)
        if not rows:
            return None
        snapshot_id, taken_at, source, content_hash, *documents = rows[0]
        partitions, modules, site = (json.loads(v) if isinstance(v, str) else v for v in documents)
        site = site or {}
        return {"id": snapshot_id, "taken_at": _parse_time(taken_at), "source": source, "content_hash": content_hash,
                "partitions": partitions or {}, "modules": modules or {}, "nodes": site.get("nodes") or {},
                "qos": site.get("qos") or {}, "associations": site.get("associations") or [],
                "default_accounts": site.get("default_accounts") or {}}

    def job_history(self, *, user: str, job_name: str, work_dir: str | None = None, cluster: str | None = None,
                    limit: int = 50) -> list[dict[str, Any]]:
        """The user's recent jobs of one name (and directory, when known), newest first: what
        they asked, how they ended. Built-in advice reads a job's earlier failed requests and
        the successes of the same script from it."""
        sql = ("SELECT job_id, state, failed, req_mem_mb, req_time_s, max_rss_mb, elapsed_s, partition "
               "FROM job_records WHERE user_name = ? AND job_name = ?")
        params: list[Any] = [user, job_name]
        for column, value in (("work_dir", work_dir), ("cluster", cluster)):
            if value:
                sql += f" AND {column} = ?"
                params.append(value)
        columns = ("job_id", "state", "failed", "req_mem_mb", "req_time_s", "max_rss_mb", "elapsed_s", "partition")
        rows = self.query(sql + f" ORDER BY submit_time DESC LIMIT {int(limit)}", params)
        return [dict(zip(columns, row)) for row in rows]

    def occurrence_for_job(self, job_id: str, cluster: str | None = None) -> dict[str, Any] | None:
        columns = OCCURRENCE_COLUMNS
        sql = f"SELECT {', '.join(columns)} FROM occurrences WHERE job_id = ?"
        params: list[Any] = [job_id]
        if cluster:
            sql += " AND cluster = ?"
            params.append(cluster)
        rows = self.query(sql + " ORDER BY id DESC", params)
        if not rows:
            return None
        record = dict(zip(columns, rows[0]))
        for key in ("modules", "job_context"):
            if isinstance(record[key], str):
                record[key] = json.loads(record[key])
        return record

    def lesson_signatures_without_vectors(self, model_id: str) -> int:
        """How many signatures that carry a lesson have no vector from this model yet."""
        rows = self.query(
            "SELECT count(*) FROM signatures s WHERE (s.embedding IS NULL OR s.embedding_model IS NULL "
            "OR s.embedding_model <> ?) AND EXISTS (SELECT 1 FROM lessons l WHERE l.signature_id = s.id)",
            [model_id],
        )
        return int(rows[0][0])

    # -- the vector cache (query_vectors, and signatures' own vectors) -------------------
    def cached_vectors(self, keys: list[str], model_id: str) -> dict[str, bytes]:
        """Stored vectors by text hash (``embed.template_hash``): cached queries first, then
        signatures embedded under the same model. Plain SQL: no SQLAlchemy on this path."""
        if not keys:
            return {}
        marks = self._placeholders(len(keys))
        found = dict(self.query(f"SELECT template_hash, vector FROM query_vectors WHERE model = ? "
                                f"AND template_hash IN ({marks})", [model_id, *keys]))
        rest = [k for k in keys if k not in found]
        if rest:
            rows = self.query(f"SELECT embedding_hash, embedding FROM signatures WHERE embedding_model = ? "
                              f"AND embedding IS NOT NULL AND embedding_hash IN ({self._placeholders(len(rest))})",
                              [model_id, *rest])
            for key, blob in rows:
                found.setdefault(key, blob)
        return {k: bytes(v) for k, v in found.items()}

    def cache_vectors(self, rows: list[tuple[str, str, bytes]]) -> None:
        """Remember (hash, model, vector) rows; a row already there is kept."""
        if not rows:
            return
        from hpcmem.kb.store.sqlwrite import time_binder

        now = time_binder(self.dialect)(dt.datetime.now(dt.timezone.utc))  # as UTCDateTime stores it
        rows = [(*row, now) for row in rows]
        sql = self._sql("INSERT INTO query_vectors (template_hash, model, vector, created_at) VALUES (?, ?, ?, ?) "
                        "ON CONFLICT (template_hash) DO NOTHING")
        if self.dialect == "sqlite":
            with self.conn:
                self.conn.executemany(sql, rows)
        else:
            with self.conn.cursor() as cur:
                cur.executemany(sql, rows)

    def meta(self, key: str) -> str | None:
        rows = self.query("SELECT value FROM store_meta WHERE key = ?", [key])
        return rows[0][0] if rows else None


def _empty_copy(store):  # noqa: ANN001 - a hpcmem.kb.store.database.Store
    """A new in-memory database holding an empty store at today's schema, copied from a template
    kept in the cache (made once per schema and rules; a cache file, not a store)."""
    import sqlite3
    import uuid

    from hpcmem.kb.signatures.rules_digest import DIGEST_KEY, current_digest

    template = store.empty_template
    if not template.exists():
        _make_template(template, store.name)
    source = sqlite3.connect(f"file:{template}?mode=ro", uri=True)
    try:
        copy = sqlite3.connect(":memory:", check_same_thread=False)
        source.backup(copy)
    finally:
        source.close()
    # As the stand-in store says: today's rules, and a stable id for the vector indexes.
    copy.executemany("INSERT OR REPLACE INTO store_meta (key, value) VALUES (?, ?)",
                     [(DIGEST_KEY, current_digest()),
                      ("store_id", str(uuid.uuid5(uuid.NAMESPACE_URL, store.display_url)))])
    copy.commit()
    return copy


def _make_template(template, name: str) -> None:  # noqa: ANN001 - a Path
    """Migrate a new store beside the template, then move it into place in one rename, so a
    reader never sees half a template."""
    import os

    from hpcmem.kb.store.database import Store

    template.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    partial = template.with_name(f"{template.name}.{os.getpid()}.partial")
    built = Store(f"sqlite:///{partial}", name=name, scope="user", journal_mode="delete")  # one file
    try:
        built.open()
    finally:
        built.dispose()
    os.replace(partial, template)
    for leftover in partial.parent.glob(f"{partial.name}*"):  # the migration's lock file
        leftover.unlink(missing_ok=True)


def newest_environment(readers, cluster: str | None) -> dict[str, Any] | None:  # noqa: ANN001 - StoreReaders
    """The newest environment snapshot with partitions among ``readers``' stores (a site keeps
    them in the cluster store, a user may take their own), with ``store`` naming where it was.
    A store that cannot answer is skipped: advice and checks are best effort across the stack."""
    newest = None
    for reader in readers:
        try:
            found = reader.latest_environment(cluster)
        except Exception:  # noqa: BLE001 - an old or damaged shared store must not stop the others
            continue
        if not found or not found.get("partitions"):
            continue
        if newest is None or _utc(found.get("taken_at")) > _utc(newest.get("taken_at")):
            newest = {**found, "store": reader.name}
    return newest


def _utc(value: Any):
    import datetime as dt

    if value is None:
        return dt.datetime.min.replace(tzinfo=dt.timezone.utc)
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    return value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)

