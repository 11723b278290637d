#!/usr/bin/env python3
"""Make the context corpus (data/corpus/context/) on the real Slurm lab.

Brings up the single-node Slurm 22.05 cluster of tests/integration/slurm_lab.py with a
GPU GRES and its opt-in policies (account `teaching` on `main` only, QOS `short` and
`urgent`, EnforcePartLimits=ALL), builds a small library that a module provides, submits
every case of ``cases.py`` as the lab's ordinary user, cancels / preempts the ones that ask
for it, waits, and writes one instance per case: the text the user sees (sbatch's stderr,
or the tail of the job's output file) and the job's context read from the real sources
(the request in the script and arguments, sacct, the job's own environment).

Run as root on Debian/Ubuntu (the lab installs packages and starts daemons), from the
repository: ``.venv/bin/python bench/context_corpus/make_context_corpus.py``. Takes about
8 minutes, most of it waiting for time limits. ``--out DIR`` writes elsewhere.

``--set validation`` makes the validation collection (data/corpus/context-validation/) instead:
the cases of ``cases_validation.py`` with the classes of ``classes_validation.jsonl`` and the
job scripts of ``jobs_validation/``, on the same cluster plus a second user (``bob``, default
account ``imaging``, account ``research`` on ``debug`` only), a second module-provided library
(``libhpcblas.so.1``/``.so.2``) and numpy in project venvs; every instance in part
``validation``. The default set is unchanged.

``--set fresh`` makes the third collection (data/corpus/context-fresh/): the cases of
``cases_fresh.py`` with the classes of ``classes_fresh.jsonl`` and the job scripts of
``jobs_fresh/``, on the validation set's cluster (the same user bob and associations, the same
software build); every instance in part ``fresh``. The other sets are unchanged.

``--set fresh2`` makes the fourth collection (data/corpus/context-fresh2/): the cases of
``cases_fresh2.py`` with the classes of ``classes_fresh2.jsonl`` and the job scripts of
``jobs_fresh2/``, on the same cluster as validation and fresh (user bob, his associations, the
same software build); every instance in part ``fresh2``. The other sets are unchanged.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import pwd
import re
import shlex
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

from cases import CASES, Case, part_of_family  # noqa: E402
from cases_validation import CASES as VALIDATION_CASES  # noqa: E402
from cases_fresh import CASES as FRESH_CASES  # noqa: E402
from cases_fresh2 import CASES as FRESH2_CASES  # noqa: E402
from tests.integration.slurm_lab import ACTIVE_STATES, SlurmLab, SubmissionRejected  # noqa: E402

from hpcmem.kb.slurm_units import (  # noqa: E402
    parse_duration,
    parse_exit_code,
    parse_size_mb,
    parse_state,
    parse_timelimit,
    parse_tres,
)

JOBS = HERE / "jobs"
PROGRAMS = HERE / "programs"
OUT = REPO / "data" / "corpus" / "context"
# What each set is made of; "context" is the first collection (calibration / held-out split),
# "validation" the later one (one part), "fresh" the third (one part), "fresh2" the fourth (one part).
SETS = {
    "context": {"cases": CASES, "classes": HERE / "classes.jsonl", "jobs": JOBS, "out": OUT, "prefix": "ctx",
                "urgent": "urgent.sh", "extra_users": ()},
    "validation": {"cases": VALIDATION_CASES, "classes": HERE / "classes_validation.jsonl",
                   "jobs": HERE / "jobs_validation", "out": REPO / "data" / "corpus" / "context-validation",
                   "prefix": "ctxv", "urgent": "hotfix.sh", "extra_users": ("bob",)},
    "fresh": {"cases": FRESH_CASES, "classes": HERE / "classes_fresh.jsonl",
              "jobs": HERE / "jobs_fresh", "out": REPO / "data" / "corpus" / "context-fresh",
              "prefix": "ctxf", "urgent": "rush.sh", "extra_users": ("bob",)},
    "fresh2": {"cases": FRESH2_CASES, "classes": HERE / "classes_fresh2.jsonl",
               "jobs": HERE / "jobs_fresh2", "out": REPO / "data" / "corpus" / "context-fresh2",
               "prefix": "ctxg", "urgent": "expedite.sh", "extra_users": ("bob",)},
}  # fmt: skip
# The sets made on the validation set's cluster: its user bob's associations and its software.
WITH_VALIDATION_SETUP = ("validation", "fresh", "fresh2")
TAIL_LINES = 15
# The flat context of issue 26, the keys of kb/jobs/context.py's FIELDS; null = not known.
CONTEXT_KEYS = (
    "partition", "account", "qos", "mem_mb", "mem_per_cpu_mb", "cpus", "gpus", "gres", "nodes",
    "time_limit_s", "constraint",
    "max_rss_mb", "elapsed_s", "exit_code", "signal", "state",
    "modules", "conda_env", "venv", "python", "packages",
    "command", "script_sha256", "workdir", "launcher", "job_name",
)  # fmt: skip
SACCT_FIELDS = ("JobID", "JobName", "Partition", "Account", "QOS", "ReqTRES", "AllocTRES", "ReqMem",
                "ReqCPUS", "AllocCPUS", "NNodes", "Timelimit", "Elapsed", "State", "ExitCode", "MaxRSS",
                "SubmitLine", "WorkDir")  # fmt: skip
SHORT = {"-J": "--job-name", "-p": "--partition", "-A": "--account", "-q": "--qos", "-c": "--cpus-per-task",
         "-n": "--ntasks", "-N": "--nodes", "-t": "--time", "-G": "--gpus", "-o": "--output", "-C": "--constraint"}
LAUNCHERS = ("srun", "mpirun", "mpiexec", "torchrun")
INTERPRETERS = ("python3", "python", "bash", "sh", "Rscript", "perl")
NOT_COMMANDS = re.compile(r"^(?:#|export\b|source\b|\.\s|module\b|set\b|env\b|echo\b|if\b|fi\b|for\b|do\b|done\b|"
                          r"sleep\b|then\b|else\b)")
LUA = """-- made by bench/context_corpus/make_context_corpus.py for the context corpus
help([[hpcfft {version}: a small FFT library (libhpcfft.so.{soname})]])
whatis("Name: hpcfft")
whatis("Version: {version}")
family("hpcfft")
prepend_path("LD_LIBRARY_PATH", "{libdir}")
"""
BLAS_LUA = """-- made by bench/context_corpus/make_context_corpus.py for the context corpus (validation set)
help([[hpcblas {version}: a small BLAS library (libhpcblas.so.{soname})]])
whatis("Name: hpcblas")
whatis("Version: {version}")
family("hpcblas")
prepend_path("LD_LIBRARY_PATH", "{libdir}")
"""
# The validation set's second user and its associations (made by this driver, not the lab):
# bob's default account is imaging (any partition); research he may use on debug only.
VALIDATION_ACCOUNT = "imaging"


# -- the request as written -----------------------------------------------------------------

def option_pairs(script_text: str, args: tuple[str, ...]) -> list[tuple[str, str]]:
    """(long option, value) from the script's #SBATCH lines, then the arguments (later wins)."""
    words = []
    for line in script_text.splitlines():
        if line.startswith("#SBATCH"):
            words += shlex.split(line[len("#SBATCH"):])
        elif line.strip() and not line.startswith("#"):
            break  # sbatch stops reading directives at the first command
    words += list(args)
    pairs, i = [], 0
    while i < len(words):
        word = words[i]
        if word.startswith("--") and "=" in word:
            key, value = word.split("=", 1)
        elif word in SHORT or word.startswith("--"):
            key, value = word, words[i + 1]
            i += 1
        else:
            raise ValueError(f"unexpected sbatch word {word!r}")
        pairs.append((SHORT.get(key, key), value))
        i += 1
    return pairs


def request_context(pairs: list[tuple[str, str]]) -> dict:
    opts = dict(pairs)
    ctx: dict = {}
    for key, field in (("--partition", "partition"), ("--account", "account"), ("--qos", "qos"),
                       ("--job-name", "job_name"), ("--constraint", "constraint")):  # fmt: skip
        if key in opts:
            ctx[field] = opts[key]
    if "--mem" in opts:
        ctx["mem_mb"] = parse_size_mb(opts["--mem"])
    if "--mem-per-cpu" in opts:
        ctx["mem_per_cpu_mb"] = parse_size_mb(opts["--mem-per-cpu"])
    per_task, tasks = int(opts.get("--cpus-per-task", 1)), int(opts.get("--ntasks", 1))
    if "--ntasks-per-node" in opts and "--ntasks" not in opts:
        tasks = int(opts["--ntasks-per-node"]) * int(opts.get("--nodes", 1))
    ctx["cpus"] = max(per_task * tasks, int(opts.get("--mincpus", 1)))
    ctx["nodes"] = int(opts.get("--nodes", 1))
    if "--time" in opts:
        ctx["time_limit_s"] = int(parse_duration(opts["--time"]))
    gres = []
    if "--gres" in opts:
        gres = [g if g.rsplit(":", 1)[-1].isdigit() else g + ":1" for g in opts["--gres"].split(",")]
    for key in ("--gpus", "--gpus-per-node"):
        if key in opts:
            gres = [f"gpu:{opts[key]}"]
    if "--gpus-per-task" in opts:  # per task: the job's count is that times the tasks
        kind, _, count = opts["--gpus-per-task"].rpartition(":")
        gres = [f"gpu:{kind + ':' if kind else ''}{int(count) * tasks}"]
    if gres:
        ctx["gres"] = gres
        gpus = [int(g.rsplit(":", 1)[1]) for g in gres if g.split(":", 1)[0] == "gpu"]
        if gpus:
            ctx["gpus"] = sum(gpus)
    return ctx


def program_context(script_text: str) -> dict:
    """The program the script fails in: its last command line (launcher split off)."""
    lines = [ln.strip() for ln in script_text.splitlines()]
    commands = [ln for ln in lines if ln and not NOT_COMMANDS.match(ln)]
    ctx: dict = {"script_sha256": hashlib.sha256(script_text.encode()).hexdigest()}
    if not commands:
        ctx["command"] = "bash"  # a shell loop: the batch script is the program
        return ctx
    words = shlex.split(commands[-1], comments=True)
    if words and words[0] in LAUNCHERS:
        ctx["launcher"] = words[0]
        words = words[1:]
        while words and words[0].startswith("-"):
            words = words[1:]
    program = words[0].rsplit("/", 1)[-1]
    if program in INTERPRETERS and len(words) > 1 and not words[1].startswith("-"):
        program = f"{program} {words[1]}"
    ctx["command"] = program
    return ctx


# -- what Slurm and the job recorded --------------------------------------------------------

def sacct_rows(lab: SlurmLab, job_id: int, fields: list[str]) -> list[dict]:
    text = lab.sacct(["-j", str(job_id), "-P", "-n", f"--format={','.join(fields)}"])
    return [dict(zip(fields, line.split("|"), strict=True)) for line in text.splitlines() if line]


def job_context(rows: list[dict], pairs: list[tuple[str, str]]) -> dict:
    alloc = next(r for r in rows if "." not in r["JobID"])
    ctx: dict = {"partition": alloc["Partition"], "account": alloc["Account"], "qos": alloc["QOS"],
                 "job_name": alloc["JobName"]}
    tres = parse_tres(alloc["ReqTRES"])
    nodes = int(alloc["NNodes"] or 1)
    ctx["nodes"] = nodes
    if "mem" in tres:
        ctx["mem_mb"] = parse_size_mb(tres["mem"]) / nodes
    mem_per_cpu = dict(pairs).get("--mem-per-cpu")  # sacct 22.05 no longer says per CPU
    if mem_per_cpu:
        ctx["mem_per_cpu_mb"] = parse_size_mb(mem_per_cpu)
        ctx.pop("mem_mb")
    ctx["cpus"] = int(alloc["AllocCPUS"] or alloc["ReqCPUS"])
    gres = [f"{k.removeprefix('gres/').replace('=', ':')}:{v}" for k, v in tres.items() if k.startswith("gres/")]
    if gres:
        ctx["gres"] = gres
        ctx["gpus"] = sum(int(v) for k, v in tres.items() if k.split(":")[0] == "gres/gpu")
    ctx["time_limit_s"] = parse_timelimit(alloc["Timelimit"])
    ctx["elapsed_s"] = int(parse_duration(alloc["Elapsed"]) or 0)
    ctx["exit_code"], ctx["signal"] = parse_exit_code(alloc["ExitCode"])
    ctx["state"] = parse_state(alloc["State"])[0]
    rss = [parse_size_mb(r["MaxRSS"], bare_unit="B") for r in rows if r["MaxRSS"]]
    if rss:
        ctx["max_rss_mb"] = round(max(v for v in rss if v is not None), 1)
    if alloc.get("WorkDir"):
        ctx["workdir"] = alloc["WorkDir"]
    return ctx


def job_env(workdir: Path, job_id: int) -> dict[str, str]:
    """The job's environment as its script wrote it (after its module loads)."""
    path = workdir / f".job-env.{job_id}"
    if not path.exists():
        return {}
    env = {}
    for line in path.read_text(errors="replace").splitlines():
        key, sep, value = line.partition("=")
        if sep and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            env[key] = value
    return env


def env_context(env: dict[str, str], lab: SlurmLab, command: str | None, user: str | None = None,
                packages: tuple[str, ...] = ()) -> dict:
    ctx: dict = {"modules": [m for m in env.get("LOADEDMODULES", "").split(":") if m]}
    if env.get("CONDA_DEFAULT_ENV"):
        ctx["conda_env"] = env["CONDA_DEFAULT_ENV"]
    if env.get("VIRTUAL_ENV"):
        ctx["venv"] = env["VIRTUAL_ENV"]
    if command and command.split()[0].startswith("python"):
        # the interpreter the job's PATH finds, asked as the job's user
        result = lab.run_as(user or lab.user, ["env", f"PATH={env.get('PATH', '')}", command.split()[0], "-c",
                                               "import platform; print(platform.python_version())"])
        if result.returncode == 0:
            ctx["python"] = result.stdout.strip()
        versions = {}
        for name in packages:  # named by the case: what that interpreter imports
            result = lab.run_as(user or lab.user, ["env", f"PATH={env.get('PATH', '')}", command.split()[0], "-c",
                                                   f"import importlib.metadata as m; print(m.version({name!r}))"])
            if result.returncode == 0:
                versions[name] = result.stdout.strip()
        if versions:
            ctx["packages"] = versions
    return ctx


def tail(path: Path | None, lines: int = TAIL_LINES) -> str:
    if path is None or not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").rstrip("\n").splitlines()[-lines:])


# -- the lab --------------------------------------------------------------------------------

def chown_to(path: Path, user: str) -> None:
    entry = pwd.getpwnam(user)
    shutil.chown(path, entry.pw_uid, entry.pw_gid)


def build_software(lab: SlurmLab) -> Path:
    """libhpcfft.so.1 / .so.2 under the lab's sw/, modules hpcfft/1.0 and 2.0 that put them on
    LD_LIBRARY_PATH, and the programs (solver linked to .so.1 without rpath, membench)."""
    build = lab.root / "corpus-build"
    shutil.rmtree(build, ignore_errors=True)
    build.mkdir()
    for version, soname in (("1.0", "1"), ("2.0", "2")):
        libdir = lab.root / "sw" / "hpcfft" / version / "lib"
        shutil.rmtree(libdir.parent, ignore_errors=True)
        libdir.mkdir(parents=True)
        lib = libdir / f"libhpcfft.so.{soname}"
        subprocess.run(["gcc", "-shared", "-fPIC", f"-Wl,-soname,libhpcfft.so.{soname}", "-o", str(lib),
                        str(PROGRAMS / "hpcfft.c")], check=True)  # fmt: skip
        (libdir / "libhpcfft.so").symlink_to(lib.name)
        moddir = lab.module_path / "hpcfft"
        moddir.mkdir(exist_ok=True)
        (moddir / f"{version}.lua").write_text(LUA.format(version=version, soname=soname, libdir=libdir))
        for path in (lab.root / "sw", lab.root / "sw" / "hpcfft", libdir.parent, libdir, moddir):
            path.chmod(0o755)
    lib1 = lab.root / "sw" / "hpcfft" / "1.0" / "lib"
    subprocess.run(["gcc", "-O2", "-o", str(build / "solver"), str(PROGRAMS / "solver.c"), f"-L{lib1}",
                    "-lhpcfft"], check=True)  # fmt: skip
    shutil.copyfile(build / "solver", build / "fft_bench")
    subprocess.run(["gcc", "-O2", "-o", str(build / "membench"), str(PROGRAMS / "membench.c")], check=True)
    for name in ("solver", "fft_bench", "membench"):
        (build / name).chmod(0o755)
    for name in ("grow.py", "simulate.py", "load_fft.py"):
        shutil.copyfile(PROGRAMS / name, build / name)
    return build


def build_validation_software(lab: SlurmLab, build: Path) -> None:
    """For the validation set, beside build_software's: libhpcblas.so.1 / .so.2 behind modules
    hpcblas/1.0 and 2.0, dgemm_bench (linked to .so.1) and eigsolve (.so.2) without rpath, the
    C programs stencil and heat. (numpy goes into each project's venv, see stage: a system-wide
    python3-numpy would shadow the numpy of other tools that run on the system Python.)"""
    for version, soname in (("1.0", "1"), ("2.0", "2")):
        libdir = lab.root / "sw" / "hpcblas" / version / "lib"
        shutil.rmtree(libdir.parent, ignore_errors=True)
        libdir.mkdir(parents=True)
        lib = libdir / f"libhpcblas.so.{soname}"
        subprocess.run(["gcc", "-shared", "-fPIC", f"-Wl,-soname,libhpcblas.so.{soname}", "-o", str(lib),
                        str(PROGRAMS / "hpcblas.c")], check=True)  # fmt: skip
        (libdir / "libhpcblas.so").symlink_to(lib.name)
        moddir = lab.module_path / "hpcblas"
        moddir.mkdir(exist_ok=True)
        (moddir / f"{version}.lua").write_text(BLAS_LUA.format(version=version, soname=soname, libdir=libdir))
        for path in (lab.root / "sw" / "hpcblas", libdir.parent, libdir, moddir):
            path.chmod(0o755)
    for program, version in (("dgemm_bench", "1.0"), ("eigsolve", "2.0")):
        libdir = lab.root / "sw" / "hpcblas" / version / "lib"
        subprocess.run(["gcc", "-O2", "-o", str(build / program), str(PROGRAMS / f"{program}.c"), f"-L{libdir}",
                        "-lhpcblas"], check=True)  # fmt: skip
    for program in ("stencil", "heat"):
        subprocess.run(["gcc", "-O2", "-o", str(build / program), str(PROGRAMS / f"{program}.c")], check=True)
    for name in ("dgemm_bench", "eigsolve", "stencil", "heat"):
        (build / name).chmod(0o755)
    for name in ("features_np.py", "blas_check.py"):
        shutil.copyfile(PROGRAMS / name, build / name)


def validation_accounts(lab: SlurmLab) -> None:
    """bob: default account imaging (any partition); research on debug only; the lab's QOS."""
    for argv in (
        ["sacctmgr", "-i", "add", "account", VALIDATION_ACCOUNT, "Description=hpcmem-validation", "Organization=hpcmem"],
        ["sacctmgr", "-i", "add", "user", "bob", f"Account={VALIDATION_ACCOUNT}"],
        ["sacctmgr", "-i", "modify", "user", "bob", "set", f"DefaultAccount={VALIDATION_ACCOUNT}"],
        ["sacctmgr", "-i", "delete", "user", "bob", "account=research"],
        ["sacctmgr", "-i", "add", "user", "bob", "Account=research", "Partition=debug"],
        ["sacctmgr", "-i", "modify", "user", "bob", "set", "QOS=normal,short,urgent", "DefaultQOS=normal"],
    ):  # fmt: skip
        lab.check(argv)


def project_dir(lab: SlurmLab, project: str, user: str | None = None) -> Path:
    user = user or lab.user
    path = lab.workdir(user) / project
    if not path.is_dir():
        path.mkdir()
        chown_to(path, user)
    return path


def stage(lab: SlurmLab, build: Path, case: Case, workdir: Path) -> None:
    for name in case.stage:
        target = workdir / name
        if target.exists() and target.read_bytes() == (build / name).read_bytes():
            continue  # staged for an earlier case (and maybe running: a busy binary cannot be rewritten)
        shutil.copyfile(build / name, target)
        target.chmod(0o755)
        chown_to(target, case.user or lab.user)
    if case.venv and not (workdir / ".venv").exists():  # the project's own venv, made by its user with pip
        for argv in (["python3", "-m", "venv", ".venv"],
                     [".venv/bin/python", "-m", "pip", "install", "--quiet", *case.packages]):
            lab.check(argv, user=case.user or lab.user, cwd=workdir, timeout=600)


def submit(lab: SlurmLab, case: Case, workdir: Path, jobs: Path = JOBS) -> tuple[int | None, dict]:
    """sbatch the case as its user from its project dir; (job id or None, what sbatch said)."""
    user = case.user or lab.user
    text = (jobs / case.script).read_text()
    path = workdir / case.script
    path.write_text(text)
    chown_to(path, user)
    argv = ["sbatch", "--parsable", *case.args, case.script, *case.script_args]
    if case.premodules:  # a login shell that loaded modules, then submitted
        shell = (f'export MODULEPATH="{lab.module_path}"; source "{lab.lmod_init}"; '
                 f"module load {' '.join(case.premodules)} && exec {shlex.join(argv)}")
        result = lab.run_as(user, ["bash", "-c", shell], cwd=workdir)
    else:
        result = lab.run_as(user, argv, cwd=workdir)
    said = {"argv": argv, "returncode": result.returncode, "stderr": result.stderr}
    match = re.fullmatch(r"(\d+)(;\S+)?", result.stdout.strip())
    return (int(match.group(1)) if result.returncode == 0 and match else None), said


def wait_all(lab: SlurmLab, ids: list[int], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for job in ids:
        lab.wait(job, timeout=max(5.0, deadline - time.monotonic()))


def run_cases(lab: SlurmLab, build: Path, cases: list[Case], log, jobs: Path = JOBS,
              urgent_script: str = "urgent.sh") -> dict[str, dict]:
    """Submit in phases (rejections, quick jobs, cancels, preemptions, time limits): the
    node has two CPUs, and a cancel or preemption needs its job running."""
    done: dict[str, dict] = {}

    def go(case: Case) -> int | None:
        workdir = project_dir(lab, case.project, case.user)
        stage(lab, build, case, workdir)
        job, said = submit(lab, case, workdir, jobs)
        done[case.name] = {"case": case, "job": job, "sbatch": said, "workdir": workdir}
        log(f"{case.name}: {'job ' + str(job) if job else 'rejected: ' + said['stderr'].strip()[:90]}")
        return job

    def remember() -> None:
        # each finished job's output file, asked while slurmctld still knows the job (it forgets
        # a job MinJobAge = 600 s after it ends; a set's run can take longer than that)
        for entry in done.values():
            if entry["job"] and "paths" not in entry:
                entry["paths"] = lab.job_paths(entry["job"])

    plain = [c for c in cases if c.action is None and c.expect != "TIMEOUT"]
    for case in plain:
        go(case)
    wait_all(lab, [d["job"] for d in done.values() if d["job"]], 300)
    remember()
    for case in [c for c in cases if c.action in ("cancel", "cancel_admin")]:
        job = go(case)
        if job:
            lab.wait_running(job)
            time.sleep(4)  # let it print some progress first
            who = (case.user or lab.user) if case.action == "cancel" else "root"
            lab.check(["scancel", str(job)], user=who)
            lab.wait(job, timeout=60)
            remember()
    for case in [c for c in cases if c.action == "preempt"]:
        job = go(case)
        if job:
            lab.wait_running(job)
            time.sleep(4)
            urgent, said = submit(lab, Case("urgent", "", urgent_script), project_dir(lab, case.project), jobs)
            log(f"  urgent job {urgent} for {case.name}: {said['stderr'].strip()[:90]}")
            lab.wait(job, timeout=60)
            if urgent:
                lab.wait(urgent, timeout=120)
            remember()
    timeouts = [c for c in cases if c.expect == "TIMEOUT" and c.action is None]
    for case in timeouts:
        go(case)
    wait_all(lab, [done[c.name]["job"] for c in timeouts if done[c.name]["job"]], 600)
    remember()
    return done


# -- instances ------------------------------------------------------------------------------

def cluster_defaults(lab: SlurmLab, who: str | None = None) -> dict:
    """What Slurm fills in for a request (of ``who``, default the lab user) that names no
    partition, account or QOS."""
    who = who or lab.user
    parts = lab.check(["scontrol", "show", "partition", "-o"])
    default = next(m.group(1) for m in re.finditer(r"PartitionName=(\S+).*?Default=YES", parts))
    user = lab.check(["sacctmgr", "-n", "-P", "show", "user", who, "format=defaultaccount"]).strip()
    qos = lab.check(["sacctmgr", "-n", "-P", "show", "assoc", f"user={who}", f"account={user}",
                     "format=defaultqos"]).split()  # fmt: skip
    return {"partition": default, "account": user, "qos": (qos[0] if qos and qos[0] else "normal")}


def make_instance(lab: SlurmLab, entry: dict, fields: list[str], defaults: dict,
                  jobs: Path = JOBS) -> tuple[dict | None, str]:
    """``defaults``: cluster_defaults of the case's user."""
    case: Case = entry["case"]
    text_of_script = (jobs / case.script).read_text()
    pairs = option_pairs(text_of_script, case.args)
    program = program_context(text_of_script)
    ctx = dict.fromkeys(CONTEXT_KEYS)
    record: dict = {"case": case.name, "script": case.script, "job_id": entry["job"]}
    if entry["job"] is None:
        if case.expect != "REJECTED":
            return None, f"expected {case.expect}, sbatch refused: {entry['sbatch']['stderr'].strip()}"
        ctx.update(defaults)
        ctx.update(request_context(pairs))
        ctx.update(program)
        ctx["workdir"] = str(entry["workdir"])
        ctx["modules"] = list(case.premodules)  # the submitting shell's (none loaded otherwise)
        record.update(stage="submit", text=entry["sbatch"]["stderr"].rstrip("\n"),
                      submit_line=shlex.join(entry["sbatch"]["argv"]), sbatch_exit=entry["sbatch"]["returncode"],
                      sacct=None)  # fmt: skip
        return record | {"context": ctx}, ""
    if case.expect == "REJECTED":
        return None, f"expected a rejection, got job {entry['job']}"
    rows = sacct_rows(lab, entry["job"], fields)
    alloc = next(r for r in rows if "." not in r["JobID"])
    # an srun step killed for memory leaves the allocation FAILED: the step row says OUT_OF_MEMORY
    if case.expect not in {parse_state(r["State"])[0] for r in rows}:
        return None, f"expected {case.expect}, job {entry['job']} ended {alloc['State']} {alloc['ExitCode']}"
    ctx.update(request_context(pairs))
    ctx.update(job_context(rows, pairs))
    ctx.update(program)
    ctx["workdir"] = ctx["workdir"] or str(entry["workdir"])
    ctx.update(env_context(job_env(entry["workdir"], entry["job"]), lab, ctx.get("command"), case.user,
                           case.packages))
    paths = entry.get("paths") or lab.job_paths(entry["job"])
    text = tail(paths.stdout)
    if not text.strip():
        return None, f"job {entry['job']} left no output"
    record.update(stage="run", text=text, submit_line=alloc.get("SubmitLine") or shlex.join(entry["sbatch"]["argv"]),
                  sbatch_exit=0, sacct=rows)  # fmt: skip
    return record | {"context": ctx}, ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=sorted(SETS), default="context",
                        help="context: the first collection (default); validation: the second; fresh: the third; "
                             "fresh2: the fourth")
    parser.add_argument("--out", type=Path, help="default: the set's folder under data/corpus/")
    parser.add_argument("--only", help="comma-separated case names (a trial run; nothing is written)")
    args = parser.parse_args(argv)
    chosen = SETS[args.set]
    out = args.out or chosen["out"]
    cases = list(chosen["cases"])
    if args.only:
        cases = [c for c in cases if c.name in set(args.only.split(","))]
    classes = [json.loads(line) for line in chosen["classes"].read_text().splitlines() if line.strip()]
    family = {c["class"]: c["family"] for c in classes}
    missing = sorted({c.cls for c in cases} - set(family))
    if missing:
        print(f"{chosen['classes'].name} lacks {missing}", file=sys.stderr)
        return 2

    def part(cls: str) -> str:  # the first collection is split by family; the later ones are one part each
        return part_of_family(family[cls]) if args.set == "context" else args.set

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    started = datetime.now(timezone.utc)
    lab = SlurmLab(gres={"gpu": 2}, policies=True, extra_users=chosen["extra_users"])
    with lab:
        if lab.cgroup_mode != "v1":
            log("warning: no cgroup v1 here; OOM cases will end FAILED, not OUT_OF_MEMORY")
        version = lab.check(["sinfo", "--version"]).strip()
        lmod = lab.run(["bash", "-c", f'source "{lab.lmod_init}"; module --version'])
        lmod_version = re.search(r"Version\s+(\S+)", lmod.stderr + lmod.stdout)
        log(f"{version}, cgroup {lab.cgroup_mode}, set {args.set}, {len(cases)} cases")
        build = build_software(lab)
        if args.set in WITH_VALIDATION_SETUP:
            build_validation_software(lab, build)
            validation_accounts(lab)
        available = set(lab.check(["sacct", "-e"]).split())
        fields = [f for f in SACCT_FIELDS if f in available]
        users = sorted({c.user or lab.user for c in cases})
        defaults = {user: cluster_defaults(lab, user) for user in users}
        done = run_cases(lab, build, cases, log, chosen["jobs"], chosen["urgent"])
        lab.wait_accounted([d["job"] for d in done.values() if d["job"]], timeout=60)
        instances, dropped = [], []
        for case in cases:
            instance, why = make_instance(lab, done[case.name], fields, defaults[case.user or lab.user],
                                          chosen["jobs"])
            if instance is None:
                dropped.append({"case": case.name, "class": case.cls, "why": why})
                log(f"DROPPED {case.name}: {why}")
            else:
                instances.append(instance | {"class": case.cls, "split": part(case.cls)})
        provenance = {
            "made": started.strftime("%Y-%m-%dT%H:%M:%SZ"), "slurm": version,
            "lmod": lmod_version.group(1) if lmod_version else None, "cgroup": lab.cgroup_mode,
            "python": platform.python_version(), "kernel": platform.release(),
            "cases": len(cases), "instances": len(instances), "dropped": dropped,
        }  # fmt: skip
        if args.set != "context":
            provenance |= {"set": args.set, "users": users, "defaults": defaults,
                           "seconds": round((datetime.now(timezone.utc) - started).total_seconds())}
    if args.only:
        print(json.dumps(instances, indent=1))
        return 0
    out.mkdir(parents=True, exist_ok=True)
    order = ("id", "class", "split", "stage", "text", "context", "case", "script", "job_id", "submit_line",
             "sbatch_exit", "sacct")  # fmt: skip
    with open(out / "instances.jsonl", "w", encoding="utf-8") as fh:
        for n, inst in enumerate(instances, 1):
            inst["id"] = f"{chosen['prefix']}-{n:04d}"
            fh.write(json.dumps({k: inst[k] for k in order}) + "\n")
    shutil.copyfile(chosen["classes"], out / "classes.jsonl")
    (out / "provenance.json").write_text(json.dumps(provenance, indent=1) + "\n")
    log(f"wrote {len(instances)} instances ({len(dropped)} dropped) to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
