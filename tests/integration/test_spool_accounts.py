"""docs/site-epilog.md on the real Slurm, with the accounts it names.

The spool root is `install -d -o root -g GROUP -m 0751`. The node's Epilog runs with
`--group GROUP`. A non-root ingest account in GROUP drains every user's events, as the
documented timer does. The job's user drains their own events, and recall drains them
automatically. Both orders are tried. No drain locks another out, and a spool that cannot
be listed is a one-line exit 2.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

from tests.integration.test_epilog_e2e import _install_hooks, _restore_hooks
from tests.kb.store.test_access_os import RUNNER, _interpreter_for_others

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def documented(slurm_lab):
    """Accounts and spool as the docs set them up; the hook spools with --group."""
    python = _interpreter_for_others()
    assert python, "a Python other users may run (see tests/kb/store/test_access_os.py)"
    tag = uuid.uuid4().hex[:6]
    group, ingest = f"hpcmsp_{tag}", f"hpcmsp_{tag}_ingest"
    subprocess.run(["groupadd", group], check=True)
    subprocess.run(["useradd", "-M", "-s", "/usr/sbin/nologin", "-G", group, ingest], check=True)
    spool = slurm_lab.root / "spool-documented"
    ctld_spool = slurm_lab.root / "spool-documented-ctld"
    # pytest's own temp root is root's 0700: the accounts' homes must be reachable by them
    base = Path(tempfile.mkdtemp(prefix=f"hpcmsp_{tag}_", dir="/tmp"))
    base.chmod(0o755)
    try:
        subprocess.run(["install", "-d", "-o", "root", "-g", group, "-m", "0751", str(spool)], check=True)
        subprocess.run(["install", "-d", "-o", "slurm", "-g", group, "-m", "2770", str(ctld_spool)], check=True)
        _install_hooks(slurm_lab, spool, ctld_spool, group=group)
        yield {"lab": slurm_lab, "spool": spool, "python": python, "ingest": ingest, "base": base, "group": group}
    finally:
        _restore_hooks(slurm_lab)
        subprocess.run(["userdel", ingest], capture_output=True)
        subprocess.run(["groupdel", group], capture_output=True)
        subprocess.run(["rm", "-rf", str(spool), str(ctld_spool), str(base)], check=False)


def hpcmem_as(d: dict, user: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    home = d["base"] / f"home-{user}"
    if not home.exists():
        home.mkdir(mode=0o700)
        subprocess.run(["chown", user, str(home)], check=True)
    settings = {"HPCMEM_HOME": str(home), "HPCMEM_DISABLE_LOCAL_CONFIG": "1", "HPCMEM_CLUSTER": "hpcmem",
                **(env or {})}
    return d["lab"].run([*(["env"] + [f"{k}={v}" for k, v in settings.items()]), d["python"], "-c", RUNNER, *args],
                        user=user, cwd=d["base"], timeout=180)


def drain(d: dict, user: str, *extra: str) -> subprocess.CompletedProcess:
    return hpcmem_as(d, user, "ingest", "spool", "--spool", str(d["spool"]), "--json", "--no-learn", *extra)


def fail(d: dict, job_scripts: Path) -> str:
    lab = d["lab"]
    lab.stage(job_scripts / "train.py")
    job_id = lab.submit(job_scripts / "fail.sh")
    lab.wait(job_id, timeout=120)
    # the Epilog runs after the job leaves RUNNING; wait for its event
    new = d["spool"] / lab.user / "new"
    for _ in range(100):
        if any(p.name.endswith(f".{job_id}.epilog_slurmd.json") for p in (new.iterdir() if new.exists() else [])):
            break
        __import__("time").sleep(0.1)
    return str(job_id)


def test_the_ingest_account_and_the_user_drain_in_either_order(documented, job_scripts):
    d, user = documented, documented["lab"].user
    job = fail(d, job_scripts)
    events = list((d["spool"] / user / "new").glob(f"*.{job}.epilog_slurmd.json"))
    assert events and events[0].stat().st_gid == __import__("grp").getgrnam(d["group"]).gr_gid

    timer = drain(d, d["ingest"])  # the documented timer, as the non-root ingest account
    assert timer.returncode == 0, timer.stderr
    assert json.loads(timer.stdout)["ingested"] == 1

    again = fail(d, job_scripts)
    own = drain(d, user, "--user", user)  # the user's own drain after the timer's: not locked out
    assert own.returncode == 0, own.stderr
    assert (json.loads(own.stdout)["ingested"], json.loads(own.stdout)["busy"]) == (1, 0)

    third = fail(d, job_scripts)
    recalled = hpcmem_as(d, user, "recall", "--json", "--job", third, env={"HPCMEM_SPOOL": str(d["spool"])})
    assert recalled.returncode == 0 or recalled.returncode == 1, recalled.stderr
    doc = json.loads(recalled.stdout)
    assert (doc["query"]["job_id"], doc["query"]["category"]) == (third, "python_exception")

    after = drain(d, d["ingest"])  # the timer after the user: nothing left, all handled
    assert after.returncode == 0 and json.loads(after.stdout)["ingested"] == 0, after.stderr
    assert not list((d["spool"] / user / "new").iterdir()) and again


def test_a_spool_the_ingest_account_cannot_list_is_exit_2(documented, job_scripts):
    d = documented
    fail(d, job_scripts)
    os.chmod(d["spool"], 0o711)  # what the docs said before: root-only listing
    try:
        refused = drain(d, d["ingest"])
    finally:
        os.chmod(d["spool"], 0o751)
    assert refused.returncode == 2
    assert refused.stderr.splitlines()[0].startswith(f"Error: cannot list spool {d['spool']}: permission denied")
    assert json.loads(drain(d, d["ingest"]).stdout)["ingested"] == 1  # with the documented mode it is drained
