"""Stream `sacct --parsable2` output into one merged record per job.

sacct prints an allocation row (``123``) followed by its step rows (``123.batch``,
``123.extern``, ``123.0``, ...). Job-level facts live on the allocation row, but
memory use (MaxRSS) and often the real cause of a failure live on the steps: an OOM
kill in an ``srun`` step leaves the allocation FAILED 1:0 and only the step
OUT_OF_MEMORY. ``SacctReader`` groups each allocation row with the step rows right
after it and yields one ``SacctJob`` per group, so memory stays flat for any input size.

Choices worth knowing:

- Heterogeneous jobs: each component (``1853+0``, ``1853+1``) is its own record,
  because each has its own partition, resources, state and exit code; ``het_job_id``
  and ``het_offset`` tie them together.
- Array tasks are records of their own (``123_4``); a pending range such as
  ``123_[5-9]`` is one record whose ``array_task_id`` is None.
- Times are converted to UTC. sacct prints local time with no zone; pass ``tz`` (the
  cluster's zone) or leave None for this machine's zone. ``run_live_sacct`` runs sacct
  with TZ=UTC, so read its output with ``tz=timezone.utc``.
- Malformed rows never stop the stream: they become ``ParseIssue``s (line number,
  reason, excerpt) passed to ``on_issue`` and kept (the first 1000) in ``issues``.

Usage::

    with open(path, encoding="utf-8", errors="replace") as fh:
        reader = SacctReader(fh, tz=timezone.utc)
        for job in reader:
            ...
        reader.rows_read, reader.jobs, reader.issue_count
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, tzinfo
from itertools import chain
from operator import itemgetter
from typing import Any, NamedTuple

from hpcmem.kb.slurm_units import (
    NULL_TOKENS,
    JobId,
    SlurmTimeParser,
    gres_in_tres,
    parse_duration,
    parse_exit_code,
    parse_job_id,
    parse_req_mem,
    parse_size_mb,
    parse_state,
    parse_timelimit,
    parse_tres,
    parse_user,
    tres_gpus,
)
from hpcmem.kb.errors import InputError

# The fields `hpcmem ingest sacct --live` asks for. sacct does not escape '|' inside
# values; SubmitLine (`--wrap="a | b"`) is where one turns up, so the reader re-joins
# the surplus fields of an over-long row into that column.
SACCT_FIELDS: tuple[str, ...] = (
    "JobID", "JobIDRaw", "Cluster", "JobName", "User", "UID", "Account", "Group",
    "Partition", "QOS", "State", "ExitCode", "DerivedExitCode", "Reason",
    "Submit", "Start", "End", "Elapsed", "Timelimit", "ReqMem", "MaxRSS", "TotalCPU",
    "ReqCPUS", "AllocCPUS", "NNodes", "ReqTRES", "AllocTRES", "NodeList",
    "Constraints", "Flags", "WorkDir", "StdOut", "StdErr", "SubmitLine",
)  # fmt: skip

# Fields older sacct rejects ("Invalid field requested", see the real 22.05 output in
# data/samples/sacct/real-22.05-stdout-field-error.txt), with the first release that
# has them. run_live_sacct also drops any field sacct reports as invalid and retries.
FIELDS_SINCE: dict[str, tuple[int, int]] = {"StdOut": (23, 2), "StdErr": (23, 2)}

# Final job states that mean the job did not do what it was asked to.
FAILURE_STATES = frozenset(
    {"FAILED", "OUT_OF_MEMORY", "TIMEOUT", "NODE_FAIL", "BOOT_FAIL", "DEADLINE",
     "PREEMPTED", "CANCELLED"}
)  # fmt: skip

# Which failing step explains a job best: the most specific state first.
_STEP_FAILURE_RANK = {
    "OUT_OF_MEMORY": 0, "NODE_FAIL": 1, "BOOT_FAIL": 1, "FAILED": 2,
    "TIMEOUT": 3, "DEADLINE": 3, "PREEMPTED": 3, "CANCELLED": 4,
}  # fmt: skip
# On equal state, a numbered (srun) step is where the work ran; the batch script
# usually just passes its exit code on, and extern only holds the allocation.
_STEP_KIND_RANK = {"batch": 1, "extern": 2}

MAX_KEPT_ISSUES = 1000
_EXCERPT_CHARS = 160

# Header names (lower case) that mean the same column: sacct's own (NCPUS), and the keys
# Slurm prints for the same values in jobcomp/filetxt records and `scontrol show job`
# (JobState, UserId, StartTime, ...; see data/samples/sacct/README.md), which sites turn
# into tables. Names differ from sacct's only in case (JobId) need no entry.
_ALIASES = {
    "ncpus": "alloccpus", "jobstate": "state", "userid": "user", "name": "jobname",
    "submittime": "submit", "starttime": "start", "endtime": "end", "runtime": "elapsed",
    "nodecnt": "nnodes", "numnodes": "nnodes", "proccnt": "alloccpus", "numcpus": "alloccpus",
    "tres": "alloctres",
}  # fmt: skip

# Columns the reader uses, in the order the itemgetters below return them.
_ALLOC_KEYS = (
    "jobid", "jobidraw", "cluster", "jobname", "user", "uid", "account", "group",
    "partition", "qos", "state", "exitcode", "derivedexitcode", "reason",
    "submit", "start", "end", "elapsed", "elapsedraw", "timelimit", "timelimitraw",
    "reqmem", "maxrss", "totalcpu", "reqcpus", "alloccpus", "nnodes", "reqtres",
    "alloctres", "nodelist", "constraints", "flags", "workdir", "stdout", "stderr",
    "submitline",
)  # fmt: skip
_STEP_KEYS = ("jobid", "jobname", "state", "exitcode", "maxrss", "elapsed", "elapsedraw")
_FREE_TEXT_KEYS = ("submitline", "workdir", "jobname")  # first one present takes surplus '|'


@dataclass(frozen=True, slots=True)
class ParseIssue:
    """A row the reader could not use, or a value it could not read."""

    line_no: int  # 1-based line number in the input, header included
    reason: str
    excerpt: str  # the start of the offending line


class SacctStep(NamedTuple):
    """One step row of a job, reduced to what explains failures and memory use."""

    step_id: str  # 'batch', 'extern', 'interactive', '0', '1', ...
    name: str | None
    state: str  # base state, e.g. 'OUT_OF_MEMORY', 'CANCELLED'
    exit_code: int | None
    exit_signal: int | None
    max_rss_mb: float | None  # largest RSS of any one task of the step (MiB)
    elapsed_s: int | None


@dataclass(slots=True)
class SacctJob:
    """One job (array task, het component) with its steps merged in.

    Treat it as read-only. It is not a frozen dataclass because building a frozen one
    costs ~5 µs (one object.__setattr__ per field), a third of the parse budget.

    Text fields are None when sacct printed nothing (or 'None'/'Unknown'). Sizes are
    MiB, durations seconds, times timezone-aware UTC.
    """

    job_id: str  # as printed: '123', '123_4', '123_[5-9]', '1853+0'
    job_id_raw: str | None
    cluster: str | None
    array_job_id: int | None
    array_task_id: int | None
    het_job_id: int | None
    het_offset: int | None
    name: str | None
    user: str | None
    uid: int | None
    account: str | None
    group: str | None
    partition: str | None
    qos: str | None
    state: str  # normalised, see SacctReader; 'UNKNOWN' when the value is empty
    raw_state: str  # the allocation row's State as printed
    cancelled_by_uid: int | None
    exit_code: int | None
    exit_signal: int | None
    derived_exit_code: int | None
    derived_exit_signal: int | None
    failed_step: str | None  # the step that best explains a failure, e.g. 'batch', '0'
    failed_step_state: str | None
    reason: str | None
    submit: datetime | None
    start: datetime | None
    end: datetime | None
    elapsed_s: int | None
    timelimit_s: int | None  # None: unlimited, partition default or unknown
    timelimit_raw: str | None  # e.g. '1-00:00:00', 'UNLIMITED', 'Partition_Limit'
    req_mem_mb: float | None
    req_mem_per: str | None  # 'node' / 'cpu' (pre-21.08 suffix) or None = job total
    req_cpus: int | None
    alloc_cpus: int | None
    nnodes: int | None
    req_tres: str | None
    alloc_tres: str | None
    req_gres: str | None  # gres part of ReqTRES without 'gres/', e.g. 'gpu:a100=1,gpu=1'
    gpus: int | None  # GPUs allocated (AllocTRES), else requested; None if no TRES
    gpu_type: str | None
    max_rss_mb: float | None  # max over steps of the per-task MaxRSS
    max_rss_step: str | None
    total_cpu_s: float | None
    nodelist: str | None
    constraints: str | None
    flags: str | None
    workdir: str | None
    stdout: str | None
    stderr: str | None
    submit_line: str | None
    steps: tuple[SacctStep, ...]
    line_no: int  # line of the allocation row in the input

    @property
    def is_failure(self) -> bool:
        """True for a failed final state, and for a COMPLETED job whose derived exit
        code is non-zero or one of whose steps failed (the batch script hid it)."""
        return self.failure_state is not None

    @property
    def failure_state(self) -> str | None:
        """The state to file the failure under, or None when the job did not fail."""
        if self.state in FAILURE_STATES:
            return self.state
        if self.state == "COMPLETED":
            if self.failed_step_state is not None:
                return self.failed_step_state
            if self.derived_exit_code or self.derived_exit_signal:
                return "FAILED"
        return None

    @property
    def req_mem_total_mb(self) -> float | None:
        """Memory requested for the whole job, whatever form ReqMem had."""
        if self.req_mem_mb is None:
            return None
        if self.req_mem_per == "cpu":
            cpus = self.alloc_cpus or self.req_cpus
            return None if cpus is None else self.req_mem_mb * cpus
        if self.req_mem_per == "node":
            return None if self.nnodes is None else self.req_mem_mb * max(self.nnodes, 1)
        return self.req_mem_mb


class SacctReader:
    """Iterate over the jobs in sacct ``--parsable2`` (or ``--parsable``) output.

    ``lines`` is any iterable of text lines (an open file, ``sys.stdin``, a generator);
    it is read once, lazily. The first line must be sacct's header unless ``fields``
    gives the columns (``--noheader`` output; the names as in ``--format``). Field names
    are case-insensitive, any order; unknown columns are ignored. A trailing ``|``
    (``--parsable``) is detected from the header, or per line when ``fields`` is given.

    Job state: the allocation row's base state (``CANCELLED by 1234`` gives
    CANCELLED and ``cancelled_by_uid`` 1234), except that a FAILED job whose failing
    step ran OUT_OF_MEMORY is reported as OUT_OF_MEMORY. ``failed_step`` is the step
    that best explains a failure (OOM before node failures before FAILED before
    time-outs before CANCELLED; a numbered step before batch before extern). A
    CANCELLED step inside a job that went on to COMPLETE does not count: it was
    cancelled on purpose.

    Counters: ``rows_read`` (data rows, malformed ones included), ``jobs`` (yielded),
    ``steps`` (step rows merged into them), ``rows_skipped`` (rows in no job: wrong
    field count, bad JobID, steps without their allocation row) and ``issue_count``
    (skipped rows plus bad values, whose job is still yielded). Once the input is
    consumed, rows_read == jobs + steps + rows_skipped.
    """

    def __init__(
        self,
        lines: Iterable[str],
        fields: Sequence[str] | None = None,
        *,
        tz: tzinfo | None = None,
        on_issue: Callable[[ParseIssue], None] | None = None,
        trailing_delimiter: bool | None = None,
        delimiter: str = "|",
    ):
        if not delimiter:
            raise InputError("the sacct delimiter must not be empty")
        self._delim = delimiter
        self._lines = lines
        self._given_fields = tuple(fields) if fields is not None else None
        self._on_issue = on_issue
        self._trailing = trailing_delimiter
        time = SlurmTimeParser(tz)
        exact = {**_PARSERS, "Submit": time, "Start": time, "End": time}
        # The careful pass reports bad values itself; the fast one remembers the results
        # of the columns whose values repeat across jobs (see _memoized).
        self._careful = {field: self._reporting(field, p) for field, p in exact.items()}
        self._fast = {field: _memoized(p) if field in _REPEATING else p for field, p in exact.items()}
        # (ReqTRES, AllocTRES) -> (req_gres, gpus, gpu_type), as _merge reads them
        self._gres_seen: dict[tuple[str, str], tuple[str | None, int, str | None]] = {}
        self.fields: tuple[str, ...] | None = None
        self.rows_read = 0
        self.rows_skipped = 0
        self.jobs = 0
        self.steps = 0
        self.issue_count = 0
        self.issues: list[ParseIssue] = []
        # set per row so value converters can report where they failed
        self._line_no = 0
        self._parts: list[str] = []

    # -- reading -----------------------------------------------------------------

    def __iter__(self) -> Iterator[SacctJob]:
        lines: Iterator[str] = iter(self._lines)
        start = self._read_header(lines)
        if start is None:
            return
        first_data_line, first_row = start
        if first_row is not None:
            lines = chain((first_row,), lines)
        n = len(self.fields)
        jobid_at = self._jobid_at
        header_id = self._header_id
        trailing = self._trailing
        build = self._build
        current: tuple[int, list[str], list[tuple[int, list[str]]]] | None = None
        current_id = None
        orphan_of = None
        rows = 0  # self.rows_read, updated whenever a job is handed out
        delim = self._delim
        for line_no, line in enumerate(lines, first_data_line):
            line = line.rstrip("\r\n")
            if not line:
                continue
            if trailing and line.endswith(delim):
                line = line[: -len(delim)]
            parts = line.split(delim)
            rows += 1
            if len(parts) != n:
                parts = self._fit_width(parts, line_no, line)
                if parts is None:
                    continue
            parts.append("")  # the value of every column the input lacks
            job_id = parts[jobid_at]
            dot = job_id.find(".")
            if dot < 0:
                if job_id == header_id:  # a header repeated by concatenated dumps
                    rows -= 1
                    continue
                if current is not None:
                    job = build(*current)
                    if job is not None:
                        self.rows_read = rows - 1
                        yield job
                current = (line_no, parts, [])
                current_id = job_id
                orphan_of = None
            elif current is not None and job_id[:dot] == current_id:
                current[2].append((line_no, parts))
            else:
                self.rows_skipped += 1
                if job_id[:dot] != orphan_of:  # one issue per run of orphan rows
                    orphan_of = job_id[:dot]
                    self._issue(
                        line_no, f"step rows of job {orphan_of} without its allocation row", line
                    )
        self.rows_read = rows
        if current is not None:
            job = build(*current)
            if job is not None:
                yield job

    def read_header(self, lines: Iterable[str]) -> int | None:
        """Set up the column layout from the first lines of a dump without reading rows;
        returns how many lines the header took (leading blank lines included; 0 when
        ``fields`` describes headerless input), None when the lines are all blank. Used
        to read a dump in parts (ingest/sacct_parallel.py): see ``starts_job``."""
        start = self._read_header(iter(lines))
        if start is None:
            return None
        first_data_line, first_row = start
        return first_data_line - 1 if first_row is None else 0

    def starts_job(self, line: str) -> bool:
        """Whether ``line`` is a well-formed allocation row (needs the layout: see
        ``read_header``). Such a row ends whatever job came before it, so a dump cut just
        before it reads, part by part, into the same jobs, counts and issues as whole."""
        line = line.rstrip("\r\n")
        if self._trailing and line.endswith(self._delim):
            line = line[: -len(self._delim)]
        parts = line.split(self._delim)
        if len(parts) != len(self.fields):
            return False
        job_id = parts[self._jobid_at]
        return "." not in job_id and job_id != self._header_id

    def _read_header(self, lines: Iterator[str]) -> tuple[int, str | None] | None:
        """Set up the column layout from the header line or ``fields``.

        Returns (line number of the first data line, that line when it had to be read
        to find out there is no header), or None for empty input.
        """
        for line_no, line in enumerate(lines, 1):
            line = line.rstrip("\r\n")
            if not line:
                continue
            names = line.split(self._delim)
            looks_like_header = any(n.strip().lower() in ("jobid", "jobidraw") for n in names)
            if self._given_fields is None:
                if not looks_like_header:
                    raise InputError(
                        f"line {line_no}: sacct output has no header line (starts {line[:60]!r})",
                        hint="pass the --format field list as fields=[...] for --noheader output",
                    )
                if self._trailing is None:
                    self._trailing = line.endswith(self._delim)
                if self._trailing and names[-1] == "":
                    names.pop()
                self._set_layout(names)
                return line_no + 1, None
            self._set_layout(self._given_fields)
            given = [f.strip().lower() for f in self._given_fields]
            if looks_like_header and [n.strip().lower() for n in names if n] == given:
                if self._trailing is None:
                    self._trailing = line.endswith(self._delim)
                return line_no + 1, None
            return line_no, line  # headerless: this line is the first data row
        return None

    def _set_layout(self, names: Sequence[str]) -> None:
        self.fields = tuple(name.strip() for name in names)
        keys = [_ALIASES.get(name.lower(), name.lower()) for name in self.fields]
        position: dict[str, int] = {}
        for index, key in enumerate(keys):
            position.setdefault(key, index)
        if "jobid" not in position and "jobidraw" in position:
            position["jobid"] = position["jobidraw"]
        if "jobid" not in position:
            raise InputError(
                "sacct output has no JobID column",
                hint="include JobID (or JobIDRaw) in --format",
            )
        if "state" not in position:  # every job would read as UNKNOWN: no failure found
            raise InputError(
                f"sacct output has no State column (columns: {', '.join(self.fields)[:200]})",
                hint="include State in --format",
            )
        missing = len(keys)  # index of the '' appended to every row
        self._jobid_at = position["jobid"]
        self._header_id = self.fields[self._jobid_at]
        self._alloc_values = itemgetter(*(position.get(k, missing) for k in _ALLOC_KEYS))
        self._step_values = itemgetter(*(position.get(k, missing) for k in _STEP_KEYS))
        self._free_text_at = next((position[k] for k in _FREE_TEXT_KEYS if k in position), None)

    def _fit_width(self, parts: list[str], line_no: int, line: str) -> list[str] | None:
        """Repair a row with the wrong number of fields, or report it and return None."""
        n = len(self.fields)
        if len(parts) == n + 1 and parts[-1] == "":
            return parts[:-1]  # --parsable's trailing delimiter
        if len(parts) > n and self._free_text_at is not None:
            # A '|' inside free text (e.g. SubmitLine of `--wrap="a | b"`).
            at, extra = self._free_text_at, len(parts) - n
            return parts[:at] + [self._delim.join(parts[at : at + extra + 1])] + parts[at + extra + 1 :]
        self._issue(line_no, f"expected {n} fields, found {len(parts)}", line)
        self.rows_skipped += 1
        return None

    # -- merging -----------------------------------------------------------------
    #
    # Values are converted by the parsers in self._fast, which raise on bad text. Only
    # when that fails is the job converted again with self._careful, whose parsers
    # report each bad value and carry on with "no value": the common path stays free
    # of per-field error handling.

    def _build(
        self, line_no: int, parts: list[str], step_rows: list[tuple[int, list[str]]]
    ) -> SacctJob | None:
        self._line_no, self._parts = line_no, parts
        job_id = parts[self._jobid_at]
        try:
            ids = parse_job_id(job_id)
        except ValueError:
            self._issue(line_no, f"unrecognised JobID {job_id!r}", "|".join(parts[:-1]))
            self.rows_skipped += 1 + len(step_rows)
            return None
        try:
            job = self._merge(line_no, parts, step_rows, ids, self._fast)
        except (ValueError, OverflowError):
            job = self._merge(line_no, parts, step_rows, ids, self._careful)
        self.jobs += 1
        self.steps += len(job.steps)
        return job

    def _merge(
        self,
        line_no: int,
        parts: list[str],
        step_rows: list[tuple[int, list[str]]],
        ids: JobId,
        parse: dict[str, Callable[[str], Any]],
    ) -> SacctJob:
        (
            job_id, job_id_raw, cluster, name, user, uid, account, group,
            partition, qos, state_text, exit_text, derived_text, reason,
            submit, start, end, elapsed, elapsed_raw, timelimit, timelimit_raw,
            req_mem, max_rss, total_cpu, req_cpus, alloc_cpus, nnodes, req_tres,
            alloc_tres, nodelist, constraints, flags, workdir, stdout, stderr,
            submit_line,
        ) = self._alloc_values(parts)  # fmt: skip
        self._line_no, self._parts = line_no, parts
        state, cancelled_by = parse["State"](state_text)
        exit_code, exit_signal = parse["ExitCode"](exit_text)
        derived_code, derived_signal = parse["DerivedExitCode"](derived_text)
        user_name, user_uid = parse["User"](user)
        if uid:
            user_uid = parse["UID"](uid)
        mem_mb, mem_per = parse["ReqMem"](req_mem)
        elapsed_s = parse["Elapsed"](elapsed) if elapsed else parse["ElapsedRaw"](elapsed_raw)
        limit_text = timelimit or timelimit_raw
        gpus = gpu_type = req_gres = None
        if req_tres or alloc_tres:
            gpus = 0
            if "gres/" in req_tres or "gres/" in alloc_tres:  # skip the dicts otherwise
                known = self._gres_seen.get((req_tres, alloc_tres)) if parse is self._fast else None
                if known is None:
                    req = parse["ReqTRES"](req_tres)
                    alloc = parse["AllocTRES"](alloc_tres)
                    known = (gres_in_tres(req), *tres_gpus(alloc or req))
                    if parse is self._fast:
                        if len(self._gres_seen) >= _MEMO_SIZE:
                            self._gres_seen.clear()
                        self._gres_seen[(req_tres, alloc_tres)] = known
                req_gres, gpus, gpu_type = known
        job_values = (
            parse["Submit"](submit), parse["Start"](start), parse["End"](end),
            parse["Timelimit"](limit_text), parse["ReqCPUS"](req_cpus),
            parse["AllocCPUS"](alloc_cpus), parse["NNodes"](nnodes),
            parse["TotalCPU"](total_cpu), parse["MaxRSS"](max_rss),
        )  # fmt: skip

        steps, failed = self._steps(step_rows, parse)
        failed_step = failed_state = None
        if failed is not None and not (state == "COMPLETED" and failed.state == "CANCELLED"):
            failed_step, failed_state = failed.step_id, failed.state
            if state == "FAILED" and failed_state == "OUT_OF_MEMORY":
                state = "OUT_OF_MEMORY"
        # MaxRSS is per step; the allocation row's own value (rarely set) is a fallback.
        max_rss_mb = max_rss_step = None
        for step in steps:
            if step.max_rss_mb is not None and (max_rss_mb is None or step.max_rss_mb > max_rss_mb):
                max_rss_mb, max_rss_step = step.max_rss_mb, step.step_id
        submit_at, start_at, end_at, timelimit_s, req_cpus_n, alloc_cpus_n, nnodes_n, total_cpu_s, alloc_rss = job_values  # fmt: skip
        if max_rss_mb is None:
            max_rss_mb = alloc_rss

        return SacctJob(
            job_id,  # job_id
            job_id_raw or None,  # job_id_raw
            cluster or None,  # cluster
            ids.base_id if ids.array_task_id is not None or ids.array_tasks else None,
            ids.array_task_id,  # array_task_id
            ids.base_id if ids.het_offset is not None else None,  # het_job_id
            ids.het_offset,  # het_offset
            name or None,  # name
            user_name,  # user
            user_uid,  # uid
            account or None,  # account
            group or None,  # group
            partition or None,  # partition
            qos or None,  # qos
            state,  # state
            state_text,  # raw_state
            cancelled_by,  # cancelled_by_uid
            exit_code,  # exit_code
            exit_signal,  # exit_signal
            derived_code,  # derived_exit_code
            derived_signal,  # derived_exit_signal
            failed_step,  # failed_step
            failed_state,  # failed_step_state
            None if reason in NULL_TOKENS else reason,  # reason
            submit_at,  # submit
            start_at,  # start
            end_at,  # end
            None if elapsed_s is None else int(elapsed_s),  # elapsed_s
            timelimit_s,  # timelimit_s
            limit_text or None,  # timelimit_raw
            mem_mb,  # req_mem_mb
            mem_per,  # req_mem_per
            req_cpus_n,  # req_cpus
            alloc_cpus_n,  # alloc_cpus
            nnodes_n,  # nnodes
            req_tres or None,  # req_tres
            alloc_tres or None,  # alloc_tres
            req_gres,  # req_gres
            gpus,  # gpus
            gpu_type,  # gpu_type
            max_rss_mb,  # max_rss_mb
            max_rss_step,  # max_rss_step
            total_cpu_s,  # total_cpu_s
            None if nodelist in NULL_TOKENS else nodelist,  # nodelist
            constraints or None,  # constraints
            flags or None,  # flags
            workdir or None,  # workdir
            stdout or None,  # stdout
            stderr or None,  # stderr
            submit_line or None,  # submit_line
            steps,  # steps
            line_no,  # line_no
        )

    def _steps(
        self, step_rows: list[tuple[int, list[str]]], parse: dict[str, Callable[[str], Any]]
    ) -> tuple[tuple[SacctStep, ...], SacctStep | None]:
        """The job's steps, and the one that best explains a failure (or None)."""
        steps = []
        best = best_key = None
        step_values = self._step_values
        for index, (line_no, parts) in enumerate(step_rows):
            self._line_no, self._parts = line_no, parts
            job_id, name, state_text, exit_text, max_rss, elapsed, elapsed_raw = step_values(parts)
            # Most steps are plain COMPLETED 0:0: skip the parsers for those values.
            state = state_text if state_text in _PLAIN_STATES else parse["State"](state_text)[0]
            exit_code, exit_signal = (
                _ZERO_EXIT if exit_text == "0:0" else parse["ExitCode"](exit_text)
            )
            elapsed_s = parse["Elapsed"](elapsed) if elapsed else parse["ElapsedRaw"](elapsed_raw)
            step = _new_step(  # SacctStep(...) without its Python-level __new__
                SacctStep,
                (
                    job_id[job_id.find(".") + 1 :],
                    name or None,
                    state,
                    exit_code,
                    exit_signal,
                    parse["MaxRSS"](max_rss),
                    None if elapsed_s is None else int(elapsed_s),
                ),
            )
            steps.append(step)
            rank = _STEP_FAILURE_RANK.get(state)
            if rank is not None:
                key = (rank, _STEP_KIND_RANK.get(step.step_id, 0), index)
                if best_key is None or key < best_key:
                    best, best_key = step, key
        return tuple(steps), best

    def _reporting(self, field: str, parse: Callable[[str], Any]) -> Callable[[str], Any]:
        """parse() for the careful pass: a bad value is reported and read as empty."""
        empty = parse("")

        def careful(text: str) -> Any:
            try:
                return parse(text)
            except (ValueError, OverflowError) as exc:
                self._issue(
                    self._line_no,
                    f"bad {field} value {text!r}: {exc}",
                    "|".join(self._parts[:-1]),
                )
                return empty

        return careful

    def _issue(self, line_no: int, reason: str, text: str) -> None:
        issue = ParseIssue(line_no, reason, text[:_EXCERPT_CHARS])
        self.issue_count += 1
        if len(self.issues) < MAX_KEPT_ISSUES:
            self.issues.append(issue)
        if self._on_issue is not None:
            self._on_issue(issue)


# Columns with few distinct values in a dump (durations are clock readings below a day or
# so, limits and requests come from a handful of scripts): parsing each distinct text once
# is a fifth of reading a large dump. Results are immutable (numbers, tuples, strings).
_REPEATING = frozenset(
    {"State", "ExitCode", "DerivedExitCode", "User", "ReqMem", "Elapsed", "Timelimit", "TotalCPU"}
)
_MEMO_SIZE = 1 << 17
_MISSING = object()


def _memoized(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """``parse`` with its results remembered per text (errors are not remembered)."""
    cache: dict[str, Any] = {}
    get = cache.get

    def memo(text: str) -> Any:
        value = get(text, _MISSING)
        if value is _MISSING:
            value = parse(text)
            if len(cache) >= _MEMO_SIZE:
                cache.clear()
            cache[text] = value
        return value

    return memo


def _optional_int(text: str) -> int | None:
    return int(text) if text else None


def _parse_rss(text: str) -> float | None:
    if text[-1:] == "K":  # nearly every MaxRSS value: skip the general parser
        kib = float(text[:-1])
        if kib >= 0:
            return kib / 1024
    # A bare MaxRSS number is bytes (Slurm scales by 1024 and adds K, M, ... above that).
    return parse_size_mb(text, bare_unit="B")


# The parser of each column the reader converts. Each maps an empty field to its
# "no value" result and raises ValueError on text it cannot read.
_PARSERS: dict[str, Callable[[str], Any]] = {
    "State": parse_state,
    "ExitCode": parse_exit_code,
    "DerivedExitCode": parse_exit_code,
    "User": parse_user,
    "UID": _optional_int,
    "ReqMem": parse_req_mem,
    "Elapsed": parse_duration,
    "ElapsedRaw": _optional_int,
    "Timelimit": parse_timelimit,
    "MaxRSS": _parse_rss,
    "TotalCPU": parse_duration,
    "ReqCPUS": _optional_int,
    "AllocCPUS": _optional_int,
    "NNodes": _optional_int,
    "ReqTRES": parse_tres,
    "AllocTRES": parse_tres,
}
_PLAIN_STATES = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "RUNNING", "PENDING",
     "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "REQUEUED", "SUSPENDED"}
)  # fmt: skip
_ZERO_EXIT = (0, 0)
_new_step = tuple.__new__


# -- running sacct -------------------------------------------------------------------

_INVALID_FIELD = re.compile(r'Invalid field requested: "([^"]+)"')
_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def sacct_available(sacct: str = "sacct") -> bool:
    """Whether the sacct command can be found."""
    return shutil.which(sacct) is not None


def sacct_version(sacct: str = "sacct") -> tuple[int, ...] | None:
    """Slurm's version from ``sacct --version`` ('slurm 22.05.8' -> (22, 5, 8))."""
    try:
        result = subprocess.run(
            [sacct, "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    match = _VERSION.search(result.stdout)
    if result.returncode != 0 or match is None:
        return None
    return tuple(int(part) for part in match.groups() if part is not None)


def live_fields(slurm_version: tuple[int, ...] | None) -> tuple[str, ...]:
    """SACCT_FIELDS minus those this Slurm version lacks (all such, when unknown)."""
    return tuple(
        field
        for field in SACCT_FIELDS
        if field not in FIELDS_SINCE
        or (slurm_version is not None and tuple(slurm_version[:2]) >= FIELDS_SINCE[field])
    )


def live_sacct_command(
    since: str | None = None,
    all_users: bool = False,
    slurm_version: tuple[int, ...] | None = None,
    *,
    sacct: str = "sacct",
    fields: Sequence[str] | None = None,
) -> list[str]:
    """The sacct argv: parsable2 output with its header, our field list, and
    ``--starttime``/``--allusers`` when asked. Without ``since`` sacct's own default
    applies (jobs since midnight)."""
    argv = [sacct, "--parsable2", "--format=" + ",".join(fields or live_fields(slurm_version))]
    if all_users:
        argv.append("--allusers")
    if since:
        argv += ["--starttime", since]
    return argv


def run_live_sacct(
    since: str | None = None,
    all_users: bool = False,
    slurm_version: tuple[int, ...] | None = None,
    *,
    sacct: str = "sacct",
) -> Iterator[str]:
    """Run sacct and yield its output lines as they arrive (feed them to SacctReader
    with ``tz=timezone.utc``: sacct runs with TZ=UTC and SLURM_TIME_FORMAT=standard).

    A field sacct rejects as invalid is dropped and sacct is run again. Any other
    failure raises InputError carrying sacct's message, e.g. 'Slurm accounting
    storage is disabled' - after the lines already read, if sacct fails midway.
    ``since`` is passed to --starttime and read in UTC.
    """
    if not sacct_available(sacct):
        raise InputError(
            f"{sacct} not found", hint="run on a Slurm login node, or ingest a saved dump"
        )
    if slurm_version is None:
        slurm_version = sacct_version(sacct)
    fields = list(live_fields(slurm_version))
    env = dict(os.environ, TZ="UTC", SLURM_TIME_FORMAT="standard")
    while True:
        argv = live_sacct_command(since, all_users, slurm_version, sacct=sacct, fields=fields)
        rejected = yield from _stream(argv, env)
        if rejected is None:
            return
        match = {f.lower(): f for f in fields}.get(rejected.lower())
        if match is None:
            raise InputError(f"sacct rejected the field {rejected!r}")
        fields.remove(match)


def _stream(argv: list[str], env: dict[str, str]) -> Iterator[str]:
    """Yield argv's stdout lines. Returns the name of a field sacct rejected (nothing
    was yielded then), or None on success; raises InputError on other failures."""
    # stderr goes to a file, not a pipe: a chatty stderr can then never block sacct
    # while we are busy reading stdout.
    with tempfile.TemporaryFile() as err_file:
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=err_file,
            env=env,
            encoding="utf-8",
            errors="replace",
        )
        try:
            first = proc.stdout.readline()
            streamed = "|" in first  # sacct's header: real output follows
            if streamed:
                yield first
                yield from proc.stdout
                held = ""
            else:  # an error message on stdout, or no output at all
                held = first + proc.stdout.read()
            code = proc.wait()
        finally:
            if proc.poll() is None:  # the consumer stopped early
                proc.kill()
                proc.wait()
            proc.stdout.close()
        err_file.seek(0)
        message = err_file.read().decode("utf-8", "replace").strip() or held.strip()
    if code == 0:
        yield from held.splitlines(keepends=True)
        return None
    rejected = _INVALID_FIELD.search(message)
    if rejected and not streamed:
        return rejected.group(1)
    first_line = message.splitlines()[0] if message else "no message"
    raise InputError(
        f"sacct failed (exit {code}): {first_line}",
        hint="check that slurmdbd accounting is enabled and sacct works in a shell",
    )
