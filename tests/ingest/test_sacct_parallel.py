"""A large sacct dump read by worker processes (ingest/sacct_parallel.py) gives the store
and summary one process gives: same rows, change_seq batches, signature counts and seen
times, counts and parse issues with their line numbers. Parts are cut tiny here, so cuts
land next to steps, array tasks and het components (SQLite and PostgreSQL)."""

from __future__ import annotations

import datetime as dt
import importlib.util
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hpcmem.ingest.sacct import SacctReader
from hpcmem.ingest.sacct_ingest import ingest_sacct
from hpcmem.ingest.sacct_parallel import ingest_sacct_parallel, parallel_workers, plan_parts
from hpcmem.kb.jobs.write import JOB_COLUMNS, OCCURRENCE_COLUMNS
from tests.conftest import SAMPLES, stored_values

REPO = Path(__file__).resolve().parents[2]
SACCT = SAMPLES / "sacct"
UTC = dt.timezone.utc
LEGACY_FIELDS = (
    "JobID,JobIDRaw,JobName,User,Account,Partition,State,ExitCode,Elapsed,Timelimit,"
    "ReqMem,MaxRSS,ReqCPUS,AllocCPUS,NNodes,NodeList,Submit,Start,End"
).split(",")
SIGNATURE_COLUMNS = ("fingerprint", "category", "template", "count")


def generated(tmp_path: Path, monkeypatch, rows: int, profile: str, seed: int = 3) -> Path:
    spec = importlib.util.spec_from_file_location("gen_sacct", REPO / "bench" / "gen_sacct.py")
    gen = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "gen_sacct", gen)  # dataclasses look their module up
    spec.loader.exec_module(gen)
    path = tmp_path / f"{profile}.psv"
    path.write_text("".join(line + "\n" for line in gen.generate(rows, seed=seed, profile=profile)))
    return path


def assert_same_store(a, b, seen_times: bool = True) -> None:
    assert stored_values(a, "job_records", ("id", *JOB_COLUMNS, "change_seq")) == stored_values(b, "job_records", ("id", *JOB_COLUMNS, "change_seq"))
    columns = ("id", *OCCURRENCE_COLUMNS, "signature_id")
    assert stored_values(a, "occurrences", columns) == stored_values(b, "occurrences", columns)
    # Signatures of failures without any time are first/last seen "now".
    columns = ("id", *SIGNATURE_COLUMNS, *(("first_seen", "last_seen") if seen_times else ()))
    assert stored_values(a, "signatures", columns) == stored_values(b, "signatures", columns)


def single(store, path: Path, **kw):
    with open(path, encoding="utf-8") as fh:
        return ingest_sacct(store, fh, cluster="testcl", tz=UTC, **kw).as_dict()


def parallel(store, path: Path, **kw):
    return ingest_sacct_parallel(store, path, cluster="testcl", tz=UTC, **kw).as_dict()


def same_summary(one: dict, other: dict) -> None:
    one, other = dict(one), dict(other)
    one.pop("seconds"), other.pop("seconds")
    assert one == other


@pytest.mark.parametrize("name, fields", [
    ("lab-week.psv", None), ("malformed.psv", None), ("real-22.05-parsable2.psv", None),
    ("real-22.05-allocations.psv", None), ("parsable-trailing-delimiter.psv", None),
    ("secrets-in-submitline.psv", None), ("legacy-20.11-noheader.psv", LEGACY_FIELDS),
])
def test_samples_read_in_parts_give_the_same_store(store_factory, name, fields):
    path = SACCT / name
    one = store_factory("one").open()
    expected = single(one, path, fields=fields, batch_size=7)
    for chunk_bytes, workers in ((1, 2), (1, 1), (500, 3)):
        other = store_factory(f"p{chunk_bytes}w{workers}").open()
        same_summary(parallel(other, path, fields=fields, batch_size=7, chunk_bytes=chunk_bytes, workers=workers),
                     expected)
        assert_same_store(one, other, seen_times=False)


@pytest.mark.parametrize("profile", ["short", "full"])
def test_a_generated_dump_read_in_parts_gives_the_same_store(store_factory, tmp_path, monkeypatch, profile):
    path = generated(tmp_path, monkeypatch, 4000, profile)
    _, parts = plan_parts(path, chunk_bytes=1)
    reader = SacctReader(open(path, encoding="utf-8"), tz=UTC)
    jobs = list(reader)
    assert len(parts) > len(jobs) // 2  # nearly every job starts a part of its own
    assert any("_" in j.job_id for j in jobs) and any("+" in j.job_id for j in jobs)
    one = store_factory("one").open()
    expected = single(one, path, batch_size=50)
    assert expected["jobs"] == len(jobs) and expected["failures"] > 0
    for chunk_bytes in (1, 2000):
        other = store_factory(f"parts{chunk_bytes}").open()
        same_summary(parallel(other, path, batch_size=50, chunk_bytes=chunk_bytes, workers=2), expected)
        assert_same_store(one, other)


def test_every_cut_is_just_before_an_allocation_row(tmp_path, monkeypatch):
    path = generated(tmp_path, monkeypatch, 3000, "full")
    data = path.read_bytes()
    prefix, parts = plan_parts(path, chunk_bytes=300)
    assert prefix == [data.split(b"\n", 1)[0].decode() + "\n"]
    assert parts[0][0] == 0 and parts[-1][1] == len(data)
    for (_, end), (start, _) in zip(parts, parts[1:]):
        assert end == start and data[start - 1:start] == b"\n"
        first = data[start:data.index(b"\n", start)].decode()
        assert "." not in first.split("|")[0]


def test_parse_issues_keep_their_line_numbers(store_factory, tmp_path, monkeypatch):
    """Bad rows all over the file: the same first 50 issues, at the same lines, and the
    same counts."""
    lines = generated(tmp_path, monkeypatch, 3000, "short").read_text().splitlines(keepends=True)
    for at in range(7, len(lines), 37):
        lines[at] = "garbage|row\n" if at % 2 else lines[at].replace("|", "|x|", 1)
    lines.insert(1, "\n")
    path = tmp_path / "bad.psv"
    path.write_text("".join(lines))
    one = store_factory("one").open()
    expected = single(one, path, batch_size=40)
    assert expected["issue_count"] > 60 and len(expected["issues"]) == 50
    other = store_factory("two").open()
    same_summary(parallel(other, path, batch_size=40, chunk_bytes=700, workers=2), expected)
    assert_same_store(one, other, seen_times=False)


def test_ingest_sacct_takes_a_path(store_factory, tmp_path, monkeypatch):
    path = generated(tmp_path, monkeypatch, 1500, "short")
    assert parallel_workers(path) == 0  # small: one process
    assert parallel_workers(path, scan_logs=True, workers=2) == 0
    seen = []
    one, other = store_factory("one").open(), store_factory("two").open()
    expected = ingest_sacct(one, path, cluster="testcl", tz=UTC, on_bytes=seen.append).as_dict()
    assert seen[-1] == path.stat().st_size
    seen.clear()
    same_summary(ingest_sacct(other, path, cluster="testcl", tz=UTC, workers=2, on_bytes=seen.append).as_dict(),
                 expected)
    assert seen[-1] == path.stat().st_size
    assert_same_store(one, other)


KILLED_RUN = r"""
import datetime as dt, os, signal, sys
from hpcmem.kb.store.database import Store
from hpcmem.ingest.sacct_parallel import ingest_sacct_parallel
url, schema, path = sys.argv[1], sys.argv[2] or None, sys.argv[3]
store = Store(url, schema=schema).open()
calls = []
def on_bytes(n):
    calls.append(n)
    if len(calls) == 6:  # some batches written, one under way: the writer dies
        os.kill(os.getpid(), signal.SIGKILL)
ingest_sacct_parallel(store, path, cluster="testcl", tz=dt.timezone.utc, batch_size=30, chunk_bytes=4000,
                      workers=2, on_bytes=on_bytes)
"""


def test_a_killed_parallel_run_leaves_whole_batches_and_a_rerun_completes_it(store_factory, tmp_path, monkeypatch):
    path = generated(tmp_path, monkeypatch, 3000, "full")
    broken, clean = store_factory("broken"), store_factory("clean")
    broken.open()
    proc = subprocess.run([sys.executable, "-c", KILLED_RUN, broken.url, broken.schema or "", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    with broken.engine.connect() as conn:
        written = [r[0] for r in conn.exec_driver_sql("SELECT job_id FROM job_records ORDER BY id")]
    jobs = list(SacctReader(open(path, encoding="utf-8"), tz=UTC))
    boundaries, pending = [], 0
    for n, job in enumerate(jobs, 1):
        pending += 1 + job.is_failure
        if pending >= 30:
            boundaries.append(n)
            pending = 0
    assert written and len(written) in boundaries and len(written) < len(jobs)
    assert written == [job.job_id for job in jobs[: len(written)]]
    parallel(broken, path, batch_size=30, chunk_bytes=4000, workers=2)
    clean.open()
    single(clean, path, batch_size=30)
    assert stored_values(broken, "job_records", JOB_COLUMNS, "job_id") == stored_values(clean, "job_records", JOB_COLUMNS, "job_id")
    columns = (*OCCURRENCE_COLUMNS, "signature_id")
    assert stored_values(broken, "occurrences", columns, "job_id") == stored_values(clean, "occurrences", columns, "job_id")
    columns = SIGNATURE_COLUMNS + ("first_seen", "last_seen")
    assert stored_values(broken, "signatures", columns, "fingerprint") == stored_values(clean, "signatures", columns, "fingerprint")


def test_a_worker_that_dies_stops_the_ingest(store_factory, tmp_path, monkeypatch):
    path = generated(tmp_path, monkeypatch, 1000, "short")
    from hpcmem.ingest import sacct_parallel

    monkeypatch.setattr(sacct_parallel, "_BOOT", "import sys; sys.stdin.buffer.read(); sys.exit('boom')")
    with pytest.raises(sacct_parallel.WorkerFailed, match="boom"):
        parallel(store_factory().open(), path, chunk_bytes=2000, workers=2)
