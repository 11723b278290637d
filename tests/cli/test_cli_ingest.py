"""`hpcmem ingest sacct | logs` and `hpcmem fingerprint` as a user runs them."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests.cli.helpers import run_hpcmem
from tests.conftest import SAMPLES

REAL = str(SAMPLES / "sacct" / "real-22.05-parsable2.psv")


def db_rows(home: Path, query: str) -> list[tuple]:
    with sqlite3.connect(home / "data" / "user.db") as conn:
        return conn.execute(query).fetchall()


@pytest.mark.parametrize("via", ["file", "stdin"])
def test_ingest_sacct_json_summary(hpcmem_home: Path, via: str):
    if via == "file":
        result = run_hpcmem("ingest", "sacct", REAL, "--json")
    else:
        result = run_hpcmem("ingest", "sacct", "-", "--json", input=Path(REAL).read_text())
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["rows_read"] == 14 and summary["jobs"] == 7 and summary["failures"] == 6
    assert summary["signatures_new"] >= 4 and summary["skipped"] == 0
    assert db_rows(hpcmem_home, "SELECT state FROM occurrences WHERE job_id = '4'") == [("OUT_OF_MEMORY",)]


def test_ingest_sacct_headerless_with_format(hpcmem_home: Path):
    fields = "JobID,JobIDRaw,JobName,User,Account,Partition,State,ExitCode,Elapsed,Timelimit,ReqMem,MaxRSS,ReqCPUS,AllocCPUS,NNodes,NodeList,Submit,Start,End"
    result = run_hpcmem("ingest", "sacct", str(SAMPLES / "sacct" / "legacy-20.11-noheader.psv"), "--format", fields, "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["jobs"] > 0
    # without --format the first data row is not a header: a clear error, nothing stored
    bad = run_hpcmem("ingest", "sacct", str(SAMPLES / "sacct" / "legacy-20.11-noheader.psv"))
    assert bad.returncode == 2 and bad.stderr.startswith("Error:") and "Traceback" not in bad.stderr


def test_ingest_sacct_reports_malformed_lines_with_numbers(hpcmem_home: Path):
    result = run_hpcmem("ingest", "sacct", str(SAMPLES / "sacct" / "malformed.psv"))
    assert result.returncode == 0
    assert "line 6: expected 9 fields, found 6" in result.stdout
    assert "line 13: unrecognised JobID 'not-a-job'" in result.stdout
    assert "ab:cd:ef" in result.stdout  # printed as data, not as rich emoji/markup


@pytest.mark.parametrize(
    "args, message",
    [
        (["ingest", "sacct"], "give either a FILE"),
        (["ingest", "sacct", "nope.psv"], "nope.psv: no such file"),
        (["ingest", "sacct", REAL, "--live"], "give either a FILE"),
        (["ingest", "sacct", REAL, "--since", "now-1days"], "only apply with --live"),
        (["ingest", "sacct", REAL, "--tz", "Mars/Olympus"], "unknown time zone"),
    ],
)
def test_ingest_sacct_usage_errors(args, message):
    result = run_hpcmem(*args)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr


def test_bad_input_never_damages_the_store(hpcmem_home: Path, tmp_path: Path):
    assert run_hpcmem("ingest", "sacct", REAL).returncode == 0
    before = db_rows(hpcmem_home, "SELECT job_id, state, signature_id FROM occurrences ORDER BY job_id")
    garbage = tmp_path / "garbage.psv"
    garbage.write_bytes(b"\x00\xff\xfe not sacct at all\n" * 5)
    result = run_hpcmem("ingest", "sacct", str(garbage))
    assert result.returncode == 2 and result.stderr.startswith("Error:")
    assert db_rows(hpcmem_home, "SELECT job_id, state, signature_id FROM occurrences ORDER BY job_id") == before


def test_live_without_sacct_is_a_clear_error(tmp_path: Path):
    result = run_hpcmem("ingest", "sacct", "--live", env={"PATH": str(tmp_path)})
    assert result.returncode == 2 and "sacct" in result.stderr and "Traceback" not in result.stderr


def test_ingest_logs_directory(hpcmem_home: Path):
    result = run_hpcmem("ingest", "logs", str(SAMPLES / "logs"), "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["failures"] >= 20 and summary["clean"] >= 1
    cats = {c for (c,) in db_rows(hpcmem_home, "SELECT category FROM signatures")}
    assert {"cuda_oom", "nccl_error", "unknown_module", "disk_quota", "illegal_instruction"} <= cats


def test_ingest_logs_missing_file_is_reported(hpcmem_home: Path):
    result = run_hpcmem("ingest", "logs", "/nonexistent/slurm-1.out", "--json")
    assert result.returncode == 0
    summary = json.loads(result.stdout)
    assert summary["skipped"] == 1 and "not found" in summary["issues"][0]["reason"]


def test_fingerprint_lines_and_block():
    lines = (
        "slurmstepd: error: *** JOB 1449736 ON phoenix-07 CANCELLED AT 2023-12-03T12:47:09 DUE TO TIME LIMIT ***\n"
        "slurmstepd: error: *** JOB 77 ON cn001 CANCELLED AT 2026-01-01T00:00:00 DUE TO TIME LIMIT ***\n"
        "ImportError: libcudart.so.11.0: cannot open shared object file: No such file or directory\n"
    )
    result = run_hpcmem("fingerprint", input=lines)
    assert result.returncode == 0
    out = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(out) == 3 and set(out[0]) == {"fingerprint", "template", "category"}
    assert out[0]["fingerprint"] == out[1]["fingerprint"] and out[0]["category"] == "time_limit"
    assert out[2]["category"] == "missing_shared_library" and "libcudart.so.11.0" in out[2]["template"]

    block = (SAMPLES / "logs" / "fail-3.err").read_text()
    result = run_hpcmem("fingerprint", "--block", input=block)
    [sig] = [json.loads(line) for line in result.stdout.splitlines()]
    assert sig["category"] == "python_exception" and "KeyError" in sig["template"]


def test_fingerprint_never_prints_a_secret():
    token = "hf_" + "FAKEfingerprintTok3nAbCdEfGhIjKlMn"
    result = run_hpcmem("fingerprint", input=f"requests.exceptions.HTTPError: 401 for url https://hf.co/api?token={token}\n")
    assert result.returncode == 0 and token not in result.stdout
