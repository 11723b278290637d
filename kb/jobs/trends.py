"""Failure trends of one store, aggregated in SQL: what the lab lead's dashboard shows.

- ``weekly``      failures per category per ISO week (Monday start), for the last N weeks;
- ``top``         the signatures hit again most often: users who hit each one more than once;
- ``recurrence``  per lab (the Slurm account of the jobs), the share of users who hit a failure
                  signature again, and whether that share falls once a lesson exists;
- ``lessons``     how many lessons are stale or expired now, and when revalidation last
                  changed one.

Definitions (the page repeats them):

A *pair* is one user and one signature the user hit at least once; it *recurred* when the
user hit that signature again. A signature's *lesson time* is the earliest moment a lesson
for it existed in this store: a lesson on its fingerprint, or a lesson that knows it as an
alias (from when the alias was learnt), that is not rejected today. A pair whose first hit
came after the lesson time is *covered*: hpcmem could have recalled the fix after that first
hit. Otherwise it is *uncovered*, and it counts as recurred only if the second hit also came
before the lesson time. The repeats are also split by whether a lesson existed at the time
of the repeat (the second hit). Occurrences without an end time, user or signature are left
out.

Every figure is one grouped query over the occurrences, helped by the covering index
``(signature_id, user_name, end_time, account)`` (migration 0005); Python only adds up the
per-day and per-(signature, account) rows. Like the rest of ``kb``, this module never prints.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import String, and_, case, cast, func, literal, select, union_all

from hpcmem.kb.store.models import AuditEntry, Lesson, LessonAlias, Occurrence, Signature
from hpcmem.kb.store.database import Store
from hpcmem.kb.store.column_types import utcnow

NO_LAB = "(no account)"


@dataclass
class Recurrence:
    """Pair counts for one lab (or all labs together)."""

    lab: str
    pairs: int = 0
    recurred: int = 0
    covered: int = 0  # first hit after a lesson existed
    covered_recurred: int = 0
    uncovered: int = 0
    uncovered_recurred: int = 0  # second hit also before any lesson
    repeats_with_lesson: int = 0  # the second hit came when a lesson existed
    repeats_without_lesson: int = 0

    def add(self, other: "Recurrence") -> None:
        for name in ("pairs", "recurred", "covered", "covered_recurred", "uncovered", "uncovered_recurred",
                     "repeats_with_lesson", "repeats_without_lesson"):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    @staticmethod
    def share(part: int, whole: int) -> float | None:
        return part / whole if whole else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "lab": self.lab, "pairs": self.pairs, "recurred": self.recurred,
            "recurred_share": self.share(self.recurred, self.pairs),
            "covered": self.covered, "covered_recurred": self.covered_recurred,
            "covered_share": self.share(self.covered_recurred, self.covered),
            "uncovered": self.uncovered, "uncovered_recurred": self.uncovered_recurred,
            "uncovered_share": self.share(self.uncovered_recurred, self.uncovered),
            "repeats_with_lesson": self.repeats_with_lesson, "repeats_without_lesson": self.repeats_without_lesson,
        }


@dataclass
class Trends:
    weeks: list[str]  # Monday of each week, oldest first (ISO date)
    categories: list[str]
    weekly: dict[str, dict[str, int]]  # category -> week -> failures
    top: list[dict[str, Any]]
    recurrence: list[dict[str, Any]]  # per lab, then "all labs"
    lessons: dict[str, Any]
    generated_at: str = field(default_factory=lambda: utcnow().isoformat())

    def as_dict(self) -> dict[str, Any]:
        return {"weeks": self.weeks, "categories": self.categories, "weekly": self.weekly, "top": self.top,
                "recurrence": self.recurrence, "lessons": self.lessons, "generated_at": self.generated_at}


def _monday(day: dt.date) -> dt.date:
    return day - dt.timedelta(days=day.weekday())


def _day(column):
    # 'YYYY-MM-DD' on both dialects: SQLite keeps datetimes as ISO text, PostgreSQL casts
    # a timestamp to ISO text; the first ten characters are the (UTC) day.
    return func.substr(cast(column, String), 1, 10)


def weekly_failures(session, *, weeks: int, now: dt.datetime) -> tuple[list[str], dict[str, dict[str, int]]]:
    """Failures per category per week for the last ``weeks`` weeks (the current one included)."""
    first = _monday(now.date()) - dt.timedelta(weeks=weeks - 1)
    since = dt.datetime.combine(first, dt.time(), tzinfo=dt.timezone.utc)
    day = _day(Occurrence.end_time).label("day")
    category = func.coalesce(Signature.category, literal("unclassified")).label("category")
    rows = session.execute(
        select(day, category, func.count().label("n"))
        .select_from(Occurrence).outerjoin(Signature, Signature.id == Occurrence.signature_id)
        .where(Occurrence.end_time >= since)
        .group_by(day, category)
    ).all()
    week_keys = [(first + dt.timedelta(weeks=i)).isoformat() for i in range(weeks)]
    out: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(week_keys, 0))
    for day_text, cat, n in rows:
        week = _monday(dt.date.fromisoformat(day_text)).isoformat()
        if week in out[cat]:
            out[cat][week] += n
    ordered = sorted(out, key=lambda c: -sum(out[c].values()))
    return week_keys, {c: out[c] for c in ordered}


def _lesson_times():
    """signature_id -> earliest time a non-rejected lesson covered it (fingerprint or alias)."""
    live = Lesson.status != "rejected"
    own = select(Lesson.fingerprint.label("fingerprint"), Lesson.created_at.label("at")).where(live)
    alias = (select(LessonAlias.fingerprint.label("fingerprint"), LessonAlias.created_at.label("at"))
             .join(Lesson, Lesson.id == LessonAlias.lesson_id).where(live))
    known = union_all(own, alias).subquery("known")
    return (select(Signature.id.label("signature_id"), func.min(known.c.at).label("lesson_at"))
            .join(known, known.c.fingerprint == Signature.fingerprint)
            .group_by(Signature.id).subquery("lesson_times"))


def pair_rows(session) -> list[Any]:
    """Per (signature, lab): pair counts for the recurrence and top-signature figures."""
    lt = _lesson_times()
    has_lesson = lt.c.lesson_at.is_not(None)
    pairs = (
        select(
            Occurrence.signature_id.label("signature_id"),
            func.max(Occurrence.account).label("lab"),
            func.count().label("hits"),
            func.min(Occurrence.end_time).label("first_at"),
            func.sum(case((and_(has_lesson, Occurrence.end_time < lt.c.lesson_at), 1), else_=0)).label("before"),
            func.max(lt.c.lesson_at).label("lesson_at"),
        )
        .select_from(Occurrence).outerjoin(lt, lt.c.signature_id == Occurrence.signature_id)
        .where(Occurrence.signature_id.is_not(None), Occurrence.user_name.is_not(None),
               Occurrence.end_time.is_not(None))
        .group_by(Occurrence.signature_id, Occurrence.user_name)
        .subquery("pairs")
    )
    p = pairs.c
    recurred = p.hits >= 2
    lesson = p.lesson_at.is_not(None)
    covered = and_(lesson, p.first_at >= p.lesson_at)
    # The second hit came before the lesson time iff at least two hits did.
    repeat_before = and_(recurred, p.before >= 2)
    repeat_no_lesson = and_(recurred, ~lesson)

    def total(cond):
        return func.sum(case((cond, 1), else_=0))

    return session.execute(
        select(
            p.signature_id, p.lab, func.count().label("pairs"), func.sum(p.hits).label("hits"),
            total(recurred).label("recurred"),
            total(covered).label("covered"), total(and_(covered, recurred)).label("covered_recurred"),
            total(~covered).label("uncovered"),
            # a covered pair has no hit before the lesson time, so these repeats are all uncovered ones
            (total(repeat_before) + total(repeat_no_lesson)).label("repeats_without_lesson"),
        ).group_by(p.signature_id, p.lab)
    ).all()


def _recurrence(rows) -> tuple[list[dict[str, Any]], dict[int, dict[str, int]]]:
    labs: dict[str, Recurrence] = {}
    per_sig: dict[int, dict[str, int]] = defaultdict(lambda: {"hits": 0, "users": 0, "repeat_users": 0})
    for r in rows:
        lab = r.lab or NO_LAB
        rec = labs.setdefault(lab, Recurrence(lab))
        part = Recurrence(lab, pairs=r.pairs, recurred=r.recurred, covered=r.covered,
                          covered_recurred=r.covered_recurred, uncovered=r.uncovered,
                          uncovered_recurred=r.repeats_without_lesson,
                          repeats_without_lesson=r.repeats_without_lesson,
                          repeats_with_lesson=r.recurred - r.repeats_without_lesson)
        rec.add(part)
        sig = per_sig[r.signature_id]
        sig["hits"] += int(r.hits)
        sig["users"] += r.pairs
        sig["repeat_users"] += r.recurred
    everyone = Recurrence("all labs")
    for rec in labs.values():
        everyone.add(rec)
    ordered = [labs[k].as_dict() for k in sorted(labs)]
    return ordered + ([everyone.as_dict()] if len(labs) != 1 else []), per_sig


def _top(session, per_sig: dict[int, dict[str, int]], limit: int) -> list[dict[str, Any]]:
    ranked = sorted(per_sig.items(), key=lambda kv: (-kv[1]["repeat_users"], -kv[1]["hits"], kv[0]))[:limit]
    ids = [sig_id for sig_id, _ in ranked]
    if not ids:
        return []
    sigs = {s.id: s for s in session.execute(
        select(Signature.id, Signature.fingerprint, Signature.category, Signature.template)
        .where(Signature.id.in_(ids))).all()}
    live = dict(session.execute(
        select(Lesson.fingerprint, func.count()).where(
            Lesson.fingerprint.in_([sigs[i].fingerprint for i in ids if i in sigs]),
            Lesson.status.in_(("candidate", "validated", "stale")))
        .group_by(Lesson.fingerprint)).all())
    out = []
    for sig_id, counts in ranked:
        sig = sigs.get(sig_id)
        if sig is None:
            continue
        out.append({"fingerprint": sig.fingerprint, "category": sig.category, "template": sig.template,
                    "live_lessons": live.get(sig.fingerprint, 0), **counts})
    return out


def lesson_health(session) -> dict[str, Any]:
    """Lessons stale or expired now; by whom (revalidation or a person); last revalidation change."""
    rows = session.execute(
        select(Lesson.status, Lesson.previous_status.is_not(None).label("by_revalidation"), func.count())
        .where(Lesson.status.in_(("stale", "expired"))).group_by(Lesson.status, "by_revalidation")
    ).all()
    counts = {"stale": 0, "expired": 0, "stale_by_revalidation": 0, "expired_by_revalidation": 0}
    for status, by_reval, n in rows:
        counts[status] += n
        if by_reval:
            counts[f"{status}_by_revalidation"] += n
    last = session.scalar(select(func.max(AuditEntry.at)).where(AuditEntry.action == "revalidate"))
    total = session.scalar(select(func.count()).select_from(Lesson)) or 0
    return counts | {"lessons": total, "last_revalidation": last.isoformat() if last else None}


def data_version(store: Store) -> tuple:
    """A cheap key that changes whenever the figures could (a few ms at 10^6 occurrences):
    callers may keep a store's :class:`Trends` until it changes."""
    with store.session() as session:
        occurrences = session.execute(select(func.count(), func.max(Occurrence.id))).one()
        lessons = session.execute(select(func.count(), func.max(Lesson.updated_at))).one()
        aliases = session.execute(select(func.count(), func.max(LessonAlias.id))).one()
        audit = session.scalar(select(func.max(AuditEntry.id)))
    return (*occurrences, *lessons, *aliases, audit)


def store_trends(store: Store, *, weeks: int = 12, top: int = 10, now: dt.datetime | None = None) -> Trends:
    """The dashboard's figures for one store (read only: nothing is written)."""
    now = now or utcnow()
    with store.session() as session:
        week_keys, weekly = weekly_failures(session, weeks=weeks, now=now)
        recurrence, per_sig = _recurrence(pair_rows(session))
        return Trends(weeks=week_keys, categories=list(weekly), weekly=weekly, top=_top(session, per_sig, top),
                      recurrence=recurrence, lessons=lesson_health(session))
