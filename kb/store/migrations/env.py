"""Alembic environment: always runs on a connection handed over by hpcmem.kb.store.migrate."""

from alembic import context

from hpcmem.kb.store.models import Base

config = context.config
connection = config.attributes.get("connection")
if connection is None:
    raise RuntimeError("hpcmem migrations run through `hpcmem db upgrade`, not the alembic CLI")

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    # SQLite cannot ALTER most things; batch mode rebuilds the table instead.
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
