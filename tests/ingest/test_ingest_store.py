"""sacct dumps and job logs into a real store (SQLite and PostgreSQL)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from sqlalchemy import func, select, text

from hpcmem.ingest.logs import expand_log_path, ingest_logs
from hpcmem.ingest.sacct_ingest import ingest_sacct
from hpcmem.kb.store.models import JobRecord, Occurrence, Signature
from tests.conftest import SAMPLES

SACCT = SAMPLES / "sacct"
LOGS = SAMPLES / "logs"
UTC = dt.timezone.utc


def ingest_file(store, name: str, **kw):
    with open(SACCT / name, encoding="utf-8") as fh:
        return ingest_sacct(store, fh, cluster="testcl", tz=UTC, **kw)


def occurrences(store) -> dict[str, Occurrence]:
    with store.session() as s:
        return {o.job_id: o for o in s.scalars(select(Occurrence)).all()}


def signature_of(store, occ: Occurrence) -> Signature:
    with store.session() as s:
        return s.get(Signature, occ.signature_id)


def counts_match_occurrences(store) -> None:
    with store.session() as s:
        per_sig = dict(s.execute(select(Occurrence.signature_id, func.count()).group_by(Occurrence.signature_id)).all())
        for sig in s.scalars(select(Signature)).all():
            assert sig.count == per_sig.get(sig.id, 0), sig.template


def test_real_cluster_dump_becomes_occurrences_and_job_records(store_factory):
    store = store_factory().open()
    summary = ingest_file(store, "real-22.05-parsable2.psv")
    assert (summary.rows_read, summary.jobs, summary.failures) == (14, 7, 6)
    occ = occurrences(store)
    assert sorted(occ) == ["1", "3", "4", "5", "6", "7"]  # job 2 completed
    assert (occ["4"].state, occ["4"].exit_code, occ["4"].exit_signal) == ("OUT_OF_MEMORY", 0, 125)
    assert occ["4"].req_mem_mb == 50.0 and occ["4"].max_rss_mb == pytest.approx(44064 / 1024)
    assert occ["4"].failed_step == "batch" and occ["4"].user_name == "alice" and occ["4"].account == "research"
    assert (occ["3"].state, occ["3"].exit_code) == ("FAILED", 3)
    assert (occ["5"].state, occ["5"].exit_code, occ["5"].failed_step) == ("FAILED", 3, "0")  # COMPLETED job, failed step
    assert occ["6"].state == "CANCELLED" and occ["6"].nodes is None
    assert occ["1"].state == "TIMEOUT" and occ["1"].req_time_s == 60 and occ["1"].elapsed_s == 85
    assert occ["7"].req_time_s is None
    assert occ["1"].end_time == dt.datetime(2026, 11, 30, 0, 5, 46, tzinfo=UTC)
    assert occ["1"].work_dir == "/home/alice/jobs" and occ["1"].submit_line == "sbatch --parsable timeout.sh"
    assert signature_of(store, occ["4"]).category == "host_oom"
    assert signature_of(store, occ["1"]).category == "time_limit"
    assert signature_of(store, occ["7"]).fingerprint == signature_of(store, occ["1"]).fingerprint
    assert signature_of(store, occ["5"]).category == "nonzero_exit"
    with store.session() as s:
        jobs = {j.job_id: j for j in s.scalars(select(JobRecord)).all()}
    assert len(jobs) == 7 and jobs["2"].state == "COMPLETED" and not jobs["2"].failed
    assert jobs["4"].failed and jobs["4"].req_mem_mb == 50.0
    counts_match_occurrences(store)


def snapshot(store) -> list:
    with store.engine.connect() as conn:
        return [
            conn.execute(text("SELECT o.job_id, s.fingerprint, o.state, o.message FROM occurrences o "
                              "LEFT JOIN signatures s ON s.id = o.signature_id ORDER BY o.job_id")).all(),
            conn.execute(text("SELECT fingerprint, count, first_seen, last_seen FROM signatures ORDER BY fingerprint")).all(),
            conn.execute(text("SELECT job_id, state, req_mem_mb FROM job_records ORDER BY job_id")).all(),
        ]


def test_reingesting_changes_nothing(store_factory):
    store = store_factory().open()
    first = ingest_file(store, "lab-week.psv")
    before = snapshot(store)
    again = ingest_file(store, "lab-week.psv")
    assert snapshot(store) == before
    assert first.occurrences_new == first.failures > 0
    assert again.occurrences_new == 0 and again.signatures_new == 0
    assert again.occurrences_updated == first.failures


def test_batch_size_does_not_change_the_result(store_factory):
    big, small = store_factory("big").open(), store_factory("small").open()
    ingest_file(big, "lab-week.psv", batch_size=5000)
    ingest_file(small, "lab-week.psv", batch_size=7)
    assert snapshot(big) == snapshot(small)
    counts_match_occurrences(small)


def test_lab_week_stories(store_factory):
    store = store_factory().open()
    ingest_file(store, "lab-week.psv")
    occ = occurrences(store)
    assert occ["52004"].state == "OUT_OF_MEMORY" and occ["52004"].user_name == "bob"
    assert occ["52008"].state == "OUT_OF_MEMORY"  # allocation FAILED, srun step OOM
    assert occ["52056"].state == "NODE_FAIL" and occ["52066"].state == "PREEMPTED"
    assert occ["52053"].state == "CANCELLED"
    assert signature_of(store, occ["52056"]).category == "node_failure"
    assert signature_of(store, occ["52066"]).category == "preempted"
    with store.session() as s:
        follow_up = s.scalars(select(JobRecord).where(JobRecord.job_id == "52005")).one()
    assert follow_up.state == "COMPLETED" and follow_up.user_name == "bob" and follow_up.req_mem_mb > occ["52004"].req_mem_mb


def test_malformed_lines_are_reported_not_fatal(store_factory):
    store = store_factory().open()
    summary = ingest_file(store, "malformed.psv")
    lines = [issue["line"] for issue in summary.issues]
    assert lines == sorted(lines) and {6, 7, 8, 9, 11, 13, 14} <= set(lines)
    assert summary.jobs == 5
    with store.session() as s:
        assert {j.job_id for j in s.scalars(select(JobRecord)).all()} == {"60001", "60002", "60004", "60005", "60006"}


def test_log_refines_the_sacct_signature_in_either_order(store_factory):
    a, b = store_factory("a").open(), store_factory("b").open()
    ingest_file(a, "real-22.05-parsable2.psv")
    sacct_sig = signature_of(a, occurrences(a)["3"])
    assert sacct_sig.category == "nonzero_exit"
    ingest_logs(a, [str(LOGS / "fail-3.err")], cluster="testcl")
    ingest_logs(b, [str(LOGS / "fail-3.err")], cluster="testcl")
    ingest_file(b, "real-22.05-parsable2.psv")
    for store in (a, b):
        occ = occurrences(store)["3"]
        sig = signature_of(store, occ)
        assert sig.category == "python_exception" and "KeyError" in sig.template
        assert occ.state == "FAILED" and occ.exit_code == 3 and occ.user_name == "alice"  # sacct fields kept
        assert "KeyError: 'missing_key_0'" in occ.log_excerpt and occ.log_path.endswith("fail-3.err")
        counts_match_occurrences(store)
    assert snapshot(a)[0] == snapshot(b)[0]


def test_log_directory_ingest_links_jobs_by_file_name(store_factory):
    store = store_factory().open()
    summary = ingest_logs(store, [str(LOGS)], cluster="testcl")
    occ = occurrences(store)
    # two sample logs belong to job 4 (the cgroup and the no-cgroup run): one occurrence
    assert summary.files >= 20 and summary.failures == len(occ) + 1
    assert signature_of(store, occ["4410613"]).category == "unknown_module"
    assert signature_of(store, occ["4410600"]).category == "symbol_version_not_found"
    assert summary.clean >= 1  # ok-2.out has no error
    assert "2" not in occ


def test_log_without_job_id_is_reported(store_factory, tmp_path: Path):
    store = store_factory().open()
    log = tmp_path / "notes.txt"
    log.write_text("Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: bad\n")
    summary = ingest_logs(store, [str(log)], cluster="testcl")
    assert summary.failures == 0 and summary.issues[0]["reason"].startswith("no job id")
    summary = ingest_logs(store, [str(log)], cluster="testcl", job_id="991")
    assert summary.occurrences_new == 1


SECRETS = [
    "hf_FAKEsubmitLineTokenQwErTyUiOp12",
    "Tr0ub4dor-FAKE-pw",
    "ghp_FAKEurlCredToken0123456789abcdefABCD",
    "hf_FAKEqZxWvYtRsPoNmLkJiHgFeDcBaQwErT",
    "sk-proj-FAKE3xAmpl3K3y-n0tR3al_9dQ2mVt7LpWz4RbYc8NhGs1JkU6e",
    "ghp_FAKE0nly4T3sts0000xYz9Q8w7E6r5T4y3U2",
]


def dump_all_text(store) -> str:
    chunks = []
    with store.engine.connect() as conn:
        for table in ("occurrences", "job_records", "signatures"):
            for row in conn.execute(text(f"SELECT * FROM {table}")):
                chunks.extend(str(v) for v in row)
    return "\n".join(chunks)


def test_no_secret_reaches_the_store(store_factory):
    store = store_factory().open()
    summary = ingest_file(store, "secrets-in-submitline.psv")
    logs = ingest_logs(store, [str(LOGS / "slurm-4410744.out")], cluster="testcl")
    text_ = dump_all_text(store)
    assert summary.redactions >= 3 and logs.failures == 1  # the log scanner redacts its excerpt itself
    for secret in SECRETS:
        assert secret not in text_
    assert "[REDACTED:" in text_
    occ = occurrences(store)
    assert occ["8801"].submit_line == "sbatch --export=ALL,HF_TOKEN=[REDACTED:huggingface_token] upload.sh"


@pytest.mark.parametrize(
    "pattern, expected",
    [
        ("/home/bob/align/%x-%j.out", "/home/bob/align/align_reads-52004.out"),
        ("/scratch/%u/logs/slurm-%A_%a.err", "/scratch/bob/logs/slurm-52004_.err"),
        ("/plain/path.out", "/plain/path.out"),
        ("/odd/100%%-%j.out", "/odd/100%-52004.out"),
    ],
)
def test_expand_log_path(pattern: str, expected: str):
    assert expand_log_path(pattern, "52004", "bob", "align_reads") == expected


def test_expand_log_path_for_array_tasks():
    assert expand_log_path("slurm-%A_%a.out", "52067_7") == "slurm-52067_7.out"
    assert expand_log_path("job-%j.out", "52067_7") == "job-52067.out"


def test_sacct_logs_option_reads_the_paths_sacct_gives(store_factory, tmp_path: Path):
    """StdOut/StdErr patterns (%x-%j) are expanded and opened directly; missing logs are fine."""
    (tmp_path / "train-900.err").write_text((LOGS / "fail-3.err").read_text())
    header = "JobID|JobName|User|State|ExitCode|DerivedExitCode|Elapsed|ReqMem|MaxRSS|WorkDir|StdOut|StdErr|Submit|Start|End"
    rows = [
        f"900|train|alice|FAILED|3:0|0:0|00:00:02|1G||{tmp_path}|{tmp_path}/%x-%j.out|{tmp_path}/%x-%j.err|2026-11-30T01:00:00|2026-11-30T01:00:01|2026-11-30T01:00:03",
        "900.batch|batch||FAILED|3:0||00:00:02||1024K|||||2026-11-30T01:00:01|2026-11-30T01:00:03",
        f"901|gone|alice|FAILED|1:0|0:0|00:00:02|1G||{tmp_path}|{tmp_path}/missing-%j.out|{tmp_path}/missing-%j.out|2026-11-30T01:00:00|2026-11-30T01:00:01|2026-11-30T01:00:03",
    ]
    store = store_factory().open()
    summary = ingest_sacct(store, [header, *rows], cluster="testcl", tz=UTC, scan_logs=True)
    assert summary.failures == 2 and summary.logs_scanned == 4
    occ = occurrences(store)
    assert occ["900"].log_path == f"{tmp_path}/train-900.err"
    assert signature_of(store, occ["900"]).category == "python_exception"
    assert occ["901"].log_excerpt is None and signature_of(store, occ["901"]).category == "nonzero_exit"
