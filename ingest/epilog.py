"""`hpcmem epilog`: record a job's failure the moment it ends, from a Slurm epilog.

Slurm runs epilogs on every job end, and drains the node when one hangs or exits
non-zero (see data/samples/epilog/epilog-failure-drains-node.txt). So this path:

- always exits 0, and reports its own problems on stderr and to syslog;
- gives up cleanly after a time budget (``epilog.budget_seconds``, default 2 s): the
  work runs in a worker thread and the process leaves when the budget is spent;
- imports only the standard library (no SQLAlchemy, typer, rich, no model, no remote
  database): it writes one event file into the spool (``hpcmem.ingest.spool``) and
  ``hpcmem ingest spool`` or the user's next ``hpcmem recall`` stores it later.

Run it as ``python -I -m hpcmem.ingest.epilog`` from the site's wrapper script
(docs/site-epilog.md). ``hpcmem epilog`` runs the same code, after the CLI's imports.

What each hook point gives (Slurm 22.05, captured in data/samples/epilog/):

- ``Epilog`` (slurmd, as root, on every node of the job): no PATH, no job state, no job
  name; ``SLURM_JOB_EXIT_CODE2`` ("3:0") and ``SLURM_JOB_DERIVED_EC`` (a wait status:
  768 = exit 3 of some step). A time limit or a cancellation leaves both at 0, so
  ``scontrol show job -o`` is asked: its ``Reason`` (TimeLimit, OutOfMemory,
  NonZeroExitCode) and ``ExitCode`` (0:15 when signalled) tell the rest, and its
  ``StdOut``/``StdErr`` are the expanded log paths (the environment has ``%x-%j``).
- ``EpilogSlurmctld`` (as SlurmUser on the controller): the same exit codes plus the
  job name; scontrol works only when ``SLURM_CONF`` is set for it.
- ``TaskEpilog`` (as the user, after each task): the task's environment, including
  ``LOADEDMODULES`` for srun steps (the batch step sees its submission environment).
  It writes the modules as context into the user's spool; the job's Epilog adds them
  to its event.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from hpcmem.ingest.spool import (
    SCHEMA_ID,
    Ownership,
    SpoolError,
    event_file_name,
    open_user_dir,
    user_dir_name,
    write_atomic,
    write_event,
)

DEFAULT_SPOOL = "/var/spool/hpcmem"
DEFAULT_BUDGET_S = 2.0
# Slurm gives epilogs no PATH; these are where distributions and sites put scontrol.
SCONTROL_DIRS = ("/usr/bin", "/usr/local/bin", "/opt/slurm/bin", "/usr/local/slurm/bin", "/bin")
CONTEXTS = {"epilog_slurmd", "epilog_slurmctld", "epilog_task"}
MAX_CONTEXT_BYTES = 64 << 10
MAX_NOTES = 10

# Final states scontrol may already show (during the epilog it mostly says COMPLETING).
_FAILURE_STATES = {"FAILED", "TIMEOUT", "OUT_OF_MEMORY", "CANCELLED", "NODE_FAIL", "PREEMPTED",
                   "BOOT_FAIL", "DEADLINE"}
_REASON_STATES = {"TimeLimit": "TIMEOUT", "OutOfMemory": "OUT_OF_MEMORY", "NodeDown": "NODE_FAIL",
                  "NodeFail": "NODE_FAIL", "Preempted": "PREEMPTED", "DeadLine": "DEADLINE"}
_OOM_SIGNAL = 125  # Slurm's pseudo-signal for a cgroup OOM kill ("0:125")
_SCONTROL_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_:/]*=")
_ENV_LINE = re.compile(r"[^\s=#][^\s=]*=")  # names may hold % (BASH_FUNC_module%%)
_MEM = re.compile(r"(?:^|,)mem=([0-9.]+)([KMGTP]?)")
_UNITS_MB = {"": 1.0, "K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0**2, "P": 1024.0**3}


class _ArgumentError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse would exit 2 on a bad option; an epilog must not."""

    def error(self, message: str):  # noqa: D102
        raise _ArgumentError(message)


def build_parser(prog: str = "hpcmem epilog") -> argparse.ArgumentParser:
    parser = _Parser(prog=prog, description="Record a failed Slurm job into the hpcmem spool (always exits 0).")
    parser.add_argument("--spool", help="spool directory (default: HPCMEM_SPOOL, spool.dir in the site config, "
                                        f"{DEFAULT_SPOOL})")
    parser.add_argument("--budget", type=float, help="seconds before giving up (default: HPCMEM_EPILOG_BUDGET, "
                                                     "epilog.budget_seconds, 2)")
    parser.add_argument("--group", help="site ingest group that may read and drain the events")
    parser.add_argument("--hook", choices=sorted(CONTEXTS), help="hook point (default: SLURM_SCRIPT_CONTEXT)")
    parser.add_argument("--completed", action="store_true",
                        help="also spool jobs that completed (for learning fixes on sites without accounting)")
    parser.add_argument("--no-scontrol", action="store_true", help="never run scontrol (time limits and "
                                                                   "cancellations then go unnoticed)")
    parser.add_argument("--scontrol", help="path of scontrol (default: searched in PATH and " +
                                           ", ".join(SCONTROL_DIRS) + ")")
    parser.add_argument("--env-file", help="read the job environment from a recorded file instead (replay)")
    parser.add_argument("--scontrol-file", help="read `scontrol show job -o` output from a file (replay)")
    parser.add_argument("--dry-run", action="store_true", help="print the event as JSON instead of spooling it")
    parser.add_argument("--verbose", action="store_true", help="print what was spooled")
    return parser


# --------------------------------------------------------------------------- parsing


def parse_env_file(text: str) -> dict[str, str]:
    """A recorded environment (``env | sort``): ``#`` lines are comments, and lines that
    do not start a NAME= continue the previous value (exported shell functions)."""
    env: dict[str, str] = {}
    last: str | None = None
    for line in text.splitlines():
        if line.startswith("#") and last is None:
            continue
        if _ENV_LINE.match(line):
            key, _, value = line.partition("=")
            env[key] = value
            last = key
        elif last is not None:
            env[last] += "\n" + line
    return env


def parse_scontrol_job(text: str) -> dict[str, str]:
    """``scontrol show job -o`` as a dict. A value runs until the next ``Key=`` token, so
    one containing spaces (a Command with arguments, a WorkDir) stays whole."""
    line = next((ln for ln in text.splitlines() if ln.startswith("JobId=")), "")
    info: dict[str, str] = {}
    key = None
    for token in line.split(" "):
        match = _SCONTROL_KEY.match(token)
        if match and (key is None or token.partition("=")[0] not in info):
            key, _, value = token.partition("=")
            info[key] = value
        elif key is not None and token:
            info[key] += " " + token
    return {k: v.strip() for k, v in info.items()}


def _pair(text: str | None) -> tuple[int, int] | None:
    """'3:0' -> (3, 0)."""
    if not text or ":" not in text:
        return None
    code, _, sig = text.partition(":")
    try:
        return int(code), int(sig)
    except ValueError:
        return None


def _wait_status(text: str | None) -> tuple[int, int] | None:
    """A raw wait status ('768') -> (exit code 3, signal 0)."""
    try:
        raw = int(text) if text not in (None, "") else None
    except ValueError:
        return None
    return None if raw is None else ((raw >> 8) & 0xFF, raw & 0x7F)


@dataclass(frozen=True)
class Outcome:
    """How the job ended, in sacct's terms: ``state`` is the job's state and
    ``failure_state`` what to file a failure under (None: it did not fail)."""

    state: str
    failure_state: str | None
    exit_code: int | None
    exit_signal: int | None
    derived_exit_code: int | None
    derived_exit_signal: int | None
    reason: str | None
    certain: bool  # False when scontrol was not available and the environment looked clean


def job_outcome(env: dict[str, str], job: dict[str, str]) -> Outcome:
    """Decide from the epilog environment and (if any) ``scontrol show job`` output."""
    ec2 = _pair(env.get("SLURM_JOB_EXIT_CODE2")) or _wait_status(env.get("SLURM_JOB_EXIT_CODE"))
    sc_ec = _pair(job.get("ExitCode"))
    derived = _wait_status(env.get("SLURM_JOB_DERIVED_EC")) or _pair(job.get("DerivedExitCode")) or (0, 0)
    reason = job.get("Reason") if job.get("Reason") not in (None, "", "None") else None
    sc_state = (job.get("JobState") or "").split("+")[0]
    code, sig = ec2 or sc_ec or (0, 0)
    signals = {s for s in (sig, sc_ec[1] if sc_ec else 0) if s}

    if sc_state in _FAILURE_STATES:
        state = sc_state
    elif reason in _REASON_STATES:
        state = _REASON_STATES[reason]
    elif _OOM_SIGNAL in signals:
        state = "OUT_OF_MEMORY"
    elif code or sig:
        state = "FAILED"
    elif sc_ec and sc_ec[1] in (9, 15):  # signalled with no failure reason: scancel
        state = "CANCELLED"
        code, sig = sc_ec
    elif sc_ec and sc_ec[0]:
        state, (code, sig) = "FAILED", sc_ec
    else:
        state = "COMPLETED"
    failure_state = state if state != "COMPLETED" else ("FAILED" if any(derived) else None)
    return Outcome(state, failure_state, code, sig, derived[0], derived[1], reason,
                   certain=bool(job) or failure_state is not None)


def _utc(text: str | None) -> str | None:
    """scontrol's time (run with TZ=UTC) as ISO 8601 UTC; None for Unknown/None."""
    if not text or text in ("Unknown", "None", "N/A"):
        return None
    try:
        return datetime.fromisoformat(text).replace(tzinfo=timezone.utc).isoformat()
    except ValueError:
        return None


def _seconds(text: str | None) -> int | None:
    """'1-02:03:04', '02:03:04', '03:04' -> seconds; UNLIMITED/Partition_Limit -> None."""
    if not text or not text[0].isdigit():
        return None
    days, _, clock = text.rpartition("-")
    try:
        parts = [int(p) for p in clock.split(":")]
        while len(parts) < 3:
            parts.insert(0, 0)
        return int(days or 0) * 86400 + parts[0] * 3600 + parts[1] * 60 + parts[2]
    except ValueError:
        return None


def _mem_mb(job: dict[str, str]) -> float | None:
    match = _MEM.search(job.get("TRES") or "")
    return round(float(match.group(1)) * _UNITS_MB[match.group(2)], 3) if match else None


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text else None
    except ValueError:
        return None


def _none(text: str | None) -> str | None:
    return None if text in (None, "", "(null)", "None", "N/A") else text


def expand_log_pattern(pattern: str, env: dict[str, str], name: str | None) -> str:
    """Fill the filename patterns the epilog environment leaves unexpanded (%j %x %u %A %a %N %%)."""
    values = {
        "j": env.get("SLURM_JOB_ID", ""), "x": name or "", "u": env.get("SLURM_JOB_USER", ""),
        "A": env.get("SLURM_ARRAY_JOB_ID", env.get("SLURM_JOB_ID", "")), "a": env.get("SLURM_ARRAY_TASK_ID", ""),
        "N": env.get("SLURMD_NODENAME", ""), "%": "%",
    }
    return re.sub(r"%([jxuAaN%])", lambda m: values[m.group(1)], pattern)


# --------------------------------------------------------------------------- capture


@dataclass
class EpilogResult:
    """What one run did. ``problems`` are reported on stderr and to syslog."""

    hook: str | None = None
    job_id: str | None = None
    event: dict[str, Any] | None = None
    event_path: str | None = None
    skipped: str | None = None  # why no event was written (job completed, not an epilog ...)
    problems: list[str] = field(default_factory=list)
    stage: str = "starting"
    timed_out: bool = False
    seconds: float = 0.0
    # What the worker has noticed so far: reported with the problems when it finishes, and
    # when the budget runs out first (the operator then sees that scontrol timed out before
    # the log read that was cut, not only the stage the budget ended in).
    notes: list[str] = field(default_factory=list)
    finished: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)


@dataclass(frozen=True)
class Settings:
    spool: str
    budget_s: float
    group: str | None
    hook: str | None
    completed: bool
    use_scontrol: bool
    scontrol: str | None
    scontrol_file: str | None
    dry_run: bool


def resolve_settings(args: argparse.Namespace, env: dict[str, str], notes: list[str]) -> Settings:
    """Flags > HPCMEM_* variables > HPCMEM_CONFIG file > site config > defaults.

    The user's own config is ignored: as root (Epilog) it would be root's, and a
    TaskEpilog must write where the site's Epilog reads.
    """
    spool, budget = args.spool or env.get("HPCMEM_SPOOL"), args.budget
    group = args.group or env.get("HPCMEM_SPOOL_GROUP")
    if budget is None and env.get("HPCMEM_EPILOG_BUDGET"):
        try:
            budget = float(env["HPCMEM_EPILOG_BUDGET"])
        except ValueError:
            notes.append(f"HPCMEM_EPILOG_BUDGET={env['HPCMEM_EPILOG_BUDGET']!r} is not a number")
    if spool is None or budget is None or group is None:
        site = env.get("HPCMEM_SITE_CONFIG", "/etc/hpcmem/config.toml")
        if env.get("HPCMEM_DISABLE_LOCAL_CONFIG") in ("1", "true", "yes"):
            site = None
        for path in (env.get("HPCMEM_CONFIG"), site):  # the explicit file wins, as in kb.config
            if not path or not os.path.isfile(path):
                continue
            try:
                from pathlib import Path

                from hpcmem.kb.config import read_toml

                tree = read_toml(Path(path))
            except Exception as exc:  # noqa: BLE001 - a bad config must not break the epilog
                notes.append(f"ignoring config {path}: {exc}")
                continue
            spool = spool or tree.get("spool", {}).get("dir")
            group = group or tree.get("spool", {}).get("group")
            budget = budget if budget is not None else tree.get("epilog", {}).get("budget_seconds")
    if budget is None or budget <= 0:
        budget = DEFAULT_BUDGET_S
    return Settings(spool=spool or DEFAULT_SPOOL, budget_s=float(budget), group=group, hook=args.hook,
                    completed=args.completed, use_scontrol=not args.no_scontrol, scontrol=args.scontrol,
                    scontrol_file=args.scontrol_file, dry_run=args.dry_run)


def _find_scontrol(settings: Settings, env: dict[str, str]) -> str | None:
    if settings.scontrol:
        return settings.scontrol
    dirs = [d for d in env.get("PATH", "").split(":") if d] + list(SCONTROL_DIRS)
    return next((os.path.join(d, "scontrol") for d in dirs if os.access(os.path.join(d, "scontrol"), os.X_OK)), None)


def query_scontrol(job_id: str, settings: Settings, env: dict[str, str], timeout: float,
                   notes: list[str]) -> dict[str, str]:
    """``scontrol show job -o ID`` (times in UTC), or {} with a note on why not."""
    if settings.scontrol_file:
        with open(settings.scontrol_file, encoding="utf-8", errors="replace") as fh:
            return parse_scontrol_job(fh.read())
    if not settings.use_scontrol:
        return {}
    path = _find_scontrol(settings, env)
    if path is None:
        notes.append("scontrol not found (give --scontrol PATH)")
        return {}
    run_env = {k: v for k, v in env.items() if k.startswith("SLURM_") or k in ("HOME", "LANG", "LC_ALL")}
    run_env.update(TZ="UTC", SLURM_TIME_FORMAT="standard", PATH="/usr/sbin:/usr/bin:/sbin:/bin")
    try:
        done = subprocess.run([path, "show", "job", "-o", job_id], capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, env=run_env, timeout=max(0.05, timeout), check=False)
    except subprocess.TimeoutExpired:
        notes.append(f"scontrol did not answer within {timeout:.2f}s")
        return {}
    except OSError as exc:
        notes.append(f"cannot run {path}: {exc.strerror}")
        return {}
    if done.returncode != 0:
        first = (done.stderr.strip().splitlines() or ["no output"])[-1]
        notes.append(f"scontrol exited {done.returncode}: {first[:200]}")
        return {}
    return parse_scontrol_job(done.stdout)


def _open_job_file(path: str, uid: int | None) -> int:
    """Open a job's log for reading without letting the job's user redirect root:
    no symlink as the last component, no FIFO, and (as root) owned by the job's user."""
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise OSError(f"{path} is not a regular file")
    if os.geteuid() == 0 and info.st_uid != uid:  # uid None: unknown user, read nothing as root
        os.close(fd)
        raise OSError(f"{path} belongs to uid {info.st_uid}, not to the job's user")
    return fd


def capture_log(paths: list[str], uid: int | None, notes: list[str]) -> dict[str, Any] | None:
    """The bounded, redacted failure excerpt of the first log (stderr first) that has one."""
    from hpcmem.ingest.logscan import scan_log  # regexes compile on import: only for failed jobs

    for path in dict.fromkeys(p for p in paths if p and p != "/dev/null"):
        try:
            fd = _open_job_file(path, uid)
        except FileNotFoundError:
            continue
        except OSError as exc:
            notes.append(f"log not read: {exc.strerror or exc}")
            continue
        try:
            # /proc/self/fd reopens exactly the file checked above, whatever the path does now
            proc_path = f"/proc/self/fd/{fd}"
            excerpt = scan_log(proc_path if os.path.exists(proc_path) else path)
        except Exception as exc:  # noqa: BLE001 - a log we cannot scan is only a missing detail
            notes.append(f"log not scanned: {exc}")
            continue
        finally:
            os.close(fd)
        if excerpt.has_error:
            return {"log_path": path, "log_excerpt": excerpt.excerpt, "log_kinds": list(excerpt.kinds)}
    return None


def _context_name(cluster: str, job_id: str) -> str:
    return event_file_name(cluster, job_id, "context")


def read_context(dirs, cluster: str, job_id: str, uid: int | None) -> list[str] | None:
    """Modules a TaskEpilog recorded for this job (then the context file is removed)."""
    name = _context_name(cluster, job_id)
    ctx_fd = dirs.fds["ctx"]
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=ctx_fd)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if os.geteuid() == 0 and uid is not None and info.st_uid not in (0, uid):
            return None
        data = os.read(fd, MAX_CONTEXT_BYTES)
    finally:
        os.close(fd)
        try:
            os.unlink(name, dir_fd=ctx_fd)
        except OSError:
            pass
    try:
        modules = json.loads(data).get("modules")
    except (ValueError, AttributeError):
        return None
    if isinstance(modules, list) and all(isinstance(m, str) and 0 < len(m) <= 256 for m in modules):
        return modules[:256]
    return None


def _modules_from_env(env: dict[str, str]) -> list[str]:
    return [m for m in env.get("LOADEDMODULES", "").split(":") if m][:256]


def _ownership(env: dict[str, str], settings: Settings, notes: list[str]) -> Ownership:
    gid = None
    if settings.group:
        try:
            import grp

            gid = grp.getgrnam(settings.group).gr_gid
        except KeyError:
            notes.append(f"group {settings.group!r} does not exist; events readable by the user only")
    if os.geteuid() == 0:
        uid = _int(env.get("SLURM_JOB_UID"))
        job_gid = _int(env.get("SLURM_JOB_GID"))
        return Ownership(uid=uid, gid=gid if gid is not None else job_gid, group_readable=gid is not None)
    return Ownership(uid=None, gid=gid, group_readable=gid is not None)


def record_task_context(env: dict[str, str], settings: Settings, result: EpilogResult, notes: list[str]) -> None:
    """TaskEpilog: keep the modules this task ran with for the job's Epilog."""
    modules = _modules_from_env(env)
    if not modules:
        result.skipped = "no modules loaded in this task"
        return
    user = user_dir_name(env.get("SLURM_JOB_USER"), _int(env.get("SLURM_JOB_UID")))
    cluster = env.get("SLURM_CLUSTER_NAME") or "unknown"
    owner = Ownership()
    dirs = open_user_dir(settings.spool, user, owner, create=False, subdirs=("tmp", "ctx"))
    try:
        known = read_context_keep(dirs, _context_name(cluster, result.job_id))
        merged = list(dict.fromkeys(known + modules))[:256]  # every step's modules, in order
        data = json.dumps({"job_id": result.job_id, "modules": merged}).encode()
        write_atomic(dirs, _context_name(cluster, result.job_id), data, owner, into="ctx", durable=False)
        result.event_path = os.path.join(settings.spool, user, "ctx", _context_name(cluster, result.job_id))
    finally:
        dirs.close()


def read_context_keep(dirs, name: str) -> list[str]:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dirs.fds["ctx"])
    except OSError:
        return []
    try:
        modules = json.loads(os.read(fd, MAX_CONTEXT_BYTES)).get("modules")
    except (ValueError, AttributeError):
        return []
    finally:
        os.close(fd)
    return [m for m in modules if isinstance(m, str)] if isinstance(modules, list) else []


def build_event(env: dict[str, str], job: dict[str, str], outcome: Outcome, hook: str) -> dict[str, Any]:
    """The spool event (schemas/spool-event.schema.json) for one job end."""
    return {
        "schema": SCHEMA_ID,
        "event_id": os.urandom(16).hex(),
        "hook": hook,
        "host": env.get("SLURMD_NODENAME") or os.uname().nodename,
        "written_at": datetime.now(timezone.utc).isoformat(),
        "cluster": env.get("SLURM_CLUSTER_NAME") or "unknown",
        "job_id": env["SLURM_JOB_ID"],
        "user": env.get("SLURM_JOB_USER") or (job.get("UserId") or "").partition("(")[0] or "unknown",
        "uid": _int(env.get("SLURM_JOB_UID")),
        "gid": _int(env.get("SLURM_JOB_GID")),
        "job_name": _none(env.get("SLURM_JOB_NAME") or job.get("JobName")),
        "account": _none(env.get("SLURM_JOB_ACCOUNT") or job.get("Account")),
        "partition": _none(env.get("SLURM_JOB_PARTITION") or job.get("Partition")),
        "qos": _none(job.get("QOS") or env.get("SLURM_JOB_QOS")),
        "state": outcome.state,
        "failure_state": outcome.failure_state,
        "failed": outcome.failure_state is not None,
        "reason": outcome.reason,
        "exit_code": outcome.exit_code,
        "exit_signal": outcome.exit_signal,
        "derived_exit_code": outcome.derived_exit_code,
        "derived_exit_signal": outcome.derived_exit_signal,
        "req_mem_mb": _mem_mb(job),
        "req_cpus": _int(job.get("NumCPUs")),
        "req_nodes": _int(job.get("NumNodes") or env.get("SLURM_JOB_NUM_NODES")),
        "req_time_s": _seconds(job.get("TimeLimit")),
        "elapsed_s": _seconds(job.get("RunTime")),
        "nodes": _none(job.get("NodeList") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")),
        "work_dir": _none(env.get("SLURM_JOB_WORK_DIR") or job.get("WorkDir")),
        "command": _none(job.get("Command")),
        "restarts": _int(job.get("Restarts") or env.get("SLURM_JOB_RESTART_COUNT")),
        "submit_time": _utc(job.get("SubmitTime")),
        "start_time": _utc(job.get("StartTime")),
        "end_time": _utc(job.get("EndTime")),
        "stdout": _none(job.get("StdOut")),
        "stderr": _none(job.get("StdErr")),
        "log_path": None,
        "log_excerpt": None,
        "log_kinds": [],
        "missing_output_dir": None,
        "unwritable_output_dir": None,
        "modules": _modules_from_env(env) or None,
        "notes": [],
    }


def _log_paths(env: dict[str, str], job: dict[str, str]) -> list[str]:
    if job.get("StdErr") or job.get("StdOut"):
        return [p for p in (job.get("StdErr"), job.get("StdOut")) if p]
    name = env.get("SLURM_JOB_NAME") or job.get("JobName")
    return [expand_log_pattern(env[k], env, name) for k in ("SLURM_JOB_STDERR", "SLURM_JOB_STDOUT") if env.get(k)]


def capture(env: dict[str, str], settings: Settings, result: EpilogResult, deadline: float) -> None:
    """The epilog's work (runs in the worker thread; fills ``result``)."""
    try:
        _capture(env, settings, result, deadline, result.notes)
    finally:
        with result.lock:  # either this or run()'s timeout reports the notes, once
            if not result.timed_out:
                result.problems.extend(result.notes)
            result.finished = True


def _capture(env: dict[str, str], settings: Settings, result: EpilogResult, deadline: float,
             notes: list[str]) -> None:
    hook = settings.hook or env.get("SLURM_SCRIPT_CONTEXT")
    result.hook = hook
    if hook not in CONTEXTS:
        result.skipped = f"not an epilog context ({hook or 'SLURM_SCRIPT_CONTEXT unset'})"
        return
    result.job_id = env.get("SLURM_JOB_ID")
    if not result.job_id:
        result.skipped = "no SLURM_JOB_ID in the environment"
        notes.append(result.skipped)
        return
    if hook == "epilog_task":
        result.stage = "recording task context"
        record_task_context(env, settings, result, notes)
        return

    owner = _ownership(env, settings, notes)
    # Write first: a failure the environment alone shows is spooled before anything that can
    # hang (scontrol against a busy controller, a log on a stuck filesystem). Enrichment
    # then replaces the file within the budget; when the budget runs out, the event the
    # environment gave is what stays, and its notes say so.
    early = build_event(env, {}, job_outcome(env, {}), hook)
    modules = _task_context(settings, early, owner, result) if hook == "epilog_slurmd" else []
    _add_modules(early, modules)
    early_path = None
    if early["failed"] and not settings.dry_run:
        early_path = _write(settings, early, owner, result, notes, PENDING_NOTE)

    result.stage = "asking scontrol"
    job = query_scontrol(result.job_id, settings, env, deadline - time.monotonic() - 0.25, notes)
    outcome = job_outcome(env, job)
    event = build_event(env, job, outcome, hook)
    result.event = event
    _add_modules(event, modules)
    if not event["failed"]:
        if not settings.completed:
            result.skipped = "job completed"
            return
        if not outcome.certain:
            result.skipped = "job looks completed, but without scontrol a time limit cannot be ruled out"
            notes.append(result.skipped)
            return
    else:
        result.stage = "reading the job's log"
        paths = _log_paths(env, job)
        found = capture_log(paths, event["uid"], notes) if time.monotonic() < deadline else None
        if found:
            event.update(found)
        else:
            event["missing_output_dir"] = _missing_output_dir(paths)
            if event["missing_output_dir"] is None:
                event["unwritable_output_dir"] = _unwritable_output_dir(paths, event["uid"], event["gid"])
    if settings.dry_run:
        event["notes"] = notes[:MAX_NOTES]
        _scrub_free_text(event)
        result.skipped = "dry run"
        return
    if early_path is not None and deadline - time.monotonic() < FINAL_WRITE_MARGIN_S:
        return  # too little time to replace it safely: the early event stands
    _write(settings, event, owner, result, notes)


def _missing_output_dir(paths: list[str]) -> str | None:
    """The directory of a log path that does not exist: Slurm does not create it, and the
    job then fails to launch (JobLaunchFailure) without any log."""
    for path in paths:
        directory = os.path.dirname(path)
        if directory and os.path.isabs(directory) and not os.path.isdir(directory):
            return directory
    return None


def _unwritable_output_dir(paths: list[str], uid: int | None, gid: int | None) -> str | None:
    """The directory of a log path the job's user may not write (by its mode bits: as root,
    os.access would answer for root). Such a job fails to launch like a missing one."""
    if uid is None or uid == 0:
        return None  # root may write anywhere
    import stat as stat_mod

    try:
        import pwd

        groups = set(os.getgrouplist(pwd.getpwuid(uid).pw_name, gid if gid is not None else -1))
    except (KeyError, OSError):
        groups = {gid} if gid is not None else set()
    for path in paths:
        directory = os.path.dirname(path)
        if not directory or not os.path.isabs(directory):
            continue
        try:
            st = os.stat(directory)
        except OSError:
            continue
        if st.st_uid == uid:
            writable = st.st_mode & (stat_mod.S_IWUSR | stat_mod.S_IXUSR) == stat_mod.S_IWUSR | stat_mod.S_IXUSR
        elif st.st_gid in groups:
            writable = st.st_mode & (stat_mod.S_IWGRP | stat_mod.S_IXGRP) == stat_mod.S_IWGRP | stat_mod.S_IXGRP
        else:
            writable = st.st_mode & (stat_mod.S_IWOTH | stat_mod.S_IXOTH) == stat_mod.S_IWOTH | stat_mod.S_IXOTH
        if not writable:
            return directory
    return None


def _task_context(settings: Settings, event: dict[str, Any], owner: Any, result: EpilogResult) -> list[str]:
    """The modules TaskEpilog recorded for this job (root only: it reads the user's ctx/)."""
    if os.geteuid() != 0 or settings.dry_run:
        return []
    result.stage = "reading task context"
    dirs = open_user_dir(settings.spool, user_dir_name(event["user"], event["uid"]), owner)
    try:
        return read_context(dirs, event["cluster"], event["job_id"], owner.uid)
    finally:
        dirs.close()


def _add_modules(event: dict[str, Any], modules: list[str]) -> None:
    if modules:
        event["modules"] = list(dict.fromkeys((event["modules"] or []) + modules))


def _write(settings: Settings, event: dict[str, Any], owner: Any, result: EpilogResult, notes: list[str],
           pending_note: str | None = None) -> str:
    """Spool ``event`` (atomically replacing an earlier version of the same job and hook)."""
    event["notes"] = (notes + ([pending_note] if pending_note else []))[:MAX_NOTES]
    _scrub_free_text(event)
    result.stage = "writing the event"
    result.event = event
    result.event_path = write_event(settings.spool, event, owner)
    return result.event_path


# What the job's user wrote (a job name, a directory, a command line, log paths) can carry a
# token like any log line: the event file is normalised and redacted as the excerpt is.
_FREE_TEXT = ("job_name", "work_dir", "command", "stdout", "stderr", "log_path")


def _scrub_free_text(event: dict[str, Any]) -> None:
    from hpcmem.kb.safety.normalise import scrub_text  # as scan_log: only for events written

    for key in _FREE_TEXT:
        if isinstance(event.get(key), str):
            event[key] = scrub_text(event[key])
    event["notes"] = [scrub_text(n) if isinstance(n, str) else n for n in event.get("notes") or []]


# The enriched event replaces the early one only with this much budget left; a write cut
# off by the deadline would leave its temp file behind (the drain recovers it, but why).
FINAL_WRITE_MARGIN_S = 0.3
# A write already under way gets this much grace past the deadline: it is milliseconds
# unless the filesystem hangs, and an event cut off is the loss this order of work avoids.
WRITE_GRACE_S = 0.5
PENDING_NOTE = "scontrol and the job's log were not read (the epilog's time budget ran out first)"


# --------------------------------------------------------------------------- running


def process_started() -> float:
    """When this process started, on the ``time.monotonic()`` clock.

    Slurm's epilog budget runs from the moment slurmd starts the script, so the
    interpreter's own start-up counts. Linux: the start time in /proc/self/stat (clock
    ticks since boot) against CLOCK_BOOTTIME; elsewhere, now.
    """
    now = time.monotonic()
    try:
        with open("/proc/self/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        ticks = int(fields[19])  # field 22 of stat(5); fields[0] here is field 3
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return now
    return now - min(max(age, 0.0), 60.0)  # a clock oddity must not eat the whole budget


def run_epilog(argv: list[str] | None = None, environ: dict[str, str] | None = None) -> EpilogResult:
    """Parse arguments, capture within the budget, never raise. The worker may still be
    running when this returns with ``timed_out`` (it is a daemon thread)."""
    started = process_started() if environ is None else time.monotonic()
    result = EpilogResult()
    env = dict(os.environ if environ is None else environ)
    try:
        args = build_parser().parse_args(argv)
        if args.env_file:
            with open(args.env_file, encoding="utf-8", errors="replace") as fh:
                env = parse_env_file(fh.read())
        notes: list[str] = []
        settings = resolve_settings(args, env, notes)
        result.problems.extend(notes)
    except (_ArgumentError, OSError) as exc:
        result.problems.append(f"bad arguments: {exc}")
        result.skipped = "bad arguments"
        return result
    except SystemExit:  # --help printed the usage
        result.skipped = "help"
        return result
    deadline = started + settings.budget_s

    def work() -> None:
        try:
            capture(env, settings, result, deadline)
        except SpoolError as exc:
            result.problems.append(str(exc))
        except Exception as exc:  # noqa: BLE001 - whatever happens, the node must not drain
            result.problems.append(f"unexpected {type(exc).__name__}: {exc}")

    worker = threading.Thread(target=work, name="hpcmem-epilog", daemon=True)
    worker.start()
    worker.join(max(0.0, deadline - time.monotonic()))
    if worker.is_alive() and result.stage == "writing the event":
        worker.join(WRITE_GRACE_S)
    with result.lock:
        if not result.finished:
            result.timed_out = True
            result.problems.extend(result.notes)
            result.problems.append(f"gave up after the {settings.budget_s:g} s budget while {result.stage}")
    result.seconds = round(time.monotonic() - started, 4)
    return result


def report(result: EpilogResult, *, verbose: bool = False, stream=None) -> None:
    """Problems to stderr and syslog (slurmd keeps an epilog's output only when it fails)."""
    stream = stream or sys.stderr
    job = f"job {result.job_id}" if result.job_id else "no job"
    for problem in result.problems:
        stream.write(f"hpcmem epilog ({result.hook or 'unknown hook'}, {job}): {problem}\n")
    if verbose:
        stream.write(f"hpcmem epilog ({job}): {result.event_path or result.skipped} [{result.seconds:.3f} s]\n")
    if result.problems:
        try:
            import syslog

            syslog.openlog("hpcmem-epilog", syslog.LOG_PID, syslog.LOG_DAEMON)
            for problem in result.problems:
                syslog.syslog(syslog.LOG_WARNING, f"{job}: {problem}")
        except Exception:  # noqa: BLE001 - no syslog is no reason to fail
            pass
    stream.flush()


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m hpcmem.ingest.epilog``: always returns 0."""
    try:
        args = sys.argv[1:] if argv is None else argv
        result = run_epilog(args)
        if "--dry-run" in args and result.event is not None:
            sys.stdout.write(json.dumps(result.event, indent=1, sort_keys=True) + "\n")
            sys.stdout.flush()
        report(result, verbose="--verbose" in args)
        if result.timed_out:
            os._exit(0)  # the worker is stuck (a hung filesystem): leave without waiting for it
    except BaseException as exc:  # noqa: BLE001 - exit 0 whatever happened
        try:
            sys.stderr.write(f"hpcmem epilog: unexpected {type(exc).__name__}: {exc}\n")
        except Exception:  # noqa: BLE001
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
