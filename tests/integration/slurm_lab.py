"""A real single-node Slurm 22.05 cluster for the integration tests (run as root).

``SlurmLab.up()`` installs the Debian packages when they are missing, writes its own
configuration under a state directory, starts munged, slurmdbd, slurmctld and slurmd
as foreground child processes (so their PIDs are known exactly, no pid-file races),
registers the cluster, account and users in slurmdbd and waits for the node to be
idle. ``down()`` stops exactly those PIDs again; ``purge()`` also removes the cgroups,
database, DB user, OS users and state directory that ``up()`` created. For a person,
``python -m tests.integration.slurm_lab up|status|down`` keeps a lab running between
commands (``detach()``; the CLI is in lab_cli.py).

Nothing is written to /etc: daemons and clients find the configuration through
``SLURM_CONF``, and munged listens on a private socket named by ``AuthInfo``, so a
munged or Slurm already on the machine is left alone. Pitfalls and timings are in
docs/slurm-harness.md.
"""

from __future__ import annotations

import atexit
import fcntl
import grp
import json
import os
import pwd
import re
import shutil
import signal
import socket
from stat import S_IFCHR
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

PACKAGES = ("munge", "slurmctld", "slurmd", "slurmdbd", "slurm-client", "lmod")
DEFAULT_ROOT = Path("/tmp/hpcmem-slurm-lab")
MODULE_TREE = Path(__file__).resolve().parent / "modules"
LMOD_INIT_CANDIDATES = (
    Path("/usr/share/lmod/lmod/init/bash"),
    Path("/usr/share/lmod/init/bash"),
)
CLUSTER = "hpcmem"
ACCOUNT = "research"
# With policies=True (opt-in): a second account the lab user may use on `main` only, and a
# QOS with a wall-time limit that refuses longer jobs at submission.
RESTRICTED_ACCOUNT = "teaching"
RESTRICTED_ACCOUNT_PARTITION = "main"
SHORT_QOS = "short"
URGENT_QOS = "urgent"  # may preempt (cancel) jobs of QOS normal
# With submission_limits=True (opt-in, issue 27): a bigger node that exists in the configuration
# only (State=FUTURE: no slurmd, jobs sent to it pend) in its own partition, so that "a partition
# with nodes that large" exists; and memory limits on `debug` that only the scheduler's partition
# check catches ("Requested partition configuration not available now").
BIGMEM_NODE = "bigmem1"
BIGMEM_PARTITION = "bigmem"
BIGMEM_CPUS = 8
BIGMEM_MEMORY_MB = 16000
DEBUG_DEF_MEM_PER_CPU_MB = 600
DEBUG_MAX_MEM_PER_NODE_MB = 1000
NODE = "localhost"
# Our own database and DB user, so a slurm_acct_db of someone else is never touched.
DB_NAME = "hpcmem_lab_acct_db"
DB_USER = "hpcmem_lab"
DB_PASSWORD = "hpcmem-lab-pass"
# States in which a job is still in the queue; anything else is final.
ACTIVE_STATES = frozenset(
    {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED",
     "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED"}
)  # fmt: skip
# Start order; down() stops them in reverse.
DAEMONS = ("munged", "slurmdbd", "slurmctld", "slurmd")
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Under the lab root, kept across up()s: the OS users and groups up() created (purge()
# removes only these), and what a detached lab was started with (for `status`).
CREATED_RECORD = "created.json"
STATE_RECORD = "lab.json"
# Pid record of the process that holds the lab's lock while a detached lab is up.
LOCK_KEEPER = "lockkeeper"
CGROUP_ROOT = Path("/sys/fs/cgroup")


class SlurmLabError(RuntimeError):
    """The lab could not be brought up, or a Slurm command failed."""


class SubmissionRejected(SlurmLabError):
    """sbatch refused the job; carries its exit code and messages."""

    def __init__(self, argv: Sequence[str], returncode: int, stdout: str, stderr: str):
        self.argv = list(argv)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        super().__init__(f"sbatch exited {returncode}: {stderr.strip()}")


@dataclass(frozen=True)
class JobPaths:
    """Where a job's output went, as slurmctld expanded it (%x, %j, ...)."""

    stdout: Path | None
    stderr: Path | None


def prerequisite_problem() -> str | None:
    """Why this machine cannot host the lab, or None when it can."""
    if not os.uname().sysname == "Linux":
        return "the Slurm lab needs Linux"
    if os.geteuid() != 0:
        return "the Slurm lab needs root (it installs packages and starts daemons)"
    for tool in ("apt-get", "dpkg-query", "runuser"):
        if shutil.which(tool) is None:
            return f"the Slurm lab needs {tool} (a Debian/Ubuntu machine)"
    return None


def missing_packages(packages: Iterable[str] = PACKAGES) -> list[str]:
    """The packages dpkg does not report as installed."""
    missing = []
    for package in packages:
        result = subprocess.run(
            ["dpkg-query", "-W", "-f=${Status}", package],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if result.returncode != 0 or "install ok installed" not in result.stdout:
            missing.append(package)
    return missing


def install_packages(packages: Sequence[str]) -> None:
    """apt-get install without letting postinst scripts start any daemon."""
    # Without systemd, postinst falls back to /etc/init.d and would start a system
    # munged/slurmctld on our ports; policy-rc.d exit 101 forbids that.
    policy = Path("/usr/sbin/policy-rc.d")
    created_policy = not policy.exists()
    if created_policy:
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    try:
        for argv in (
            ["apt-get", "update", "-q"],
            ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages],
        ):
            result = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
            if result.returncode != 0:
                raise SlurmLabError(f"{' '.join(argv)} failed:\n{result.stderr[-2000:]}")
    finally:
        if created_policy:
            policy.unlink(missing_ok=True)


def cgroup_v1_usable() -> bool:
    """True when the cgroup v1 memory, freezer and cpuset controllers are mounted
    under /sys/fs/cgroup and we may create groups there (task/cgroup needs all three)."""
    mounted: set[str] = set()
    with open("/proc/self/mounts", encoding="utf-8") as fh:
        for line in fh:
            parts = line.split()
            if len(parts) >= 4 and parts[2] == "cgroup":
                mounted.update(parts[3].split(","))
    if not {"memory", "freezer", "cpuset"} <= mounted:
        return False
    probe = Path(f"/sys/fs/cgroup/memory/hpcmem-probe-{os.getpid()}")
    try:
        probe.mkdir()
        probe.rmdir()
    except OSError:
        return False
    return True


def lmod_init_script() -> Path | None:
    """Lmod's bash init as Debian installs it."""
    return next((p for p in LMOD_INIT_CANDIDATES if p.is_file()), None)


def proc_start_time(pid: int) -> str | None:
    """Field 22 of /proc/PID/stat: with the pid it names one process, never a reused pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _pids_named(comm: str) -> list[int]:
    """PIDs whose /proc/PID/comm is ``comm``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == comm:
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def _descendants(pid: int) -> list[int]:
    """All processes below ``pid`` (children first found, breadth first)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int(Path(entry, "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, queue = [], [pid]
    while queue:
        for child in children.get(queue.pop(), []):
            found.append(child)
            queue.append(child)
    return found


def _group_exists(name: str) -> bool:
    try:
        grp.getgrnam(name)
    except KeyError:
        return False
    return True


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def _wait_until(what: str, ready: Callable[[], bool], timeout: float, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise SlurmLabError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class SlurmLab:
    """One real Slurm cluster (node ``localhost``, partitions ``main`` and ``debug``).

    ``epilog``, ``epilog_slurmctld`` and ``prolog`` are paths of scripts that become
    Epilog=, EpilogSlurmctld= and Prolog=. They are copied into ``hooks_dir`` (so root
    and the slurm user can read them wherever the checkout lives); ``hooks_out``, the
    ``out`` directory next to them, is world-writable for what they record.
    ``prolog_epilog_timeout`` (seconds) becomes PrologEpilogTimeout=. ``cgroup`` is
    "auto" (v1 when usable, else none), "v1" or "none".

    Opt-in extras (off by default, so the default cluster is unchanged): ``gres`` gives the
    node generic resources, e.g. ``{"gpu": 2}``, backed by stand-in device nodes (no
    hardware: jobs get the count and CUDA_VISIBLE_DEVICES, not a GPU). ``policies=True``
    enforces associations, limits and QOS, adds the account ``teaching`` (usable by the lab user on ``main`` only) and the QOS ``short``
    (MaxWall ``short_qos_minutes``, DenyOnLimit) and ``urgent`` (preempts QOS normal jobs by
    cancelling them: PreemptType=preempt/qos), which the lab user may use, and sets
    EnforcePartLimits=ALL (a job beyond every partition's limits is refused, not queued).
    ``extra_users`` (e.g. ``("bob",)``) are more ordinary users, created and registered like
    the lab user (account ``research``; with ``policies``, the same QOS list), each with a
    work dir; the teaching account stays the lab user's only. ``lab_group`` (e.g.
    ``"vision"``) is an OS group holding the lab user and the extra users, as a lab's shared
    hpcmem store is kept group-readable; created if missing and removed by purge() when created.

    ``submission_limits=True`` is the site of issue 27's submission checks: it turns
    ``policies`` on and, unless ``gres`` is given, ``gres={"gpu": 2}``. It adds partition
    ``bigmem`` of one node ``bigmem1`` (8 CPUs, RealMemory 16000, no GRES) defined State=FUTURE:
    configuration only, no slurmd, so a job sent there is accepted and pends. And it gives
    ``debug`` DefMemPerCPU=600 and MaxMemPerNode=1000: a job naming no memory gets 600M per CPU
    there, which sbatch does not check against MaxMemPerNode, so ``-p debug -c 2`` (1200M) is
    refused by the scheduler's partition check with "Requested partition configuration not
    available now" (an explicit ``--mem=1200M -p debug`` gets "Memory required by task is not
    available").
    """

    def __init__(
        self,
        root: Path | str = DEFAULT_ROOT,
        *,
        user: str = "alice",
        epilog: Path | str | None = None,
        epilog_slurmctld: Path | str | None = None,
        prolog: Path | str | None = None,
        prolog_epilog_timeout: int | None = None,
        cgroup: str = "auto",
        base_port: int = 6817,
        debug_max_minutes: int = 2,
        gres: dict[str, int] | None = None,
        policies: bool = False,
        short_qos_minutes: int = 1,
        extra_users: Sequence[str] = (),
        lab_group: str | None = None,
        submission_limits: bool = False,
    ):
        if cgroup not in ("auto", "v1", "none"):
            raise ValueError(f"cgroup must be auto, v1 or none, not {cgroup!r}")
        self.root = Path(root)
        self.user = user
        self.epilog = Path(epilog) if epilog else None
        self.epilog_slurmctld = Path(epilog_slurmctld) if epilog_slurmctld else None
        self.prolog = Path(prolog) if prolog else None
        self.prolog_epilog_timeout = prolog_epilog_timeout
        self.cgroup_request = cgroup
        self.cgroup_mode: str | None = None  # "v1" or "none", decided by up()
        self.ports = {"slurmctld": base_port, "slurmd": base_port + 1, "slurmdbd": base_port + 2}
        self.debug_max_minutes = debug_max_minutes
        self.submission_limits = submission_limits
        self.gres = dict(gres or ({"gpu": 2} if submission_limits else {}))
        self.policies = policies or submission_limits
        self.short_qos_minutes = short_qos_minutes
        self.extra_users = tuple(extra_users)
        self.lab_group = lab_group
        self.etc = self.root / "etc"
        self.conf = self.etc / "slurm.conf"
        self.log_dir = self.root / "log"
        self.munge_dir = self.root / "munge"
        self.munge_socket = self.munge_dir / "munge.socket"
        self.module_path = self.root / "modules"
        self.work_root = self.root / "work"
        self.hooks_dir = self.root / "hooks"
        self.hooks_out = self.hooks_dir / "out"
        self.gres_dev = self.root / "dev"  # stand-in device nodes for gres (opt-in)
        self.lmod_init: Path | None = None
        self.started_at: datetime | None = None  # UTC, just before the daemons started
        self.timings: dict[str, float] = {}  # phase -> seconds
        self._procs: dict[str, subprocess.Popen] = {}
        self._mariadb_pid: int | None = None  # set only when we started MariaDB
        self._lock_fh = None
        self._atexit_registered = False
        self._script_counter = 0

    # -- bring-up ------------------------------------------------------------------

    def up(self) -> SlurmLab:
        problem = prerequisite_problem()
        if problem:
            raise SlurmLabError(problem)
        t0 = time.monotonic()
        self._take_lock()
        if not self._atexit_registered:
            atexit.register(self.down)
            self._atexit_registered = True
        try:
            self._up(t0)
        except BaseException:
            self.down()
            raise
        return self

    def _up(self, t0: float) -> None:
        def mark(phase: str) -> None:
            self.timings[phase] = round(time.monotonic() - t0, 2)

        need = missing_packages()
        if not Path("/usr/sbin/mariadbd").exists():
            need += missing_packages(["mariadb-server"])
        if need:
            install_packages(need)
        mark("packages")
        self.lmod_init = lmod_init_script()
        self.cgroup_mode = self._decide_cgroup()
        self._stop_leftovers()
        for port in self.ports.values():
            if not _port_free(port):
                raise SlurmLabError(
                    f"port {port} on 127.0.0.1 is taken by a process this lab did not "
                    "start (another Slurm?); pass SlurmLab(base_port=...)"
                )
        self._prepare_tree()
        for user in (self.user, *self.extra_users):
            self._ensure_user(user)
        if self.lab_group:
            self._ensure_group(self.lab_group, (self.user, *self.extra_users))
        mark("config")
        self.started_at = datetime.now(timezone.utc).replace(microsecond=0)
        self._start_munged()
        mark("munged")
        self._prepare_database()
        mark("database")
        self._start_slurmdbd()
        mark("slurmdbd")
        self._start_slurmctld()
        mark("slurmctld")
        self._start_slurmd()
        mark("slurmd_idle")
        (self.log_dir / "timings.json").write_text(json.dumps(self.timings, indent=1) + "\n")

    def _decide_cgroup(self) -> str:
        if self.cgroup_request != "auto":
            return self.cgroup_request
        return "v1" if cgroup_v1_usable() else "none"

    def _take_lock(self, wait: bool = True) -> None:
        """One lab per root at a time: a second pytest session waits for the first.
        With ``wait=False`` a held lock raises SlurmLabError at once."""
        if self._lock_fh is not None:
            return
        self.root.parent.mkdir(parents=True, exist_ok=True)
        fh = open(f"{self.root}.lock", "w")  # noqa: SIM115 - held until down()
        deadline = time.monotonic() + 600
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not wait:
                    fh.close()
                    raise SlurmLabError(
                        f"the lab at {self.root} is in use by another process "
                        f"(a pytest session?): {self.root}.lock is held"
                    ) from None
                if time.monotonic() > deadline:
                    fh.close()
                    raise SlurmLabError(f"{self.root}.lock held by another session for 10 min")
                time.sleep(1)
        self._lock_fh = fh

    def _stop_leftovers(self) -> None:
        """Stop daemons a crashed earlier run left behind, identified by pid AND start
        time as recorded then (a recycled pid is never touched)."""
        pid_dir = self.root / "pids"
        if not pid_dir.is_dir():
            return
        if self.conf.exists() and "is UP" in self.run(["scontrol", "ping"], timeout=20).stdout:
            self._cancel_all_jobs()  # the old controller still answers: let it clean up
        for record in pid_dir.iterdir():
            try:
                pid_text, start = record.read_text().split()
                pid = int(pid_text)
            except (OSError, ValueError):
                record.unlink(missing_ok=True)
                continue
            if proc_start_time(pid) == start:
                if record.name == LOCK_KEEPER:  # a detached lab's: purge() ends it last
                    continue
                if record.name == "mariadbd":  # ours from before: keep using it
                    self._mariadb_pid = pid
                    continue
                self._terminate(pid, record.name)
            record.unlink(missing_ok=True)
        self._kill_orphan_steps()

    def _kill_orphan_steps(self) -> None:
        """Kill job step daemons of this lab that outlived slurmd, with their jobs.

        A slurmstepd keeps running when slurmd dies; ours are recognisable by their
        working directory, the lab root slurmd was started in.
        """
        for pid in _pids_named("slurmstepd"):
            try:
                if os.readlink(f"/proc/{pid}/cwd") != str(self.root):
                    continue
            except OSError:
                continue
            for victim in [pid, *_descendants(pid)]:
                try:
                    os.kill(victim, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def _prepare_tree(self) -> None:
        """Fresh state, spool, log and config dirs (wipes an earlier run's leftovers)."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)  # alice must reach slurm.conf, the munge socket, modules
        for name in ("etc", "state", "spool", "log", "run", "munge", "modules", "work", "hooks", "dev"):
            shutil.rmtree(self.root / name, ignore_errors=True)
        (self.root / "pids").mkdir(exist_ok=True)
        slurm = pwd.getpwnam("slurm")
        munge = pwd.getpwnam("munge")
        for name in ("etc", "spool", "work"):
            (self.root / name).mkdir(mode=0o755)
        # slurmd wants its spool dir to exist (sockets, hwloc topology cache)
        (self.root / "spool" / "slurmd").mkdir(mode=0o755)
        for name in ("state", "log", "run"):  # slurmctld/slurmdbd write here as slurm
            (self.root / name).mkdir(mode=0o755)
            os.chown(self.root / name, slurm.pw_uid, slurm.pw_gid)
        self.munge_dir.mkdir(mode=0o755)
        key = self.munge_dir / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        for path in (self.munge_dir, key):
            os.chown(path, munge.pw_uid, munge.pw_gid)
        self.hooks_out.mkdir(parents=True)
        self.hooks_out.chmod(0o1777)  # Epilog runs as root, EpilogSlurmctld as slurm
        for script in (self.prolog, self.epilog, self.epilog_slurmctld):
            if script:
                shutil.copyfile(script, self.hooks_dir / script.name)
                (self.hooks_dir / script.name).chmod(0o755)
        if MODULE_TREE.is_dir():  # copied: alice may not be able to read the checkout
            shutil.copytree(MODULE_TREE, self.module_path, symlinks=True)
        self.conf.write_text(self.render_slurm_conf())
        (self.etc / "cgroup.conf").write_text(self.render_cgroup_conf())
        if self.gres:
            self._make_gres_devices()
            (self.etc / "gres.conf").write_text(self.render_gres_conf())
        dbd_conf = self.etc / "slurmdbd.conf"
        dbd_conf.write_text(self.render_slurmdbd_conf())
        # slurmdbd refuses a slurmdbd.conf not owned by SlurmUser or readable by others
        dbd_conf.chmod(0o600)
        os.chown(dbd_conf, slurm.pw_uid, slurm.pw_gid)

    def _ensure_user(self, user: str) -> None:
        try:
            pwd.getpwnam(user)
        except KeyError:
            group_existed = _group_exists(user)
            result = subprocess.run(
                ["useradd", "--create-home", "--shell", "/bin/bash", user],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            if result.returncode != 0:
                raise SlurmLabError(f"useradd {user} failed: {result.stderr.strip()}") from None
            # recorded at once, so purge() removes it even after a crash
            self._record_created(user, group=None if group_existed else user)
        entry = pwd.getpwnam(user)
        home = Path(entry.pw_dir)
        if not home.is_dir():
            home.mkdir(parents=True)
            os.chown(home, entry.pw_uid, entry.pw_gid)
        self.workdir(user)

    def _ensure_group(self, group: str, members: Sequence[str]) -> None:
        """An OS group with ``members`` (created if missing, and then recorded for purge)."""
        if not _group_exists(group):
            result = subprocess.run(["groupadd", group], capture_output=True, text=True, check=False)
            if result.returncode != 0:
                raise SlurmLabError(f"groupadd {group} failed: {result.stderr.strip()}")
            record = self.created()
            record["groups"].append(group)
            self.root.mkdir(parents=True, exist_ok=True)
            (self.root / CREATED_RECORD).write_text(json.dumps(record, indent=1) + "\n")
        for user in members:
            subprocess.run(["usermod", "-a", "-G", group, user], capture_output=True, check=False)

    def workdir(self, user: str | None = None) -> Path:
        """A directory owned by ``user`` where its jobs run (created on demand)."""
        user = user or self.user
        path = self.work_root / user
        if not path.is_dir():
            path.mkdir(parents=True)
            entry = pwd.getpwnam(user)
            os.chown(path, entry.pw_uid, entry.pw_gid)
        return path

    # -- configuration text ----------------------------------------------------------

    def render_slurm_conf(self) -> str:
        root = self.root
        lines = [
            "# written by tests/integration/slurm_lab.py; one node on loopback",
            f"ClusterName={CLUSTER}",
            f"SlurmctldHost={NODE}(127.0.0.1)",
            "SlurmUser=slurm",
            "SlurmdUser=root",
            f"SlurmctldPort={self.ports['slurmctld']}",
            f"SlurmdPort={self.ports['slurmd']}",
            "AuthType=auth/munge",
            f"AuthInfo=socket={self.munge_socket}",
            # bind to 127.0.0.1 only, never 0.0.0.0
            "CommunicationParameters=NoInAddrAny",
            f"StateSaveLocation={root}/state",
            f"SlurmdSpoolDir={root}/spool/slurmd",
            f"SlurmctldPidFile={root}/run/slurmctld.pid",
            f"SlurmdPidFile={root}/run/slurmd.pid",
            f"SlurmctldLogFile={self.log_dir}/slurmctld.log",
            f"SlurmdLogFile={self.log_dir}/slurmd.log",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            "MailProg=/bin/true",
            "ReturnToService=2",
            # trust the node line below rather than the VM's odd socket/core layout
            "SlurmdParameters=config_overrides",
            "",
        ]
        if self.cgroup_mode == "v1":
            lines += [
                "ProctrackType=proctrack/cgroup",
                "TaskPlugin=task/cgroup,task/affinity",
                "JobAcctGatherType=jobacct_gather/cgroup",
            ]
        else:  # no usable cgroups: poll /proc and kill over-limit steps ourselves
            lines += [
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/affinity",
                "JobAcctGatherType=jobacct_gather/linux",
                "JobAcctGatherParams=OverMemoryKill",
            ]
        lines += [
            "JobAcctGatherFrequency=task=1",
            "",
            "SchedulerType=sched/backfill",
            # start jobs within 1-2 s instead of the default 60 s / 30 s passes
            "SchedulerParameters=sched_interval=2,bf_interval=1",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            "DefMemPerCPU=100",
            "OverTimeLimit=0",
            "KillWait=5",
            # keep finished jobs in slurmctld for 10 min so `scontrol show job` works
            "MinJobAge=600",
            "InactiveLimit=0",
            "SlurmctldTimeout=30",
            "SlurmdTimeout=60",
            "",
            "AccountingStorageType=accounting_storage/slurmdbd",
            "AccountingStorageHost=localhost",
            f"AccountingStoragePort={self.ports['slurmdbd']}",
            # messages to slurmdbd take their munge socket from here, not AuthInfo
            f"AccountingStoragePass={self.munge_socket}",
            "AccountingStoreFlags=job_comment,job_env,job_script",
            # reject at submission what no partition can ever run, as most sites do
            *(["AccountingStorageEnforce=associations,limits,qos", "EnforcePartLimits=ALL",
               "PreemptType=preempt/qos", "PreemptMode=CANCEL"]
              if self.policies else []),
            *([f"GresTypes={','.join(self.gres)}",
               "AccountingStorageTRES=" + ",".join(f"gres/{n}" for n in self.gres)]
              if self.gres else []),
            "JobCompType=jobcomp/filetxt",
            f"JobCompLoc={self.log_dir}/jobcomp.txt",
            "",
        ]
        for key, script in (("Prolog", self.prolog), ("Epilog", self.epilog),
                            ("EpilogSlurmctld", self.epilog_slurmctld)):  # fmt: skip
            if script:
                lines.append(f"{key}={self.hooks_dir / script.name}")
        if self.prolog_epilog_timeout is not None:
            lines.append(f"PrologEpilogTimeout={int(self.prolog_epilog_timeout)}")
        cpus = os.cpu_count() or 1
        if self.submission_limits:
            # before localhost: 22.05 takes any name for the node while `localhost` is the only
            # one defined, and a node defined after it dies with "Duplicated NodeHostName"
            lines.append(f"NodeName={BIGMEM_NODE} NodeAddr=127.0.0.2 CPUs={BIGMEM_CPUS} "
                         f"RealMemory={BIGMEM_MEMORY_MB} State=FUTURE")
        debug_memory = (f" DefMemPerCPU={DEBUG_DEF_MEM_PER_CPU_MB} MaxMemPerNode={DEBUG_MAX_MEM_PER_NODE_MB}"
                        if self.submission_limits else "")  # fmt: skip
        lines += [
            f"NodeName={NODE} NodeHostname={NODE} NodeAddr=127.0.0.1 CPUs={cpus} "
            "RealMemory=2000 "
            + (f"Gres={','.join(f'{n}:{c}' for n, c in self.gres.items())} " if self.gres else "")
            + "State=UNKNOWN",
            f"PartitionName=main Nodes={NODE} Default=YES MaxTime=INFINITE State=UP",
            f"PartitionName=debug Nodes={NODE} MaxTime={self.debug_max_minutes}{debug_memory} State=UP",
        ]
        if self.submission_limits:
            lines.append(f"PartitionName={BIGMEM_PARTITION} Nodes={BIGMEM_NODE} MaxTime=INFINITE State=UP")
        return "\n".join(lines) + "\n"

    def render_gres_conf(self) -> str:
        # 22.05 drops a GPU without File= ("file-less GPU"), so each unit is a stand-in
        # device node (see _make_gres_devices); nothing binds it, ConstrainDevices is off
        return "".join(
            f"NodeName={NODE} Name={n} File={self.gres_dev}/{n}[0-{c - 1}]\n"
            for n, c in self.gres.items()
        )

    def _make_gres_devices(self) -> None:
        """Character devices with /dev/null's numbers, one per GRES unit: a valid File=
        for gres.conf on a machine without the hardware (reading one reads nothing)."""
        self.gres_dev.mkdir(mode=0o755)
        for name, count in self.gres.items():
            for i in range(count):
                os.mknod(self.gres_dev / f"{name}{i}", 0o666 | S_IFCHR, os.makedev(1, 3))

    def render_cgroup_conf(self) -> str:
        if self.cgroup_mode != "v1":
            return "# cgroups unused (proctrack/linuxproc)\n"
        return (
            "CgroupPlugin=cgroup/v1\n"
            "CgroupMountpoint=/sys/fs/cgroup\n"
            "CgroupAutomount=no\n"
            "ConstrainCores=yes\n"
            "ConstrainRAMSpace=yes\n"
            # the machine has no swap; memsw limits would only add noise
            "ConstrainSwapSpace=no\n"
        )

    def render_slurmdbd_conf(self) -> str:
        return (
            "AuthType=auth/munge\n"
            f"AuthInfo=socket={self.munge_socket}\n"
            "DbdHost=localhost\n"
            "DbdAddr=127.0.0.1\n"
            f"DbdPort={self.ports['slurmdbd']}\n"
            "SlurmUser=slurm\n"
            f"LogFile={self.log_dir}/slurmdbd.log\n"
            f"PidFile={self.root}/run/slurmdbd.pid\n"
            "DebugLevel=info\n"
            "StorageType=accounting_storage/mysql\n"
            "StorageHost=localhost\n"
            "StoragePort=3306\n"
            f"StorageUser={DB_USER}\n"
            f"StoragePass={DB_PASSWORD}\n"
            f"StorageLoc={DB_NAME}\n"
        )

    # -- daemons ---------------------------------------------------------------------

    def _spawn(self, name: str, argv: list[str], *, user: str | None = None) -> subprocess.Popen:
        console = open(self.log_dir / f"{name}.console", "ab")  # noqa: SIM115
        kwargs = {}
        if user:
            entry = pwd.getpwnam(user)
            kwargs = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
        proc = subprocess.Popen(
            argv,
            env=self.daemon_env(),
            stdin=subprocess.DEVNULL,
            stdout=console,
            stderr=subprocess.STDOUT,
            cwd=self.root,
            start_new_session=True,  # a Ctrl-C in pytest must not hit the daemons first
            **kwargs,
        )
        console.close()
        self._procs[name] = proc
        (self.root / "pids" / name).write_text(f"{proc.pid} {proc_start_time(proc.pid)}\n")
        return proc

    def _wait_ready(self, name: str, ready: Callable[[], bool], timeout: float, log: Path):
        proc = self._procs[name]

        def check() -> bool:
            if proc.poll() is not None:
                raise SlurmLabError(
                    f"{name} exited with {proc.returncode} during start-up.\n"
                    f"--- {log}:\n{_tail(log)}\n"
                    f"--- console:\n{_tail(self.log_dir / f'{name}.console')}"
                )
            return ready()

        try:
            _wait_until(f"{name} to be ready", check, timeout)
        except SlurmLabError as exc:
            if "timed out" in str(exc):
                raise SlurmLabError(f"{exc}\n--- {log}:\n{_tail(log)}") from None
            raise

    def _start_munged(self) -> None:
        self._spawn(
            "munged",
            [
                "/usr/sbin/munged", "--foreground",
                f"--socket={self.munge_socket}",
                f"--key-file={self.munge_dir / 'munge.key'}",
                f"--pid-file={self.munge_dir / 'munged.pid'}",
                f"--log-file={self.munge_dir / 'munged.log'}",
                f"--seed-file={self.munge_dir / 'munged.seed'}",
            ],
            user="munge",
        )  # fmt: skip

        def credential_round_trip() -> bool:
            sock = f"--socket={self.munge_socket}"
            cred = subprocess.run(["munge", sock, "-n"], capture_output=True, check=False)
            if cred.returncode != 0:
                return False
            back = subprocess.run(["unmunge", sock], input=cred.stdout, capture_output=True)
            return back.returncode == 0

        self._wait_ready("munged", credential_round_trip, 15, self.munge_dir / "munged.log")

    def _prepare_database(self) -> None:
        if not self._mariadb_answers():
            self._start_mariadb()
        self._mysql(
            f"DROP DATABASE IF EXISTS {DB_NAME}; CREATE DATABASE {DB_NAME};"
            f"CREATE USER IF NOT EXISTS '{DB_USER}'@'localhost' IDENTIFIED BY '{DB_PASSWORD}';"
            f"GRANT ALL ON {DB_NAME}.* TO '{DB_USER}'@'localhost'; FLUSH PRIVILEGES;"
        )

    @staticmethod
    def _mariadb_answers() -> bool:
        result = subprocess.run(
            ["mariadb-admin", "-uroot", "ping"], capture_output=True, check=False
        )
        return result.returncode == 0

    def _start_mariadb(self) -> None:
        run_dir = Path("/run/mysqld")
        run_dir.mkdir(exist_ok=True)
        shutil.chown(run_dir, "mysql", "mysql")
        pid_file = self.root / "run" / "mariadbd.pid"
        subprocess.run(
            ["start-stop-daemon", "--start", "--oknodo", "--background",
             "--make-pidfile", f"--pidfile={pid_file}", "--exec", "/usr/sbin/mariadbd"],
            check=True, capture_output=True,
        )  # fmt: skip
        _wait_until("MariaDB to answer", self._mariadb_answers, 60, interval=0.5)
        pid = int(pid_file.read_text().split()[0])
        self._mariadb_pid = pid
        (self.root / "pids" / "mariadbd").write_text(f"{pid} {proc_start_time(pid)}\n")

    @staticmethod
    def _mysql(sql: str) -> None:
        result = subprocess.run(
            ["mariadb", "-uroot", "-e", sql], capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            raise SlurmLabError(f"MariaDB refused the lab's setup SQL: {result.stderr.strip()}")

    def _start_slurmdbd(self) -> None:
        self._spawn("slurmdbd", ["/usr/sbin/slurmdbd", "-D"])
        self._wait_ready(
            "slurmdbd",
            lambda: self.run(["sacctmgr", "-n", "show", "cluster"], timeout=20).returncode == 0,
            60,
            self.log_dir / "slurmdbd.log",
        )
        # slurmctld registers with slurmdbd at start-up, so the cluster must exist first
        for argv in (
            ["sacctmgr", "-i", "add", "cluster", CLUSTER],
            ["sacctmgr", "-i", "add", "account", ACCOUNT,
             "Description=hpcmem-test", "Organization=hpcmem"],
            ["sacctmgr", "-i", "add", "user", self.user,
             f"Account={ACCOUNT}", f"DefaultAccount={ACCOUNT}"],
            ["sacctmgr", "-i", "add", "user", "root", f"Account={ACCOUNT}"],
            *(["sacctmgr", "-i", "add", "user", user, f"Account={ACCOUNT}", f"DefaultAccount={ACCOUNT}"]
              for user in self.extra_users),
        ):  # fmt: skip
            self.check(argv)
        if self.policies:
            self._add_policies()

    def _add_policies(self) -> None:
        """QOS `short` and `urgent` and account `teaching` (on `main` only) for the lab user."""
        for argv in (
            ["sacctmgr", "-i", "add", "qos", SHORT_QOS,
             f"MaxWall={self.short_qos_minutes}", "Flags=DenyOnLimit"],
            ["sacctmgr", "-i", "add", "qos", URGENT_QOS, "Preempt=normal", "PreemptMode=cancel"],
            *(["sacctmgr", "-i", "modify", "user", user, "set",
               f"QOS=normal,{SHORT_QOS},{URGENT_QOS}", "DefaultQOS=normal"]
              for user in (self.user, *self.extra_users)),
            ["sacctmgr", "-i", "add", "account", RESTRICTED_ACCOUNT,
             "Description=hpcmem-test-restricted", "Organization=hpcmem"],
            ["sacctmgr", "-i", "add", "user", self.user, f"Account={RESTRICTED_ACCOUNT}",
             f"Partition={RESTRICTED_ACCOUNT_PARTITION}"],
        ):  # fmt: skip
            self.check(argv)

    def _start_slurmctld(self) -> None:
        self._spawn("slurmctld", ["/usr/sbin/slurmctld", "-D"])
        self._wait_ready(
            "slurmctld",
            lambda: "is UP" in self.run(["scontrol", "ping"], timeout=20).stdout,
            30,
            self.log_dir / "slurmctld.log",
        )

    def _start_slurmd(self) -> None:
        # -N: the node name is `localhost` whatever hostname(1) says
        self._spawn("slurmd", ["/usr/sbin/slurmd", "-D", "-N", NODE])
        self._wait_ready("slurmd", lambda: self.node_state() == "idle", 30,
                         self.log_dir / "slurmd.log")  # fmt: skip

    def node_state(self) -> str:
        """sinfo's short state of the node: 'idle', 'mix', 'alloc', 'drain', ..."""
        result = self.run(["sinfo", "-h", "-n", NODE, "-o", "%t"], timeout=20)
        return result.stdout.split()[0] if result.stdout.split() else ""

    # -- tear-down ---------------------------------------------------------------------

    def down(self) -> None:
        """Cancel remaining jobs, stop every daemon this lab started (by PID), release
        the lock. Safe to call twice and from atexit."""
        if "slurmctld" in self._procs and self._procs["slurmctld"].poll() is None:
            self._cancel_all_jobs()
        for name in reversed(DAEMONS):
            proc = self._procs.pop(name, None)
            if proc is not None:
                self._terminate(proc.pid, name, proc)
                (self.root / "pids" / name).unlink(missing_ok=True)
        self._kill_orphan_steps()
        if self._mariadb_pid is not None:
            self._terminate(self._mariadb_pid, "mariadbd")
            (self.root / "pids" / "mariadbd").unlink(missing_ok=True)
            self._mariadb_pid = None
        if self._lock_fh is not None:
            self._lock_fh.close()  # closing releases the flock
            self._lock_fh = None

    def _cancel_all_jobs(self) -> None:
        # A running job's slurmstepd outlives slurmd; cancel so none is left behind.
        ids = self.run(["squeue", "-h", "-o", "%A"], timeout=20).stdout.split()
        if not ids:
            return
        self.run(["scancel", "--full", *ids], timeout=20)
        try:
            _wait_until(
                "jobs to leave the queue",
                lambda: not self.run(["squeue", "-h", "-o", "%A"], timeout=20).stdout.split(),
                20,
                interval=0.5,
            )
        except SlurmLabError:
            pass  # stop the daemons anyway

    @staticmethod
    def _terminate(pid: int, name: str, proc: subprocess.Popen | None = None) -> None:
        start = proc_start_time(pid)
        if start is None:
            if proc is not None:
                proc.poll()  # reap
            return
        for sig, grace in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                return
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline:
                if proc is not None:
                    if proc.poll() is not None:
                        return
                elif proc_start_time(pid) != start:
                    return
                time.sleep(0.1)

    # -- a lab kept up for people (python -m tests.integration.slurm_lab) ----------------

    def _record_created(self, user: str, group: str | None) -> None:
        record = self.created()
        if user not in record["users"]:
            record["users"].append(user)
        if group and group not in record["groups"]:
            record["groups"].append(group)
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / CREATED_RECORD).write_text(json.dumps(record, indent=1) + "\n")

    def created(self) -> dict[str, list[str]]:
        """The OS users and groups up() created under this root (never ones that existed)."""
        try:
            record = json.loads((self.root / CREATED_RECORD).read_text())
        except (OSError, ValueError):
            record = {}
        return {"users": list(record.get("users", [])), "groups": list(record.get("groups", []))}

    def detach(self) -> None:
        """Leave the daemons running after this process exits (after up()).

        The daemons already run in their own sessions; what ended them was the atexit
        down(). The lock passes to a `sleep infinity` that inherits its descriptor, so a
        pytest session waits while the lab is kept up, and `down` in a later process finds
        every PID (with its start time) under ``pids/``.
        """
        if self._lock_fh is None or "slurmctld" not in self._procs:
            raise SlurmLabError("detach() needs a lab this process brought up")
        keeper = subprocess.Popen(
            ["sleep", "infinity"], pass_fds=(self._lock_fh.fileno(),), start_new_session=True,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        (self.root / "pids" / LOCK_KEEPER).write_text(
            f"{keeper.pid} {proc_start_time(keeper.pid)}\n"
        )
        state = {
            "slurm_conf": str(self.conf), "user": self.user, "extra_users": list(self.extra_users),
            "gres": self.gres, "policies": self.policies, "submission_limits": self.submission_limits,
            "cgroup": self.cgroup_mode,
            "ports": self.ports, "started_at": self.started_at.isoformat() if self.started_at else None,
        }  # fmt: skip
        (self.root / STATE_RECORD).write_text(json.dumps(state, indent=1) + "\n")
        if self._atexit_registered:
            atexit.unregister(self.down)
            self._atexit_registered = False
        self._procs.clear()  # no longer ours to stop at exit
        self._mariadb_pid = None
        self._lock_fh.close()  # the keeper still holds the flock
        self._lock_fh = None

    def recorded_pids(self) -> dict[str, int | None]:
        """Each recorded daemon (and the lock keeper) -> its pid when that process is
        still the one recorded (same start time), else None."""
        alive: dict[str, int | None] = {}
        pid_dir = self.root / "pids"
        names = [*DAEMONS, "mariadbd", LOCK_KEEPER]
        for name in names:
            try:
                pid_text, start = (pid_dir / name).read_text().split()
            except (OSError, ValueError):
                continue
            pid = int(pid_text)
            alive[name] = pid if proc_start_time(pid) == start else None
        return alive

    def detached_state(self) -> dict | None:
        """What `up` recorded when it detached, or None."""
        try:
            return json.loads((self.root / STATE_RECORD).read_text())
        except (OSError, ValueError):
            return None

    def purge(self) -> list[str]:
        """Stop the lab and remove everything up() created apart from packages: the
        daemons (by pid and start time, also those of a detached lab), the
        ``slurm_localhost`` cgroup directories, the database DB_NAME and DB user
        DB_USER, the OS users and groups recorded in ``created.json``, and the root.
        The empty ``<root>.lock`` stays (unlinking a lock file races its next user).
        Returns what could not be removed (empty when everything went)."""
        keeper = self.recorded_pids().get(LOCK_KEEPER)
        if keeper is None:
            self._take_lock(wait=False)  # nobody keeps this lab: it must be free
        lock, self._lock_fh = self._lock_fh, None  # down() would release it too early
        self.down()  # this process's own daemons, if it started any
        self._lock_fh = lock
        self._stop_leftovers()  # a detached lab's (or a crashed run's) daemons
        problems: list[str] = []
        problems += self._remove_cgroups()
        problems += self._drop_database()
        mariadb = self._mariadb_pid or self.recorded_pids().get("mariadbd")
        if mariadb is not None:  # a MariaDB the lab started itself
            self._terminate(mariadb, "mariadbd")
            self._mariadb_pid = None
        problems += self._remove_created_accounts()
        if self.root.exists():
            shutil.rmtree(self.root, ignore_errors=True)
            if self.root.exists():
                problems.append(f"{self.root} could not be removed")
        if keeper is not None:  # last: its death frees the lock, and a waiting lab starts at once
            self._terminate(keeper, LOCK_KEEPER)
        if self._lock_fh is not None:
            self._lock_fh.close()
            self._lock_fh = None
        return problems

    @staticmethod
    def cgroup_dirs() -> list[Path]:
        """slurmd's cgroup v1 directories for the node, one per controller."""
        if not CGROUP_ROOT.is_dir():
            return []
        return sorted(p / f"slurm_{NODE}" for p in CGROUP_ROOT.iterdir()
                      if (p / f"slurm_{NODE}").is_dir())  # fmt: skip

    def _remove_cgroups(self) -> list[str]:
        # A cgroup goes with rmdir, deepest first (its files cannot be unlinked); a
        # step's group may stay busy for a moment after the step ended.
        left: list[str] = []
        for top in self.cgroup_dirs():
            deadline = time.monotonic() + 10
            while top.exists():
                for dirpath, _, _ in os.walk(top, topdown=False):
                    try:
                        os.rmdir(dirpath)
                    except OSError:
                        pass
                if not top.exists() or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            if top.exists():
                left.append(f"cgroup {top} is still in use")
        return left

    def _drop_database(self) -> list[str]:
        if not self._mariadb_answers():
            return [f"MariaDB does not answer: database {DB_NAME} and user {DB_USER} not dropped"]
        try:
            self._mysql(f"DROP DATABASE IF EXISTS {DB_NAME};"
                        f"DROP USER IF EXISTS '{DB_USER}'@'localhost'; FLUSH PRIVILEGES;")  # fmt: skip
        except SlurmLabError as exc:
            return [str(exc)]
        return []

    def _remove_created_accounts(self) -> list[str]:
        record, left = self.created(), []
        for user in record["users"]:
            if _user_exists(user):
                result = subprocess.run(["userdel", "--remove", user],
                                        capture_output=True, text=True, check=False)  # fmt: skip
                if _user_exists(user):
                    left.append(f"userdel {user} failed: {result.stderr.strip()}")
        for group in record["groups"]:
            if _group_exists(group):  # userdel removes a user's own group; not always
                subprocess.run(["groupdel", group], capture_output=True, check=False)
                if _group_exists(group):
                    left.append(f"groupdel {group} failed")
        return left

    # -- running commands ----------------------------------------------------------------

    def daemon_env(self) -> dict[str, str]:
        return {"PATH": SYSTEM_PATH, "LANG": "C.UTF-8", "SLURM_CONF": str(self.conf)}

    def client_env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """Environment for Slurm clients; jobs inherit it (sbatch exports it all).
        HPCMEM_LAB_MODULES and HPCMEM_LAB_LMOD_INIT let job scripts load modules."""
        env = self.daemon_env()
        env["HPCMEM_LAB_MODULES"] = str(self.module_path)
        if self.lmod_init:
            env["HPCMEM_LAB_LMOD_INIT"] = str(self.lmod_init)
        env.update(extra or {})
        return env

    def run(
        self,
        argv: Sequence[str],
        *,
        user: str | None = None,
        cwd: Path | str | None = None,
        env: dict[str, str] | None = None,
        timeout: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        """Run a command with the lab's SLURM_CONF, as root or (via runuser) as ``user``."""
        argv = list(argv)
        if user and user != "root":
            # runuser without -l keeps our environment (SLURM_CONF) and sets HOME/USER
            argv = ["runuser", "-u", user, "--", *argv]
        return subprocess.run(
            argv,
            cwd=cwd,
            env=self.client_env(env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def run_as(self, user: str, argv: Sequence[str], **kwargs) -> subprocess.CompletedProcess[str]:
        return self.run(argv, user=user, **kwargs)

    def check(self, argv: Sequence[str], **kwargs) -> str:
        """run() that raises SlurmLabError (with stderr) on a non-zero exit; returns stdout."""
        result = self.run(argv, **kwargs)
        if result.returncode != 0:
            raise SlurmLabError(
                f"{' '.join(argv)} exited {result.returncode}: "
                f"{(result.stderr or result.stdout).strip()}"
            )
        return result.stdout

    # -- jobs ----------------------------------------------------------------------------

    def submit(
        self,
        script: str | Path,
        *,
        user: str | None = None,
        args: Sequence[str] = (),
        cwd: Path | str | None = None,
        env: dict[str, str] | None = None,
    ) -> int:
        """sbatch a job as ``user`` (default: the lab user) and return its id.

        ``script`` is a Path to a script file or the script text itself; either way it
        is written into ``cwd`` (default: the user's work dir) owned by the user, so
        the submission is exactly what a user would type there. ``env`` adds variables
        to the submitting environment (the job inherits them). Raises
        SubmissionRejected (exit code, stdout, stderr) when sbatch refuses the job.
        """
        user = user or self.user
        cwd = Path(cwd) if cwd else self.workdir(user)
        if isinstance(script, Path):
            name, text = script.name, script.read_text()
        else:
            self._script_counter += 1
            name, text = f"job-{self._script_counter}.sh", script
        path = cwd / name
        path.write_text(text)
        entry = pwd.getpwnam(user)
        os.chown(path, entry.pw_uid, entry.pw_gid)
        argv = ["sbatch", "--parsable", *args, name]
        result = self.run(argv, user=user, cwd=cwd, env=env)
        match = re.fullmatch(r"(\d+)(;\S+)?", result.stdout.strip())
        if result.returncode != 0 or match is None:
            raise SubmissionRejected(argv, result.returncode, result.stdout, result.stderr)
        return int(match.group(1))

    def stage(self, source: Path, *, user: str | None = None, cwd: Path | None = None) -> Path:
        """Copy a helper file (e.g. a Python program a job runs) into the work dir."""
        user = user or self.user
        target = (cwd or self.workdir(user)) / source.name
        shutil.copyfile(source, target)
        entry = pwd.getpwnam(user)
        os.chown(target, entry.pw_uid, entry.pw_gid)
        return target

    def job_info(self, job_id: int) -> dict[str, str]:
        """`scontrol show job -o` as a dict (empty once slurmctld forgot the job).
        Values with spaces (Command=, SubmitLine) are cut at the first space."""
        result = self.run(["scontrol", "show", "job", "-o", str(job_id)], timeout=20)
        if result.returncode != 0:
            return {}
        info = {}
        for token in result.stdout.split():
            key, sep, value = token.partition("=")
            if sep and key not in info:
                info[key] = value
        return info

    def job_state(self, job_id: int) -> str:
        """Base state ('RUNNING', 'OUT_OF_MEMORY', ...), from slurmctld, else sacct."""
        state = self.job_info(job_id).get("JobState")
        if state:
            return state
        rows = self.sacct(["-X", "-n", "-P", "-j", str(job_id), "--format=State"]).split()
        return rows[0] if rows else "UNKNOWN"

    def wait(self, job_id: int, timeout: float = 120) -> str:
        """Wait until the job has left PENDING/RUNNING/COMPLETING; return its state."""
        states: dict[str, str] = {}

        def finished() -> bool:
            states["last"] = self.job_state(job_id)
            return states["last"] not in ACTIVE_STATES

        _wait_until(f"job {job_id} to finish", finished, timeout, interval=0.5)
        return states["last"]

    def wait_running(self, job_id: int, timeout: float = 60) -> None:
        _wait_until(f"job {job_id} to start",
                    lambda: self.job_state(job_id) == "RUNNING", timeout, interval=0.3)  # fmt: skip

    @property
    def since(self) -> str:
        """The lab's start as sacct's --starttime wants it (local time, no zone)."""
        if self.started_at is None:
            raise SlurmLabError("the lab is not up")
        return self.started_at.astimezone().strftime("%Y-%m-%dT%H:%M:%S")

    def wait_accounted(self, job_ids: Iterable[int], timeout: float = 30) -> dict[int, str]:
        """Wait until a time-window query (what ingest runs) shows every job in a
        final state; return job id -> sacct State.

        Querying by -j is not enough: slurmdbd first holds a partial record (JobName
        'allocation', Eligible Unknown) that -j finds but a --starttime window misses.
        """
        wanted = {int(j) for j in job_ids}
        found: dict[int, str] = {}

        def all_final() -> bool:
            text = self.sacct(["-X", "-n", "-P", "--allusers", "--starttime", self.since,
                               "--format=JobID,State"])  # fmt: skip
            found.clear()
            for line in text.splitlines():
                job, _, state = line.partition("|")
                if job.isdigit() and int(job) in wanted:
                    found[int(job)] = state
            return all(
                found.get(j, "PENDING").split()[0] not in ACTIVE_STATES for j in wanted
            )

        _wait_until("slurmdbd to record the jobs", all_final, timeout, interval=0.5)
        return dict(found)

    def force_timeout(self, job_id: int) -> None:
        """Drop a running job's time limit to 0 (root only): slurmctld ends it as
        TIMEOUT at its next time-limit check, within ~30 s."""
        self.check(["scontrol", "update", f"JobId={job_id}", "TimeLimit=0"])

    def sacct(self, args: Sequence[str], *, user: str | None = None) -> str:
        """sacct's stdout; SlurmLabError with its stderr on failure."""
        return self.check(["sacct", *args], user=user)

    def job_paths(self, job_id: int) -> JobPaths:
        """The job's stdout/stderr files (while slurmctld still knows the job)."""
        info = self.job_info(job_id)
        out, err = info.get("StdOut"), info.get("StdErr")
        return JobPaths(Path(out) if out else None, Path(err) if err else None)

    def job_output(self, job_id: int) -> str:
        """The text of the job's stdout, plus its stderr when that is a separate file."""
        paths = self.job_paths(job_id)
        texts = []
        for path in dict.fromkeys(p for p in (paths.stdout, paths.stderr) if p):
            texts.append(path.read_text(errors="replace") if path.exists() else "")
        return "".join(texts)

    # -- inspection ----------------------------------------------------------------------

    def daemon_pids(self) -> dict[str, int]:
        pids = {name: proc.pid for name, proc in self._procs.items() if proc.poll() is None}
        if self._mariadb_pid is not None:
            pids["mariadbd"] = self._mariadb_pid
        return pids

    def __enter__(self) -> SlurmLab:
        return self.up()

    def __exit__(self, *exc) -> None:
        self.down()



if __name__ == "__main__":  # python -m tests.integration.slurm_lab up|down|status
    from tests.integration.lab_cli import main

    raise SystemExit(main())
