"""Learned fixes: a failed job and the resubmission that completed teach a lesson.

``learn_from_history(store)`` walks the store's job records once and pairs each failed
job (a ``JobRecord`` with an ``Occurrence``) with the FIRST later job of the same user
on the same cluster that looks like a resubmission and COMPLETED:

- *later*: submitted after the failure ended (its submit time when the end is
  unknown) and no more than ``window_hours`` after it;
- *a resubmission*: the same submit script, or the same work dir and the same job
  name stem (``train_v2`` and ``train_v3`` share the stem ``train``; generic names
  such as ``wrap`` do not count). The script is the first word after the options of
  the submit line (``sbatch --mem=8G align.sh in.fq`` -> ``align.sh``; later words are
  its arguments), taken relative to the work dir; ``--wrap`` jobs compare the wrapped
  command without its ``module`` commands, in the same work dir. A job name alone is
  not enough: in lab-week.psv it would pair dmitri's ``dft_scf`` in ~/dft/MoS2
  (scf.sh, an srun step exiting 2) with a different ``dft_scf`` in ~/dft
  (dft_scf.sh) and teach "--mem 16G -> 8G" for it.

When one completed job follows several open failures of one signature, it is paired
with the latest of them only (8G failed, 16G failed, 32G completed teaches
"16G -> 32G"); the older ones are counted as ``superseded``.

The pair's request differences become an *inferred* lesson (status candidate) on the
failure's signature: structured actions with from/to, cause and fix text written from
the category and the diff, conditions and the pair as evidence. Differences are read
from the job records (memory, time, partition, GPUs, CPUs, constraint) and from the
submit lines (sbatch options, ``module load/swap`` in ``--wrap`` commands). Where a
submit line names an option, its value is used as typed (``--mem=32G``; times in
scontrol's spelling, ``--time=15`` becomes 00:15:00); where only ``#SBATCH`` lines
changed, the value comes from the record (``--mem`` 8G).
A CPU change known only from records is written as ``--cpus-per-task`` with the job's
total CPU count.

Not every difference explains a failure. Each category names the options that can fix
it (memory for ``host_oom``, time/partition/QOS/resources for ``time_limit``, only
modules for ``unknown_module`` and other environment errors, everything for generic
ones such as ``nonzero_exit``; a ``nonzero_exit`` with code 126/127 counts as an
environment error). A memory change only counts for ``host_oom`` when memory went up,
a time change for ``time_limit`` when time went up. Other differences are mentioned
in the fix text but are not actions. Decisions that record nothing:

- ``transient``: nothing relevant or irrelevant differs (the same request
  succeeded), or the category is not the job's doing (node failure, preemption, boot
  failure, stuck processes, prolog/epilog);
- skipped ``cancelled``: the failure is a plain ``job_cancelled``. The store does not
  keep who cancelled a job, and a user's scancel is a decision, not a failure mode, so
  whatever the resubmission changed says nothing about a cause. (A cancellation
  with a stated reason, e.g. PartitionTimeLimit, has its own category and is learned);
- skipped ``no_relevant_change``, ``no_followup``, ``superseded``, ``no_signature``
  (a failed record without an occurrence) and ``already_learned`` (the failure is
  already counted: see "One lesson per fix" below).

Conditions: ``cluster`` (the cluster), ``partition`` (where the job failed) and, when
the fix raises ``--time``, a ``partition_limit`` condition on the partition where the
resubmission ran. Encoding of ``partition_limit``: ``name`` is ``PARTITION:FIELD``
with Slurm's field name, ``op`` the comparison and ``value`` the number in Slurm's
base unit, seconds for times: ``Condition("partition_limit", "cpu:MaxTime", "43200",
">=")`` reads "partition cpu's MaxTime is at least 12 h" (see
``partition_limit_condition`` and ``parse_partition_limit``).

One lesson per fix: a pair whose fix is already a lesson of its failure confirms that
lesson instead of writing another. "Its failure": the lesson's signature or one of its
known variants is the failure's, or the failure is the lesson's evidence (``record
--job``). "The same fix": the same actions after normalisation (the same sbatch option
and target value, ``--mem=600M`` and ``--mem=600`` alike; the same module loaded, by
``load`` or ``swap``; see ``_action_key``). Any source counts, so the lesson an agent
recorded for a job is confirmed when ``ingest sacct`` brings that job's completed
resubmission, and keeps the words it was recorded with; where several lessons have the
same fix, a person's or agent's comes first. A confirmation adds the pair as evidence;
an inferred lesson gains ``CONFIRM_STEP`` of confidence (up to
``MAX_INFERRED_CONFIDENCE``), any other has its confidence recomputed from its evidence
(``evidence.refresh``). A pair whose failure is already counted (evidence of an inferred
lesson, or a ``fixed_by`` pair of any lesson) changes nothing. The pair a lesson was
created from is not a confirmation.

Incremental: the Recorder stamps each job row it writes with the store's write counter
(``job_records.change_seq``); a run remembers the counter it learned up to (store_meta
``learn:watermark``, with the window). The next run reads only the rows written since
and, per user, the jobs around them that can pair with them (``_changed_pairs``); the
result equals a full run's. The first run, ``full=True`` and a changed window read
everything.

Performance: a full run is one streamed query over the job records ordered by (cluster,
user, submit time), plus one over the occurrences (failures only, a few tuples each); a
sweep keeps only the open failures of the current user, indexed by identity key.
Submit lines are parsed only when they can matter. All writes happen after the read
has finished. 250k records with 25k pairs: about 4 s on SQLite (see the test). An
incremental run costs two indexed queries per changed user and time range; figures
for 10^6 job records in docs/benchmarks.md.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import shlex
import time
from collections import defaultdict
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import groupby
from operator import itemgetter
from types import MappingProxyType
from typing import Any, Iterable, Iterator, Mapping, NamedTuple

from sqlalchemy import DateTime, and_, select, type_coerce, update

from hpcmem.kb.slurm_units import format_time_limit
from hpcmem.kb.slurm_units import parse_duration, parse_size_mb
from hpcmem.kb.lessons.actions import COUNT_OPTIONS, SBATCH_ALIASES, SBATCH_OPTIONS, SIZE_OPTIONS, TIME_OPTIONS
from hpcmem.kb.lessons.write import Condition, LessonDraft, audit, clean_text, record_lesson
from hpcmem.kb.store.models import JobRecord, Lesson, LessonEvidence, Occurrence, Signature, StoreMeta
from hpcmem.kb.jobs.write import current_change_seq
from hpcmem.kb.store.database import Store
from hpcmem.kb.store.column_types import utcnow

__all__ = [
    "LearnSummary",
    "SubmitLine",
    "Change",
    "learn_from_history",
    "parse_submit_line",
    "request_changes",
    "module_changes",
    "partition_limit_condition",
    "parse_partition_limit",
]

DEFAULT_WINDOW_HOURS = 48.0
# store_meta: {"change_seq": the Recorder's write counter learned up to, "window_hours"}.
# One per store: the counter is the store's, whatever the cluster.
WATERMARK_KEY = "learn:watermark"
CONFIRM_STEP = 0.05
MAX_INFERRED_CONFIDENCE = 0.8
# A fix whose category says which option matters is likelier right than one read off
# a generic failure (a bare exit code), where every difference is a guess.
SPECIFIC_CONFIDENCE = 0.5
GENERIC_CONFIDENCE = 0.35

# Job names Slurm or shells give to anything; equal names of this kind prove nothing.
GENERIC_JOB_NAMES = frozenset({"wrap", "bash", "sh", "interactive", "zsh", "python", "python3"})

# sbatch options whose difference can be a fix. --job-name, --array and --mail-type
# change what a job is called or how it is reported, not what it gets.
REQUEST_OPTIONS = SBATCH_OPTIONS - {"--job-name", "--mail-type", "--array"}

MEMORY = frozenset({"--mem", "--mem-per-cpu", "--mem-per-gpu"})
GPUS = frozenset({"--gres", "--gpus", "--gpus-per-node", "--gpus-per-task"})
CPUS = frozenset({"--cpus-per-task", "--ntasks"})
TIME_FIXES = frozenset({"--time", "--partition", "--qos", "--nodes", "--ntasks-per-node", "--constraint"}) | CPUS | GPUS

# Categories that are not the job's doing: a resubmission fixes them whatever it changes.
TRANSIENT_CATEGORIES = frozenset(
    {"node_failure", "preempted", "boot_failure", "kill_task_failed", "prolog_epilog_failure"}
)
SKIPPED_CATEGORIES = {"job_cancelled": "cancelled"}
# Fixed by the environment (modules), never by a resource request.
ENVIRONMENT_CATEGORIES = frozenset(
    {"unknown_module", "module_not_loadable", "missing_shared_library", "symbol_version_not_found",
     "undefined_symbol", "command_not_found", "python_import_error", "lmod_not_available",
     "linker_error", "compiler_error"}
)  # fmt: skip
# The sbatch options that can fix a category; categories not listed (nonzero_exit,
# python_exception, segfault, unknown...) accept every difference.
RELEVANT_OPTIONS: dict[str, frozenset[str]] = {
    "host_oom": MEMORY | {"--partition", "--constraint", "--nodes", "--ntasks-per-node", "--exclusive"},
    "memory_request_too_large": MEMORY | {"--partition", "--nodes", "--constraint"},
    "time_limit": TIME_FIXES,
    "deadline": TIME_FIXES,
    "time_limit_exceeds_partition": frozenset({"--time", "--time-min", "--partition", "--qos"}),
    "time_limit_required": frozenset({"--time"}),
    "cpu_request_too_large": CPUS | {"--nodes", "--ntasks-per-node", "--partition"},
    "invalid_partition": frozenset({"--partition"}),
    "partition_access_denied": frozenset({"--partition", "--account", "--qos"}),
    "invalid_qos": frozenset({"--qos", "--partition", "--account"}),
    "invalid_account": frozenset({"--account", "--partition"}),
    "qos_limit_exceeded": frozenset({"--qos", "--time", "--nodes", "--partition", "--mem"}) | CPUS | GPUS,
    "invalid_gres": GPUS | {"--partition", "--constraint"},
    "cuda_oom": GPUS | {"--constraint", "--partition", "--mem-per-gpu"},
    "cuda_error": GPUS | {"--constraint", "--partition", "--exclude", "--nodelist"},
    "cuda_arch_mismatch": GPUS | {"--constraint", "--partition", "--exclude", "--nodelist"},
    "gpu_unavailable": GPUS | {"--constraint", "--partition", "--exclude", "--nodelist"},
    "illegal_instruction": frozenset({"--constraint", "--partition", "--exclude", "--nodelist"}),
    **{category: frozenset() for category in ENVIRONMENT_CATEGORIES},
}
# Specific categories where a module change is a plausible fix (generic ones: always).
MODULE_CATEGORIES = ENVIRONMENT_CATEGORIES | {"cuda_error", "cuda_arch_mismatch", "illegal_instruction"}
# Options that must grow for the category's fix to make sense.
MUST_GROW = {"host_oom": MEMORY, "time_limit": frozenset({"--time"}), "deadline": frozenset({"--time"})}
# Exit codes of a command that could not be found or run: an environment problem.
ENVIRONMENT_EXIT_CODES = frozenset({126, 127})


# --------------------------------------------------------------------------- summary


@dataclass
class LearnSummary:
    pairs_found: int = 0  # failure -> completed resubmission pairs, whatever came of them
    lessons_created: int = 0
    lessons_confirmed: int = 0  # confirmations added to existing (or just created) lessons
    transient: int = 0  # pairs where the same request succeeded, or the failure was not the job's
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> failures (of the jobs read)
    lesson_ids: list[str] = field(default_factory=list)  # lessons created or confirmed
    seconds: float = 0.0
    mode: str = "full"  # or "incremental": only jobs written since the last run, and those around them
    jobs_read: int | None = None  # incremental runs: job rows read

    def skip(self, reason: str, count: int = 1) -> None:
        if count:
            self.skipped[reason] = self.skipped.get(reason, 0) + count

    def as_dict(self) -> dict[str, Any]:
        return {
            "pairs_found": self.pairs_found,
            "lessons_created": self.lessons_created,
            "lessons_confirmed": self.lessons_confirmed,
            "transient": self.transient,
            "skipped": dict(sorted(self.skipped.items())),
            "lesson_ids": list(self.lesson_ids),
            "seconds": self.seconds,
            "mode": self.mode,
            "jobs_read": self.jobs_read,
        }


# --------------------------------------------------------------------------- submit lines


class SubmitLine(NamedTuple):
    """What a submit line asked for: sbatch options by long name, the script or
    command, and the modules a ``--wrap`` command loads (in load order)."""

    command: str | None  # sbatch, srun, salloc
    options: Mapping[str, str]  # long option -> value ('' for a flag)
    script: str | None  # the batch script, the srun command, or 'wrap:<command>'
    modules: tuple[str, ...]
    heterogeneous: bool


_NO_VALUE = frozenset({
    "--parsable", "--hold", "--wait", "--test-only", "--overcommit", "--oversubscribe", "--contiguous",
    "--quiet", "--verbose", "--use-min-nodes", "--ignore-pbs", "--no-requeue", "--requeue", "--reboot",
    "--spread-job", "--exclusive", "--nice", "--no-kill", "--get-user-env", "--propagate", "--exact",
    "--overlap", "--pty", "--unbuffered", "--label", "--multi-prog", "--disable-status", "--preserve-env",
    "--kill-on-bad-exit", "--help", "--usage", "--version",
    "-H", "-k", "-O", "-Q", "-s", "-v", "-W", "-l", "-u", "-X", "-E", "-K", "-h", "-V",
})  # fmt: skip
_WRAP = re.compile(r"(?:^|\s)--wrap(?:=|\s+)")
_COMMAND_SPLIT = re.compile(r"\s*(?:&&|\|\||;|\n)\s*")
_MODULE_CMD = re.compile(r"^(?:module|ml)(?:\s+|$)")


def _tokens(text: str) -> list[str]:
    if any(c in text for c in "'\"\\"):
        try:
            return shlex.split(text)
        except ValueError:
            pass
    return text.split()


@lru_cache(maxsize=65536)
def parse_submit_line(line: str | None) -> SubmitLine:
    """Read a SubmitLine as sacct prints it (argv joined by spaces, quotes lost)."""
    if not line:
        return SubmitLine(None, MappingProxyType({}), None, (), False)
    wrap = None
    found = _WRAP.search(line)
    if found:
        # sacct drops the quotes around --wrap's value, so it runs to the end of the line.
        line, wrap = line[: found.start()], line[found.end():].strip().strip("'\"")
    words = _tokens(line)
    command = words[0].rsplit("/", 1)[-1] if words else None
    options: dict[str, str] = {}
    positional: list[str] = []
    heterogeneous = False
    i = 1
    while i < len(words):
        word = words[i]
        i += 1
        if positional:
            positional.append(word)  # the script's own arguments
            continue
        if word == ":":
            heterogeneous = True
            continue
        if not word.startswith("-") or word == "-":
            positional.append(word)
            continue
        if word.startswith("--"):
            name, eq, value = word.partition("=")
            if not eq and name not in _NO_VALUE and i < len(words):
                value = words[i]
                i += 1
        else:
            name, value = word[:2], word[2:]
            if not value and name not in _NO_VALUE and i < len(words):
                value = words[i]
                i += 1
        options[SBATCH_ALIASES.get(name, name)] = value
    modules: tuple[str, ...] = ()
    script = None
    if wrap is not None:
        modules, rest = _split_modules(wrap)
        script = "wrap:" + rest
    elif positional:
        if command == "sbatch":
            script = positional[0]
        else:  # srun/salloc run a command; its modules matter as in --wrap
            modules, rest = _split_modules(" ".join(positional))
            script = rest or None
    if heterogeneous:
        # Each component has its own options; the records say what each one got.
        options = {}
    # Read-only: the result is cached and shared.
    return SubmitLine(command, MappingProxyType(options), script, modules, heterogeneous)


def _split_modules(command: str) -> tuple[tuple[str, ...], str]:
    """The modules a command line loads (after swaps and unloads) and the rest of it."""
    loaded: list[str] = []
    rest: list[str] = []
    for part in _COMMAND_SPLIT.split(command.strip()):
        if not part:
            continue
        if not _MODULE_CMD.match(part):
            rest.append(" ".join(part.split()))
            continue
        words = part.split()[1:]
        op = words[0] if words and words[0] in ("load", "add", "swap", "switch", "unload", "rm", "del", "purge") else "load"
        args = words[1:] if words and words[0] == op else words
        if op == "purge":
            loaded.clear()
        elif op in ("swap", "switch") and len(args) == 2:
            old, new = args
            loaded[:] = [new if _same_module(m, old) else m for m in loaded]
            if new not in loaded:
                loaded.append(new)
        elif op in ("unload", "rm", "del"):
            loaded[:] = [m for m in loaded if not any(_same_module(m, a) for a in args)]
        else:
            for name in args:
                if name.startswith("-"):  # `ml -foo` unloads
                    loaded[:] = [m for m in loaded if not _same_module(m, name[1:])]
                elif name not in loaded:
                    loaded.append(name)
    return tuple(loaded), " && ".join(rest)


def _family(module: str) -> str:
    return module.split("/", 1)[0]


def _same_module(loaded: str, named: str) -> bool:
    return loaded == named or ("/" not in named and _family(loaded) == named)


# --------------------------------------------------------------------------- differences


class Change(NamedTuple):
    """One sbatch option that differs between the failed job and its resubmission."""

    option: str
    before: str | None  # None: not set (or unknown) in the failed job
    after: str | None  # None: dropped in the resubmission


def _mem_text(mb: float) -> str:
    if mb >= 1024 and abs(mb / 1024 - round(mb / 1024)) < 1e-6:
        return f"{round(mb / 1024)}G"
    return f"{round(mb)}M"


def _gres_text(gres: str) -> str:
    """'gpu=1,gpu:a100=1' (the stored ReqTRES form) as --gres writes it: 'gpu:a100:1'."""
    typed, untyped = [], []
    for item in gres.split(","):
        name, _, count = item.partition("=")
        (typed if ":" in name else untyped).append(f"{name}:{count}" if count else name)
    return ",".join(sorted(typed) or sorted(untyped))


def _same_number(a: float, b: float) -> bool:
    return abs(a - b) <= max(abs(a), abs(b)) * 0.005


# (primary option, the line options that set the same thing, record attribute, to text)
_DIMENSIONS = (
    ("--mem", MEMORY, "req_mem_mb", _mem_text, _same_number),
    ("--time", frozenset({"--time"}), "req_time_s", format_time_limit, _same_number),
    ("--partition", frozenset({"--partition"}), "partition", str, str.__eq__),
    ("--gres", GPUS, "req_gres", _gres_text, lambda a, b: _gres_text(a) == _gres_text(b)),
    ("--cpus-per-task", CPUS, "req_cpus", str, _same_number),
    ("--constraint", frozenset({"--constraint"}), "constraints", str, str.__eq__),
)
_DIMENSION_OPTIONS = frozenset().union(*(d[1] for d in _DIMENSIONS))


def request_changes(failed: Any, succeeded: Any) -> list[Change]:
    """The sbatch options that differ between two jobs (JobRecord-like objects).

    A job record says what the job really got; its submit line how it was asked for.
    A difference counts when the records differ (or are unknown); values are taken
    from the submit lines where they name the option.
    """
    line_f, line_s = parse_submit_line(failed.submit_line), parse_submit_line(succeeded.submit_line)
    opts_f, opts_s = line_f.options, line_s.options
    changes: list[Change] = []
    for primary, family, attr, to_text, same in _DIMENSIONS:
        rec_f, rec_s = getattr(failed, attr), getattr(succeeded, attr)
        both_known = rec_f is not None and rec_s is not None
        records_differ = (rec_f is None) != (rec_s is None) or (both_known and not same(rec_f, rec_s))
        if both_known and not records_differ:
            continue  # e.g. --mem=32G and --mem=32768M, or the same limit written twice
        named = sorted(o for o in family if o in opts_f or o in opts_s)
        if named:
            for option in named:
                before, after = opts_f.get(option), opts_s.get(option)
                if before == after:
                    continue
                if option == primary:  # an option left to #SBATCH or the default: use the record
                    before = before if before is not None else (to_text(rec_f) if rec_f is not None else None)
                    after = after if after is not None else (to_text(rec_s) if rec_s is not None else None)
                changes.append(Change(option, before, after))
        elif records_differ:
            changes.append(Change(primary, to_text(rec_f) if rec_f is not None else None,
                                  to_text(rec_s) if rec_s is not None else None))
    for option in sorted((set(opts_f) | set(opts_s)) & (REQUEST_OPTIONS - _DIMENSION_OPTIONS)):
        before, after = opts_f.get(option), opts_s.get(option)
        if before != after:
            changes.append(Change(option, before, after))
    return [c for c in (_normalized(c) for c in changes) if c.before != c.after]


def _normalized(change: Change) -> Change:
    """--time values in one spelling (``--time=90`` is 01:30:00), so equal limits compare equal."""
    if change.option not in ("--time", "--time-min"):
        return change
    return Change(change.option, _time_text(change.before), _time_text(change.after))


def _time_text(value: str | None) -> str | None:
    try:
        seconds = parse_duration(value) if value else None
    except ValueError:
        return value
    return value if seconds is None else format_time_limit(int(seconds))


def module_changes(failed_line: str | None, succeeded_line: str | None) -> list[dict[str, Any]]:
    """Module actions that turn the failed job's modules into the resubmission's."""
    before = parse_submit_line(failed_line).modules
    after = parse_submit_line(succeeded_line).modules
    actions: list[dict[str, Any]] = []
    for module in after:
        if module in before:
            continue
        old = next((m for m in before if _family(m) == _family(module) and m not in after), None)
        if old is not None:
            actions.append({"type": "module", "op": "swap", "from": old, "name": module})
        else:
            actions.append({"type": "module", "op": "load", "name": module})
    swapped = {a["from"] for a in actions if a["op"] == "swap"}
    for module in before:
        if module not in after and module not in swapped:
            actions.append({"type": "module", "op": "unload", "name": module})
    return actions


def _grew(change: Change) -> bool | None:
    """Whether a memory or time option went up; None when it cannot be told."""
    try:
        if change.option == "--time":
            before, after = parse_duration(change.before or ""), parse_duration(change.after or "")
        else:
            before = parse_size_mb(change.before or "", bare_unit="M")
            after = parse_size_mb(change.after or "", bare_unit="M")
    except ValueError:
        return None
    if before is None or after is None:
        return None
    return after > before


# --------------------------------------------------------------------------- conditions


def partition_limit_condition(partition: str, seconds: int, field_name: str = "MaxTime") -> Condition:
    """'partition P's FIELD is at least N' (N in Slurm's base unit: seconds for times)."""
    return Condition("partition_limit", f"{partition}:{field_name}", str(int(seconds)), ">=")


def parse_partition_limit(condition: dict[str, Any] | Condition) -> tuple[str, str, str, int]:
    """(partition, field, op, value) of a ``partition_limit`` condition."""
    data = condition.as_dict() if isinstance(condition, Condition) else condition
    partition, _, field_name = str(data["name"]).rpartition(":")
    return partition, field_name, str(data.get("op") or ">="), int(str(data["value"]))


# --------------------------------------------------------------------------- the sweep


def _job_context(job: "_Job") -> dict[str, Any]:
    """The failed job's facts, which the lesson was born with (recall weighs a new job's
    request against them: an OOM at 8G and one at 32G need different fixes)."""
    from hpcmem.kb.jobs.request import from_occurrence

    facts = {name: getattr(job, name) for name in _Job.__slots__}
    facts["exit_code"] = job.exit_code
    return from_occurrence(facts)


@dataclass(slots=True)
class _Job:
    cluster: str
    job_id: str
    user_name: str
    job_name: str | None
    partition: str | None
    state: str
    failed: bool
    req_mem_mb: float | None
    req_cpus: int | None
    req_gres: str | None
    req_time_s: int | None
    constraints: str | None
    max_rss_mb: float | None
    elapsed_s: int | None
    work_dir: str | None
    submit_line: str | None
    submit_time: dt.datetime
    end_time: dt.datetime | None
    occurrence_id: int | None
    exit_code: int | None
    signature_id: int | None
    category: str | None
    fingerprint: str | None
    template: str | None

    @property
    def anchor(self) -> dt.datetime:
        return self.end_time or self.submit_time

    @property
    def completed(self) -> bool:
        return not self.failed and self.state == "COMPLETED"


def _stem(name: str) -> str:
    # (?!\d): each repetition takes a whole digit run; with (\d+)+ a long run of digits that
    # is not at the end was split every possible way (exponential: 24 digits took 2 s)
    stem = re.sub(r"(?:[-_.]?(?:v|try|retry|rerun|run|attempt|r)?\d+(?!\d))+$", "", name.lower())
    return stem or name.lower()


def _script_path(script: str, work_dir: str | None) -> str:
    # `run.sh` (or `--wrap=python fit.py`) in two directories is two different jobs.
    if script.startswith("/") or not work_dir:
        return script
    if script.startswith("wrap:"):
        return f"{work_dir}:{script}"
    return f"{work_dir.rstrip('/')}/{script[2:] if script.startswith('./') else script}"


def _keys(job: _Job) -> tuple[tuple[str, ...], ...]:
    """What makes two jobs of one user the same work (see the module docstring)."""
    keys: list[tuple[str, ...]] = []
    script = parse_submit_line(job.submit_line).script
    if script:
        keys.append(("script", _script_path(script, job.work_dir)))
    name = job.job_name
    if job.work_dir and name and name.lower() not in GENERIC_JOB_NAMES:
        keys.append(("dir", job.work_dir, _stem(name)))
    return tuple(keys)


_JOB_COLUMNS = (
    JobRecord.cluster, JobRecord.job_id, JobRecord.user_name, JobRecord.job_name, JobRecord.partition,
    JobRecord.state, JobRecord.failed, JobRecord.req_mem_mb, JobRecord.req_cpus, JobRecord.req_gres,
    JobRecord.req_time_s, JobRecord.constraints, JobRecord.max_rss_mb, JobRecord.elapsed_s, JobRecord.work_dir,
    JobRecord.submit_line, type_coerce(JobRecord.submit_time, DateTime()), type_coerce(JobRecord.end_time, DateTime()),
)


def _stream_rows(store: Store) -> Iterator[Any]:
    """Every job record of a known user in (cluster, user, submit time) order.

    Times come back naive UTC: plain DateTime skips the per-value time-zone conversion,
    a third of the cost over 250k rows. Occurrences are not joined in here: on a
    freshly ingested PostgreSQL table without statistics the planner may pick a nested
    loop that takes minutes; a second small query (``_failures``) is immune to that.
    """
    query = (
        select(*_JOB_COLUMNS)
        .where(JobRecord.user_name.is_not(None), JobRecord.submit_time.is_not(None))
        .order_by(JobRecord.cluster, JobRecord.user_name, JobRecord.submit_time, JobRecord.id)
    )
    with store.engine.connect() as conn:
        yield from conn.execution_options(yield_per=5000).execute(query)


def _failures(store: Store, jobs: list[tuple[str, str]] | None = None) -> dict[tuple[str, str], tuple]:
    """(cluster, job id) -> (occurrence id, exit code, signature id, category, fingerprint,
    template) for every occurrence with a signature (or only those of ``jobs``);
    signatures are shared tuples."""
    columns = (Occurrence.cluster, Occurrence.job_id, Occurrence.id, Occurrence.exit_code, Occurrence.signature_id)
    found: dict[tuple[str, str], tuple] = {}
    with store.engine.connect() as conn:
        if jobs is None:
            rows = conn.execution_options(yield_per=5000).execute(
                select(*columns).where(Occurrence.signature_id.is_not(None)))
        else:
            rows = [row for cluster, ids in _by_cluster(jobs) for chunk in _chunks(ids) for row in conn.execute(
                select(*columns).where(Occurrence.cluster == cluster, Occurrence.job_id.in_(chunk),
                                       Occurrence.signature_id.is_not(None)))]
        rows = list(rows)
        wanted = sorted({row[4] for row in rows})
        signatures = {}
        for chunk in ([None] if jobs is None else _chunks(wanted)):
            query = select(Signature.id, Signature.category, Signature.fingerprint, Signature.template)
            if chunk is not None:
                query = query.where(Signature.id.in_(chunk))
            signatures.update({row[0]: tuple(row[1:]) for row in conn.execute(query)})
        for cluster, job_id, occ_id, exit_code, sig_id in rows:
            if sig_id in signatures:
                found[(cluster, job_id)] = (occ_id, exit_code, sig_id, *signatures[sig_id])
    return found


def _by_cluster(jobs: list[tuple[str, str]]) -> list[tuple[str, list[str]]]:
    grouped: dict[str, list[str]] = defaultdict(list)
    for cluster, job_id in jobs:
        grouped[cluster].append(job_id)
    return sorted(grouped.items())


def _chunks(items: list, size: int = 900) -> Iterator[list]:  # under SQLite's variable limit
    for start in range(0, len(items), size):
        yield items[start:start + size]


class _Pair(NamedTuple):
    failed: _Job
    succeeded: _Job


def _sweep(rows: Iterable[Any], failures: Mapping[tuple[str, str], tuple], window: dt.timedelta,
           summary: LearnSummary) -> list[_Pair]:
    """The pairs in one user's job rows, in (submit time, id) order."""
    pairs: list[_Pair] = []
    open_by_key: dict[tuple[str, ...], list[_Job]] = defaultdict(list)
    open_ids: set[int] = set()  # occurrence ids of failures still waiting for a follow-up
    no_failure = (None,) * 6
    for row in rows:
        failed, state = row[6], row[5]
        if not failed and (state != "COMPLETED" or not open_ids):
            continue  # most rows: nothing is waiting for this job
        job = _Job(*row, *(failures.get((row[0], row[1]), no_failure) if failed else no_failure))
        if job.completed:
            matched: dict[int, _Job] = {}
            for key in _keys(job):
                still_open = []
                for failure in open_by_key.get(key, ()):
                    if failure.occurrence_id not in open_ids:
                        continue
                    if job.submit_time - failure.anchor > window:
                        open_ids.discard(failure.occurrence_id)
                        summary.skip("no_followup")
                        continue
                    still_open.append(failure)
                    if job.submit_time >= failure.anchor:  # sacct times have 1 s resolution
                        matched[failure.occurrence_id] = failure
                open_by_key[key] = still_open
            # One completed job answers one failure per signature: the latest attempt.
            latest: dict[int | None, _Job] = {}
            for failure in sorted(matched.values(), key=lambda f: f.anchor):
                if failure.signature_id in latest:
                    summary.skip("superseded")
                latest[failure.signature_id] = failure
            for failure in matched.values():
                open_ids.discard(failure.occurrence_id)
            pairs.extend(_Pair(failure, job) for failure in latest.values())
        else:
            if job.occurrence_id is None or job.signature_id is None:
                summary.skip("no_signature")
                continue
            open_ids.add(job.occurrence_id)
            for key in _keys(job):
                open_by_key[key].append(job)
    summary.skip("no_followup", len(open_ids))
    return pairs


def _all_pairs(store: Store, window: dt.timedelta, summary: LearnSummary) -> list[_Pair]:
    """A full run: every user's whole history, streamed once."""
    failures = _failures(store)
    pairs: list[_Pair] = []
    for _user, rows in groupby(_stream_rows(store), key=itemgetter(0, 2)):
        pairs.extend(_sweep(rows, failures, window, summary))
    return pairs


# An incremental run re-reads, per user, the jobs around each changed one. A failure's
# outcome depends only on what follows it: its partner is the first completed job of the
# same work in [anchor, anchor + W] (W: the window), and that job answers the latest of
# its failures per signature. A changed job at time t (a failure's anchor, a completed
# job's submit time) therefore changes only outcomes of failures anchored in [t - W, t]
# (a new partner) or in (t, t + W] (a partner's other failures), and those are decided
# by the failures anchored and the completed jobs submitted in [t - W, t + W]. Reading
# from t - W, the sweep misses failures anchored earlier; they are older than every
# failure it reads, so they never change which one is the latest.


def _changed_users(store: Store, since: int, window: dt.timedelta) -> dict[tuple[str, str], list[list[dt.datetime]]]:
    """(cluster, user) -> [[start, end], ...]: the times to re-read around the job rows
    written after ``since``, overlapping ranges merged."""
    times: dict[tuple[str, str], list[dt.datetime]] = defaultdict(list)
    query = (select(JobRecord.cluster, JobRecord.user_name, JobRecord.failed, JobRecord.state,
                    type_coerce(JobRecord.submit_time, DateTime()), type_coerce(JobRecord.end_time, DateTime()))
             .where(JobRecord.change_seq > since, JobRecord.user_name.is_not(None), JobRecord.submit_time.is_not(None)))
    with store.engine.connect() as conn:
        for cluster, user, failed, state, submit, end in conn.execute(query):
            if failed:
                times[(cluster, user)].append(end or submit)
            elif state == "COMPLETED":
                times[(cluster, user)].append(submit)
    ranges: dict[tuple[str, str], list[list[dt.datetime]]] = {}
    for user, moments in sorted(times.items()):
        merged: list[list[dt.datetime]] = []
        for t in sorted(moments):
            if merged and t - window <= merged[-1][1]:
                merged[-1][1] = t + window
            else:
                merged.append([t - window, t + window])
        ranges[user] = merged
    return ranges


def _rows_around(conn, cluster: str, user: str, low: dt.datetime, high: dt.datetime) -> list[tuple]:
    """The user's jobs submitted in [low, high], plus the failures submitted earlier that
    ended in it (long jobs), in (submit time, id) order."""
    columns = (*_JOB_COLUMNS, JobRecord.id)
    mine = (JobRecord.cluster == cluster, JobRecord.user_name == user)
    rows = {row[-1]: row for row in conn.execute(
        select(*columns).where(*mine, JobRecord.submit_time >= low, JobRecord.submit_time <= high))}
    # Failures are found through their occurrences (indexed by user and by end time);
    # a failure without one never waits for a follow-up anyway.
    late = (select(*columns).join(Occurrence, and_(Occurrence.cluster == JobRecord.cluster,
                                                   Occurrence.job_id == JobRecord.job_id))
            .where(Occurrence.cluster == cluster, Occurrence.user_name == user, Occurrence.end_time >= low,
                   Occurrence.end_time <= high, *mine, JobRecord.submit_time < low, JobRecord.failed.is_(True)))
    rows.update((row[-1], row) for row in conn.execute(late))
    return [tuple(row[:-1]) for row in sorted(rows.values(), key=lambda r: (r[16], r[-1]))]


def _changed_pairs(store: Store, since: int, window: dt.timedelta, summary: LearnSummary) -> list[_Pair]:
    """An incremental run: the pairs the job rows written after ``since`` can change."""
    with store.engine.connect() as conn:
        segments = [_rows_around(conn, cluster, user, start, end)
                    for (cluster, user), ranges in _changed_users(store, since, window).items()
                    for start, end in ranges]
    summary.jobs_read = sum(len(rows) for rows in segments)
    failures = _failures(store, [(row[0], row[1]) for rows in segments for row in rows if row[6]])
    return [pair for rows in segments for pair in _sweep(rows, failures, window, summary)]


# --------------------------------------------------------------------------- one pair


class _Plan(NamedTuple):
    """What one pair teaches."""

    actions: list[dict[str, Any]]
    ignored: list[Change]
    specific: bool


def _relevant(category: str, exit_code: int | None) -> tuple[frozenset[str] | None, bool]:
    """(sbatch options that can fix the category or None for all, modules count?)"""
    if category == "nonzero_exit" and exit_code in ENVIRONMENT_EXIT_CODES:
        return frozenset(), True
    if category in RELEVANT_OPTIONS:
        return RELEVANT_OPTIONS[category], category in MODULE_CATEGORIES
    return None, True


def _plan(pair: _Pair) -> _Plan | str:
    """The actions a pair teaches, or why it teaches nothing."""
    failed, succeeded = pair
    category = failed.category or "unknown"
    if category in SKIPPED_CATEGORIES:
        return SKIPPED_CATEGORIES[category]
    changes = request_changes(failed, succeeded)
    modules = module_changes(failed.submit_line, succeeded.submit_line)
    if category in TRANSIENT_CATEGORIES or (not changes and not modules):
        return "transient"
    options, modules_count = _relevant(category, failed.exit_code)
    grow = MUST_GROW.get(category, frozenset())
    actions: list[dict[str, Any]] = []
    ignored: list[Change] = []
    for change in changes:
        useful = change.after is not None and (options is None or change.option in options)
        if useful and change.option in grow and _grew(change) is False:
            useful = False
        if useful:
            action = {"type": "sbatch", "option": change.option, "to": change.after}
            if change.before is not None:
                action["from"] = change.before
            actions.append(action)
        else:
            ignored.append(change)
    if modules_count:
        actions.extend(modules)
    if not actions:
        return "no_relevant_change"
    return _Plan(actions, ignored, options is not None)


def _action_key(actions: list[dict[str, Any]]) -> tuple[tuple[str, ...], ...]:
    """What a fix does, whoever wrote it: lessons with the same key are the same fix.

    The same sbatch option (short or long form) with the same target value (``--mem=600M``,
    ``--mem=600`` and ``--mem=0.5859375G`` are one size; ``--time=90`` and ``01:30:00`` one limit), or
    the same module made available (``load`` and ``swap`` to one name are one fix) or
    unloaded. Where the value came from (``from``) is not part of it: the fix is the target."""
    keys = []
    for a in actions:
        if a.get("type") == "sbatch":
            option = SBATCH_ALIASES.get(str(a.get("option")), str(a.get("option")))
            keys.append(("sbatch", option, _value_key(option, a.get("to"))))
        elif a.get("type") == "module":
            op = "load" if a.get("op") in ("load", "swap") else str(a.get("op"))
            keys.append(("module", op, str(a.get("name") or "")))
        else:
            keys.append((str(a.get("type")), repr(sorted(a.items()))))
    return tuple(sorted(keys))


def _value_key(option: str, value: Any) -> str:
    """An sbatch value in one spelling: sizes in MiB, times in seconds, counts as numbers."""
    text = str(value).strip() if value is not None else ""
    try:
        if option in SIZE_OPTIONS:
            mb = parse_size_mb(text.upper(), bare_unit="M")
            return text if mb is None else f"{mb:g}M"
        if option in TIME_OPTIONS:
            seconds = parse_duration(text)
            return text if seconds is None else f"{int(seconds)}s"
        if option in COUNT_OPTIONS and text.isdigit():
            return str(int(text))
    except (ValueError, KeyError, IndexError):
        pass
    return text


def _gib(mb: float) -> str:
    return f"{mb / 1024:.1f}G" if mb >= 1024 else f"{mb:.0f}M"


def _describe(action: dict[str, Any]) -> str:
    if action["type"] == "sbatch":
        was = f" (was {action['from']})" if action.get("from") else ""
        return f"{action['option']}={action['to']}{was}"
    if action["op"] == "swap":
        return f"module swap {action['from']} {action['name']}"
    return f"module {action['op']} {action['name']}"


def _texts(pair: _Pair, plan: _Plan) -> tuple[str, str, str]:
    """(context, cause, fix) in plain words."""
    failed, succeeded = pair
    category = failed.category or "unknown"
    mem = _mem_text(failed.req_mem_mb) if failed.req_mem_mb else "its request"
    rss = f" (MaxRSS {_gib(failed.max_rss_mb)})" if failed.max_rss_mb is not None else ""
    if category == "host_oom":
        cause = f"Job ran out of memory at {mem}{rss}."
    elif category in ("time_limit", "deadline"):
        limit = format_time_limit(failed.req_time_s, "its limit") if failed.req_time_s else "its limit"
        ran = f" after {format_time_limit(failed.elapsed_s)}" if failed.elapsed_s is not None else ""
        cause = f"Job hit its time limit of {limit}{ran}."
    elif category == "nonzero_exit" and failed.exit_code is not None:
        cause = f"Job failed with exit code {failed.exit_code}."
    else:
        cause = f"Job failed ({category}): {failed.template}"
    changed = ", ".join(_describe(a) for a in plan.actions)
    ran = f" in {format_time_limit(succeeded.elapsed_s)}" if succeeded.elapsed_s is not None else ""
    fix = f"The resubmission with {changed} completed (job {succeeded.job_id}{ran})."
    if category == "host_oom" and succeeded.max_rss_mb is not None:
        fix = fix[:-2] + f", MaxRSS {_gib(succeeded.max_rss_mb)})."
    if plan.ignored:
        others = ", ".join(f"{c.option} {c.before or 'unset'} -> {c.after or 'unset'}" for c in plan.ignored)
        fix += f" It also changed {others}, which does not explain this failure."
    script = parse_submit_line(failed.submit_line).script
    what = failed.job_name or "job"
    if script and not script.startswith("wrap:"):
        what += f" ({script})"
    where = f"{failed.cluster}/{failed.partition}" if failed.partition else failed.cluster
    context = (f"Learned from {failed.user_name}'s {what} on {where}: job {failed.job_id} failed, "
               f"job {succeeded.job_id} completed.")
    return context, cause, fix


def _conditions(pair: _Pair, actions: list[dict[str, Any]]) -> list[Condition]:
    failed, succeeded = pair
    conditions = [Condition("cluster", failed.cluster)]
    if failed.partition:
        conditions.append(Condition("partition", failed.partition))
    time_action = next((a for a in actions if a["type"] == "sbatch" and a["option"] == "--time"), None)
    seconds = succeeded.req_time_s
    if time_action is not None and seconds is None:
        try:
            seconds = int(parse_duration(str(time_action["to"])) or 0) or None
        except ValueError:
            seconds = None
    if time_action is not None and seconds and succeeded.partition:
        conditions.append(partition_limit_condition(succeeded.partition, seconds))
    return conditions


def _evidence(pair: _Pair) -> list[dict[str, Any]]:
    failed, succeeded = pair
    return [
        {"kind": "occurrence", "occurrence_id": failed.occurrence_id, "job_id": failed.job_id},
        # the failure it fixed, so a later run knows this pair is counted (whatever the lesson's source)
        {"kind": "fixed_by", "occurrence_id": failed.occurrence_id, "job_id": succeeded.job_id,
         "note": f"completed after job {failed.job_id} failed"},
    ]


# --------------------------------------------------------------------------- writing


class _Known(NamedTuple):
    """The lessons a run's pairs can confirm instead of writing new ones."""

    by_key: dict[tuple, str]  # (signature id, action key) -> lesson id
    by_occurrence: dict[int, dict[tuple, str]]  # a failure's occurrence -> {action key: lesson id}
    used: set[int]  # failures already counted as evidence of a fix


# A person's lesson that was rejected or expired is not one to confirm; an inferred one is
# (learn recreating a lesson a lead rejected would undo the rejection).
_DEAD = ("rejected", "expired")


def _known_lessons(store: Store, pairs: list[_Pair]) -> _Known:
    """The stored lessons of the pairs' failures, keyed by what their fix does.

    A lesson is a lesson of a failure when the failure's signature is its own or one of its
    known variants (aliases), or when the failure is its evidence (``record --job``). Every
    source counts: the fix an agent recorded for a job is confirmed by that job's completed
    resubmission, not written again as an inferred lesson. Where several lessons have the
    same fix, a person's comes before an inferred one, then the oldest.
    """
    from hpcmem.kb.store.models import LessonAlias

    signatures = sorted({p.failed.signature_id for p in pairs})
    occurrences = sorted({p.failed.occurrence_id for p in pairs})
    on_signature: list[tuple[str, int]] = []  # (lesson id, signature id)
    on_occurrence: list[tuple[str, int]] = []  # (lesson id, occurrence id)
    used: set[int] = set()
    with store.session() as session:
        for chunk in _chunks(signatures):
            on_signature += session.execute(
                select(Lesson.id, Lesson.signature_id).where(Lesson.signature_id.in_(chunk))).all()
            on_signature += session.execute(
                select(LessonAlias.lesson_id, Signature.id).join(Signature, Signature.fingerprint == LessonAlias.fingerprint)
                .where(Signature.id.in_(chunk))).all()
        for chunk in _chunks(occurrences):
            on_occurrence += session.execute(
                select(LessonEvidence.lesson_id, LessonEvidence.occurrence_id)
                .where(LessonEvidence.kind == "occurrence", LessonEvidence.occurrence_id.in_(chunk))).all()
            used.update(session.scalars(  # counted: evidence of an inferred lesson, or a fix's pair
                select(LessonEvidence.occurrence_id).join(Lesson, Lesson.id == LessonEvidence.lesson_id)
                .where(LessonEvidence.occurrence_id.in_(chunk),
                       ((Lesson.source == "inferred") & (LessonEvidence.kind == "occurrence"))
                       | (LessonEvidence.kind == "fixed_by"))))
        ids = sorted({i for i, _ in on_signature} | {i for i, _ in on_occurrence})
        lessons: dict[str, tuple] = {}
        for chunk in _chunks(ids):
            for lesson_id, actions, source, status, created in session.execute(
                    select(Lesson.id, Lesson.actions, Lesson.source, Lesson.status, Lesson.created_at)
                    .where(Lesson.id.in_(chunk))):
                if source == "inferred" or status not in _DEAD:
                    lessons[lesson_id] = (source == "inferred", created, _action_key(actions or []))
    first = sorted(lessons, key=lambda i: (lessons[i][0], lessons[i][1], i))  # a person's, then the oldest
    rank = {lesson_id: n for n, lesson_id in enumerate(first)}
    by_key: dict[tuple, str] = {}
    for lesson_id, sig_id in sorted(set(on_signature), key=lambda row: rank.get(row[0], len(rank))):
        if lesson_id in lessons:
            by_key.setdefault((sig_id, lessons[lesson_id][2]), lesson_id)
    by_occurrence: dict[int, dict[tuple, str]] = defaultdict(dict)
    for lesson_id, occ_id in sorted(set(on_occurrence), key=lambda row: rank.get(row[0], len(rank))):
        if lesson_id in lessons:
            by_occurrence[occ_id].setdefault(lessons[lesson_id][2], lesson_id)
    return _Known(by_key, by_occurrence, used)


def _confirm(store: Store, confirmations: dict[str, list[_Pair]], actor: str) -> None:
    """Add each lesson's new pairs as evidence and count them, in one transaction.

    An inferred lesson gains ``CONFIRM_STEP`` of confidence per pair (up to
    ``MAX_INFERRED_CONFIDENCE``); a lesson a person or agent wrote has its confidence
    recomputed from all its evidence, as ``feedback`` does (``evidence.refresh``). Either
    way its text stays as written: the pair is evidence, not a new fix."""
    from hpcmem.kb.lessons.evidence import refresh

    if not confirmations:
        return
    now = utcnow()
    with store.transaction() as session:
        for lesson_id, pairs in confirmations.items():
            lesson = session.get(Lesson, lesson_id)
            if lesson is None:  # deleted meanwhile
                continue
            before = {"confirmations": lesson.confirmations, "confidence": round(float(lesson.confidence), 4)}
            jobs = ", ".join(f"{p.failed.job_id}->{p.succeeded.job_id}" for p in pairs[:20])
            if lesson.source != "inferred":
                known = {(e.kind, e.occurrence_id) for e in lesson.evidence}
                for pair in pairs:
                    for item in _evidence(pair):
                        if (item["kind"], item.get("occurrence_id")) in known:
                            continue  # `record --job` made the failure evidence already
                        lesson.evidence.append(LessonEvidence(
                            kind=item["kind"], occurrence_id=item.get("occurrence_id"), job_id=item.get("job_id"),
                            actor=actor, note=clean_text(item.get("note"), 500), created_at=now))
                session.flush()
                refresh(session, lesson, now)
                after = {"confirmations": lesson.confirmations, "confidence": round(float(lesson.confidence), 4)}
                audit(session, actor, "confirm", lesson_id, before, after, reason=f"resubmission pairs {jobs}")
                continue
            confidence = max(float(lesson.confidence),
                             min(MAX_INFERRED_CONFIDENCE, float(lesson.confidence) + CONFIRM_STEP * len(pairs)))
            session.execute(
                update(Lesson).where(Lesson.id == lesson_id).values(
                    confirmations=Lesson.confirmations + len(pairs), confidence=confidence,
                    last_confirmed_at=now, updated_at=now)
            )
            rows = [{"lesson_id": lesson_id, "kind": item["kind"], "occurrence_id": item.get("occurrence_id"),
                     "job_id": item.get("job_id"), "actor": actor, "note": clean_text(item.get("note"), 500),
                     "created_at": now}
                    for pair in pairs for item in _evidence(pair)]
            session.execute(LessonEvidence.__table__.insert(), rows)
            after = {"confirmations": before["confirmations"] + len(pairs), "confidence": round(confidence, 4)}
            audit(session, actor, "confirm", lesson_id, before, after, reason=f"resubmission pairs {jobs}")


def _watermark(store: Store) -> dict[str, Any] | None:
    with store.session() as session:
        value = session.scalar(select(StoreMeta.value).where(StoreMeta.key == WATERMARK_KEY))
    try:
        return json.loads(value) if value else None
    except ValueError:
        return None  # unreadable: learn everything once more


def _save_watermark(store: Store, change_seq: int, window_hours: float) -> None:
    value = json.dumps({"change_seq": change_seq, "window_hours": window_hours})
    with store.transaction() as session:
        session.merge(StoreMeta(key=WATERMARK_KEY, value=value))


def learn_from_history(store: Store, *, window_hours: float = DEFAULT_WINDOW_HOURS,
                       actor: str = "hpcmem-learn", full: bool = False) -> LearnSummary:
    """Turn failed jobs and their completed resubmissions into inferred lessons.

    After the first run only the jobs written since the last one are considered, with the
    jobs around them they can pair with (see ``_changed_pairs``); the lessons come out as
    a full run would make them. ``full`` (or another window than last time) reads every
    job again.
    """
    started = time.perf_counter()
    summary = LearnSummary()
    window = dt.timedelta(hours=window_hours)
    with store.engine.connect() as conn:
        upto = current_change_seq(conn)  # before reading: rows written meanwhile come next time
    mark = None if full else _watermark(store)
    if mark is not None and mark.get("window_hours") == window_hours and isinstance(mark.get("change_seq"), int):
        summary.mode = "incremental"
        pairs = _changed_pairs(store, mark["change_seq"], window, summary)
    else:
        pairs = _all_pairs(store, window, summary)
    summary.pairs_found = len(pairs)
    known = _known_lessons(store, pairs)
    by_key, used = known.by_key, known.used
    confirmations: dict[str, list[_Pair]] = defaultdict(list)
    for pair in sorted(pairs, key=lambda p: (p.failed.anchor, p.failed.cluster, p.failed.job_id)):
        if pair.failed.occurrence_id in used:
            summary.skip("already_learned")
            continue
        plan = _plan(pair)
        if plan == "transient":
            summary.transient += 1
            continue
        if isinstance(plan, str):
            summary.skip(plan)
            continue
        used.add(pair.failed.occurrence_id)
        fix = _action_key(plan.actions)
        key = (pair.failed.signature_id, fix)
        same = known.by_occurrence.get(pair.failed.occurrence_id, {}).get(fix) or by_key.get(key)
        if same is not None:  # the lesson of this fix exists (an agent's, a person's, or learned before)
            confirmations[same].append(pair)
            continue
        context, cause, fix = _texts(pair, plan)
        failed = pair.failed
        draft = LessonDraft(
            fingerprint=failed.fingerprint, template=failed.template, category=failed.category or "unknown",
            cause=cause, fix=fix, context=context, source="inferred", author=actor, actions=plan.actions,
            conditions=_conditions(pair, plan.actions), scope=store.scope,
            scope_name=failed.user_name if store.scope == "user" else store.name,
            confidence=SPECIFIC_CONFIDENCE if plan.specific else GENERIC_CONFIDENCE, evidence=_evidence(pair),
            job_context=_job_context(failed),
        )
        lesson = record_lesson(store, draft, actor=actor)
        by_key[key] = lesson["lesson_id"]
        summary.lessons_created += 1
        summary.lesson_ids.append(lesson["lesson_id"])
    _confirm(store, confirmations, actor)
    summary.lessons_confirmed = sum(len(p) for p in confirmations.values())
    summary.lesson_ids.extend(i for i in confirmations if i not in summary.lesson_ids)
    _save_watermark(store, upto, window_hours)
    summary.seconds = round(time.perf_counter() - started, 3)
    return summary
