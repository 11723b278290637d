"""Ingest job logs: each log's failure excerpt becomes (or refines) its job's occurrence.

Paths come from the command line (files, or directories walked once for
``slurm-%j.out``-style names) or from sacct's StdOut/StdErr (opened directly, never by
walking a directory: shared filesystems suffer from metadata storms). Only regular files
are read: a FIFO, socket or device is skipped with a note (it could block forever), and
a directory that cannot be listed is an error before anything is stored.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Iterable

from sqlalchemy import select

from hpcmem.ingest.logscan import LogExcerpt, iter_log_paths, scan_log
from hpcmem.kb.errors import InputError
from hpcmem.kb.store.models import Occurrence
from hpcmem.kb.jobs.write import Recorder
from hpcmem.kb.store.database import Store


@dataclass
class LogIngestSummary:
    source: str = "logs"
    files: int = 0
    failures: int = 0
    clean: int = 0
    occurrences_new: int = 0
    occurrences_updated: int = 0
    signatures_new: int = 0
    signatures_known: int = 0
    redactions: int = 0
    bytes_read: int = 0
    skipped: int = 0
    issues: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def expand_log_path(pattern: str, job_id: str, user: str | None = None, name: str | None = None) -> str:
    """Fill the filename patterns sacct may print unexpanded (%j, %A, %a, %u, %x, %%)."""
    if "%" not in pattern:
        return pattern
    array_job, _, task = job_id.partition("_")
    values = {"j": job_id.split("_")[0], "A": array_job, "a": task or "", "u": user or "", "x": name or "", "%": "%"}
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "%" and i + 1 < len(pattern) and pattern[i + 1] in values:
            out.append(values[pattern[i + 1]])
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def failure_from_excerpt(excerpt: LogExcerpt) -> dict[str, Any]:
    return {"message": excerpt.excerpt, "log_excerpt": excerpt.excerpt, "log_path": excerpt.path}


def excerpt_for_paths(paths: Iterable[str], job) -> dict[str, Any] | None:  # noqa: ANN001 - a SacctJob
    """The failure excerpt from a job's own stderr/stdout files, stderr first."""
    for raw in paths:
        path = expand_log_path(raw, job.job_id, job.user, job.name)
        try:
            excerpt = scan_log(path, regular_only=True)
        except InputError:
            continue  # logs are often cleaned up; sacct data alone still counts
        if excerpt.has_error:
            return failure_from_excerpt(excerpt)
    return None


def _cluster_of(store: Store, job_id: str, default: str) -> str:
    """Link to the job's existing occurrence even when sacct named its cluster differently."""
    with store.session() as session:
        clusters = session.scalars(select(Occurrence.cluster).where(Occurrence.job_id == job_id)).all()
    return clusters[0] if len(clusters) == 1 else default


def ingest_logs(store: Store, paths: Iterable[str], *, cluster: str, job_id: str | None = None) -> LogIngestSummary:
    started = time.perf_counter()
    summary = LogIngestSummary()
    recorder = Recorder(store, batch_size=500)
    # Listed before anything is written: an unreadable directory stops the run with nothing stored.
    for path in list(iter_log_paths(list(paths))):
        summary.files += 1
        try:
            excerpt = scan_log(path, regular_only=True)  # a FIFO is skipped with a note, not waited on
        except InputError as exc:
            summary.skipped += 1
            summary.issues.append({"path": str(path), "reason": str(exc)})
            continue
        summary.bytes_read += excerpt.bytes_read
        if not excerpt.has_error:
            summary.clean += 1
            continue
        jid = job_id or excerpt.job_id
        if jid is None:
            summary.skipped += 1
            summary.issues.append({"path": str(path), "reason": "no job id in the file name; pass --job ID"})
            continue
        row = {"cluster": _cluster_of(store, jid, cluster), "job_id": jid, "state": None, "source": "log"}
        row.update(failure_from_excerpt(excerpt))
        recorder.add(None, row)
    stats = recorder.close()
    stats.add_to(summary)
    summary.seconds = round(time.perf_counter() - started, 3)
    return summary
