"""Fingerprints after a rules change: the digest, recall's warning, `refingerprint` (SQLite and
PostgreSQL, through store_factory). The rules change is a site rules file that gives a real
sample log (data/samples/logs) a category of its own, as a site would."""

from __future__ import annotations

import datetime as dt
import io
from pathlib import Path

import pytest
from sqlalchemy import select

from hpcmem.kb.signatures import rules_digest
from hpcmem.kb.lessons.aliases import add_alias, alias_from_text
from hpcmem.kb.config import load_config
from hpcmem.kb.store.index_keys import GENERATION_KEY, REBUILD_GENERATION_KEY
from hpcmem.kb.store.models import Lesson, LessonAlias, Occurrence, Signature, StoreMeta
from hpcmem.kb.recall.recaller import Recaller, RecallQuery
from hpcmem.kb.lessons.from_error import record
from hpcmem.kb.jobs.write import Recorder
from hpcmem.kb.store.refingerprint import refingerprint
from hpcmem.kb.signatures.fingerprint import fingerprint
from hpcmem.kb.store.stack import StoreStack
from tests.conftest import SAMPLES

LAMMPS = (SAMPLES / "logs" / "slurm-4410502.out").read_text()  # "ERROR: Lost atoms: ..." (mpi_error)
LIB = (SAMPLES / "logs" / "slurm-4410577.err").read_text()  # libcudart.so.11.0 (another failure)
# Gives the LAMMPS failure a category of its own; the canonical template makes every
# "Lost atoms" line one failure, so texts that differ in the source file collide.
SITE_RULES = """
[[rule]]
name = "lammps_lost_atoms"
category = "lammps_lost_atoms"
description = "LAMMPS lost atoms (the time step is too large or the system blew up)"
priority = 100
patterns = ['^ERROR: Lost atoms: .*$']
template = "ERROR: Lost atoms"
"""
ATOMS_A = "ERROR: Lost atoms: original 32000 current 31998 (src/thermo.cpp:481)"
ATOMS_B = "ERROR: Lost atoms: original 512 current 500 (src/verlet.cpp:77)"


@pytest.fixture
def site_rules(tmp_path: Path):
    """Turn the site rules on with ``site_rules()``; always off again afterwards."""
    path = tmp_path / "site-rules.toml"
    path.write_text(SITE_RULES)

    def turn_on() -> Path:
        rules_digest.use_site_rules(path)
        return path

    yield turn_on
    rules_digest.use_site_rules(None)
    rules_digest._warned = False


@pytest.fixture
def stack(store_factory) -> StoreStack:
    st = StoreStack(user=store_factory("user", "user"))
    st.user.open()
    yield st
    st.dispose()


def lesson(stack: StoreStack, text: str, fix: str) -> dict:
    return record(stack, cause="c", fix=fix, author="alice", source="human", error_text=text)


def recall(stack: StoreStack, text: str) -> tuple[dict, str]:
    """The result, and what recall wrote to stderr."""
    err = io.StringIO()
    import hpcmem.kb.recall.recaller as recall_module

    original = recall_module.warn_if_stale
    recall_module.warn_if_stale = lambda readers: original(readers, stream=err)
    try:
        recaller = Recaller(stack, load_config(), allow_model=False, record_events=False)
        try:
            return recaller.recall(RecallQuery(text=text)), err.getvalue()
        finally:
            recaller.close()
    finally:
        recall_module.warn_if_stale = original


def exact_ids(result: dict) -> list[str]:
    return [m["lesson_id"] for m in result["matches"] if m["match_kind"] == "exact" and m["found_by"] in ("exact", "alias")]


def ingest(store, texts: list[str], start: int = 1000) -> None:
    recorder = Recorder(store)
    t0 = dt.datetime(2026, 3, 1, tzinfo=dt.timezone.utc)
    for i, text in enumerate(texts):
        recorder.add(None, {"cluster": "c", "job_id": str(start + i), "state": "FAILED", "message": text,
                            "source": "log", "end_time": t0 + dt.timedelta(days=i)})
    recorder.close()


def meta(store, key: str) -> str | None:
    with store.session() as session:
        return session.scalar(select(StoreMeta.value).where(StoreMeta.key == key))


# ------------------------------------------------------------------------------- digest

def test_digest_follows_the_site_rules_file_and_a_new_store_records_it(tmp_path, site_rules, store_factory):
    builtin = rules_digest.current_digest()
    assert builtin == rules_digest.rules_digest(None) and len(builtin) == 64
    path = site_rules()
    with_site = rules_digest.current_digest()
    assert with_site != builtin
    path.write_text(SITE_RULES + "\n# a comment changes the file, so the digest\n")
    assert rules_digest.rules_digest(str(path)) != with_site
    assert rules_digest.current_digest() == with_site  # cached per process and path
    store = store_factory("fresh", "user")
    store.open()
    assert meta(store, rules_digest.DIGEST_KEY) == with_site


# ---------------------------------------------------------------- the whole story, real text

def test_rules_change_breaks_exact_recall_until_refingerprint(stack, site_rules):
    recorded = lesson(stack, LAMMPS, "use a smaller timestep")
    other = lesson(stack, LIB, "module load cuda/11.8")
    ingest(stack.user, [LAMMPS, LIB])
    result, warning = recall(stack, LAMMPS)
    assert exact_ids(result) == [recorded["lesson_id"]] and warning == ""

    site_rules()
    assert fingerprint(LAMMPS, rules_digest.active_rules()).category == "lammps_lost_atoms"
    result, warning = recall(stack, LAMMPS)
    assert exact_ids(result) == []  # the stored fingerprint is not what recall computes now
    assert warning.count("\n") == 1 and "hpcmem db refingerprint" in warning and "'user'" in warning
    assert recall(stack, LAMMPS)[1] == ""  # one warning per process

    report = refingerprint(stack.user)
    assert (report.lessons, report.lessons_changed, report.occurrences, report.occurrences_changed) == (2, 1, 2, 1)
    assert report.digest == rules_digest.current_digest() != report.digest_before
    assert meta(stack.user, rules_digest.DIGEST_KEY) == report.digest
    rules_digest._warned = False
    result, warning = recall(stack, LAMMPS)
    assert exact_ids(result) == [recorded["lesson_id"]] and warning == ""
    assert result["query"]["category"] == "lammps_lost_atoms"
    assert exact_ids(recall(stack, LIB)[0]) == [other["lesson_id"]]  # untouched
    with stack.user.session() as session:
        row = session.scalar(select(Signature).join(Lesson, Lesson.signature_id == Signature.id)
                             .where(Lesson.id == recorded["lesson_id"]))
        assert (row.category, row.count) == ("lammps_lost_atoms", 1) and row.embedding is None
        kept = session.scalars(select(LessonAlias).where(LessonAlias.lesson_id == recorded["lesson_id"])).all()
        assert [(a.fingerprint, a.source, a.excerpt) for a in kept] == [(recorded["fingerprint"], "refingerprint", None)]

    again = refingerprint(stack.user)
    assert not again.changed and again.as_dict()["changed"] is False


def test_dry_run_reports_and_writes_nothing(stack, site_rules):
    recorded = lesson(stack, LAMMPS, "use a smaller timestep")
    digest_before = meta(stack.user, rules_digest.DIGEST_KEY)
    site_rules()
    report = refingerprint(stack.user, dry_run=True)
    assert report.changed and report.lessons_changed == 1
    assert meta(stack.user, rules_digest.DIGEST_KEY) == digest_before
    with stack.user.session() as session:
        assert session.get(Lesson, recorded["lesson_id"]).fingerprint == recorded["fingerprint"]


def test_colliding_signatures_merge_counts_times_and_references(stack, site_rules):
    assert fingerprint(ATOMS_A).fingerprint != fingerprint(ATOMS_B).fingerprint  # apart under the built-in rules
    on_a = lesson(stack, ATOMS_A, "smaller timestep")
    on_b = lesson(stack, ATOMS_B, "check the restart file")
    ingest(stack.user, [ATOMS_A] * 3)
    ingest(stack.user, [ATOMS_B] * 2, start=2000)
    with stack.user.session() as session:
        before = {s.fingerprint: (s.count, s.first_seen, s.last_seen) for s in session.scalars(select(Signature))}
    generations = (int(meta(stack.user, GENERATION_KEY) or 0), int(meta(stack.user, REBUILD_GENERATION_KEY) or 0))

    site_rules()
    report = refingerprint(stack.user)
    assert (report.signatures_renamed, report.signatures_merged, report.signatures_new) == (1, 1, 0)
    with stack.user.session() as session:
        sigs = session.scalars(select(Signature)).all()
        assert len(sigs) == 1
        merged = sigs[0]
        a, b = before[on_a["fingerprint"]], before[on_b["fingerprint"]]
        assert merged.count == a[0] + b[0] == 5
        assert merged.first_seen == min(a[1], b[1]) and merged.last_seen == max(a[2], b[2])
        assert {o.signature_id for o in session.scalars(select(Occurrence))} == {merged.id}
        lessons = session.scalars(select(Lesson)).all()
        assert {(l.signature_id, l.fingerprint) for l in lessons} == {(merged.id, merged.fingerprint)}
    assert int(meta(stack.user, GENERATION_KEY)) > generations[0]
    assert int(meta(stack.user, REBUILD_GENERATION_KEY)) > generations[1]  # every index rebuilds
    assert not refingerprint(stack.user).changed


def test_alias_that_now_equals_its_lesson_is_dropped(stack, site_rules):
    on_a = lesson(stack, ATOMS_A, "smaller timestep")
    with stack.user.transaction() as session:
        assert add_alias(session, session.get(Lesson, on_a["lesson_id"]), alias_from_text(ATOMS_B),
                         source="feedback", actor="alice")
    site_rules()
    report = refingerprint(stack.user)
    assert report.aliases_dropped == 1
    with stack.user.session() as session:
        kept = session.scalars(select(LessonAlias)).all()
        # only the lesson's old fingerprint, kept without excerpt
        assert [(a.fingerprint, a.source) for a in kept] == [(on_a["fingerprint"], "refingerprint")]
    assert not refingerprint(stack.user).changed


def test_lessons_without_excerpt_are_kept_and_reported(stack, site_rules):
    recorded = lesson(stack, LAMMPS, "use a smaller timestep")
    with stack.user.transaction() as session:
        session.get(Lesson, recorded["lesson_id"]).excerpt = None
    site_rules()
    report = refingerprint(stack.user)
    assert report.lessons_without_excerpt == [recorded["lesson_id"]] and report.lessons_changed == 0
    with stack.user.session() as session:
        assert session.get(Lesson, recorded["lesson_id"]).fingerprint == recorded["fingerprint"]
