"""`hpcmem db scrub` (issue 32, build item 3): a store an older hpcmem wrote - secrets its
rules let in, in every table that keeps text, the append-only audit log included - is
re-redacted with today's rules, on SQLite (the file's raw bytes searched afterwards) and
on PostgreSQL; a second run changes nothing; --dry-run only counts.

The "older store" is made the only way an older release could have made it: today's
hpcmem writes a store, then plain SQL puts into it what the older gate or recorder kept
(the secret in clear, or with the codes that hid it). Fakes: tests/kb/safety/fakes.py."""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
import sys
from pathlib import Path

import pytest

from hpcmem.kb.safety.lint import sanitize_text
from tests.cli.helpers import run_hpcmem
from tests.kb.safety.fakes import leaked, tricks

TRICKS = tricks(offset=3)
RAW = [text for _name, text, _secret in TRICKS]  # as an older recorder kept them: codes and all
CLEAR = [sanitize_text(text, sys.maxsize) for text in RAW]  # as an older lesson gate (its rules missed them) kept them
TABLES = ("lessons", "lesson_aliases", "lesson_conditions", "lesson_evidence", "signatures", "occurrences",
          "job_records", "audit_log")
SACCT = ("JobID|JobName|User|State|ExitCode|Elapsed|ReqMem|MaxRSS|Submit|Start|End|WorkDir|SubmitLine\n"
         "900|train|bob|FAILED|1:0|00:10:00|8G||2026-11-24T08:00:00|2026-11-24T08:00:01|2026-11-24T08:10:00|"
         "/home/bob/run|sbatch --mem=8G train.sh\n")


def ok(result):
    assert result.returncode == 0, result.stderr
    return result


def secrets_in(*blobs: str | bytes) -> dict[str, list[str]]:
    found = {name: leaked(secret, *blobs)[:1] for name, _text, secret in TRICKS}
    return {name: piece for name, piece in found.items() if piece}


class Lab:
    """A lab store on one backend, read and written with the database's own driver."""

    def __init__(self, backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
        self.backend = backend
        config = tmp_path / "lab.toml"
        if backend == "sqlite":
            self.path = tmp_path / "labs" / "vision" / "store.db"
            config.write_text(f'[stores.labs.vision]\nurl = "sqlite:///{self.path}"\n')
        else:
            self.url, self.schema = request.getfixturevalue("pg_schema")
            config.write_text(f'[stores.labs.vision]\nurl = "{self.url}"\nschema = "{self.schema}"\n')
        self.args = ("--config", str(config))

    def hpcmem(self, *args: str, **kw):
        return run_hpcmem(*self.args, *args, **kw)

    def connect(self):
        if self.backend == "sqlite":
            return sqlite3.connect(self.path)
        import psycopg

        conn = psycopg.connect(self.url)
        conn.execute(f'SET search_path TO "{self.schema}"')
        return conn

    def execute(self, sql: str, *params) -> None:
        """``sql`` with ``?`` marks; a JSON value is given as ("json", value)."""
        values = []
        for p in params:
            if isinstance(p, tuple) and p[0] == "json":
                if self.backend == "sqlite":
                    values.append(json.dumps(p[1]))
                else:
                    from psycopg.types.json import Jsonb

                    values.append(Jsonb(p[1]))
            else:
                values.append(p)
        with self.connect() as conn:
            conn.execute(sql if self.backend == "sqlite" else sql.replace("?", "%s"), values)

    def dump(self) -> str:
        """Every row of every table, as text."""
        with self.connect() as conn:
            if self.backend == "sqlite":
                return "\n".join(repr(r) for t in TABLES for r in conn.execute(f"SELECT * FROM {t}"))
            return "\n".join(r[0] for t in TABLES for r in conn.execute(f"SELECT t::text FROM {t} t"))

    def raw_bytes(self) -> bytes:
        if self.backend != "sqlite":
            return b""
        return b"".join(p.read_bytes() for p in sorted(self.path.parent.iterdir()) if p.is_file())

    def scrub(self, *extra: str) -> dict:
        done = ok(self.hpcmem("db", "scrub", "--scope", "lab:vision", "--json", *extra))
        assert not secrets_in(done.stdout, done.stderr)  # counts, never values
        return json.loads(done.stdout)


@pytest.fixture(params=["sqlite", "postgresql"])
def older_lab(request, tmp_path: Path) -> Lab:
    """A lab store holding what an older rule set let in, in every table scrub cleans."""
    lab = Lab(request.param, tmp_path, request)
    ok(lab.hpcmem("db", "upgrade", "--scope", "lab:vision"))
    lesson = json.loads(ok(lab.hpcmem(
        "record", "--scope", "lab:vision", "--error", "RuntimeError: login failed", "--cause", "expired login",
        "--fix", "log in again", "--partition", "gpu", "--action", "export WANDB_MODE=offline", "--json")).stdout)
    dump = tmp_path / "sacct.psv"
    dump.write_text(SACCT)
    ok(lab.hpcmem("ingest", "sacct", str(dump), "--scope", "lab:vision", "--tz", "UTC", "--no-learn"))
    lid = lesson["lesson_id"]
    lab.execute("UPDATE lessons SET cause = ?, fix = ?, context = ?, excerpt = ?, status_reason = ?, actions = ? "
                "WHERE id = ?", CLEAR[0], "\n".join(CLEAR), CLEAR[1], f"RuntimeError: {CLEAR[2]}", CLEAR[3],
                ("json", [{"type": "env", "op": "set", "name": "WANDB_MODE", "value": CLEAR[4]}]), lid)
    lab.execute("UPDATE lesson_conditions SET value = ? WHERE kind = 'partition'", CLEAR[5])
    now = dt.datetime(2026, 11, 1, 12, 0) if lab.backend != "sqlite" else "2026-11-01 12:00:00.000000"
    lab.execute("INSERT INTO lesson_aliases (lesson_id, fingerprint, template, category, excerpt, source, actor, "
                "created_at) VALUES (?, 'feedface00000001', ?, 'python_exception', ?, 'feedback', 'ann', ?)",
                lid, f"ValueError: {CLEAR[6]}", f"ValueError: {RAW[6]}", now)
    lab.execute("INSERT INTO lesson_evidence (lesson_id, kind, job_id, actor, note, created_at) "
                "VALUES (?, 'worked', '12', 'ann', ?, ?)", lid, CLEAR[7], now)
    lab.execute("UPDATE signatures SET template = ?", f"RuntimeError: {RAW[0]}")
    lab.execute("UPDATE occurrences SET message = ?, log_excerpt = ?, submit_line = ?, job_name = ?, work_dir = ?, "
                "log_path = ?", f"RuntimeError: {RAW[1]}", f"RuntimeError: {RAW[2]}", f"sbatch --export={RAW[3]} x",
                f"train {RAW[4]}"[:250], f"/home/bob/{RAW[5]}", f"/home/bob/logs/{RAW[6]}")
    lab.execute("UPDATE job_records SET submit_line = ?, job_name = ?, work_dir = ?", f"sbatch --export={RAW[7]} x",
                f"train {RAW[0]}"[:250], f"/home/bob/{RAW[1]}")
    lab.execute("INSERT INTO audit_log (at, actor, action, object_type, object_id, before, after, reason) "
                "VALUES (?, 'ann', 'edit', 'lesson', ?, ?, ?, ?)", now, lid, ("json", {"fix": "\n".join(CLEAR)}),
                ("json", {"fix": "\n".join(RAW), "actions": [{"type": "command", "run": RAW[2]}]}),
                f"rotated {RAW[3]}")
    assert len(secrets_in(lab.dump())) == len(TRICKS)  # every secret is in the older store
    if lab.backend == "sqlite":
        assert len(secrets_in(lab.raw_bytes())) == len(TRICKS)  # ... and in its file
    return lab


def test_scrub_removes_what_an_older_rule_set_let_in_and_a_second_run_changes_nothing(older_lab: Lab):
    lab = older_lab
    dry = lab.scrub("--dry-run")
    assert dry["dry_run"] and not dry["audit_entry"]
    assert len(secrets_in(lab.dump())) == len(TRICKS)  # a dry run changes nothing

    done = lab.scrub()
    tables = done["tables"]
    assert {t: c["changed"] for t, c in tables.items()} == {t: c["changed"] for t, c in dry["tables"].items()}
    assert all(tables[t]["changed"] >= 1 for t in TABLES), tables
    assert (tables["lessons"]["changed"], tables["audit_log"]["changed"], tables["occurrences"]["changed"],
            tables["job_records"]["changed"]) == (1, 1, 1, 1)
    assert tables["lessons"]["secrets"] >= len(TRICKS) + 4 and done["audit_entry"]
    assert secrets_in(lab.dump(), lab.raw_bytes()) == {}

    again = lab.scrub()
    assert (again["changed"], again["secrets"], again["audit_entry"]) == (0, 0, False)

    # One audit entry for the scrub, counts only; audit_log is append-only again.
    with lab.connect() as conn:
        entries = conn.execute("SELECT action, object_type, object_id FROM audit_log WHERE action = 'scrub'").fetchall()
    assert [tuple(e) for e in entries] == [("scrub", "store", "vision")]
    with pytest.raises(Exception, match="append-only"):
        lab.execute("UPDATE audit_log SET reason = 'rewritten'")
    with pytest.raises(Exception, match="append-only"):
        lab.execute("DELETE FROM audit_log")


def test_scrubbed_lessons_are_still_recalled_and_shown_without_the_secret(older_lab: Lab):
    lab = older_lab
    lab.scrub()
    found = ok(lab.hpcmem("recall", "RuntimeError: login failed", "--json", "--no-model"))
    match = json.loads(found.stdout)["matches"][0]
    assert match["band"] == "match" and "[REDACTED:" in match["fix"]
    shown = ok(lab.hpcmem("lessons", "show", match["lesson_id"], "--json"))
    assert secrets_in(found.stdout, shown.stdout) == {}


def test_scrub_of_a_store_that_does_not_exist_creates_nothing(tmp_path: Path):
    missing = tmp_path / "nowhere" / "store.db"
    config = tmp_path / "lab.toml"
    config.write_text(f'[stores.labs.ghost]\nurl = "sqlite:///{missing}"\n')
    done = run_hpcmem("--config", str(config), "db", "scrub", "--scope", "lab:ghost")
    assert done.returncode == 2 and done.stderr.startswith(f"Error: store 'ghost' does not exist at {missing}"), \
        done.stderr
    assert not missing.exists() and not missing.parent.exists()
