"""The epilog under a hung controller: every event is written, every run ends within its budget.

Sixteen jobs end at once on this 2-core machine while scontrol does not answer (a real
process that sleeps, as a hung slurmctld makes it). Both documented entry points run as
real processes: the `hpcmem epilog` console script and `python -I -m hpcmem.ingest.epilog`.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpcmem.ingest.epilog import parse_env_file
from hpcmem.ingest.spool import drain_spool
from tests.conftest import SAMPLES

BUDGET = 2.0
JOBS = 16
ENTRIES = {
    "hpcmem epilog": [str(Path(sys.executable).with_name("hpcmem")), "epilog"],
    "python -I -m": [sys.executable, "-I", "-m", "hpcmem.ingest.epilog"],
}


@pytest.fixture
def hung_scontrol(tmp_path: Path) -> Path:
    script = tmp_path / "scontrol"
    script.write_text("#!/bin/sh\nexec sleep 60\n")
    script.chmod(0o755)
    return script


def job_env(job_id: int) -> dict[str, str]:
    """A failed job's recorded Epilog environment (job 3: a Python traceback, exit 3)."""
    env = parse_env_file((SAMPLES / "epilog" / "3.epilog.env").read_text())
    me = pwd.getpwuid(os.getuid())
    env.update(SLURM_JOB_ID=str(job_id), SLURM_JOB_UID=str(me.pw_uid), SLURM_JOB_GID=str(me.pw_gid),
               SLURM_JOB_USER=me.pw_name, PATH="/usr/bin:/bin")
    return env


@pytest.mark.parametrize("entry", sorted(ENTRIES))
def test_sixteen_epilogs_with_scontrol_hung_write_every_event_within_budget(entry, hung_scontrol, tmp_path,
                                                                          store_factory):
    spool = tmp_path / "spool"
    argv = [*ENTRIES[entry], "--spool", str(spool), "--scontrol", str(hung_scontrol), "--budget", str(BUDGET)]
    started, procs = {}, {}
    for job_id in range(1001, 1001 + JOBS):
        started[job_id] = time.monotonic()
        procs[job_id] = subprocess.Popen(argv, env=job_env(job_id), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         text=True)
    walls, problems = {}, {}
    for job_id, proc in procs.items():
        out, err = proc.communicate(timeout=30)
        walls[job_id] = time.monotonic() - started[job_id]
        problems[job_id] = err
        assert proc.returncode == 0, err
    slowest = max(walls.values())
    assert slowest <= BUDGET + 1.0, f"slowest epilog took {slowest:.2f} s: {problems[max(walls, key=walls.get)]}"
    assert any("scontrol did not answer" in err for err in problems.values())  # it really hung

    me = pwd.getpwuid(os.getuid()).pw_name
    written = sorted(p.name for p in (spool / me / "new").iterdir())
    assert len(written) == JOBS, written
    # a replacement cut off by the deadline may leave a temp file, never the only copy
    leftovers = [p.name for p in (spool / me / "tmp").iterdir()]
    assert all(name[1:].split(".json")[0] + ".json" in written for name in leftovers), leftovers
    store = store_factory()
    first, second = drain_spool(store, str(spool)), drain_spool(store, str(spool))
    assert (first.ingested, first.quarantined, second.ingested) == (JOBS, 0, 0)
