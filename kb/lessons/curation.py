"""Curation: how a lesson travels from one user's store to a lab and to the whole cluster.

``propose``  copies a user's lesson into a lab store as a *candidate*, generalised first
             (``kb/lessons/generalise.py``): user paths, job ids and work directories are
             replaced by placeholders, because a user's failures reveal unpublished work;
             what scoped the lesson (its script and program, partition, conditions and job
             context) stays, or the lab lesson would apply to every job with that error.
``review``   the lead's queue: the lab's candidates with their evidence, safety flags and
             a diff against lessons already known for the same failure.
``approve`` / ``reject`` / ``edit`` / ``merge`` / ``expire`` / ``promote``  the lead's moves.
             Only a lab's leads approve (``require_lead``), and never a lesson they
             proposed themselves.

Rules every move keeps:

- every change writes an audit entry (who, when, before/after) in the store it touches;
- text that enters a shared store passes the same gate as ``record_lesson``: redaction,
  sanitising, the safety lint, the injection check;
- text flagged as an injection never enters a shared store or gets approved there;
- a lesson with a blocking lint flag is approved or promoted only with an explicit
  override and a reason, and the override is audited on its own;
- a database that refuses a change (PostgreSQL roles and row-level security, a read-only
  SQLite file) gives :class:`PermissionDenied` with the scope named, never a traceback.

This module works on the ORM (like ``kb/lessons/write.py``); only the ``hpcmem lessons``
commands import it, so SQLAlchemy's import cost never reaches recall.
"""

from __future__ import annotations

import difflib
from collections import Counter
from contextlib import contextmanager
from typing import Any, Iterator

from sqlalchemy import func, or_, select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, selectinload
from sqlalchemy.orm.exc import StaleDataError

from hpcmem.kb.lessons.aliases import add_alias
from hpcmem.kb.lessons.generalise import (  # noqa: F401 - PrivateContext and generalise_text are part of the API
    PrivateContext,
    generalise_text,
    private_context,
    public_job_context,
    scope_conditions,
)
from hpcmem.kb.store.access import as_permission_denied
from hpcmem.kb.lessons.actions import parse_action, validate_action
from hpcmem.kb.errors import HpcmemError, InputError, NotFound, PermissionDenied
from hpcmem.kb.lessons.write import (
    Condition,
    LessonDraft,
    audit,
    clean_text,
    implied_conditions,
    lesson_text,
    lesson_to_dict,
    record_lesson,
    safety_flags,
)
from hpcmem.kb.store.models import LESSON_STATUSES, AuditEntry, Lesson, LessonAlias, LessonCondition
from hpcmem.kb.safety.lint import INJECTION_CODES, detect_injection
from hpcmem.kb.store.stack import StoreStack
from hpcmem.kb.store.database import Store
from hpcmem.kb.store.column_types import utcnow

PREFIX_MIN = 8  # shortest accepted id prefix: the first block of a UUID
CURATED_CONFIDENCE = 0.8

# --- Finding lessons ---------------------------------------------------------------------


def scope_label(store: Store) -> str:
    return f"lab:{store.name}" if store.scope == "lab" else store.scope


def stores_for(stack: StoreStack, scope: str | None) -> list[Store]:
    """The stores a command looks at: one scope, or the whole stack."""
    return [stack.by_scope(scope)] if scope else stack.all()


def _open(store: Store, stack: StoreStack) -> None:
    # Only the caller's own store may be created on the fly; shared stores must exist.
    store.open(create=store is stack.user)


def find_lesson(stack: StoreStack, ident: str, scope: str | None = None) -> tuple[Store, str]:
    """The store holding lesson ``ident`` (a full id, or a prefix of at least 8 characters).

    Searches every store of the stack (or only ``scope``). The prefix is matched literally
    (not as a LIKE pattern, where ``_`` and ``%`` match anything). A prefix of several
    lessons is ambiguous: the error lists them; give more of the id, or ``scope``.
    """
    ident = ident.strip().lower()
    if len(ident) < PREFIX_MIN:
        raise InputError(f"lesson id '{ident}' is too short: give at least {PREFIX_MIN} characters")
    hits: list[tuple[Store, str]] = []
    skipped: list[str] = []
    for store in stores_for(stack, scope):
        try:
            _open(store, stack)
            with _guard(store, "read lessons"), store.session() as session:
                ids = session.scalars(select(Lesson.id).where(func.substr(Lesson.id, 1, len(ident)) == ident)).all()
        except HpcmemError as exc:
            if store is stack.user or scope:
                raise
            skipped.append(f"{scope_label(store)} ({exc})")
            continue
        hits += [(store, i) for i in ids]
    if not hits:
        hint = ("not searched: " + "; ".join(skipped)) if skipped else "list lessons with `hpcmem lessons list`"
        raise NotFound(f"no lesson with id '{ident}'", hint=hint)
    if len(hits) > 1:
        where = ", ".join(f"{i} in {scope_label(s)}" for s, i in hits[:10])
        more = f" and {len(hits) - 10} more" if len(hits) > 10 else ""
        raise InputError(f"lesson id '{ident}' is ambiguous: {len(hits)} lessons match ({where}{more})",
                         hint="give more of the id, or the store with --scope")
    return hits[0]


def _load(session: Session, lesson_id: str) -> Lesson:
    lesson = session.scalars(
        select(Lesson).where(Lesson.id == lesson_id)
        .options(selectinload(Lesson.conditions), selectinload(Lesson.evidence), selectinload(Lesson.signature))
    ).one_or_none()
    if lesson is None:
        raise NotFound(f"lesson {lesson_id} disappeared while working on it")
    return lesson


# --- Permission errors ---------------------------------------------------------------------

_WHO_MAY = {"lab": "only lab leads", "cluster": "only cluster admins", "user": "only the store's owner"}


@contextmanager
def _guard(store: Store, what: str) -> Iterator[None]:
    """Turn the database's refusal into one clear line naming who may do ``what``."""
    try:
        yield
    except StaleDataError:
        # Row-level security hides rows from UPDATE instead of raising: zero rows matched.
        raise _denied(store, what) from None
    except DBAPIError as exc:
        refused = as_permission_denied(exc)  # insufficient_privilege, RLS, read-only SQLite
        if refused is not None:
            raise _denied(store, what, refused.hint) from None
        raise


def _denied(store: Store, what: str, hint: str | None = None) -> PermissionDenied:
    kind = "lab store" if store.scope == "lab" else f"{store.scope} store"
    return PermissionDenied(f"permission denied: {_WHO_MAY.get(store.scope, 'only its owners')} can {what} "
                            f"in {kind} '{store.name}'", hint=hint)


def require_lead(store: Store, actor: str, what: str) -> None:
    """Only the lab's leads may ``what`` (approve, keep an imported status) in a lab store.

    On PostgreSQL the database's roles decide (``hpcmem db grant``); leads named in the
    configuration are checked besides. A SQLite lab store cannot tell members from leads,
    so there the configuration must name them (``[stores.labs.NAME] leads = [...]``): with
    none named, nobody can. This is hpcmem's rule, kept by the CLI, the MCP server and the
    console; a member who writes the file with other tools is not stopped by it."""
    if store.scope != "lab":
        return
    if not store.leads and store.dialect == "sqlite":
        raise PermissionDenied(f"permission denied: lab store '{store.name}' names no leads, so nobody can {what} "
                               "in it", hint=f"name them in the config: [stores.labs.{store.name}] leads = [\"...\"]")
    if store.leads and actor not in store.leads:
        raise _denied(store, what, hint=f"the leads of lab:{store.name}: {', '.join(store.leads)}")


def _proposer(lesson: Lesson) -> str | None:
    """Who brought the lesson into this store: the proposal's author, else the lesson's."""
    marker = next((e for e in lesson.evidence or [] if e.kind == "proposal"), None)
    return marker.actor if marker is not None else lesson.author


@contextmanager
def _writing(store: Store, what: str) -> Iterator[Session]:
    with _guard(store, what), store.transaction() as session:
        yield session


# --- Listing and showing -----------------------------------------------------------------------


def _check_statuses(statuses: list[str] | None) -> None:
    for status in statuses or []:
        if status not in LESSON_STATUSES:
            raise InputError(f"unknown status '{status}' (one of {', '.join(LESSON_STATUSES)})")


def _summary(store: Store, lesson: Lesson) -> dict[str, Any]:
    data = lesson_to_dict(lesson)
    data["store"] = scope_label(store)
    data["proposal"] = _proposal(lesson)
    return data


def _proposal(lesson: Lesson) -> dict[str, Any] | None:
    marker = next((e for e in lesson.evidence or [] if e.kind in ("proposal", "promotion")), None)
    if marker is None:
        return None
    return {"kind": marker.kind, "by": marker.actor, "note": marker.note,
            "at": marker.created_at.isoformat() if marker.created_at else None}


def list_lessons(stack: StoreStack, *, scope: str | None = None, statuses: list[str] | None = None,
                 category: str | None = None) -> list[dict[str, Any]]:
    """Lessons of the stack (or one scope), newest first within each store."""
    _check_statuses(statuses)
    out: list[dict[str, Any]] = []
    for store in stores_for(stack, scope):
        _open(store, stack)
        with _guard(store, "read lessons"), store.session() as session:
            query = select(Lesson).options(selectinload(Lesson.conditions), selectinload(Lesson.evidence),
                                           selectinload(Lesson.signature)).order_by(Lesson.updated_at.desc())
            if statuses:
                query = query.where(Lesson.status.in_(statuses))
            for lesson in session.scalars(query):
                if category and (lesson.signature is None or lesson.signature.category != category):
                    continue
                out.append(_summary(store, lesson))
    return out


def _audit_dict(entry: AuditEntry) -> dict[str, Any]:
    return {"at": entry.at.isoformat(), "actor": entry.actor, "action": entry.action, "reason": entry.reason,
            "before": entry.before, "after": entry.after}


def show_lesson(stack: StoreStack, ident: str, scope: str | None = None) -> dict[str, Any]:
    """One lesson with its full evidence and its audit history, oldest entry first."""
    store, lesson_id = find_lesson(stack, ident, scope)
    with _guard(store, "read lessons"), store.session() as session:
        lesson = _load(session, lesson_id)
        data = _summary(store, lesson)
        data["updated_at"] = lesson.updated_at.isoformat() if lesson.updated_at else None
        data["evidence"] = [
            {"kind": e.kind, "job_id": e.job_id, "occurrence_id": e.occurrence_id, "actor": e.actor,
             "note": e.note, "at": e.created_at.isoformat() if e.created_at else None}
            for e in lesson.evidence
        ]
        entries = session.scalars(select(AuditEntry).where(AuditEntry.object_type == "lesson",
                                                           AuditEntry.object_id == lesson_id)
                                  .order_by(AuditEntry.id)).all()
        data["history"] = [_audit_dict(e) for e in entries]
    return data


# --- Editing ----------------------------------------------------------------------------------


def edit_lesson(stack: StoreStack, ident: str, *, actor: str, cause: str | None = None, fix: str | None = None,
                context: str | None = None, actions: list[str] | None = None,
                scope: str | None = None, reason: str | None = None) -> dict[str, Any]:
    """Change a lesson's text or actions; the new text passes the whole gate again."""
    if cause is None and fix is None and context is None and actions is None:
        raise InputError("nothing to edit: give --cause, --fix, --context or --action")
    store, lesson_id = find_lesson(stack, ident, scope)
    with _writing(store, "edit lessons") as session:
        lesson = _load(session, lesson_id)
        before = lesson_to_dict(lesson)
        if cause is not None:
            lesson.cause = _required(lesson_text(cause, "cause"), "cause")
        if fix is not None:
            lesson.fix = _required(lesson_text(fix, "fix"), "fix")
        if context is not None:
            lesson.context = lesson_text(context, "context") or None
        if actions is not None:
            lesson.actions = _gate_actions([parse_action(a) for a in actions])
            _add_conditions(lesson, implied_conditions(lesson.actions))
        owner = lesson.author if store.scope == "user" else None
        lesson.safety_flags = safety_flags(lesson.cause, lesson.fix, lesson.actions, owner=owner)
        lesson.updated_at = utcnow()
        session.flush()
        after = lesson_to_dict(lesson)
        audit(session, actor, "edit", lesson.id, before, after, reason=clean_text(reason, 500) or None)
    return after | {"store": scope_label(store)}


def _required(text: str | None, name: str) -> str:
    if not text:
        raise InputError(f"the {name} cannot be empty")
    return text


def _gate_actions(actions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    checked = [validate_action(a) for a in actions]
    return [{k: clean_text(v, 500) if isinstance(v, str) else v for k, v in a.items()} for a in checked]


def _add_conditions(lesson: Lesson, conditions: list[Condition] | list[LessonCondition]) -> int:
    have = {(c.kind, c.name, c.value, c.op) for c in lesson.conditions}
    added = 0
    for c in conditions:
        key = (c.kind, c.name, c.value, c.op)
        if key not in have:
            have.add(key)
            lesson.conditions.append(LessonCondition(kind=c.kind, name=c.name, value=c.value, op=c.op))
            added += 1
    return added


def _injection_codes(*texts: str | None) -> list[str]:
    return sorted({f.code for t in texts if t for f in detect_injection(t)})


def _draft_copy(lesson: Lesson, private: PrivateContext, *, scope: str, scope_name: str | None, source: str,
                status: str, marker: dict[str, Any]) -> LessonDraft:
    """A generalised copy of ``lesson`` for a shared store; the gate runs in ``record_lesson``."""
    sig = lesson.signature
    if sig is None:
        raise InputError(f"lesson {lesson.id[:8]} has no signature; it cannot be shared")
    def gen(value: Any) -> Any:
        return generalise_text(value, private) if isinstance(value, str) else value

    conditions = [Condition(c.kind, c.name, c.value, c.op) for c in lesson.conditions]
    job_context = public_job_context(lesson.job_context, private)
    return LessonDraft(
        fingerprint=lesson.fingerprint, template=generalise_text(sig.template, private), category=sig.category,
        cause=gen(lesson.cause), fix=gen(lesson.fix), context=gen(lesson.context), source=source,
        author=lesson.author, actions=[{k: gen(v) for k, v in a.items()} for a in lesson.actions or []],
        # what scoped the lesson travels: its conditions, the program it was learnt for, its job's facts
        conditions=conditions + scope_conditions(job_context, conditions), job_context=job_context,
        scope=scope, scope_name=scope_name, status=status,
        confidence=CURATED_CONFIDENCE if source == "curated" else None, valid_until=lesson.valid_until,
        # the count and kinds of the evidence travel; job ids and notes stay with the author
        evidence=[{"kind": e.kind} for e in lesson.evidence if e.kind not in ("proposal", "promotion")] + [marker],
        # the failure's known variants travel with it (masked already; generalised again)
        excerpt=gen(lesson.excerpt),
        aliases=[{"fingerprint": a.fingerprint, "template": gen(a.template), "category": a.category,
                  "excerpt": gen(a.excerpt), "source": a.source} for a in lesson.aliases],
    )


# --- Propose, approve, reject -------------------------------------------------------------------


def propose_lesson(stack: StoreStack, ident: str, *, to: str, actor: str, scope: str | None = None) -> dict[str, Any]:
    """Copy a lesson, generalised, into lab store ``to`` as a candidate for review."""
    target = stack.by_scope(to)
    if target.scope != "lab":
        raise InputError(f"propose to a lab (lab:NAME), not '{to}'; leads promote lab lessons to the cluster")
    store, lesson_id = find_lesson(stack, ident, scope)
    if store is target:
        raise InputError(f"lesson {lesson_id[:8]} is already in {scope_label(target)}")
    with store.session() as session:
        lesson = _load(session, lesson_id)
        if lesson.status in ("rejected", "expired"):
            raise InputError(f"lesson {lesson_id[:8]} is {lesson.status}; only live lessons can be proposed")
        private = private_context(session, lesson)
        marker = {"kind": "proposal", "note": f"proposed by {actor} from {scope_label(store)} lesson {lesson.id[:8]}"}
        draft = _draft_copy(lesson, private, scope="lab", scope_name=target.name, source=lesson.source,
                            status="candidate", marker=marker)
        blocked = _injection_codes(lesson.cause, lesson.fix, lesson.context, draft.cause, draft.fix, draft.context)
        blocked += [f["code"] for f in lesson.safety_flags or [] if f.get("code") in INJECTION_CODES]
        if blocked:
            raise InputError(f"refused: lesson {lesson_id[:8]} reads like instructions to an agent "
                             f"({', '.join(sorted(set(blocked)))}); it stays out of shared stores",
                             hint="edit the text with `hpcmem lessons edit` first")
    _open(target, stack)
    earlier = _live_proposal(store, target, lesson_id)
    if earlier is not None:
        raise InputError(f"lesson {lesson_id[:8]} is already proposed to {scope_label(target)} as {earlier[:8]}",
                         hint="the lead reviews that copy; edit it there, or propose again after a rejection")
    with _guard(target, "propose lessons"):
        copy = record_lesson(target, draft, actor=actor)
    with _writing(store, "record proposals") as session:
        audit(session, actor, "propose", lesson_id, None,
              {"to": scope_label(target), "lesson_id": copy["lesson_id"]})
    return copy | {"store": scope_label(target), "proposed_from": lesson_id}


def _live_proposal(store, target, lesson_id: str) -> str | None:
    """The id of an earlier proposal of this lesson to ``target`` that is still alive."""
    with store.session() as session:
        entries = session.scalars(select(AuditEntry).where(
            AuditEntry.object_type == "lesson", AuditEntry.object_id == lesson_id, AuditEntry.action == "propose")).all()
        copies = [e.after["lesson_id"] for e in entries
                  if isinstance(e.after, dict) and e.after.get("to") == scope_label(target) and e.after.get("lesson_id")]
    if not copies:
        return None
    with target.session() as session:
        for copy_id in reversed(copies):
            copy = session.get(Lesson, copy_id)
            if copy is not None and copy.status != "rejected":
                return copy_id
    return None


def _blocking(lesson: Lesson) -> list[str]:
    return sorted({f["code"] for f in lesson.safety_flags or [] if f.get("severity") == "block"})


def _check_safety(lesson: Lesson, verb: str, override: bool, reason: str | None) -> list[str]:
    """Codes overridden (empty when nothing blocks); raises when the lesson may not pass."""
    injections = sorted({f["code"] for f in lesson.safety_flags or [] if f.get("code") in INJECTION_CODES})
    if injections:
        raise InputError(f"refused: lesson {lesson.id[:8]} reads like instructions to an agent "
                         f"({', '.join(injections)}); no override can {verb} it",
                         hint="edit the text with `hpcmem lessons edit` first")
    blocking = _blocking(lesson)
    if not blocking:
        return []
    if not override:
        raise InputError(f"refused: lesson {lesson.id[:8]} has blocking safety flags ({', '.join(blocking)})",
                         hint=f"fix it with `hpcmem lessons edit`, or {verb} with --override-safety --reason TEXT")
    if not reason or not reason.strip():
        raise InputError("--override-safety needs --reason TEXT: the override is audited")
    return blocking


def approve_lesson(stack: StoreStack, ident: str, *, actor: str, override_safety: bool = False,
                   reason: str | None = None, scope: str | None = None) -> dict[str, Any]:
    """A lead approves a shared lesson: candidate (or stale) -> validated, source ``curated``."""
    store, lesson_id = find_lesson(stack, ident, scope)
    if store.scope == "user":
        raise InputError(f"lesson {lesson_id[:8]} is in your user store: propose it to a lab first")
    require_lead(store, actor, "approve lessons")
    with _writing(store, "approve lessons") as session:
        lesson = _load(session, lesson_id)
        if lesson.status not in ("candidate", "stale"):
            raise InputError(f"lesson {lesson_id[:8]} is {lesson.status}; only candidates and stale lessons "
                             "can be approved")
        # Review needs a second person: nobody approves what they proposed (a lesson a lead
        # approved before, now stale, may be approved again by any lead).
        if lesson.source != "curated" and _proposer(lesson) == actor:
            raise PermissionDenied(f"permission denied: {actor} proposed lesson {lesson_id[:8]} and cannot "
                                   "approve it too", hint="another lead of the lab reviews it")
        overridden = _check_safety(lesson, "approve", override_safety, reason)
        before = lesson_to_dict(lesson)
        if overridden:
            audit(session, actor, "override_safety", lesson.id, {"safety_flags": before["safety_flags"]},
                  {"overridden": overridden, "for": "approve"}, reason=reason)
        lesson.status, lesson.previous_status, lesson.source = "validated", None, "curated"
        lesson.status_reason = f"approved by {actor}" + (f" (safety override: {reason})" if overridden else "")
        lesson.confidence = max(float(lesson.confidence), CURATED_CONFIDENCE)
        lesson.updated_at = utcnow()
        session.flush()
        after = lesson_to_dict(lesson)
        audit(session, actor, "approve", lesson.id, before, after, reason=reason)
    return after | {"store": scope_label(store)}


def _set_status(stack: StoreStack, ident: str, *, actor: str, status: str, reason: str, action: str,
                scope: str | None, what: str) -> dict[str, Any]:
    if not reason or not reason.strip():
        raise InputError(f"{action} needs --reason TEXT")
    reason = clean_text(reason, 500)
    store, lesson_id = find_lesson(stack, ident, scope)
    with _writing(store, what) as session:
        lesson = _load(session, lesson_id)
        if lesson.status == status:
            raise InputError(f"lesson {lesson_id[:8]} is already {status}")
        before = lesson_to_dict(lesson)
        # previous_status stays None: revalidation restores only what it expired itself
        lesson.status, lesson.previous_status, lesson.status_reason = status, None, reason
        lesson.updated_at = utcnow()
        session.flush()
        after = lesson_to_dict(lesson)
        audit(session, actor, action, lesson.id, before, after, reason=reason)
    return after | {"store": scope_label(store)}


def reject_lesson(stack: StoreStack, ident: str, *, actor: str, reason: str, scope: str | None = None) -> dict[str, Any]:
    return _set_status(stack, ident, actor=actor, status="rejected", reason=reason, action="reject", scope=scope,
                       what="reject lessons")


def expire_lesson(stack: StoreStack, ident: str, *, actor: str, reason: str, scope: str | None = None) -> dict[str, Any]:
    return _set_status(stack, ident, actor=actor, status="expired", reason=reason, action="expire", scope=scope,
                       what="expire lessons")


def promote_lesson(stack: StoreStack, ident: str, *, actor: str, to: str = "cluster", override_safety: bool = False,
                   reason: str | None = None, scope: str | None = None) -> dict[str, Any]:
    """Copy a validated lab lesson to the cluster store as a curated, validated lesson."""
    if to != "cluster":
        raise InputError(f"promote goes to the cluster store, not '{to}'; use `propose` to reach a lab")
    target = stack.by_scope("cluster")
    store, lesson_id = find_lesson(stack, ident, scope)
    if store.scope != "lab":
        raise InputError(f"only lab lessons are promoted; lesson {lesson_id[:8]} is in {scope_label(store)}")
    with store.session() as session:
        lesson = _load(session, lesson_id)
        if lesson.status != "validated":
            raise InputError(f"lesson {lesson_id[:8]} is {lesson.status}; approve it in the lab first")
        overridden = _check_safety(lesson, "promote", override_safety, reason)
        marker = {"kind": "promotion", "note": f"promoted by {actor} from {scope_label(store)} lesson {lesson.id[:8]}"}
        draft = _draft_copy(lesson, private_context(session, lesson), scope="cluster", scope_name=None,
                            source="curated", status="validated", marker=marker)
        before = lesson_to_dict(lesson)
    _open(target, stack)
    with _guard(target, "promote lessons"):
        copy = record_lesson(target, draft, actor=actor)
    with _writing(target, "promote lessons") as session:
        if overridden:
            audit(session, actor, "override_safety", copy["lesson_id"], {"safety_flags": before["safety_flags"]},
                  {"overridden": overridden, "for": "promote"}, reason=reason)
        audit(session, actor, "promote", copy["lesson_id"], before, copy, reason=reason)
    return copy | {"store": "cluster", "promoted_from": lesson_id}


# --- Merge ------------------------------------------------------------------------------------------


def merge_lessons(stack: StoreStack, first: str, second: str, *, actor: str, keep: str | None = None,
                  scope: str | None = None, reason: str | None = None) -> dict[str, Any]:
    """Combine two duplicate lessons of one store: the kept one gains the other's evidence."""
    store_a, id_a = find_lesson(stack, first, scope)
    store_b, id_b = find_lesson(stack, second, scope)
    if store_a is not store_b:
        raise InputError(f"lessons {id_a[:8]} ({scope_label(store_a)}) and {id_b[:8]} ({scope_label(store_b)}) "
                         "are in different stores; merge works inside one store")
    if id_a == id_b:
        raise InputError("cannot merge a lesson with itself")
    keep_id = id_a
    if keep is not None:
        matches = [i for i in (id_a, id_b) if i.startswith(keep.strip().lower())]
        if len(matches) != 1:
            raise InputError(f"--keep {keep} must name one of the two lessons")
        keep_id = matches[0]
    drop_id = id_b if keep_id == id_a else id_a
    with _writing(store_a, "merge lessons") as session:
        kept, dropped = _load(session, keep_id), _load(session, drop_id)
        if dropped.status == "rejected":
            raise InputError(f"lesson {drop_id[:8]} is already rejected")
        before_kept, before_dropped = lesson_to_dict(kept), lesson_to_dict(dropped)
        moved = list(dropped.evidence)
        for ev in moved:
            ev.lesson_id = kept.id
        dropped.evidence = []
        kept.evidence.extend(moved)
        added = _add_conditions(kept, list(dropped.conditions))
        # The other lesson's failure and its known variants are variants of the kept one now.
        variants = [{"fingerprint": dropped.fingerprint, "template": dropped.signature.template if dropped.signature
                     else "", "category": dropped.signature.category if dropped.signature else "unknown",
                     "excerpt": dropped.excerpt}]
        variants += [{"fingerprint": a.fingerprint, "template": a.template, "category": a.category,
                      "excerpt": a.excerpt} for a in dropped.aliases]
        aliases_added = sum(add_alias(session, kept, v, source="merge", actor=actor) for v in variants)
        kept.confirmations += dropped.confirmations
        kept.contradictions += dropped.contradictions
        kept.updated_at = dropped.updated_at = utcnow()
        dropped.status, dropped.previous_status = "rejected", None
        dropped.status_reason = f"merged into {kept.id}"
        session.flush()
        after_kept, after_dropped = lesson_to_dict(kept), lesson_to_dict(dropped)
        why = f": {clean_text(reason, 500)}" if reason and reason.strip() else ""
        audit(session, actor, "merge", kept.id, before_kept, after_kept, reason=f"merged {dropped.id} into it{why}")
        audit(session, actor, "merge", dropped.id, before_dropped, after_dropped, reason=f"merged into {kept.id}{why}")
    return after_kept | {"store": scope_label(store_a), "merged": drop_id, "evidence_moved": len(moved),
                         "conditions_added": added, "aliases_added": aliases_added}


# --- Review queue --------------------------------------------------------------------------------


def _diff(old: Lesson, new: Lesson) -> str:
    def lines(lesson: Lesson) -> list[str]:
        return [f"cause: {lesson.cause}", f"fix: {lesson.fix}", f"context: {lesson.context or ''}"]

    return "\n".join(difflib.unified_diff(lines(old), lines(new), f"lesson {old.id[:8]} ({old.status})",
                                          f"candidate {new.id[:8]}", lineterm="", n=0))


def review_queue(stack: StoreStack, scope: str | None = None) -> list[dict[str, Any]]:
    """Candidates waiting in lab stores (or one scope), each with what a lead needs to decide."""
    stores = [stack.by_scope(scope)] if scope else stack.labs
    queue: list[dict[str, Any]] = []
    for store in stores:
        _open(store, stack)
        with _guard(store, "read lessons"), store.session() as session:
            opts = (selectinload(Lesson.conditions), selectinload(Lesson.evidence), selectinload(Lesson.signature))
            candidates = session.scalars(select(Lesson).where(Lesson.status == "candidate").options(*opts)
                                         .order_by(Lesson.created_at)).all()
            for lesson in candidates:
                # the same failure: the candidate's fingerprint or one of its known variants, on
                # either side (another lesson's own fingerprint or one of its aliases)
                known = {lesson.fingerprint, *(a.fingerprint for a in lesson.aliases)}
                aliased = select(LessonAlias.lesson_id).where(LessonAlias.fingerprint.in_(known))
                others = session.scalars(select(Lesson).where(
                    or_(Lesson.fingerprint.in_(known), Lesson.id.in_(aliased)), Lesson.id != lesson.id,
                    Lesson.status.not_in(("rejected", "expired"))).options(*opts)).all()
                item = _summary(store, lesson)
                item["evidence_summary"] = dict(Counter(e.kind for e in lesson.evidence))
                item["blocked"] = bool(_blocking(lesson))
                item["same_fingerprint"] = [
                    {"lesson_id": o.id, "status": o.status, "source": o.source, "diff": _diff(o, lesson)}
                    for o in others
                ]
                queue.append(item)
    return queue
