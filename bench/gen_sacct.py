"""Generate realistic `sacct --parsable2` output in hpcmem's SACCT_FIELDS layout.

    python bench/gen_sacct.py ROWS OUT.psv [--seed 7]   # ~ROWS rows of a busy cluster
    python bench/gen_sacct.py --lab-week OUT.psv        # data/samples/sacct/lab-week.psv

The row shapes copy what real sacct prints (data/samples/sacct/real-22.05-*.psv and the
formats in shared/reference/sacct): an allocation row followed by its batch, extern and
srun steps; steps carry MaxRSS, TotalCPU and AllocTRES but no user, partition or ReqMem;
array tasks (`52030_3`, JobIDRaw of their own, the last task keeping the array's id,
`52030_[9-12]` while pending); het components (`52080+0`, `52080+1`); `CANCELLED by
<uid>`; OOM on the batch step or only on an srun step (allocation FAILED 1:0); TIMEOUT
with the batch step CANCELLED 0:15; Timelimit `UNLIMITED` / `Partition_Limit`; End
`Unknown` for running jobs, Start `None` and NodeList `None assigned` for pending ones.
The lab cluster runs Slurm 23.11 with PrologFlags=Contain (so every started job has an
extern step), times in UTC. Output is deterministic for a given seed.

``--profile short`` writes the same jobs in the field list of the real Slurm 22.05 dump
(shared/reference/real-slurm/sacct/sacct-parsable2.txt, data/samples/sacct/
real-22.05-parsable2.psv: 18 fields, no TRES, no Cluster) from a cluster without
PrologFlags=Contain (no extern steps): about 150 bytes a row, a third of the rows
allocations - the shape of the dump in issue 14 (10^6 rows, 156 MB).
"""

from __future__ import annotations

import argparse
import hashlib
import random
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from hpcmem.ingest.sacct import SACCT_FIELDS

CLUSTER = "lab"

# The field list of the real Slurm 22.05 `sacct --parsable2` dump (shared/reference/real-slurm).
SHORT_FIELDS: tuple[str, ...] = (
    "JobID", "JobName", "User", "Account", "Partition", "State", "ExitCode", "DerivedExitCode",
    "Elapsed", "Timelimit", "ReqMem", "MaxRSS", "NodeList", "Submit", "Start", "End", "WorkDir",
    "SubmitLine",
)  # fmt: skip


@dataclass(frozen=True)
class Layout:
    """Which columns a dump has, and whether the cluster gives every job an extern step."""

    fields: tuple[str, ...]
    extern_steps: bool = True


PROFILES = {"full": Layout(SACCT_FIELDS), "short": Layout(SHORT_FIELDS, extern_steps=False)}


# -- formatting as sacct does ------------------------------------------------------


def fmt_time(moment: datetime | None, missing: str = "Unknown") -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S") if moment is not None else missing


def fmt_duration(seconds: int) -> str:
    """Elapsed/Timelimit: HH:MM:SS, or D-HH:MM:SS from one day on."""
    days, rest = divmod(int(seconds), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}-{clock}" if days else clock


def fmt_total_cpu(seconds: float) -> str:
    """TotalCPU: MM:SS.mmm below an hour, else like Elapsed."""
    if seconds < 3600:
        minutes, secs = divmod(seconds, 60)
        return f"{int(minutes):02d}:{secs:06.3f}"
    return fmt_duration(int(seconds))


def fmt_mem(mb: int) -> str:
    return f"{mb // 1024}G" if mb % 1024 == 0 else f"{mb}M"


def fmt_rss(kb: int | None) -> str:
    if kb is None:
        return ""
    return f"{kb}K" if kb else "0"


def tres(cpus: int, mem_mb: int, nodes: int, gpus: int = 0, gpu_type: str | None = None,
         billing: bool = True) -> str:  # fmt: skip
    items = [f"billing={cpus}"] if billing else []
    items.append(f"cpu={cpus}")
    if gpus:
        items.append(f"gres/gpu={gpus}")
        if gpu_type:
            items.append(f"gres/gpu:{gpu_type}={gpus}")
    items += [f"mem={fmt_mem(mem_mb)}", f"node={nodes}"]
    return ",".join(items)


def row(fields: tuple[str, ...], **cells: str) -> str:
    """One line with ``cells`` in the columns ``fields`` (cells of other columns are left out)."""
    return "|".join([cells.get(name, "") for name in fields])


# -- the job model -------------------------------------------------------------------


@dataclass
class User:
    name: str
    uid: int
    account: str
    group: str
    home: str


@dataclass
class Step:
    step_id: str
    name: str
    state: str
    exit: str
    start: datetime
    end: datetime | None
    rss_kb: int | None
    cpus: int
    total_cpu: float
    submit_line: str = ""


@dataclass
class Job:
    job_id: str
    job_id_raw: str
    name: str
    user: User
    partition: str
    qos: str
    state: str
    exit: str
    submit: datetime
    start: datetime | None
    end: datetime | None
    timelimit: str
    mem_mb: int
    cpus: int
    nnodes: int = 1
    gpus: int = 0
    gpu_type: str | None = None
    nodelist: str = "None assigned"
    derived: str = "0:0"
    reason: str = "None"
    constraints: str = ""
    flags: str = ""
    workdir: str = ""
    submit_line: str = ""
    req_mem: str | None = None  # as printed; default fmt_mem(mem_mb)
    steps: list[Step] = field(default_factory=list)


def job_rows(job: Job, now: datetime, layout: Layout = PROFILES["full"]) -> list[str]:
    """The allocation row and step rows sacct prints for one job."""
    started = job.start is not None
    elapsed = 0
    if started:
        elapsed = int(((job.end or now) - job.start).total_seconds())
    out_pattern = f"{job.workdir}/%x-%j.out" if job.workdir else ""
    alloc_tres = tres(job.cpus, job.mem_mb, job.nnodes, job.gpus, job.gpu_type) if started else ""
    rows = [
        row(
            layout.fields, JobID=job.job_id, JobIDRaw=job.job_id_raw, Cluster=CLUSTER, JobName=job.name,
            User=job.user.name, UID=str(job.user.uid), Account=job.user.account,
            Group=job.user.group, Partition=job.partition, QOS=job.qos, State=job.state,
            ExitCode=job.exit, DerivedExitCode=job.derived, Reason=job.reason,
            Submit=fmt_time(job.submit), Start=fmt_time(job.start, "None" if job.end else "Unknown"),
            End=fmt_time(job.end), Elapsed=fmt_duration(elapsed), Timelimit=job.timelimit,
            ReqMem=job.req_mem if job.req_mem is not None else fmt_mem(job.mem_mb),
            TotalCPU=fmt_total_cpu(sum(s.total_cpu for s in job.steps)) if job.steps else "00:00:00",
            ReqCPUS=str(job.cpus),
            AllocCPUS=str(job.cpus if started or job.state == "PENDING" else 0),
            NNodes=str(job.nnodes), ReqTRES=tres(job.cpus, job.mem_mb, job.nnodes, job.gpus, job.gpu_type),
            AllocTRES=alloc_tres, NodeList=job.nodelist, Constraints=job.constraints,
            Flags=job.flags, WorkDir=job.workdir, StdOut=out_pattern, StdErr=out_pattern,
            SubmitLine=job.submit_line,
        )
    ]  # fmt: skip
    for step in job.steps:
        if step.step_id == "extern" and not layout.extern_steps:
            continue
        step_elapsed = int(((step.end or now) - step.start).total_seconds())
        nodes = job.nnodes if step.step_id != "batch" else 1
        rows.append(
            row(
                layout.fields, JobID=f"{job.job_id}.{step.step_id}", JobIDRaw=f"{job.job_id_raw}.{step.step_id}",
                Cluster=CLUSTER, JobName=step.name, Account=job.user.account,
                State=step.state, ExitCode=step.exit, Submit=fmt_time(step.start),
                Start=fmt_time(step.start), End=fmt_time(step.end),
                Elapsed=fmt_duration(step_elapsed), MaxRSS=fmt_rss(step.rss_kb),
                TotalCPU=fmt_total_cpu(step.total_cpu), ReqCPUS=str(step.cpus),
                AllocCPUS=str(step.cpus), NNodes=str(nodes),
                AllocTRES=tres(step.cpus, job.mem_mb // max(job.nnodes, 1) * nodes, nodes,
                               job.gpus, job.gpu_type, billing=False),
                NodeList=first_node(job.nodelist) if step.step_id == "batch" else job.nodelist,
                SubmitLine=step.submit_line,
            )
        )  # fmt: skip
    return rows


# -- building jobs -------------------------------------------------------------------

USERS = {
    "alice": User("alice", 1001, "chem", "chem", "/home/alice"),
    "bob": User("bob", 1002, "genomics", "genomics", "/home/bob"),
    "carol": User("carol", 1003, "vision", "vision", "/home/carol"),
    "dmitri": User("dmitri", 1004, "chem", "chem", "/home/dmitri"),
    "hpcagent": User("hpcagent", 1050, "agents", "agents", "/home/hpcagent"),
}

PARTITION_NODES = {
    "cpu": [f"cpu-{i:02d}" for i in range(1, 13)],
    "gpu": [f"gpu-{i:02d}" for i in range(1, 5)],
    "gpu_test": ["gpu-05"],
    "debug": ["cpu-13"],
    "bigmem": ["bigmem-01", "bigmem-02"],
}


def first_node(hostlist: str) -> str:
    """The batch host of a compressed list: 'cpu-[03-04]' -> 'cpu-03'."""
    if "[" not in hostlist:
        return hostlist
    prefix, _, ranges = hostlist.partition("[")
    return prefix + ranges.split("-")[0].split(",")[0].rstrip("]")


def nodelist(partition: str, nnodes: int, rng: random.Random) -> str:
    names = PARTITION_NODES[partition]
    first = rng.randrange(0, len(names) - nnodes + 1)
    picked = names[first : first + nnodes]
    if len(picked) == 1:
        return picked[0]
    prefix = picked[0].rsplit("-", 1)[0]
    return f"{prefix}-[{picked[0].rsplit('-', 1)[1]}-{picked[-1].rsplit('-', 1)[1]}]"


@dataclass
class Spec:
    """What a user asked for and how it went; `build` turns it into a Job."""

    user: str
    name: str
    partition: str
    submit: datetime
    run_s: int  # wall time once started (ignored unless started)
    wait_s: int = 30
    time_min: int | None = 60  # --time in minutes; None = not given
    mem_mb: int = 4096
    cpus: int = 1
    nnodes: int = 1
    gpus: int = 0
    gpu_type: str | None = None
    qos: str = "normal"
    outcome: str = "ok"  # ok, fail, oom, oom_step, timeout, cancel, cancel_pending,
    #                      node_fail, preempted, step_fail, running, pending
    exit_code: int = 1
    srun_steps: int = 0  # numbered steps; 0 = the work runs in the batch script
    rss_mb: float = 1000.0  # peak RSS of the working step
    workdir: str | None = None
    script: str | None = None
    extra_args: str = ""
    reason: str | None = None
    req_mem: str | None = None
    partition_max_min: int | None = None  # partition MaxTime when --time is not given
    cancelled_by: int | None = None  # uid of whoever cancelled; default the user
    srun_cmd: str | None = None  # what the srun steps run; default `python <name>.py`
    constraint: str = ""


def build(spec: Spec, job_id: str, job_id_raw: str, now: datetime, rng: random.Random) -> Job:
    user = USERS[spec.user]
    workdir = spec.workdir or f"{user.home}/{spec.name.split('_')[0]}"
    script = spec.script or f"{spec.name}.sh"
    args = [f"--partition={spec.partition}"] if spec.partition not in ("cpu",) else []
    if spec.time_min is not None:
        args.append(f"--time={fmt_duration(spec.time_min * 60)}")
    args.append(f"--mem={fmt_mem(spec.mem_mb)}")
    if spec.cpus > 1:
        args.append(f"--cpus-per-task={spec.cpus // spec.nnodes}")
    if spec.nnodes > 1:
        args.append(f"--nodes={spec.nnodes}")
    if spec.gpus:
        gres = f"gpu:{spec.gpu_type}:{spec.gpus}" if spec.gpu_type else f"gpu:{spec.gpus}"
        args.append(f"--gres={gres}")
    if spec.constraint:
        args.append(f"--constraint={spec.constraint}")
    if spec.extra_args:
        args.append(spec.extra_args)
    submit_line = " ".join(["sbatch", *args, script])

    if spec.time_min is not None:
        timelimit = fmt_duration(spec.time_min * 60)
    elif spec.partition_max_min is not None:
        timelimit = fmt_duration(spec.partition_max_min * 60)
    else:
        timelimit = "UNLIMITED"

    outcome = spec.outcome
    start = end = None
    if outcome not in ("pending", "cancel_pending"):
        start = spec.submit + timedelta(seconds=spec.wait_s)
        run_s = spec.run_s
        if outcome == "timeout" and spec.time_min is not None:
            run_s = spec.time_min * 60 + rng.randint(5, 40)  # Slurm kills a little late
        if outcome != "running":
            end = start + timedelta(seconds=run_s)
    job = Job(
        job_id=job_id, job_id_raw=job_id_raw, name=spec.name, user=user,
        partition=spec.partition, qos=spec.qos, state="COMPLETED", exit="0:0",
        submit=spec.submit, start=start, end=end, timelimit=timelimit,
        mem_mb=spec.mem_mb, cpus=spec.cpus, nnodes=spec.nnodes, gpus=spec.gpus,
        gpu_type=spec.gpu_type, workdir=workdir, submit_line=submit_line,
        req_mem=spec.req_mem, constraints=spec.constraint,
    )  # fmt: skip
    if start is None:
        if outcome == "pending":
            job.state, job.reason = "PENDING", spec.reason or "Priority"
            if spec.time_min is None:
                job.timelimit = "Partition_Limit"
        else:  # cancelled while pending
            job.end = spec.submit + timedelta(seconds=spec.wait_s)
            job.state = f"CANCELLED by {_canceller(spec, user)}"
            job.reason = spec.reason or "Priority"
            job.flags = "StartRecieved"
            if spec.time_min is None:
                job.timelimit = "Partition_Limit"
        return job

    job.nodelist = nodelist(spec.partition, spec.nnodes, rng)
    job.flags = rng.choice(["SchedMain", "SchedBackfill"]) + ",StartRecieved"
    end = job.end
    peak_kb = int(spec.rss_mb * 1024 * rng.uniform(0.995, 1.005))
    small_kb = rng.randint(4000, 9000)
    busy = 0.85 if outcome != "oom" else 0.6
    job_cpu = (int((end or now).timestamp() - start.timestamp())) * spec.cpus * busy

    batch = Step("batch", "batch", "COMPLETED", "0:0", start, end, peak_kb, spec.cpus // spec.nnodes,
                 job_cpu if not spec.srun_steps else rng.uniform(0.01, 2.0))  # fmt: skip
    extern = Step("extern", "extern", "COMPLETED", "0:0", start, end, rng.choice([0, 1044, 1052]),
                  spec.cpus, 0.001)  # fmt: skip
    job.steps = [batch, extern]
    numbered = []
    if spec.srun_steps:
        batch.rss_kb = small_kb
        share = (end or now).timestamp() - start.timestamp()
        command = spec.srun_cmd or f"python {spec.name}.py"
        t = start + timedelta(seconds=rng.randint(2, 20))
        for k in range(spec.srun_steps):
            length = max(1, int(share / spec.srun_steps) - 10)
            step_end = t + timedelta(seconds=length) if end is not None or k < spec.srun_steps - 1 else None
            rss = peak_kb if k == spec.srun_steps - 1 else int(peak_kb * rng.uniform(0.3, 0.9))
            numbered.append(Step(str(k), command.split()[0], "COMPLETED", "0:0", t,
                                 step_end, rss, spec.cpus, job_cpu / spec.srun_steps,
                                 f"srun --ntasks={spec.nnodes} {command}"))  # fmt: skip
            t = (step_end or now) + timedelta(seconds=1)
        job.steps += numbered
    work = numbered[-1] if numbered else batch

    if outcome == "running":
        job.state = "RUNNING"
        job.reason = "None"
        job.derived = "0:0"
        for step in job.steps:
            step.state, step.end = "RUNNING", None
        job.end = None
    elif outcome == "fail":
        job.state, job.exit = "FAILED", f"{spec.exit_code}:0"
        batch.state, batch.exit = "FAILED", f"{spec.exit_code}:0"
        if numbered:
            work.state, work.exit = "FAILED", f"{spec.exit_code}:0"
            job.derived = f"{spec.exit_code}:0"
        job.reason = "NonZeroExitCode"
    elif outcome == "oom":
        job.state, job.exit = "OUT_OF_MEMORY", "0:125"
        batch.state, batch.exit = "OUT_OF_MEMORY", "0:125"
        work.rss_kb = int(spec.mem_mb * 1024 * rng.uniform(0.97, 1.0))
        job.reason = "OutOfMemory"
    elif outcome == "oom_step":
        # The srun step is OOM-killed; the script then fails on its own exit code.
        job.state, job.exit = "FAILED", "1:0"
        batch.state, batch.exit = "FAILED", "1:0"
        work.state, work.exit = "OUT_OF_MEMORY", "0:125"
        work.rss_kb = int(spec.mem_mb * 1024 * rng.uniform(0.97, 1.0))
        job.derived = "0:125"
        job.reason = "NonZeroExitCode"
    elif outcome == "timeout":
        job.state = "TIMEOUT"
        job.reason = "TimeLimit"
        batch.state, batch.exit = "CANCELLED", "0:15"
        if numbered:
            work.state, work.exit = "CANCELLED", "0:15"
            work.end = end
    elif outcome == "cancel":
        job.state = f"CANCELLED by {_canceller(spec, user)}"
        batch.state, batch.exit = "CANCELLED", "0:15"
        if numbered:
            work.state, work.exit = "CANCELLED", "0:15"
    elif outcome == "node_fail":
        job.state, job.exit = "NODE_FAIL", "0:0"
        job.reason = "None"
        batch.state, batch.exit = "CANCELLED", "0:9"
        extern.state, extern.exit = "CANCELLED", "0:9"
        if numbered:
            work.state, work.exit = "CANCELLED", "0:9"
    elif outcome == "preempted":
        job.state, job.exit = "PREEMPTED", "0:0"
        batch.state, batch.exit = "CANCELLED", "0:15"
        if numbered:
            work.state, work.exit = "CANCELLED", "0:15"
    elif outcome == "step_fail":
        # srun step fails but the script carries on and exits 0 (real-slurm job 5).
        failing = numbered[0] if numbered else batch
        failing.state, failing.exit = "FAILED", f"{spec.exit_code}:0"
        job.derived = f"{spec.exit_code}:0"
    return job


def _canceller(spec: Spec, user: User) -> int:
    return user.uid if spec.cancelled_by is None else spec.cancelled_by


# -- random background load ----------------------------------------------------------

_PROFILES = [
    # user, names, partition, cpus, nnodes, mem_mb, time_min, run range (s), gpus, srun
    ("alice", ["md_prod", "md_equilibrate", "md_analysis"], "cpu", (16, 32, 64), (1, 2), (16384, 65536), (720, 2880), (1800, 86400), 0, 1),
    ("dmitri", ["dft_relax", "dft_scf", "phonons"], "cpu", (8, 16, 32), (1,), (8192, 32768), (240, 1440), (600, 30000), 0, 2),
    ("bob", ["align_reads", "call_variants", "qc_sample", "trim_fastq"], "cpu", (4, 8, 16), (1,), (8192, 16384, 32768), (120, 720), (300, 14000), 0, 0),
    ("bob", ["assemble_genome", "merge_bams"], "bigmem", (32, 48), (1,), (262144, 524288), (None,), (7200, 190000), 0, 0),
    ("carol", ["train_resnet", "train_vit", "eval_model"], "gpu", (8, 16), (1,), (65536, 131072), (360, 1440, 2880), (1800, 80000), (1, 2, 4), 1),
    ("carol", ["debug_loader", "profile_step"], "gpu_test", (4, 8), (1,), (16384, 32768), (30, 60), (60, 1500), (1,), 0),
    ("hpcagent", ["agent-pytest", "agent-bench_kernel", "agent-repro", "agent-eval_checkpoint"], "debug", (1, 2, 4), (1,), (2048, 4096, 8192), (10, 30), (20, 1200), 0, 0),
    ("hpcagent", ["agent-eval_checkpoint", "agent-finetune_smoke"], "gpu_test", (4,), (1,), (16384, 32768), (30, 60), (120, 2400), (1,), 1),
]  # fmt: skip
_SRUN_COMMANDS = {"alice": "gmx_mpi mdrun -deffnm md", "dmitri": "pw.x -in pw.in"}
_PROFILE_WEIGHTS = [10, 6, 14, 2, 10, 4, 16, 6]
_OUTCOMES = ["ok", "fail", "oom", "oom_step", "timeout", "cancel", "cancel_pending", "node_fail",
             "preempted", "step_fail"]  # fmt: skip
_OUTCOME_WEIGHTS = [800, 70, 25, 8, 30, 30, 10, 2, 5, 10]
_EXIT_CODES = [1, 1, 1, 2, 127, 134, 137, 139]


def random_spec(rng: random.Random, submit: datetime) -> Spec:
    user, names, partition, cpus, nnodes, mems, times, run, gpus, srun = rng.choices(
        _PROFILES, _PROFILE_WEIGHTS
    )[0]
    time_min = rng.choice(times)
    run_lo, run_hi = run
    if time_min is not None:
        run_hi = min(run_hi, time_min * 60 - 30)
    outcome = rng.choices(_OUTCOMES, _OUTCOME_WEIGHTS)[0]
    if outcome == "oom_step" and not srun:
        outcome = "oom"
    elif outcome == "oom" and srun:
        outcome = "oom_step"
    if outcome == "timeout" and time_min is None:
        outcome = "ok"
    if outcome == "preempted" and not gpus:
        outcome = "ok"
    mem = rng.choice(mems)
    srun_cmd = _SRUN_COMMANDS.get(user)
    gpu_count = rng.choice(gpus) if gpus else 0
    return Spec(
        user=user, name=rng.choice(names), partition=partition, submit=submit,
        run_s=rng.randint(run_lo, max(run_lo, run_hi)), wait_s=rng.choice([1, 2, 5, 30, 300, 3600]),
        time_min=time_min, mem_mb=mem, cpus=rng.choice(cpus), nnodes=rng.choice(nnodes),
        gpus=gpu_count, gpu_type=rng.choice(["a100", None]) if gpu_count else None,
        qos="scavenger" if outcome == "preempted" else "normal", outcome=outcome,
        exit_code=rng.choice(_EXIT_CODES), srun_steps=srun * rng.choice([1, 1, 2, 3]),
        rss_mb=mem * rng.uniform(0.05, 0.8), srun_cmd=srun_cmd,
    )  # fmt: skip


class Cluster:
    """Hands out job ids in submission order and renders jobs."""

    def __init__(self, first_id: int, now: datetime, seed: int, layout: Layout = PROFILES["full"]):
        self.next_id = first_id
        self.now = now
        self.layout = layout
        self.rng = random.Random(seed)
        self.entries: list[tuple[int, list[str]]] = []

    def take_id(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def submit(self, spec: Spec) -> str:
        job_id = str(self.take_id())
        job = build(spec, job_id, job_id, self.now, self.rng)
        self.entries.append((int(job_id), job_rows(job, self.now, self.layout)))
        return job_id

    def submit_array(self, spec: Spec, tasks: int, outcomes: dict[int, str], pending_from: int | None = None) -> str:
        """Array tasks 1..tasks; tasks >= pending_from still pending as one record."""
        array_id = self.take_id()
        rows: list[str] = []
        last_started = tasks if pending_from is None else pending_from - 1
        for task in range(1, last_started + 1):
            # The last task left in the array keeps the array's own id.
            raw = array_id if (task == tasks) else self.take_id()
            task_spec = Spec(**{**spec.__dict__, "outcome": outcomes.get(task, spec.outcome)})
            task_spec.submit = spec.submit
            task_spec.wait_s = spec.wait_s + 40 * (task - 1)
            task_spec.run_s = int(spec.run_s * self.rng.uniform(0.8, 1.2))
            task_spec.rss_mb = spec.rss_mb * self.rng.uniform(0.85, 1.1)
            job = build(task_spec, f"{array_id}_{task}", str(raw), self.now, self.rng)
            rows += job_rows(job, self.now, self.layout)
        if pending_from is not None:
            pending = Spec(**{**spec.__dict__, "outcome": "pending", "reason": "JobArrayTaskLimit"})
            job = build(pending, f"{array_id}_[{pending_from}-{tasks}]", str(array_id), self.now, self.rng)
            rows += job_rows(job, self.now, self.layout)
        self.entries.append((array_id, rows))
        return str(array_id)

    def submit_het(self, parts: list[Spec]) -> str:
        """A heterogeneous job: one sbatch line, the batch step only in component 0."""
        het_id = self.take_id()
        rows: list[str] = []
        jobs = []
        for offset, spec in enumerate(parts):
            raw = het_id if offset == 0 else self.take_id()
            jobs.append(build(spec, f"{het_id}+{offset}", str(raw), self.now, self.rng))
        script = jobs[0].submit_line.rsplit(" ", 1)[1]
        components = [job.submit_line.rsplit(" ", 1)[0].removeprefix("sbatch ") for job in jobs]
        submit_line = "sbatch " + " : ".join(components) + " " + script
        for offset, job in enumerate(jobs):
            job.submit_line = submit_line
            if offset:
                job.steps = [step for step in job.steps if step.step_id != "batch"]
            rows += job_rows(job, self.now, self.layout)
        self.entries.append((het_id, rows))
        return str(het_id)

    def lines(self) -> list[str]:
        header = "|".join(self.layout.fields)
        out = [header]
        for _, rows in sorted(self.entries, key=lambda entry: entry[0]):
            out += rows
        return out


# -- the scripted lab week -----------------------------------------------------------


def lab_week() -> tuple[list[str], dict[str, str]]:
    """The sample week: scripted failure stories plus seeded background jobs.

    Returns the lines and a map from story name to job id (printed into the README).
    """
    monday = datetime(2026, 11, 23, 8, 0, 0)
    lab = Cluster(first_id=52001, now=datetime(2026, 11, 29, 18, 0, 0), seed=20261123)
    rng = random.Random(7)
    ids: dict[str, str] = {}
    day = timedelta(days=1)

    def at(days: float, hours: float, minutes: float = 0) -> datetime:
        return monday + timedelta(days=days, hours=hours, minutes=minutes)

    # Background traffic, spread over the week, interleaved with the stories by time.
    stories: list[tuple[datetime, object]] = []

    def story(name: str, when: datetime, action):
        stories.append((when, (name, action)))

    # bob: OOM in the batch script, resubmitted 7 minutes later with 4x the memory.
    story("oom", at(0, 1, 10), lambda t: lab.submit(Spec(
        "bob", "align_reads", "cpu", t, run_s=1260, time_min=240, mem_mb=8192, cpus=8,
        outcome="oom", workdir="/home/bob/align", script="align.sh")))
    story("oom_fixed", at(0, 1, 10) + timedelta(seconds=7 * 60 + 1290), lambda t: lab.submit(Spec(
        "bob", "align_reads", "cpu", t, run_s=5420, time_min=240, mem_mb=32768, cpus=8,
        rss_mb=19876.4, workdir="/home/bob/align", script="align.sh")))
    # carol: OOM inside the srun step; the allocation says FAILED 1:0.
    story("oom_step", at(0, 3, 30), lambda t: lab.submit(Spec(
        "carol", "train_resnet", "gpu", t, run_s=2950, time_min=720, mem_mb=32768, cpus=8,
        gpus=1, gpu_type="a100", outcome="oom_step", srun_steps=1,
        workdir="/home/carol/resnet", script="train.sh")))
    story("oom_step_fixed", at(0, 4, 35), lambda t: lab.submit(Spec(
        "carol", "train_resnet", "gpu", t, run_s=24200, time_min=720, mem_mb=65536, cpus=8,
        gpus=1, gpu_type="a100", srun_steps=1, rss_mb=41210.0,
        workdir="/home/carol/resnet", script="train.sh")))
    # alice: TIMEOUT at 4 h, resubmitted with --time=12:00:00.
    story("timeout", at(1, 0, 5), lambda t: lab.submit(Spec(
        "alice", "md_equilibrate", "cpu", t, run_s=0, wait_s=12, time_min=240, mem_mb=65536,
        cpus=64, nnodes=2, outcome="timeout", srun_steps=1, rss_mb=21800.0,
        srun_cmd="gmx_mpi mdrun -deffnm equil", constraint="avx512",
        workdir="/home/alice/md/run3", script="equil.sh")))
    story("timeout_fixed", at(1, 4, 22), lambda t: lab.submit(Spec(
        "alice", "md_equilibrate", "cpu", t, run_s=25960, wait_s=95, time_min=720, mem_mb=65536,
        cpus=64, nnodes=2, srun_steps=1, rss_mb=22140.0,
        srun_cmd="gmx_mpi mdrun -deffnm equil", constraint="avx512",
        workdir="/home/alice/md/run3", script="equil.sh")))
    # hpcagent: gpu_test's one-hour cap hit; moved to the gpu partition.
    story("partition", at(1, 6, 0), lambda t: lab.submit(Spec(
        "hpcagent", "agent-eval_checkpoint", "gpu_test", t, run_s=0, time_min=60,
        mem_mb=16384, cpus=4, gpus=1, outcome="timeout", rss_mb=9100.0,
        workdir="/home/hpcagent/tasks/t-4471", script="eval.sbatch")))
    story("partition_fixed", at(1, 7, 9), lambda t: lab.submit(Spec(
        "hpcagent", "agent-eval_checkpoint", "gpu", t, run_s=9310, time_min=360,
        mem_mb=16384, cpus=4, gpus=1, rss_mb=9320.0,
        workdir="/home/hpcagent/tasks/t-4471", script="eval.sbatch")))
    # carol: CUDA out of memory on a V100 (exit 1), rerun on an A100.
    story("gres", at(2, 2, 0), lambda t: lab.submit(Spec(
        "carol", "train_vit", "gpu", t, run_s=412, time_min=1440, mem_mb=65536, cpus=16,
        gpus=1, gpu_type="v100", outcome="fail", exit_code=1, srun_steps=1, rss_mb=14100.0,
        workdir="/home/carol/vit", script="train_vit.sh")))
    story("gres_fixed", at(2, 2, 31), lambda t: lab.submit(Spec(
        "carol", "train_vit", "gpu", t, run_s=61200, time_min=1440, mem_mb=65536, cpus=16,
        gpus=1, gpu_type="a100", srun_steps=1, rss_mb=15020.0,
        workdir="/home/carol/vit", script="train_vit.sh")))
    # srun step fails, the script exits 0: COMPLETED, DerivedExitCode 2:0.
    story("step_fail", at(2, 5, 40), lambda t: lab.submit(Spec(
        "dmitri", "dft_scf", "cpu", t, run_s=1840, time_min=480, mem_mb=16384, cpus=16,
        outcome="step_fail", exit_code=2, srun_steps=2, rss_mb=6020.0, srun_cmd="pw.x -in scf.in",
        workdir="/home/dmitri/dft/MoS2", script="scf.sh")))
    # alice cancels her own running job; root cancels a job stuck over the partition limit.
    story("cancel", at(3, 1, 0), lambda t: lab.submit(Spec(
        "alice", "md_prod", "cpu", t, run_s=3100, time_min=2880, mem_mb=32768, cpus=32,
        outcome="cancel", srun_steps=1, rss_mb=12000.0, workdir="/home/alice/md/run4",
        srun_cmd="gmx_mpi mdrun -deffnm prod",
        script="prod.sh")))
    story("cancel_pending_root", at(3, 2, 0), lambda t: lab.submit(Spec(
        "hpcagent", "agent-repro", "debug", t, run_s=0, wait_s=1500, time_min=120,
        mem_mb=2048, outcome="cancel_pending", reason="PartitionTimeLimit", cancelled_by=0,
        workdir="/home/hpcagent/tasks/t-4490", script="repro.sbatch")))
    # node failure and preemption
    story("node_fail", at(3, 6, 0), lambda t: lab.submit(Spec(
        "bob", "call_variants", "cpu", t, run_s=7788, time_min=720, mem_mb=16384, cpus=16,
        outcome="node_fail", rss_mb=9000.0, workdir="/home/bob/variants", script="call.sh")))
    story("preempted", at(4, 0, 40), lambda t: lab.submit(Spec(
        "hpcagent", "agent-finetune_smoke", "gpu", t, run_s=1533, time_min=240, mem_mb=32768,
        cpus=4, gpus=1, gpu_type="a100", qos="scavenger", outcome="preempted",
        srun_steps=1, rss_mb=18000.0, workdir="/home/hpcagent/tasks/t-4502",
        script="smoke.sbatch")))
    # bob's array: 12 tasks, task 7 OOMs, tasks 9-12 still pending at dump time.
    story("array", at(4, 3, 0), lambda t: lab.submit_array(Spec(
        "bob", "qc_sample", "cpu", t, run_s=1500, time_min=120, mem_mb=4096, cpus=2,
        rss_mb=2300.0, workdir="/home/bob/qc", script="qc_array.sh",
        extra_args="--array=1-12%8"), tasks=12, outcomes={7: "oom"}, pending_from=9))
    # het job: CPU driver + GPU workers.
    story("het", at(4, 5, 0), lambda t: lab.submit_het([
        Spec("alice", "coupled_sim", "cpu", t, run_s=3888, time_min=480, mem_mb=16384,
             cpus=8, srun_steps=1, rss_mb=5000.0, workdir="/home/alice/coupled",
             script="coupled.sh"),
        Spec("alice", "coupled_sim", "gpu", t, run_s=3888, time_min=480, mem_mb=65536,
             cpus=16, gpus=2, srun_steps=1, rss_mb=30100.0, workdir="/home/alice/coupled",
             script="coupled.sh"),
    ]))
    # Days in Elapsed and an UNLIMITED limit: bigmem has MaxTime=INFINITE.
    story("long", at(0, 0, 30), lambda t: lab.submit(Spec(
        "bob", "assemble_genome", "bigmem", t, run_s=2 * 86400 + 3 * 3600 + 14 * 60 + 55,
        time_min=None, mem_mb=524288, cpus=48, rss_mb=401233.0,
        workdir="/home/bob/assembly", script="assemble.sh")))
    # Pending without --time on gpu: Timelimit Partition_Limit.
    story("pending", at(6, 9, 30), lambda t: lab.submit(Spec(
        "carol", "train_vit", "gpu", t, run_s=0, time_min=None, mem_mb=131072, cpus=16,
        gpus=4, gpu_type="a100", outcome="pending", reason="Resources",
        workdir="/home/carol/vit", script="train_vit_4gpu.sh")))
    story("running", at(6, 7, 0), lambda t: lab.submit(Spec(
        "alice", "md_prod", "cpu", t, run_s=0, time_min=2880, mem_mb=65536, cpus=64,
        nnodes=2, outcome="running", srun_steps=1, rss_mb=23000.0,
        srun_cmd="gmx_mpi mdrun -deffnm prod",
        workdir="/home/alice/md/run5", script="prod.sh")))
    # shared library missing in the agent's job: exit 127 on the first line of the script.
    story("exit127", at(5, 1, 12), lambda t: lab.submit(Spec(
        "hpcagent", "agent-bench_kernel", "debug", t, run_s=1, time_min=15, mem_mb=2048,
        cpus=2, outcome="fail", exit_code=127, rss_mb=3.1,
        workdir="/home/hpcagent/tasks/t-4533", script="bench.sbatch")))

    background = []
    t = monday - timedelta(hours=6)
    while t < lab.now - timedelta(hours=3):
        t += timedelta(minutes=rng.choice([80, 110, 150, 200]))
        background.append((t, None))
    events = sorted(stories + background, key=lambda event: event[0])
    for when, what in events:
        if what is None:
            spec = random_spec(rng, when)
            if rng.random() < 0.5:
                spec.outcome = "ok"  # keep the background mostly quiet
            lab.submit(spec)
        else:
            name, action = what
            ids[name] = action(when)
    return lab.lines(), ids


def generate(rows: int, seed: int = 7, profile: str = "full"):
    """Yield about `rows` lines (header first) of a busy cluster's sacct dump, in the
    layout of ``PROFILES[profile]``."""
    rng = random.Random(seed)
    now = datetime(2026, 12, 1, 0, 0, 0)
    layout = PROFILES[profile]
    cluster = Cluster(first_id=1_000_001, now=now, seed=seed, layout=layout)
    yield "|".join(layout.fields)
    produced = 0
    t = now - timedelta(days=180)
    while produced < rows:
        t += timedelta(seconds=rng.randint(5, 90))
        spec = random_spec(rng, t)
        roll = rng.random()
        if roll < 0.02:
            cluster.submit_array(spec, tasks=rng.randint(2, 20), outcomes={})
        elif roll < 0.025:
            cluster.submit_het([spec, random_spec(rng, t)])
        else:
            cluster.submit(spec)
        for _, lines in cluster.entries:
            produced += len(lines)
            yield from lines
        cluster.entries.clear()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rows", nargs="?", type=int, help="number of rows to generate")
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--profile", choices=sorted(PROFILES), default="full",
                        help="field layout: full (hpcmem's --live fields) or short (real 22.05 dump)")
    parser.add_argument("--lab-week", action="store_true", help="write the scripted lab week")
    args = parser.parse_args(argv)
    with args.out.open("w", encoding="utf-8") as fh:
        if args.lab_week:
            lines, ids = lab_week()
            fh.write("\n".join(lines) + "\n")
            for name, job_id in ids.items():
                print(f"{name}: {job_id}")
        else:
            if args.rows is None:
                parser.error("ROWS is required without --lab-week")
            for line in generate(args.rows, args.seed, args.profile):
                fh.write(line + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


def cached_input(rows: int, seed: int, profile: str = "full") -> Path:
    """A generated dump in the temp directory, reused across runs. Its name carries a hash
    of this generator and of the field list, so a changed generator never reuses a stale file."""
    digest = hashlib.sha256(Path(__file__).read_bytes() + "|".join(SACCT_FIELDS).encode()).hexdigest()[:12]
    name = f"hpcmem-sacct-{rows}-{seed}-{digest}.psv" if profile == "full" else f"hpcmem-sacct-{profile}-{rows}-{seed}-{digest}.psv"
    path = Path(tempfile.gettempdir()) / name
    if not path.exists():
        tmp = path.with_name(f".{path.name}.{random.getrandbits(32):08x}.tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            for line in generate(rows, seed, profile):
                fh.write(line + "\n")
        tmp.rename(path)
    return path
