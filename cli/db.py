"""`hpcmem db upgrade | downgrade | current | history`: schema migrations of one store."""

from __future__ import annotations

import typer

from hpcmem.cli._output import emit_json, stdout
from hpcmem.cli._state import STATE

app = typer.Typer(help="Inspect and migrate a store's schema.", no_args_is_help=True)

SCOPE_HELP = "Which store: user, lab:NAME or cluster."


@app.command("upgrade")
def db_upgrade(
    scope: str = typer.Option("user", "--scope", help=SCOPE_HELP),
    revision: str = typer.Argument("head", help="Target revision."),
) -> None:
    """Upgrade a store's schema (creating the store if needed)."""
    store = STATE.stack.by_scope(scope)
    before = None if store.sqlite_path and not store.sqlite_path.exists() else store.revision()
    store.open()
    if revision != "head":
        store.upgrade(revision)
    typer.echo(f"{store.name}: {before or 'empty'} -> {store.revision()}", err=True)


@app.command("downgrade")
def db_downgrade(
    revision: str = typer.Argument(..., help="Target revision, or 'base' to drop every table."),
    scope: str = typer.Option("user", "--scope", help=SCOPE_HELP),
    yes: bool = typer.Option(False, "--yes", help="Confirm; a downgrade can drop data."),
) -> None:
    """Downgrade a store's schema (destructive; needs --yes)."""
    from hpcmem.kb.errors import InputError

    if not yes:
        raise InputError("a downgrade can drop data; repeat with --yes to confirm")
    store = STATE.stack.by_scope(scope)
    before = store.revision()
    store.downgrade(revision)
    typer.echo(f"{store.name}: {before} -> {store.revision() or 'base'}", err=True)


@app.command("current")
def db_current(
    scope: str = typer.Option("user", "--scope", help=SCOPE_HELP),
    json_: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Show a store's schema revision and the revision this hpcmem expects."""
    from hpcmem.kb.schema_version import SCHEMA_HEAD

    store = STATE.stack.by_scope(scope)
    info = store.info()
    if not info.reachable and info.error != "does not exist yet":
        from hpcmem.kb.errors import StoreError

        raise StoreError(info.error or f"store '{store.name}' is unreachable")
    data = {"store": store.name, "revision": info.revision, "head": SCHEMA_HEAD, "up_to_date": info.revision == SCHEMA_HEAD}
    if json_:
        emit_json(data)
    else:
        state = "up to date" if data["up_to_date"] else "behind"
        stdout.print(f"{store.name}: {info.revision or 'empty'} (head {SCHEMA_HEAD}, {state})", highlight=False)


@app.command("history")
def db_history(json_: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """List the schema revisions this hpcmem ships, newest first."""
    from hpcmem.kb import migrate

    revisions = migrate.history()
    if json_:
        emit_json(revisions)
        return
    from rich.table import Table

    table = Table("revision", "down", "description")
    for rev in revisions:
        table.add_row(rev["revision"], rev["down_revision"] or "-", rev["message"])
    stdout.print(table)


# `db grant` lives with the other access-control code; same group.
from hpcmem.cli.access import db_grant  # noqa: E402

app.command("grant")(db_grant)
