"""Access control for PostgreSQL stores, enforced by the database rather than the client.

A lab or cluster store lives in its own PostgreSQL schema. ``grant_statements`` turns a
scope and three group roles into SQL; ``setup_pg_roles`` runs it as the schema's owner.

Lab scope (``hpcmem_<lab>_read`` < ``hpcmem_<lab>_member`` < ``hpcmem_<lab>_lead``; each
role is granted to the next, so a lead can do all a member can):

- readers SELECT every table and write nothing;
- members may also INSERT proposals: lessons with status 'candidate' (not claiming the
  'curated' source), their conditions and evidence, signatures and audit entries.
  They cannot UPDATE or DELETE lessons;
- leads may INSERT, UPDATE and DELETE lessons (approve, reject, edit, merge) and write the
  other data tables (occurrences, snapshots...).

Cluster scope has readers and admins only: nobody but an admin writes the cluster store.

Everyone: INSERT into audit_log at most (its triggers refuse UPDATE and DELETE even to the
owner); SELECT on alembic_version, which only the owner (who runs migrations) may change.

Why row-level security for the status rule: GRANT can restrict columns but not values,
and a policy ``FOR INSERT TO members WITH CHECK (status = 'candidate' ...)`` is evaluated
by the server for every row, whatever the client; rows that fail it are refused with
SQLSTATE 42501 (insufficient privilege), the same as a missing GRANT. RLS denies by default,
so a role without a policy sees no lessons even if someone grants it SELECT by mistake.
The table owner bypasses RLS (not FORCEd), which is what migrations and site admins need.

Only the standard library is imported at module level; psycopg is imported when applying.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hpcmem.kb.errors import InputError, PermissionDenied, StoreError

# Tables of the current schema, by what a writer may do with them. A test checks that
# every table of a freshly migrated store is in exactly one group.
LESSON_TABLES = ("lessons", "lesson_conditions", "lesson_evidence", "lesson_aliases")
PROPOSAL_TABLES = ("lesson_conditions", "lesson_evidence", "lesson_aliases", "signatures")  # + lessons under RLS
DATA_TABLES = ("signatures", "occurrences", "job_records", "env_snapshots", "recall_events",
               "query_vectors", "store_meta")
APPEND_ONLY_TABLES = ("audit_log",)
OWNER_ONLY_TABLES = ("alembic_version",)
ALL_TABLES = tuple(sorted(set(LESSON_TABLES + DATA_TABLES + APPEND_ONLY_TABLES + OWNER_ONLY_TABLES)))

# Lower-case SQL identifiers only: no quoting games with role or schema names.
_IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

# The databases' own answers: SQLSTATE 42501 insufficient_privilege and 25006
# read_only_sql_transaction; SQLite's primary result codes SQLITE_READONLY (8, a file or
# database this process may not write) and SQLITE_CANTOPEN (14).
_PG_DENIED_SQLSTATES = ("42501", "25006")
_SQLITE_DENIED_CODES = (8, 14)
_SQLITE_READONLY = 8


@dataclass(frozen=True)
class RolePlan:
    """The group roles that guard one store schema."""

    schema: str
    scope: str  # 'lab' or 'cluster'
    readers: str
    members: str | None  # None for the cluster scope: only admins write it
    leads: str  # the lab's leads, or the cluster's admins


def default_roles(scope: str, schema: str) -> RolePlan:
    """Conventional role names for ``lab:NAME`` or ``cluster``."""
    kind, _, name = scope.partition(":")
    if kind == "cluster" and not name:
        return RolePlan(schema, "cluster", "hpcmem_cluster_read", None, "hpcmem_cluster_admin")
    if kind == "lab" and name:
        base = f"hpcmem_{name.lower().replace('-', '_')}"
        return RolePlan(schema, "lab", f"{base}_read", f"{base}_member", f"{base}_lead")
    raise InputError(f"grants need a shared scope, lab:NAME or cluster (got '{scope}')",
                     hint="a user store is private: protect it with file modes, not roles")


def quote_ident(name: str) -> str:
    if not _IDENTIFIER.match(name or ""):
        raise InputError(f"invalid role or schema name '{name}': use lower-case letters, digits and _")
    return f'"{name}"'


def _validate(plan: RolePlan) -> None:
    if plan.scope not in ("lab", "cluster"):
        raise InputError(f"scope must be 'lab' or 'cluster', not '{plan.scope}'")
    if plan.scope == "lab" and not plan.members:
        raise InputError("a lab scope needs a members role")
    if plan.scope == "cluster" and plan.members:
        raise InputError("the cluster scope has no members role: only admins write it")
    names = [n for n in (plan.readers, plan.members, plan.leads) if n]
    if len(set(names)) != len(names):
        raise InputError("readers, members and leads must be different roles")
    for name in (plan.schema, *names):
        quote_ident(name)


def grant_statements(plan: RolePlan) -> list[str]:
    """Idempotent SQL that creates the group roles and applies the rules to ``plan.schema``."""
    _validate(plan)
    s = quote_ident(plan.schema)
    readers, leads = quote_ident(plan.readers), quote_ident(plan.leads)
    members = quote_ident(plan.members) if plan.members else None
    writers_base = members or readers  # the role leads/admins inherit from

    def table(name: str) -> str:
        return f"{s}.{quote_ident(name)}"

    sql: list[str] = []
    for role in (plan.readers, plan.members, plan.leads):
        if role:
            sql.append(
                f"DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{role}') "
                f"THEN CREATE ROLE {quote_ident(role)} NOLOGIN; END IF; END $$"
            )
    # Role hierarchy: reader < member < lead (lab), reader < admin (cluster).
    if members:
        sql.append(f"GRANT {readers} TO {members}")
    sql.append(f"GRANT {writers_base} TO {leads}")

    # Start from nothing: no PUBLIC access, no earlier grants to these roles.
    sql.append(f"REVOKE ALL ON SCHEMA {s} FROM PUBLIC")
    sql.append(f"REVOKE ALL ON ALL TABLES IN SCHEMA {s} FROM PUBLIC")
    for role in filter(None, (readers, members, leads)):
        sql.append(f"REVOKE ALL ON ALL TABLES IN SCHEMA {s} FROM {role}")
        sql.append(f"REVOKE ALL ON ALL SEQUENCES IN SCHEMA {s} FROM {role}")

    # Readers: look, never touch. Tables added by later migrations become readable too.
    sql.append(f"GRANT USAGE ON SCHEMA {s} TO {readers}")
    sql.append(f"GRANT SELECT ON ALL TABLES IN SCHEMA {s} TO {readers}")
    sql.append(f"ALTER DEFAULT PRIVILEGES IN SCHEMA {s} GRANT SELECT ON TABLES TO {readers}")

    if members:  # lab members: proposals only
        sql.append(f"GRANT INSERT ON {table('lessons')} TO {members}")
        for name in PROPOSAL_TABLES + APPEND_ONLY_TABLES:
            sql.append(f"GRANT INSERT ON {table(name)} TO {members}")
        sql.append(f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {s} TO {members}")

    # Leads (lab) / admins (cluster): curate lessons and write the data tables.
    for name in LESSON_TABLES + DATA_TABLES:
        sql.append(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {table(name)} TO {leads}")
    sql.append(f"GRANT INSERT ON {table('audit_log')} TO {leads}")
    sql.append(f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {s} TO {leads}")

    # Row-level rules on lessons (see the module docstring for why RLS).
    lessons = table("lessons")
    sql.append(f"ALTER TABLE {lessons} ENABLE ROW LEVEL SECURITY")
    for policy in ("hpcmem_read", "hpcmem_propose", "hpcmem_curate"):
        sql.append(f"DROP POLICY IF EXISTS {policy} ON {lessons}")
    sql.append(f"CREATE POLICY hpcmem_read ON {lessons} FOR SELECT TO {readers} USING (true)")
    if members:
        sql.append(
            f"CREATE POLICY hpcmem_propose ON {lessons} FOR INSERT TO {members} "
            "WITH CHECK (status = 'candidate' AND source <> 'curated')"
        )
    sql.append(f"CREATE POLICY hpcmem_curate ON {lessons} FOR ALL TO {leads} USING (true) WITH CHECK (true)")

    # Evidence and conditions: a member may only attach them to a proposal (a candidate),
    # never to a lesson a lead has already validated.
    for name in ("lesson_evidence", "lesson_conditions", "lesson_aliases"):
        attached = table(name)
        sql.append(f"ALTER TABLE {attached} ENABLE ROW LEVEL SECURITY")
        for policy in ("hpcmem_read", "hpcmem_propose", "hpcmem_curate"):
            sql.append(f"DROP POLICY IF EXISTS {policy} ON {attached}")
        sql.append(f"CREATE POLICY hpcmem_read ON {attached} FOR SELECT TO {readers} USING (true)")
        if members:
            sql.append(
                f"CREATE POLICY hpcmem_propose ON {attached} FOR INSERT TO {members} WITH CHECK "
                f"(EXISTS (SELECT 1 FROM {lessons} l WHERE l.id = lesson_id AND l.status = 'candidate'))"
            )
        sql.append(f"CREATE POLICY hpcmem_curate ON {attached} FOR ALL TO {leads} USING (true) WITH CHECK (true)")
    return sql


def setup_pg_roles(
    url: str,
    schema: str,
    *,
    lab_or_cluster: str,
    readers_role: str,
    members_role: str | None,
    leads_role: str,
) -> list[str]:
    """Create the group roles and apply the grants in one transaction; return the SQL run.

    Run it as the schema's owner (the role that created and migrated the store) after
    every schema upgrade: it is idempotent and re-grants tables a migration added.
    Users get access by membership: ``GRANT hpcmem_vision_member TO alice``.
    """
    plan = RolePlan(schema, lab_or_cluster, readers_role, members_role, leads_role)
    statements = grant_statements(plan)
    import psycopg

    conninfo = url.replace("postgresql+psycopg://", "postgresql://", 1)
    try:
        with psycopg.connect(conninfo, connect_timeout=5) as conn:
            exists = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone()
            if not exists:
                raise StoreError(f"schema '{schema}' does not exist",
                                 hint="open the store once (hpcmem db upgrade --scope ...) before granting")
            for statement in statements:
                conn.execute(statement)
    except psycopg.Error as exc:
        denied = as_permission_denied(exc)
        if denied is not None:
            raise denied from None
        raise StoreError(f"applying grants to schema '{schema}' failed: {_first_line(exc)}") from None
    return statements


def as_permission_denied(exc: BaseException) -> PermissionDenied | None:
    """A PermissionDenied for a database or file refusal, or None for any other error.

    Recognises PostgreSQL's insufficient_privilege (missing GRANT or an RLS policy), and
    SQLite/OS refusals (EACCES, read-only database), whether raw or wrapped by SQLAlchemy.
    """
    orig = getattr(exc, "orig", None) or exc
    if isinstance(orig, PermissionDenied):
        return orig
    message = _first_line(orig)
    if getattr(orig, "sqlstate", None) in _PG_DENIED_SQLSTATES:
        return PermissionDenied(f"the store refused: {message}",
                                hint="ask the lab lead or the site admin for the role you need")
    if isinstance(orig, PermissionError):
        # Name what was refused (a store, an input file, a directory) and blame no one.
        target = orig.filename
        if not target:
            return PermissionDenied("permission denied", hint="rerun with --debug to see what was refused")
        return PermissionDenied(f"permission denied: {target}",
                                hint=f"this account may not read or write {target}: check its owner, group and mode "
                                     f"(ls -ld {target})")
    code = getattr(orig, "sqlite_errorcode", -1) & 0xFF  # extended codes keep the primary
    if code == _SQLITE_READONLY:
        return PermissionDenied(f"the store is read-only for you: {message}",
                                hint="reading works; changing it needs write access to the store file and its "
                                     "directory: check their owner, group and mode (ls -ld)")
    if code in _SQLITE_DENIED_CODES:
        return PermissionDenied(f"the store refused: {message}",
                                hint="check the store file's owner, group and mode (ls -l)")
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
