"""The epilog while the real slurmctld does not answer (stopped with SIGSTOP, as a hung or
overloaded controller behaves): 16 jobs end at once on this 2-core machine, and every
epilog still exits 0 within its budget plus 1 s, with its event written. Both documented
entry points; the real scontrol, pointed at the lab's configuration."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpcmem.ingest.epilog import parse_env_file
from hpcmem.ingest.spool import drain_spool
from hpcmem.kb.config import load_config
from hpcmem.kb.store.stack import StoreStack
from tests.conftest import SAMPLES

pytestmark = pytest.mark.slurm

BUDGET = 2.0
JOBS = 16
ENTRIES = {
    "hpcmem epilog": [str(Path(sys.executable).with_name("hpcmem")), "epilog"],
    "python -I -m": [sys.executable, "-I", "-m", "hpcmem.ingest.epilog"],
}


@pytest.mark.parametrize("entry", sorted(ENTRIES))
def test_sixteen_epilogs_against_a_stopped_slurmctld(slurm_lab, entry, tmp_path):
    scontrol = shutil.which("scontrol")
    assert scontrol, "the harness installs slurm-client"
    spool = tmp_path / "spool"
    me = pwd.getpwuid(os.getuid())
    base = parse_env_file((SAMPLES / "epilog" / "3.epilog.env").read_text())  # a failed job's real Epilog env
    base.update(SLURM_JOB_UID=str(me.pw_uid), SLURM_JOB_GID=str(me.pw_gid), SLURM_JOB_USER=me.pw_name,
                SLURM_CONF=str(slurm_lab.conf), PATH="/usr/bin:/bin")
    argv = [*ENTRIES[entry], "--spool", str(spool), "--scontrol", scontrol, "--budget", str(BUDGET)]
    ctld = slurm_lab.daemon_pids()["slurmctld"]
    os.kill(ctld, signal.SIGSTOP)
    try:
        started, procs = {}, {}
        for n in range(JOBS):
            job_id = str(9001 + n)
            started[job_id] = time.monotonic()
            procs[job_id] = subprocess.Popen(argv, env={**base, "SLURM_JOB_ID": job_id}, stdout=subprocess.PIPE,
                                             stderr=subprocess.PIPE, text=True)
        walls, errors = {}, {}
        for job_id, proc in procs.items():
            _out, errors[job_id] = proc.communicate(timeout=60)
            walls[job_id] = time.monotonic() - started[job_id]
            assert proc.returncode == 0, errors[job_id]
    finally:
        os.kill(ctld, signal.SIGCONT)
    slowest = max(walls, key=walls.get)
    assert walls[slowest] <= BUDGET + 1.0, f"{walls[slowest]:.2f} s: {errors[slowest]}"
    # It really hung: no epilog got the controller's answer. Each one either timed out on
    # scontrol (and says so, even when the budget then ran out during the log read) or spent
    # its budget before or while asking: on a loaded machine start-up alone can take most of
    # 2 s, and how the sixteen split between the two depends on load.
    for job_id, e in errors.items():
        assert ("scontrol did not answer" in e
                or f"gave up after the {BUDGET:g} s budget while asking scontrol" in e
                or f"gave up after the {BUDGET:g} s budget while writing the event" in e), (job_id, e)
    assert any("scontrol did not answer" in e for e in errors.values())

    events = [json.loads(f.read_text()) for f in (spool / me.pw_name / "new").glob("*.json")]
    assert len(events) == JOBS
    for event in events:  # each stored event says what it lacks
        assert any("scontrol" in note for note in event["notes"]), event["notes"]
    config = load_config(environ={"HPCMEM_HOME": str(tmp_path / "home"), "HPCMEM_DISABLE_LOCAL_CONFIG": "1"})
    store = StoreStack.from_config(config).user.open()
    first, second = drain_spool(store, str(spool)), drain_spool(store, str(spool))
    assert (first.ingested, first.quarantined, second.ingested) == (JOBS, 0, 0)
