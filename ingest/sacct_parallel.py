"""Ingest a large sacct dump with its parsing spread over worker processes.

Reading a dump (split, merge steps, convert values), building its rows, redacting them
and fingerprinting failure messages is pure work per job; only writing needs the store.
So for a large regular file (issue 14: 10^6 rows), workers prepare the rows
(``RowPreparer``: the tuples the Recorder's ``executemany`` binds) and this process
writes them with ``Recorder.add_prepared``, in file order: the same batches, rows,
signature counts, first/last seen times and change_seq order as one process reading the
whole file, one transaction per batch as before.

The file is cut into parts of about ``chunk_bytes`` just before an allocation row
(``SacctReader.starts_job``): sacct prints a job's steps right after its allocation
row, and each array task and het component is a job of its own, so no part separates a
job from its steps. Every part is read with the header line in front of it (or the
``fields`` given); its line numbers are shifted back to the file's, so parse issues
name the same lines.

Workers are plain child processes (``python -c`` importing this module), not a
multiprocessing pool: nothing of the caller's ``__main__`` is imported or run again,
and nothing is forked from a process that may hold threads or database connections.
Worker ``i`` takes parts ``i``, ``i + n``, ... and sends each prepared part, pickled,
down its stdout pipe; the pipe blocks a worker until the writer has taken its previous
part, so memory stays at about one part per worker plus the batch being written. A
writer killed mid-way leaves whole batches (its workers die on the broken pipe).
"""

from __future__ import annotations

import gc
import os
import pickle
import stat
import subprocess
import sys
import tempfile
import time
from bisect import bisect_right
from datetime import tzinfo
from typing import Any, Callable, Iterator, Sequence

from hpcmem.ingest.sacct import ParseIssue, SacctReader
from hpcmem.ingest.sacct_ingest import MAX_REPORTED_ISSUES, IngestSummary, failure_row, job_row
from hpcmem.kb.jobs.write import Recorder, RecordStats, RowPreparer
from hpcmem.kb.signatures.rules_digest import site_rules_path, use_site_rules
from hpcmem.kb.store.database import Store

# Files smaller than this are read in one process: starting workers costs ~0.3 s.
MIN_PARALLEL_BYTES = 20_000_000
CHUNK_BYTES = 4 << 20
MAX_WORKERS = 2

_BOOT = "import sys, pickle; spec = pickle.load(sys.stdin.buffer); sys.path[:] = spec['sys_path']; " \
        "from hpcmem.ingest.sacct_parallel import _worker; _worker(spec)"


def parallel_workers(path: str | os.PathLike[str], workers: int | None = None, scan_logs: bool = False) -> int:
    """How many workers to read ``path`` with: 0 means in this process. ``workers``
    None picks: a regular file of at least MIN_PARALLEL_BYTES on a machine with two or
    more CPUs gets min(CPUs, MAX_WORKERS). Log scanning (per failed job, reading files)
    always stays in this process."""
    if scan_logs or workers == 0:
        return 0
    try:
        info = os.stat(path)
    except OSError:
        return 0
    if not stat.S_ISREG(info.st_mode):
        return 0
    if workers is not None:
        return max(workers, 0)
    cpus = os.cpu_count() or 1
    if cpus < 2 or info.st_size < MIN_PARALLEL_BYTES:
        return 0
    return min(cpus, MAX_WORKERS)


def plan_parts(
    path: str | os.PathLike[str],
    fields: Sequence[str] | None = None,
    *,
    delimiter: str = "|",
    chunk_bytes: int = CHUNK_BYTES,
) -> tuple[list[str], list[tuple[int, int]]] | None:
    """The header lines every part after the first is read with, and the parts as
    (start, end) byte ranges; None for a file with no lines but blank ones."""
    probe = SacctReader((), fields, delimiter=delimiter)
    with open(path, "rb") as fh:
        head: list[str] = []
        offsets = []
        for raw in iter(fh.readline, b""):
            offsets.append(fh.tell() - len(raw))
            head.append(raw.decode("utf-8", errors="replace"))
            if raw.strip():
                break
        header_lines = probe.read_header(head)  # raises InputError as SacctReader does
        if header_lines is None:
            return None
        prefix = head[header_lines - 1:header_lines] if header_lines else []
        data_start = offsets[header_lines] if header_lines < len(head) else fh.tell()
        size = os.fstat(fh.fileno()).st_size
        cuts = [0]
        target = data_start + chunk_bytes
        while target < size:
            fh.seek(target)
            fh.readline()  # the rest of a line cut in the middle
            cut = None
            while True:
                at = fh.tell()
                raw = fh.readline()
                if not raw:
                    break
                if at > cuts[-1] and probe.starts_job(raw.decode("utf-8", errors="replace")):
                    cut = at
                    break
            if cut is None:
                break
            cuts.append(cut)
            target = max(cut, target) + chunk_bytes
        cuts.append(size)
    return prefix, [(start, end) for start, end in zip(cuts, cuts[1:]) if end > start]


def prepare_parts(spec: dict[str, Any], indexes: Sequence[int]) -> Iterator[dict[str, Any]]:
    """Read the parts ``indexes`` of ``spec['parts']`` (in file order) into prepared rows,
    the arguments of ``Recorder.add_prepared``; yields one dict per part, then one with
    the reader's counters. Issue line numbers are given within their part (the writer
    knows where each part starts in the file).

    One reader takes all the parts in a row, header first: every part begins with an
    allocation row, which ends the job before it whatever that was, so the jobs are
    those of reading each part alone, while the reader's caches stay warm. A part is
    complete once a job of a later part comes out (jobs carry their line numbers)."""
    indexes = list(indexes)
    starts: list[int] = []  # line number (in the reader's stream) each part begins at
    counts: list[int] = []

    prefix = spec["prefix"] if indexes and indexes[0] else []  # part 0 holds the header itself

    def stream() -> Iterator[str]:
        at = len(prefix) + 1
        yield from prefix
        with open(spec["path"], "rb") as fh:
            for index in indexes:
                start, end = spec["parts"][index]
                fh.seek(start)
                lines = fh.read(end - start).decode("utf-8", errors="replace").split("\n")
                if lines[-1] == "":
                    lines.pop()
                starts.append(at)
                counts.append(len(lines))
                at += len(lines)
                yield from lines

    issues: list[list[tuple[int, str]]] = [[] for _ in indexes]

    def on_issue(issue: ParseIssue) -> None:
        k = bisect_right(starts, issue.line_no) - 1
        if k < 0:  # the header line itself (repeated prefix): reported by part 0's reader
            k = 0
        if len(issues[k]) < MAX_REPORTED_ISSUES:
            issues[k].append((issue.line_no - starts[k] + 1 if starts else issue.line_no, issue.reason))

    reader = SacctReader(stream(), spec["fields"], tz=spec["tz"], on_issue=on_issue, delimiter=spec["delimiter"])
    stats = RecordStats()
    prepare = RowPreparer(spec["dialect"], stats)
    cluster = spec["cluster"]
    done = 0  # parts sent
    items: list[tuple[Any, Any]] = []

    def part() -> dict[str, Any]:
        message = {"index": indexes[done], "items": items, "lines": counts[done], "issues": issues[done],
                   "redactions": stats.redactions, "rows_read": reader.rows_read}
        stats.redactions = 0
        return message

    for job in reader:
        while done + 1 < len(starts) and job.line_no >= starts[done + 1]:
            yield part()
            done, items = done + 1, []
        job_cluster = job.cluster or cluster
        failure = prepare.failure(failure_row(job, job_cluster)) if job.is_failure else None
        items.append((prepare.job(job_row(job, job_cluster)), failure))
    while done < len(indexes):
        while len(counts) <= done:  # parts after the last job: nothing in them was read
            counts.append(0)
        yield part()
        done, items = done + 1, []
    yield {"rows_read": reader.rows_read, "skipped": reader.rows_skipped, "issue_count": reader.issue_count}


def _worker(spec: dict[str, Any]) -> None:
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed by accident goes to stderr, not into the pickles
    sys.stdout = sys.stderr
    try:
        import fcntl

        fcntl.fcntl(out.fileno(), 1031, 1 << 20)  # F_SETPIPE_SZ: fewer switches per part
    except (ImportError, OSError):
        pass
    gc.disable()  # see ingest_sacct_parallel
    use_site_rules(spec.get("site_rules"))  # fingerprint as the writer would
    try:
        for message in prepare_parts(spec, range(spec["worker"], len(spec["parts"]), spec["workers"])):
            pickle.dump(message, out, protocol=pickle.HIGHEST_PROTOCOL)
            out.flush()
    except BrokenPipeError:  # the writer is gone (killed, or stopped on an error)
        os._exit(1)


class WorkerFailed(RuntimeError):
    """A worker process stopped before sending all its parts (a bug, not bad input)."""


def ingest_sacct_parallel(
    store: Store,
    path: str | os.PathLike[str],
    *,
    cluster: str,
    fields: Sequence[str] | None = None,
    source: str = "sacct",
    batch_size: int = 5000,
    workers: int = MAX_WORKERS,
    chunk_bytes: int = CHUNK_BYTES,
    on_progress: Callable[[int], None] | None = None,
    on_bytes: Callable[[int], None] | None = None,
    tz: tzinfo | None = None,
    delimiter: str = "|",
) -> IngestSummary | None:
    """``ingest_sacct`` of the file at ``path`` with ``workers`` processes preparing rows;
    the same store and summary. None when the file has no lines (nothing to do)."""
    started = time.perf_counter()
    plan = plan_parts(path, fields, delimiter=delimiter, chunk_bytes=chunk_bytes)
    if plan is None:
        return None
    prefix, parts = plan
    summary = IngestSummary(source=source)
    workers = max(1, min(workers, len(parts)))
    spec = {"path": os.fspath(path), "parts": parts, "prefix": prefix, "fields": fields, "tz": tz,
            "delimiter": delimiter, "cluster": cluster, "dialect": store.dialect, "workers": workers,
            "sys_path": list(sys.path), "site_rules": site_rules_path()}
    recorder = Recorder(store, batch_size=batch_size)
    procs: list[tuple[subprocess.Popen, Any]] = []
    # Unpickling a part makes ~10^5 containers at once; the cyclic collector would walk
    # them again and again (it was 3/4 of the unpickling time). Rows form no cycles.
    collecting = gc.isenabled()
    gc.disable()
    try:
        for worker in range(workers):
            errors = tempfile.TemporaryFile()
            proc = subprocess.Popen([sys.executable, "-c", _BOOT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=errors)
            procs.append((proc, errors))
            proc.stdin.write(pickle.dumps({**spec, "worker": worker}, protocol=pickle.HIGHEST_PROTOCOL))
            proc.stdin.close()
        line_base = 0  # lines of the file before the part being written
        rows = [0] * workers  # rows read by each worker, as far as it has told
        for index in range(len(parts)):
            part = _receive(*procs[index % workers])
            add = recorder.add_prepared
            for job, failure in part["items"]:
                add(job, failure)
            for line_no, reason in part["issues"]:
                if len(summary.issues) < MAX_REPORTED_ISSUES:
                    summary.issues.append({"line": line_base + line_no, "reason": reason})
            line_base += part["lines"]
            recorder.stats.redactions += part["redactions"]
            rows[index % workers] = part["rows_read"]
            if on_progress is not None:
                on_progress(sum(rows))
            if on_bytes is not None:
                on_bytes(parts[index][1])
        for proc, errors in procs:
            totals = _receive(proc, errors)
            summary.rows_read += totals["rows_read"]
            summary.skipped += totals["skipped"]
            summary.issue_count += totals["issue_count"]
            if proc.wait() != 0:
                raise WorkerFailed(_failure_text(proc, errors))
    finally:
        if collecting:
            gc.enable()
        for proc, errors in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()
            errors.close()
    stats = recorder.close()
    stats.add_to(summary)
    summary.issues.sort(key=lambda issue: issue["line"])
    summary.seconds = round(time.perf_counter() - started, 3)
    return summary


def _receive(proc: subprocess.Popen, errors) -> dict[str, Any]:
    try:
        return pickle.load(proc.stdout)
    except EOFError:
        raise WorkerFailed(_failure_text(proc, errors)) from None


def _failure_text(proc: subprocess.Popen, errors) -> str:
    proc.wait()
    errors.seek(0)
    tail = errors.read().decode("utf-8", errors="replace").strip().splitlines()[-5:]
    return f"sacct worker {proc.pid} exited with {proc.returncode}: " + (" / ".join(tail) or "no message")
