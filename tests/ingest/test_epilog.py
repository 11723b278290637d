"""`hpcmem epilog` on the environments real Slurm 22.05 hook scripts saw (data/samples/epilog).

The epilog runs as its own process here, as slurmd would start it: no PATH, the job's
SLURM_* variables, `python -I -m hpcmem.ingest.epilog`. scontrol answers are replayed
from the recorded `scontrol show job -o` output (--scontrol-file).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from hpcmem.ingest.epilog import (
    expand_log_pattern,
    job_outcome,
    parse_env_file,
    parse_scontrol_job,
    run_epilog,
)
from hpcmem.ingest.spool import validate_event
from tests.conftest import REPO, SAMPLES

EPILOG = SAMPLES / "epilog"
LOGS = SAMPLES / "logs"
SCHEMA = json.loads((REPO / "schemas" / "spool-event.schema.json").read_text())
NOBODY = pwd.getpwnam("nobody")
# Writing events for another user needs root. CI runs as root and sets
# HPCMEM_REQUIRE_ROOT_TESTS=1, so there these tests run or fail, never skip.
as_root = pytest.mark.skipif(os.geteuid() != 0 and os.environ.get("HPCMEM_REQUIRE_ROOT_TESTS") != "1",
                             reason="writing events for another user needs root (CI runs as root)")


def env_of(name: str, **changes: str) -> dict[str, str]:
    env = parse_env_file((EPILOG / name).read_text())
    env.update(changes)
    return env


def job_of(name: str) -> dict[str, str]:
    return parse_scontrol_job((EPILOG / name).read_text())


def as_nobody(env: dict[str, str]) -> dict[str, str]:
    """The recorded job, but owned by `nobody` (alice need not exist on this machine)."""
    return dict(env, SLURM_JOB_UID=str(NOBODY.pw_uid), SLURM_JOB_GID=str(NOBODY.pw_gid), SLURM_JOB_USER="nobody")


@pytest.fixture
def shared_tmp():
    """A directory other users can traverse (pytest's tmp_path is private to root)."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="hpcmem-epilog-test-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def run_epilog_process(env: dict[str, str], *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-I", "-m", "hpcmem.ingest.epilog", *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


def spooled(spool: Path, user: str = "nobody") -> list[Path]:
    return sorted((spool / user / "new").glob("*.json"))


# --------------------------------------------------------------------------- deciding


@pytest.mark.parametrize(
    ("job", "state", "failure_state", "exit_code", "exit_signal", "derived"),
    [
        ("1", "TIMEOUT", "TIMEOUT", 0, 0, 0),  # env says 0:0; scontrol's Reason=TimeLimit
        ("2", "COMPLETED", None, 0, 0, 0),
        ("3", "FAILED", "FAILED", 3, 0, 0),
        ("4", "OUT_OF_MEMORY", "OUT_OF_MEMORY", 0, 125, 0),
        ("5", "COMPLETED", "FAILED", 0, 0, 3),  # srun step exit 3 hidden by the script
        ("7", "TIMEOUT", "TIMEOUT", 0, 0, 0),
    ],
)
@pytest.mark.parametrize("hook", ["epilog", "epilog-slurmctld"])
def test_outcome_of_each_reference_job(job, state, failure_state, exit_code, exit_signal, derived, hook):
    outcome = job_outcome(env_of(f"{job}.{hook}.env"), job_of(f"{job}.{hook}.scontrol"))
    assert (outcome.state, outcome.failure_state) == (state, failure_state)
    assert (outcome.exit_code, outcome.exit_signal, outcome.derived_exit_code) == (exit_code, exit_signal, derived)
    assert outcome.certain


def test_cancelled_job_shows_only_in_scontrol_exit_signal():
    env, job = env_of("lab/cancel-6.epilog.env"), job_of("lab/cancel-6.epilog.scontrol")
    assert env["SLURM_JOB_EXIT_CODE2"] == "0:0" and job["ExitCode"] == "0:15" and job["Reason"] == "None"
    outcome = job_outcome(env, job)
    assert (outcome.state, outcome.failure_state, outcome.exit_signal) == ("CANCELLED", "CANCELLED", 15)


def test_without_scontrol_a_time_limit_is_invisible_and_marked_uncertain():
    timeout = job_outcome(env_of("1.epilog.env"), {})
    assert (timeout.state, timeout.failure_state, timeout.certain) == ("COMPLETED", None, False)
    # what the environment alone does show
    assert job_outcome(env_of("3.epilog.env"), {}).failure_state == "FAILED"
    assert job_outcome(env_of("4.epilog.env"), {}).state == "OUT_OF_MEMORY"
    assert job_outcome(env_of("5.epilog.env"), {}).derived_exit_code == 3


def test_scontrol_line_keeps_values_with_spaces():
    line = (EPILOG / "3.epilog.scontrol").read_text().replace(
        "WorkDir=/home/alice/jobs", "WorkDir=/home/alice/my jobs/run 1")
    job = parse_scontrol_job(line)
    assert job["WorkDir"] == "/home/alice/my jobs/run 1"
    assert job["StdErr"] == "/home/alice/jobs/fail-3.err"
    assert (job["JobState"], job["Reason"], job["TRES"]) == ("COMPLETING", "NonZeroExitCode", "cpu=1,mem=100M,node=1,billing=1")
    assert job["AllocNode:Sid"] == "localhost:1114" and job["Power"] == ""


def test_env_file_of_a_task_epilog_and_exported_shell_functions():
    env = env_of("lab/srunmods-7.epilog-task-step0.env")
    assert (env["LOADEDMODULES"], env["SLURM_SCRIPT_CONTEXT"], env["SLURM_STEP_ID"]) == ("gcc/13.1.0", "epilog_task", "0")
    # `env` prints an exported bash function over several lines (sacct --env-vars shows Lmod's)
    text = "# comment\nA=1\nBASH_FUNC_ml%%=() {  eval \"$($LMOD_DIR/ml_cmd \"$@\")\"\n}\nB=x=y\n"
    assert parse_env_file(text) == {"A": "1", "BASH_FUNC_ml%%": '() {  eval "$($LMOD_DIR/ml_cmd "$@")"\n}', "B": "x=y"}


def test_log_patterns_from_the_environment_are_expanded():
    env = env_of("3.epilog-slurmctld.env")
    assert expand_log_pattern(env["SLURM_JOB_STDERR"], env, env["SLURM_JOB_NAME"]) == "/home/alice/jobs/fail-3.err"
    assert expand_log_pattern("/x/%u/%%j-%j.%N", env_of("3.epilog.env"), None) == "/x/alice/%j-3.localhost"


# --------------------------------------------------------------------------- the event


@pytest.mark.parametrize("job", ["1", "3", "4", "5", "7"])
def test_dry_run_event_matches_schema_and_job(job):
    import jsonschema  # a hard dependency (lesson files are validated with it)

    result = run_epilog_process(env_of(f"{job}.epilog.env"), "--env-file", str(EPILOG / f"{job}.epilog.env"),
                                "--scontrol-file", str(EPILOG / f"{job}.epilog.scontrol"), "--dry-run")
    assert result.returncode == 0, result.stderr
    event = json.loads(result.stdout)
    jsonschema.validate(event, SCHEMA)
    validate_event(event)
    scontrol = job_of(f"{job}.epilog.scontrol")
    assert (event["job_id"], event["user"], event["uid"], event["cluster"]) == (job, "alice", 1001, "hpcmem")
    assert event["job_name"] == scontrol["JobName"] and event["partition"] == scontrol["Partition"]
    assert event["hook"] == "epilog_slurmd" and event["host"] == "localhost" and event["failed"] is True
    assert event["req_mem_mb"] == float(scontrol["MinMemoryNode"].rstrip("M"))
    assert event["end_time"] == scontrol["EndTime"] + "+00:00"
    assert event["work_dir"] == "/home/alice/jobs"


def test_epilog_slurmctld_event_takes_the_job_name_from_its_environment():
    env = env_of("3.epilog-slurmctld.env")
    result = run_epilog(["--scontrol-file", str(EPILOG / "3.epilog-slurmctld.scontrol"), "--dry-run"], env)
    assert result.event["hook"] == "epilog_slurmctld" and result.event["job_name"] == "fail"
    assert result.event["host"] == os.uname().nodename  # the controller has no SLURMD_NODENAME
    assert result.problems == []


def test_not_an_epilog_context_writes_nothing(tmp_path):
    result = run_epilog_process(env_of("3.prolog.env"), "--spool", str(tmp_path / "spool"))
    assert result.returncode == 0 and result.stderr == ""
    assert not (tmp_path / "spool").exists()


def test_bad_arguments_still_exit_0_and_say_why(tmp_path):
    result = run_epilog_process(env_of("3.epilog.env"), "--spool", str(tmp_path), "--budget", "soon")
    assert result.returncode == 0
    assert "bad arguments: argument --budget: invalid float value: 'soon'" in result.stderr


def test_epilog_imports_no_heavy_library(tmp_path):
    """The failure path (log scan, spool write) loads only the standard library and hpcmem."""
    shutil.copy(LOGS / "fail-3.err", tmp_path / "fail-3.err")
    sc = tmp_path / "job.scontrol"
    sc.write_text((EPILOG / "3.epilog.scontrol").read_text().replace("/home/alice/jobs", str(tmp_path)))
    code = ("import sys; from hpcmem.ingest.epilog import run_epilog; "
            f"r = run_epilog(['--spool', {str(tmp_path / 'spool')!r}, '--scontrol-file', {str(sc)!r}]); "
            "print(r.event_path); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'sqlalchemy', 'typer', 'rich', 'click', "
            "'numpy', 'torch', 'psycopg', 'alembic', 'platformdirs', 'filelock'}))")
    env = dict(env_of("3.epilog.env"), SLURM_JOB_UID=str(os.getuid()), SLURM_JOB_GID=str(os.getgid()))
    result = subprocess.run([sys.executable, "-I", "-c", code], env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    path, heavy = result.stdout.splitlines()
    assert path.endswith("/alice/new/hpcmem.3.epilog_slurmd.json") and heavy == "[]"
    assert "KeyError: 'missing_key_0'" in json.loads(Path(path).read_text())["log_excerpt"]


# --------------------------------------------------------------------------- as root


def _job_dir(tmp_path: Path) -> Path:
    """A job directory of `nobody` holding the real logs of the reference jobs."""
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    for name in ("fail-3.err", "fail-3.out", "oom-4.out", "timeout-1.out", "stepfail-5.out"):
        shutil.copy(LOGS / name, jobs / name)
        os.chown(jobs / name, NOBODY.pw_uid, NOBODY.pw_gid)
    return jobs


def _scontrol_file(tmp_path: Path, job: str, jobs: Path) -> Path:
    path = tmp_path / f"{job}.scontrol"
    path.write_text((EPILOG / f"{job}.epilog.scontrol").read_text().replace("/home/alice/jobs", str(jobs))
                    .replace("UserId=alice(1001)", f"UserId=nobody({NOBODY.pw_uid})"))
    return path


@as_root
@pytest.mark.parametrize(("job", "kind", "text"), [
    ("3", "python_exception", "KeyError: 'missing_key_0'"),
    ("4", "oom", "Detected 1 oom-kill event(s) in StepId=4.batch"),
    ("1", "time_limit", "DUE TO TIME LIMIT"),
    ("5", "srun_error", "srun: error: localhost: task 0: Exited with exit code 3"),
])
def test_root_epilog_spools_the_failure_with_its_log_excerpt(tmp_path, job, kind, text):
    jobs, spool = _job_dir(tmp_path), tmp_path / "spool"
    env = as_nobody(env_of(f"{job}.epilog.env"))
    started = time.monotonic()
    result = run_epilog_process(env, "--spool", str(spool), "--scontrol-file", str(_scontrol_file(tmp_path, job, jobs)))
    assert result.returncode == 0 and result.stderr == ""
    assert time.monotonic() - started < 2.0
    (path,) = spooled(spool)
    assert path.name == f"hpcmem.{job}.epilog_slurmd.json"
    event = validate_event(json.loads(path.read_text()))
    assert kind in event["log_kinds"] and text in event["log_excerpt"]
    assert event["log_path"].startswith(str(jobs))
    # only the job's user may read it: owner nobody, mode 0600, directories 0700
    info = path.stat()
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (NOBODY.pw_uid, 0o600)
    for directory in (spool / "nobody", spool / "nobody" / "new"):
        assert (directory.stat().st_uid, stat.S_IMODE(directory.stat().st_mode)) == (NOBODY.pw_uid, 0o700)
    assert list((spool / "nobody" / "tmp").iterdir()) == []


@as_root
def test_only_the_user_and_the_ingest_group_can_read_events(shared_tmp):
    spool = shared_tmp / "spool"
    env = as_nobody(env_of("3.epilog.env"))
    args = ["--spool", str(spool), "--scontrol-file", str(EPILOG / "3.epilog.scontrol")]

    def can_read(user: str, path: Path) -> bool:
        return subprocess.run(["runuser", "-u", user, "--", "cat", str(path)], capture_output=True).returncode == 0

    run_epilog_process(env, *args)
    (private,) = spooled(spool)
    assert can_read("nobody", private) and not can_read("daemon", private)

    run_epilog_process(dict(env, SLURM_JOB_ID="33"), *args, "--group", "daemon")
    shared = spool / "nobody" / "new" / "hpcmem.33.epilog_slurmd.json"
    assert (shared.stat().st_gid, stat.S_IMODE(shared.stat().st_mode)) == (1, 0o640)
    assert can_read("nobody", shared) and can_read("daemon", shared) and not can_read("bin", shared)


@as_root
def test_root_refuses_a_user_directory_it_could_be_tricked_by(tmp_path):
    spool, elsewhere = tmp_path / "spool", tmp_path / "elsewhere"
    elsewhere.mkdir()
    args = ["--spool", str(spool), "--scontrol-file", str(EPILOG / "3.epilog.scontrol")]
    env = as_nobody(env_of("3.epilog.env"))
    # the user's tmp/ swapped for a symlink to a directory root would then write into
    run_epilog_process(env, *args)
    tmp_dir = spool / "nobody" / "tmp"
    tmp_dir.rmdir()
    tmp_dir.symlink_to(elsewhere)
    result = run_epilog_process(dict(env, SLURM_JOB_ID="34"), *args)
    assert result.returncode == 0 and "cannot open spool directory" in result.stderr
    assert list(elsewhere.iterdir()) == []
    # a directory for the user planted by someone else
    (spool / "mallory-planted").mkdir()
    os.chown(spool / "mallory-planted", 1, 1)
    result = run_epilog_process(dict(env, SLURM_JOB_USER="mallory-planted", SLURM_JOB_ID="35"), *args)
    assert "owned by uid 1, not by the job's user" in result.stderr
    assert not (spool / "mallory-planted" / "new").exists()


@as_root
def test_log_symlinked_to_a_root_file_is_not_read(tmp_path):
    jobs, spool = _job_dir(tmp_path), tmp_path / "spool"
    secret = tmp_path / "root-only.txt"
    secret.write_text("Traceback (most recent call last):\nValueError: root secret\n")
    (jobs / "fail-3.err").unlink()
    (jobs / "fail-3.err").symlink_to(secret)
    os.chown(jobs / "fail-3.out", 0, 0)  # and a log root owns: not the job's, not read either
    env = as_nobody(env_of("3.epilog.env"))
    result = run_epilog_process(env, "--spool", str(spool), "--scontrol-file", str(_scontrol_file(tmp_path, "3", jobs)))
    assert result.returncode == 0
    (path,) = spooled(spool)
    event = json.loads(path.read_text())
    assert event["log_excerpt"] is None and event["failed"] is True
    assert any("Too many levels of symbolic links" in note for note in event["notes"])
    assert any("belongs to uid 0, not to the job's user" in note for note in event["notes"])
    assert "root secret" not in path.read_text()


@as_root
def test_task_epilog_modules_reach_the_jobs_event(tmp_path):
    spool = tmp_path / "spool"
    args = ["--spool", str(spool)]
    failing = as_nobody(env_of("lab/srunmods-7.epilog.env", SLURM_JOB_EXIT_CODE2="2:0"))
    # the user's first job creates their spool directory (nothing spooled: it completed)
    first = as_nobody(env_of("lab/srunmods-7.epilog.env", SLURM_JOB_ID="6"))
    assert run_epilog_process(first, *args, "--scontrol-file", str(EPILOG / "lab/cancel-6.epilog.scontrol")).returncode == 0
    step0 = as_nobody(env_of("lab/srunmods-7.epilog-task-step0.env"))
    batch = as_nobody(env_of("lab/srunmods-7.epilog-task-batch.env"))
    for env in (step0, dict(step0, LOADEDMODULES="gcc/13.1.0:cuda/11.8"), batch):
        result = run_epilog_process(env, *args)
        assert result.returncode == 0 and result.stderr == ""
    context = spool / "nobody" / "ctx" / "hpcmem.7.context.json"
    assert json.loads(context.read_text())["modules"] == ["gcc/13.1.0", "cuda/11.8"]
    result = run_epilog_process(failing, *args, "--scontrol-file", str(EPILOG / "lab/srunmods-7.epilog.scontrol"))
    assert result.returncode == 0, result.stderr
    event = json.loads((spool / "nobody" / "new" / "hpcmem.7.epilog_slurmd.json").read_text())
    assert event["modules"] == ["gcc/13.1.0", "cuda/11.8"] and event["exit_code"] == 2
    assert not context.exists()  # taken by the job's event


# --------------------------------------------------------------------------- budget


def test_hung_scontrol_is_abandoned_within_the_budget(tmp_path):
    """A FIFO with no writer blocks open() for ever, like a hung filesystem: the epilog
    leaves at its budget, exits 0 and says where it was stuck."""
    fifo = tmp_path / "scontrol.fifo"
    os.mkfifo(fifo)
    started = time.monotonic()
    result = run_epilog_process(env_of("3.epilog.env"), "--spool", str(tmp_path / "spool"), "--budget", "0.5",
                                "--scontrol-file", str(fifo), timeout=20)
    elapsed = time.monotonic() - started
    assert result.returncode == 0
    assert "gave up after the 0.5 s budget while asking scontrol" in result.stderr
    assert elapsed < 2.0, elapsed


def test_slow_scontrol_is_killed_within_the_budget(tmp_path):
    slow = tmp_path / "scontrol"
    slow.write_text("#!/bin/sh\nsleep 30\n")
    slow.chmod(0o755)
    started = time.monotonic()
    result = run_epilog_process(env_of("1.epilog.env"), "--spool", str(tmp_path / "spool"), "--budget", "0.6",
                                "--scontrol", str(slow), timeout=20)
    assert result.returncode == 0
    assert "scontrol did not answer within" in result.stderr
    assert time.monotonic() - started < 2.0
    # without scontrol the time limit stays unknown: nothing is spooled
    assert not (tmp_path / "spool" / "alice" / "new").exists() or spooled(tmp_path / "spool", "alice") == []


def test_what_was_noticed_before_the_budget_ran_out_is_reported_once(tmp_path, monkeypatch):
    """scontrol times out, then the job's log hangs (a stuck filesystem, here a read that
    sleeps): the operator is told both, not only the stage the budget ended in, and the
    worker finishing later adds nothing."""
    import hpcmem.ingest.epilog as epilog

    slow = tmp_path / "scontrol"
    slow.write_text("#!/bin/sh\nsleep 30\n")
    slow.chmod(0o755)
    finished = threading.Event()

    def stuck_log(paths, uid, notes):
        time.sleep(1.5)
        finished.set()

    monkeypatch.setattr(epilog, "capture_log", stuck_log)
    result = run_epilog(["--spool", str(tmp_path / "spool"), "--scontrol", str(slow), "--budget", "1"],
                        env_of("3.epilog.env"))
    assert result.timed_out
    assert result.problems[0].startswith("scontrol did not answer within")
    assert result.problems[-1] == "gave up after the 1 s budget while reading the job's log"
    reported = list(result.problems)
    assert finished.wait(5)
    time.sleep(0.1)
    assert result.problems == reported


def test_failing_scontrol_is_noted_and_a_clean_looking_job_not_guessed(tmp_path):
    """EpilogSlurmctld without SLURM_CONF, as recorded on the lab cluster: scontrol fails."""
    fake = tmp_path / "scontrol"
    recorded = EPILOG / "lab" / "sleeper-1.epilog-slurmctld-no-slurm-conf.scontrol"
    fake.write_text(f"#!/bin/sh\ncat {recorded} >&2\nexit 1\n")
    fake.chmod(0o755)
    env = env_of("lab/sleeper-1.epilog-slurmctld.env")
    assert "SLURM_CONF" not in env
    failed_scontrol = "scontrol exited 1: scontrol: fatal: Could not establish a configuration source"
    result = run_epilog(["--spool", str(tmp_path / "spool"), "--scontrol", str(fake)], env)
    assert result.problems == [failed_scontrol] and result.skipped == "job completed"
    # even a site that spools completed jobs does not record one it cannot be sure of
    result = run_epilog(["--spool", str(tmp_path / "spool"), "--scontrol", str(fake), "--completed"], env)
    assert result.problems == [failed_scontrol,
                               "job looks completed, but without scontrol a time limit cannot be ruled out"]
    assert result.event_path is None and result.event["state"] == "COMPLETED"
    assert not (tmp_path / "spool" / "alice" / "new").exists()


def test_spool_and_budget_from_flags_env_and_site_config(tmp_path):
    from hpcmem.ingest.epilog import DEFAULT_SPOOL, build_parser, resolve_settings

    site = tmp_path / "site.toml"
    site.write_text(f'[spool]\ndir = "{tmp_path / "site-spool"}"\n\n[epilog]\nbudget_seconds = 0.7\n')
    parse = build_parser().parse_args
    notes: list[str] = []
    settings = resolve_settings(parse([]), {"HPCMEM_SITE_CONFIG": str(site)}, notes)
    assert (settings.spool, settings.budget_s, notes) == (str(tmp_path / "site-spool"), 0.7, [])
    settings = resolve_settings(parse(["--budget", "1.5"]), {"HPCMEM_SITE_CONFIG": str(site), "HPCMEM_SPOOL": "/s"}, notes)
    assert (settings.spool, settings.budget_s) == ("/s", 1.5)
    # a broken site config is reported and ignored: the epilog still runs, with defaults
    site.write_text("[spool]\nbogus = 1\n")
    settings = resolve_settings(parse([]), {"HPCMEM_SITE_CONFIG": str(site)}, notes)
    assert (settings.spool, settings.budget_s) == (DEFAULT_SPOOL, 2.0)
    assert notes == [f"ignoring config {site}: {site}: unknown key 'spool.bogus'"]
