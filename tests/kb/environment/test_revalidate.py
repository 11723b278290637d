"""Revalidation scenarios built from real-format Lmod and scontrol snapshots."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from sqlalchemy import select, update

from hpcmem.ingest.environment import build_snapshot
from hpcmem.kb.environment.history import latest_snapshot, save_snapshot
from hpcmem.kb.lessons.evidence import confidence, feedback, judge_recall_events
from hpcmem.kb.lessons.write import Condition, LessonDraft, record_lesson
from hpcmem.kb.store.models import AuditEntry, Lesson, RecallEvent
from hpcmem.kb.environment.revalidate import revalidate
from hpcmem.kb.signatures.fingerprint import fingerprint
from tests.conftest import SAMPLES

ENV = SAMPLES / "env"
OCT, NOV = ENV / "cluster-2026-10", ENV / "cluster-2026-11"


def take(store, month: Path, cluster: str = "lab"):
    env, _ = build_snapshot((month / "spider-json.json").read_text(),
                            (month / "scontrol-show-partition-oneliner.txt").read_text(), live=False, previous=None)
    return save_snapshot(store, env, cluster=cluster, source=str(month))[0]


def lesson(store, *conditions: Condition, error: str = "ImportError: libcudart.so.11.0: cannot open shared object file",
           fix: str = "module load cuda/11.8", source: str = "human", **kw) -> str:
    sig = fingerprint(error)
    draft = LessonDraft(fingerprint=sig.fingerprint, template=sig.template, category=sig.category, cause="c",
                        fix=fix, source=source, author="alice", conditions=[Condition("cluster", "lab"), *conditions],
                        **kw)
    return record_lesson(store, draft, actor="alice")["lesson_id"]


def status(store, lesson_id: str) -> tuple[str, str | None]:
    with store.session() as s:
        row = s.get(Lesson, lesson_id)
        return row.status, row.status_reason


@pytest.fixture
def store(store_factory):
    store = store_factory().open()
    take(store, OCT)  # the environment the lessons were written in
    return store


def test_module_removed_expires(store):
    gone = lesson(store, Condition("module", "cuda/11.8", "11.8"))
    kept = lesson(store, Condition("module", "cuda/12.4", "12.4"), fix="module load cuda/12.4")
    report = revalidate(store, take(store, NOV))
    assert status(store, gone) == ("expired", "module cuda/11.8 is no longer installed")
    assert status(store, kept)[0] == "candidate"
    assert [c.lesson_id for c in report.changes] == [gone]


def test_default_changed_and_new_version_make_stale(store):
    gcc = lesson(store, Condition("module", "gcc/12.2.0", "12.2.0"), fix="module load gcc/12.2.0")
    mpi = lesson(store, Condition("module", "openmpi/4.1.6", "4.1.6"), fix="module load openmpi/4.1.6")
    revalidate(store, take(store, NOV))
    assert status(store, gcc) == ("stale", "module gcc: default changed 12.2.0 -> 13.2.0")
    state, reason = status(store, mpi)
    assert state == "stale" and "newer version(s) 5.0.3 available" in reason and "default changed 4.1.6 -> 5.0.3" in reason


def test_partition_removed_expires_and_restored_returns(store):
    big = lesson(store, Condition("partition", "bigmem"), fix="use -p bigmem")
    with store.transaction() as s:
        s.execute(update(Lesson).where(Lesson.id == big).values(status="validated"))
    revalidate(store, take(store, NOV))
    assert status(store, big) == ("expired", "partition bigmem no longer exists")
    report = revalidate(store, take(store, OCT))  # the partition comes back
    assert status(store, big) == ("validated", None)
    assert report.changes[0].before == "expired" and report.changes[0].after == "validated"


def test_max_time_lowered_below_the_fix_expires_with_the_reason(store):
    eight_hours = lesson(store, Condition("partition", "gpu_test"),
                         Condition("partition_limit", "gpu_test:MaxTime", str(8 * 3600), ">="),
                         error="slurmstepd: error: *** JOB 7 ON g1 CANCELLED AT 2026-10-01T00:00:00 DUE TO TIME LIMIT ***",
                         fix="--time=08:00:00 on gpu_test")
    three_hours = lesson(store, Condition("partition_limit", "gpu_test:MaxTime", str(3 * 3600), ">="),
                         error="slurmstepd: error: *** JOB 8 ON g1 CANCELLED AT 2026-10-01T00:00:00 DUE TO TIME LIMIT ***",
                         fix="--time=03:00:00 on gpu_test")
    revalidate(store, take(store, NOV))
    assert status(store, eight_hours) == (
        "expired", "partition gpu_test MaxTime is now 04:00:00; the fix needs >= 08:00:00")
    assert status(store, three_hours)[0] == "candidate"


def test_dry_run_changes_nothing_and_reruns_are_idempotent(store):
    gone = lesson(store, Condition("module", "cuda/11.8", "11.8"))
    nov = take(store, NOV)
    plan = revalidate(store, nov, dry_run=True)
    assert plan.dry_run and [c.after for c in plan.changes] == ["expired"]
    assert status(store, gone)[0] == "candidate"
    with store.session() as s:
        assert s.scalars(select(AuditEntry).where(AuditEntry.action == "revalidate")).all() == []
    first = revalidate(store, nov)
    second = revalidate(store, nov)
    assert len(first.changes) == 1 and second.changes == []
    with store.session() as s:
        [entry] = s.scalars(select(AuditEntry).where(AuditEntry.action == "revalidate")).all()
    assert entry.before["status"] == "candidate" and entry.after["status"] == "expired"
    assert entry.reason == "module cuda/11.8 is no longer installed"
    assert json.loads(json.dumps(plan.as_dict()))["changes"][0]["reasons"] == ["module cuda/11.8 is no longer installed"]


def test_lessons_for_another_cluster_are_not_judged(store):
    other = lesson(store, Condition("module", "cuda/11.8", "11.8"))
    with store.transaction() as s:
        row = s.get(Lesson, other)
        row.conditions[0].name = "della"
    report = revalidate(store, take(store, NOV))
    assert status(store, other)[0] == "candidate" and report.checked == 0


def test_valid_until_and_unconfirmed_period(store):
    dated = lesson(store, valid_until=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc))
    old = lesson(store, fix="something else")
    with store.transaction() as s:
        s.execute(update(Lesson).where(Lesson.id == old).values(
            created_at=dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)))
    revalidate(store, latest_snapshot(store), unconfirmed_days=180)
    assert status(store, dated) == ("expired", "valid until 2026-01-01, which has passed")
    state, reason = status(store, old)
    assert state == "stale" and reason.startswith("not confirmed for")


def test_manual_status_is_left_alone(store):
    manual = lesson(store, Condition("module", "cuda/12.4", "12.4"), fix="module load cuda/12.4")
    with store.transaction() as s:
        s.execute(update(Lesson).where(Lesson.id == manual).values(status="expired", status_reason="lead: wrong"))
    revalidate(store, take(store, NOV))
    assert status(store, manual) == ("expired", "lead: wrong")


def test_real_slurm_lmod_tree_v1_to_v2(store_factory):
    store = store_factory().open()
    lmod = ENV / "real-slurm" / "lmod"
    parts = (ENV / "real-slurm" / "partitions" / "scontrol-show-partition.txt").read_text()
    v1, _ = build_snapshot((lmod / "spider-json.json").read_text(), parts, live=False, previous=None)
    save_snapshot(store, v1, cluster="lab", source="tree v1")
    cuda = lesson(store, Condition("module", "cuda/11.8", "11.8"))
    gcc = lesson(store, Condition("module", "gcc/13.1.0", "13.1.0"), fix="module load gcc/13.1.0")
    v2, _ = build_snapshot((lmod / "spider-json.v2.json").read_text(), None, live=False,
                           previous=latest_snapshot(store))
    revalidate(store, save_snapshot(store, v2, cluster="lab", source="tree v2")[0])
    assert status(store, cuda)[0] == "expired"
    state, reason = status(store, gcc)
    assert state == "stale" and "default changed 13.1.0 -> 12.2.0" in reason and "14.1.0" in reason


def test_confidence_model_decays_old_evidence():
    now = dt.datetime(2026, 11, 30, tzinfo=dt.timezone.utc)
    fresh = confidence("agent", [("worked", now)] * 3, now)
    stale = confidence("agent", [("worked", now - dt.timedelta(days=365))] * 3, now)
    prior = confidence("agent", [], now)
    assert prior == 0.45 and fresh > stale > prior
    assert confidence("agent", [("failed", now)] * 2, now) < prior


def test_feedback_moves_confidence_and_recall_order(store_factory, tmp_path, monkeypatch):
    from hpcmem.kb.config import load_config
    from hpcmem.kb.recall.recaller import Recaller, RecallQuery
    from hpcmem.kb.store.stack import StoreStack

    config = load_config()
    stack = StoreStack.from_config(config)
    stack.user.open()
    good = lesson(stack.user, fix="module load cuda/11.8")
    bad = lesson(stack.user, fix="reinstall pytorch from source")
    with stack.user.transaction() as s:  # the bad one starts ahead
        s.execute(update(Lesson).where(Lesson.id == bad).values(confidence=0.7))
        s.execute(update(Lesson).where(Lesson.id == good).values(confidence=0.5))

    def order() -> list[str]:
        r = Recaller(stack, config, allow_model=False, record_events=False)
        try:
            result = r.recall(RecallQuery(text="ImportError: libcudart.so.11.0: cannot open shared object file"))
        finally:
            r.close()
        return [m["lesson_id"] for m in result["matches"] if m["lesson_id"]]

    assert order() == [bad, good]
    for _ in range(2):
        feedback(stack, bad, worked=False, actor="alice", job_id="123")
    up = feedback(stack, good, worked=True, actor="alice", job_id="124")
    down = feedback(stack, bad, worked=False, actor="alice")
    assert up["confidence"] > 0.6 and up["confirmations"] == 1
    assert down["confidence"] < 0.3 and down["contradictions"] == 3
    assert order() == [good, bad]
    stack.dispose()


def test_history_after_a_recall_becomes_evidence(store_factory):
    from hpcmem.ingest.sacct_ingest import ingest_sacct

    store = store_factory().open()
    oom = "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=9.batch. Some of your processes may have been killed by the cgroup out-of-memory handler."
    lid = lesson(store, error=oom, fix="--mem=32G")
    sig = fingerprint(oom)
    recalled = dt.datetime(2026, 11, 24, 9, 0, tzinfo=dt.timezone.utc)
    with store.transaction() as s:
        s.add(RecallEvent(lesson_id=lid, store="user", fingerprint=sig.fingerprint, user_name="bob", cluster="lab",
                          job_id="700", recalled_at=recalled))
        s.add(RecallEvent(lesson_id=lid, store="user", fingerprint=sig.fingerprint, user_name="carol", cluster="lab",
                          job_id="800", recalled_at=recalled))
    header = "JobID|JobName|User|State|ExitCode|Elapsed|ReqMem|MaxRSS|Submit|Start|End"
    rows = [  # bob: the OOM job, then the same job succeeds after the recall
        "700|align|bob|OUT_OF_MEMORY|0:125|00:10:00|8G||2026-11-24T08:00:00|2026-11-24T08:00:01|2026-11-24T08:10:00",
        "701|align|bob|COMPLETED|0:0|01:00:00|32G||2026-11-24T09:05:00|2026-11-24T09:05:01|2026-11-24T10:05:00",
        # carol: the same failure recurs after the recall
        "800|asm|carol|OUT_OF_MEMORY|0:125|00:10:00|8G||2026-11-24T08:00:00|2026-11-24T08:00:01|2026-11-24T08:10:00",
        "801|asm|carol|OUT_OF_MEMORY|0:125|00:10:00|16G||2026-11-24T09:10:00|2026-11-24T09:10:01|2026-11-24T09:20:00",
    ]
    ingest_sacct(store, [header, *rows], cluster="lab", tz=dt.timezone.utc)
    summary = judge_recall_events(store, now=dt.datetime(2026, 11, 30, tzinfo=dt.timezone.utc))
    assert (summary.worked, summary.recurred, summary.pending) == (1, 1, 0)
    with store.session() as s:
        row = s.get(Lesson, lid)
        kinds = sorted(e.kind for e in row.evidence)
    assert kinds == ["confirmed_by_history", "recurred"] and row.confirmations == 1 and row.contradictions == 1
    assert judge_recall_events(store).judged == 0  # each event is judged once


def test_a_success_on_another_cluster_is_not_the_recalled_jobs_fix(store_factory):
    from hpcmem.ingest.sacct_ingest import ingest_sacct

    store = store_factory().open()
    oom = "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=9.batch. Some of your processes may have been killed by the cgroup out-of-memory handler."
    lid = lesson(store, error=oom, fix="--mem=32G")
    recalled = dt.datetime(2026, 11, 24, 9, 0, tzinfo=dt.timezone.utc)
    with store.transaction() as s:
        s.add(RecallEvent(lesson_id=lid, store="user", fingerprint=fingerprint(oom).fingerprint, user_name="bob",
                          cluster="lab", job_id="700", recalled_at=recalled))
    header = "JobID|JobName|User|State|ExitCode|Elapsed|ReqMem|MaxRSS|Submit|Start|End"
    ingest_sacct(store, [header, "700|align|bob|OUT_OF_MEMORY|0:125|00:10:00|8G||2026-11-24T08:00:00|"
                                 "2026-11-24T08:00:01|2026-11-24T08:10:00"], cluster="lab", tz=dt.timezone.utc)
    # the same job name succeeds after the recall, but on another cluster: not this job's fix
    ingest_sacct(store, [header, "701|align|bob|COMPLETED|0:0|01:00:00|32G||2026-11-24T09:05:00|"
                                 "2026-11-24T09:05:01|2026-11-24T10:05:00"], cluster="other", tz=dt.timezone.utc)
    summary = judge_recall_events(store, now=dt.datetime(2026, 11, 30, tzinfo=dt.timezone.utc))
    assert (summary.worked, summary.recurred) == (0, 0)


def test_the_recall_outcome_check_reads_jobs_through_an_index(tmp_path):
    import sqlite3

    from hpcmem.kb.store.database import Store

    path = tmp_path / "store.db"
    Store(f"sqlite:///{path}").open().dispose()
    plan = sqlite3.connect(path).execute(
        "EXPLAIN QUERY PLAN SELECT id FROM job_records WHERE cluster = ? AND user_name = ? AND failed = 0 "
        "AND job_name = ? AND submit_time > ? AND submit_time <= ? LIMIT 1", ("c", "u", "n", "a", "b")).fetchall()
    assert "USING INDEX ix_job_records_cluster_user_name_submit_time" in plan[0][-1]


# --------------------------------------------------------------------------- scale: what is read


UTC = dt.timezone.utc


def bare_lesson(store, fix: str) -> str:
    """A lesson with no conditions at all (nothing a snapshot can contradict)."""
    sig = fingerprint("Segmentation fault (core dumped)")
    draft = LessonDraft(fingerprint=sig.fingerprint, template=sig.template, category=sig.category, cause="c",
                        fix=fix, source="human", author="alice")
    return record_lesson(store, draft, actor="alice")["lesson_id"]


def set_times(store, lesson_times: dict[str, dt.datetime], snapshot_times: dict[int, dt.datetime]) -> None:
    from hpcmem.kb.store.models import EnvSnapshot as SnapshotRow

    with store.transaction() as s:
        for lesson_id, when in lesson_times.items():
            s.execute(update(Lesson).where(Lesson.id == lesson_id).values(created_at=when, last_confirmed_at=when))
        for snapshot_id, when in snapshot_times.items():
            s.execute(update(SnapshotRow).where(SnapshotRow.id == snapshot_id).values(taken_at=when))


def test_only_lessons_that_can_change_are_read_and_each_snapshot_is_parsed_once(store, monkeypatch):
    import hpcmem.kb.environment.history as environment
    import hpcmem.kb.environment.revalidate as module

    oct_ = latest_snapshot(store)
    nov = take(store, NOV)
    lessons = {lesson(store, Condition("module", "cuda/11.8", "11.8"), fix=f"module load cuda/11.8 #{day}"):
               dt.datetime(2026, 10, day, 12, tzinfo=UTC) for day in range(2, 30)}  # 28 creation dates
    plain = [bare_lesson(store, "rebuild with -g"), bare_lesson(store, "run valgrind")]
    set_times(store, {**lessons, **{p: dt.datetime(2026, 11, 20, tzinfo=UTC) for p in plain}},
              {oct_.id: dt.datetime(2026, 10, 1, tzinfo=UTC), nov.id: dt.datetime(2026, 11, 1, tzinfo=UTC)})
    judged, parsed = [], []
    real_judge, real_from_row = module.judge, environment._from_row
    monkeypatch.setattr(module, "judge", lambda lesson, *a, **kw: judged.append(lesson.id) or real_judge(lesson, *a, **kw))
    monkeypatch.setattr(environment, "_from_row", lambda row: parsed.append(row.id) or real_from_row(row))

    report = revalidate(store, nov, unconfirmed_days=180, now=dt.datetime(2026, 11, 30, tzinfo=UTC))
    assert sorted(judged) == sorted(lessons)  # the two lessons without conditions are not read...
    assert report.checked == len(lessons) + len(plain)  # ...but counted as checked (nothing can change them)
    assert parsed == [oct_.id]  # 28 creation dates, one snapshot in force: parsed once
    assert {c.lesson_id for c in report.changes} == set(lessons)


def reference_changes(store, snapshot, *, at, unconfirmed_days) -> tuple[int, list[tuple]]:
    """Revalidation as first written: every lesson through the ORM, each one's base
    snapshot looked up on its own. The oracle for the planned changes."""
    from sqlalchemy.orm import selectinload

    from hpcmem.kb.environment.history import snapshot_at
    from hpcmem.kb.environment.revalidate import judge

    checked, changes = 0, []
    with store.session() as s:
        for row in s.scalars(select(Lesson).options(selectinload(Lesson.conditions))
                             .where(Lesson.status != "rejected")).all():
            if row.status in ("stale", "expired") and row.previous_status is None:
                continue
            base = snapshot_at(store, snapshot.cluster, row.created_at)
            verdict = judge(row, snapshot, base, at=at, unconfirmed_days=unconfirmed_days)
            if verdict is None:
                continue
            checked += 1
            if verdict.status == "ok":
                if row.previous_status is not None:
                    changes.append((row.id, row.status, row.previous_status, ("every condition holds again",)))
                continue
            if (verdict.status, "; ".join(verdict.reasons)) != (row.status, row.status_reason):
                changes.append((row.id, row.status, verdict.status, tuple(verdict.reasons)))
    return checked, sorted(changes)


def test_outcome_equals_the_per_lesson_reference_on_a_mixed_sample(store):
    """Four snapshots, lessons written under each (and before the first), every kind of
    condition, manual and revalidated statuses, valid_until and the unconfirmed rule."""
    from hpcmem.kb.environment.snapshot import EnvSnapshot

    oct_ = latest_snapshot(store)
    nov = take(store, NOV)
    no_cuda = EnvSnapshot({k: v for k, v in nov.snapshot.modules.items() if k != "cuda"}, nov.snapshot.partitions)
    dec = save_snapshot(store, no_cuda, cluster="lab", source="dec")[0]
    conditions = [
        (Condition("module", "cuda/11.8", "11.8"),), (Condition("module", "cuda/12.4", "12.4"),),
        (Condition("module", "gcc/12.2.0", "12.2.0"),), (Condition("module", "openmpi/4.1.6", "4.1.6"),),
        (Condition("partition", "bigmem"),), (Condition("partition_limit", "gpu_test:MaxTime", str(8 * 3600), ">="),),
        (Condition("partition", "gpu_test"), Condition("module", "cuda/11.8", "11.8")), (),
    ]
    times = [dt.datetime(2026, 9, 15, tzinfo=UTC), dt.datetime(2026, 10, 15, tzinfo=UTC),
             dt.datetime(2026, 11, 1, 6, tzinfo=UTC), dt.datetime(2026, 11, 15, tzinfo=UTC),
             dt.datetime(2026, 12, 15, tzinfo=UTC), dt.datetime(2025, 1, 1, tzinfo=UTC)]
    created: dict[str, dt.datetime] = {}
    statuses: dict[str, dict] = {}
    n = 0
    for conds in conditions:
        for when in times:
            for state in ({}, {"status": "validated"}, {"status": "stale", "previous_status": "candidate",
                                                        "status_reason": "old"},
                          {"status": "expired", "status_reason": "lead: wrong"}, {"status": "rejected"}):
                n += 1
                lesson_id = lesson(store, *conds, fix=f"fix number {n}",
                                   valid_until=dt.datetime(2026, 12, 1, tzinfo=UTC) if n % 7 == 0 else None)
                created[lesson_id], statuses[lesson_id] = when, state
    set_times(store, created, {oct_.id: dt.datetime(2026, 10, 1, tzinfo=UTC),
                               nov.id: dt.datetime(2026, 11, 1, 6, tzinfo=UTC),  # the same day as some lessons
                               dec.id: dt.datetime(2026, 12, 1, tzinfo=UTC)})
    with store.transaction() as s:
        for lesson_id, state in statuses.items():
            if state:
                s.execute(update(Lesson).where(Lesson.id == lesson_id).values(**state))
    now_snapshot = take(store, OCT)  # cuda/11.8 is back, bigmem too
    at = dt.datetime(2027, 1, 10, tzinfo=UTC)

    for snapshot in (now_snapshot, dec):
        for days in (None, 180, 30):
            checked, expected = reference_changes(store, snapshot, at=at, unconfirmed_days=days)
            plan = revalidate(store, snapshot, dry_run=True, unconfirmed_days=days, now=at)
            assert plan.checked == checked
            assert sorted((c.lesson_id, c.before, c.after, tuple(c.reasons)) for c in plan.changes) == expected
            assert expected  # the sample exercises changes in every setting
    report = revalidate(store, dec, unconfirmed_days=30, now=at)
    with store.session() as s:
        after = {row.id: row.status for row in s.scalars(select(Lesson))}
    assert all(after[c.lesson_id] == c.after for c in report.changes)
    assert revalidate(store, dec, unconfirmed_days=30, now=at).changes == []  # and a rerun changes nothing
