"""Ingest sacct output into a store: every job in compact form, failures as occurrences.

Reading is streamed (``SacctReader``) and writing is batched (``Recorder``), each batch
in its own transaction: an interrupted run leaves whole batches behind and can simply be
run again, since everything is keyed on (cluster, job id). Given the path of a large
file, reading and preparing rows is spread over worker processes while this process
writes the same batches (ingest/sacct_parallel.py).
"""

from __future__ import annotations

import os
import time
from datetime import tzinfo
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from hpcmem.ingest.failure_message import failure_message
from hpcmem.ingest.sacct import ParseIssue, SacctJob, SacctReader
from hpcmem.kb.errors import InputError
from hpcmem.kb.jobs.write import Recorder
from hpcmem.kb.store.database import Store

# Issues kept in full for the report; the rest are only counted.
MAX_REPORTED_ISSUES = 50


@dataclass
class IngestSummary:
    source: str
    rows_read: int = 0
    jobs: int = 0
    failures: int = 0
    occurrences_new: int = 0
    occurrences_updated: int = 0
    signatures_new: int = 0
    signatures_known: int = 0
    redactions: int = 0
    logs_scanned: int = 0
    skipped: int = 0
    issue_count: int = 0
    issues: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    learned: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _gres(job: SacctJob) -> str | None:
    if job.req_gres:
        return job.req_gres
    if job.gpus:
        return f"gpu:{job.gpu_type}={job.gpus}" if job.gpu_type else f"gpu={job.gpus}"
    return None


def job_row(job: SacctJob, cluster: str) -> dict[str, Any]:
    """The compact record kept for every job, failed or not."""
    return {
        "cluster": cluster,
        "job_id": job.job_id,
        "user_name": job.user,
        "account": job.account,
        "job_name": job.name,
        "partition": job.partition,
        "state": job.failure_state or job.state,
        "failed": job.is_failure,
        "req_mem_mb": job.req_mem_total_mb,
        "req_cpus": job.req_cpus,
        "req_gres": _gres(job),
        "req_time_s": job.timelimit_s,
        "constraints": job.constraints,
        "max_rss_mb": job.max_rss_mb,
        "elapsed_s": job.elapsed_s,
        "work_dir": job.workdir,
        "submit_line": job.submit_line,
        "submit_time": job.submit,
        "end_time": job.end,
    }


def failure_row(job: SacctJob, cluster: str) -> dict[str, Any]:
    """The occurrence of a failed job, with the message its signature is taken from."""
    return {
        "cluster": cluster,
        "job_id": job.job_id,
        "job_name": job.name,
        "user_name": job.user,
        "account": job.account,
        "partition": job.partition,
        "qos": job.qos,
        "state": job.failure_state or job.state,
        "exit_code": job.derived_exit_code if job.state == "COMPLETED" else job.exit_code,
        "exit_signal": job.derived_exit_signal if job.state == "COMPLETED" else job.exit_signal,
        "failed_step": job.failed_step,
        "req_mem_mb": job.req_mem_total_mb,
        "req_cpus": job.req_cpus,
        "req_nodes": job.nnodes,
        "req_gres": _gres(job),
        "req_time_s": job.timelimit_s,
        "constraints": job.constraints,
        "max_rss_mb": job.max_rss_mb,
        "elapsed_s": job.elapsed_s,
        "nodes": job.nodelist,
        "work_dir": job.workdir,
        "submit_line": job.submit_line,
        "message": failure_message(job, from_sacct=True),
        "message_shape": failure_message(job, from_sacct=True, shape=True),
        "source": "sacct",
        "submit_time": job.submit,
        "start_time": job.start,
        "end_time": job.end,
    }


def ingest_sacct(
    store: Store,
    lines: Iterable[str] | os.PathLike[str],
    *,
    cluster: str,
    fields: Sequence[str] | None = None,
    source: str = "sacct",
    batch_size: int = 5000,
    on_progress: Callable[[int], None] | None = None,
    scan_logs: bool = False,
    tz: tzinfo | None = None,
    delimiter: str = "|",
    workers: int | None = None,
    on_bytes: Callable[[int], None] | None = None,
) -> IngestSummary:
    """Read sacct ``--parsable2`` lines, or the file at a path, into ``store``; returns
    what happened.

    ``tz`` is the zone sacct printed its times in (None: this machine's local zone;
    ``run_live_sacct`` runs sacct with TZ=UTC, so live ingestion passes UTC).
    ``on_progress`` is called now and then with the rows read so far; for a path,
    ``on_bytes`` with the bytes of the file read so far. A path to a large regular file
    is read by ``workers`` processes (ingest/sacct_parallel.py; None: decide by size and
    CPUs, 0: in this process), with the same result.
    """
    if isinstance(lines, os.PathLike):
        return _ingest_file(store, lines, cluster=cluster, fields=fields, source=source, batch_size=batch_size,
                            on_progress=on_progress, on_bytes=on_bytes, scan_logs=scan_logs, tz=tz,
                            delimiter=delimiter, workers=workers)
    started = time.perf_counter()
    summary = IngestSummary(source=source)

    def on_issue(issue: ParseIssue) -> None:
        if len(summary.issues) < MAX_REPORTED_ISSUES:
            summary.issues.append({"line": issue.line_no, "reason": issue.reason})

    reader = SacctReader(lines, fields, tz=tz, on_issue=on_issue, delimiter=delimiter)
    recorder = Recorder(store, batch_size=batch_size)
    for n, job in enumerate(reader, 1):
        job_cluster = job.cluster or cluster
        failure = failure_row(job, job_cluster) if job.is_failure else None
        if failure is not None and scan_logs:
            summary.logs_scanned += _attach_log(job, failure)
        recorder.add(job_row(job, job_cluster), failure)
        if on_progress is not None and n % 1000 == 0:
            on_progress(reader.rows_read)
    stats = recorder.close()
    summary.rows_read = reader.rows_read
    summary.skipped = reader.rows_skipped
    summary.issue_count = reader.issue_count
    stats.add_to(summary)
    summary.issues.sort(key=lambda issue: issue["line"])
    summary.seconds = round(time.perf_counter() - started, 3)
    return summary


def _ingest_file(store: Store, path: os.PathLike[str], *, workers: int | None,
                 on_bytes: Callable[[int], None] | None, **options: Any) -> IngestSummary:
    from hpcmem.ingest.sacct_parallel import ingest_sacct_parallel, parallel_workers

    # Opened first, once: a pipe (`<(sacct ...)`, /dev/stdin) can be read only once, and
    # an unreadable path is the input's fault, named as such.
    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise InputError(f"cannot read {os.fspath(path)}: {exc.strerror}") from None
    with fh:
        n = parallel_workers(path, workers, options["scan_logs"])  # 0 for anything but a regular file
        if n:
            opts = {k: v for k, v in options.items() if k != "scan_logs"}
            summary = ingest_sacct_parallel(store, path, workers=n, on_bytes=on_bytes, **opts)
            if summary is not None:
                return summary
        return ingest_sacct(store, _CountingLines(fh, on_bytes), workers=0, **options)


class _CountingLines:
    """A binary file's lines as text (undecodable bytes replaced), counting bytes read."""

    def __init__(self, fh, on_bytes: Callable[[int], None] | None) -> None:
        self.fh, self.on_bytes, self.bytes = fh, on_bytes, 0

    def __iter__(self):
        on_bytes, n = self.on_bytes, 0
        for raw in self.fh:
            self.bytes += len(raw)
            n += 1
            if on_bytes is not None and n % 4096 == 0:
                on_bytes(self.bytes)
            yield raw.decode("utf-8", errors="replace")
        if on_bytes is not None:
            on_bytes(self.bytes)


def _attach_log(job: SacctJob, failure: dict[str, Any]) -> int:
    """Read the failing job's own stdout/stderr (paths from sacct, no directory walks)."""
    from hpcmem.ingest.logs import excerpt_for_paths

    paths = [p for p in (job.stderr, job.stdout) if p]
    if not paths:
        return 0
    excerpt = excerpt_for_paths(paths, job)
    if excerpt is not None:
        failure.update(excerpt)
    return len(paths)
