"""One store: a database holding one scope's knowledge, kept at the current schema.

Opening a store checks its schema revision with one plain query. Only when it is
behind (a new store, or an older hpcmem created it) does it take a lock - a file lock
beside a SQLite file, an advisory lock on PostgreSQL - and run the Alembic upgrade, so
two processes opening a new store at the same moment cannot both migrate it.

A SQLite store that is not there is created only when its ``if_missing`` allows it (the
CLI decides per command, ``kb/store/stack.py``): a mistyped path is reported, not made,
and the default user store reads as empty (in memory) until something is stored in it.
A damaged, read-only or foreign file is one ``StoreError`` naming the store, and hpcmem
writes nothing to it.
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

# What Store.open does with a SQLite store file that is not there (``if_missing``):
CREATE = "create"  # create it and its directory (library default, `db upgrade`)
CREATE_FILE = "create-file"  # create the file, in a directory that must exist (a path the user named)
NOT_YET = "not-yet"  # read as an empty store, in memory: the default user store before anything was stored
REFUSE = "refuse"  # refuse: a store the user named that is not there (a typo?)

# SQLite's primary result codes for a file that is not a usable database, and for one
# this process may not write (or not open, when its WAL files cannot be made).
_SQLITE_DAMAGED = (11, 26)  # SQLITE_CORRUPT, SQLITE_NOTADB
_SQLITE_UNWRITABLE = (8, 10, 14)  # SQLITE_READONLY, SQLITE_IOERR, SQLITE_CANTOPEN
_DAMAGED_HINT = ("the file is damaged or is not an hpcmem store; hpcmem changed nothing: restore it from a "
                 "backup, or point the store's setting at the right file")


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
        if_missing: str = CREATE,
        leads: tuple[str, ...] = (),
    ) -> None:
        self.url = normalize_url(url)
        self.name = name
        self.scope = scope
        self.schema = schema
        # The users who may approve in a lab store, as its configuration names them: SQLite
        # cannot tell members from leads, so hpcmem keeps the rule (kb/lessons/curation.py).
        self.leads = tuple(leads)
        self.if_missing = if_missing
        self._journal_mode_setting = journal_mode
        self.journal_mode: str | None = None
        self.stand_in = False  # True: an empty in-memory store answers for a NOT_YET file
        # Where plain-SQL readers copy an empty store from, for a NOT_YET file (StoreReader).
        self.empty_template: Path | None = None
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
            path = None if self.stand_in else self.sqlite_path
            if path is None:
                url = "sqlite://" if self.stand_in else self.url
                engine = create_engine(url, poolclass=StaticPool, connect_args={"check_same_thread": False})
                self.journal_mode = "MEMORY"
            else:
                self.journal_mode = (self._journal_mode_setting or safe_journal_mode(path.parent)).upper()
                engine = create_engine(self.url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})

                @event.listens_for(engine, "handle_error")
                def _name_the_damaged_store(context):  # noqa: ANN001
                    # However deep a query found the damage, say which store it is, in one line.
                    damaged = self.refusal(context.original_exception, damaged_only=True)
                    if damaged is not None:
                        raise damaged
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
    def exists(self) -> bool:
        """False for a SQLite store whose file is not there (a server store: True).

        The directory is looked at first, so one this user may not search is named in the
        PermissionError rather than the file inside it."""
        path = self.sqlite_path
        return path is None or (path.parent.exists() and path.exists())

    def missing_error(self) -> StoreError:
        """What to say about a store that is not there and may not be created now."""
        if self.if_missing == NOT_YET:
            return StoreError(f"store '{self.name}' does not exist yet ({self.sqlite_path})",
                              hint="the first command that stores something (record, ingest, ...) creates it; "
                                   "`hpcmem db upgrade` creates it now")
        scope = {"user": "", "cluster": " --scope cluster"}.get(self.scope, f" --scope lab:{self.name}")
        return StoreError(f"store '{self.name}' does not exist at {self.sqlite_path}",
                          hint=f"check the path; `hpcmem db upgrade{scope}` (with the same settings) "
                               "creates a new store there")

    def check_file(self) -> None:
        """Refuse what cannot be a store file (a device, a directory) and, for a user store,
        a file or directory other users could reach."""
        path = self.sqlite_path
        if path is None or self.stand_in:
            return
        if path.exists() and not path.is_file():
            kind = "a directory" if path.is_dir() else "a device, pipe or socket"
            raise StoreError(f"store '{self.name}' at {path} is not a regular file ({kind})",
                             hint="point the store at a SQLite file, or at a new path in an existing directory")
        if self.scope == "user":
            check_private(path)

    def _prepare_sqlite_file(self) -> None:
        """Create the directory (when allowed) and file with modes that keep other users out."""
        path = self.sqlite_path
        if path is None:
            return
        mode_dir, mode_file = (0o700, 0o600) if self.scope == "user" else (0o2770, 0o660)
        if not path.parent.exists():
            if self.if_missing != CREATE:
                raise StoreError(f"cannot create store '{self.name}' at {path}: directory {path.parent} does not exist",
                                 hint="check the path; hpcmem creates a store file only in an existing directory")
            try:
                path.parent.mkdir(parents=True, mode=mode_dir)
                os.chmod(path.parent, mode_dir)  # mkdir's mode is filtered by the umask
            except FileExistsError:
                pass  # another process opening the same new store won the race
            except OSError as exc:
                raise StoreError(f"cannot create store directory {path.parent}: {exc.strerror}") from None
        self.check_file()  # a directory others can reach is refused before anything is made in it
        if not path.exists():
            try:
                fd = os.open(path, os.O_CREAT | os.O_WRONLY, mode_file)
                os.close(fd)
                os.chmod(path, mode_file)
            except OSError as exc:
                raise StoreError(f"cannot create store {path}: {exc.strerror}") from None

    def refusal(self, exc: BaseException, *, damaged_only: bool = False) -> StoreError | None:
        """One line naming this SQLite store when the driver says its file is damaged, not a
        database, or (unless ``damaged_only``) not writable here; None for anything else."""
        path = self.sqlite_path
        orig = getattr(exc, "orig", None) or exc
        code = getattr(orig, "sqlite_errorcode", None)
        if path is None or code is None:
            return None
        reason = _first_line(orig)
        if (code & 0xFF) in _SQLITE_DAMAGED:
            return StoreError(f"store '{self.name}' at {path} cannot be read: {reason}", hint=_DAMAGED_HINT)
        if damaged_only or (code & 0xFF) not in _SQLITE_UNWRITABLE:
            return None
        if not os.access(path, os.R_OK):
            return StoreError(f"store '{self.name}' at {path} cannot be read: permission denied",
                              hint=f"check the owner, group and mode of {path} (ls -l)")
        if not (os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)):
            return StoreError(f"store '{self.name}' at {path} is read-only for you ({reason})",
                              hint="hpcmem changed nothing; it needs write access to the file and its directory, "
                                   "even to read a store in WAL mode (ls -ld)")
        return None

    def _lock_path(self) -> Path:
        path = self.sqlite_path
        assert path is not None
        return path.with_name(path.name + ".lock")

    # -- schema --------------------------------------------------------------------
    def revision(self) -> str | None:
        """Current schema revision with one plain query (None for an empty database)."""
        from sqlalchemy import text
        from sqlalchemy.exc import DBAPIError

        try:
            with self.engine.connect() as conn:
                return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
        except DBAPIError as exc:
            if _is_missing_table(exc):
                return None
            raise self.refusal(exc) or StoreError(
                f"cannot reach store '{self.name}' at {self.display_url}: {_first_line(exc)}") from None

    def open(self, *, create: bool = True) -> "Store":
        """Make the store usable: create it if asked and ``if_missing`` allows, and bring its
        schema to head."""
        if self.stand_in or self.exists():
            self.check_file()
        elif create and self.if_missing in (CREATE, CREATE_FILE):
            self._prepare_sqlite_file()
        elif self.if_missing == NOT_YET:
            # Nothing stored yet: commands that only read see an empty store and create no file.
            self.dispose()
            self.stand_in = True
        else:
            raise self.missing_error()
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
        """Refuse a SQLite store file that is not there."""
        if not self.exists():
            raise self.missing_error()

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
                if before is None:
                    self._refuse_unversioned(conn)
                migrate.upgrade(conn, revision)
                if before is None and revision == "head":
                    # A new store: its fingerprints will all be computed under these rules,
                    # and its text redacted under these (kb/store/redaction_meta.py).
                    write_rules_digest(conn)
                    from hpcmem.kb.store.redaction_meta import write_redaction_digest

                    write_redaction_digest(conn)
                if self.stand_in:
                    # The id vector indexes know a store by (recall.vector_index.STORE_ID_KEY): a stable
                    # one, so recalls before the first record do not each leave an index lock file.
                    import uuid

                    from sqlalchemy import text

                    conn.execute(text("INSERT INTO store_meta (key, value) VALUES ('store_id', :v)"),
                                 {"v": str(uuid.uuid5(uuid.NAMESPACE_URL, self.display_url))})

    def _refuse_unversioned(self, conn) -> None:  # noqa: ANN001 - a Connection
        """A database with tables but no alembic_version is not a new store: migrating it
        would fail halfway (``table ... already exists``) or mix hpcmem's tables into another's."""
        from sqlalchemy import inspect

        from hpcmem.kb.store.access import ALL_TABLES

        tables = sorted(set(inspect(conn).get_table_names()) - {"alembic_version"})  # left empty by `db downgrade base`
        if self.dialect != "sqlite":  # a server schema may be shared: only hpcmem's own tables count
            tables = [t for t in tables if t in ALL_TABLES]
        if tables:
            where = self.sqlite_path or self.display_url
            raise StoreError(
                f"store '{self.name}' at {where} has tables ({', '.join(tables[:3])}"
                f"{', ...' if len(tables) > 3 else ''}) but no schema version (alembic_version)",
                hint="hpcmem changed nothing. Either hpcmem did not make this database or its version table was "
                     "lost: restore the store from a backup, or point the store's setting at an hpcmem store")

    def downgrade(self, revision: str) -> None:
        from hpcmem.kb.store import migrate

        with self._migration_lock():
            with self.engine.begin() as conn:
                migrate.downgrade(conn, revision)

    @contextmanager
    def _migration_lock(self) -> Iterator[None]:
        if self.sqlite_path is not None and not self.stand_in:
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
            if probe_only and not self.exists():
                return StoreInfo(self.name, self.scope, self.display_url, False, None, SCHEMA_HEAD,
                                 filesystem=fs, error=str(self.missing_error()))
        try:
            self.check_file()
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
