"""record_lesson writes with plain SQL (kb/store/sqlwrite.py); the ORM must read back exactly
what it returned, on both backends, whether or not the process already has an engine."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys

import pytest
from sqlalchemy import select

from hpcmem.kb.lessons.write import Condition, LessonDraft, lesson_to_dict, record_lesson
from hpcmem.kb.store.models import AuditEntry, Lesson, Signature
from hpcmem.kb.signatures.fingerprint import fingerprint

OOM = ("slurmstepd: error: Detected 1 oom-kill event(s) in StepId=52004.batch. Some of your processes may have "
       "been killed by the cgroup out-of-memory handler.")


def a_draft(**extra) -> LessonDraft:
    sig = fingerprint(OOM)
    values = dict(fingerprint=sig.fingerprint, template=sig.template, category=sig.category,
                  cause="the job used more memory than --mem", fix="request --mem=64G", source="agent",
                  author="alice", context="training run", actions=[{"type": "sbatch", "option": "--mem", "to": "64G"}],
                  conditions=[Condition("partition", "gpu"), Condition("module", "cuda/12.4", "12.4")],
                  evidence=[{"kind": "occurrence", "job_id": "52004", "note": "first seen"}],
                  aliases=[{"fingerprint": "f" * 16, "template": "oom <num>", "category": "host_oom", "source": "merge"}],
                  valid_until=dt.datetime(2027, 1, 31, tzinfo=dt.timezone.utc), excerpt="oom-kill <num>")
    values.update(extra)
    return LessonDraft(**values)


def read_back(store, lesson_id: str) -> dict:
    with store.session() as session:
        return lesson_to_dict(session.get(Lesson, lesson_id))


@pytest.mark.parametrize("engine_first", [False, True], ids=["plain-connection", "engine-connection"])
def test_written_lesson_reads_back_through_the_orm(store_factory, engine_first):
    store = store_factory()
    store.open()
    if not engine_first:
        store.dispose()  # no engine in this process: record_lesson connects without SQLAlchemy
    written = record_lesson(store, a_draft(), actor="alice")
    assert read_back(store, written["lesson_id"]) == written
    assert written["aliases"][0]["fingerprint"] == "f" * 16 and written["valid_until"].startswith("2027-01-31")
    with store.session() as session:
        audit = session.scalars(select(AuditEntry).where(AuditEntry.object_id == written["lesson_id"])).one()
        assert (audit.action, audit.actor, audit.after) == ("create", "alice", written)
        assert audit.at.tzinfo is not None


def test_second_lesson_reuses_the_signature_row(store_factory):
    store = store_factory()
    store.open()
    first = record_lesson(store, a_draft(), actor="alice")
    second = record_lesson(store, a_draft(fix="request --mem=96G", aliases=[]), actor="bob")
    with store.session() as session:
        sigs = session.scalars(select(Signature)).all()
        assert len(sigs) == 1 and sigs[0].count == 0
        ids = {session.get(Lesson, i).signature_id for i in (first["lesson_id"], second["lesson_id"])}
    assert ids == {sigs[0].id}


def test_a_failed_write_leaves_nothing_behind(store_factory):
    store = store_factory()
    store.open()
    store.dispose()
    bad = a_draft(evidence=[{"kind": "occurrence", "job_id": "1", "note": None, "occurrence_id": None}])
    bad.aliases = [{"fingerprint": "a" * 16, "template": "t", "category": "c"},
                   {"fingerprint": "a" * 16, "template": "t", "category": "c"}]  # violates (lesson_id, fingerprint)
    with pytest.raises(Exception):
        record_lesson(store, bad, actor="alice")
    with store.session() as session:
        assert session.scalars(select(Lesson)).all() == []
        assert session.scalars(select(Signature)).all() == []
        assert session.scalars(select(AuditEntry)).all() == []


def test_record_lesson_imports_no_orm(tmp_path):
    from hpcmem.kb.store.database import Store

    url = f"sqlite:///{tmp_path / 'user.db'}"
    Store(url).open().dispose()  # an existing, current store
    code = (
        "import sys\n"
        "from hpcmem.kb.lessons.write import LessonDraft, record_lesson\n"
        "from hpcmem.kb.store.database import Store\n"
        f"d = LessonDraft(fingerprint='0123456789abcdef', template='t', category='c', cause='x', fix='y', source='agent')\n"
        f"record_lesson(Store({url!r}), d, actor='a')\n"
        "print(sorted(m for m in ('sqlalchemy', 'alembic', 'hpcmem.kb.store.models') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_stored_values_equal_what_sqlalchemy_stores(store_factory):
    """Beyond reading back: the bytes of time and JSON columns (an audit entry with no
    'before', a date before year 1000) are what the ORM itself would have stored."""
    from tests.conftest import stored_values

    ours, reference = store_factory("ours").open(), store_factory("reference").open()
    ours.dispose()  # the plain-connection path
    early = dt.datetime(999, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    written = record_lesson(ours, a_draft(valid_until=early), actor="alice")
    with ours.session() as session:
        lesson = session.get(Lesson, written["lesson_id"])
        audit = session.scalars(select(AuditEntry)).one()
        copy = {c.name: getattr(lesson, c.name) for c in Lesson.__table__.columns}
        entry = {c.name: getattr(audit, c.name) for c in AuditEntry.__table__.columns}
        sig = {c.name: getattr(lesson.signature, c.name) for c in Signature.__table__.columns}
    with reference.transaction() as session:
        session.add(Signature(**sig))
        session.flush()
        session.add(Lesson(**copy))
        session.add(AuditEntry(**entry))
    lesson_cols = ("id", "actions", "safety_flags", "created_at", "updated_at", "valid_until", "last_confirmed_at")
    assert stored_values(ours, "lessons", lesson_cols) == stored_values(reference, "lessons", lesson_cols)
    audit_cols = ("id", "at", "before", "after")
    assert stored_values(ours, "audit_log", audit_cols) == stored_values(reference, "audit_log", audit_cols)
    sig_cols = ("id", "first_seen", "last_seen", "template")
    assert stored_values(ours, "signatures", sig_cols) == stored_values(reference, "signatures", sig_cols)
