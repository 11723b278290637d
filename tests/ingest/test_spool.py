"""The spool: events written by the epilog, drained into a store exactly once (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from sqlalchemy import func, select

from hpcmem.ingest.epilog import parse_env_file, run_epilog
from hpcmem.ingest.spool import (
    LEDGER_PREFIX,
    drain_spool,
    drain_user_events,
    event_file_name,
    has_pending,
    validate_event,
)
from hpcmem.kb.store.models import JobRecord, Occurrence, Signature, StoreMeta
from tests.conftest import SAMPLES

EPILOG = SAMPLES / "epilog"
LOGS = SAMPLES / "logs"


def spool_job(spool: Path, job: str, *, hook: str = "epilog", jobs_dir: Path | None = None, user: str = "alice",
              extra: tuple[str, ...] = (), **changes: str) -> Path | None:
    """Run the epilog (in this process) on a recorded job; returns the event file."""
    env = parse_env_file((EPILOG / f"{job}.{hook}.env").read_text())
    env.update(SLURM_JOB_UID=str(os.getuid()), SLURM_JOB_GID=str(os.getgid()), SLURM_JOB_USER=user, **changes)
    scontrol = (EPILOG / f"{job}.{hook}.scontrol").read_text()
    if jobs_dir is not None:
        scontrol = scontrol.replace("/home/alice/jobs", str(jobs_dir))
    sc_file = spool.parent / f"sc-{job}-{hook}-{env['SLURM_JOB_ID']}.txt"
    sc_file.write_text(scontrol)
    result = run_epilog(["--spool", str(spool), "--scontrol-file", str(sc_file), *extra], env)
    assert not result.problems, result.problems
    return Path(result.event_path) if result.event_path else None


def jobs_with_logs(tmp_path: Path) -> Path:
    jobs = tmp_path / "jobs"
    jobs.mkdir(exist_ok=True)
    for name in ("fail-3.err", "fail-3.out", "oom-4.out", "timeout-1.out", "stepfail-5.out", "fasttimeout-7.out"):
        shutil.copy(LOGS / name, jobs / name)
    return jobs


def occurrences(store) -> dict[str, dict]:
    with store.session() as session:
        rows = session.execute(select(Occurrence, Signature.category).join(Signature, Signature.id == Occurrence.signature_id))
        return {occ.job_id: {"state": occ.state, "category": cat, "source": occ.source, "exit_code": occ.exit_code,
                             "log_excerpt": occ.log_excerpt, "job_name": occ.job_name, "modules": occ.modules,
                             "message": occ.message, "job_context": occ.job_context} for occ, cat in rows}


def signature_counts_consistent(store) -> bool:
    with store.session() as session:
        per_sig = dict(session.execute(select(Occurrence.signature_id, func.count()).group_by(Occurrence.signature_id)).all())
        counts = dict(session.execute(select(Signature.id, Signature.count)).all())
    return all(counts[sid] == per_sig.get(sid, 0) for sid in counts)


def ledger_size(store) -> int:
    with store.session() as session:
        return session.scalar(select(func.count()).select_from(StoreMeta).where(StoreMeta.key.like(f"{LEDGER_PREFIX}%")))


def test_event_file_is_complete_and_alone(tmp_path):
    spool = tmp_path / "spool"
    path = spool_job(spool, "4")
    assert path == spool / "alice" / "new" / "hpcmem.4.epilog_slurmd.json"
    assert list((spool / "alice" / "tmp").iterdir()) == []
    event = validate_event(json.loads(path.read_text()))
    assert (event["state"], event["exit_signal"], event["reason"]) == ("OUT_OF_MEMORY", 125, "OutOfMemory")
    # the same job ending again (a second node, a rerun) replaces its file: one event per job and hook
    again = spool_job(spool, "4")
    assert again == path and json.loads(path.read_text())["event_id"] != event["event_id"]
    assert event_file_name("hpcmem", "12_3", "epilog_slurmd") == "hpcmem.12_3.epilog_slurmd.json"
    assert event_file_name("../x", "1/2", "h") == "_.._x.1_2.h.json"


def test_drain_ingests_each_reference_job_once(store_factory, tmp_path):
    store = store_factory()
    spool, jobs = tmp_path / "spool", jobs_with_logs(tmp_path)
    for job in ("1", "3", "4", "5", "7"):
        spool_job(spool, job, jobs_dir=jobs)
    spool_job(spool, "2", extra=("--completed",))  # a site without accounting keeps completed jobs too
    summary = drain_spool(store, str(spool))
    assert (summary.ingested, summary.duplicates, summary.quarantined, summary.deferred) == (6, 0, 0, 0)
    assert (summary.jobs, summary.failures, summary.occurrences_new) == (6, 5, 5)
    found = occurrences(store)
    assert {job: (o["state"], o["category"]) for job, o in found.items()} == {
        "1": ("TIMEOUT", "time_limit"),
        "3": ("FAILED", "python_exception"),
        "4": ("OUT_OF_MEMORY", "host_oom"),
        "5": ("FAILED", "python_exception"),  # the traceback of the failed srun step, from its log
        "7": ("TIMEOUT", "time_limit"),
    }
    assert all(o["source"] == "epilog" for o in found.values())
    assert "KeyError: 'missing_key_0'" in found["3"]["log_excerpt"]
    assert found["3"]["exit_code"] == 3 and found["5"]["exit_code"] == 3
    assert found["4"]["job_context"] == {"command": "oom.sh"}  # the program, beyond the columns
    with store.session() as session:
        records = {r.job_id: r for r in session.scalars(select(JobRecord))}
    assert (records["2"].state, records["2"].failed) == ("COMPLETED", False)
    assert (records["4"].req_mem_mb, records["4"].job_name, records["4"].partition) == (50.0, "oom", "main")
    assert signature_counts_consistent(store) and ledger_size(store) == 6
    assert sorted(p.name for p in (spool / "alice" / "done").iterdir()) == sorted(
        f"hpcmem.{j}.epilog_slurmd.json" for j in ("1", "2", "3", "4", "5", "7"))
    assert not has_pending(str(spool), "alice")
    # a second drain finds nothing
    again = drain_spool(store, str(spool))
    assert (again.ingested, again.duplicates, again.users) == (0, 0, 0)


def test_redelivered_event_is_a_duplicate_and_changes_nothing(store_factory, tmp_path):
    store = store_factory()
    spool = tmp_path / "spool"
    spool_job(spool, "3")
    assert drain_spool(store, str(spool)).ingested == 1
    before = occurrences(store)
    # a drain killed after its commit leaves the event in new/: put it back there
    done = spool / "alice" / "done" / "hpcmem.3.epilog_slurmd.json"
    shutil.copy(done, spool / "alice" / "new" / done.name)
    summary = drain_spool(store, str(spool))
    assert (summary.ingested, summary.duplicates, summary.jobs) == (0, 1, 0)
    assert occurrences(store) == before and signature_counts_consistent(store)
    assert not has_pending(str(spool), "alice") and done.exists()


def test_one_job_from_two_hook_points_is_one_occurrence(store_factory, tmp_path):
    store = store_factory()
    spool, jobs = tmp_path / "spool", jobs_with_logs(tmp_path)
    spool_job(spool, "3", hook="epilog-slurmctld")  # the controller cannot read the log here
    spool_job(spool, "3", jobs_dir=jobs)
    summary = drain_spool(store, str(spool))
    assert (summary.ingested, summary.jobs, summary.occurrences_new) == (2, 1, 1)
    occ = occurrences(store)["3"]
    assert occ["job_name"] == "fail"  # only in EpilogSlurmctld's environment
    assert "KeyError" in occ["log_excerpt"] and occ["category"] == "python_exception"  # only the node's Epilog read it
    assert ledger_size(store) == 2


def test_event_of_another_user_is_quarantined(store_factory, tmp_path):
    store = store_factory()
    spool = tmp_path / "spool"
    path = spool_job(spool, "3")
    planted = spool / "alice" / "new" / "hpcmem.9.epilog_slurmd.json"
    event = json.loads(path.read_text())
    event.update(user="bob", job_id="9", event_id="ab" * 16)
    planted.write_text(json.dumps(event))
    summary = drain_spool(store, str(spool))
    assert (summary.ingested, summary.quarantined) == (1, 1)
    reason = (spool / "alice" / "quarantine" / (planted.name + ".reason")).read_text()
    assert "event of user 'bob' in the spool of 'alice'" in reason
    assert set(occurrences(store)) == {"3"}


def test_epilog_event_after_sacct_keeps_what_only_sacct_knew(store_factory, tmp_path):
    from hpcmem.ingest.sacct_ingest import ingest_sacct

    store = store_factory()
    store.open()
    with open(SAMPLES / "sacct" / "real-22.05-parsable2.psv") as fh:
        ingest_sacct(store, fh, cluster="hpcmem")
    with store.session() as session:
        before = session.scalars(select(JobRecord).where(JobRecord.job_id == "4")).one()
    assert before.submit_line and before.max_rss_mb
    spool = tmp_path / "spool"
    spool_job(spool, "4", jobs_dir=jobs_with_logs(tmp_path))
    summary = drain_spool(store, str(spool))
    assert (summary.ingested, summary.occurrences_updated) == (1, 1)
    with store.session() as session:
        after = session.scalars(select(JobRecord).where(JobRecord.job_id == "4")).one()
    assert (after.submit_line, after.max_rss_mb, after.state) == (before.submit_line, before.max_rss_mb, "OUT_OF_MEMORY")
    occ = occurrences(store)["4"]
    assert occ["category"] == "host_oom" and "oom-kill event" in occ["log_excerpt"]
    assert occ["job_context"] == {"command": "oom.sh"}
    assert signature_counts_consistent(store)


def test_drain_user_events_touches_only_that_user(store_factory, tmp_path):
    store = store_factory()
    spool = tmp_path / "spool"
    spool_job(spool, "3", user="alice")
    spool_job(spool, "4", user="bob")
    summary = drain_user_events(store, str(spool), "alice", budget_s=30)
    assert summary.ingested == 1 and set(occurrences(store)) == {"3"}
    assert has_pending(str(spool), "bob") and not has_pending(str(spool), "alice")
    # nothing pending: an immediate return
    started = time.perf_counter()
    empty = drain_user_events(store, str(spool), "alice", budget_s=0.2)
    assert time.perf_counter() - started < 0.01 and empty.ingested == 0
    # no budget left: the event stays pending, nothing lost
    late = drain_user_events(store, str(spool), "bob", budget_s=0.0)
    assert (late.ingested, late.deferred) == (0, 1) and has_pending(str(spool), "bob")


def test_nothing_pending_check_imports_nothing(tmp_path):
    (tmp_path / "spool" / "alice" / "new").mkdir(parents=True)
    code = ("import sys, time; from hpcmem.ingest.spool import drain_user_events; "
            f"t = time.perf_counter(); s = drain_user_events(None, {str(tmp_path / 'spool')!r}, 'alice', 0.2); "
            "print(s.ingested, 'sqlalchemy' in sys.modules, time.perf_counter() - t)")
    result = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=30)
    ingested, loaded, seconds = result.stdout.split()
    assert (ingested, loaded) == ("0", "False") and float(seconds) < 0.005


def test_temp_files_of_dead_writers_are_recovered_or_quarantined_never_deleted(store_factory, tmp_path):
    store = store_factory()
    spool = tmp_path / "spool"
    spool_job(spool, "3")
    tmp = spool / "alice" / "tmp"
    # an epilog killed after its fsync, before its rename: a whole event, only in tmp/
    whole = spool_job(spool, "4")
    orphan = tmp / f".{whole.name}.4242.deadbeef"
    whole.rename(orphan)
    partial = tmp / ".hpcmem.5.epilog_slurmd.json.999.dead"
    partial.write_text('{"half": ')
    fresh = tmp / ".hpcmem.6.epilog_slurmd.json.998.live"
    fresh.write_text('{"being": ')
    old = time.time() - 120
    for path in (orphan, partial):
        os.utime(path, (old, old))
    summary = drain_spool(store, str(spool))
    assert (summary.ingested, summary.recovered, summary.quarantined) == (2, 1, 1)
    assert set(occurrences(store)) == {"3", "4"}  # the orphaned OOM event was not lost
    assert (spool / "alice" / "done" / whole.name).exists()
    quarantined = spool / "alice" / "quarantine" / partial.name
    assert quarantined.exists() and "writer that died" in (quarantined.parent / (partial.name + ".reason")).read_text()
    assert fresh.exists()  # a writer that may still be alive is left alone
    assert drain_spool(store, str(spool)).ingested == 0
