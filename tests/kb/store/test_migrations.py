"""Migrations: one head, round trips on SQLite and PostgreSQL, and models == migrations."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import text, inspect, select

from hpcmem.kb.store import migrate
from hpcmem.kb.store.models import AuditEntry, Base, Lesson, QueryVector, Signature
from hpcmem.kb.store.schema_version import ALL_REVISIONS, SCHEMA_HEAD


def test_single_head_matches_the_constant_the_store_checks():
    assert migrate.heads() == [SCHEMA_HEAD]
    assert [r["revision"] for r in migrate.history()] == list(reversed(ALL_REVISIONS))


def add_sample_rows(store) -> None:
    with store.transaction() as s:
        sig = Signature(fingerprint="f" * 16, category="host_oom", template="oom-kill event in StepId=<JOBID>", count=2)
        s.add(sig)
        s.flush()
        s.add(Lesson(id="0b6f1c3e-1111-4222-8333-944445555666", signature_id=sig.id, fingerprint=sig.fingerprint,
                     scope="user", cause="memory request too small", fix="raise --mem", source="human",
                     actions=[{"type": "sbatch", "option": "--mem", "from": "4G", "to": "16G"}]))
        s.add(AuditEntry(actor="alice", action="create", object_type="lesson", object_id="x", after={"a": 1}))


def table_names(store) -> set[str]:
    return set(inspect(store.engine).get_table_names(schema=store.schema)) - {"alembic_version"}


def test_empty_to_head_to_base_to_head_with_data_surviving(store_factory):
    store = store_factory()
    assert store.open().revision() == SCHEMA_HEAD
    assert table_names(store) == set(Base.metadata.tables)

    store.downgrade("0001")  # a real step down, through every revision
    assert store.revision() == "0001"
    assert "query_vectors" not in table_names(store)
    store.open()
    store.downgrade("0003")  # one step: data in the older tables survives it
    assert "lesson_aliases" not in table_names(store)
    with store.transaction() as s:  # rows as revision 0003 wrote them (no lessons.excerpt yet)
        s.execute(text("INSERT INTO signatures (fingerprint, category, template, count, first_seen, last_seen) "
                       "VALUES ('ffffffffffffffff', 'host_oom', 'oom-kill event in StepId=<JOBID>', 2, "
                       "'2026-11-01 00:00:00', '2026-11-01 00:00:00')"))
        s.execute(text("INSERT INTO lessons (id, signature_id, fingerprint, scope, cause, fix, actions, status, "
                       "confidence, confirmations, contradictions, source, safety_flags, created_at, updated_at) "
                       "SELECT '0b6f1c3e-1111-4222-8333-944445555666', id, fingerprint, 'user', "
                       "'memory request too small', 'raise --mem', "
                       "'[{\"type\": \"sbatch\", \"option\": \"--mem\", \"from\": \"4G\", \"to\": \"16G\"}]', "
                       "'candidate', 0.5, 0, 0, 'human', '[]', '2026-11-01 00:00:00', '2026-11-01 00:00:00' FROM signatures"))

    store.open()  # opening an older store upgrades it in place
    assert store.revision() == SCHEMA_HEAD
    with store.session() as s:
        lesson = s.scalars(select(Lesson)).one()
        assert lesson.actions[0]["to"] == "16G"
        assert lesson.signature.category == "host_oom"
        assert isinstance(lesson.created_at, dt.datetime) and lesson.created_at.tzinfo is dt.timezone.utc
        assert lesson.excerpt is None and lesson.aliases == []
    with store.transaction() as s:
        s.add(QueryVector(template_hash="h" * 64, model="m", vector=b"\x00" * 8))

    store.downgrade("base")
    assert store.revision() is None
    assert table_names(store) == set()
    store.open()
    assert table_names(store) == set(Base.metadata.tables)
    with store.session() as s:
        assert s.scalars(select(Lesson)).all() == []


def test_models_match_migrations(store_factory):
    """Autogenerate against a migrated store finds nothing to do."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    store = store_factory().open()
    with store.engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        diff = compare_metadata(ctx, Base.metadata)
    assert diff == []


def test_audit_log_is_append_only_in_the_database(store_factory):
    from sqlalchemy.exc import DatabaseError

    store = store_factory().open()
    add_sample_rows(store)
    with pytest.raises(DatabaseError, match="append-only"):
        with store.transaction() as s:
            entry = s.scalars(select(AuditEntry)).one()
            entry.reason = "rewritten"
    with pytest.raises(DatabaseError, match="append-only"):
        with store.transaction() as s:
            s.delete(s.scalars(select(AuditEntry)).one())
    with store.session() as s:
        assert s.scalars(select(AuditEntry)).one().reason is None
