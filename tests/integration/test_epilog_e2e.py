"""The whole path on a real Slurm: jobs fail, the epilogs spool them, hpcmem stores,
learns and recalls.

The session's lab runs the harness's record-env.sh as Prolog, Epilog and
EpilogSlurmctld. For this module its copy in the lab's hooks directory is swapped for
hooks/hpcmem-epilog.sh, which first runs record-env.sh (so the smoke tests' records
stay complete) and then `hpcmem epilog`: as root with the virtualenv's Python on the
node, as SlurmUser with the system Python on the controller. slurm.conf is untouched
(Slurm executes the script file anew for every job); the original is put back afterwards.

Jobs (as the unprivileged lab user): a Python traceback (exit 3), a memory limit, a
time limit (forced with `scontrol update TimeLimit=0`), a failing srun step, an --output
directory that does not exist (the job fails to launch), a segfault (the script exits
139), an invalid partition (rejected at submission: no job, no epilog), and the
memory-limit job resubmitted with more memory, which succeeds.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.integration.slurm_lab import SlurmLab, SubmissionRejected

pytestmark = pytest.mark.slurm

HOOKS = Path(__file__).resolve().parent / "hooks"
# hpcmem's CLI as installed.
CLI = """
import sys
from hpcmem.cli.main import main
sys.argv[0] = "hpcmem"
main()
"""


@dataclass
class Run:
    lab: SlurmLab
    ids: dict[str, int]
    rejected: SubmissionRejected
    node_spool: Path
    ctld_spool: Path
    home: Path
    spool_summary: dict
    sacct_summary: dict

    def db(self, query: str, *args) -> list[tuple]:
        with sqlite3.connect(self.home / "data" / "user.db") as conn:
            return conn.execute(query, args).fetchall()

    def hpcmem(self, *args: str, expect: int | None = 0) -> subprocess.CompletedProcess:
        env = dict(os.environ, HPCMEM_HOME=str(self.home), HPCMEM_DISABLE_LOCAL_CONFIG="1",
                   HPCMEM_CLUSTER="hpcmem", SLURM_CONF=str(self.lab.conf))
        done = subprocess.run([sys.executable, "-c", CLI, *args], capture_output=True, text=True, env=env,
                              timeout=180)
        if expect is not None:
            assert done.returncode == expect, (done.stderr, done.stdout[-4000:])
        return done


def _install_hooks(lab: SlurmLab, node_spool: Path, ctld_spool: Path, group: str = "") -> None:
    hooks = lab.hooks_dir
    # the epilog path is standard library only: a copy of the package is all the system Python needs
    pylib = hooks / "pylib" / "hpcmem"
    pylib.mkdir(parents=True)
    shutil.copy(REPO / "__init__.py", pylib / "__init__.py")
    for package in ("ingest", "kb"):
        shutil.copytree(REPO / package, pylib / package, ignore=shutil.ignore_patterns("__pycache__", "migrations"))
    for path in [hooks / "pylib", *(hooks / "pylib").rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    (hooks / "hpcmem-epilog.conf").write_text(
        f"NODE_PYTHON='{sys.executable}'\nCTLD_PYTHON='/usr/bin/python3'\nPYLIB='{hooks / 'pylib'}'\n"
        f"NODE_SPOOL='{node_spool}'\nCTLD_SPOOL='{ctld_spool}'\nLAB_SLURM_CONF='{lab.conf}'\n"
        f"SPOOL_GROUP='{group}'\n")
    shutil.copy(HOOKS / "hpcmem-epilog.sh", hooks / "hpcmem-epilog.sh")
    shutil.copy(hooks / "record-env.sh", hooks / "chained-hook.sh")
    for name in ("hpcmem-epilog.sh", "chained-hook.sh", "hpcmem-epilog.conf"):
        (hooks / name).chmod(0o755)
    _replace(hooks / "record-env.sh", '#!/bin/sh\nexec "$(dirname "$0")/hpcmem-epilog.sh" "$@"\n')


def _replace(path: Path, text: str) -> None:
    """Swap a hook atomically: a slurmd starting it meanwhile sees the old or the new one."""
    tmp = path.with_name(path.name + ".new")
    tmp.write_text(text)
    tmp.chmod(0o755)
    os.replace(tmp, path)


def _restore_hooks(lab: SlurmLab) -> None:
    hooks = lab.hooks_dir
    if (hooks / "chained-hook.sh").exists():
        _replace(hooks / "record-env.sh", (hooks / "chained-hook.sh").read_text())
    for name in ("hpcmem-epilog.sh", "hpcmem-epilog.conf", "chained-hook.sh"):
        (hooks / name).unlink(missing_ok=True)
    shutil.rmtree(hooks / "pylib", ignore_errors=True)


@pytest.fixture(scope="module")
def run(slurm_lab: SlurmLab, job_scripts: Path, tmp_path_factory) -> Run:
    lab = slurm_lab
    node_spool = lab.root / "hpcmem-spool"
    ctld_spool = lab.root / "hpcmem-spool-ctld"
    for spool in (node_spool, ctld_spool):
        shutil.rmtree(spool, ignore_errors=True)
    node_spool.mkdir(mode=0o711)
    ctld_spool.mkdir(mode=0o700)
    slurm = pwd.getpwnam("slurm")
    os.chown(ctld_spool, slurm.pw_uid, slurm.pw_gid)  # EpilogSlurmctld writes as SlurmUser
    home = tmp_path_factory.mktemp("e2e-home")
    home.chmod(0o700)
    _install_hooks(lab, node_spool, ctld_spool)
    try:
        lab.stage(job_scripts / "train.py")
        ids = {"sleeper": lab.submit(job_scripts / "sleep.sh")}
        lab.wait_running(ids["sleeper"])
        lab.force_timeout(ids["sleeper"])  # ~30 s until slurmctld's next time-limit check
        for name in ("fail", "oom", "stepfail", "nodir", "segv"):
            ids[name] = lab.submit(job_scripts / f"{name}.sh")
        with pytest.raises(SubmissionRejected) as rejected:
            lab.submit(job_scripts / "fail.sh", args=["--partition=nosuch"])
        lab.wait(ids["oom"], timeout=90)
        # The same script again with 8x the memory: it completes. Times have 1 s resolution
        # and learning pairs only a resubmission submitted strictly after the failure ended.
        time.sleep(1.5)
        ids["oom_retry"] = lab.submit(job_scripts / "oom.sh", args=["--mem=400M"])
        for job_id in ids.values():
            lab.wait(job_id, timeout=120)
        lab.wait_accounted(ids.values())
        result = Run(lab, ids, rejected.value, node_spool, ctld_spool, home, {}, {})
        result.spool_summary = json.loads(result.hpcmem(
            "ingest", "spool", "--spool", str(node_spool), "--spool", str(ctld_spool), "--json").stdout)
        result.sacct_summary = json.loads(result.hpcmem(
            "ingest", "sacct", "--live", "--all-users", "--since", lab.since, "--json").stdout)
        yield result
    finally:
        _restore_hooks(lab)
        for spool in (node_spool, ctld_spool):
            shutil.rmtree(spool, ignore_errors=True)


def _events(spool: Path) -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in spool.glob("*/done/*.json")}


def test_both_epilogs_spooled_every_failure_and_nothing_else(run):
    ids = {name: str(job_id) for name, job_id in run.ids.items()}
    failed = {ids[n] for n in ("sleeper", "fail", "oom", "stepfail", "nodir", "segv")}
    node, ctld = _events(run.node_spool), _events(run.ctld_spool)
    assert set(node) == {f"hpcmem.{j}.epilog_slurmd.json" for j in failed}
    assert set(ctld) == {f"hpcmem.{j}.epilog_slurmctld.json" for j in failed}  # scontrol answered it too
    assert ids["oom_retry"] not in {e["job_id"] for e in node.values()}  # it completed: no event
    # as root, the node's events belong to the job's user; the controller's to SlurmUser
    alice, slurm = pwd.getpwnam("alice"), pwd.getpwnam("slurm")
    for path in run.node_spool.glob("alice/done/*.json"):
        assert (path.stat().st_uid, path.stat().st_mode & 0o777) == (alice.pw_uid, 0o600)
    for path in run.ctld_spool.glob("alice/done/*.json"):
        assert path.stat().st_uid == slurm.pw_uid
    by_job = {e["job_id"]: e for e in node.values()}
    assert "KeyError: 'sample_1'" in by_job[ids["fail"]]["log_excerpt"]
    assert "DUE TO TIME LIMIT" in by_job[ids["sleeper"]]["log_excerpt"]
    assert by_job[ids["sleeper"]]["reason"] == "TimeLimit"
    assert (by_job[ids["stepfail"]]["state"], by_job[ids["stepfail"]]["derived_exit_code"]) == ("COMPLETED", 3)
    assert all(e["notes"] == [] for e in [*node.values(), *ctld.values()]), [e["notes"] for e in node.values()]
    assert run.spool_summary["ingested"] == 12 and run.spool_summary["quarantined"] == 0
    # the two spools are drained one after the other: the second one's events merge into the first's
    assert (run.spool_summary["occurrences_new"], run.spool_summary["occurrences_updated"]) == (6, 6)
    # the launch failure has no log; the node saw why
    launch = by_job[ids["nodir"]]
    assert (launch["reason"], launch["exit_signal"], launch["log_excerpt"]) == ("JobLaunchFailure", 53, None)
    assert launch["missing_output_dir"].endswith("/no-such-dir")
    assert (by_job[ids["segv"]]["exit_code"], by_job[ids["segv"]]["exit_signal"]) == (139, 0)
    assert run.spool_summary["deferred"] == 0 and run.spool_summary["users"] == 2


def test_rejected_submission_is_reported_by_sbatch_only(run):
    assert run.rejected.returncode == 1
    assert "sbatch: error: invalid partition specified: nosuch" in run.rejected.stderr


def test_states_signatures_and_categories_after_spool_and_sacct(run):
    ids = {name: str(job_id) for name, job_id in run.ids.items()}
    rows = {job: (state, step, source, cat, excerpt) for job, state, step, source, cat, excerpt in run.db(
        "SELECT o.job_id, o.state, o.failed_step, o.source, s.category, o.log_excerpt "
        "FROM occurrences o JOIN signatures s ON s.id = o.signature_id")}
    assert set(rows) == {ids[n] for n in ("sleeper", "fail", "oom", "stepfail", "nodir", "segv")}
    assert all(r[2] == "epilog" for r in rows.values())  # first seen by the epilog; sacct merged in
    assert rows[ids["fail"]][:1] + rows[ids["fail"]][3:4] == ("FAILED", "python_exception")
    assert rows[ids["sleeper"]][0] == "TIMEOUT" and rows[ids["sleeper"]][3] == "time_limit"
    if run.lab.cgroup_mode == "v1":
        assert rows[ids["oom"]][0] == "OUT_OF_MEMORY" and "oom-kill event" in rows[ids["oom"]][4]
    else:
        assert rows[ids["oom"]][0] == "FAILED" and "exceeded memory limit" in rows[ids["oom"]][4]
    assert rows[ids["oom"]][3] == "host_oom"
    # the failed step is known from sacct only; the signature stays the log's traceback
    assert rows[ids["stepfail"]][:2] == ("FAILED", "0") and rows[ids["stepfail"]][3] == "python_exception"
    assert rows[ids["nodir"]][0] == "FAILED" and rows[ids["nodir"]][3] == "job_launch_failure"
    assert "no-such-dir does not exist" in rows[ids["nodir"]][4]  # kept through the sacct merge
    assert rows[ids["segv"]][3] == "segfault"
    counts = run.db("SELECT count(*) FROM signatures s WHERE s.count != "
                    "(SELECT count(*) FROM occurrences o WHERE o.signature_id = s.id)")
    assert counts == [(0,)]
    records = dict(run.db("SELECT job_id, state FROM job_records"))
    assert records[ids["oom_retry"]] == "COMPLETED"
    submit = dict(run.db("SELECT job_id, submit_line FROM job_records"))
    assert "--mem=400M" in submit[ids["oom_retry"]] and submit[ids["oom"]].endswith("oom.sh")


def test_resubmission_with_more_memory_is_learned_and_recalled(run):
    ids = {name: str(job_id) for name, job_id in run.ids.items()}
    assert run.sacct_summary["learned"]["lessons_created"] >= 1
    lessons = run.db("SELECT l.source, l.actions, l.fix FROM lessons l JOIN signatures s ON s.id = l.signature_id "
                     "JOIN occurrences o ON o.signature_id = s.id WHERE o.job_id = ?", ids["oom"])
    inferred = [json.loads(actions) for source, actions, _fix in lessons if source == "inferred"]
    assert inferred and "--mem" in json.dumps(inferred[0]) and "400M" in json.dumps(inferred[0])
    done = run.hpcmem("recall", "--job", ids["oom"], "--json", "--no-model")
    result = json.loads(done.stdout)
    stored = [m for m in result["matches"] if m["trust"] != "builtin" and m["store"] != "builtin"]
    assert stored, result["matches"]
    top = stored[0]
    assert top["trust"] == "inferred" and "400M" in json.dumps(top["actions"]), top
    assert result["query"]["category"] == "host_oom" and result["query"]["job_id"] == ids["oom"]


def test_launch_failure_is_recalled_with_concrete_advice(run):
    job = str(run.ids["nodir"])
    doc = json.loads(run.hpcmem("recall", "--json", "--job", job, expect=1).stdout)
    assert doc["query"]["category"] == "job_launch_failure"
    advice = doc["advice"][0]
    assert "no-such-dir" in advice["cause"] and "mkdir -p " in advice["fix"]


def test_sacct_alone_knows_the_launch_failure_and_the_segfault(run, tmp_path):
    """A store that only ever saw sacct: 0:53 is a launch failure, 11:0 (the script's 139) a segfault."""
    import dataclasses

    other = dataclasses.replace(run, home=tmp_path)
    tmp_path.chmod(0o700)
    other.hpcmem("ingest", "sacct", "--live", "--all-users", "--since", run.lab.since, "--json")
    rows = dict(other.db("SELECT o.job_id, s.category FROM occurrences o JOIN signatures s ON s.id = o.signature_id"))
    assert rows[str(run.ids["nodir"])] == "job_launch_failure"
    assert rows[str(run.ids["segv"])] == "segfault"
