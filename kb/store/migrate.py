"""Alembic, driven programmatically on a connection the store already holds.

Imported only when a store is behind (or for `hpcmem db ...`), never on the recall path
of an up-to-date store.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy.engine import Connection

from hpcmem.kb.errors import InputError

MIGRATIONS_DIR = Path(__file__).with_name("migrations")


def alembic_config(connection: Connection | None = None) -> AlembicConfig:
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["connection"] = connection
    return cfg


def upgrade(connection: Connection, revision: str = "head") -> None:
    _run(command.upgrade, connection, revision)


def downgrade(connection: Connection, revision: str) -> None:
    _run(command.downgrade, connection, revision)


def _run(step, connection: Connection, revision: str) -> None:
    """An unknown or unreachable revision is the caller's input to fix, not a crash."""
    try:
        step(alembic_config(connection), revision)
    except CommandError as exc:
        raise InputError(f"schema revision {revision!r}: {exc}",
                         hint="`hpcmem db history` lists the revisions this hpcmem knows") from None


def current(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


def heads() -> list[str]:
    return list(ScriptDirectory.from_config(alembic_config()).get_heads())


def history() -> list[dict[str, str | None]]:
    """Revisions from newest to oldest."""
    script = ScriptDirectory.from_config(alembic_config())
    return [
        {"revision": rev.revision, "down_revision": rev.down_revision, "message": rev.doc}
        for rev in script.walk_revisions()
    ]
