"""Lessons learn their variants: confirmed fingerprints become aliases, contradicted ones go.

A lesson is recorded from one instance of a failure; its recurrences are worded differently
(another command, path, wrapper). When a recurrence is confirmed to be fixed by the lesson -
``feedback --worked`` given with the error, or the same job succeeding after a recall - the
recurrence's fingerprint becomes an **alias** of the lesson, and the next instance with that
fingerprint is an exact match. A contradiction (``feedback --failed`` with the error, or the
failure recurring after a recall) removes the alias again. Every change is audited.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from hpcmem.kb.lessons.write import MAX_TEMPLATE, audit, clean_text, error_excerpt
from hpcmem.kb.store.models import Lesson, LessonAlias, Signature
from hpcmem.kb.signatures.fingerprint import fingerprint


def alias_from_text(text: str) -> dict[str, Any]:
    """The alias fields of an error text (the caller redacts it first); the fingerprint from
    the text as given, as recall computes it, the stored texts sanitised as a lesson's are."""
    sig = fingerprint(text)
    return {"fingerprint": sig.fingerprint, "template": clean_text(sig.template, MAX_TEMPLATE), "category": sig.category,
            "excerpt": error_excerpt(text)}


def add_alias(session: Session, lesson: Lesson, alias: dict[str, Any], *, source: str, actor: str) -> bool:
    """Make ``alias`` a variant of ``lesson``; False when it is the lesson's own or already known."""
    if alias["fingerprint"] == lesson.fingerprint:
        return False
    if any(a.fingerprint == alias["fingerprint"] for a in lesson.aliases):
        return False
    lesson.aliases.append(LessonAlias(fingerprint=alias["fingerprint"], template=alias["template"],
                                      category=alias["category"], excerpt=alias.get("excerpt"), source=source,
                                      actor=actor))
    session.flush()
    audit(session, actor, "alias:add", lesson.id, None,
          {"fingerprint": alias["fingerprint"], "template": alias["template"], "source": source})
    return True


def remove_alias(session: Session, lesson: Lesson, fp: str, *, actor: str, reason: str) -> bool:
    found = [a for a in lesson.aliases if a.fingerprint == fp]
    for alias in found:
        lesson.aliases.remove(alias)
        audit(session, actor, "alias:remove", lesson.id,
              {"fingerprint": alias.fingerprint, "template": alias.template}, None, reason)
    session.flush()
    return bool(found)


def alias_from_store(session: Session, fp: str) -> dict[str, Any] | None:
    """The alias fields of a fingerprint this store has seen (a failure ingested from a job)."""
    sig = session.scalars(select(Signature).where(Signature.fingerprint == fp)).first()
    if sig is None:
        return None
    return {"fingerprint": sig.fingerprint, "template": sig.template, "category": sig.category, "excerpt": None}
