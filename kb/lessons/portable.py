"""Export and import lessons as JSONL, one lesson per line (``schemas/lesson.schema.json``).

Labs keep shared lessons under review in git and carry them to another cluster, so:

- an export line holds everything a lesson is: signature, text, actions, conditions, the
  masked error excerpt and the known variants (aliases: `db refingerprint` needs both),
  status, provenance (source, author, times) and evidence (job ids, never occurrence
  rows: those are local to a store);
- export passes every text through the normaliser and the redactor again (every string
  of the line, actions, conditions and evidence included), in case an older store holds
  text stored before a redaction rule existed.

Anyone can write a file, so import takes it as claims, not facts:

- it validates the whole file first: a bad line (not JSON, NaN, a date that is not one,
  a date in the future, a bad action, a duplicate id) is one error naming ``file:line``,
  and nothing of the file is stored;
- each lesson passes the same gate as ``record_lesson`` (redaction, sanitising, the
  safety lint, the injection check); into a shared store, a lesson flagged as an
  injection refuses the whole file;
- each fingerprint is recomputed from the line's category and template, so a lesson
  cannot show one failure and be recalled for another;
- status, source, confidence, confirmations, contradictions, evidence and author are
  claims: a lesson lands as a *candidate* attributed to the importer (a claimed
  ``curated`` or ``rule`` source becomes ``human``, the confidence is that source's
  prior, no confirmations), for a lead to review like a proposal, and never replaces a
  lesson the store holds with any other status. Only ``keep_status`` keeps the claims:
  the store's database lets only lab leads and cluster admins write such rows, and into a
  lab store only its leads may ask for it (``curation.require_lead``, as for ``approve``:
  a SQLite lab store must name them); keeping a validated or stale status is an approval, so blocking
  safety flags need an override with a reason. Either way the claims go into the audit
  entry (``claimed``);
- import is idempotent by lesson id: the same file twice changes nothing. A lesson whose
  id exists with other content is replaced only when the file's ``updated_at`` is newer,
  and the replacement is audited with before and after.
"""

from __future__ import annotations

import datetime as dt
import json
from importlib import resources
from pathlib import Path
from typing import Any, Iterator

from sqlalchemy import select
from sqlalchemy.orm import selectinload

from hpcmem.kb.lessons.curation import (
    _check_statuses,
    _gate_actions,
    _guard,
    _open,
    _writing,
    require_lead,
    scope_label,
    stores_for,
)
from hpcmem.kb.errors import InputError
from hpcmem.kb.lessons.write import (
    INITIAL_CONFIDENCE,
    MAX_EXCERPT,
    MAX_TEMPLATE,
    audit,
    clean_text,
    ensure_signature,
    lesson_text,
    lesson_to_dict,
    safety_flags,
)
from hpcmem.kb.signatures.fingerprint import template_fingerprint
from hpcmem.kb.store.models import Lesson, LessonAlias, LessonCondition, LessonEvidence
from hpcmem.kb.safety.lint import INJECTION_CODES
from hpcmem.kb.safety.normalise import scrub_value
from hpcmem.kb.store.stack import StoreStack
from hpcmem.kb.store.database import Store
from hpcmem.kb.store.column_types import utcnow

FORMAT = "hpcmem-lesson/1"
# What a lesson says: an import compares and replaces these.
TEXT_FIELDS = ("fingerprint", "context", "cause", "fix", "actions", "conditions", "valid_until", "excerpt")
# What a file claims about a lesson's standing: kept only with keep_status.
CLAIM_FIELDS = ("status", "status_reason", "confidence", "confirmations", "contradictions", "source", "author")
# An unreviewed copy cannot claim review: curated (a lead approved it) and rule (hpcmem ships it).
UNREVIEWED_SOURCE = {"curated": "human", "rule": "human"}
REVIEWED_STATUSES = ("validated", "stale")  # keeping one of these is an approval
FUTURE_SLACK = dt.timedelta(minutes=5)  # the clocks of two clusters differ a little


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value else None


def _time(value: str | None) -> dt.datetime | None:
    if value is None:
        return None
    parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.timezone.utc)).astimezone(dt.timezone.utc)


def lesson_record(lesson: Lesson) -> dict[str, Any]:
    """One export line for ``lesson`` (text normalised and redacted again on the way out)."""
    sig = lesson.signature
    return scrub_value({
        "format": FORMAT, "id": lesson.id, "fingerprint": lesson.fingerprint,
        "category": sig.category if sig else "unknown", "template": clean_text(sig.template if sig else "", MAX_TEMPLATE),
        "scope": lesson.scope, "scope_name": lesson.scope_name, "context": clean_text(lesson.context),
        "cause": clean_text(lesson.cause), "fix": clean_text(lesson.fix), "actions": list(lesson.actions or []),
        "conditions": [{"kind": c.kind, "name": c.name, "value": c.value, "op": c.op} for c in lesson.conditions],
        "status": lesson.status, "status_reason": clean_text(lesson.status_reason),
        "confidence": round(float(lesson.confidence), 4), "confirmations": lesson.confirmations,
        "contradictions": lesson.contradictions, "source": lesson.source, "author": lesson.author,
        "safety_flags": list(lesson.safety_flags or []), "created_at": _iso(lesson.created_at),
        "updated_at": _iso(lesson.updated_at or lesson.created_at), "valid_until": _iso(lesson.valid_until),
        "evidence": [{"kind": e.kind, "job_id": e.job_id, "actor": e.actor, "note": clean_text(e.note, 500),
                      "at": _iso(e.created_at)} for e in lesson.evidence],
        "excerpt": clean_text(lesson.excerpt, MAX_EXCERPT),
        "aliases": [{"fingerprint": a.fingerprint, "template": clean_text(a.template, MAX_TEMPLATE),
                     "category": a.category, "excerpt": clean_text(a.excerpt, MAX_EXCERPT), "source": a.source,
                     "created_at": _iso(a.created_at)} for a in lesson.aliases],
    })[0]


def export_lessons(stack: StoreStack, *, scope: str | None = None,
                   statuses: list[str] | None = None) -> Iterator[dict[str, Any]]:
    """Export lines for the lessons of one scope (or the whole stack), oldest first."""
    _check_statuses(statuses)
    for store in stores_for(stack, scope):
        _open(store, stack)
        with _guard(store, "read lessons"), store.session() as session:
            query = (select(Lesson).options(selectinload(Lesson.conditions), selectinload(Lesson.evidence),
                                            selectinload(Lesson.aliases), selectinload(Lesson.signature))
                     .order_by(Lesson.created_at, Lesson.id))
            if statuses:
                query = query.where(Lesson.status.in_(statuses))
            for lesson in session.scalars(query):
                yield lesson_record(lesson)


# --- Reading and checking a file ---------------------------------------------------------------


def _validator():
    try:
        import jsonschema
    except ImportError:  # pragma: no cover - installed with hpcmem
        raise InputError("importing lessons needs the jsonschema package", hint="pip install jsonschema") from None
    schema = json.loads(resources.files("hpcmem.schemas").joinpath("lesson.schema.json").read_text())
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


def _not_a_number(name: str) -> None:
    raise ValueError(f"{name} is not a number")  # json accepts NaN and Infinity; the schema cannot see them


def _check_times(record: dict[str, Any], now: dt.datetime) -> None:
    """Every date parses, and none but valid_until is in the future: a future updated_at
    would win against every later import of the lesson."""
    stamps = [("created_at", record.get("created_at")), ("updated_at", record["updated_at"]),
              ("valid_until", record.get("valid_until"))]
    stamps += [(f"evidence/{i}/at", e.get("at")) for i, e in enumerate(record.get("evidence", []))]
    stamps += [(f"aliases/{i}/created_at", a.get("created_at")) for i, a in enumerate(record.get("aliases", []))]
    for name, value in stamps:
        try:
            when = _time(value)
        except (ValueError, OverflowError):
            raise InputError(f"{name}: {value[:40]!r} is not a date-time") from None
        if when is not None and name != "valid_until" and when > now + FUTURE_SLACK:
            raise InputError(f"{name}: {value} is in the future")


def read_lessons_file(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """Every lesson of a JSONL export with its line number, validated; a bad line raises
    ``InputError`` naming ``file:line``."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    validator, now = _validator(), utcnow()
    records: list[tuple[int, dict[str, Any]]] = []
    seen: dict[str, int] = {}
    # split on newlines only: a JSON string may hold U+2028, which str.splitlines() splits on
    for number, chunk in enumerate(raw.split(b"\n"), 1):
        where = f"{path}:{number}"
        try:
            line = chunk.decode("utf-8")
        except UnicodeDecodeError:
            raise InputError(f"{where}: not UTF-8 text") from None
        if not line.strip():
            continue
        try:
            record = json.loads(line, parse_constant=_not_a_number)
            json.dumps(record, ensure_ascii=False).encode("utf-8")  # a lone surrogate escape is not text
        except json.JSONDecodeError as exc:
            raise InputError(f"{where}: not JSON ({exc.msg})") from None
        except UnicodeEncodeError:
            raise InputError(f"{where}: not text (a lone surrogate escape such as \\ud800)") from None
        except (ValueError, RecursionError) as exc:
            reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
            raise InputError(f"{where}: not JSON ({reason})") from None
        error = next(iter(sorted(validator.iter_errors(record), key=lambda e: list(e.path))), None)
        if error is not None:
            field = "/".join(str(p) for p in error.path) or "(lesson)"
            raise InputError(f"{where}: {field}: {error.message[:200]}",
                             hint="lines must follow schemas/lesson.schema.json")
        try:
            _check_times(record, now)
        except InputError as exc:
            raise InputError(f"{where}: {exc}") from None
        if record["id"] in seen:
            raise InputError(f"{where}: lesson {record['id']} is on line {seen[record['id']]} too")
        seen[record["id"]] = number
        records.append((number, record))
    return records


# --- Import ------------------------------------------------------------------------------------


def _gated(record: dict[str, Any], store: Store, *, keep_status: bool, actor: str, origin: str) -> dict[str, Any]:
    """The lesson as it would be stored: through the gate, its fingerprint recomputed, and
    the file's claims kept only with ``keep_status``."""
    cause, fix = lesson_text(record["cause"], "cause"), lesson_text(record["fix"], "fix")
    if not cause or not fix:
        raise InputError("cause and fix must not be empty")
    actions = _gate_actions(record.get("actions", []))
    fp = template_fingerprint(record["category"], record["template"])
    aliases: dict[str, dict[str, Any]] = {}
    for a in record.get("aliases", []):
        alias_fp = template_fingerprint(a["category"], a["template"])
        if alias_fp != fp:
            aliases.setdefault(alias_fp, {"fingerprint": alias_fp, "template": clean_text(a["template"], MAX_TEMPLATE),
                                          "category": clean_text(a["category"], 64),
                                          "excerpt": clean_text(a.get("excerpt"), MAX_EXCERPT),
                                          "source": clean_text(a.get("source"), 32) or "import", "actor": actor})
    gated = {
        "fingerprint": fp, "context": lesson_text(record.get("context"), "context") or None, "cause": cause, "fix": fix,
        "actions": actions,
        "conditions": [{"kind": c["kind"], "name": clean_text(c["name"], 128),
                        "value": clean_text(c.get("value"), 256), "op": c.get("op")}
                       for c in record.get("conditions", [])],
        "valid_until": _iso(_time(record.get("valid_until"))),
        "excerpt": clean_text(record.get("excerpt"), MAX_EXCERPT) or None, "aliases": list(aliases.values()),
        # the lint's "your own paths" are the store owner's, and the importer owns a user store
        "safety_flags": safety_flags(cause, fix, actions, owner=actor if store.scope == "user" else None),
    }
    if keep_status:
        return gated | {
            "status": record["status"], "status_reason": clean_text(record.get("status_reason")),
            "confidence": round(float(record.get("confidence", 0.5)), 4),
            "confirmations": record.get("confirmations", 0), "contradictions": record.get("contradictions", 0),
            "source": record["source"], "author": clean_text(record.get("author"), 64)}
    source = UNREVIEWED_SOURCE.get(record["source"], record["source"])
    return gated | {"status": "candidate", "status_reason": f"imported by {actor} from {origin}",
                    "confidence": INITIAL_CONFIDENCE[source], "confirmations": 0, "contradictions": 0,
                    "source": source, "author": actor}


def _cleaned(value: Any) -> Any:
    """A claim as the audit log keeps it: every string redacted and sanitised."""
    if isinstance(value, str):
        return clean_text(value, 500)
    if isinstance(value, list):
        return [_cleaned(v) for v in value]
    if isinstance(value, dict):
        return {k: _cleaned(v) for k, v in value.items()}
    return value


def _claims(record: dict[str, Any]) -> dict[str, Any]:
    """What the line said about the lesson's standing and origin, for the audit entry."""
    keys = CLAIM_FIELDS + ("fingerprint", "created_at", "updated_at", "evidence")
    return _cleaned({k: record[k] for k in keys if k in record})


def _current(lesson: Lesson, keep_status: bool) -> dict[str, Any]:
    data = lesson_to_dict(lesson)
    current = {k: data[k] for k in TEXT_FIELDS}
    if keep_status:
        current |= {k: data[k] for k in CLAIM_FIELDS if k in data} | {
            "source": lesson.source, "author": lesson.author}
    return current


def _apply(lesson: Lesson, gated: dict[str, Any], *, claims: bool) -> None:
    for key in ("fingerprint", "context", "cause", "fix", "actions", "excerpt", "safety_flags"):
        setattr(lesson, key, gated[key])
    if claims:
        for key in CLAIM_FIELDS:
            setattr(lesson, key, gated[key])
    lesson.valid_until = _time(gated["valid_until"])
    lesson.conditions = [LessonCondition(**c) for c in gated["conditions"]]
    have = {a.fingerprint for a in lesson.aliases}
    lesson.aliases.extend(LessonAlias(**a) for a in gated["aliases"] if a["fingerprint"] not in have)


def _evidence(record: dict[str, Any]) -> list[LessonEvidence]:
    return [LessonEvidence(kind=clean_text(e["kind"], 32), job_id=clean_text(e.get("job_id"), 64),
                           actor=clean_text(e.get("actor"), 64),
                           note=clean_text(e.get("note"), 500), created_at=_time(e.get("at")) or utcnow())
            for e in record.get("evidence", [])]


def _overridden(gated: dict[str, Any], where: str, lesson_id: str, override: bool) -> list[str]:
    """Blocking codes a kept validated or stale status overrides (an approval); raises without
    the override."""
    if gated["status"] not in REVIEWED_STATUSES:
        return []
    blocking = sorted({f["code"] for f in gated["safety_flags"] if f.get("severity") == "block"})
    if blocking and not override:
        raise InputError(f"{where}: refused: lesson {lesson_id[:8]} has blocking safety flags "
                         f"({', '.join(blocking)}) and keeping its status {gated['status']} approves it",
                         hint="import it as a candidate (without --keep-status), or add --override-safety --reason TEXT")
    return blocking


def import_lessons(stack: StoreStack, path: Path, *, scope: str, actor: str, keep_status: bool = False,
                   override_safety: bool = False, reason: str | None = None) -> dict[str, Any]:
    """Import a JSONL export into the store of ``scope``, in one transaction: as candidates
    attributed to ``actor``, or with the file's status and provenance (``keep_status``)."""
    if override_safety and not keep_status:
        raise InputError("--override-safety goes with --keep-status: an imported candidate keeps its flags "
                         "for the lead's review")
    if override_safety and not (reason and reason.strip()):
        raise InputError("--override-safety needs --reason TEXT: the override is audited")
    records = read_lessons_file(path)
    store = stack.by_scope(scope)
    if keep_status:  # keeping a validated status is an approval: a lead's move
        require_lead(store, actor, "import lessons with their status")
    _open(store, stack)
    origin = clean_text(Path(path).name, 200)  # goes into status_reason and evidence: plain text
    counts = {"created": 0, "updated": 0, "unchanged": 0, "kept_newer": 0, "kept_reviewed": 0}
    ids: list[str] = []
    # Gate the whole file before writing anything: one bad lesson stores nothing.
    gated_all = []
    for number, record in records:
        try:
            gated_all.append(_gated(record, store, keep_status=keep_status, actor=actor, origin=origin))
        except InputError as exc:
            raise InputError(f"{path}:{number}: {exc}", hint=exc.hint) from None
    if store.scope != "user":
        for (number, record), gated in zip(records, gated_all):
            injections = sorted({f["code"] for f in gated["safety_flags"] if f["code"] in INJECTION_CODES})
            if injections:
                raise InputError(f"{path}:{number}: lesson {record['id'][:8]} reads like instructions to an agent "
                                 f"({', '.join(injections)}); it stays out of shared stores")
    how = "with its status" if keep_status else "as a candidate"
    with _writing(store, "import lessons with their status" if keep_status else "import lessons") as session:
        for (number, record), gated in zip(records, gated_all):
            where = f"{path}:{number}"
            sig = ensure_signature(session, gated["fingerprint"], record["template"],
                                   clean_text(record["category"], 64))
            lesson = session.get(Lesson, record["id"])
            updated_at = _time(record["updated_at"])
            ids.append(record["id"])
            claimed = {"claimed": _claims(record)}
            if lesson is None:
                overridden = _overridden(gated, where, record["id"], override_safety)
                lesson = Lesson(id=record["id"], signature_id=sig.id, scope=store.scope,
                                scope_name=store.name if store.scope == "lab" else None,
                                created_at=_time(record.get("created_at")) or updated_at, updated_at=updated_at)
                _apply(lesson, gated, claims=True)
                # an unreviewed copy's evidence is a claim (audited); it is marked like a proposal
                lesson.evidence = _evidence(record) if keep_status else [
                    LessonEvidence(kind="proposal", actor=actor, note=f"imported by {actor} from {origin}")]
                session.add(lesson)
                session.flush()
                _audit_override(session, actor, lesson, overridden, reason)
                audit(session, actor, "import", lesson.id, None, lesson_to_dict(lesson, sig) | claimed,
                      reason=f"imported {how} from {origin}:{number}")
                counts["created"] += 1
                continue
            current = _current(lesson, keep_status)
            new_aliases = {a["fingerprint"] for a in gated["aliases"]} - {a.fingerprint for a in lesson.aliases}
            if current == {k: gated[k] for k in current} and not new_aliases:
                counts["unchanged"] += 1
                continue
            if lesson.updated_at is not None and updated_at <= lesson.updated_at:
                counts["kept_newer"] += 1  # the store's copy is as new or newer: leave it
                continue
            if not keep_status and lesson.status != "candidate":
                counts["kept_reviewed"] += 1  # a claim cannot replace what a lead reviewed
                continue
            overridden = _overridden(gated, where, record["id"], override_safety) if keep_status else []
            before = lesson_to_dict(lesson)
            _apply(lesson, gated, claims=keep_status)
            lesson.signature_id, lesson.updated_at = sig.id, updated_at
            if keep_status:
                have = {(e.kind, e.job_id, e.note) for e in lesson.evidence}
                lesson.evidence.extend(e for e in _evidence(record) if (e.kind, e.job_id, e.note) not in have)
            session.flush()
            _audit_override(session, actor, lesson, overridden, reason)
            audit(session, actor, "import_update", lesson.id, before, lesson_to_dict(lesson, sig) | claimed,
                  reason=f"newer copy {how} in {origin}:{number}")
            counts["updated"] += 1
    return counts | {"store": scope_label(store), "lessons": len(records), "ids": ids, "keep_status": keep_status}


def _audit_override(session, actor: str, lesson: Lesson, overridden: list[str], reason: str | None) -> None:
    if overridden:
        audit(session, actor, "override_safety", lesson.id, {"safety_flags": lesson.safety_flags},
              {"overridden": overridden, "for": "import"}, reason=reason)
