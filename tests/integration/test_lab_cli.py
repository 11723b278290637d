"""`python -m tests.integration.slurm_lab up|status|down`, run as a person would.

The CLI lab and the session's lab (conftest) share the root, the ports, the database and
the node's cgroups, so they cannot both be up. The test pauses the session lab (its
down()), runs the CLI from up to down in subprocesses, then brings the session lab up
again for the modules after it (their fixtures are module-scoped and start fresh).
"""

from __future__ import annotations

import grp
import pwd
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.slurm_lab import (
    DB_NAME,
    DB_USER,
    DEFAULT_ROOT,
    SlurmLab,
    proc_start_time,
)

REPO = Path(__file__).resolve().parents[2]
NEW_USER = "hpcmemcli"  # must not exist before: the lab creates it and must remove it
NEW_GROUP = "hpcmemlab"  # likewise: the lab's group, holding its users
CLI = [sys.executable, "-m", "tests.integration.slurm_lab"]


def lab_cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, check=False)  # fmt: skip


def exists(getter, name: str) -> bool:
    try:
        getter(name)
    except KeyError:
        return False
    return True


@pytest.fixture
def session_lab_paused(slurm_lab: SlurmLab):
    slurm_lab.down()
    try:
        yield
    finally:
        lab_cli("down")  # whatever the test left, so the session lab can come back
        slurm_lab.up()


@pytest.mark.slurm
def test_up_keeps_the_lab_running_and_down_leaves_nothing(session_lab_paused):
    assert not exists(pwd.getpwnam, NEW_USER), f"user {NEW_USER} exists before the test"
    assert not exists(grp.getgrnam, NEW_GROUP), f"group {NEW_GROUP} exists before the test"
    # users that existed before, and that no earlier up() under this root created, stay
    created_before = set(SlurmLab().created()["users"])
    kept = [u for u in ("root", "alice", "bob") if exists(pwd.getpwnam, u) and u not in created_before]
    up = lab_cli("up", "--extra-user", NEW_USER, "--gres", "gpu=1", "--lab-group", NEW_GROUP)
    assert up.returncode == 0, up.stderr
    assert NEW_USER in grp.getgrnam(NEW_GROUP).gr_mem
    export = re.search(r"^export SLURM_CONF=(\S+)$", up.stdout, re.M)
    assert export, up.stdout

    # the `up` process has exited; the daemons must not have gone with it
    status = lab_cli("status")
    assert status.returncode == 0, status.stdout + status.stderr
    assert "node localhost: idle" in status.stdout
    pids = {name: int(pid) for name, pid in re.findall(r"^(\S+)\s+alive, pid (\d+)$",
                                                       status.stdout, re.M)}  # fmt: skip
    assert {"munged", "slurmdbd", "slurmctld", "slurmd", "lockkeeper"} <= set(pids)
    starts = {name: proc_start_time(pid) for name, pid in pids.items()}

    # what a person does after `export SLURM_CONF=...`
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "SLURM_CONF": export.group(1)}
    sinfo = subprocess.run(["sinfo", "-h", "-o", "%P %t"], env=env, capture_output=True,
                           text=True, timeout=30, check=False)  # fmt: skip
    assert sinfo.stdout.split() == ["main*", "idle", "debug", "idle"], sinfo.stderr
    work = DEFAULT_ROOT / "work" / NEW_USER
    done = subprocess.run(
        ["runuser", "-u", NEW_USER, "--", "sbatch", "--wait", "--gres=gpu:1", "-o", "gpu.out",
         "--wrap", "echo gpus=$CUDA_VISIBLE_DEVICES"],
        cwd=work, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (work / "gpu.out").read_text().strip() == "gpus=0"
    # a job still running at `down` must not keep its cgroup or user alive
    running = subprocess.run(["runuser", "-u", NEW_USER, "--", "sbatch", "--wrap", "sleep 300"],
                             cwd=work, env=env, capture_output=True, text=True, timeout=30)  # fmt: skip
    assert running.returncode == 0, running.stderr

    down = lab_cli("down")
    assert down.returncode == 0, down.stdout + down.stderr
    assert "nothing left" in down.stdout

    alive = [name for name, pid in pids.items() if proc_start_time(pid) == starts[name]]
    assert not alive, f"still running after down: {alive}"
    assert SlurmLab.cgroup_dirs() == []
    assert not DEFAULT_ROOT.exists()
    assert not exists(pwd.getpwnam, NEW_USER) and not exists(grp.getgrnam, NEW_USER)
    assert not exists(grp.getgrnam, NEW_GROUP)
    assert not Path("/home", NEW_USER).exists()
    assert all(exists(pwd.getpwnam, user) for user in kept), kept
    assert not any(exists(pwd.getpwnam, user) for user in created_before)
    if SlurmLab._mariadb_answers():
        query = subprocess.run(
            ["mariadb", "-uroot", "-N", "-e",
             f"SHOW DATABASES LIKE '{DB_NAME}'; SELECT User FROM mysql.user WHERE User='{DB_USER}'"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        assert query.stdout.strip() == ""
    else:  # the lab started MariaDB itself and stopped it again: look at the data dir
        assert not Path("/var/lib/mysql", DB_NAME).exists()
    assert lab_cli("status").returncode == 3


def test_bad_gres_is_a_one_line_usage_error():
    result = lab_cli("up", "--gres", "gpu")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].endswith(
        "expected NAME=COUNT such as gpu=2, not 'gpu'"
    )
