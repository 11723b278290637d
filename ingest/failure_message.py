"""A failure message for a job that only sacct has seen.

Where Slurm itself prints a line for the failure (the slurmstepd banner for time limits,
the oom-kill line, srun's exit line), the message reproduces that line, so a job known
only from accounting gets the same signature as one whose log was read. Ids, nodes and
times are filled in as Slurm would; normalization masks them again.
"""

from __future__ import annotations

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


def _when(job: SacctJob) -> str:
    return job.end.strftime("%Y-%m-%dT%H:%M:%S") if job.end else "Unknown"


def _node(job: SacctJob) -> str:
    nodes = job.nodelist or ""
    return nodes if nodes and nodes != "None assigned" else "unknown"


def failure_message(job: SacctJob) -> str:
    """The line Slurm would print for this job's failure."""
    state = job.failure_state or job.state
    step = job.failed_step or "batch"
    if state == "OUT_OF_MEMORY":
        return (f"slurmstepd: error: Detected 1 oom-kill event(s) in StepId={job.job_id}.{step}. "
                "Some of your processes may have been killed by the cgroup out-of-memory handler.")
    if state == "TIMEOUT":
        return f"slurmstepd: error: *** JOB {job.job_id} ON {_node(job)} CANCELLED AT {_when(job)} DUE TO TIME LIMIT ***"
    if state == "PREEMPTED":
        return f"slurmstepd: error: *** JOB {job.job_id} ON {_node(job)} CANCELLED AT {_when(job)} DUE TO PREEMPTION ***"
    if state == "NODE_FAIL":
        return f"slurmstepd: error: *** JOB {job.job_id} ON {_node(job)} CANCELLED AT {_when(job)} DUE TO NODE FAILURE ***"
    if state == "BOOT_FAIL":
        return f"Job {job.job_id} terminated: BOOT_FAIL, its node failed to boot"
    if state == "DEADLINE":
        return f"Job {job.job_id} terminated: DEADLINE reached before it could finish"
    if state == "CANCELLED":
        if job.start is None:
            reason = f" while pending ({job.reason})" if job.reason and job.reason != "None" else " while pending"
            return f"Job {job.job_id} CANCELLED{reason}"
        return f"slurmstepd: error: *** JOB {job.job_id} ON {_node(job)} CANCELLED AT {_when(job)} ***"
    # FAILED, or COMPLETED with a failed step.
    sig = job.exit_signal or 0
    code = job.exit_code or 0
    if job.state == "COMPLETED" or (not code and not sig and (job.derived_exit_code or job.derived_exit_signal)):
        code, sig = job.derived_exit_code or code, job.derived_exit_signal or sig
        if job.failed_step and job.failed_step not in ("batch", "extern"):
            return f"srun: error: {_node(job)}: task 0: Exited with exit code {code}"
    if sig:
        try:
            name = signal.Signals(sig).name
        except ValueError:
            return f"Job FAILED: terminated by signal {sig}"
        return f"{_SIGNAL_TEXT.get(signal.Signals(sig), 'Job FAILED')}: terminated by signal {sig} ({name})"
    # The step is left out: "batch" vs "0" would split one failure class in two.
    return f"Job FAILED: exited with exit code {code}"
