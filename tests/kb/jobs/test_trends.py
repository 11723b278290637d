"""The dashboard's trends on both backends, against figures worked out by hand."""

from __future__ import annotations

import datetime as dt
import uuid

from hpcmem.kb.store.models import AuditEntry, Lesson, LessonAlias, Occurrence, Signature
from hpcmem.kb.jobs.trends import store_trends

UTC = dt.timezone.utc
BASE = dt.datetime(2027, 1, 1, 12, tzinfo=UTC)  # a Friday
NOW = dt.datetime(2027, 1, 20, 9, tzinfo=UTC)  # a Wednesday; its week starts 2027-01-18


def day(n: int) -> dt.datetime:
    return BASE + dt.timedelta(days=n)


def lesson(fp: str, created: int, status: str = "validated", **kw) -> Lesson:
    return Lesson(id=str(uuid.uuid4()), fingerprint=fp, scope="lab", scope_name="vision", cause="c", fix="f",
                  source="human", status=status, created_at=day(created), updated_at=day(created), **kw)


def seed(store) -> None:
    """Signature A has a lesson from day 10; B is an alias of a lesson on D from day 15; C's
    only lesson is rejected, so C never had one."""
    with store.transaction() as s:
        sigs = {name: Signature(fingerprint=f"fp-{name}", category=cat, template=f"template {name}")
                for name, cat in (("A", "host_oom"), ("B", "timeout"), ("C", "module_missing"), ("D", "timeout"))}
        s.add_all(sigs.values())
        s.flush()
        s.add(lesson("fp-A", 10))
        on_d = lesson("fp-D", 1)
        on_d.aliases = [LessonAlias(fingerprint="fp-B", template="template B", category="timeout", source="feedback",
                                    created_at=day(15))]
        s.add(on_d)
        s.add(lesson("fp-C", 0, status="rejected"))
        s.add(lesson("fp-X", 0, status="stale", previous_status="validated", status_reason="module gone"))
        s.add(lesson("fp-Y", 0, status="expired", status_reason="by hand"))
        s.add(AuditEntry(actor="hpcmem-revalidate", action="revalidate", object_type="lesson", object_id="x",
                         at=day(17)))
        hits = [("ann", "A", 1), ("ann", "A", 5),    # both before the lesson: a repeat without one
                ("bo", "A", 8), ("bo", "A", 12),     # first before, repeat after: a repeat with a lesson
                ("cy", "A", 11),                     # first hit with a lesson, no repeat
                ("dee", "A", 13), ("dee", "A", 14),  # first hit with a lesson, repeated anyway
                ("eve", "B", 2), ("eve", "B", 3),    # before B's alias was learnt
                ("gus", "C", 4), ("gus", "C", 18)]   # the rejected lesson does not count
        for i, (user, sig, when) in enumerate(hits):
            s.add(Occurrence(signature_id=sigs[sig].id, cluster="della", job_id=str(1000 + i), user_name=user,
                             account="x", state="FAILED", source="sacct", end_time=day(when)))
        s.add(Occurrence(signature_id=sigs["B"].id, cluster="della", job_id="2000", user_name="fay", account="y",
                         state="FAILED", source="sacct", end_time=day(16)))  # after the alias: covered
        s.add(Occurrence(signature_id=sigs["A"].id, cluster="della", job_id="3000", user_name=None, account="x",
                         state="FAILED", source="sacct", end_time=day(6)))  # no user: not a pair


def test_trends_match_the_hand_counts(store_factory):
    store = store_factory("vision", "lab")
    store.open()
    seed(store)
    trends = store_trends(store, weeks=4, now=NOW).as_dict()

    assert trends["weeks"] == ["2026-12-28", "2027-01-04", "2027-01-11", "2027-01-18"]
    assert trends["categories"][0] == "host_oom"
    assert sum(trends["weekly"]["host_oom"].values()) == 8  # the user-less failure is still a failure
    assert trends["weekly"]["module_missing"] == {"2026-12-28": 0, "2027-01-04": 1, "2027-01-11": 0,
                                                  "2027-01-18": 1}
    assert sum(trends["weekly"]["timeout"].values()) == 3

    by_lab = {r["lab"]: r for r in trends["recurrence"]}
    x = by_lab["x"]
    assert (x["pairs"], x["recurred"]) == (6, 5)
    assert (x["covered"], x["covered_recurred"]) == (2, 1)  # cy, dee
    assert (x["uncovered"], x["uncovered_recurred"]) == (4, 3)  # ann, eve, gus (bo's repeat came with a lesson)
    assert (x["repeats_with_lesson"], x["repeats_without_lesson"]) == (2, 3)  # bo, dee / ann, eve, gus
    assert x["covered_share"] == 0.5 and x["uncovered_share"] == 0.75
    assert (by_lab["y"]["pairs"], by_lab["y"]["covered"], by_lab["y"]["recurred"]) == (1, 1, 0)
    assert (by_lab["all labs"]["pairs"], by_lab["all labs"]["recurred"]) == (7, 5)

    top = [(t["fingerprint"], t["users"], t["repeat_users"], t["hits"], t["live_lessons"]) for t in trends["top"]]
    assert top == [("fp-A", 4, 3, 7, 1), ("fp-B", 2, 1, 3, 0), ("fp-C", 1, 1, 2, 0)]

    health = trends["lessons"]
    assert (health["stale"], health["stale_by_revalidation"], health["expired"], health["expired_by_revalidation"]) \
        == (1, 1, 1, 0)
    assert health["last_revalidation"].startswith("2027-01-18")


def test_empty_store(store_factory):
    store = store_factory("vision", "lab")
    store.open()
    trends = store_trends(store, weeks=2, now=NOW).as_dict()
    assert trends["weekly"] == {} and trends["top"] == []
    assert trends["recurrence"] == [{"lab": "all labs", "pairs": 0, "recurred": 0, "recurred_share": None,
                                     "covered": 0, "covered_recurred": 0, "covered_share": None, "uncovered": 0,
                                     "uncovered_recurred": 0, "uncovered_share": None, "repeats_with_lesson": 0,
                                     "repeats_without_lesson": 0}]
    assert trends["lessons"]["last_revalidation"] is None
