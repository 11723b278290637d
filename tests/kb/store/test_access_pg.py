"""Access rules of a PostgreSQL lab/cluster store, enforced by real roles and grants.

Each test migrates a fresh schema as the owner (postgres), applies ``setup_pg_roles``,
creates login roles for this run and connects AS each of them (trust auth on the test
server) to show what the database itself allows and refuses.
"""

from __future__ import annotations

import uuid

import pytest

import psycopg  # a hard dependency (pyproject), so its absence is a failure, not a skip

from hpcmem.kb.store.access import (  # noqa: E402
    ALL_TABLES,
    RolePlan,
    as_permission_denied,
    default_roles,
    grant_statements,
    setup_pg_roles,
)
from hpcmem.kb.errors import InputError, PermissionDenied  # noqa: E402
from hpcmem.kb.store.database import Store  # noqa: E402


def _as(url: str, role: str) -> str:
    """The same server and database, logged in as ``role`` (trust auth)."""
    rest = url.split("://", 1)[1].split("@", 1)[1]
    return f"postgresql://{role}@{rest}"


@pytest.fixture
def roles(pg_server_url: str):
    """Login and group role names unique to this test; all dropped afterwards."""
    tag = uuid.uuid4().hex[:8]
    names = {
        "alice": f"alice_t_{tag}", "bob": f"bob_t_{tag}", "lead": f"lead_t_{tag}", "nobody": f"nobody_t_{tag}",
        "read": f"hpcmt_{tag}_read", "member": f"hpcmt_{tag}_member", "leadrole": f"hpcmt_{tag}_lead",
        "admin": f"hpcmt_{tag}_admin",
    }
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        for key in ("alice", "bob", "lead", "nobody"):
            conn.execute(f'CREATE ROLE "{names[key]}" LOGIN')
    yield names
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        for name in names.values():
            if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)).fetchone():
                # Privileges on the (already dropped or dropping) schemas go with DROP OWNED.
                conn.execute(f'DROP OWNED BY "{name}" CASCADE')
                conn.execute(f'DROP ROLE "{name}"')


def _migrated(url: str, schema: str, scope: str = "lab") -> Store:
    store = Store(url, name="vision", scope=scope, schema=schema).open()
    store.dispose()
    return store


def _lab(pg_schema, roles) -> tuple[str, str]:
    url, schema = pg_schema
    _migrated(url, schema)
    setup_pg_roles(url, schema, lab_or_cluster="lab", readers_role=roles["read"],
                   members_role=roles["member"], leads_role=roles["leadrole"])
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'GRANT "{roles["read"]}" TO "{roles["alice"]}"')
        conn.execute(f'GRANT "{roles["member"]}" TO "{roles["bob"]}"')
        conn.execute(f'GRANT "{roles["leadrole"]}" TO "{roles["lead"]}"')
    return url, schema


def _connect(url: str, role: str, schema: str):
    return psycopg.connect(_as(url, role), autocommit=True, options=f"-csearch_path={schema}")


LESSON_SQL = (
    "INSERT INTO lessons (id, fingerprint, scope, scope_name, cause, fix, actions, status, confidence, "
    "confirmations, contradictions, source, author, safety_flags, created_at, updated_at) "
    "VALUES (%s, 'fp-oom', 'lab', 'vision', 'job exceeded --mem', 'request --mem=32G', '[]', %s, 0.5, 0, 0, "
    "%s, %s, '[]', now(), now())"
)


def _seed(url: str, schema: str) -> str:
    """One validated lesson and one occurrence, written by the owner."""
    lesson_id = str(uuid.uuid4())
    with psycopg.connect(url, autocommit=True, options=f"-csearch_path={schema}") as conn:
        conn.execute(LESSON_SQL, (lesson_id, "validated", "curated", "lead"))
        conn.execute(
            "INSERT INTO occurrences (cluster, job_id, user_name, state, source, observed_at) "
            "VALUES ('hpc1', '4242', 'carol', 'OUT_OF_MEMORY', 'sacct', now())"
        )
    return lesson_id


def _refused(conn, sql: str, params=()) -> psycopg.Error:
    with pytest.raises(psycopg.Error) as info:
        conn.execute(sql, params)
    return info.value


def test_reader_selects_but_cannot_write(pg_schema, roles):
    url, schema = _lab(pg_schema, roles)
    lesson_id = _seed(url, schema)
    with _connect(url, roles["alice"], schema) as conn:
        rows = conn.execute("SELECT id, status FROM lessons").fetchall()
        assert rows == [(lesson_id, "validated")]
        assert conn.execute("SELECT job_id FROM occurrences").fetchall() == [("4242",)]
        err = _refused(conn, LESSON_SQL, (str(uuid.uuid4()), "candidate", "human", "alice"))
        assert err.sqlstate == "42501" and "permission denied for table lessons" in str(err)
        err = _refused(conn, "UPDATE lessons SET fix = 'chmod 777 ~'")
        assert err.sqlstate == "42501"
        err = _refused(conn, "INSERT INTO audit_log (at, actor, action, object_type, object_id) "
                             "VALUES (now(), 'alice', 'edit', 'lesson', 'x')")
        assert err.sqlstate == "42501"
        err = _refused(conn, "UPDATE alembic_version SET version_num = 'x'")
        assert err.sqlstate == "42501"


def test_member_proposes_candidates_only(pg_schema, roles):
    url, schema = _lab(pg_schema, roles)
    seeded = _seed(url, schema)
    proposal = str(uuid.uuid4())
    with _connect(url, roles["bob"], schema) as conn:
        conn.execute(LESSON_SQL, (proposal, "candidate", "human", "bob"))
        conn.execute("INSERT INTO lesson_evidence (lesson_id, kind, job_id, actor, created_at) "
                     "VALUES (%s, 'occurrence', '4242', 'bob', now())", (proposal,))
        conn.execute("INSERT INTO lesson_conditions (lesson_id, kind, name, value) "
                     "VALUES (%s, 'partition', 'gpu', NULL)", (proposal,))
        conn.execute("INSERT INTO audit_log (at, actor, action, object_type, object_id) "
                     "VALUES (now(), 'bob', 'propose', 'lesson', %s)", (proposal,))
        assert conn.execute("SELECT status FROM lessons WHERE id = %s", (proposal,)).fetchone() == ("candidate",)

        # A member cannot smuggle in a validated (or 'curated') lesson...
        err = _refused(conn, LESSON_SQL, (str(uuid.uuid4()), "validated", "human", "bob"))
        assert err.sqlstate == "42501" and "row-level security" in str(err)
        err = _refused(conn, LESSON_SQL, (str(uuid.uuid4()), "candidate", "curated", "bob"))
        assert err.sqlstate == "42501"
        # ...nor approve, edit or delete one.
        err = _refused(conn, "UPDATE lessons SET status = 'validated' WHERE id = %s", (proposal,))
        assert err.sqlstate == "42501" and "permission denied for table lessons" in str(err)
        err = _refused(conn, "DELETE FROM lessons WHERE id = %s", (seeded,))
        assert err.sqlstate == "42501"
        err = _refused(conn, "DELETE FROM lesson_evidence")
        assert err.sqlstate == "42501"
        # ...nor pad a validated lesson with evidence or conditions.
        err = _refused(conn, "INSERT INTO lesson_evidence (lesson_id, kind, job_id, actor, created_at) "
                             "VALUES (%s, 'worked', '4243', 'bob', now())", (seeded,))
        assert err.sqlstate == "42501" and "row-level security" in str(err)
        err = _refused(conn, "INSERT INTO lesson_conditions (lesson_id, kind, name, value) "
                             "VALUES (%s, 'partition', 'debug', NULL)", (seeded,))
        assert err.sqlstate == "42501"
    with psycopg.connect(url, options=f"-csearch_path={schema}") as conn:
        statuses = dict(conn.execute("SELECT id, status FROM lessons").fetchall())
    assert statuses == {seeded: "validated", proposal: "candidate"}


def test_lead_approves_and_rejects(pg_schema, roles):
    url, schema = _lab(pg_schema, roles)
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    with _connect(url, roles["bob"], schema) as conn:
        conn.execute(LESSON_SQL, (a, "candidate", "human", "bob"))
        conn.execute(LESSON_SQL, (b, "candidate", "agent", "bob"))
    with _connect(url, roles["lead"], schema) as conn:
        assert conn.execute("UPDATE lessons SET status = 'validated', source = 'curated' WHERE id = %s",
                            (a,)).rowcount == 1
        assert conn.execute("UPDATE lessons SET status = 'rejected' WHERE id = %s", (b,)).rowcount == 1
        conn.execute("INSERT INTO audit_log (at, actor, action, object_type, object_id) "
                     "VALUES (now(), 'lead', 'approve', 'lesson', %s)", (a,))
        assert dict(conn.execute("SELECT id, status FROM lessons").fetchall()) == {a: "validated", b: "rejected"}
        # Even a lead cannot run migrations.
        err = _refused(conn, "UPDATE alembic_version SET version_num = 'x'")
        assert err.sqlstate == "42501"


def test_nobody_rewrites_the_audit_log(pg_schema, roles):
    url, schema = _lab(pg_schema, roles)
    with psycopg.connect(url, autocommit=True, options=f"-csearch_path={schema}") as conn:
        conn.execute("INSERT INTO audit_log (at, actor, action, object_type, object_id) "
                     "VALUES (now(), 'lead', 'approve', 'lesson', 'x')")
    for who in ("alice", "bob", "lead"):
        with _connect(url, roles[who], schema) as conn:
            for sql in ("DELETE FROM audit_log", "UPDATE audit_log SET actor = 'mallory'"):
                err = _refused(conn, sql)
                assert err.sqlstate == "42501", (who, sql, err)
    # The owner holds every privilege; the append-only trigger still refuses.
    with psycopg.connect(url, autocommit=True, options=f"-csearch_path={schema}") as conn:
        err = _refused(conn, "DELETE FROM audit_log")
        assert "append-only" in str(err)
        assert conn.execute("SELECT count(*) FROM audit_log").fetchone() == (1,)


def test_role_without_grant_sees_nothing(pg_schema, roles):
    url, schema = _lab(pg_schema, roles)
    _seed(url, schema)
    with _connect(url, roles["nobody"], schema) as conn:
        for table in ("lessons", "occurrences"):
            err = _refused(conn, f'SELECT * FROM "{schema}".{table}')
            assert err.sqlstate == "42501" and f"permission denied for schema {schema}" in str(err)


def test_rls_hides_lessons_even_from_a_stray_select_grant(pg_schema, roles):
    """Defence in depth: SELECT granted by mistake still returns no lesson rows."""
    url, schema = _lab(pg_schema, roles)
    _seed(url, schema)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO "{roles["nobody"]}"')
        conn.execute(f'GRANT SELECT ON "{schema}".lessons TO "{roles["nobody"]}"')
    with _connect(url, roles["nobody"], schema) as conn:
        assert conn.execute("SELECT count(*) FROM lessons").fetchone() == (0,)


def test_cluster_scope_only_admins_write(pg_schema, roles):
    url, schema = pg_schema
    _migrated(url, schema, scope="cluster")
    setup_pg_roles(url, schema, lab_or_cluster="cluster", readers_role=roles["read"],
                   members_role=None, leads_role=roles["admin"])
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'GRANT "{roles["read"]}" TO "{roles["alice"]}"')
        conn.execute(f'GRANT "{roles["admin"]}" TO "{roles["lead"]}"')
    lesson = str(uuid.uuid4())
    with _connect(url, roles["alice"], schema) as conn:
        err = _refused(conn, LESSON_SQL, (lesson, "candidate", "human", "alice"))
        assert err.sqlstate == "42501"
    with _connect(url, roles["lead"], schema) as conn:
        conn.execute(LESSON_SQL, (lesson, "validated", "curated", "admin"))
    with _connect(url, roles["alice"], schema) as conn:
        assert conn.execute("SELECT status FROM lessons").fetchall() == [("validated",)]


def test_grants_are_idempotent_and_cover_every_table(pg_schema, roles):
    url, schema = _lab(pg_schema, roles)
    setup_pg_roles(url, schema, lab_or_cluster="lab", readers_role=roles["read"],
                   members_role=roles["member"], leads_role=roles["leadrole"])
    with psycopg.connect(url, options=f"-csearch_path={schema}") as conn:
        tables = {r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)).fetchall()}
        policies = {r[0] for r in conn.execute(
            "SELECT policyname FROM pg_policies WHERE schemaname = %s", (schema,)).fetchall()}
    assert tables == set(ALL_TABLES)  # a new table must be classified in kb/store/access.py
    assert policies == {"hpcmem_read", "hpcmem_propose", "hpcmem_curate"}


def test_permission_error_becomes_one_line_permission_denied(pg_schema, roles):
    from sqlalchemy import text

    url, schema = _lab(pg_schema, roles)
    store = Store(_as(url, roles["alice"]), name="vision", scope="lab", schema=schema)
    try:
        with pytest.raises(Exception) as info, store.transaction() as session:
            session.execute(text("DELETE FROM lessons"))
    finally:
        store.dispose()
    denied = as_permission_denied(info.value)
    assert isinstance(denied, PermissionDenied)
    assert str(denied) == "the store refused: permission denied for table lessons"
    assert as_permission_denied(ValueError("something else")) is None


def test_statements_and_names_are_validated():
    plan = default_roles("lab:vision", "lab_vision")
    assert plan == RolePlan("lab_vision", "lab", "hpcmem_vision_read", "hpcmem_vision_member", "hpcmem_vision_lead")
    assert default_roles("cluster", "cluster").leads == "hpcmem_cluster_admin"
    sql = grant_statements(plan)
    assert 'GRANT "hpcmem_vision_member" TO "hpcmem_vision_lead"' in sql
    assert not any("UPDATE" in s and "hpcmem_vision_member" in s and s.startswith("GRANT") for s in sql)
    with pytest.raises(InputError):
        default_roles("user", "x")
    with pytest.raises(InputError):
        grant_statements(RolePlan("lab_vision", "lab", "r; DROP TABLE lessons", "m", "l"))
    with pytest.raises(InputError):
        grant_statements(RolePlan("c", "cluster", "r", "m", "a"))


_CLI = (
    "from hpcmem.cli.main import main\n"
    "main()\n"
)


def test_cli_db_grant(pg_schema, roles, tmp_path):
    import subprocess
    import sys

    url, schema = pg_schema
    config = tmp_path / "site.toml"
    config.write_text(f'[stores.labs.vision]\nurl = "{url}"\nschema = "{schema}"\n')
    args = ["db", "grant", "--scope", "lab:vision", "--readers", roles["read"],
            "--members", roles["member"], "--leads", roles["leadrole"]]

    def hpcmem(*extra: str):
        return subprocess.run([sys.executable, "-c", _CLI, *args, *extra], capture_output=True, text=True,
                              env={**__import__("os").environ, "HPCMEM_CONFIG": str(config)}, timeout=120)

    dry = hpcmem("--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f'GRANT "{roles["member"]}" TO "{roles["leadrole"]}";' in dry.stdout.splitlines()
    with psycopg.connect(url) as conn:  # a dry run changes nothing
        assert conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone() is None
    done = hpcmem()
    assert done.returncode == 0, done.stderr
    assert f"applied {len(dry.stdout.splitlines())} statements to schema {schema}" in done.stderr
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'GRANT "{roles["member"]}" TO "{roles["bob"]}"')
    with _connect(url, roles["bob"], schema) as conn:
        err = _refused(conn, LESSON_SQL, (str(uuid.uuid4()), "validated", "human", "bob"))
        assert err.sqlstate == "42501"
    bad = subprocess.run([sys.executable, "-c", _CLI, "db", "grant", "--scope", "user"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2
    assert bad.stderr.splitlines()[0] == "Error: store 'user' is sqlite: roles and grants apply to PostgreSQL stores"
