"""The Recorder's bulk path: rows written through the driver equal what SQLAlchemy writes."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import insert, select

from hpcmem.ingest.sacct import SacctReader
from hpcmem.ingest.sacct_ingest import failure_row, ingest_sacct, job_row
from hpcmem.kb.store.models import JobRecord, Occurrence, Signature
from hpcmem.kb.jobs.write import JOB_COLUMNS, OCCURRENCE_COLUMNS, Recorder, _redact_cached, _signature
from tests.conftest import SAMPLES, stored_values

UTC = dt.timezone.utc
BERLIN = ZoneInfo("Europe/Berlin")


def _job(job_id: str, **values) -> dict:
    row = {c: None for c in JOB_COLUMNS}
    row.update(cluster="c1", job_id=job_id, state="COMPLETED", failed=False)
    row.update(values)
    return row


def _failure(job_id: str, **values) -> dict:
    row = {c: None for c in OCCURRENCE_COLUMNS}
    row.update(cluster="c1", job_id=job_id, state="FAILED", source="sacct", message="Job FAILED: exited with exit code 1")
    row.update(values)
    return row


# Every kind of value the column types convert: aware times in UTC and in another zone,
# naive times (taken as UTC), microseconds, JSON lists and None, floats, booleans.
JOBS = [
    _job("1", user_name="alice", submit_time=dt.datetime(2026, 11, 30, 0, 4, 21, tzinfo=UTC),
         end_time=dt.datetime(2026, 11, 30, 1, 0, 0, 123456, tzinfo=BERLIN), req_mem_mb=50.0, max_rss_mb=44064 / 1024,
         req_cpus=4, elapsed_s=85, failed=True, state="OUT_OF_MEMORY", work_dir="/home/alice/x"),
    _job("2", submit_time=dt.datetime(999, 1, 2, 3, 4, 5), end_time=None, req_mem_mb=3, failed=None),
    _job("3_[1-4]", job_name="arr", submit_line="sbatch --array=1-4 x.sh"),
]
FAILURES = [
    _failure("1", state="OUT_OF_MEMORY", modules=["gcc/12.2.0", "cuda/12.4"], exit_code=0, exit_signal=125,
             submit_time=dt.datetime(2026, 11, 30, 0, 4, 21, tzinfo=UTC),
             end_time=dt.datetime(2026, 11, 30, 1, 0, 0, 123456, tzinfo=BERLIN), req_mem_mb=50.0,
             message="slurmstepd: error: Detected 1 oom-kill event(s) in StepId=1.batch."),
    _failure("3_[1-4]", modules=None, start_time=dt.datetime(2026, 3, 29, 1, 30)),
]


def test_bulk_rows_equal_what_sqlalchemy_writes(store_factory):
    ours, reference = store_factory("ours").open(), store_factory("reference").open()
    recorder = Recorder(ours)
    for job in JOBS:
        failure = next((f for f in FAILURES if f["job_id"] == job["job_id"]), None)
        recorder.add(dict(job), dict(failure) if failure else None)
    recorder.close()

    with ours.session() as session:
        sig_ids = {o.job_id: o.signature_id for o in session.scalars(select(Occurrence))}
        observed = {o.job_id: o.observed_at for o in session.scalars(select(Occurrence))}
        signatures = session.scalars(select(Signature)).all()
    with reference.transaction() as session:
        conn = session.connection()
        conn.execute(insert(Signature.__table__), [
            {"id": s.id, "fingerprint": s.fingerprint, "category": s.category, "template": s.template,
             "count": s.count, "first_seen": s.first_seen, "last_seen": s.last_seen} for s in signatures])
        conn.execute(insert(JobRecord.__table__), [{**job, "failed": bool(job["failed"])} for job in JOBS])
        conn.execute(insert(Occurrence.__table__), [
            {**f, "signature_id": sig_ids[f["job_id"]], "observed_at": observed[f["job_id"]]} for f in FAILURES])

    job_columns = JOB_COLUMNS
    occurrence_columns = (*OCCURRENCE_COLUMNS, "signature_id", "observed_at")
    by_job = "cluster, job_id"
    assert stored_values(ours, "job_records", job_columns, by_job) == stored_values(reference, "job_records", job_columns, by_job)
    assert stored_values(ours, "occurrences", occurrence_columns, by_job) == stored_values(reference, "occurrences", occurrence_columns, by_job)


def test_updates_of_known_occurrences_equal_what_sqlalchemy_writes(store_factory):
    """A second source for the same jobs takes the update path (grouped executemany)."""
    store = store_factory().open()
    recorder = Recorder(store)
    for failure in FAILURES:
        recorder.add(None, dict(failure))
    recorder.close()
    later = [
        {**FAILURES[0], "source": "epilog", "modules": ["gcc/13.1.0"], "nodes": "cpu-01",
         "end_time": dt.datetime(2026, 11, 30, 2, 0, tzinfo=UTC), "log_excerpt": "Killed", "message": "Killed"},
        {**FAILURES[1], "qos": "normal", "req_cpus": 8},
    ]
    recorder = Recorder(store)
    for failure in later:
        recorder.add(None, dict(failure))
    assert recorder.close().occurrences_updated == 2
    with store.session() as session:
        occ = {o.job_id: o for o in session.scalars(select(Occurrence))}
        assert occ["1"].modules == ["gcc/13.1.0"] and occ["1"].nodes == "cpu-01" and occ["1"].source == "sacct"
        assert occ["1"].end_time == dt.datetime(2026, 11, 30, 2, 0, tzinfo=UTC)
        assert occ["1"].log_excerpt == "Killed"
        assert session.get(Signature, occ["1"].signature_id).fingerprint == _signature("Killed").fingerprint
        assert occ["3_[1-4]"].qos == "normal" and occ["3_[1-4]"].req_cpus == 8
        assert occ["3_[1-4]"].modules is None  # JSON null, read back as None
        assert occ["3_[1-4]"].start_time == dt.datetime(2026, 3, 29, 1, 30, tzinfo=UTC)


def _redacted(row: dict) -> dict:
    row = dict(row)
    for key in ("message", "log_excerpt", "submit_line", "job_name", "work_dir", "log_path"):
        if row.get(key):
            row[key] = _redact_cached(row[key])[0]
    return row


@pytest.mark.parametrize("name", ["lab-week.psv", "secrets-in-submitline.psv", "real-22.05-parsable2.psv"])
def test_ingested_sample_reads_back_as_the_rows_it_came_from(store_factory, name):
    """Every stored job record, occurrence and signature of a sample dump is what
    job_row/failure_row and signature_of_block say it should be."""
    store = store_factory().open()
    path = SAMPLES / "sacct" / name
    with open(path, encoding="utf-8") as fh:
        summary = ingest_sacct(store, fh, cluster="testcl", tz=UTC, batch_size=50)
    with open(path, encoding="utf-8") as fh:
        jobs = list(SacctReader(fh, tz=UTC))
    expected_jobs = {job.job_id: _redacted(job_row(job, job.cluster or "testcl")) for job in jobs}
    expected_failures = {job.job_id: _redacted(failure_row(job, job.cluster or "testcl"))
                         for job in jobs if job.is_failure}
    assert summary.jobs == len(expected_jobs) and summary.failures == len(expected_failures) > 0

    with store.session() as session:
        records = {r.job_id: r for r in session.scalars(select(JobRecord))}
        occurrences = {o.job_id: o for o in session.scalars(select(Occurrence))}
        signatures = {s.id: s for s in session.scalars(select(Signature))}
    assert set(records) == set(expected_jobs) and set(occurrences) == set(expected_failures)
    for job_id, row in expected_jobs.items():
        assert {c: getattr(records[job_id], c) for c in JOB_COLUMNS} == {c: row[c] for c in JOB_COLUMNS}, job_id
    per_signature: dict[int, int] = {}
    for job_id, row in expected_failures.items():
        occ = occurrences[job_id]
        assert {c: getattr(occ, c) for c in OCCURRENCE_COLUMNS} == {c: row.get(c) for c in OCCURRENCE_COLUMNS}, job_id
        key = _signature(row["message"])
        sig = signatures[occ.signature_id]
        assert (sig.fingerprint, sig.category, sig.template) == (key.fingerprint, key.category, key.template)
        per_signature[sig.id] = per_signature.get(sig.id, 0) + 1
    assert {sid: s.count for sid, s in signatures.items()} == per_signature


def test_interrupted_ingest_leaves_whole_batches_and_a_rerun_completes_it(store_factory):
    """Each batch is one transaction: a dump cut off mid-way leaves only complete batches,
    and ingesting the whole dump again gives the store a single clean run gives."""
    path = SAMPLES / "sacct" / "lab-week.psv"
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)

    def cut_off():
        yield from lines[:200]
        raise KeyboardInterrupt  # the operator's ^C half-way through the file

    broken, clean = store_factory("broken").open(), store_factory("clean").open()
    with pytest.raises(KeyboardInterrupt):
        ingest_sacct(broken, cut_off(), cluster="testcl", tz=UTC, batch_size=20)
    with broken.session() as session:
        written = session.scalars(select(JobRecord.job_id)).all()
    # A batch flushes once it holds 20 rows (a job row, plus an occurrence for a failure).
    boundaries, pending = [], 0
    jobs = list(SacctReader(iter(lines[:200]), tz=UTC))
    for n, job in enumerate(jobs, 1):
        pending += 1 + job.is_failure
        if pending >= 20:
            boundaries.append(n)
            pending = 0
    assert len(written) in boundaries and sorted(written) == sorted(j.job_id for j in jobs[: len(written)])
    for store in (broken, clean):
        with open(path, encoding="utf-8") as fh:
            ingest_sacct(store, fh, cluster="testcl", tz=UTC, batch_size=20)
    columns = (*OCCURRENCE_COLUMNS, "signature_id")
    by_job = "cluster, job_id"
    assert stored_values(broken, "job_records", JOB_COLUMNS, by_job) == stored_values(clean, "job_records", JOB_COLUMNS, by_job)
    assert stored_values(broken, "occurrences", columns, by_job) == stored_values(clean, "occurrences", columns, by_job)
    with broken.session() as a, clean.session() as b:
        assert sorted((s.fingerprint, s.count) for s in a.scalars(select(Signature))) == \
            sorted((s.fingerprint, s.count) for s in b.scalars(select(Signature)))
