"""No escape-sequence, zero-width or %-escape trick gets a fake secret past any path into a
store or out of hpcmem (issue 32, build item 2): record, ingest logs, ingest sacct, the
epilog spool's drain, learn, lessons import / edit / export, the web console's edit, MCP
record, and the audit log after an edit. Real console script and MCP server, real SQLite
stores; the raw bytes of every store file and every output are searched for every
16-character piece of each secret (tests/kb/safety/fakes.py makes them at run time)."""

from __future__ import annotations

import getpass
import json
import sqlite3
import sys
import uuid
from pathlib import Path

import pytest

from hpcmem.kb.safety.lint import sanitize_text
from tests.cli.helpers import run_hpcmem
from tests.kb.safety.fakes import leaked, tricks

TRICKS = tricks()
EVERY = "\n".join(text for _name, text, _secret in TRICKS)  # one trick per line
ERRORS = "\n".join(f"RuntimeError: login failed: {text}" for _name, text, _secret in TRICKS)
# What the lesson gate of an older hpcmem stored of each trick: redacted by rules that missed
# it, then stripped of its codes, i.e. the secret in clear (how an "older store" is made below).
OLD_GATE = "\n".join(sanitize_text(text, sys.maxsize) for _name, text, _secret in TRICKS)


def ok(result):
    assert result.returncode == 0, result.stderr
    return result


def store_bytes(home: Path) -> bytes:
    """Every byte of every store file (the database, its -wal and -journal files)."""
    return b"".join(p.read_bytes() for p in sorted((home / "data").rglob("*")) if p.is_file())


def assert_no_secret(*blobs: str | bytes) -> None:
    found = {name: leaked(secret, *blobs)[:1] for name, _text, secret in TRICKS}
    assert not any(found.values()), {name: piece for name, piece in found.items() if piece}


def rows_text(db: Path, *tables: str) -> str:
    with sqlite3.connect(db) as conn:
        return "\n".join(repr(row) for table in tables for row in conn.execute(f"SELECT * FROM {table}"))


def record_clean(*extra: str) -> dict:
    return json.loads(ok(run_hpcmem("record", "--error", "RuntimeError: login failed", "--cause", "expired login",
                                    "--fix", "log in again", "--json", *extra)).stdout)


def test_record_error_cause_fix_and_context(hpcmem_home: Path, tmp_path: Path):
    error = tmp_path / "err.log"
    error.write_bytes(f"Traceback (most recent call last):\n  File \"train.py\", line 9\n{ERRORS}\n".encode())
    recorded = ok(run_hpcmem("record", "--error-file", str(error), "--cause", EVERY, "--fix", EVERY,
                             "--context", EVERY, "--partition", TRICKS[0][1], "--json"))
    lesson = json.loads(recorded.stdout)
    shown = ok(run_hpcmem("lessons", "show", lesson["lesson_id"], "--json"))
    assert_no_secret(recorded.stdout, recorded.stderr, shown.stdout, store_bytes(hpcmem_home))
    assert lesson["fix"].count("[REDACTED:") == len(TRICKS)
    # the fingerprint is still the one recall computes from the same raw text
    raw = error.read_text()
    again = json.loads(ok(run_hpcmem("recall", "-", "--json", "--no-model", input=raw)).stdout)
    assert (again["matches"][0]["lesson_id"], again["matches"][0]["match_kind"]) == (lesson["lesson_id"], "exact")


def test_ingest_logs(hpcmem_home: Path, tmp_path: Path):
    logs = tmp_path / "logs"
    logs.mkdir()
    for i, (_name, text, _secret) in enumerate(TRICKS):
        (logs / f"slurm-20{i}.out").write_bytes(
            f"step 1 loss=0.5\nTraceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n"
            f"RuntimeError: login failed: {text}\n".encode())
    done = ok(run_hpcmem("ingest", "logs", str(logs), "--json"))
    assert json.loads(done.stdout)["failures"] == len(TRICKS)
    assert_no_secret(done.stdout, done.stderr, store_bytes(hpcmem_home))


SACCT_HEADER = "JobID|JobName|User|State|ExitCode|Elapsed|ReqMem|MaxRSS|Submit|Start|End|WorkDir|SubmitLine"


def test_ingest_sacct_submit_line_job_name_and_work_dir(hpcmem_home: Path, tmp_path: Path):
    rows = [SACCT_HEADER]
    for i, (_name, text, _secret) in enumerate(TRICKS):
        name = f"train {text}" if i % 3 == 0 else "train"
        workdir = f"/home/bob/{text}" if i % 3 == 1 else "/home/bob/run"
        rows.append(f"30{i}|{name}|bob|FAILED|1:0|00:10:00|8G||2026-11-24T08:00:00|2026-11-24T08:00:01|"
                    f"2026-11-24T08:10:00|{workdir}|sbatch --export=ALL,{text} train.sh")
    dump = tmp_path / "sacct.psv"
    dump.write_bytes(("\n".join(rows) + "\n").encode())
    done = ok(run_hpcmem("ingest", "sacct", str(dump), "--tz", "UTC", "--no-learn", "--json"))
    assert json.loads(done.stdout)["failures"] == len(TRICKS)
    assert_no_secret(done.stdout, done.stderr, store_bytes(hpcmem_home))


def test_epilog_spool_drain(hpcmem_home: Path, tmp_path: Path):
    from hpcmem.ingest.spool import SCHEMA_ID, write_event

    spool = tmp_path / "spool"
    for i, (_name, text, _secret) in enumerate(TRICKS):
        write_event(str(spool), {
            "schema": SCHEMA_ID, "event_id": uuid.uuid4().hex, "job_id": f"40{i}", "hook": "epilog_slurmd",
            "cluster": "hpcmem", "user": getpass.getuser(), "state": "FAILED", "failed": True,
            "failure_state": "FAILED", "exit_code": 1, "job_name": f"train {text}", "work_dir": f"/home/u/{text}",
            "log_path": f"/home/u/slurm-40{i}.out", "log_excerpt": f"RuntimeError: login failed: {text}",
            "end_time": "2026-11-24T08:10:00+00:00"})
    done = ok(run_hpcmem("ingest", "spool", "--spool", str(spool), "--no-learn", "--json"))
    assert json.loads(done.stdout)["ingested"] == len(TRICKS)
    assert_no_secret(done.stdout, done.stderr, store_bytes(hpcmem_home))


def test_learn_from_job_records_an_older_hpcmem_stored(hpcmem_home: Path, tmp_path: Path):
    dump = tmp_path / "sacct.psv"
    dump.write_text("\n".join([
        SACCT_HEADER,
        "700|align|bob|OUT_OF_MEMORY|0:125|00:10:00|8G||2026-11-24T08:00:00|2026-11-24T08:00:01|"
        "2026-11-24T08:10:00|/home/bob/a|sbatch --mem=8G align.sh",
        "701|align|bob|COMPLETED|0:0|01:00:00|32G||2026-11-24T09:05:00|2026-11-24T09:05:01|2026-11-24T10:05:00|"
        "/home/bob/a|sbatch --mem=32G align.sh"]) + "\n")
    ok(run_hpcmem("ingest", "sacct", str(dump), "--tz", "UTC", "--no-learn"))
    db = hpcmem_home / "data" / "user.db"
    with sqlite3.connect(db) as conn:  # the job name as an older recorder kept it: codes and all
        conn.execute("UPDATE job_records SET job_name = ?", (EVERY.replace("\n", " "),))
    learned = ok(run_hpcmem("learn", "--full", "--json"))
    assert json.loads(learned.stdout)["lessons_created"] == 1
    assert_no_secret(learned.stdout, rows_text(db, "lessons", "lesson_evidence", "lesson_conditions", "audit_log"))


def test_lessons_import(hpcmem_home: Path, tmp_path: Path):
    lesson = record_clean()
    line = json.loads(ok(run_hpcmem("lessons", "export")).stdout.splitlines()[0])
    line.update(id=str(uuid.uuid4()), cause=EVERY, fix=EVERY, context=EVERY, excerpt=ERRORS,
                status_reason=TRICKS[0][1], author=TRICKS[1][1][:60],
                conditions=[{"kind": "partition", "name": "gpu", "value": TRICKS[2][1]}],
                evidence=[{"kind": "worked", "job_id": "12", "actor": "ann", "note": EVERY}],
                aliases=[{"template": f"ValueError: {TRICKS[3][1]}", "category": "python_exception",
                          "excerpt": ERRORS, "source": "feedback"}])
    exported = tmp_path / "lessons.jsonl"
    exported.write_text(json.dumps(line) + "\n")
    for keep in ((), ("--keep-status",)):
        done = ok(run_hpcmem("lessons", "import", str(exported), "--scope", "user", "--json", *keep))
        shown = ok(run_hpcmem("lessons", "show", line["id"], "--json"))
        assert_no_secret(done.stdout, done.stderr, shown.stdout, store_bytes(hpcmem_home))
    assert lesson["lesson_id"] != line["id"]


def test_lessons_edit_from_the_cli(hpcmem_home: Path):
    lesson = record_clean()
    edited = ok(run_hpcmem("lessons", "edit", lesson["lesson_id"], "--cause", EVERY, "--fix", EVERY,
                           "--context", EVERY, "--json"))
    shown = ok(run_hpcmem("lessons", "show", lesson["lesson_id"], "--json"))
    assert_no_secret(edited.stdout, edited.stderr, shown.stdout, store_bytes(hpcmem_home))
    assert json.loads(edited.stdout)["fix"].count("[REDACTED:") == len(TRICKS)


def test_the_audit_log_keeps_no_secret_after_an_edit(hpcmem_home: Path):
    """A secret an older rule set let into a fix is not copied into the history by the edit
    that removes it: the entry's before/after copies are redacted when written."""
    lesson = record_clean()
    db = hpcmem_home / "data" / "user.db"
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE lessons SET fix = ? WHERE id = ?", (OLD_GATE, lesson["lesson_id"]))
    assert not {name for name, _t, secret in TRICKS if not leaked(secret, OLD_GATE)}  # really in clear
    edited = ok(run_hpcmem("lessons", "edit", lesson["lesson_id"], "--fix", "log in again with a new key", "--json"))
    shown = ok(run_hpcmem("lessons", "show", lesson["lesson_id"], "--json"))
    history = json.loads(shown.stdout)["history"]
    assert [h["action"] for h in history] == ["create", "edit"]
    assert history[-1]["before"]["fix"].count("[REDACTED:") == len(TRICKS)
    assert_no_secret(edited.stdout, shown.stdout, rows_text(db, "audit_log"))


def test_lessons_export_of_a_store_an_older_hpcmem_wrote(hpcmem_home: Path):
    lesson = record_clean("--partition", "gpu", "--action", "export WANDB_MODE=offline")
    db = hpcmem_home / "data" / "user.db"
    with sqlite3.connect(db) as conn:  # as an older gate stored them: in clear, or with the codes
        conn.execute("UPDATE lessons SET fix = ?, cause = ?, actions = ? WHERE id = ?",
                     (EVERY, OLD_GATE, json.dumps([{"type": "env", "op": "set", "name": "WANDB_MODE",
                                                    "value": line} for line in OLD_GATE.splitlines()]),
                      lesson["lesson_id"]))
        conn.execute("UPDATE lesson_conditions SET value = ? WHERE kind = 'partition'", (OLD_GATE.splitlines()[0],))
    exported = ok(run_hpcmem("lessons", "export"))
    assert json.loads(exported.stdout)["id"] == lesson["lesson_id"]
    assert_no_secret(exported.stdout, exported.stderr)


def test_mcp_record(hpcmem_home: Path):
    from tests.cli.test_mcp_hostile import RawServer, call_line

    server = RawServer(hpcmem_home)
    try:
        server.send(call_line(1, "record", json.dumps({"error": ERRORS, "cause": EVERY, "fix": EVERY,
                                                       "context": EVERY, "partition": TRICKS[5][1]})))
        reply = server.replies(1)[0]
    finally:
        server.close()
    assert not reply["result"]["isError"], reply
    assert_no_secret(json.dumps(reply, ensure_ascii=False), store_bytes(hpcmem_home))


def test_web_console_edit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    pytest.importorskip("starlette", reason="the web console needs the 'web' extra")
    from starlette.testclient import TestClient

    from hpcmem.cli.web.app import Console, create_app
    from hpcmem.kb.config import load_config
    from hpcmem.kb.store.stack import StoreStack
    from tests.cli.test_web import lab_env, propose

    lab_env(tmp_path, monkeypatch)
    config = load_config()
    stack = StoreStack.from_config(config)
    try:
        lesson_id = propose(stack, "the job used more memory than --mem allowed")
        console = Console(stack=stack, config=config, actor="lena")
        with TestClient(create_app(console)) as client:
            client.get(f"/?token={console.token}", follow_redirects=False)
            edited = client.post(f"/lessons/{lesson_id}/edit", data={
                "csrf": console.csrf, "store": "lab:vision", "cause": EVERY, "fix": EVERY, "context": EVERY,
                "reason": TRICKS[6][1]})
            assert edited.status_code == 200
            page = client.get(f"/lessons/{lesson_id}?store=lab:vision").text
    finally:
        stack.dispose()
    lab = tmp_path / "lab" / "vision.db"
    assert "[REDACTED:" in rows_text(lab, "lessons")
    assert_no_secret(edited.text, page, b"".join(p.read_bytes() for p in lab.parent.iterdir() if p.is_file()))
