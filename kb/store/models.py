"""The store's tables, as SQLAlchemy 2.0 typed ORM classes.

A store holds one scope's knowledge (a user's, a lab's or the cluster's):

- ``Signature``   a failure class: fingerprint of category + normalized template
- ``Occurrence``  one observed failure of a job, with the job's context
- ``JobRecord``   every ingested job in compact form, so a failure can be paired with
                  the resubmission that succeeded
- ``Lesson``      context / cause / fix for a signature, with status and confidence
- ``LessonCondition``  what a lesson depends on (module versions, partition limits...)
- ``LessonEvidence``   occurrences and feedback that back or contradict a lesson
- ``RecallEvent`` a lesson recalled for a user, judged later by what happened next
- ``EnvSnapshot`` the module environment and partitions at one point in time
- ``AuditEntry``  append-only log of every change to lessons (triggers forbid edits)
- ``StoreMeta``   key/value facts about the store itself (id, index generation)
- ``QueryVector`` cached query embeddings by template (recall without loading the model)

Changing anything here needs a new Alembic revision in ``kb/store/migrations/versions``;
``tests/kb/store/test_migrations.py`` fails when models and migrations disagree.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import (
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from hpcmem.kb.store.column_types import JSONType, UTCDateTime, metadata, utcnow

LESSON_STATUSES = ("candidate", "validated", "stale", "expired", "rejected")
SCOPES = ("user", "lab", "cluster")


class Base(DeclarativeBase):
    metadata = metadata
    type_annotation_map = {dict[str, Any]: JSONType, list[Any]: JSONType, dt.datetime: UTCDateTime}


class StoreMeta(Base):
    __tablename__ = "store_meta"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class QueryVector(Base):
    """Cached embedding of a query template, so a known template needs no model load."""

    __tablename__ = "query_vectors"

    template_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    model: Mapped[str] = mapped_column(String(128))
    vector: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class Signature(Base):
    __tablename__ = "signatures"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(64), unique=True)
    category: Mapped[str] = mapped_column(String(64), index=True)
    template: Mapped[str] = mapped_column(Text)
    first_seen: Mapped[dt.datetime] = mapped_column(default=utcnow)
    last_seen: Mapped[dt.datetime] = mapped_column(default=utcnow)
    count: Mapped[int] = mapped_column(Integer, default=0)
    # Canonical vector (float32 little-endian); the FAISS index is a rebuildable cache.
    embedding: Mapped[bytes | None] = mapped_column(LargeBinary)
    embedding_model: Mapped[str | None] = mapped_column(String(128))
    embedding_hash: Mapped[str | None] = mapped_column(String(64))

    occurrences: Mapped[list["Occurrence"]] = relationship(back_populates="signature")
    lessons: Mapped[list["Lesson"]] = relationship(back_populates="signature")


class Occurrence(Base):
    __tablename__ = "occurrences"
    # Re-ingesting the same job (from sacct, a log or the epilog) updates one row.
    __table_args__ = (
        UniqueConstraint("cluster", "job_id"),
        Index(None, "user_name", "signature_id"),
        # Both cover the dashboard's queries (kb/jobs/trends.py, migration 0005): failures per week
        # read (end_time, signature_id); recurrence groups by (signature, user).
        Index(None, "end_time", "signature_id"),
        Index(None, "signature_id", "user_name", "end_time", "account"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    signature_id: Mapped[int | None] = mapped_column(ForeignKey("signatures.id", ondelete="SET NULL"), index=True)
    cluster: Mapped[str] = mapped_column(String(64))
    job_id: Mapped[str] = mapped_column(String(64))
    job_name: Mapped[str | None] = mapped_column(String(256))
    user_name: Mapped[str | None] = mapped_column(String(64))
    account: Mapped[str | None] = mapped_column(String(64))
    partition: Mapped[str | None] = mapped_column(String(64))
    qos: Mapped[str | None] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(32))
    exit_code: Mapped[int | None] = mapped_column(Integer)
    exit_signal: Mapped[int | None] = mapped_column(Integer)
    failed_step: Mapped[str | None] = mapped_column(String(32))
    req_mem_mb: Mapped[float | None] = mapped_column(Float)
    req_cpus: Mapped[int | None] = mapped_column(Integer)
    req_nodes: Mapped[int | None] = mapped_column(Integer)
    req_gres: Mapped[str | None] = mapped_column(String(256))
    req_time_s: Mapped[int | None] = mapped_column(Integer)
    constraints: Mapped[str | None] = mapped_column(String(256))
    max_rss_mb: Mapped[float | None] = mapped_column(Float)
    elapsed_s: Mapped[int | None] = mapped_column(Integer)
    nodes: Mapped[str | None] = mapped_column(Text)
    work_dir: Mapped[str | None] = mapped_column(Text)
    submit_line: Mapped[str | None] = mapped_column(Text)
    modules: Mapped[list[Any] | None] = mapped_column()
    # The rest of the job's context (kb/jobs/context.FIELDS) that has no column above: GPUs,
    # per-CPU memory, the software stack, the program. Migration 0008.
    job_context: Mapped[dict[str, Any] | None] = mapped_column()
    message: Mapped[str | None] = mapped_column(Text)
    log_excerpt: Mapped[str | None] = mapped_column(Text)
    log_path: Mapped[str | None] = mapped_column(Text)
    source: Mapped[str] = mapped_column(String(32))
    submit_time: Mapped[dt.datetime | None] = mapped_column()
    start_time: Mapped[dt.datetime | None] = mapped_column()
    end_time: Mapped[dt.datetime | None] = mapped_column()
    observed_at: Mapped[dt.datetime] = mapped_column(default=utcnow)

    signature: Mapped[Signature | None] = relationship(back_populates="occurrences")


class JobRecord(Base):
    """Compact record of any ingested job; pairs failures with successful resubmissions."""

    __tablename__ = "job_records"
    __table_args__ = (
        UniqueConstraint("cluster", "job_id"),
        Index(None, "cluster", "user_name", "submit_time"),  # learn reads a user's jobs around a change
        Index(None, "change_seq"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    cluster: Mapped[str] = mapped_column(String(64))
    job_id: Mapped[str] = mapped_column(String(64))
    user_name: Mapped[str | None] = mapped_column(String(64))
    account: Mapped[str | None] = mapped_column(String(64))
    job_name: Mapped[str | None] = mapped_column(String(256))
    partition: Mapped[str | None] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(32))
    failed: Mapped[bool] = mapped_column(default=False)
    req_mem_mb: Mapped[float | None] = mapped_column(Float)
    req_cpus: Mapped[int | None] = mapped_column(Integer)
    req_gres: Mapped[str | None] = mapped_column(String(256))
    req_time_s: Mapped[int | None] = mapped_column(Integer)
    constraints: Mapped[str | None] = mapped_column(String(256))
    max_rss_mb: Mapped[float | None] = mapped_column(Float)
    elapsed_s: Mapped[int | None] = mapped_column(Integer)
    work_dir: Mapped[str | None] = mapped_column(Text)
    submit_line: Mapped[str | None] = mapped_column(Text)
    submit_time: Mapped[dt.datetime | None] = mapped_column()
    end_time: Mapped[dt.datetime | None] = mapped_column()
    # The Recorder's write counter (store_meta 'job_records.change_seq') when the row was
    # last written: learn reads the rows past its watermark. NULL: written before 0006.
    change_seq: Mapped[int | None] = mapped_column(Integer)


class Lesson(Base):
    __tablename__ = "lessons"
    __table_args__ = (Index(None, "fingerprint", "status"),)

    # A UUID string, so export/import across stores and clusters is idempotent by id.
    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    signature_id: Mapped[int | None] = mapped_column(ForeignKey("signatures.id", ondelete="SET NULL"), index=True)
    fingerprint: Mapped[str] = mapped_column(String(64))
    scope: Mapped[str] = mapped_column(String(16))
    scope_name: Mapped[str | None] = mapped_column(String(64))
    context: Mapped[str | None] = mapped_column(Text)  # prose: where the lesson holds
    # The job facts the lesson was born with (kb/jobs/context.FIELDS: request, usage, stack,
    # program); recall weighs a new job's facts against them. Migration 0008.
    job_context: Mapped[dict[str, Any] | None] = mapped_column()
    cause: Mapped[str] = mapped_column(Text)
    fix: Mapped[str] = mapped_column(Text)
    # The (redacted) error text the lesson was recorded from: recall compares a new failure
    # with all of it, not only with the decisive line the fingerprint hashes.
    excerpt: Mapped[str | None] = mapped_column(Text)
    actions: Mapped[list[Any]] = mapped_column(default=list)
    status: Mapped[str] = mapped_column(String(16), default="candidate")
    previous_status: Mapped[str | None] = mapped_column(String(16))
    status_reason: Mapped[str | None] = mapped_column(Text)
    confidence: Mapped[float] = mapped_column(Float, default=0.5)
    confirmations: Mapped[int] = mapped_column(Integer, default=0)
    contradictions: Mapped[int] = mapped_column(Integer, default=0)
    source: Mapped[str] = mapped_column(String(16))
    author: Mapped[str | None] = mapped_column(String(64))
    safety_flags: Mapped[list[Any]] = mapped_column(default=list)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    last_confirmed_at: Mapped[dt.datetime | None] = mapped_column()
    valid_until: Mapped[dt.datetime | None] = mapped_column()

    signature: Mapped[Signature | None] = relationship(back_populates="lessons")
    conditions: Mapped[list["LessonCondition"]] = relationship(
        back_populates="lesson", cascade="all, delete-orphan"
    )
    evidence: Mapped[list["LessonEvidence"]] = relationship(back_populates="lesson", cascade="all, delete-orphan")
    aliases: Mapped[list["LessonAlias"]] = relationship(back_populates="lesson", cascade="all, delete-orphan")


class LessonCondition(Base):
    """One fact a lesson depends on, e.g. module cuda/11.8, partition gpu MaxTime >= 12:00:00."""

    __tablename__ = "lesson_conditions"
    __table_args__ = (Index(None, "kind", "name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    lesson_id: Mapped[str] = mapped_column(ForeignKey("lessons.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(32))  # module | partition | partition_limit | cluster | application
    name: Mapped[str] = mapped_column(String(128))
    value: Mapped[str | None] = mapped_column(String(256))
    op: Mapped[str | None] = mapped_column(String(8))  # for limits: '>=', '<=', '=='

    lesson: Mapped[Lesson] = relationship(back_populates="conditions")


class LessonAlias(Base):
    """Another fingerprint of the same failure, learnt when the lesson's fix was confirmed
    for it (feedback with the error, or a successful resubmission after a recall). The next
    recurrence of an alias is an exact match; a contradiction removes the alias."""

    __tablename__ = "lesson_aliases"
    __table_args__ = (UniqueConstraint("lesson_id", "fingerprint"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    lesson_id: Mapped[str] = mapped_column(ForeignKey("lessons.id", ondelete="CASCADE"), index=True)
    fingerprint: Mapped[str] = mapped_column(String(64), index=True)
    template: Mapped[str] = mapped_column(Text)
    category: Mapped[str] = mapped_column(String(64))
    excerpt: Mapped[str | None] = mapped_column(Text)
    source: Mapped[str] = mapped_column(String(32))  # feedback | resubmission | merge | import
    actor: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)

    lesson: Mapped[Lesson] = relationship(back_populates="aliases")


class LessonEvidence(Base):
    __tablename__ = "lesson_evidence"
    __table_args__ = (Index(None, "occurrence_id"),)  # learn: is this failure already evidence?

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    lesson_id: Mapped[str] = mapped_column(ForeignKey("lessons.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(32))  # occurrence | fixed_by | worked | failed | recalled
    occurrence_id: Mapped[int | None] = mapped_column(ForeignKey("occurrences.id", ondelete="SET NULL"))
    job_id: Mapped[str | None] = mapped_column(String(64))
    actor: Mapped[str | None] = mapped_column(String(64))
    note: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)

    lesson: Mapped[Lesson] = relationship(back_populates="evidence")


class RecallEvent(Base):
    """A lesson recall returned first to this user: later history judges whether it worked.

    Kept in the caller's own store. If the same failure recurs for the user within the
    evidence window, that counts against the lesson; a successful run of the same job
    counts for it (see ``kb/lessons/evidence.py``).
    """

    __tablename__ = "recall_events"
    __table_args__ = (Index(None, "outcome", "recalled_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    lesson_id: Mapped[str] = mapped_column(String(36))
    store: Mapped[str] = mapped_column(String(64))
    fingerprint: Mapped[str] = mapped_column(String(64))
    user_name: Mapped[str] = mapped_column(String(64))
    cluster: Mapped[str | None] = mapped_column(String(64))
    job_id: Mapped[str | None] = mapped_column(String(64))
    recalled_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    outcome: Mapped[str | None] = mapped_column(String(16))  # None (pending), worked, recurred, unknown


class EnvSnapshot(Base):
    __tablename__ = "env_snapshots"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    cluster: Mapped[str] = mapped_column(String(64))
    taken_at: Mapped[dt.datetime] = mapped_column(default=utcnow, index=True)
    source: Mapped[str] = mapped_column(Text)
    modules: Mapped[dict[str, Any] | None] = mapped_column()
    partitions: Mapped[dict[str, Any] | None] = mapped_column()
    # The site's other limits (nodes, qos, associations, default_accounts: the parts of
    # EnvSnapshot.site_json()); NULL for a snapshot taken without them. Migration 0009.
    site: Mapped[dict[str, Any] | None] = mapped_column()
    content_hash: Mapped[str] = mapped_column(String(64))


class AuditEntry(Base):
    """Append-only: database triggers (see the initial migration) reject UPDATE and DELETE."""

    __tablename__ = "audit_log"
    __table_args__ = (Index(None, "object_type", "object_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    actor: Mapped[str] = mapped_column(String(64))
    action: Mapped[str] = mapped_column(String(32))
    object_type: Mapped[str] = mapped_column(String(32))
    object_id: Mapped[str] = mapped_column(String(64))
    before: Mapped[dict[str, Any] | None] = mapped_column()
    after: Mapped[dict[str, Any] | None] = mapped_column()
    reason: Mapped[str | None] = mapped_column(Text)
