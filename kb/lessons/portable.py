"""Export and import lessons as JSONL, one lesson per line (``schemas/lesson.schema.json``).

Labs keep shared lessons under review in git and carry them to another cluster, so:

- an export line holds everything a lesson is: signature, text, actions, conditions,
  status, provenance (source, author, times) and evidence (job ids, never occurrence
  rows: those are local to a store);
- export passes every text through the redactor again, in case an older store holds
  text stored before a redaction rule existed;
- import validates the whole file first (any bad line: nothing is stored), then runs
  each lesson through the same gate as ``record_lesson`` (redaction, sanitising, the
  safety lint, the injection check) and keeps its provenance; into a shared store, a
  lesson flagged as an injection refuses the whole file;
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

from hpcmem.kb.lessons.curation import _check_statuses, _gate_actions, _guard, _open, _writing, scope_label, stores_for
from hpcmem.kb.errors import InputError
from hpcmem.kb.lessons.write import MAX_TEMPLATE, audit, clean_text, ensure_signature, lesson_to_dict, safety_flags
from hpcmem.kb.store.models import Lesson, LessonCondition, LessonEvidence
from hpcmem.kb.safety.lint import INJECTION_CODES
from hpcmem.kb.store.stack import StoreStack
from hpcmem.kb.store.database import Store
from hpcmem.kb.store.column_types import utcnow

FORMAT = "hpcmem-lesson/1"
# Fields whose difference makes an imported lesson "other content".
CONTENT_FIELDS = ("fingerprint", "context", "cause", "fix", "actions", "conditions", "status", "status_reason",
                  "confidence", "confirmations", "contradictions", "source", "author", "valid_until")


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value else None


def _time(value: str | None) -> dt.datetime | None:
    if value is None:
        return None
    parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.timezone.utc)


def lesson_record(lesson: Lesson) -> dict[str, Any]:
    """One export line for ``lesson`` (text redacted again on the way out)."""
    sig = lesson.signature
    return {
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
    }


def export_lessons(stack: StoreStack, *, scope: str | None = None,
                   statuses: list[str] | None = None) -> Iterator[dict[str, Any]]:
    """Export lines for the lessons of one scope (or the whole stack), oldest first."""
    _check_statuses(statuses)
    for store in stores_for(stack, scope):
        _open(store, stack)
        with _guard(store, "read lessons"), store.session() as session:
            query = (select(Lesson).options(selectinload(Lesson.conditions), selectinload(Lesson.evidence),
                                            selectinload(Lesson.signature)).order_by(Lesson.created_at, Lesson.id))
            if statuses:
                query = query.where(Lesson.status.in_(statuses))
            for lesson in session.scalars(query):
                yield lesson_record(lesson)


# --- Import ------------------------------------------------------------------------------------


def _validator():
    try:
        import jsonschema
    except ImportError:  # pragma: no cover - installed with hpcmem
        raise InputError("importing lessons needs the jsonschema package", hint="pip install jsonschema") from None
    schema = json.loads(resources.files("hpcmem.schemas").joinpath("lesson.schema.json").read_text())
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


def read_lessons_file(path: Path) -> list[dict[str, Any]]:
    """Every line of a JSONL export, validated; the first bad line raises ``InputError``."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise InputError(f"{path} is not UTF-8 text") from None
    validator = _validator()
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path} line {number}: not JSON ({exc.msg})") from None
        error = next(iter(sorted(validator.iter_errors(record), key=lambda e: list(e.path))), None)
        if error is not None:
            where = "/".join(str(p) for p in error.path) or "(lesson)"
            raise InputError(f"{path} line {number}: {where}: {error.message[:200]}",
                             hint="lines must follow schemas/lesson.schema.json")
        records.append(record)
    return records


def _gated(record: dict[str, Any], store: Store) -> dict[str, Any]:
    """The record as it would be stored: redacted, sanitised, linted, in the target's scope."""
    cause, fix = clean_text(record["cause"]), clean_text(record["fix"])
    if not cause or not fix:
        raise InputError(f"lesson {record['id']}: cause and fix must not be empty")
    actions = _gate_actions(record.get("actions", []))
    owner = record.get("author") if store.scope == "user" else None
    return {
        "fingerprint": record["fingerprint"], "context": clean_text(record.get("context")) or None,
        "cause": cause, "fix": fix, "actions": actions,
        "conditions": [{"kind": c["kind"], "name": clean_text(c["name"], 128), "value": c.get("value"),
                        "op": c.get("op")} for c in record.get("conditions", [])],
        "status": record["status"], "status_reason": clean_text(record.get("status_reason")),
        "confidence": round(float(record.get("confidence", 0.5)), 4),
        "confirmations": record.get("confirmations", 0), "contradictions": record.get("contradictions", 0),
        "source": record["source"], "author": record.get("author"),
        "valid_until": _iso(_time(record.get("valid_until"))),
        "safety_flags": safety_flags(cause, fix, actions, owner=owner),
    }


def _current(lesson: Lesson) -> dict[str, Any]:
    data = lesson_to_dict(lesson)
    return {k: data[k] for k in CONTENT_FIELDS if k in data} | {
        "source": lesson.source, "author": lesson.author, "status_reason": lesson.status_reason}


def _apply(lesson: Lesson, gated: dict[str, Any]) -> None:
    for key in ("fingerprint", "context", "cause", "fix", "actions", "status", "status_reason", "confidence",
                "confirmations", "contradictions", "source", "author", "safety_flags"):
        setattr(lesson, key, gated[key])
    lesson.valid_until = _time(gated["valid_until"])
    lesson.conditions = [LessonCondition(**c) for c in gated["conditions"]]


def _evidence(record: dict[str, Any]) -> list[LessonEvidence]:
    return [LessonEvidence(kind=clean_text(e["kind"], 32), job_id=e.get("job_id"), actor=e.get("actor"),
                           note=clean_text(e.get("note"), 500), created_at=_time(e.get("at")) or utcnow())
            for e in record.get("evidence", [])]


def import_lessons(stack: StoreStack, path: Path, *, scope: str, actor: str) -> dict[str, Any]:
    """Import a JSONL export into the store of ``scope``, in one transaction."""
    records = read_lessons_file(path)
    store = stack.by_scope(scope)
    _open(store, stack)
    counts = {"created": 0, "updated": 0, "unchanged": 0, "kept_newer": 0}
    ids: list[str] = []
    # Gate the whole file before writing anything: one bad lesson stores nothing.
    gated_all = [_gated(record, store) for record in records]
    if store.scope != "user":
        for number, gated in enumerate(gated_all, 1):
            injections = sorted({f["code"] for f in gated["safety_flags"] if f["code"] in INJECTION_CODES})
            if injections:
                raise InputError(f"{path} lesson {number} ({records[number - 1]['id'][:8]}) reads like instructions "
                                 f"to an agent ({', '.join(injections)}); it stays out of shared stores")
    with _writing(store, "import lessons") as session:
        for record, gated in zip(records, gated_all):
            sig = ensure_signature(session, record["fingerprint"], record["template"], record["category"])
            lesson = session.get(Lesson, record["id"])
            updated_at = _time(record["updated_at"])
            ids.append(record["id"])
            if lesson is None:
                lesson = Lesson(id=record["id"], signature_id=sig.id, scope=store.scope,
                                scope_name=store.name if store.scope == "lab" else None,
                                created_at=_time(record.get("created_at")) or updated_at, updated_at=updated_at)
                _apply(lesson, gated)
                lesson.evidence = _evidence(record)
                session.add(lesson)
                session.flush()
                audit(session, actor, "import", lesson.id, None, lesson_to_dict(lesson, sig),
                      reason=f"imported from {Path(path).name}")
                counts["created"] += 1
                continue
            if _current(lesson) == {k: gated[k] for k in _current(lesson)}:
                counts["unchanged"] += 1
                continue
            if lesson.updated_at is not None and updated_at <= lesson.updated_at:
                counts["kept_newer"] += 1  # the store's copy is as new or newer: leave it
                continue
            before = lesson_to_dict(lesson)
            _apply(lesson, gated)
            lesson.signature_id, lesson.updated_at = sig.id, updated_at
            have = {(e.kind, e.job_id, e.note) for e in lesson.evidence}
            lesson.evidence.extend(e for e in _evidence(record) if (e.kind, e.job_id, e.note) not in have)
            session.flush()
            audit(session, actor, "import_update", lesson.id, before, lesson_to_dict(lesson, sig),
                  reason=f"newer copy in {Path(path).name}")
            counts["updated"] += 1
    return counts | {"store": scope_label(store), "lessons": len(records), "ids": ids}
