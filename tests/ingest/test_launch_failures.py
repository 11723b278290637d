"""Launch failures and signals, on the harness's real outputs (data/samples/harness/).

A job whose --output directory does not exist ends FAILED 0:53 with reason JobLaunchFailure
and no log. A batch script that exits 139 (its last command segfaulted) shows as 11:0 in
sacct, and as 139:0 to the Epilog.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import pwd
import subprocess
import sys
from pathlib import Path

from sqlalchemy import select

from hpcmem.ingest.epilog import parse_env_file, run_epilog
from hpcmem.ingest.failure_message import failure_message, signal_of_exit_code
from hpcmem.ingest.sacct_ingest import ingest_sacct
from hpcmem.ingest.spool import drain_spool
from hpcmem.kb.store.models import Occurrence, Signature
from tests.conftest import SAMPLES

HARNESS = SAMPLES / "harness"
UTC = dt.timezone.utc


def categories(store) -> dict[str, tuple[str, str]]:
    with store.session() as session:
        rows = session.execute(select(Occurrence.job_id, Signature.category, Occurrence.message)
                               .join(Signature, Signature.id == Occurrence.signature_id))
        return {job: (category, message) for job, category, message in rows}


def test_sacct_alone_files_the_launch_failure_and_the_segfault(store_factory):
    store = store_factory()
    store.open()
    with open(HARNESS / "launch-failure-segfault.sacct.psv", encoding="utf-8") as fh:
        ingest_sacct(store, fh, cluster="hpcmem", tz=UTC)
    found = categories(store)
    assert found["5"] == ("job_launch_failure", "Job 5 failed to launch (JobLaunchFailure)")
    assert found["6"][0] == "segfault"  # 11:0 in sacct is the script's 139


def test_exit_statuses_above_128_are_signals():
    assert [signal_of_exit_code(c) for c in (139, 137, 134, 143, 128 + 53, 3, 11, None)] == [11, 9, 6, 15, 0, 0, 0, 0]


HARNESS_WORK = "/tmp/hpcmem-slurm-lab/work/alice"


def replay(spool: Path, name: str, work: Path) -> dict:
    """The compute node's Epilog on the recorded environment and scontrol output, with the
    job's work directory moved to ``work`` (an empty directory here: no logs)."""
    env = parse_env_file((HARNESS / f"{name}.epilog.env").read_text())
    me = pwd.getpwuid(os.getuid())
    env.update(SLURM_JOB_UID=str(me.pw_uid), SLURM_JOB_GID=str(me.pw_gid), SLURM_JOB_USER=me.pw_name)
    work.mkdir(exist_ok=True)
    scontrol = spool.parent / f"{name}.scontrol"
    scontrol.write_text((HARNESS / f"{name}.scontrol").read_text().replace(HARNESS_WORK, str(work)))
    result = run_epilog(["--spool", str(spool), "--scontrol-file", str(scontrol)], env)
    assert result.event_path, result.problems
    return json.loads(Path(result.event_path).read_text())


def test_epilog_names_the_missing_output_directory_and_recall_advises_creating_it(tmp_path, hpcmem_home):
    spool = tmp_path / "spool"
    event = replay(spool, "nodir-5", tmp_path / "work")
    missing = str(tmp_path / "work" / "no-such-dir")  # from the job's StdOut, as scontrol gave it
    assert (event["reason"], event["exit_signal"], event["missing_output_dir"]) == ("JobLaunchFailure", 53, missing)

    segv = replay(spool, "segv-6", tmp_path / "work")
    assert (segv["exit_code"], segv["exit_signal"], segv["missing_output_dir"]) == (139, 0, None)

    # the user's own store, as `hpcmem recall --job` reads it
    hpcmem = str(Path(sys.executable).with_name("hpcmem"))
    env = {**os.environ, "HPCMEM_SPOOL": str(spool)}
    recalled = subprocess.run([hpcmem, "recall", "--json", "--job", "5"], env=env, capture_output=True, text=True)
    doc = json.loads(recalled.stdout)
    assert doc["query"]["category"] == "job_launch_failure", recalled.stderr
    advice = doc["advice"][0]
    assert missing in advice["cause"] and f"mkdir -p {missing}" in advice["fix"]
    assert advice["actions"] == [{"type": "command", "command": f"mkdir -p {missing}"}]

    # without its log, the segfault is read from the exit status 139
    assert segv["log_excerpt"] is None
    assert failure_message(_as_job(segv)) == "Segmentation fault (core dumped): terminated by signal 11 (SIGSEGV)"
    segv_doc = json.loads(subprocess.run([hpcmem, "recall", "--json", "--job", "6"], env=env, capture_output=True,
                                         text=True).stdout)
    assert segv_doc["query"]["category"] == "segfault"


def _as_job(event: dict):
    from types import SimpleNamespace

    return SimpleNamespace(job_id=event["job_id"], state=event["state"], failure_state=event["failure_state"],
                           failed_step=None, exit_code=event["exit_code"], exit_signal=event["exit_signal"],
                           derived_exit_code=0, derived_exit_signal=0, nodelist=event["nodes"], end=None,
                           start=None, reason=event["reason"])


def test_a_sacct_merge_keeps_the_directory_the_epilog_found(store_factory, tmp_path):
    store = store_factory()
    store.open()
    spool = tmp_path / "spool"
    replay(spool, "nodir-5", tmp_path / "work")
    drain_spool(store, str(spool))
    with open(HARNESS / "launch-failure-segfault.sacct.psv", encoding="utf-8") as fh:
        ingest_sacct(store, fh, cluster="hpcmem", tz=UTC)
    category, message = categories(store)["5"]
    assert category == "job_launch_failure" and "no-such-dir does not exist" in message


def test_an_output_directory_the_user_may_not_write_is_named_too(tmp_path):
    """Root-owned 0755: root could write there, the job's user (nobody) cannot."""
    if os.geteuid() != 0 and os.environ.get("HPCMEM_REQUIRE_ROOT_TESTS") != "1":
        import pytest

        pytest.skip("spooling for another user needs root (CI runs as root)")
    locked = tmp_path / "shared-out"
    locked.mkdir(mode=0o755)
    spool = tmp_path / "spool"
    env = parse_env_file((HARNESS / "nodir-5.epilog.env").read_text())
    nobody = pwd.getpwnam("nobody")
    env.update(SLURM_JOB_UID=str(nobody.pw_uid), SLURM_JOB_GID=str(nobody.pw_gid), SLURM_JOB_USER="nobody")
    scontrol = tmp_path / "nodir.scontrol"
    scontrol.write_text((HARNESS / "nodir-5.scontrol").read_text()
                        .replace(HARNESS_WORK + "/no-such-dir", str(locked)).replace(HARNESS_WORK, str(tmp_path)))
    spool.mkdir(mode=0o711)
    result = run_epilog(["--spool", str(spool), "--scontrol-file", str(scontrol)], env)
    event = json.loads(Path(result.event_path).read_text())
    assert (event["missing_output_dir"], event["unwritable_output_dir"]) == (None, str(locked))

    from hpcmem.ingest.spool import _message  # the line the drain files it under
    from hpcmem.kb.recall.advice import advice_for
    from hpcmem.kb.signatures.fingerprint import fingerprint

    message = _message(event, "FAILED", None, None)
    assert message == f"Job 5 failed to launch (JobLaunchFailure): output directory {locked} is not writable by the job's user"
    assert fingerprint(message).category == "job_launch_failure"
    [advice] = advice_for("job_launch_failure", {"message": message})
    assert str(locked) in advice["cause"] and "permissions" in advice["fix"]
