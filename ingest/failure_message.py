"""A failure message for a job that only sacct has seen.

Where Slurm itself prints a line for the failure (the slurmstepd banner for time limits,
the oom-kill line, srun's exit line), the message reproduces that line, so a job known
only from accounting gets the same signature as one whose log was read. Ids, nodes and
times are filled in as Slurm would; normalization masks them again.
"""

from __future__ import annotations

import re
import signal

from hpcmem.ingest.sacct import SacctJob

# Signals whose names decide the fix (SIGKILL: memory; SIGSEGV: a bug; SIGILL: wrong CPU).
_SIGNAL_TEXT = {
    signal.SIGKILL: "Killed",
    signal.SIGSEGV: "Segmentation fault (core dumped)",
    signal.SIGILL: "Illegal instruction (core dumped)",
    signal.SIGBUS: "Bus error (core dumped)",
    signal.SIGABRT: "Aborted (core dumped)",
    signal.SIGFPE: "Floating point exception (core dumped)",
}


# The shape of a message: its job id and time in a fixed form (see failure_message).
_CANONICAL_TIME = "2000-01-01T00:00:00"
_DIGIT = re.compile(r"\d")


def _when(job: SacctJob, canonical: bool = False) -> str:
    if not job.end:
        return "Unknown"
    return _CANONICAL_TIME if canonical else job.end.strftime("%Y-%m-%dT%H:%M:%S")


def _node(job: SacctJob) -> str:
    nodes = job.nodelist or ""
    return nodes if nodes and nodes != "None assigned" else "unknown"


def failure_message(job: SacctJob, *, from_sacct: bool = False, shape: bool = False) -> str:
    """The line Slurm would print for this job's failure.

    ``shape``: the same line with the job id's digits and the time in a fixed form. Lines
    of one shape differ only in what normalization masks (ids, times), so they have one
    signature: a bulk reader fingerprints each shape once (kb/jobs/write.py), not each job.

    ``from_sacct``: the exit code is sacct's, where Slurm 22.05 shows a batch script's exit
    status 139 (128+SIGSEGV) as ``11:0`` (seen on the project's harness: slurmctld logs
    WEXITSTATUS 139, sacct prints 11:0); such a job is read as a segfault. A program that
    really called exit(11) is misread the same way; the epilog's event, which carries the
    raw status, tells the two apart.
    """
    job_id = _DIGIT.sub("1", job.job_id) if shape else job.job_id
    state = job.failure_state or job.state
    step = job.failed_step or "batch"
    if state == "OUT_OF_MEMORY":
        return (f"slurmstepd: error: Detected 1 oom-kill event(s) in StepId={job_id}.{step}. "
                "Some of your processes may have been killed by the cgroup out-of-memory handler.")
    if state == "TIMEOUT":
        return f"slurmstepd: error: *** JOB {job_id} ON {_node(job)} CANCELLED AT {_when(job, shape)} DUE TO TIME LIMIT ***"
    if state == "PREEMPTED":
        return f"slurmstepd: error: *** JOB {job_id} ON {_node(job)} CANCELLED AT {_when(job, shape)} DUE TO PREEMPTION ***"
    if state == "NODE_FAIL":
        return f"slurmstepd: error: *** JOB {job_id} ON {_node(job)} CANCELLED AT {_when(job, shape)} DUE TO NODE FAILURE ***"
    if state == "BOOT_FAIL":
        return f"Job {job_id} terminated: BOOT_FAIL, its node failed to boot"
    if state == "DEADLINE":
        return f"Job {job_id} terminated: DEADLINE reached before it could finish"
    if state == "CANCELLED":
        if job.start is None:
            reason = f" while pending ({job.reason})" if job.reason and job.reason != "None" else " while pending"
            return f"Job {job_id} CANCELLED{reason}"
        return f"slurmstepd: error: *** JOB {job_id} ON {_node(job)} CANCELLED AT {_when(job, shape)} ***"
    # FAILED, or COMPLETED with a failed step.
    sig = job.exit_signal or 0
    code = job.exit_code or 0
    if launch_failed(job.reason, sig):
        return launch_failure_message(job_id, getattr(job, "missing_output_dir", None),
                                      getattr(job, "unwritable_output_dir", None))
    if from_sacct and not sig and code == SACCT_SEGFAULT_EXIT_CODE:
        return signal_message(signal.SIGSEGV)
    if job.state == "COMPLETED" or (not code and not sig and (job.derived_exit_code or job.derived_exit_signal)):
        code, sig = job.derived_exit_code or code, job.derived_exit_signal or sig
        if job.failed_step and job.failed_step not in ("batch", "extern") and not signal_of_exit_code(code):
            return f"srun: error: {_node(job)}: task 0: Exited with exit code {code}"
    if sig:
        return signal_message(sig)
    if signal_of_exit_code(code):
        return signal_message(signal_of_exit_code(code))
    # The step is left out: "batch" vs "0" would split one failure class in two.
    return f"Job FAILED: exited with exit code {code}"


def signal_of_exit_code(code: int | None) -> int:
    """N for an exit status 128+N that a shell reports for a child killed by signal N
    (139: SIGSEGV), else 0. Only the classic signals count: 128+53 is just an exit status."""
    if code is None or not 128 < code < 128 + 32:
        return 0
    try:
        return int(signal.Signals(code - 128))
    except ValueError:
        return 0


def signal_message(sig: int) -> str:
    """The shell's line for a process killed by ``sig`` (the name decides the fix). A signal
    read from a 128+N exit status gives the same line: one failure, one signature."""
    try:
        name = signal.Signals(sig).name
    except ValueError:
        return f"Job FAILED: terminated by signal {sig}"
    return f"{_SIGNAL_TEXT.get(signal.Signals(sig), 'Job FAILED')}: terminated by signal {sig} ({name})"


# Slurm's reason for a batch job that never started: slurmstepd could not set it up.
LAUNCH_FAILURE_REASON = "JobLaunchFailure"
# What sacct shows for it without a reason (Slurm 22.05: FAILED 0:53, batch step CANCELLED
# 0:53, slurmctld logs "WTERMSIG 53"). 53 is no signal a job receives.
LAUNCH_FAILURE_SIGNAL = 53
SACCT_SEGFAULT_EXIT_CODE = 11


def launch_failed(reason: str | None, sig: int) -> bool:
    """A JobLaunchFailure with no real signal behind it (Slurm reports such jobs as
    ``FAILED 0:53`` or similar; a job killed by SIGKILL during launch keeps its signal)."""
    if sig == LAUNCH_FAILURE_SIGNAL and (not reason or reason == "None" or LAUNCH_FAILURE_REASON in reason):
        return True
    if not reason or LAUNCH_FAILURE_REASON not in reason:
        return False
    try:
        signal.Signals(sig)
    except ValueError:
        return True
    return sig == 0


def launch_failure_message(job_id: str, missing_dir: str | None = None, unwritable_dir: str | None = None) -> str:
    """The line hpcmem files a launch failure under (Slurm itself prints nothing the user sees)."""
    why = ""
    if missing_dir:
        why = f": output directory {missing_dir} does not exist"
    elif unwritable_dir:
        why = f": output directory {unwritable_dir} is not writable by the job's user"
    return f"Job {job_id} failed to launch (JobLaunchFailure){why}"
