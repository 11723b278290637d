"""Evidence for and against lessons, and the confidence it adds up to.

Confidence model (Beta-Bernoulli with time decay):

    alpha = k * p0 + sum(w_i for each confirmation i)
    beta  = k * (1 - p0) + sum(w_i for each contradiction i)
    confidence = alpha / (alpha + beta),   w_i = 0.5 ** (age_i / half_life)

``p0`` is the prior of the lesson's source (curated 0.8, human 0.6, inferred 0.5, agent
0.45, ...; ``kb/lessons/write.py``), ``k`` = 2 its weight in pseudo-observations, and the
half-life is 90 days: a confirmation from last week counts fully, one from a year ago
about a sixteenth, so a lesson that stopped working falls quickly once contradicted.

Confirmations: `hpcmem feedback --worked`, a successful resubmission paired with the
failure by `learn` (``fixed_by``), or a recalled lesson followed by the same job
succeeding. Contradictions: `hpcmem feedback --failed`, or the same failure recurring
for the user after the lesson was recalled.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Iterable

from sqlalchemy import select
from sqlalchemy.orm import Session

from hpcmem.kb.errors import InputError, NotFound
from hpcmem.kb.lessons.write import INITIAL_CONFIDENCE, audit, clean_text, lesson_to_dict
from hpcmem.kb.store.models import JobRecord, Lesson, LessonEvidence, Occurrence, RecallEvent, Signature
from hpcmem.kb.store.column_types import utcnow

PRIOR_WEIGHT = 2.0
HALF_LIFE_DAYS = 90.0
CONFIRMING = frozenset({"worked", "fixed_by", "confirmed_by_history"})
CONTRADICTING = frozenset({"failed", "recurred"})
EVIDENCE_WINDOW_HOURS = 72.0


def confidence(source: str, events: Iterable[tuple[str, dt.datetime]], now: dt.datetime,
               half_life_days: float = HALF_LIFE_DAYS) -> float:
    """Posterior mean of the lesson working, from its source's prior and dated evidence."""
    p0 = INITIAL_CONFIDENCE.get(source, 0.4)
    alpha, beta = PRIOR_WEIGHT * p0, PRIOR_WEIGHT * (1 - p0)
    for kind, when in events:
        age_days = max((now - when).total_seconds() / 86400, 0.0) if when else 0.0
        weight = 0.5 ** (age_days / half_life_days)
        if kind in CONFIRMING:
            alpha += weight
        elif kind in CONTRADICTING:
            beta += weight
    return round(alpha / (alpha + beta), 4)


def refresh(session: Session, lesson: Lesson, now: dt.datetime | None = None) -> None:
    """Recompute a lesson's counts and confidence from all of its evidence."""
    now = now or utcnow()
    events = [(e.kind, e.created_at) for e in lesson.evidence]
    lesson.confirmations = sum(kind in CONFIRMING for kind, _ in events)
    lesson.contradictions = sum(kind in CONTRADICTING for kind, _ in events)
    confirmed = [when for kind, when in events if kind in CONFIRMING and when]
    lesson.last_confirmed_at = max(confirmed) if confirmed else lesson.last_confirmed_at
    lesson.confidence = confidence(lesson.source, events, now)
    lesson.updated_at = now


def add_evidence(session: Session, lesson: Lesson, kind: str, *, actor: str, job_id: str | None = None,
                 note: str | None = None, occurrence_id: int | None = None, now: dt.datetime | None = None) -> None:
    now = now or utcnow()
    before = {"confidence": lesson.confidence, "confirmations": lesson.confirmations,
              "contradictions": lesson.contradictions}
    lesson.evidence.append(LessonEvidence(kind=kind, job_id=job_id, actor=actor, note=clean_text(note, 500),
                                          occurrence_id=occurrence_id, created_at=now))
    session.flush()
    refresh(session, lesson, now)
    after = {"confidence": lesson.confidence, "confirmations": lesson.confirmations,
             "contradictions": lesson.contradictions}
    audit(session, actor, f"evidence:{kind}", lesson.id, before, after, note)


def feedback(stack, lesson_id: str, *, worked: bool, actor: str, job_id: str | None = None,
             note: str | None = None, error_text: str | None = None, scope: str | None = None) -> dict[str, Any]:
    """`hpcmem feedback`: a person's or agent's verdict on a lesson they applied.

    ``lesson_id`` is the whole id or its first 8 (or more) characters, as every other
    command takes it (``curation.find_lesson``); ``scope`` names the store when a prefix is in
    several. With the error it was applied to, a confirmation makes that error's fingerprint
    an alias of the lesson (its next recurrence is an exact match) and a contradiction
    removes it.
    """
    from hpcmem.kb.lessons.aliases import add_alias, alias_from_text, remove_alias
    from hpcmem.kb.lessons.curation import find_lesson
    from hpcmem.kb.signatures.fingerprint import CONTENTLESS, has_content, signature_text

    if not lesson_id.strip():
        raise InputError("give the lesson id (the 8 characters recall shows, or lesson_id from recall --json)")
    alias = None
    if error_text is not None:
        text = signature_text(error_text)  # as recall fingerprints the same error
        if not has_content(text):
            raise InputError(CONTENTLESS)
        alias = alias_from_text(text)
    store, full_id = find_lesson(stack, lesson_id, scope)
    with store.transaction() as session:
        lesson = session.get(Lesson, full_id)
        if lesson is None:
            raise NotFound(f"lesson {full_id} disappeared while giving feedback")
        add_evidence(session, lesson, "worked" if worked else "failed", actor=actor, job_id=job_id, note=note)
        if alias is not None and worked:
            add_alias(session, lesson, alias, source="feedback", actor=actor)
        elif alias is not None:
            remove_alias(session, lesson, alias["fingerprint"], actor=actor, reason="feedback: the fix failed")
        result = lesson_to_dict(lesson)
    result["store"] = store.name
    return result


@dataclass
class JudgeSummary:
    judged: int = 0
    worked: int = 0
    recurred: int = 0
    no_outcome: int = 0
    pending: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


def judge_recall_events(store, *, window_hours: float = EVIDENCE_WINDOW_HOURS, now: dt.datetime | None = None,
                        actor: str = "hpcmem-evidence") -> JudgeSummary:
    """Turn what happened after each recall into evidence on the lesson (same store only).

    Recurred: the same fingerprint failed again for the user within the window after the
    recall. Worked: a later job of the user with the recalled job's name (or work dir)
    completed within the window and the failure did not recur. Otherwise, once the window
    has passed, the event closes with no outcome.
    """
    now = now or utcnow()
    window = dt.timedelta(hours=window_hours)
    summary = JudgeSummary()
    with store.transaction() as session:
        events = session.scalars(select(RecallEvent).where(RecallEvent.outcome.is_(None))).all()
        for event in events:
            outcome = _outcome(session, event, window, now)
            if outcome is None:
                summary.pending += 1
                continue
            event.outcome = outcome
            summary.judged += 1
            if outcome == "unknown":
                summary.no_outcome += 1
                continue
            setattr(summary, outcome, getattr(summary, outcome) + 1)
            lesson = session.get(Lesson, event.lesson_id)
            if lesson is not None:
                kind = "confirmed_by_history" if outcome == "worked" else "recurred"
                add_evidence(session, lesson, kind, actor=actor, job_id=event.job_id,
                             note=f"after a recall at {event.recalled_at:%Y-%m-%d %H:%M} UTC", now=now)
                _learn_variant(session, lesson, event, outcome, actor)
    return summary


def _learn_variant(session: Session, lesson: Lesson, event: RecallEvent, outcome: str, actor: str) -> None:
    """The recalled failure's fingerprint becomes an alias when the job then succeeded, and
    stops being one when the failure recurred."""
    from hpcmem.kb.lessons.aliases import add_alias, alias_from_store, remove_alias

    if outcome == "worked":
        alias = alias_from_store(session, event.fingerprint)
        if alias is not None:
            add_alias(session, lesson, alias, source="resubmission", actor=actor)
    else:
        remove_alias(session, lesson, event.fingerprint, actor=actor, reason="the failure recurred after a recall")


def _outcome(session: Session, event: RecallEvent, window: dt.timedelta, now: dt.datetime) -> str | None:
    until = event.recalled_at + window
    recurred = session.scalar(
        select(Occurrence.id).join(Signature, Signature.id == Occurrence.signature_id).where(
            Occurrence.user_name == event.user_name, Occurrence.end_time > event.recalled_at,
            Occurrence.end_time <= until, Signature.fingerprint == event.fingerprint,
        ).limit(1)
    )
    if recurred is not None:
        return "recurred"
    if event.job_id:
        failed = session.scalars(select(JobRecord).where(JobRecord.job_id == event.job_id)).first()
        if failed is not None:
            same_job = (JobRecord.job_name == failed.job_name) if failed.job_name else (JobRecord.work_dir == failed.work_dir)
            success = session.scalar(
                select(JobRecord.id).where(  # cluster first: the (cluster, user, submit time) index
                    JobRecord.cluster == failed.cluster, JobRecord.user_name == event.user_name,
                    JobRecord.failed.is_(False), same_job,
                    JobRecord.submit_time > event.recalled_at, JobRecord.submit_time <= until,
                ).limit(1)
            )
            if success is not None:
                return "worked"
    return "unknown" if now >= until else None
