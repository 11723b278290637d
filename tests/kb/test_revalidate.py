"""Revalidation scenarios built from real-format Lmod and scontrol snapshots."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from sqlalchemy import select, update

from hpcmem.ingest.environment import build_snapshot
from hpcmem.kb.environment import latest_snapshot, save_snapshot
from hpcmem.kb.evidence import confidence, feedback, judge_recall_events
from hpcmem.kb.lessons import Condition, LessonDraft, record_lesson
from hpcmem.kb.models import AuditEntry, Lesson, RecallEvent
from hpcmem.kb.revalidate import revalidate
from hpcmem.kb.signatures import fingerprint
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
    from hpcmem.kb.recall import Recaller, RecallQuery
    from hpcmem.kb.stack import StoreStack

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
