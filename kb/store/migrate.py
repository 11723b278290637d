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
from sqlalchemy.engine import Connection

MIGRATIONS_DIR = Path(__file__).with_name("migrations")


def alembic_config(connection: Connection | None = None) -> AlembicConfig:
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["connection"] = connection
    return cfg


def upgrade(connection: Connection, revision: str = "head") -> None:
    command.upgrade(alembic_config(connection), revision)


def downgrade(connection: Connection, revision: str) -> None:
    command.downgrade(alembic_config(connection), revision)


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
