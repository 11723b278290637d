"""No fake secret gets past any path into a store or out of hpcmem (issue 32, build items 2
and 4): record, ingest logs, ingest sacct, the epilog and its spool's drain, learn, lessons
import / edit / export, the web console's edit, MCP record, the audit log after an edit, and
recall's output.

- The first tests push the escape-sequence, zero-width and %-escape tricks
  (tests/kb/safety/fakes.py) through each path (real console script in a subprocess, MCP
  server, web app; SQLite), searching for every 16-character piece of each secret.
- The ``every_fake`` tests push one fake per gitleaks rule shape in every placement, the
  HPC forms and the ANSI / zero-width variants (tests/kb/safety/gitleaks_fakes.py) through
  the same paths in batches, in this process, searching for any 8-character window of
  each secret (see the section's comment)."""

from __future__ import annotations

import datetime as dt
import getpass
import json
import os
import re
import sqlite3
import sys
import uuid
from pathlib import Path

import pytest

from hpcmem.kb.safety.lint import sanitize_text
from tests.cli.helpers import run_hpcmem
from tests.cli.inprocess import invoke
from tests.kb.safety.fakes import leaked, tricks
from tests.kb.safety.gitleaks_fakes import fakes as gitleaks_fakes
from tests.kb.safety.test_secret_coverage import ALLOWED_MISSES

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


# ================================================================ every fake, every path
# One fake per gitleaks rule shape (all placements), the HPC forms and the ANSI / zero-width
# variants (tests/kb/safety/gitleaks_fakes.py, made at run time from the installed rules),
# pushed through every path of issue 32 item 2 in batches (many fakes per log, per sacct
# file, per import file, per record), in this process through the console script's main
# where the path is a command. Every output, the raw bytes of the store files and the
# spool's event files are searched for any 8-character window of each secret (the
# research's "caught": Fake.leaked). Only the shapes tests/kb/safety/test_secret_coverage.py
# lists, with their reason, may leak; on the paths that keep text as written they must
# (so a shape caught later fails the test until it is taken off that list).

FAKES = gitleaks_fakes()
TEXTS = [text for fake in FAKES for text in fake.lines.values()]  # every placement of every fake
# A value of one line (a sacct field, an environment variable): multi-line blocks (private
# keys, YAML, .netrc and PuTTY files) cannot be one; a traceback frame's two lines can.
ONE_LINE = [text.replace("\n", " ") for fake in FAKES for placement, text in fake.lines.items()
            if "\n" not in text or placement == "traceback"]
ALLOWED = frozenset(ALLOWED_MISSES) & {f.rule_id for f in FAKES}  # (pkcs12-file has no text to place)
BOX = re.compile(r"[\s\u2500-\u257f]+")  # rich's panel borders and wrapping


def _windows() -> dict[str, set[str]]:
    """8-character windows of each secret with at least 4 random characters -> rule ids."""
    out: dict[str, set[str]] = {}
    for fake in FAKES:
        secret = fake.secret.replace("\n", "")
        mask = fake.mask if len(fake.mask) == len(secret) else "1" * len(secret)
        width = min(8, len(secret))
        for i in range(len(secret) - width + 1):
            if mask[i:i + width].count("1") >= min(4, width):
                out.setdefault(secret[i:i + width], set()).add(fake.rule_id)
    return out


WINDOWS = _windows()
WIDTHS = sorted({len(w) for w in WINDOWS})  # 8, and the length of any shorter secret


def fake_leaks(*blobs: str | bytes) -> dict[str, str]:
    """rule id -> a piece of its secret found in any blob (bytes are read as Latin-1: the
    secrets are ASCII, so their UTF-8 bytes are the same), line breaks ignored."""
    found: dict[str, str] = {}
    for blob in blobs:
        text = blob.decode("latin-1") if isinstance(blob, bytes) else blob
        for flat in {text.replace("\n", ""), BOX.sub("", text)}:
            candidates = {rid for width in WIDTHS for i in range(len(flat) - width + 1)
                          for rid in WINDOWS.get(flat[i:i + width], ())}
            for rid in candidates - set(found):
                for fake in (f for f in FAKES if f.rule_id == rid):
                    piece = fake.leaked(flat)
                    if piece:
                        found[rid] = piece
                        break
    return found


def assert_only_allowed(*blobs: str | bytes, exactly: bool = False) -> None:
    """No secret but an allowed miss; with ``exactly``, every allowed miss does leak (the
    path keeps text as written): a shape caught now must come off the list."""
    found = fake_leaks(*blobs)
    unexpected = {rid: piece for rid, piece in found.items() if rid not in ALLOWED}
    assert not unexpected, unexpected
    if exactly:
        assert set(found) == set(ALLOWED), {rid: ALLOWED_MISSES[rid] for rid in set(ALLOWED) - set(found)}


def groups(texts: list[str], chars: int = 2500, lines: int = 36) -> list[list[str]]:
    """The texts, in order, in groups that joined a line each fit a lesson field whole
    (cause/fix/context: 4,000 characters; the error's excerpt: its last 40 lines)."""
    out: list[list[str]] = [[]]
    for text in texts:
        joined = "\n".join(out[-1] + [text])
        if out[-1] and (len(joined) > chars or joined.count("\n") >= lines):
            out.append([])
        out[-1].append(text)
    return out


GROUPS = groups(TEXTS)
CHUNKS = ["\n".join(group) for group in GROUPS]


def head(group: list[str], chars: int) -> str:
    """The first texts of a group that fit ``chars`` (a field with a smaller limit): never
    a text cut in two, which could leave half a secret no rule recognises."""
    return "\n".join(groups(group, chars, 10_000)[0]) if len(group[0]) <= chars else ""


def test_the_search_finds_every_fake_in_clear_text_and_bytes():
    every = {f.rule_id for f in FAKES}
    assert set(fake_leaks("\n".join(TEXTS))) == every
    assert set(fake_leaks(("\n".join(TEXTS)).encode())) == every
    assert len(TEXTS) > 850 and len(every) >= 250 and len(CHUNKS) >= 40


def run_ok(*argv: str, input: str | bytes = b"", codes=(0,)):
    """``hpcmem ARGV`` in this process; .stdout, .stderr, and .both to search."""
    done = invoke(*argv, input=input)
    assert done.returncode in codes, done.stderr[-3000:]
    done.both = done.stdout + "\n" + done.stderr
    return done


def test_every_fake_through_record_error_cause_fix_and_context(hpcmem_home: Path):
    outputs = [run_ok("record", "--error", chunk, "--cause", chunk, "--fix", chunk, "--context", chunk,
                      "--json").both for chunk in CHUNKS]
    assert_only_allowed(*outputs, store_bytes(hpcmem_home), exactly=True)
    db = hpcmem_home / "data" / "user.db"
    with sqlite3.connect(db) as conn:
        fixes = [row[0] for row in conn.execute("SELECT fix FROM lessons")]
    assert len(fixes) == len(CHUNKS) and sum(f.count("[REDACTED:") for f in fixes) >= len(TEXTS) * 0.95


def _log_file(fake) -> str:
    """A job log carrying every placement of ``fake`` where logscan keeps it: the export,
    echo and config lines under an Lmod error (whose continuation lines it keeps), the
    frame as the innermost one of a traceback, the exception as its last line."""
    lines = fake.lines
    follow = [t for p, t in lines.items() if p not in ("traceback", "exception")]
    frame = lines.get("traceback", '  File "/home/alice/proj/train/sync.py", line 57, in main\n    sync()')
    exception = lines.get("exception", "RuntimeError: upload failed")
    return "\n".join([
        "+ module load cuda/12.4",
        "step 1 loss=0.93",
        'Lmod has detected the following error: The following module(s) are unknown: "cudnn/9.9"',
        *follow, "",
        "Traceback (most recent call last):",
        '  File "/home/alice/proj/train/main.py", line 12, in <module>',
        "    main()",
        frame, exception, ""])


def test_every_fake_through_ingest_logs(hpcmem_home: Path, tmp_path: Path):
    logs = tmp_path / "logs"
    logs.mkdir()
    for i, fake in enumerate(FAKES):
        (logs / f"slurm-{50000 + i}.out").write_text(_log_file(fake))
    done = run_ok("ingest", "logs", str(logs), "--json")
    assert json.loads(done.stdout)["failures"] == len(FAKES)
    assert_only_allowed(done.both, store_bytes(hpcmem_home))
    with sqlite3.connect(hpcmem_home / "data" / "user.db") as conn:
        kept = sum(1 for (excerpt,) in conn.execute("SELECT log_excerpt FROM occurrences") if "[REDACTED:" in excerpt)
    assert kept >= len(FAKES) * 0.95  # the fakes did reach the store, redacted


SACCT_COLUMNS = "JobID|JobName|User|State|ExitCode|Elapsed|ReqMem|MaxRSS|Submit|Start|End|WorkDir|Comment|SubmitLine"


def test_every_fake_through_ingest_sacct_submit_line_job_name_work_dir_and_comment(hpcmem_home: Path,
                                                                                   tmp_path: Path):
    """Each one-line text is the whole value of each free-text column in some row. hpcmem
    reads no Comment column; the text is still in the file it reads."""
    flat = ONE_LINE
    n = len(flat)
    rows = [SACCT_COLUMNS]
    for i in range(n):
        name, workdir, comment, submit = (flat[(i + k * (n // 4)) % n] for k in range(4))
        # sacct does not escape '|': one inside a value goes where the reader puts surplus
        # fields, the submit line (real sacct output is no more readable than that)
        name, workdir, comment, submit = (v if "|" not in v or k == 3 else "train"
                                          for k, v in enumerate((name, workdir, comment, submit)))
        rows.append(f"{60000 + i}|{name}|alice|FAILED|1:0|00:10:00|8G||2026-11-24T08:00:00|2026-11-24T08:00:01|"
                    f"2026-11-24T08:10:00|{workdir}|{comment}|{submit}")
    dump = tmp_path / "sacct.psv"
    dump.write_text("\n".join(rows) + "\n")
    done = run_ok("ingest", "sacct", str(dump), "--tz", "UTC", "--no-learn", "--json")
    assert json.loads(done.stdout)["failures"] == n
    assert_only_allowed(done.both, store_bytes(hpcmem_home), exactly=True)
    with sqlite3.connect(hpcmem_home / "data" / "user.db") as conn:
        for column in ("job_name", "work_dir", "submit_line"):  # the fakes did reach the store, redacted
            marked = conn.execute(f"SELECT count(*) FROM occurrences WHERE {column} LIKE '%[REDACTED:%'").fetchone()
            assert marked[0] >= n * 0.95, (column, marked[0], n)


def test_every_fake_through_epilog_events(hpcmem_home: Path, tmp_path: Path):
    """The real epilog (ingest/epilog.py, in this process, scontrol answers from a file)
    reads each fake's job log and takes the job's name and directory from its environment;
    then `ingest spool` stores the events. The spool's event files are searched too."""
    from hpcmem.ingest.epilog import parse_env_file, run_epilog
    from tests.conftest import SAMPLES

    env0 = parse_env_file((SAMPLES / "epilog" / "3.epilog.env").read_text())
    scontrol0 = (SAMPLES / "epilog" / "3.epilog.scontrol").read_text().strip()
    jobs, spool = tmp_path / "jobs", tmp_path / "spool"
    jobs.mkdir()
    flat = ONE_LINE
    for i, fake in enumerate(FAKES):
        job = str(70000 + i)
        log = jobs / f"fail-{job}.err"
        log.write_text(_log_file(fake))
        sc = tmp_path / f"{job}.scontrol"
        sc.write_text(scontrol0.replace("JobId=3 ", f"JobId={job} ").replace("/home/alice/jobs/fail-3.err", str(log))
                      .replace("/home/alice/jobs/fail-3.out", str(log)))
        env = dict(env0, SLURM_JOB_ID=job, SLURM_JOBID=job, SLURM_JOB_UID=str(os.getuid()),
                   SLURM_JOB_GID=str(os.getgid()), SLURM_JOB_USER=getpass.getuser(),
                   SLURM_JOB_NAME=flat[i % len(flat)], SLURM_JOB_WORK_DIR=flat[-1 - i])
        result = run_epilog(["--spool", str(spool), "--scontrol-file", str(sc), "--budget", "10"], env)
        assert result.event_path and not result.timed_out, result.problems
    events = b"".join(p.read_bytes() for p in sorted(spool.rglob("*.json")))
    assert_only_allowed(events)
    parsed = [json.loads(p.read_text()) for p in sorted(spool.rglob("*.json"))]
    assert len(parsed) == len(FAKES)
    for key in ("job_name", "work_dir", "log_excerpt"):  # redacted in the event file itself
        assert sum("[REDACTED:" in (e.get(key) or "") for e in parsed) >= len(FAKES) * 0.9, key
    done = run_ok("ingest", "spool", "--spool", str(spool), "--no-learn", "--json")
    assert json.loads(done.stdout)["ingested"] == len(FAKES)
    assert_only_allowed(done.both, store_bytes(hpcmem_home))


def test_every_fake_through_lessons_import(hpcmem_home: Path, tmp_path: Path):
    base = record_clean()
    template = json.loads(run_ok("lessons", "export").stdout.splitlines()[0])
    lines = []
    for i, (group, chunk) in enumerate(zip(GROUPS, CHUNKS)):
        lines.append(json.dumps(dict(
            template, id=str(uuid.uuid4()), cause=chunk, fix=chunk, context=chunk, excerpt=chunk, status_reason=chunk,
            conditions=[{"kind": "partition", "name": "gpu", "value": head(group, 256) or "gpu"}],
            evidence=[{"kind": "worked", "job_id": str(i), "actor": "ann", "note": head(group, 2000)}],
            aliases=[{"template": chunk, "category": "python_exception", "excerpt": chunk, "source": "feedback"}])))
    exported = tmp_path / "lessons.jsonl"
    exported.write_text("\n".join(lines) + "\n")
    done = run_ok("lessons", "import", str(exported), "--scope", "user", "--json")
    assert json.loads(done.stdout)["created"] == len(CHUNKS)
    shown = run_ok("lessons", "export").both
    assert_only_allowed(done.both, shown, store_bytes(hpcmem_home), exactly=True)
    assert shown.count("[REDACTED:") >= 4 * len(TEXTS) * 0.95


def test_every_fake_through_lessons_edit_and_the_audit_log(hpcmem_home: Path):
    lesson = record_clean()
    outputs = [run_ok("lessons", "edit", lesson["lesson_id"], "--cause", chunk, "--fix", chunk, "--context", chunk,
                      "--json").both for chunk in CHUNKS]
    # and a fix an older rule set let in whole, replaced by an edit: the history keeps none of it
    db = hpcmem_home / "data" / "user.db"
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE lessons SET fix = ? WHERE id = ?", ("\n".join(TEXTS), lesson["lesson_id"]))
    outputs.append(run_ok("lessons", "edit", lesson["lesson_id"], "--fix", "rotate the key", "--json").both)
    outputs.append(run_ok("lessons", "show", lesson["lesson_id"], "--json").both)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE lessons SET fix = 'rotate the key' WHERE id = ?", (lesson["lesson_id"],))
    history = rows_text(db, "audit_log")
    assert history.count("'edit'") == len(CHUNKS) + 1
    assert_only_allowed(*outputs, history, exactly=True)
    assert_only_allowed(rows_text(db, "lessons", "audit_log"))


def test_every_fake_through_the_web_console_edit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    pytest.importorskip("starlette", reason="the web console needs the 'web' extra")
    from starlette.testclient import TestClient

    from hpcmem.cli.web.app import Console, create_app
    from hpcmem.kb.config import load_config
    from hpcmem.kb.store.stack import StoreStack
    from tests.cli.test_web import lab_env, propose

    lab_env(tmp_path, monkeypatch)
    config = load_config()
    stack = StoreStack.from_config(config)
    pages = []
    try:
        lesson_id = propose(stack, "the job used more memory than --mem allowed")
        console = Console(stack=stack, config=config, actor="lena")
        with TestClient(create_app(console)) as client:
            client.get(f"/?token={console.token}", follow_redirects=False)
            for chunk in CHUNKS:
                edited = client.post(f"/lessons/{lesson_id}/edit", data={
                    "csrf": console.csrf, "store": "lab:vision", "cause": chunk, "fix": chunk, "context": chunk,
                    "reason": chunk.splitlines()[0][:200]})
                assert edited.status_code == 200, edited.text[:500]
                pages.append(edited.text)
            pages.append(client.get(f"/lessons/{lesson_id}?store=lab:vision").text)
    finally:
        stack.dispose()
    lab = tmp_path / "lab" / "vision.db"
    assert rows_text(lab, "audit_log").count("'edit'") == len(CHUNKS)
    assert rows_text(lab, "audit_log").count("[REDACTED:") >= 2 * len(TEXTS) * 0.95  # cause and fix of each edit
    assert_only_allowed(*pages, b"".join(p.read_bytes() for p in lab.parent.iterdir() if p.is_file()), exactly=True)


def test_every_fake_through_mcp_record(hpcmem_home: Path):
    from tests.cli.test_mcp_hostile import RawServer, call_line

    server = RawServer(hpcmem_home)
    try:
        for i, chunk in enumerate(CHUNKS):
            server.send(call_line(i + 1, "record", json.dumps({"error": chunk, "cause": chunk, "fix": chunk,
                                                               "context": chunk})))
        replies = server.replies(len(CHUNKS))
    finally:
        stderr = server.close()
    assert not any(r["result"]["isError"] for r in replies), [r for r in replies if r["result"]["isError"]][:1]
    assert sum(r["result"]["structuredContent"]["fix"].count("[REDACTED:") for r in replies) >= len(TEXTS) * 0.95
    assert_only_allowed(json.dumps(replies, ensure_ascii=False), stderr, store_bytes(hpcmem_home), exactly=True)


# Job names for learn: the job-log lines (not the config-file lines: learn writes a name in
# the middle of a sentence, where a .netrc line's `password X` is prose, as the redactor
# reads it on purpose), one line each, at most 500 characters (a job's context keeps 512
# characters of a name, cut before it is scrubbed (kb/jobs/context.clean_context): a longer
# name an older recorder kept unscrubbed could leave half a secret there).
LOG_LINES = [text.replace("\n", " ") for fake in FAKES for placement, text in fake.lines.items()
             if placement in ("export", "echo", "traceback", "exception")
             and ("\n" not in text or placement == "traceback")]
NAMES = [" ".join(group) for group in groups(LOG_LINES, 500, 10_000)]


def test_every_fake_through_learns_generated_text(hpcmem_home: Path, tmp_path: Path):
    """Job names an older recorder kept (codes, secrets and all) reach the lessons learn
    writes from resubmissions (its context names the job)."""
    rows = [SACCT_HEADER]
    for i in range(len(NAMES)):
        t = [f"{dt.datetime(2026, 11, 1) + dt.timedelta(hours=2 * i, minutes=m):%Y-%m-%dT%H:%M:%S}"
             for m in (0, 10, 20, 59)]
        rows.append(f"{80000 + 2 * i}|align|bob|OUT_OF_MEMORY|0:125|00:10:00|8G||{t[0]}|{t[0]}|{t[1]}|"
                    f"/home/bob/a{i}|sbatch --mem=8G align{i}.sh")
        # a target of its own: each pair is another fix, so another lesson (not a confirmation)
        rows.append(f"{80001 + 2 * i}|align|bob|COMPLETED|0:0|00:39:00|{16 + i}G||{t[2]}|{t[2]}|{t[3]}|"
                    f"/home/bob/a{i}|sbatch --mem={16 + i}G align{i}.sh")
    dump = tmp_path / "sacct.psv"
    dump.write_text("\n".join(rows) + "\n")
    run_ok("ingest", "sacct", str(dump), "--tz", "UTC", "--no-learn")
    db = hpcmem_home / "data" / "user.db"
    with sqlite3.connect(db) as conn:
        for i, name in enumerate(NAMES):
            conn.execute("UPDATE job_records SET job_name = ? WHERE job_id IN (?, ?)",
                         (name, str(80000 + 2 * i), str(80001 + 2 * i)))
    learned = run_ok("learn", "--full", "--json")
    assert json.loads(learned.stdout)["lessons_created"] == len(NAMES)
    stored = rows_text(db, "lessons", "lesson_evidence", "lesson_conditions", "audit_log")
    assert stored.count("[REDACTED:") >= len(LOG_LINES) * 0.95
    assert_only_allowed(learned.both, stored, exactly=True)


def test_every_fake_through_export_of_a_store_an_older_hpcmem_wrote(hpcmem_home: Path):
    lesson = record_clean("--partition", "gpu", "--action", "export WANDB_MODE=offline")
    every = "\n".join(TEXTS)
    with sqlite3.connect(hpcmem_home / "data" / "user.db") as conn:  # as an older gate kept them
        conn.execute("UPDATE lessons SET fix = ?, cause = ?, context = ?, excerpt = ?, actions = ? WHERE id = ?",
                     (every, every, every, every, json.dumps([{"type": "env", "op": "set", "name": "WANDB_MODE",
                                                               "value": text} for text in TEXTS]),
                      lesson["lesson_id"]))
        conn.executemany("INSERT INTO lesson_conditions (lesson_id, kind, name, value) VALUES (?, 'partition', "
                         "'gpu', ?)", [(lesson["lesson_id"], text) for text in TEXTS])
    exported = run_ok("lessons", "export")
    assert json.loads(exported.stdout.splitlines()[0])["id"] == lesson["lesson_id"]
    assert_only_allowed(exported.both, exactly=True)


def test_every_fake_through_recall_output(hpcmem_home: Path):
    """Each text as a query of its own (--batch, JSON) and the texts as multi-line queries
    (human output), against a store holding lessons recorded from them."""
    for chunk in CHUNKS[:8]:
        run_ok("record", "--error", chunk, "--cause", chunk, "--fix", chunk, "--json")
    batch = "".join(json.dumps({"id": i, "error": text}) + "\n" for i, text in enumerate(TEXTS))
    answered = run_ok("recall", "--batch", "-", "--no-model", input=batch)
    results = [json.loads(line) for line in answered.stdout.splitlines()]
    assert [r["id"] for r in results] == list(range(len(TEXTS)))
    assert sum("[REDACTED:" in r["query"]["template"] for r in results) >= len(TEXTS) * 0.95
    shown = [run_ok("recall", chunk, "--no-model", codes=(0, 1)).both for chunk in CHUNKS]
    assert_only_allowed(answered.both, *shown)


def test_every_fake_through_record_and_import_into_a_postgresql_lab_store(pg_schema, tmp_path: Path):
    """The same texts into a PostgreSQL store (a lab's): every row of every table searched."""
    import psycopg

    url, schema = pg_schema
    config = tmp_path / "lab.toml"
    config.write_text(f'[stores.labs.vision]\nurl = "{url}"\nschema = "{schema}"\n')
    lab = ("--config", str(config))
    run_ok(*lab, "db", "upgrade", "--scope", "lab:vision")
    outputs = [run_ok(*lab, "record", "--scope", "lab:vision", "--error", chunk, "--cause", chunk, "--fix", chunk,
                      "--context", chunk, "--json").both for chunk in CHUNKS]
    template = json.loads(run_ok(*lab, "lessons", "export", "--scope", "lab:vision").stdout.splitlines()[0])
    lines = [json.dumps(dict(template, id=str(uuid.uuid4()), cause=chunk, fix=chunk, context=chunk, excerpt=chunk,
                             aliases=[{"template": chunk, "category": "python_exception", "excerpt": chunk}]))
             for chunk in CHUNKS]
    (tmp_path / "lessons.jsonl").write_text("\n".join(lines) + "\n")
    outputs.append(run_ok(*lab, "lessons", "import", str(tmp_path / "lessons.jsonl"), "--scope", "lab:vision",
                          "--json").both)
    with psycopg.connect(url) as conn:
        tables = [r[0] for r in conn.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                                             (schema,))]
        rows = "\n".join(r[0] for t in tables for r in conn.execute(f'SELECT t::text FROM "{schema}"."{t}" t'))
    assert {"lessons", "lesson_aliases", "signatures", "audit_log"} <= set(tables)
    assert rows.count("[REDACTED:") >= 4 * len(TEXTS)
    assert_only_allowed(*outputs, rows, exactly=True)
