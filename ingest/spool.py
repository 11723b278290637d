"""The epilog spool: one JSON file per job event, written atomically, drained exactly once.

Layout (one subtree per job user, so a user can drain their own events and nobody
else's)::

    SPOOL/USER/tmp/         events being written (a writer killed after its fsync leaves a
                            complete event here: the next drain recovers it into new/)
    SPOOL/USER/new/         complete events, pending: CLUSTER.JOBID.HOOK.json
    SPOOL/USER/done/        events a drain has ingested (kept as an audit trail)
    SPOOL/USER/quarantine/  malformed events, each beside NAME.reason
    SPOOL/USER/ctx/         TaskEpilog context (loaded modules), read by the job's Epilog
    SPOOL/USER/.drain.lock  flock'ed by whoever drains this user's events

Writing (:func:`write_event`, the epilog's path) imports only the standard library. It
creates the file in ``tmp/`` with O_EXCL, fsyncs it, renames it into ``new/`` and
fsyncs ``new/``: a reader sees a whole event or none. As root it works through
directory file descriptors opened with O_NOFOLLOW and checks who owns the user's
directory, because that directory belongs to the job's user, who could otherwise swap
``tmp/`` for a symlink and make root write elsewhere. Files and directories are owned by
the job's user and, with a site ingest group, group-readable by it; nobody else can
read them.

Draining (:func:`drain_spool`, :func:`drain_user_events`) takes the user directory's
lock, validates each event (a malformed one goes to ``quarantine/`` with the reason),
writes a batch through :class:`hpcmem.kb.jobs.write.Recorder` in ONE transaction that also
records each event id in the store's ``store_meta`` table (key ``spool:<event id>``),
and only then moves the files to ``done/``. A drain killed at any point therefore
leaves each event either not ingested (still in ``new/``) or ingested with its id
recorded: the next drain counts it as a duplicate and only moves it. A store locked by
another writer is retried with exponential backoff; what cannot be written in time
stays in ``new/`` (``deferred``), nothing is lost.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

from hpcmem.kb.errors import HpcmemError

SCHEMA_ID = "hpcmem.spool-event/1"
HOOKS = ("epilog_slurmd", "epilog_slurmctld", "epilog_task")
# Which hook's facts win when several describe one job: the compute node's Epilog can
# read the job's logs; the controller's sees the same exit codes.
HOOK_PRIORITY = {"epilog_slurmd": 0, "epilog_slurmctld": 1, "epilog_task": 2}
SUBDIRS = ("tmp", "new", "done", "quarantine", "ctx")
LOCK_NAME = ".drain.lock"
LOCK_MODE = 0o644  # flock needs a descriptor, not write access: everyone who may drain can open it
LEDGER_PREFIX = "spool:"
MAX_EVENT_BYTES = 256 << 10  # an event holds at most a 4 KiB excerpt; anything huge is not ours
# A temp file this old belongs to a writer that died (an epilog's budget is seconds): a
# complete event in it is recovered into new/, anything else is quarantined. Never deleted.
ORPHAN_TEMP_S = 30.0
STALE_CONTEXT_S = 14 * 86400.0  # TaskEpilog context whose job end never came (longer than any job)
MAX_ISSUES = 50

# Names that are safe as one path component (users, clusters, job ids).
_SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}")
_UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9_.+-]")


class SpoolError(HpcmemError):
    """The spool cannot be written or read (full, read-only, wrong owner ...)."""


# --------------------------------------------------------------------------- names


def safe_component(value: str) -> str:
    """``value`` as one harmless path component (no '/', no leading dot)."""
    text = _UNSAFE_CHARS.sub("_", value or "")[:128]
    return text if _SAFE_NAME.fullmatch(text) else "_" + text[:127]


def event_file_name(cluster: str, job_id: str, hook: str) -> str:
    """One file per job and hook point: a rewrite of the same job's event replaces it."""
    return f"{safe_component(cluster)}.{safe_component(job_id)}.{safe_component(hook)}.json"


def user_dir_name(user: str | None, uid: int | None) -> str:
    if user and _SAFE_NAME.fullmatch(user) and not user.startswith("."):
        return user
    return f"uid-{uid if uid is not None else 'unknown'}"


# --------------------------------------------------------------------------- writing


@dataclass(frozen=True)
class Ownership:
    """Who owns what the writer creates. ``uid``/``gid`` None: whoever writes."""

    uid: int | None = None
    gid: int | None = None
    group_readable: bool = False  # a site ingest group may read (and drain) the events

    @property
    def dir_mode(self) -> int:
        # setgid: subdirectories and files created later keep the ingest group
        return 0o2770 if self.group_readable else 0o700

    @property
    def file_mode(self) -> int:
        return 0o640 if self.group_readable else 0o600


def _open_dir(name: str, parent_fd: int | None, owner: Ownership, *, create: bool, check_owner: bool) -> int:
    """Open (creating if asked) one directory below ``parent_fd`` without following symlinks."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, dir_fd=parent_fd)
    except FileNotFoundError:
        if not create:
            raise
        try:
            os.mkdir(name, owner.dir_mode, dir_fd=parent_fd)
        except FileExistsError:
            pass  # another writer made it first
        fd = os.open(name, flags, dir_fd=parent_fd)
        _own(fd, owner, owner.dir_mode)
    if check_owner:
        info = os.fstat(fd)
        if info.st_uid not in (0, owner.uid):
            os.close(fd)
            raise SpoolError(f"spool directory {name} is owned by uid {info.st_uid}, not by the job's user "
                             f"(uid {owner.uid}); refusing to write there as root")
        wanted_gid = owner.gid if owner.gid is not None else info.st_gid
        if (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) != (owner.uid, wanted_gid, owner.dir_mode):
            _own(fd, owner, owner.dir_mode)  # the site changed its ingest group: follow it
    return fd


def _own(fd: int, owner: Ownership, mode: int) -> None:
    """Hand a new file or directory to its owner; fchmod also undoes the umask."""
    if os.geteuid() == 0 and owner.uid is not None:
        os.fchown(fd, owner.uid, owner.gid if owner.gid is not None else -1)
    elif owner.gid is not None:
        try:
            os.fchown(fd, -1, owner.gid)  # allowed when we belong to the group
        except OSError:
            pass
    os.fchmod(fd, mode)


@dataclass
class UserDir:
    """Open descriptors of one user's spool subtree (close() when done)."""

    fds: dict[str, int]

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()


def _make_spool_root(spool_dir: str, owner: Ownership, as_root: bool) -> None:
    """The layout docs/site-epilog.md sets up: root-owned; with an ingest group, group
    ``root:GROUP 0751`` so that group can list the user directories (others may only pass
    through to their own); without one, 0711."""
    os.makedirs(spool_dir, mode=0o700, exist_ok=True)
    if not as_root:
        return
    if owner.group_readable and owner.gid is not None:
        os.chown(spool_dir, 0, owner.gid)
        os.chmod(spool_dir, 0o751)
    else:
        os.chmod(spool_dir, 0o711)


def open_user_dir(spool_dir: str, user: str, owner: Ownership, *, create: bool = True,
                  subdirs: tuple[str, ...] = SUBDIRS) -> UserDir:
    """Descriptors of SPOOL/USER and the wanted subdirectories, created as needed.

    As root the user directory must belong to root or to ``owner.uid``: it is the job
    user's, and root never writes into a directory someone else could have planted.
    """
    as_root = os.geteuid() == 0
    if create and not os.path.isdir(spool_dir):
        try:
            _make_spool_root(spool_dir, owner, as_root)
        except OSError as exc:
            raise SpoolError(f"cannot create spool {spool_dir}: {exc.strerror}") from None
    try:
        root_fd = os.open(spool_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise SpoolError(f"cannot open spool {spool_dir}: {exc.strerror}") from None
    fds: dict[str, int] = {}
    try:
        fds["user"] = _open_dir(user, root_fd, owner, create=create, check_owner=as_root and owner.uid is not None)
        for sub in subdirs:
            fds[sub] = _open_dir(sub, fds["user"], owner, create=create, check_owner=as_root and owner.uid is not None)
    except OSError as exc:
        UserDir(fds).close()
        if isinstance(exc, SpoolError):
            raise
        raise SpoolError(f"cannot open spool directory {os.path.join(spool_dir, user)}: {exc.strerror}") from None
    finally:
        os.close(root_fd)
    return UserDir(fds)


def encode_event(event: dict[str, Any]) -> bytes:
    return (json.dumps(event, ensure_ascii=False, sort_keys=True, separators=(",", ":")) + "\n").encode("utf-8")


def write_atomic(dirs: UserDir, name: str, data: bytes, owner: Ownership, *, into: str = "new",
                 durable: bool = True) -> None:
    """Write ``data`` as ``into/name``: temp file in tmp/, fsync, rename, fsync the directory."""
    tmp_fd, dst_fd = dirs.fds["tmp"], dirs.fds[into]
    tmp_name = f".{name}.{os.getpid()}.{os.urandom(4).hex()}"
    fd = os.open(tmp_name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 owner.file_mode, dir_fd=tmp_fd)
    try:
        try:
            _own(fd, owner, owner.file_mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp_name, name, src_dir_fd=tmp_fd, dst_dir_fd=dst_fd)
    except BaseException:
        try:
            os.unlink(tmp_name, dir_fd=tmp_fd)
        except OSError:
            pass
        raise
    if durable:
        os.fsync(dst_fd)  # the rename itself survives a crash only once its directory is synced


def write_event(spool_dir: str, event: dict[str, Any], owner: Ownership | None = None) -> str:
    """Spool one event; returns the path of the file in ``new/``. Raises SpoolError."""
    owner = owner or Ownership()
    user = user_dir_name(event.get("user"), event.get("uid"))
    name = event_file_name(event["cluster"], event["job_id"], event["hook"])
    dirs = open_user_dir(spool_dir, user, owner)
    try:
        write_atomic(dirs, name, encode_event(event), owner)
    except OSError as exc:
        raise SpoolError(f"cannot write event {name} into {os.path.join(spool_dir, user, 'new')}: "
                         f"{exc.strerror or exc}") from None
    finally:
        dirs.close()
    return os.path.join(spool_dir, user, "new", name)


# --------------------------------------------------------------------------- validating


_HEX_ID = re.compile(r"[0-9a-f]{16,64}")
_JOB_ID = re.compile(r"[0-9]+(?:[_+][0-9]+)?")
_STRINGS = ("missing_output_dir", "unwritable_output_dir", "job_name", "account", "partition", "qos", "reason", "nodes", "work_dir", "command", "host",
            "stdout", "stderr", "log_path", "log_excerpt", "failure_state")
_INTS = ("uid", "gid", "exit_code", "exit_signal", "derived_exit_code", "derived_exit_signal",
         "req_cpus", "req_nodes", "req_time_s", "elapsed_s", "restarts")
_TIMES = ("submit_time", "start_time", "end_time", "written_at")
STATES = frozenset({"COMPLETED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY", "CANCELLED", "NODE_FAIL",
                    "PREEMPTED", "BOOT_FAIL", "DEADLINE"})


def validate_event(event: Any) -> dict[str, Any]:
    """Check an event's shape (schemas/spool-event.schema.json); raises SpoolError(reason)."""
    if not isinstance(event, dict):
        raise SpoolError("not a JSON object")
    if event.get("schema") != SCHEMA_ID:
        raise SpoolError(f"schema is {event.get('schema')!r}, expected {SCHEMA_ID!r}")
    for key, pattern in (("event_id", _HEX_ID), ("job_id", _JOB_ID)):
        if not isinstance(event.get(key), str) or not pattern.fullmatch(event[key]):
            raise SpoolError(f"{key} missing or malformed: {event.get(key)!r}")
    if event.get("hook") not in HOOKS:
        raise SpoolError(f"unknown hook {event.get('hook')!r}")
    for key in ("cluster", "user"):
        if not isinstance(event.get(key), str) or not event[key] or len(event[key]) > 64:
            raise SpoolError(f"{key} missing or malformed")
    if event.get("state") not in STATES:
        raise SpoolError(f"unknown state {event.get('state')!r}")
    if not isinstance(event.get("failed"), bool):
        raise SpoolError("failed must be true or false")
    if event["failed"] and event.get("failure_state") not in STATES:
        raise SpoolError("a failed job needs a failure_state")
    for key in _STRINGS:
        if event.get(key) is not None and not isinstance(event[key], str):
            raise SpoolError(f"{key} must be a string")
    if len(event.get("log_excerpt") or "") > 16384:
        raise SpoolError("log_excerpt longer than 16 KiB")
    for key in _INTS:
        value = event.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise SpoolError(f"{key} must be an integer")
    if event.get("req_mem_mb") is not None and not isinstance(event["req_mem_mb"], (int, float)):
        raise SpoolError("req_mem_mb must be a number")
    for key in _TIMES:
        if event.get(key) is not None:
            _parse_time(event[key], key)
    modules = event.get("modules")
    if modules is not None and (not isinstance(modules, list) or len(modules) > 256
                                or not all(isinstance(m, str) and 0 < len(m) <= 256 for m in modules)):
        raise SpoolError("modules must be a list of at most 256 module names")
    return event


def _parse_time(value: Any, key: str):
    from datetime import datetime, timezone

    if not isinstance(value, str):
        raise SpoolError(f"{key} must be an ISO 8601 string")
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise SpoolError(f"{key} is not an ISO 8601 time: {value[:40]!r}") from None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


# --------------------------------------------------------------------------- rows


def event_rows(event: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The job row and (for a failure) the occurrence row the Recorder takes, shaped
    like ``hpcmem.ingest.sacct_ingest.job_row``/``failure_row``."""
    times = {key: _parse_time(event[key], key) if event.get(key) else None
             for key in ("submit_time", "start_time", "end_time")}
    state = event["state"]
    failure_state = event.get("failure_state") if event["failed"] else None
    job = {
        "cluster": event["cluster"], "job_id": event["job_id"], "user_name": event["user"],
        "account": event.get("account"), "job_name": event.get("job_name"), "partition": event.get("partition"),
        "state": failure_state or state, "failed": bool(failure_state), "req_mem_mb": event.get("req_mem_mb"),
        "req_cpus": event.get("req_cpus"), "req_gres": None, "req_time_s": event.get("req_time_s"),
        "constraints": None, "max_rss_mb": None, "elapsed_s": event.get("elapsed_s"),
        "work_dir": event.get("work_dir"), "submit_line": None,
        "submit_time": times["submit_time"], "end_time": times["end_time"],
    }
    if not failure_state:
        return job, None
    # A job whose batch script hid a failed step is COMPLETED with a derived exit code.
    derived = state == "COMPLETED"
    failure = {
        "cluster": event["cluster"], "job_id": event["job_id"], "job_name": event.get("job_name"),
        "user_name": event["user"], "account": event.get("account"), "partition": event.get("partition"),
        "qos": event.get("qos"), "state": failure_state,
        "exit_code": event.get("derived_exit_code") if derived else event.get("exit_code"),
        "exit_signal": event.get("derived_exit_signal") if derived else event.get("exit_signal"),
        "failed_step": None, "req_mem_mb": event.get("req_mem_mb"), "req_cpus": event.get("req_cpus"),
        "req_nodes": event.get("req_nodes"), "req_gres": None, "req_time_s": event.get("req_time_s"),
        "constraints": None, "max_rss_mb": None, "elapsed_s": event.get("elapsed_s"),
        "nodes": event.get("nodes"), "work_dir": event.get("work_dir"), "submit_line": None,
        "modules": event.get("modules") or None, "source": "epilog", **times,
        "job_context": _job_context(event),
    }
    excerpt = event.get("log_excerpt")
    if excerpt:
        failure.update(message=excerpt, log_excerpt=excerpt, log_path=event.get("log_path"))
    else:
        message = _message(event, failure_state, times["end_time"], times["start_time"])
        # The directory the node found missing is what sacct cannot know: kept as the
        # excerpt, so a later sacct merge keeps it too (the recorder prefers excerpts).
        detail = event.get("missing_output_dir") or event.get("unwritable_output_dir")
        failure.update(message=message, log_excerpt=message if detail else None,
                       log_path=None)
    return job, failure


def _message(event: dict[str, Any], failure_state: str, end, start) -> str:
    """The line Slurm would have printed (same text, so the same signature, as sacct's)."""
    from types import SimpleNamespace

    from hpcmem.ingest.failure_message import failure_message

    job = SimpleNamespace(
        job_id=event["job_id"], state=event["state"], failure_state=failure_state, failed_step=None,
        exit_code=event.get("exit_code"), exit_signal=event.get("exit_signal"),
        derived_exit_code=event.get("derived_exit_code"), derived_exit_signal=event.get("derived_exit_signal"),
        nodelist=event.get("nodes"), end=end, start=start, reason=event.get("reason"),
        missing_output_dir=event.get("missing_output_dir"),
        unwritable_output_dir=event.get("unwritable_output_dir"),
    )
    return failure_message(job)


def merge_rows(rows: list[tuple[dict[str, Any], dict[str, Any] | None]]):
    """Fold several events' rows for ONE job into one pair: earlier rows win, later rows
    only fill what they left empty (the Recorder keeps just one row per job per batch)."""
    job: dict[str, Any] = {}
    failure: dict[str, Any] | None = None
    for job_row, failure_row in rows:
        for key, value in job_row.items():
            if job.get(key) is None:
                job[key] = value
        if failure_row is not None:
            failure = dict(failure_row) if failure is None else failure
            for key, value in failure_row.items():
                if failure.get(key) is None:
                    failure[key] = value
    if failure is not None:
        job["failed"], job["state"] = True, failure["state"]
    return job, failure


# --------------------------------------------------------------------------- draining


@dataclass
class DrainSummary:
    source: str = "spool"
    ingested: int = 0  # events newly written to the store
    duplicates: int = 0  # events the store already had (same event id): only moved aside
    quarantined: int = 0  # malformed events moved to quarantine/ with a .reason file
    deferred: int = 0  # valid events left pending (store locked too long, budget spent)
    unreadable: int = 0  # events this user may not read (left for the site drain)
    busy: int = 0  # user directories another drain held locked
    jobs: int = 0
    failures: int = 0
    occurrences_new: int = 0
    occurrences_updated: int = 0
    signatures_new: int = 0
    redactions: int = 0
    retries: int = 0  # store writes retried because another writer held the lock
    stale_removed: int = 0  # context files no job end picked up
    recovered: int = 0  # complete events a killed writer left in tmp/
    users: int = 0
    issues: list[dict[str, str]] = field(default_factory=list)
    seconds: float = 0.0
    learned: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def issue(self, path: str, reason: str) -> None:
        if len(self.issues) < MAX_ISSUES:
            self.issues.append({"path": path, "reason": reason})


def has_pending(spool_dir: str, user: str) -> bool:
    """True when SPOOL/USER/new holds an event: one directory scan, nothing else.

    No spool or no directory for this user: False. A directory this account may not read
    is a SpoolError: its events would otherwise wait unseen while the drain reports success.
    """
    path = os.path.join(spool_dir, user, "new")
    try:
        with os.scandir(path) as entries:
            return any(entry.name.endswith(".json") for entry in entries)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except PermissionError:
        raise SpoolError(f"cannot read {path}: permission denied (the draining account needs to be the user "
                         "or in the spool's group)") from None
    except OSError as exc:
        raise SpoolError(f"cannot read {path}: {exc.strerror}") from None


def drain_user_events(store, spool_dir: str, user: str, budget_s: float) -> DrainSummary:
    """Drain one user's pending events into ``store`` within ``budget_s`` seconds.

    Meant for the start of ``hpcmem recall``: when nothing is pending it costs one
    ``scandir`` (about 40 µs) and imports nothing. The budget is checked before each
    batch of 32 events and bounds every wait for a lock; a batch already being written
    finishes. Whatever does not fit (or finds the store or the user's spool locked)
    stays pending for the next call.
    """
    if not has_pending(spool_dir, user):
        return DrainSummary(source=os.path.join(spool_dir, user))
    # Small batches: the budget is checked between batches, and a batch in flight finishes.
    return drain_spool(store, [spool_dir], users=[user], budget_s=budget_s, batch_size=32,
                       lock_wait_s=min(1.0, max(0.01, budget_s / 4)))


# A recall of one job waits this long for that job's pending event: the answer depends on it.
JOB_DRAIN_BUDGET_SECONDS = 10.0


def drain_before_recall(stack, config, job_id: str | None = None) -> list[str]:
    """Store the calling user's pending epilog events, so a recall (CLI, MCP server or a
    Python caller) knows the job that just ended. Returns warnings; never raises.

    Nothing pending costs one directory scan. The short budget
    (``recall.drain_budget_seconds``) keeps a text recall quick; a recall by job id gets
    a longer one, since opening a new store alone can take longer than that.
    """
    import pwd

    spool_dir = config.get("spool.dir")
    user = pwd.getpwuid(os.getuid()).pw_name
    try:
        if not spool_dir or not has_pending(spool_dir, user):
            return []
        budget = float(config.get("recall.drain_budget_seconds"))
        if job_id is not None:
            budget = max(budget, JOB_DRAIN_BUDGET_SECONDS)
        drain_user_events(stack.user, spool_dir, user, budget)
    except Exception as exc:  # noqa: BLE001 - the events stay in the spool for the next drain
        return [f"pending epilog events not stored yet: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"]
    return []


def drain_spool(store, spool_dirs: list[str] | str, *, users: list[str] | None = None,
                budget_s: float | None = None, retry_for_s: float = 60.0, batch_size: int = 256,
                lock_wait_s: float = 1.0) -> DrainSummary:
    """Ingest every pending event of ``spool_dirs`` (all users, or ``users``) into ``store``.

    ``budget_s`` bounds the whole call (None: no bound); ``retry_for_s`` how long a
    locked store is retried before the batch is deferred; ``lock_wait_s`` how long each
    attempt waits for the store's lock before backing off.
    """
    started = time.monotonic()
    deadline = started + budget_s if budget_s is not None else None
    dirs = [spool_dirs] if isinstance(spool_dirs, (str, os.PathLike)) else list(spool_dirs)
    summary = DrainSummary(source=", ".join(str(d) for d in dirs))
    opened = False
    for spool_dir in dirs:
        for user in (users if users is not None else _user_dirs(spool_dir)):
            _recover_temp(os.path.join(spool_dir, user), summary)
            if not has_pending(spool_dir, user):
                _tidy(os.path.join(spool_dir, user), summary)
                continue
            if not opened:
                store.open()
                opened = True
            summary.users += 1
            drained = _drain_user(store, os.path.join(spool_dir, user), user, summary, deadline=deadline,
                                  retry_for_s=retry_for_s, batch_size=batch_size, lock_wait_s=lock_wait_s)
            if not drained:
                break  # out of time, or the store stayed locked: the rest waits as well
        else:
            continue
        break
    summary.seconds = round(time.monotonic() - started, 3)
    return summary


def _user_dirs(spool_dir: str) -> list[str]:
    """The user directories of a spool. A spool that cannot be listed is an error: a drain
    that silently finds nothing would report success while events wait."""
    try:
        with os.scandir(spool_dir) as entries:
            return sorted(e.name for e in entries if not e.name.startswith(".") and e.is_dir(follow_symlinks=False))
    except FileNotFoundError:
        return []  # no job has failed here yet
    except PermissionError:
        raise SpoolError(f"cannot list spool {spool_dir}: permission denied (the draining account needs read "
                         "and search permission on it)", hint="docs/site-epilog.md gives the spool's group and mode") from None
    except OSError as exc:
        raise SpoolError(f"cannot list spool {spool_dir}: {exc.strerror}") from None


class _UserLock:
    """flock on SPOOL/USER/.drain.lock: one drain per user directory at a time.

    flock needs only a descriptor, not write access, so the file is opened read-only and
    kept readable by all who may enter the directory (0644): whoever created it (root,
    the ingest account or the user), the directory's owner and the ingest group can all
    take the lock, and nobody is locked out. A plain flock, not the filelock package: its
    soft-lock fallback and lock-file removal are not wanted between root and users.
    """

    def __init__(self, user_path: str) -> None:
        self.path = os.path.join(user_path, LOCK_NAME)
        self.fd: int | None = None

    def acquire(self, timeout: float) -> bool:
        import fcntl

        fd = self._open()
        info = os.fstat(fd)
        if os.geteuid() == 0:
            parent = os.stat(os.path.dirname(self.path))
            if (info.st_uid, info.st_gid) != (parent.st_uid, parent.st_gid):
                os.fchown(fd, parent.st_uid, parent.st_gid)
        if (info.st_uid == os.geteuid() or os.geteuid() == 0) and info.st_mode & 0o777 != LOCK_MODE:
            os.fchmod(fd, LOCK_MODE)  # also repairs the 0660 files of earlier versions
        end = time.monotonic() + max(0.0, timeout)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self.fd = fd
                return True
            except BlockingIOError:
                if time.monotonic() >= end:
                    os.close(fd)
                    return False
                time.sleep(0.02)

    def _open(self) -> int:
        flags = os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            return os.open(self.path, flags, LOCK_MODE)
        except PermissionError:
            # A lock file an earlier version made 0660 for another account: the owner of
            # the directory may replace it (the account that made it repairs it to 0644).
            if os.stat(os.path.dirname(self.path)).st_uid != os.geteuid():
                raise
            os.unlink(self.path)
            return os.open(self.path, flags | os.O_EXCL, LOCK_MODE)

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing drops the flock
            self.fd = None


def _pending(new_dir: str) -> list[str]:
    with os.scandir(new_dir) as entries:
        found = [(e.stat(follow_symlinks=False).st_mtime, e.name) for e in entries
                 if e.name.endswith(".json") and not e.name.startswith(".")]
    return [name for _mtime, name in sorted(found)]


def _remaining(deadline: float | None) -> float:
    return float("inf") if deadline is None else deadline - time.monotonic()


def _drain_user(store, user_path: str, user: str, summary: DrainSummary, *, deadline: float | None,
                retry_for_s: float, batch_size: int, lock_wait_s: float) -> bool:
    """Drain one user directory; False when time ran out or the store stayed locked."""
    lock = _UserLock(user_path)
    try:
        got = lock.acquire(min(_remaining(deadline), 30.0))
    except OSError as exc:
        summary.issue(user_path, f"cannot lock: {exc.strerror}")
        summary.busy += 1
        return True
    if not got:
        summary.busy += 1
        summary.issue(user_path, "another drain holds this user's spool; left for it")
        return True
    try:
        _tidy(user_path, summary)
        names = _pending(os.path.join(user_path, "new"))
        for start in range(0, len(names), batch_size):
            if _remaining(deadline) <= 0:
                summary.deferred += len(names) - start
                return False
            if not _drain_batch(store, user_path, user, names[start:start + batch_size], summary,
                                deadline=deadline, retry_for_s=retry_for_s, lock_wait_s=lock_wait_s):
                summary.deferred += max(0, len(names) - start - batch_size)  # batches not tried
                return False
        return True
    finally:
        lock.release()


def _read_event(path: str) -> dict[str, Any]:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SpoolError("not a regular file")
        if info.st_size > MAX_EVENT_BYTES:
            raise SpoolError(f"{info.st_size} bytes, more than an event can be ({MAX_EVENT_BYTES})")
        with os.fdopen(os.dup(fd), "rb") as fh:
            raw = fh.read(MAX_EVENT_BYTES + 1)
    finally:
        os.close(fd)
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise SpoolError("not UTF-8") from None
    except json.JSONDecodeError as exc:
        raise SpoolError(f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None


def _drain_batch(store, user_path: str, user: str, names: list[str], summary: DrainSummary, *,
                 deadline: float | None, retry_for_s: float, lock_wait_s: float) -> bool:
    new_dir = os.path.join(user_path, "new")
    events: list[tuple[str, dict[str, Any]]] = []
    for name in names:
        path = os.path.join(new_dir, name)
        try:
            event = validate_event(_read_event(path))
            if user_dir_name(event["user"], event.get("uid")) != user:
                raise SpoolError(f"event of user {event['user']!r} in the spool of {user!r}")
            events.append((name, event))
        except FileNotFoundError:
            continue  # replaced by a newer event of the same job between listing and reading
        except PermissionError:
            summary.unreadable += 1
            summary.issue(path, "permission denied: left for a drain that may read it")
        except (SpoolError, OSError) as exc:
            _quarantine(user_path, name, str(exc), summary)
    if not events:
        return True
    if not _write_with_retry(store, events, summary, deadline=deadline, retry_for_s=retry_for_s,
                             lock_wait_s=lock_wait_s):
        summary.deferred += len(events)
        return False
    done_dir = os.path.join(user_path, "done")
    for name, _event in events:
        try:
            os.replace(os.path.join(new_dir, name), os.path.join(done_dir, name))
        except FileNotFoundError:
            pass
    _fsync_dir(done_dir)
    _fsync_dir(new_dir)
    return True


def _write_with_retry(store, events, summary: DrainSummary, *, deadline: float | None,
                      retry_for_s: float, lock_wait_s: float) -> bool:
    """Write one batch in one transaction; back off and retry while another writer holds
    the store. False (nothing written) when the retry window or the budget ran out."""
    give_up = min(time.monotonic() + retry_for_s, deadline if deadline is not None else float("inf"))
    delay = 0.05
    while True:
        wait = max(0.01, min(lock_wait_s, give_up - time.monotonic()))
        try:
            _write_batch(store, events, summary, wait)
            return True
        except Exception as exc:  # noqa: BLE001 - only lock errors are retried, see below
            if not _is_lock_error(exc):
                raise
            if time.monotonic() + delay >= give_up:
                summary.issue(store.display_url, f"store locked by another writer; retried {summary.retries} "
                                                  "times, events left pending")
                return False
            summary.retries += 1
            time.sleep(delay)
            delay = min(delay * 2, 2.0)


def _is_lock_error(exc: BaseException) -> bool:
    from sqlalchemy.exc import OperationalError

    if not isinstance(exc, OperationalError):
        return False
    text = str(exc.orig).lower() if exc.orig is not None else str(exc).lower()
    return any(word in text for word in ("locked", "busy", "lock timeout", "could not obtain lock"))


def _write_batch(store, events, summary: DrainSummary, lock_wait_s: float) -> None:
    from sqlalchemy import select

    from hpcmem.kb.store.models import StoreMeta
    from hpcmem.kb.jobs.write import Recorder

    ledgered = _LedgeredStore(store, lock_wait_s)
    keys = {f"{LEDGER_PREFIX}{event['event_id']}" for _name, event in events}
    with ledgered.transaction() as session:  # the same short lock wait as the write
        known = set(session.scalars(select(StoreMeta.key).where(StoreMeta.key.in_(sorted(keys)))))
        fresh, seen = [], set(known)
        for name, event in events:
            key = f"{LEDGER_PREFIX}{event['event_id']}"
            if key not in seen:
                seen.add(key)
                fresh.append((name, event))
        by_job: dict[tuple[str, str], list] = {}
        for _name, event in sorted(fresh, key=lambda item: HOOK_PRIORITY[item[1]["hook"]]):
            by_job.setdefault((event["cluster"], event["job_id"]), []).append(event_rows(event))
        merged = {key: merge_rows(rows) for key, rows in by_job.items()}
    ledgered.ledger_keys = sorted(seen - known)
    recorder = Recorder(ledgered, batch_size=1 << 30)
    for job, failure in merged.values():
        recorder.add(job, failure)
    stats = recorder.close()  # one transaction: the rows and the ledger together
    summary.ingested += len(fresh)
    summary.duplicates += len(events) - len(fresh)
    stats.add_to(summary)


class _LedgeredStore:
    """The store as the Recorder sees it during a drain: every transaction also records
    the ingested event ids, and waits at most ``lock_wait_s`` for another writer's lock
    (SQLite busy_timeout / PostgreSQL lock_timeout) so that our backoff decides."""

    def __init__(self, store, lock_wait_s: float) -> None:
        self.store = store
        self.dialect = store.dialect
        self.wait_ms = max(1, int(lock_wait_s * 1000))
        self.ledger_keys: list[str] = []

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        from sqlalchemy import insert

        from hpcmem.kb.store.models import StoreMeta
        from hpcmem.kb.store.database import SQLITE_BUSY_TIMEOUT_MS
        from hpcmem.kb.store.column_types import utcnow

        with self.store.session() as session, session.begin():
            conn = session.connection()
            sqlite = self.dialect == "sqlite"
            conn.exec_driver_sql(f"PRAGMA busy_timeout = {self.wait_ms}" if sqlite
                                 else f"SET LOCAL lock_timeout = '{self.wait_ms}ms'")
            try:
                yield session
                if self.ledger_keys:
                    now = utcnow().isoformat()
                    conn.execute(insert(StoreMeta.__table__), [{"key": k, "value": now} for k in self.ledger_keys])
            finally:
                if sqlite:  # the pooled connection goes back to the store's usual patience
                    try:
                        conn.exec_driver_sql(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
                    except Exception:  # noqa: BLE001 - a broken connection is discarded anyway
                        pass


def _quarantine(user_path: str, name: str, reason: str, summary: DrainSummary, *, source: str = "new") -> None:
    """Move a malformed event aside; its reason goes next to it (written first, so a
    drain killed in between only quarantines it again)."""
    qdir = os.path.join(user_path, "quarantine")
    reason_path = os.path.join(qdir, name + ".reason")
    text = f"{time.strftime('%Y-%m-%dT%H:%M:%S%z')} {reason}\n"
    try:
        tmp = f"{reason_path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, reason_path)
        os.replace(os.path.join(user_path, source, name), os.path.join(qdir, name))
        _fsync_dir(qdir)
    except FileNotFoundError:
        return
    except OSError as exc:
        summary.issue(os.path.join(user_path, source, name), f"malformed ({reason}) and cannot be quarantined: "
                                                             f"{exc.strerror}")
        return
    summary.quarantined += 1
    summary.issue(os.path.join(qdir, name), reason)


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _tidy(user_path: str, summary: DrainSummary) -> None:
    """Remove TaskEpilog context that no job end ever picked up."""
    now = time.time()
    try:
        entries = list(os.scandir(os.path.join(user_path, "ctx")))
    except OSError:
        return
    for entry in entries:
        try:
            if now - entry.stat(follow_symlinks=False).st_mtime > STALE_CONTEXT_S:
                os.unlink(entry.path)
                summary.stale_removed += 1
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.EACCES, errno.EPERM):
                raise


def _recover_temp(user_path: str, summary: DrainSummary) -> None:
    """Events a killed writer left in tmp/: a complete one goes on to new/ (or, when a newer
    version of it already arrived, to quarantine/), a partial one to quarantine/."""
    tmp_dir = os.path.join(user_path, "tmp")
    try:
        entries = [e for e in os.scandir(tmp_dir) if e.is_file(follow_symlinks=False)]
    except OSError:
        return
    now = time.time()
    for entry in entries:
        try:
            if now - entry.stat(follow_symlinks=False).st_mtime <= ORPHAN_TEMP_S:
                continue  # its writer may still be at work
            with open(entry.path, "rb") as fh:
                data = fh.read(MAX_EVENT_BYTES + 1)
        except OSError:
            continue
        target = _event_name_of_temp(entry.name)
        try:
            if len(data) > MAX_EVENT_BYTES:
                raise SpoolError("larger than any event")
            validate_event(json.loads(data))
        except (ValueError, SpoolError) as exc:
            _quarantine(user_path, entry.name, f"left in tmp/ by a writer that died, incomplete ({exc})", summary,
                        source="tmp")
            continue
        if target is None or any(os.path.exists(os.path.join(user_path, d, target)) for d in ("new", "done")):
            _quarantine(user_path, entry.name, "left in tmp/ by a writer that died; a later version of this "
                                               "event was spooled", summary, source="tmp")
            continue
        try:
            os.rename(entry.path, os.path.join(user_path, "new", target))
        except OSError as exc:
            summary.issue(entry.path, f"complete event left by a writer that died, cannot be recovered: "
                                      f"{exc.strerror}")
            continue
        _fsync_dir(os.path.join(user_path, "new"))
        summary.recovered += 1


def _event_name_of_temp(name: str) -> str | None:
    """``.hpcmem.4.epilog_slurmd.json.<pid>.<hex>`` (write_atomic's temp name) -> the event's name."""
    parts = name.split(".")
    if not name.startswith(".") or len(parts) < 4 or not parts[-2].isdigit():
        return None
    target = ".".join(parts[1:-2])
    return target if target.endswith(".json") else None


def _job_context(event: dict[str, Any]) -> dict[str, Any] | None:
    """What the epilog knows of the job beyond the occurrence's columns (kb/jobs/context.FIELDS):
    the program it ran (scontrol's Command, the batch script)."""
    command = event.get("command")
    if not isinstance(command, str) or not command.strip():
        return None
    return {"command": command.strip().split()[0].rsplit("/", 1)[-1][:512]}
