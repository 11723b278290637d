"""Hostile text and values at the lesson gate, through the real CLI (issue 33, defects 5 and 15).

Defect 5: whatever a lesson stores is sanitised (whole escape sequences, C0/C1 controls, NUL,
zero-width characters), on SQLite and on PostgreSQL, where a NUL used to crash `record`; the
same raw text still recalls its lesson. Defect 15: a past --valid-until, out-of-format action
values and over-long text are refused; a lesson past its valid_until is never a match.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import sqlite3
from importlib import resources
from pathlib import Path

import pytest

from hpcmem.kb.lessons.write import MAX_TEXT
from tests.cli.helpers import run_hpcmem

# An error as a terminal log holds it: a window title (OSC 0), a hyperlink (OSC 8), colours,
# an 8-bit CSI, BEL, DEL, NUL and a zero-width space.
HOSTILE = ("\x1b]0;owned-title\x07\x1b]8;;http://evil.example/x\x07click\x1b]8;;\x07 \x1b[31mpython3: error while "
           "loading shared libraries: libcudart.so.11.0: cannot open shared object file: No such file or "
           "directory\x1b[0m\x00\x07\x7f\u200b\x9b2J\n")
VARIANT = "ImportError: libcudart.so.12: cannot open shared object file\x00\x1b]2;pwned\x07\x7f\n"
# What must never be stored: C0 controls but tab and newline, DEL, C1, zero-width and bidi marks.
FORBIDDEN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")
TEXT_COLUMNS = {
    "lessons": ("cause", "fix", "context", "excerpt", "status_reason"),
    "signatures": ("template",),
    "lesson_aliases": ("template", "excerpt"),
    "lesson_conditions": ("name", "value"),
    "lesson_evidence": ("note",),
    "audit_log": ("after",),
}


def ok(result):
    assert result.returncode == 0, result.stderr
    return result


def refused(result, message: str):
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert result.stderr.startswith(f"Error: {message}"), result.stderr
    assert "Traceback" not in result.stderr
    return result


@pytest.fixture(autouse=True)
def user_store():
    """Your own store exists (read commands never create one), empty."""
    ok(run_hpcmem("db", "upgrade"))


@pytest.fixture(params=["sqlite", "postgresql"])
def target(request, tmp_path: Path):
    """(extra CLI args, --scope, reader of stored texts): a lab store on each real backend."""
    config = tmp_path / "lab.toml"
    if request.param == "sqlite":
        path = tmp_path / "labs" / "vision" / "store.db"
        config.write_text(f'[stores.labs.vision]\nurl = "sqlite:///{path}"\n')

        def texts(table: str, columns: tuple[str, ...]) -> list[str]:
            with sqlite3.connect(path) as conn:
                return [v for row in conn.execute(f"SELECT {', '.join(columns)} FROM {table}") for v in row if v]
    else:
        import psycopg

        url, schema = request.getfixturevalue("pg_schema")
        config.write_text(f'[stores.labs.vision]\nurl = "{url}"\nschema = "{schema}"\n')

        def texts(table: str, columns: tuple[str, ...]) -> list[str]:
            cells = ", ".join(f"{c}::text" for c in columns)
            with psycopg.connect(url) as conn:
                return [v for row in conn.execute(f'SELECT {cells} FROM "{schema}".{table}') for v in row if v]
    args = ("--config", str(config))
    ok(run_hpcmem(*args, "db", "upgrade", "--scope", "lab:vision"))
    return args, "lab:vision", texts


def test_stored_lesson_text_is_sanitised_and_recall_of_the_raw_text_still_matches(target, tmp_path: Path):
    args, scope, texts = target
    error_file = tmp_path / "err.log"
    error_file.write_bytes(HOSTILE.encode())
    recorded = ok(run_hpcmem(
        *args, "record", "--error-file", str(error_file), "--scope", scope, "--json",
        "--cause", "CUDA 11 runtime\x1b[1m not\x07 loaded\u200b", "--fix", "module load cuda/11.8\x1b]0;x\x07",
        "--context", "training\x7f run\x1b[2K", "--partition", "gpu\x1b[0m", "--action", "module load cuda/11.8"))
    lesson = json.loads(recorded.stdout)
    assert (lesson["cause"], lesson["fix"], lesson["context"]) == (
        "CUDA 11 runtime not loaded", "module load cuda/11.8", "training run")
    assert {"kind": "partition", "name": "gpu", "value": None, "op": None} in lesson["conditions"]
    # a variant confirmed with the error on stdin becomes an alias, sanitised as well
    ok(run_hpcmem(*args, "feedback", lesson["lesson_id"], "--worked", "--error", "-", "--note", "ok\x07\x1b[5m!",
                  input=VARIANT))

    stored = {(table, c): texts(table, (c,)) for table, columns in TEXT_COLUMNS.items() for c in columns}
    assert stored[("lessons", "excerpt")] and stored[("lesson_aliases", "excerpt")]
    for (table, column), values in stored.items():
        for value in values:
            assert not FORBIDDEN.search(value), (table, column, value)
            # whole sequences go, not only their ESC byte: no title, no link target is left behind
            for residue in ("owned-title", "evil.example", "pwned", "[31m", "]8;;"):
                assert residue not in value, (table, column, value)
    assert "libcudart.so" in stored[("lessons", "excerpt")][0] and "click" in stored[("lessons", "excerpt")][0]

    for text in (HOSTILE, VARIANT):  # the same raw texts recall the lesson, exactly
        recalled = ok(run_hpcmem(*args, "recall", "-", "--json", "--no-model", input=text))
        top = json.loads(recalled.stdout)["matches"][0]
        assert (top["lesson_id"], top["band"], top["match_kind"]) == (lesson["lesson_id"], "match", "exact")


def test_a_valid_until_that_has_come_is_refused_and_a_later_one_kept():
    today = dt.datetime.now(dt.timezone.utc).date()
    for day in (today - dt.timedelta(days=400), today):
        refused(run_hpcmem("record", "--error", "Segmentation fault", "--cause", "c", "--fix", "f",
                           "--valid-until", day.isoformat()), f"--valid-until {day.isoformat()} has already passed")
    assert json.loads(ok(run_hpcmem("lessons", "list", "--json")).stdout) == []
    later = (today + dt.timedelta(days=2)).isoformat()
    kept = json.loads(ok(run_hpcmem("record", "--error", "Segmentation fault", "--cause", "c", "--fix", "f",
                                    "--valid-until", later, "--json")).stdout)
    assert kept["valid_until"].startswith(later)


def test_a_lesson_past_its_valid_until_is_never_a_match():
    from sqlalchemy import update

    from hpcmem.kb.store.database import Store
    from hpcmem.kb.store.models import Lesson

    error = "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=99172.0. Some of your processes may have been killed"
    tomorrow = (dt.datetime.now(dt.timezone.utc).date() + dt.timedelta(days=1)).isoformat()
    lesson = json.loads(ok(run_hpcmem("record", "--error", error, "--cause", "8G was too little", "--fix",
                                      "ask for 32G", "--valid-until", tomorrow, "--json")).stdout)
    assert json.loads(ok(run_hpcmem("recall", error, "--json", "--no-model")).stdout)["matches"][0]["band"] == "match"
    # the day comes: no revalidate has run yet
    store = Store(json.loads(ok(run_hpcmem("stores", "--json")).stdout)["stores"][0]["url"])
    with store.transaction() as session:
        session.execute(update(Lesson).where(Lesson.id == lesson["lesson_id"]).values(
            valid_until=dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=1)))
    store.dispose()

    hidden = run_hpcmem("recall", error, "--json", "--no-model")
    assert hidden.returncode == 1, hidden.stderr
    assert lesson["lesson_id"] not in hidden.stdout
    shown = run_hpcmem("recall", error, "--json", "--no-model", "--include-expired")
    assert shown.returncode == 1, shown.stderr  # listed, never applied
    [match] = [m for m in json.loads(shown.stdout)["matches"] if m["lesson_id"] == lesson["lesson_id"]]
    assert (match["status"], match["band"]) == ("expired", "related")
    # revalidate reaches the same verdict
    change = json.loads(ok(run_hpcmem("revalidate", "--dry-run", "--json")).stdout)["changes"]
    assert [(c["lesson_id"], c["after"]) for c in change] == [(lesson["lesson_id"], "expired")]
    assert change[0]["reasons"][0].startswith("valid until")


@pytest.mark.parametrize("action, message", [
    ("--mem=-5G", "'-5G' is not a valid --mem value"),
    ("--time 4:00:00->banana", "'banana' is not a valid --time value"),
    ("--mem banana->8G", "'banana' is not a valid --mem value"),
    ("-c 0", "'0' is not a valid --cpus-per-task value"),
    ('{"type": "sbatch", "option": "--mem-per-cpu", "to": "lots"}', "'lots' is not a valid --mem-per-cpu value"),
])
def test_action_values_out_of_slurm_format_are_refused(action: str, message: str):
    refused(run_hpcmem("record", "--error", "Segmentation fault", "--cause", "c", "--fix", "f", "--action", action),
            message)
    assert json.loads(ok(run_hpcmem("lessons", "list", "--json")).stdout) == []


def test_action_values_in_slurm_format_are_kept():
    actions = ["--mem=32g", "--mem 8G->32GB", "--time=UNLIMITED", "--time 4:00:00->1-00:00:00", "-c 8", "--mem=0"]
    lesson = json.loads(ok(run_hpcmem("record", "--error", "Segmentation fault", "--cause", "c", "--fix", "f",
                                      "--json", *(x for a in actions for x in ("--action", a)))).stdout)
    assert [a.get("to") for a in lesson["actions"]] == ["32g", "32GB", "UNLIMITED", "1-00:00:00", "8", "0"]
    refused(run_hpcmem("lessons", "edit", lesson["lesson_id"], "--action", "--time=-1"),
            "'-1' is not a valid --time value")


@pytest.mark.parametrize("field", ["--cause", "--fix", "--context"])
def test_text_over_the_limit_is_refused_not_cut(field: str):
    base = {"--cause": "c", "--fix": "f", "--context": "x"}
    long = "word " * (MAX_TEXT // 5) + "the-last-step"
    args = [x for k, v in (base | {field: long}).items() for x in (k, v)]
    refused(run_hpcmem("record", "--error", "Segmentation fault", *args),
            f"the {field[2:]} is {len(long):,} characters; a lesson keeps at most {MAX_TEXT:,}")
    assert json.loads(ok(run_hpcmem("lessons", "list", "--json")).stdout) == []
    # at the limit (escape sequences do not count: they are not stored) the text is kept whole
    whole = "y" * MAX_TEXT
    lesson = json.loads(ok(run_hpcmem("record", "--error", "Segmentation fault", "--json",
                                      *[x for k, v in (base | {field: "\x1b[1m" + whole + "\x1b[0m"}).items()
                                        for x in (k, v)])).stdout)
    assert lesson[field[2:]] == whole
    # edit refuses the same, and leaves the lesson as it was
    refused(run_hpcmem("lessons", "edit", lesson["lesson_id"], field, long), f"the {field[2:]} is")
    assert json.loads(ok(run_hpcmem("lessons", "show", lesson["lesson_id"], "--json")).stdout)[field[2:]] == whole


def test_import_keeps_the_same_limits(tmp_path: Path):
    schema = json.loads(resources.files("hpcmem.schemas").joinpath("lesson.schema.json").read_text())
    assert {f: schema["properties"][f]["maxLength"] for f in ("cause", "fix", "context")} == dict.fromkeys(
        ("cause", "fix", "context"), MAX_TEXT)
    ok(run_hpcmem("record", "--error", "Segmentation fault", "--cause", "c", "--fix", "f"))
    line = json.loads(ok(run_hpcmem("lessons", "export")).stdout.splitlines()[0])
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps(line | {"id": "9b4e28ba-2fa1-11d2-883f-0016d3cca427", "fix": "z" * (MAX_TEXT + 1)})
                    + "\n")
    failed = run_hpcmem("lessons", "import", str(path), "--scope", "user")
    assert failed.returncode == 2 and "Traceback" not in failed.stderr, failed.stderr
    assert failed.stderr.startswith(f"Error: {path}") and ": fix: " in failed.stderr, failed.stderr
    assert len(json.loads(ok(run_hpcmem("lessons", "list", "--json")).stdout)) == 1
