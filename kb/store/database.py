"""One store: a database holding one scope's knowledge, kept at the current schema.

Opening a store checks its schema revision with one plain query. Only when it is
behind (a new store, or an older hpcmem created it) does it take a lock - a file lock
beside a SQLite file, an advisory lock on PostgreSQL - and run the Alembic upgrade, so
two processes opening a new store at the same moment cannot both migrate it.
"""

from __future__ import annotations

import os
import stat
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from hpcmem.kb.errors import StoreError
from hpcmem.kb.store.fsinfo import filesystem_type, safe_journal_mode
from hpcmem.kb.store.schema_version import ALL_REVISIONS, SCHEMA_HEAD

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine
    from sqlalchemy.orm import Session, sessionmaker

# SQLAlchemy is imported inside the methods that need it: the recall hot path builds
# Store objects only to read their URL and hands them to plain DB-API readers.

# Seconds a writer waits for SQLite's lock before giving up (epilog drains, lab stores).
SQLITE_BUSY_TIMEOUT_MS = 30_000
# Arbitrary but fixed key for pg_advisory_lock around migrations.
PG_MIGRATION_LOCK_KEY = 0x68706D656D  # "hpmem"


def normalize_url(url: str) -> str:
    """Accept plain paths and libpq-style URLs; always use the psycopg 3 driver."""
    url = url.strip()
    if not url:
        raise StoreError("empty store URL")
    if "://" not in url:
        return f"sqlite:///{Path(url).expanduser().resolve()}"
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


def redact_url(url: str) -> str:
    """The URL without its password, for display and error messages."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if parts.password is None:
        return url
    netloc = f"{parts.username}:***@{parts.hostname or ''}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


@dataclass(frozen=True)
class StoreInfo:
    name: str
    scope: str
    url: str
    reachable: bool
    revision: str | None
    head: str
    journal_mode: str | None = None
    filesystem: str | None = None
    error: str | None = None

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "scope": self.scope,
            "url": self.url,
            "reachable": self.reachable,
            "schema_revision": self.revision,
            "schema_head": self.head,
            "up_to_date": self.revision == self.head,
            "journal_mode": self.journal_mode,
            "filesystem": self.filesystem,
            "error": self.error,
        }


class Store:
    """A lazily opened store; ``open()`` creates and migrates it when allowed."""

    def __init__(
        self,
        url: str,
        *,
        name: str = "user",
        scope: str = "user",
        schema: str | None = None,
        journal_mode: str | None = None,
    ) -> None:
        self.url = normalize_url(url)
        self.name = name
        self.scope = scope
        self.schema = schema
        self._journal_mode_setting = journal_mode
        self.journal_mode: str | None = None
        self._engine: "Engine | None" = None
        self._sessionmaker: "sessionmaker[Session] | None" = None
        scheme, sep, rest = self.url.partition("://")
        if not sep or not scheme:
            raise StoreError(f"invalid store URL '{redact_url(url)}'")
        self._backend = scheme.split("+", 1)[0]
        self._rest = rest

    # -- identity -----------------------------------------------------------------
    @property
    def dialect(self) -> str:
        return self._backend

    @property
    def sqlite_path(self) -> Path | None:
        if self.dialect != "sqlite":
            return None
        # sqlite:///relative.db, sqlite:////absolute.db, sqlite:// (memory)
        database = self._rest[1:] if self._rest.startswith("/") else self._rest
        database = database.split("?", 1)[0]
        if not database or database == ":memory:":
            return None
        return Path(database)

    @property
    def display_url(self) -> str:
        return redact_url(self.url)

    # -- engine -------------------------------------------------------------------
    def _create_engine(self) -> "Engine":
        from sqlalchemy import create_engine, event
        from sqlalchemy.pool import StaticPool

        if self.dialect == "sqlite":
            path = self.sqlite_path
            if path is None:
                engine = create_engine(self.url, poolclass=StaticPool, connect_args={"check_same_thread": False})
                self.journal_mode = "MEMORY"
            else:
                self.journal_mode = (self._journal_mode_setting or safe_journal_mode(path.parent)).upper()
                engine = create_engine(self.url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})
            journal = self.journal_mode

            @event.listens_for(engine, "connect")
            def _sqlite_pragmas(dbapi_conn, _record):  # noqa: ANN001
                cur = dbapi_conn.cursor()
                cur.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
                cur.execute("PRAGMA foreign_keys = ON")
                if journal != "MEMORY":
                    cur.execute(f"PRAGMA journal_mode = {journal}")
                    if journal == "WAL":
                        cur.execute("PRAGMA synchronous = NORMAL")
                cur.close()

            return engine
        if self.dialect == "postgresql":
            connect_args = {"connect_timeout": 5}
            if self.schema:
                connect_args["options"] = f"-csearch_path={self.schema}"
            return create_engine(self.url, connect_args=connect_args, pool_pre_ping=True)
        raise StoreError(f"unsupported store backend '{self.dialect}' in {self.display_url}: use sqlite or postgresql")

    @property
    def engine(self) -> "Engine":
        if self._engine is None:
            self._engine = self._create_engine()
        return self._engine

    def session(self) -> "Session":
        from sqlalchemy.orm import sessionmaker

        if self._sessionmaker is None:
            self._sessionmaker = sessionmaker(self.engine, expire_on_commit=False)
        return self._sessionmaker()

    @contextmanager
    def transaction(self) -> Iterator["Session"]:
        """A session that commits on success and rolls back on any error."""
        with self.session() as session, session.begin():
            yield session

    def dispose(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None
            self._sessionmaker = None

    # -- files ---------------------------------------------------------------------
    def _prepare_sqlite_file(self) -> None:
        """Create the directory and file with modes that keep other users out."""
        path = self.sqlite_path
        if path is None:
            return
        mode_dir, mode_file = (0o700, 0o600) if self.scope == "user" else (0o2770, 0o660)
        if not path.parent.exists():
            try:
                path.parent.mkdir(parents=True, mode=mode_dir)
                os.chmod(path.parent, mode_dir)  # mkdir's mode is filtered by the umask
            except FileExistsError:
                pass  # another process opening the same new store won the race
            except OSError as exc:
                raise StoreError(f"cannot create store directory {path.parent}: {exc.strerror}") from None
        if not path.exists():
            try:
                fd = os.open(path, os.O_CREAT | os.O_WRONLY, mode_file)
                os.close(fd)
                os.chmod(path, mode_file)
            except OSError as exc:
                raise StoreError(f"cannot create store {path}: {exc.strerror}") from None

    def _lock_path(self) -> Path:
        path = self.sqlite_path
        assert path is not None
        return path.with_name(path.name + ".lock")

    # -- schema --------------------------------------------------------------------
    def revision(self) -> str | None:
        """Current schema revision with one plain query (None for an empty database)."""
        from sqlalchemy import text
        from sqlalchemy.exc import OperationalError, ProgrammingError

        try:
            with self.engine.connect() as conn:
                return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
        except (OperationalError, ProgrammingError) as exc:
            if _is_missing_table(exc):
                return None
            raise StoreError(f"cannot reach store '{self.name}' at {self.display_url}: {_first_line(exc)}") from None

    def open(self, *, create: bool = True) -> "Store":
        """Make the store usable: create it if allowed, and bring its schema to head."""
        if create:
            self._prepare_sqlite_file()
        if self.scope == "user" and self.sqlite_path is not None and self.sqlite_path.exists():
            check_private(self.sqlite_path)
        else:
            self.check_exists()
        if self.dialect == "postgresql" and self.schema:
            self._ensure_pg_schema()
        try:
            current = self.revision()
        except StoreError as exc:
            if self.sqlite_path is None or "database is locked" not in str(exc):
                raise
            # Another process is creating or migrating this new file right now: wait for its
            # migration lock below (upgrade re-reads the revision inside it).
            current = None
        if current == SCHEMA_HEAD:
            return self
        self._check_known(current)
        self.upgrade()
        return self

    def check_exists(self) -> None:
        """Refuse a SQLite store file that is not there (only a user store is created)."""
        if self.sqlite_path is not None and not self.sqlite_path.exists():
            raise StoreError(f"store '{self.name}' does not exist at {self.sqlite_path}")

    def _check_known(self, current: str | None) -> None:
        if current is not None and current not in ALL_REVISIONS:
            raise StoreError(
                f"store '{self.name}' has schema revision {current}, newer than this hpcmem knows "
                f"(head {SCHEMA_HEAD})",
                hint="upgrade hpcmem before using this store",
            )

    def _ensure_pg_schema(self) -> None:
        from sqlalchemy import text
        from sqlalchemy.exc import SQLAlchemyError

        try:
            with self.engine.begin() as conn:
                # Readers of a shared store may not CREATE: only create what is missing.
                exists = conn.execute(text("SELECT 1 FROM pg_namespace WHERE nspname = :s"), {"s": self.schema}).first()
                if exists is None:
                    conn.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"'))
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot reach store '{self.name}' at {self.display_url}: {_first_line(exc)}") from None

    def upgrade(self, revision: str = "head") -> None:
        """Run Alembic under a lock; re-check inside it, another process may have won."""
        from hpcmem.kb.store import migrate  # Alembic only when a migration is really needed

        with self._migration_lock():
            with self.engine.begin() as conn:
                before = migrate.current(conn)
                if revision == "head" and before == SCHEMA_HEAD:
                    return
                migrate.upgrade(conn, revision)
                if before is None and revision == "head":
                    # A new store: its fingerprints will all be computed under these rules.
                    write_rules_digest(conn)

    def downgrade(self, revision: str) -> None:
        from hpcmem.kb.store import migrate

        with self._migration_lock():
            with self.engine.begin() as conn:
                migrate.downgrade(conn, revision)

    @contextmanager
    def _migration_lock(self) -> Iterator[None]:
        if self.sqlite_path is not None:
            from filelock import FileLock, Timeout

            lock = FileLock(str(self._lock_path()), timeout=120, mode=0o600 if self.scope == "user" else 0o660)
            try:
                with lock:
                    yield
            except Timeout:
                raise StoreError(f"timed out waiting for the migration lock {self._lock_path()}") from None
        elif self.dialect == "postgresql":
            from sqlalchemy import text

            with self.engine.connect() as conn:
                conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": PG_MIGRATION_LOCK_KEY})
                conn.commit()
                try:
                    yield
                finally:
                    conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": PG_MIGRATION_LOCK_KEY})
                    conn.commit()
        else:
            yield

    # -- description ------------------------------------------------------------------
    def info(self, *, probe_only: bool = True) -> StoreInfo:
        """Reachability and schema revision, without creating anything when probing."""
        fs = None
        if self.sqlite_path is not None:
            fs = filesystem_type(self.sqlite_path.parent)
            if probe_only and not self.sqlite_path.exists():
                return StoreInfo(self.name, self.scope, self.display_url, False, None, SCHEMA_HEAD,
                                 filesystem=fs, error="does not exist yet")
        try:
            rev = self.revision()
        except StoreError as exc:
            return StoreInfo(self.name, self.scope, self.display_url, False, None, SCHEMA_HEAD,
                             filesystem=fs, error=str(exc))
        return StoreInfo(self.name, self.scope, self.display_url, True, rev, SCHEMA_HEAD,
                         journal_mode=self.journal_mode, filesystem=fs)


def _is_missing_table(exc: Exception) -> bool:
    message = str(exc).lower()
    return "no such table" in message or "does not exist" in message and "alembic_version" in message


def _first_line(exc: Exception) -> str:
    orig = getattr(exc, "orig", None) or exc
    return str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__


def check_private(path: Path) -> None:
    """Refuse a user store that other users could read or write."""
    for target in (path, path.parent):
        try:
            mode = target.stat().st_mode
        except FileNotFoundError:
            continue
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            from hpcmem.kb.errors import UnsafeStoreError

            raise UnsafeStoreError(
                f"user store {target} is accessible to other users (mode {stat.S_IMODE(mode):04o})",
                hint=f"run: chmod {'700' if target.is_dir() else '600'} {target}",
            )


def write_rules_digest(conn, digest: str | None = None) -> None:
    """Record in store_meta the digest of the fingerprint rules the store's fingerprints
    follow (``kb/signatures/rules_digest.py``), inside the caller's transaction (a Connection)."""
    from sqlalchemy import text

    from hpcmem.kb.signatures.rules_digest import DIGEST_KEY, current_digest

    conn.execute(
        text("INSERT INTO store_meta (key, value) VALUES (:k, :v) ON CONFLICT (key) DO UPDATE SET value = :v"),
        {"k": DIGEST_KEY, "v": digest or current_digest()},
    )
