"""`hpcmem db grant`: PostgreSQL roles and grants that guard a lab or cluster store."""

from __future__ import annotations

from typing import Optional

import typer

from hpcmem.cli._output import stdout
from hpcmem.cli._state import STATE


def db_grant(
    scope: str = typer.Option(..., "--scope", help="The shared store to protect: lab:NAME or cluster."),
    readers: Optional[str] = typer.Option(None, "--readers", help="Role that may only read (default hpcmem_<lab>_read)."),
    members: Optional[str] = typer.Option(None, "--members", help="Role that may propose lessons (lab only; default hpcmem_<lab>_member)."),
    leads: Optional[str] = typer.Option(None, "--leads", "--admins", help="Role that approves (lab leads) or writes (cluster admins)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the SQL instead of running it."),
) -> None:
    """Create the store's group roles and grant them what the scope allows (run as the schema owner)."""
    from dataclasses import replace

    from hpcmem.kb.store.access import default_roles, grant_statements, setup_pg_roles
    from hpcmem.kb.errors import InputError

    store = STATE.stack.by_scope(scope)
    if store.dialect != "postgresql":
        raise InputError(f"store '{store.name}' is {store.dialect}: roles and grants apply to PostgreSQL stores",
                         hint="SQLite stores are protected by file owner, group and mode (docs/deployment.md)")
    if not store.schema:
        raise InputError(f"store '{store.name}' has no PostgreSQL schema",
                         hint="give each shared store its own schema (stores.labs.NAME.schema) before granting")
    plan = default_roles(scope, store.schema)
    plan = replace(plan, readers=readers or plan.readers, leads=leads or plan.leads,
                   members=members if members is not None else plan.members)
    if dry_run:
        for statement in grant_statements(plan):
            stdout.print(statement + ";", highlight=False)
        return
    store.open()  # the tables must exist before they can be granted
    statements = setup_pg_roles(store.url, plan.schema, lab_or_cluster=plan.scope, readers_role=plan.readers,
                                members_role=plan.members, leads_role=plan.leads)
    roles = ", ".join(r for r in (plan.readers, plan.members, plan.leads) if r)
    typer.echo(f"{store.name}: applied {len(statements)} statements to schema {plan.schema} (roles: {roles})", err=True)
