"""Test isolation: every test gets its own HPCMEM_HOME and never reads site or user config.

PostgreSQL: tests that take the ``pg_url`` fixture run against the real server named by
HPCMEM_TEST_PG_URL (default: the local server's `test` database), each in a schema of
its own. Without a server they skip with the reason; with HPCMEM_REQUIRE_PG=1 (set by
.ci/run) a missing server fails them instead.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "data" / "samples"
PG_DEFAULT = "postgresql://postgres@127.0.0.1:5432/test"


@pytest.fixture(autouse=True)
def hpcmem_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for var in list(os.environ):
        # The suite's own switches stay: HPCMEM_REQUIRE_* turns a skip into a failure in CI,
        # and a test that reads one after this fixture must still see it.
        if var.startswith("HPCMEM_") and not var.startswith(("HPCMEM_TEST_", "HPCMEM_REQUIRE_")):
            monkeypatch.delenv(var)
    home = tmp_path / "hpcmem-home"
    home.mkdir(mode=0o700)
    monkeypatch.setenv("HPCMEM_HOME", str(home))
    monkeypatch.setenv("HPCMEM_DISABLE_LOCAL_CONFIG", "1")
    return home


@pytest.fixture(scope="session")
def pg_server_url() -> str:
    url = os.environ.get("HPCMEM_TEST_PG_URL", PG_DEFAULT)
    try:
        import psycopg

        with psycopg.connect(url, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:  # noqa: BLE001 - any failure means "no server here"
        reason = f"PostgreSQL not reachable at {url}: {str(exc).strip().splitlines()[0]}"
        if os.environ.get("HPCMEM_REQUIRE_PG") == "1":
            pytest.fail(reason + " (HPCMEM_REQUIRE_PG=1 makes this mandatory)")
        pytest.skip(reason)
    return url


@pytest.fixture
def pg_schema(pg_server_url: str):
    """A fresh PostgreSQL schema for one test, dropped afterwards."""
    import psycopg

    schema = f"hpcmem_t_{uuid.uuid4().hex[:12]}"
    yield pg_server_url, schema
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture(params=["sqlite", "postgresql"])
def store_factory(request: pytest.FixtureRequest, tmp_path: Path):
    """Build a Store on each real backend: a SQLite file, then a PostgreSQL schema."""
    from hpcmem.kb.store.database import Store

    made: list[Store] = []
    if request.param == "sqlite":
        def make(name: str = "user", scope: str = "user") -> Store:
            store = Store(f"sqlite:///{tmp_path / 'stores' / name / 'store.db'}", name=name, scope=scope)
            made.append(store)
            return store
    else:
        url, schema = request.getfixturevalue("pg_schema")

        def make(name: str = "user", scope: str = "user") -> Store:
            store = Store(url, name=name, scope=scope, schema=f"{schema}_{name}"[:60])
            made.append(store)
            return store

    yield make
    for store in made:
        if store.dialect == "postgresql":
            import psycopg

            with psycopg.connect(store.url.replace("+psycopg", ""), autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{store.schema}" CASCADE')
        store.dispose()


def stored_values(store, table: str, columns: tuple[str, ...], order: str = "id") -> list[tuple]:
    """Each stored value as the database holds it: its text and, on SQLite, its type (for
    comparing what plain-SQL writers store with what SQLAlchemy stores)."""
    with store.engine.connect() as conn:
        if store.dialect == "sqlite":
            cells = ", ".join(f"CAST({c} AS TEXT), typeof({c})" for c in columns)
        else:
            cells = ", ".join(f"{c}::text" for c in columns)
        return [tuple(r) for r in conn.exec_driver_sql(f"SELECT {cells} FROM {table} ORDER BY {order}")]
