"""The drain a recall does first is library code: a Python caller of
``drain_before_recall`` then ``Recaller`` gets what `hpcmem recall --job` gets."""

from __future__ import annotations

import os
import pwd

from hpcmem.ingest.epilog import parse_env_file, run_epilog
from hpcmem.ingest.spool import Ownership, drain_before_recall, write_event
from hpcmem.kb.config import load_config
from hpcmem.kb.recall.recaller import Recaller, RecallQuery
from hpcmem.kb.store.stack import StoreStack
from tests.conftest import SAMPLES

EPILOG = SAMPLES / "epilog"


def spooled_failure(spool, job_id: str) -> None:
    env = parse_env_file((EPILOG / "3.epilog.env").read_text())
    env.update(SLURM_JOB_ID=job_id, SLURM_JOBID=job_id, SLURM_JOB_UID=str(os.getuid()), SLURM_JOB_GID=str(os.getgid()))
    event = run_epilog(["--scontrol-file", str(EPILOG / "3.epilog.scontrol"), "--dry-run"], env).event
    event["user"] = pwd.getpwuid(os.getuid()).pw_name
    write_event(str(spool), event, Ownership())


def test_python_caller_recalls_a_job_the_epilog_just_spooled(tmp_path):
    spool = tmp_path / "spool"
    spooled_failure(spool, "880011")
    config = load_config(cli_overrides={"spool": {"dir": str(spool)}})
    stack = StoreStack.from_config(config)
    try:
        assert drain_before_recall(stack, config, job_id="880011") == []
        recaller = Recaller(stack, config, allow_model=False)
        try:
            result = recaller.recall(RecallQuery(job_id="880011"))
        finally:
            recaller.close()
        assert result["query"]["job_id"] == "880011" and result["seen_before"]["count"] == 1
        assert result["query"]["category"] != "unknown"
        assert list((spool / event_user() / "new").iterdir()) == []
    finally:
        stack.dispose()


def event_user() -> str:
    return pwd.getpwuid(os.getuid()).pw_name


def test_nothing_pending_costs_nothing_and_a_failed_drain_is_a_warning(tmp_path):
    config = load_config(cli_overrides={"spool": {"dir": str(tmp_path / "no-such-spool")}})
    stack = StoreStack.from_config(config)
    try:
        assert drain_before_recall(stack, config) == []
    finally:
        stack.dispose()
    spool = tmp_path / "spool"
    spooled_failure(spool, "880012")
    (tmp_path / "not-a-dir").write_text("")  # the user store cannot be created under a file
    broken = load_config(cli_overrides={"spool": {"dir": str(spool)},
                                        "stores": {"user": {"url": f"sqlite:///{tmp_path}/not-a-dir/user.db"}}})
    stack = StoreStack.from_config(broken)
    try:
        warnings = drain_before_recall(stack, broken, job_id="880012")
    finally:
        stack.dispose()
    assert len(warnings) == 1 and warnings[0].startswith("pending epilog events not stored yet: ")
    assert [p.name for p in (spool / event_user() / "new").iterdir()]  # still pending for the next drain
