"""`hpcmem recall --job` on a job that has not failed but waits in the queue forever: the real
cluster holds a job whose --time exceeds its partition's MaxTime (Reason=PartitionTimeLimit),
and recall explains it from the job and the partitions (issue 34, item 5)."""

from __future__ import annotations

import json
import time

import pytest

from tests.cli.helpers import HPCMEM

pytestmark = pytest.mark.slurm

SLEEP = "#!/bin/bash\nsleep 5\n"


def test_a_job_pending_over_the_partitions_max_time_is_explained(slurm_lab, tmp_path):
    job = slurm_lab.submit(SLEEP, args=["-p", "debug", "--time=10"])  # debug's MaxTime is 2 min
    try:
        deadline = time.monotonic() + 30
        while slurm_lab.job_info(job).get("Reason") != "PartitionTimeLimit" and time.monotonic() < deadline:
            time.sleep(0.5)
        assert slurm_lab.job_info(job).get("JobState") == "PENDING"
        env = {"HPCMEM_HOME": str(tmp_path / "home")}
        done = slurm_lab.run([HPCMEM, "recall", "--json", "--no-model", "--job", str(job)], env=env)
        assert done.returncode == 1, done.stderr  # no stored lesson; the explanation is advice
        doc = json.loads(done.stdout)
        assert doc["pending"] == {"job_id": str(job), "reason": "PartitionTimeLimit", "partition": "debug",
                                  "time_limit": "00:10:00", "qos": "normal"}
        first = doc["advice"][0]
        assert first["cause"] == (f"Job {job} is pending and will never start as it is: it asks 00:10:00 and "
                                  "partition debug allows at most 00:02:00.")
        assert f"scontrol update JobId={job} TimeLimit=00:02:00" in first["fix"]
        assert first["actions"][1] == {"type": "sbatch", "option": "--partition", "to": "main", "from": "debug"}
        human = slurm_lab.run([HPCMEM, "recall", "--no-model", "--job", str(job)], env=env)
        assert f"Job {job} has not failed: it is pending (Reason=PartitionTimeLimit)." in human.stdout
        unknown = slurm_lab.run([HPCMEM, "recall", "--job", "999999"], env=env)
        assert unknown.returncode == 2 and "no stored failure for job 999999" in unknown.stderr
    finally:
        slurm_lab.run(["scancel", str(job)])
