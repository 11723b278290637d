"""Lessons: context / cause / fix records attached to a signature, with provenance.

Every lesson that enters a store passes the same gate, whoever wrote it:

- every text it stores (cause, fix, context, the error's template and excerpt, aliases,
  conditions) is normalised, then redacted (``kb.safety.normalise.scrub``: escape sequences,
  controls and invisible characters go *before* the rules run, so a colour code or a
  zero-width joiner cannot hide a secret from them), then sanitised (NFC, length), because
  no secret may be stored, recalled text is data shown to agents and PostgreSQL refuses
  NUL; cause, fix and context longer than ``MAX_TEXT`` are refused;
- the fix is linted for weakened safeguards and the text checked for instruction-like
  injections; the flags are kept on the lesson and shown wherever it is recalled;
- actions are validated; conditions are normalised;
- an audit entry records who created it, when, and what it said; every audit entry's
  before/after copies and reason are scrubbed when written (``audit``), so an edit that
  removes a secret an older rule set let in does not copy it into the history.

Initial status and confidence depend on the source: what an agent writes or hpcmem
infers starts as a *candidate*; curated lessons start *validated*.
"""

from __future__ import annotations

import datetime as dt
import sys
import uuid
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from hpcmem.kb.lessons.actions import validate_action
from hpcmem.kb.errors import InputError
from hpcmem.kb.safety.normalise import normalise, scrub_text, scrub_value
from hpcmem.kb.safety.redact import redact_text
from hpcmem.kb.safety.lint import detect_injection, lint_fix, sanitize_text
from hpcmem.kb.signatures.fingerprint import excerpt_template
from hpcmem.kb.store.sqlwrite import SqlWriter, write_transaction

if TYPE_CHECKING:  # the ORM is imported by the functions that use it, not by `record`
    from sqlalchemy.orm import Session

    from hpcmem.kb.store.models import Lesson, Signature
    from hpcmem.kb.store.database import Store

LESSON_SOURCES = ("rule", "inferred", "agent", "human", "curated", "log")

# What a lesson keeps, in characters after redaction and sanitising: the one set of limits
# record, edit and import use (schemas/lesson.schema.json says the same; a test holds them equal).
MAX_TEXT = 4000  # cause, fix, context: longer is refused (lesson_text)
MAX_TEMPLATE = 2000  # the error's decisive line, masked
MAX_EXCERPT = 20000  # the error's masked excerpt (40 lines of up to 300 characters, then masked)
MAX_NAME, MAX_VALUE = 128, 256  # a condition's name and value

INITIAL_STATUS = {"curated": "validated", "rule": "validated", "human": "candidate", "agent": "candidate",
                  "inferred": "candidate", "log": "candidate"}
INITIAL_CONFIDENCE = {"curated": 0.8, "rule": 0.5, "human": 0.6, "agent": 0.45, "inferred": 0.5, "log": 0.3}
CONDITION_KINDS = ("module", "partition", "partition_limit", "cluster", "application")


@dataclass
class Condition:
    kind: str
    name: str
    value: str | None = None
    op: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "value": self.value, "op": self.op}


@dataclass
class LessonDraft:
    """What a caller knows about a new lesson; ``record_lesson`` does the rest."""

    fingerprint: str
    template: str
    category: str
    cause: str
    fix: str
    source: str
    author: str | None = None
    context: str | None = None
    actions: list[dict[str, Any]] = field(default_factory=list)
    conditions: list[Condition] = field(default_factory=list)
    scope: str = "user"
    scope_name: str | None = None
    status: str | None = None
    confidence: float | None = None
    valid_until: dt.datetime | None = None
    evidence: list[dict[str, Any]] = field(default_factory=list)  # {kind, occurrence_id?, job_id?, note?}
    excerpt: str | None = None  # masked excerpt of the error (signatures.excerpt_template)
    aliases: list[dict[str, Any]] = field(default_factory=list)  # {fingerprint, template, category, excerpt, source}
    # The job facts the lesson was born with (kb/jobs/context.FIELDS); recall weighs them.
    job_context: dict[str, Any] = field(default_factory=dict)


def clean_text(text: str | None, limit: int = MAX_TEXT) -> str | None:
    """Normalise, then redact (``scrub_text``), then sanitise and cap the length."""
    if text is None:
        return None
    return sanitize_text(scrub_text(text), limit)


def error_excerpt(text: str) -> str:
    """The masked excerpt a lesson keeps of an error text, normalised and redacted here
    (whatever the caller did): a secret a colour code hid from the caller's redaction is
    caught before masking can cut it into pieces no rule recognises.

    Escape sequences and invisible characters go before masking: masking first can split a
    sequence (a URL mask swallows an OSC 8 link's end) and leave pieces of it behind.
    Carriage returns stay for the excerpt's own redraw handling (last state of a line)."""
    plain = redact_text(normalise(text, keep_cr=True))
    plain = "\r".join(sanitize_text(part, sys.maxsize) for part in plain.split("\r"))
    return clean_text(excerpt_template(plain), MAX_EXCERPT)


def lesson_text(text: str | None, what: str, limit: int = MAX_TEXT) -> str | None:
    """``text`` cleaned as ``clean_text`` does, but refused rather than cut when too long.

    Refused, not cut: a fix cut at the limit can lose its last step without anyone seeing
    it, and whoever records the lesson is there to shorten it (a note in the output is
    easily missed by an agent that reads only the lesson id)."""
    if text is None:
        return None
    cleaned = sanitize_text(scrub_text(text), sys.maxsize)
    if len(cleaned) > limit:
        raise InputError(f"the {what} is {len(cleaned):,} characters; a lesson keeps at most {limit:,}",
                         hint=f"shorten the {what}; long output belongs in the error text, which is excerpted")
    return cleaned


def safety_flags(cause: str, fix: str, actions: list[dict[str, Any]], owner: str | None) -> list[dict[str, str]]:
    flags = [f.to_dict() for f in lint_fix(fix, actions, owner=owner)]
    for text in (cause, fix):
        flags += [f.to_dict() for f in detect_injection(text)]
    unique: dict[tuple[str, str], dict[str, str]] = {}
    for flag in flags:
        unique.setdefault((flag["code"], flag.get("where", "text")), flag)
    return list(unique.values())


def implied_conditions(actions: list[dict[str, Any]]) -> list[Condition]:
    """What a fix relies on by its own actions: the modules it loads, the partition it moves to."""
    out = []
    for action in actions:
        if action.get("type") == "module" and action.get("op") in ("load", "swap") and "/" in action.get("name", ""):
            out.append(Condition("module", action["name"], action["name"].split("/", 1)[1]))
        elif action.get("type") == "sbatch" and action.get("option") == "--partition" and action.get("to"):
            out.append(Condition("partition", action["to"]))
    return out


def merge_conditions(given: list[Condition], implied: list[Condition]) -> list[Condition]:
    """Given conditions first; an implied one is added unless already there."""
    seen = {(c.kind, c.name) for c in given}
    merged = list(given)
    for cond in implied:
        if (cond.kind, cond.name) not in seen:
            seen.add((cond.kind, cond.name))
            merged.append(cond)
    return merged


def stored_context(context: dict[str, Any] | None) -> dict[str, Any] | None:
    """A job context as a store keeps it: known keys, checked values, secrets scrubbed
    (a working directory or a command line can carry a token like any other text)."""
    from hpcmem.kb.jobs.context import clean_context

    # scrubbed before clean_context cuts long values: a cut could leave half a token no rule knows
    cleaned = clean_context(scrub_value(context)[0] if context else context)
    return cleaned or None


def utcnow() -> dt.datetime:  # as kb.store.column_types.utcnow, without importing SQLAlchemy
    return dt.datetime.now(dt.timezone.utc)


def ensure_signature(session: Session, fingerprint: str, template: str, category: str) -> Signature:
    from sqlalchemy import select

    from hpcmem.kb.store.models import Signature

    sig = session.scalars(select(Signature).where(Signature.fingerprint == fingerprint)).one_or_none()
    if sig is None:
        now = utcnow()
        sig = Signature(fingerprint=fingerprint, template=clean_text(template, MAX_TEMPLATE), category=category,
                        count=0, first_seen=now, last_seen=now)
        session.add(sig)
        session.flush()
    return sig


def audit(session: Session, actor: str, action: str, lesson_id: str, before: dict | None, after: dict | None,
          reason: str | None = None) -> None:
    """Append an audit entry; its copies of the lesson and its reason are scrubbed first
    (audit_log is append-only: what goes in stays until ``hpcmem db scrub``)."""
    from hpcmem.kb.store.models import AuditEntry

    session.add(AuditEntry(actor=actor, action=action, object_type="lesson", object_id=lesson_id,
                           before=scrub_value(before)[0], after=scrub_value(after)[0],
                           reason=scrub_value(reason)[0]))


def record_lesson(store: Store, draft: LessonDraft, *, actor: str) -> dict[str, Any]:
    """Store a new lesson; returns it as a dict (``lesson_to_dict``)."""
    if draft.source not in LESSON_SOURCES:
        raise InputError(f"unknown lesson source '{draft.source}' (one of {', '.join(LESSON_SOURCES)})")
    cause, fix = lesson_text(draft.cause, "cause"), lesson_text(draft.fix, "fix")
    if not cause or not fix:
        raise InputError("a lesson needs both a cause and a fix")
    # Inferred actions hold values Slurm itself accepted (a submit line, a job record): a
    # spelling our parser does not know must not stop a whole `learn` run.
    actions = [validate_action(a, values=draft.source != "inferred") for a in draft.actions]
    actions = [{k: clean_text(v, 500) if isinstance(v, str) else v for k, v in a.items()} for a in actions]
    for cond in draft.conditions:
        if cond.kind not in CONDITION_KINDS:
            raise InputError(f"unknown condition kind '{cond.kind}'")
    given = [Condition(c.kind, clean_text(c.name, MAX_NAME), clean_text(c.value, MAX_VALUE), c.op)
             for c in draft.conditions]
    if any(not c.name for c in given):
        raise InputError("a condition (partition, module, cluster) has an empty name")
    conditions = merge_conditions(given, implied_conditions(actions))
    flags = safety_flags(cause, fix, actions, owner=draft.author if draft.scope == "user" else None)
    if draft.scope != "user":
        from hpcmem.kb.safety.lint import INJECTION_CODES, LINT_CODES

        # Lint codes (e.g. pipe_to_shell) are a lead's call at approval; injections never go in.
        injected = sorted({f["code"] for f in flags if f["code"] in INJECTION_CODES and f["code"] not in LINT_CODES
                           and f["severity"] == "block"})
        if injected:
            raise InputError(f"instruction-like text ({', '.join(injected)}) cannot go into a shared {draft.scope} store",
                             hint="record it in your own store, or rewrite the cause/fix as plain facts")
    now = utcnow()
    lesson = SimpleNamespace(
        id=str(uuid.uuid4()), fingerprint=draft.fingerprint, scope=draft.scope, scope_name=draft.scope_name,
        context=lesson_text(draft.context, "context"), cause=cause, fix=fix, actions=actions,
        status=draft.status or INITIAL_STATUS[draft.source], status_reason=None, previous_status=None,
        confidence=draft.confidence if draft.confidence is not None else INITIAL_CONFIDENCE[draft.source],
        confirmations=0, contradictions=0, source=draft.source, author=draft.author, safety_flags=flags,
        created_at=now, updated_at=now, last_confirmed_at=None, valid_until=draft.valid_until,
        # The fingerprint stays the one computed from signature_text (normalised, then redacted),
        # as recall computes it: sanitising it further would make the same text miss its lesson.
        excerpt=clean_text(draft.excerpt, MAX_EXCERPT),
        job_context=stored_context(draft.job_context),
    )
    lesson.aliases = [SimpleNamespace(fingerprint=a["fingerprint"], template=clean_text(a["template"], MAX_TEMPLATE),
                                      category=a["category"], excerpt=clean_text(a.get("excerpt"), MAX_EXCERPT),
                                      source=a.get("source", "import"), actor=actor, created_at=now)
                      for a in draft.aliases if a["fingerprint"] != draft.fingerprint]
    lesson.conditions = [SimpleNamespace(kind=c.kind, name=c.name, value=c.value, op=c.op) for c in conditions]
    lesson.evidence = [
        SimpleNamespace(kind=e.get("kind", "occurrence"), occurrence_id=e.get("occurrence_id"), job_id=e.get("job_id"),
                        actor=actor, note=clean_text(e.get("note"), 500), created_at=now)
        for e in draft.evidence
    ]
    with write_transaction(store) as sql:
        sig = _ensure_signature_row(sql, draft.fingerprint, draft.template, draft.category, now)
        _insert_lesson(sql, lesson, sig.id)
        result = lesson_to_dict(lesson, sig)
        sql.insert("audit_log", {"at": now, "actor": actor, "action": "create", "object_type": "lesson",
                                 "object_id": lesson.id, "before": None, "after": scrub_value(result)[0],
                                 "reason": None},
                   json_columns=("before", "after"))
    return result


def _ensure_signature_row(sql: SqlWriter, fingerprint: str, template: str, category: str,
                          now: dt.datetime) -> SimpleNamespace:
    """The signature row for a fingerprint, inserted when new (as ``ensure_signature``)."""
    found = sql.query("SELECT id, category, template FROM signatures WHERE fingerprint = ?", (fingerprint,))
    if not found:
        found = [(sql.insert("signatures", {
            "fingerprint": fingerprint, "template": clean_text(template, MAX_TEMPLATE), "category": category,
            "count": 0, "first_seen": now, "last_seen": now}, returning="id"), category,
            clean_text(template, MAX_TEMPLATE))]
    sig_id, sig_category, sig_template = found[0]
    # A row an older hpcmem wrote may hold what today's rules redact: not shown again.
    return SimpleNamespace(id=sig_id, category=sig_category, template=clean_text(sig_template, MAX_TEMPLATE))


def _insert_lesson(sql: SqlWriter, lesson: SimpleNamespace, signature_id: int) -> None:
    from hpcmem.kb.store.reader import LESSON_COLUMNS  # every column of models.Lesson

    values = {c: getattr(lesson, c) for c in LESSON_COLUMNS if c != "signature_id"}
    sql.insert("lessons", {"signature_id": signature_id, **values},
               json_columns=("actions", "safety_flags", "job_context"))
    for alias in lesson.aliases:
        sql.insert("lesson_aliases", {"lesson_id": lesson.id, **vars(alias)})
    for cond in lesson.conditions:
        sql.insert("lesson_conditions", {"lesson_id": lesson.id, **vars(cond)})
    for item in lesson.evidence:
        sql.insert("lesson_evidence", {"lesson_id": lesson.id, **vars(item)})


def lesson_to_dict(lesson: Lesson | SimpleNamespace, sig: Signature | SimpleNamespace | None = None) -> dict[str, Any]:
    """A lesson as recall, export and the audit log show it (an ORM row or record_lesson's values)."""
    sig = sig or lesson.signature
    return {
        "lesson_id": lesson.id,
        "fingerprint": lesson.fingerprint,
        "category": sig.category if sig is not None else None,
        "template": sig.template if sig is not None else None,
        "scope": lesson.scope,
        "scope_name": lesson.scope_name,
        "context": lesson.context,
        "cause": lesson.cause,
        "fix": lesson.fix,
        "actions": list(lesson.actions or []),
        "conditions": [
            {"kind": c.kind, "name": c.name, "value": c.value, "op": c.op} for c in (lesson.conditions or [])
        ],
        "status": lesson.status,
        "status_reason": lesson.status_reason,
        "confidence": round(float(lesson.confidence), 4),
        "confirmations": lesson.confirmations,
        "contradictions": lesson.contradictions,
        "safety_flags": list(lesson.safety_flags or []),
        "provenance": {
            "source": lesson.source,
            "author": lesson.author,
            "created_at": lesson.created_at.isoformat() if lesson.created_at else None,
            "evidence": [
                {"kind": e.kind, "job_id": e.job_id, "occurrence_id": e.occurrence_id} for e in (lesson.evidence or [])
            ],
        },
        "valid_until": lesson.valid_until.isoformat() if lesson.valid_until else None,
        "excerpt": lesson.excerpt,
        "job_context": dict(getattr(lesson, "job_context", None) or {}),
        "aliases": [
            {"fingerprint": a.fingerprint, "template": a.template, "category": a.category, "source": a.source,
             "created_at": a.created_at.isoformat() if a.created_at else None}
            for a in (lesson.aliases or [])
        ],
    }
