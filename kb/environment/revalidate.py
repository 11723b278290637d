"""Revalidation: compare every lesson's conditions with the latest environment snapshot.

Verdicts, most severe first:

- **expired** - the lesson cannot work as written: a module version it needs is gone, its
  partition is gone, a partition limit its fix relies on is now violated (a fix raising
  ``--time`` to 12 h needs the partition's MaxTime >= 12 h), the site would now refuse its
  job resubmitted with the fix's sbatch options (when the snapshot has the site's nodes, QOS
  and associations: ``site_check.fix_refusals``), or its ``valid_until`` date has passed;
- **stale** - it may still work but needs review: the default version of a module it
  names changed, a newer version of that module appeared since the lesson was written, or
  nothing has confirmed it for ``revalidate.unconfirmed_days``;
- **ok** - everything it depends on holds.

A lesson revalidation expires or marks stale remembers its previous status; when its
conditions hold again (a module reinstalled, a partition restored) it goes back to it.
Rejected lessons, and lessons a person expired, are left alone. Running it twice changes
nothing the second time; every change is written to the audit log with the reasons.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from sqlalchemy import Text, and_, bindparam, cast, exists, func, insert, not_, or_, select, update
from sqlalchemy.orm import aliased

from hpcmem.kb.environment.snapshot import EnvSnapshot
from hpcmem.kb.environment.lmod_versions import lmod_version_key
from hpcmem.kb.environment.history import SnapshotHistory, StoredSnapshot
from hpcmem.kb.store.models import AuditEntry, Lesson, LessonCondition
from hpcmem.kb.store.column_types import utcnow

ACTIVE = ("candidate", "validated")
SEVERITY = {"ok": 0, "stale": 1, "expired": 2}
# partition_limit fields (as stored by learn: "PARTITION:FIELD") -> PartitionInfo attribute
LIMIT_FIELDS = {
    "MaxTime": "max_time_s", "DefaultTime": "default_time_s", "MaxMemPerNode": "max_mem_per_node_mb",
    "MaxMemPerCPU": "max_mem_per_cpu_mb", "MaxNodes": "max_nodes",
}


@dataclass
class Verdict:
    status: str = "ok"
    reasons: list[str] = field(default_factory=list)

    def worsen(self, status: str, reason: str) -> None:
        if SEVERITY[status] > SEVERITY[self.status]:
            self.status = status
        self.reasons.append(reason)


@dataclass
class StatusChange:
    lesson_id: str
    fingerprint: str
    before: str
    after: str
    reasons: list[str]

    def as_dict(self) -> dict[str, Any]:
        return {"lesson_id": self.lesson_id, "fingerprint": self.fingerprint, "before": self.before,
                "after": self.after, "reasons": self.reasons}


@dataclass
class RevalidationReport:
    snapshot_id: int | None
    checked: int = 0
    changes: list[StatusChange] = field(default_factory=list)
    dry_run: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"snapshot_id": self.snapshot_id, "checked": self.checked, "dry_run": self.dry_run,
                "changed": len(self.changes), "changes": [c.as_dict() for c in self.changes]}


def _hms(seconds: int | None) -> str:
    if seconds is None:
        return "UNLIMITED"
    days, rest = divmod(int(seconds), 86400)
    return (f"{days}-" if days else "") + f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"


def _format_limit(field_name: str, value: int | None) -> str:
    if field_name.endswith("Time"):
        return _hms(value)
    return "UNLIMITED" if value is None else f"{value}M" if "Mem" in field_name else str(value)


def check_module(cond: dict[str, Any], now: EnvSnapshot, base: EnvSnapshot | None, verdict: Verdict) -> None:
    name, _, version = cond["name"].partition("/")
    version = version or cond.get("value") or ""
    module = now.modules.get(name)
    if module is None or (version and version not in module.versions):
        verdict.worsen("expired", f"module {name}/{version} is no longer installed")
        return
    before = base.modules.get(name) if base is not None else None
    if before is None:
        return
    if before.default != module.default:
        verdict.worsen("stale", f"module {name}: default changed {before.default} -> {module.default}")
    newer = [v for v in module.versions if v not in before.versions
             and lmod_version_key(v) > lmod_version_key(version or "0")]
    if newer:
        verdict.worsen("stale", f"module {name}: newer version(s) {', '.join(newer)} available since the lesson")


def check_partition(cond: dict[str, Any], now: EnvSnapshot, verdict: Verdict) -> None:
    if cond["name"] not in now.partitions:
        verdict.worsen("expired", f"partition {cond['name']} no longer exists")


def check_limit(cond: dict[str, Any], now: EnvSnapshot, verdict: Verdict) -> None:
    partition, _, field_name = str(cond["name"]).rpartition(":")
    info = now.partitions.get(partition)
    if info is None:
        verdict.worsen("expired", f"partition {partition} no longer exists")
        return
    attribute = LIMIT_FIELDS.get(field_name)
    if attribute is None or not str(cond.get("value") or "").isdigit():
        return  # a limit we cannot check is not a reason to expire
    needed, actual = int(cond["value"]), getattr(info, attribute)
    op = cond.get("op") or ">="
    if actual is None:  # UNLIMITED satisfies any lower bound
        holds = op == ">="
    elif op == ">=":
        holds = actual >= needed
    elif op == "<=":
        holds = actual <= needed
    else:
        holds = actual == needed
    if not holds:
        verdict.worsen("expired", f"partition {partition} {field_name} is now {_format_limit(field_name, actual)}; "
                                  f"the fix needs {op} {_format_limit(field_name, needed)}")


def check_fix(lesson: Any, now: EnvSnapshot, verdict: Verdict) -> None:
    """The lesson's job with its fix's sbatch options, checked against today's site limits."""
    from hpcmem.kb.environment.site_check import fix_refusals

    for problem in fix_refusals(getattr(lesson, "job_context", None), getattr(lesson, "actions", None) or [], now,
                                getattr(lesson, "author", None)):
        verdict.worsen("expired", f"the site would refuse the fix now: {problem.message}")


class _Condition(NamedTuple):
    kind: str
    name: str
    value: str | None
    op: str | None


@dataclass(slots=True)
class _LessonRow:
    """The columns revalidation reads and writes, without the ORM graph."""

    id: str
    fingerprint: str
    status: str
    status_reason: str | None
    previous_status: str | None
    created_at: dt.datetime
    last_confirmed_at: dt.datetime | None
    valid_until: dt.datetime | None
    actions: list[dict[str, Any]] | None = None
    job_context: dict[str, Any] | None = None
    author: str | None = None
    conditions: list[_Condition] = field(default_factory=list)


def judge(lesson: Any, now_snapshot: StoredSnapshot | None, base: StoredSnapshot | None, *,
          at: dt.datetime, unconfirmed_days: int | None) -> Verdict | None:
    """The verdict for one lesson (a Lesson or anything with its columns and conditions),
    or None when the snapshot does not concern it."""
    verdict = Verdict()
    conditions = [{"kind": c.kind, "name": c.name, "value": c.value, "op": c.op} for c in lesson.conditions]
    if now_snapshot is not None:
        clusters = {c["name"] for c in conditions if c["kind"] == "cluster"}
        if clusters and now_snapshot.cluster not in clusters:
            return None  # a lesson for another cluster: this snapshot says nothing about it
        env = now_snapshot.snapshot
        for cond in conditions:
            if cond["kind"] == "module":
                check_module(cond, env, base.snapshot if base else None, verdict)
            elif cond["kind"] == "partition":
                check_partition(cond, env, verdict)
            elif cond["kind"] == "partition_limit":
                check_limit(cond, env, verdict)
        if env.has_site_limits:
            check_fix(lesson, env, verdict)
    if lesson.valid_until is not None and lesson.valid_until <= at:
        verdict.worsen("expired", f"valid until {lesson.valid_until:%Y-%m-%d}, which has passed")
    if unconfirmed_days:
        last = lesson.last_confirmed_at or lesson.created_at
        if last is not None and at - last > dt.timedelta(days=unconfirmed_days):
            verdict.worsen("stale", f"not confirmed for {(at - last).days} days (limit {unconfirmed_days})")
    return verdict


def revalidate(store, snapshot: StoredSnapshot | None, *, dry_run: bool = False, actor: str = "hpcmem-revalidate",
               unconfirmed_days: int | None = None, now: dt.datetime | None = None) -> RevalidationReport:
    """Apply (or with ``dry_run`` only plan) the status changes the snapshot implies.

    Only lessons that can change are read: those with conditions (when there is a
    snapshot), an expired ``valid_until``, too long unconfirmed, or a status revalidation
    set. Every other lesson is ok by definition; it is counted as checked, not loaded.
    """
    at = now or utcnow()
    report = RevalidationReport(snapshot.id if snapshot else None, dry_run=dry_run)
    # Lessons a person expired or marked stale are not ours to undo; rejected ones are left alone.
    ours = and_(Lesson.status != "rejected",
                or_(Lesson.status.not_in(("stale", "expired")), Lesson.previous_status.is_not(None)))
    condition = aliased(LessonCondition)  # not correlated with the conditions query's own table
    has_conditions = exists().where(condition.lesson_id == Lesson.id)
    # Each term is true or false, never NULL, so NOT (any of them) counts the rest.
    can_change = [Lesson.previous_status.is_not(None), and_(Lesson.valid_until.is_not(None), Lesson.valid_until <= at)]
    if unconfirmed_days:
        cutoff = at - dt.timedelta(days=unconfirmed_days)
        can_change.append(func.coalesce(Lesson.last_confirmed_at, Lesson.created_at) < cutoff)
    if snapshot is not None:
        can_change.append(has_conditions)
        if snapshot.snapshot.has_site_limits:  # a fix with sbatch options is checked against them
            can_change.append(func.coalesce(cast(Lesson.actions, Text), "").like('%"sbatch"%'))
    wanted = and_(ours, or_(*can_change))
    history = SnapshotHistory(store, snapshot.cluster) if snapshot is not None else None
    with store.transaction() as session:
        report.checked = session.scalar(select(func.count()).select_from(Lesson).where(ours, not_(or_(*can_change))))
        lessons = _load(session, wanted, with_conditions=snapshot is not None)
        changes: list[tuple[_LessonRow, str, str | None, str | None, StatusChange]] = []
        for lesson in lessons:
            base = None
            if snapshot is not None and any(c.kind == "module" for c in lesson.conditions):
                base = history.at(lesson.created_at)  # what was installed when the lesson was written
            verdict = judge(lesson, snapshot, base, at=at, unconfirmed_days=unconfirmed_days)
            if verdict is None:
                continue
            report.checked += 1
            planned = _plan(lesson, verdict)
            if planned is not None:
                changes.append((lesson, *planned))
                report.changes.append(planned[-1])
        if not dry_run:
            _write(session, changes, actor=actor, at=at)
    return report


def _load(session, wanted, *, with_conditions: bool) -> list[_LessonRow]:
    """The lessons ``wanted`` selects, oldest first, with their conditions: two plain queries."""
    columns = (Lesson.id, Lesson.fingerprint, Lesson.status, Lesson.status_reason, Lesson.previous_status,
               Lesson.created_at, Lesson.last_confirmed_at, Lesson.valid_until, Lesson.actions, Lesson.job_context,
               Lesson.author)
    lessons = {row[0]: _LessonRow(*row) for row in session.execute(
        select(*columns).where(wanted).order_by(Lesson.created_at, Lesson.id))}
    if with_conditions and lessons:
        query = (select(LessonCondition.lesson_id, LessonCondition.kind, LessonCondition.name, LessonCondition.value,
                        LessonCondition.op)
                 .join(Lesson, Lesson.id == LessonCondition.lesson_id).where(wanted).order_by(LessonCondition.id))
        for lesson_id, *condition in session.execute(query):
            lessons[lesson_id].conditions.append(_Condition(*condition))
    return list(lessons.values())


def _plan(lesson: _LessonRow, verdict: Verdict) -> tuple[str, str | None, str | None, StatusChange] | None:
    """(status, reason, previous status, change) the verdict asks for, or None for no change."""
    before_status, before_reason = lesson.status, lesson.status_reason
    original = lesson.previous_status or lesson.status
    if verdict.status == "ok":
        if lesson.previous_status is None:
            return None
        after_status, after_reason, previous = lesson.previous_status, None, None
        reasons = ["every condition holds again"]
    else:
        after_status, after_reason, previous = verdict.status, "; ".join(verdict.reasons), original
        reasons = verdict.reasons
    if (after_status, after_reason) == (before_status, before_reason):
        return None
    return after_status, after_reason, previous, StatusChange(lesson.id, lesson.fingerprint, before_status,
                                                              after_status, reasons)


def _write(session, changes, *, actor: str, at: dt.datetime) -> None:
    """Every status change and its audit entry, as two executemany statements."""
    if not changes:
        return
    table = Lesson.__table__
    session.execute(
        update(table).where(table.c.id == bindparam("_id")).values(
            status=bindparam("_status"), status_reason=bindparam("_reason"), previous_status=bindparam("_previous"),
            updated_at=bindparam("_at", type_=table.c.updated_at.type)),
        [{"_id": lesson.id, "_status": status, "_reason": reason, "_previous": previous, "_at": at}
         for lesson, status, reason, previous, _change in changes],
    )
    now = utcnow()
    session.execute(insert(AuditEntry.__table__), [
        {"at": now, "actor": actor, "action": "revalidate", "object_type": "lesson", "object_id": lesson.id,
         "before": {"status": change.before, "reason": lesson.status_reason},
         "after": {"status": status, "reason": reason}, "reason": "; ".join(change.reasons)}
        for lesson, status, reason, _previous, change in changes])
