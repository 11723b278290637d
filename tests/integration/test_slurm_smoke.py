"""The classic job failures, produced for real on the lab cluster and read back from
sacct and the job logs.

One module-scoped fixture submits every job as the unprivileged lab user and waits
for all of them (they run side by side), so the whole file costs about one
time-limit check of slurmctld (~30 s) on top of the bring-up.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timezone
from pathlib import Path

import pytest

from tests.integration.slurm_lab import SlurmLab, SubmissionRejected

pytestmark = pytest.mark.slurm

FIELDS = "JobID,JobName,User,Partition,State,ExitCode,DerivedExitCode,MaxRSS,ReqMem,WorkDir"


@dataclass
class Suite:
    ids: dict[str, int]  # job name -> id
    rejected: SubmissionRejected
    sacct_text: str
    rows: dict[str, dict[str, str]]  # sacct JobID ('7', '7.batch', '7.0') -> row


@pytest.fixture(scope="module")
def suite(slurm_lab: SlurmLab, job_scripts: Path) -> Suite:
    lab = slurm_lab
    lab.stage(job_scripts / "train.py")
    ids = {"sleeper": lab.submit(job_scripts / "sleep.sh")}
    # Started first so its ~30 s wait for slurmctld's time-limit check overlaps the rest.
    lab.wait_running(ids["sleeper"])
    lab.force_timeout(ids["sleeper"])
    for name in ("fail", "oom", "stepfail", "modules"):
        ids[name] = lab.submit(job_scripts / f"{name}.sh")
    with pytest.raises(SubmissionRejected) as rejected:
        lab.submit(job_scripts / "modules.sh", args=["--partition=nosuch"])
    for job_id in ids.values():
        lab.wait(job_id, timeout=90)
    lab.wait_accounted(ids.values())
    text = lab.sacct(
        ["--parsable2", "--allusers", "--starttime", lab.since, f"--format={FIELDS}"]
    )
    lines = text.splitlines()
    header = lines[0].split("|")
    rows = {}
    for line in lines[1:]:
        row = dict(zip(header, line.split("|")))
        rows[row["JobID"]] = row
    return Suite(ids, rejected.value, text, rows)


def _row(suite: Suite, job: str, step: str = "") -> dict[str, str]:
    key = str(suite.ids[job]) + (f".{step}" if step else "")
    assert key in suite.rows, f"sacct has no row {key}:\n{suite.sacct_text}"
    return suite.rows[key]


def test_python_traceback_fails_the_job_with_its_exit_code(slurm_lab, suite):
    job = _row(suite, "fail")
    assert (job["State"], job["ExitCode"], job["DerivedExitCode"]) == ("FAILED", "3:0", "0:0")
    assert (job["User"], job["Partition"]) == ("alice", "main")
    assert _row(suite, "fail", "batch")["State"] == "FAILED"
    paths = slurm_lab.job_paths(suite.ids["fail"])
    assert paths.stdout.name == f"fail-{suite.ids['fail']}.out"
    assert paths.stderr.name == f"fail-{suite.ids['fail']}.err"
    assert "epoch 0 starting" in paths.stdout.read_text()
    err = paths.stderr.read_text()
    assert "Traceback (most recent call last)" in err
    assert "KeyError: 'sample_1'" in err


def test_memory_limit_kills_the_job(slurm_lab, suite):
    job, batch = _row(suite, "oom"), _row(suite, "oom", "batch")
    log = slurm_lab.job_output(suite.ids["oom"])
    assert "holding 10 MB" in log
    assert "holding 300 MB" not in log
    assert job["ReqMem"] == "50M"
    if slurm_lab.cgroup_mode == "v1":
        # the cgroup OOM killer: OUT_OF_MEMORY with the fake signal 125
        assert (job["State"], job["ExitCode"]) == ("OUT_OF_MEMORY", "0:125")
        assert batch["State"] == "OUT_OF_MEMORY"
        assert "oom-kill event" in log
    else:
        # OverMemoryKill: slurmstepd sees the sampled RSS over the limit, SIGKILL
        assert (job["State"], job["ExitCode"]) == ("FAILED", "0:9")
        assert "exceeded memory limit" in log
    assert 10 < _mib(batch["MaxRSS"]) <= _max_rss_bound_mb(slurm_lab), batch


def _mib(size: str) -> float:
    """sacct's MaxRSS ('44064K', '33M'; a bare number is bytes) in MiB."""
    scale = {"K": 1 / 1024, "M": 1, "G": 1024}
    if size[-1:] in scale:
        return float(size[:-1]) * scale[size[-1]]
    return float(size) / 2**20


def _max_rss_bound_mb(lab: SlurmLab) -> int:
    # A cgroup caps usage at the 50M limit; the polling variant notices the excess
    # only at its next 1 s sample, by when the job has grown up to ~25 MB more.
    return 50 if lab.cgroup_mode == "v1" else 80


def test_forced_time_limit_gives_timeout(slurm_lab, suite):
    job, batch = _row(suite, "sleeper"), _row(suite, "sleeper", "batch")
    assert (job["State"], job["ExitCode"]) == ("TIMEOUT", "0:0")
    assert (batch["State"], batch["ExitCode"]) == ("CANCELLED", "0:15")
    log = slurm_lab.job_output(suite.ids["sleeper"])
    assert "sleeping" in log
    assert f"*** JOB {suite.ids['sleeper']} ON localhost CANCELLED AT" in log
    assert "DUE TO TIME LIMIT ***" in log


def test_failed_srun_step_shows_only_in_derived_exit_code(slurm_lab, suite):
    job, step = _row(suite, "stepfail"), _row(suite, "stepfail", "0")
    assert (job["State"], job["ExitCode"], job["DerivedExitCode"]) == (
        "COMPLETED", "0:0", "3:0",
    )  # fmt: skip
    assert (step["State"], step["ExitCode"], step["JobName"]) == ("FAILED", "3:0", "python3")
    assert _row(suite, "stepfail", "batch")["State"] == "COMPLETED"
    log = slurm_lab.job_output(suite.ids["stepfail"])
    assert "srun: error: localhost: task 0: Exited with exit code 3" in log
    assert "Traceback (most recent call last)" in log
    assert "srun exit code 3" in log


def test_invalid_partition_is_rejected_at_submission(suite):
    rejected = suite.rejected
    assert rejected.returncode == 1
    assert "sbatch: error: invalid partition specified: nosuch" in rejected.stderr
    assert "Batch job submission failed: Invalid partition name specified" in rejected.stderr
    assert rejected.stdout == ""


def test_job_loads_default_modules_from_the_lab_tree(slurm_lab, suite):
    job = _row(suite, "modules")
    assert (job["State"], job["ExitCode"], job["DerivedExitCode"]) == (
        "COMPLETED", "0:0", "0:0",
    )  # fmt: skip
    log = slurm_lab.job_output(suite.ids["modules"])
    # gcc: the .modulerc.lua default (also the highest); cuda: the .modulerc.lua
    # default 11.8, not the highest 12.4 - so the marker files were read.
    assert "LOADEDMODULES=gcc/13.1.0:cuda/11.8" in log
    assert "HPCMEM_CUDA_VERSION=11.8" in log
    assert "done on localhost" in log


def test_unprivileged_user_sees_own_jobs(slurm_lab, suite):
    text = slurm_lab.sacct(
        ["--parsable2", "--noheader", "-X", "--starttime", slurm_lab.since,
         "--format=JobID,User,State"],
        user="alice",
    )  # fmt: skip
    seen = {line.split("|")[0]: line.split("|")[2] for line in text.splitlines()}
    assert seen[str(suite.ids["fail"])] == "FAILED"
    assert seen[str(suite.ids["sleeper"])] == "TIMEOUT"
    assert set(seen) >= {str(i) for i in suite.ids.values()}


def test_sacct_22_05_rejects_the_stdout_field(slurm_lab, suite):
    result = slurm_lab.run(["sacct", "--parsable2", "--format=JobID,StdOut"])
    assert result.returncode == 1
    assert 'Invalid field requested: "StdOut"' in result.stderr


def test_live_sacct_output_parses_into_the_expected_failures(slurm_lab, suite, monkeypatch):
    from hpcmem.ingest.sacct import SacctReader, live_fields, live_sacct_command, sacct_version

    # `sacct --version` reads slurm.conf too: without it there is no version at all
    monkeypatch.setenv("SLURM_CONF", str(slurm_lab.conf))
    version = sacct_version()
    assert version is not None and version[:2] == (22, 5)
    assert "StdOut" not in live_fields(version)
    argv = live_sacct_command(since=slurm_lab.since, all_users=True, slurm_version=version)
    result = slurm_lab.run(argv, env={"TZ": "UTC", "SLURM_TIME_FORMAT": "standard"})
    assert result.returncode == 0, result.stderr
    reader = SacctReader(result.stdout.splitlines(), tz=timezone.utc)
    jobs = {job.job_id: job for job in reader}
    assert reader.issue_count == 0, reader.issues
    by_name = {name: jobs[str(job_id)] for name, job_id in suite.ids.items()}

    fail = by_name["fail"]
    assert (fail.state, fail.exit_code, fail.failure_state) == ("FAILED", 3, "FAILED")
    assert (fail.user, fail.account, fail.partition) == ("alice", "research", "main")

    oom = by_name["oom"]
    expected_oom = "OUT_OF_MEMORY" if slurm_lab.cgroup_mode == "v1" else "FAILED"
    assert (oom.state, oom.failure_state) == (expected_oom, expected_oom)
    assert oom.req_mem_mb == 50
    assert oom.max_rss_mb is not None and 10 < oom.max_rss_mb <= _max_rss_bound_mb(slurm_lab)
    assert oom.max_rss_step == "batch"

    sleeper = by_name["sleeper"]
    assert (sleeper.state, sleeper.failure_state) == ("TIMEOUT", "TIMEOUT")

    stepfail = by_name["stepfail"]
    assert (stepfail.state, stepfail.derived_exit_code) == ("COMPLETED", 3)
    assert (stepfail.failure_state, stepfail.failed_step) == ("FAILED", "0")

    ok = by_name["modules"]
    assert (ok.state, ok.failure_state, ok.is_failure) == ("COMPLETED", None, False)
    assert ok.start is not None and ok.start.tzinfo is not None


def test_prolog_and_epilogs_ran_with_the_job_environment(slurm_lab, suite):
    job_id = suite.ids["fail"]
    recorded = {}
    for context in ("prolog_slurmd", "epilog_slurmd", "epilog_slurmctld"):
        path = slurm_lab.hooks_out / f"{job_id}.{context}.env"
        assert path.exists(), sorted(p.name for p in slurm_lab.hooks_out.iterdir())
        recorded[context] = dict(
            line.split("=", 1) for line in path.read_text().splitlines() if "=" in line
        )
    for env in recorded.values():
        assert env["SLURM_JOB_ID"] == str(job_id)
        assert env["SLURM_JOB_USER"] == "alice"
    # only the epilogs know how the job ended: exit 3, no signal
    assert recorded["epilog_slurmd"]["SLURM_JOB_EXIT_CODE2"] == "3:0"
    assert recorded["epilog_slurmctld"]["SLURM_JOB_EXIT_CODE2"] == "3:0"
    assert recorded["epilog_slurmctld"]["SLURM_JOB_NAME"] == "fail"
    # slurmd passes the config path on; this is how an epilog can call scontrol/sacct
    assert recorded["epilog_slurmd"]["SLURM_CONF"] == str(slurm_lab.conf)
    conf_lines = slurm_lab.conf.read_text().splitlines()
    assert f"Epilog={slurm_lab.hooks_dir / 'record-env.sh'}" in conf_lines
    assert "PrologEpilogTimeout=30" in conf_lines


def test_hpcmem_ingests_the_live_cluster(slurm_lab, suite, tmp_path):
    """`hpcmem ingest sacct --live` runs the real sacct; `ingest logs` reads the real job logs."""
    import json
    import os
    import sqlite3
    import subprocess
    import sys

    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    env = dict(os.environ, HPCMEM_HOME=str(home), HPCMEM_DISABLE_LOCAL_CONFIG="1", SLURM_CONF=str(slurm_lab.conf))
    hpcmem = str(Path(sys.executable).with_name("hpcmem"))

    def run(*args):
        done = subprocess.run([hpcmem, *args], capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    summary = json.loads(run("ingest", "sacct", "--live", "--all-users", "--since", slurm_lab.since, "--json"))
    assert summary["jobs"] >= 5 and summary["failures"] >= 4 and summary["skipped"] == 0
    paths = [slurm_lab.job_paths(suite.ids[name]) for name in ("fail", "oom", "sleeper", "stepfail")]
    logs = sorted({str(p) for jp in paths for p in (jp.stdout, jp.stderr) if p.exists()})
    run("ingest", "logs", *logs, "--json")

    with sqlite3.connect(home / "data" / "user.db") as db:
        rows = {job_id: (state, step, cat) for job_id, state, step, cat in db.execute(
            "SELECT o.job_id, o.state, o.failed_step, s.category FROM occurrences o JOIN signatures s ON s.id = o.signature_id")}
        completed = {j for (j,) in db.execute("SELECT job_id FROM job_records WHERE failed = 0")}
    ids = {name: str(job_id) for name, job_id in suite.ids.items()}
    assert rows[ids["fail"]][0] == "FAILED" and rows[ids["fail"]][2] == "python_exception"
    assert rows[ids["oom"]][0] == "OUT_OF_MEMORY" and rows[ids["oom"]][2] == "host_oom"
    assert rows[ids["sleeper"]][0] == "TIMEOUT" and rows[ids["sleeper"]][2] == "time_limit"
    assert rows[ids["stepfail"]][0] == "FAILED" and rows[ids["stepfail"]][1] == "0"
    assert ids["modules"] not in rows and ids["modules"] in completed
